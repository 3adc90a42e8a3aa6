//! Helpers of the chart tests (`tests/chart/`, `tests/chart_upgrade.rs`): the chart's and the
//! fixtures' paths, `helm` off the async runtime, the chart's components run as local
//! processes with exactly the rendered arguments and the chart's identities, and what their
//! `/metrics` export.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use testenv::{ControlPlane, eventually, helm};

use crate::fleet::Error;

/// `charts/ocm-placement` of this repository.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/ocm-placement")
}

/// `tests/e2e/fixtures/<name>`: e.g. the chart as an earlier commit had it.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// `helm template r <chart> --namespace <ns> <extra…>`, parsed.
pub fn render(chart: &Path, namespace: &str, extra: &[&str]) -> Result<Vec<Value>, Error> {
    let chart = chart.display().to_string();
    let mut args = vec!["template", "r", chart.as_str(), "--namespace", namespace];
    args.extend_from_slice(extra);
    let out = helm::helm(&args, None)?;
    Ok(serde_saphyr::from_multiple::<Value>(&helm::stdout(&out))?
        .into_iter()
        .filter(|d| !d.is_null())
        .collect())
}

/// helm blocks: run it off the runtime, against `kubeconfig`.
pub async fn helm_on(
    args: Vec<String>,
    kubeconfig: PathBuf,
) -> Result<std::process::Output, Error> {
    let out = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        helm::helm(&a, Some(&kubeconfig))
    })
    .await??;
    Ok(out)
}

/// The release name and namespace the chart README's commands use, as printed.
pub const README_RELEASE: &str = "ocm-placement";
pub const README_NAMESPACE: &str = "open-cluster-management-placement";

/// The first ```` ```sh ```` block after the first line of the chart's README that starts with
/// `after` (a heading, say `## Upgrade`): a command the README prints, for a test to run as
/// printed.
pub fn readme_block(after: &str) -> Result<String, Error> {
    let path = chart_dir().join("README.md");
    let text = std::fs::read_to_string(&path)?;
    let mut lines = text.lines().skip_while(|l| !l.starts_with(after));
    if lines.next().is_none() {
        return Err(format!("{}: no line starting with {after:?}", path.display()).into());
    }
    let mut lines = lines.skip_while(|l| l.trim() != "```sh");
    if lines.next().is_none() {
        return Err(format!("{}: no ```sh block after {after:?}", path.display()).into());
    }
    let mut block = Vec::new();
    for l in lines {
        if l.trim() == "```" {
            return Ok(block.join("\n") + "\n");
        }
        block.push(l.trim_start());
    }
    Err(format!(
        "{}: the ```sh block after {after:?} never ends",
        path.display()
    )
    .into())
}

/// Runs `script` (a block of the README) with `sh -e` from the repository root, as a user
/// pastes it: the pinned helm first on PATH, under the name `helm`, against `kubeconfig`, with
/// helm's homes in a directory of its own (no inherited `HELM_*`), as `testenv::helm` runs it.
/// Its output, whatever its status.
pub async fn run_as_printed(
    script: String,
    kubeconfig: PathBuf,
) -> Result<std::process::Output, Error> {
    let repo = chart_dir().join("../..");
    let helm = testenv::helm::binary()?;
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tokio::task::spawn_blocking(move || -> Result<std::process::Output, Error> {
        let home = std::env::temp_dir().join(format!("chart-readme-{}-{run}", std::process::id()));
        let bin = home.join("bin");
        std::fs::create_dir_all(&bin)?;
        std::os::unix::fs::symlink(&helm, bin.join("helm"))?;
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path =
            std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))?;
        let mut cmd = Command::new("sh");
        cmd.args(["-e", "-c", &script]).current_dir(&repo);
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| k.starts_with("HELM_")) {
                cmd.env_remove(key);
            }
        }
        for sub in ["cache", "config", "data", "home"] {
            std::fs::create_dir_all(home.join(sub))?;
        }
        let out = cmd
            .env("PATH", path)
            .env("KUBECONFIG", &kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("HOME", home.join("home"))
            .output()?;
        let _ = std::fs::remove_dir_all(&home);
        Ok(out)
    })
    .await?
}

/// `promtool`, kept beside the cached `prometheus` by `tests/prometheus/build.sh`.
pub fn promtool() -> Result<PathBuf, Error> {
    let prometheus = testenv::prometheus::binary()?;
    let promtool = prometheus.with_file_name("promtool");
    if promtool.is_file() {
        Ok(promtool)
    } else {
        Err(format!(
            "no promtool beside {}: run tests/prometheus/build.sh (it keeps promtool from the same Debian package)",
            prometheus.display()
        )
        .into())
    }
}

/// The chart's components running as local processes; killed when dropped.
pub struct Components {
    children: Vec<Child>,
    /// Each component's subcommand (`controller`, `manager`, `scorer`) and metrics port.
    pub ports: Vec<(String, u16)>,
}

impl Drop for Components {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A free port on the loopback (picked as every test's, below the ephemeral range).
pub fn free_port() -> Result<u16, Error> {
    Ok(testenv::ports::free()?)
}

/// Runs each Deployment of `docs` (what `helm template` rendered for the release in `ns`) from
/// the binaries in `bins`, with the container's arguments, as its service account (so under the
/// RBAC the chart installed); the metrics address moves to a free loopback port. Returns once
/// each answers its probe: `/readyz`, or `/healthz` for the scorer (its queries fail without a
/// Prometheus: alive, not ready).
pub async fn run_as_the_chart(
    cp: &ControlPlane,
    docs: &[Value],
    ns: &str,
    bins: &Path,
) -> Result<Components, Error> {
    let mut running = Components {
        children: Vec::new(),
        ports: Vec::new(),
    };
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let spec = &d["spec"]["template"]["spec"];
        let sa = spec["serviceAccountName"]
            .as_str()
            .ok_or("a Deployment without serviceAccountName")?;
        let image = spec["containers"][0]["image"]
            .as_str()
            .ok_or("a Deployment without an image")?;
        // <registry>/<binary>:<tag> or <registry>/<binary>@<digest>
        let binary = image
            .rsplit('/')
            .next()
            .and_then(|i| i.split([':', '@']).next())
            .ok_or_else(|| format!("no binary name in {image}"))?;
        let port = free_port()?;
        let args: Vec<String> = spec["containers"][0]["args"]
            .as_array()
            .ok_or("a Deployment without args")?
            .iter()
            .filter_map(|a| a.as_str())
            .map(|a| {
                if a.starts_with("--metrics-bind-address=") {
                    format!("--metrics-bind-address=127.0.0.1:{port}")
                } else {
                    a.to_owned()
                }
            })
            .collect();
        let kc = std::env::temp_dir().join(format!("chart-run-{}-{ns}-{sa}", std::process::id()));
        std::fs::write(&kc, cp.kubeconfig_as_service_account(ns, sa))?;
        let child = Command::new(bins.join(binary))
            .args(&args)
            .arg(format!("--kubeconfig={}", kc.display()))
            .env("POD_NAMESPACE", ns)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{binary}: {e}"))?;
        running.children.push(child);
        running
            .ports
            .push((args.first().cloned().unwrap_or_default(), port));
    }
    for (command, port) in &running.ports {
        let path = if command == "scorer" {
            "/healthz"
        } else {
            "/readyz"
        };
        eventually(
            &format!("{command} on {port} answers {path}"),
            Duration::from_secs(60),
            || async {
                let (code, _) = testenv::http::get(([127, 0, 0, 1], *port).into(), path)
                    .await
                    .ok()?;
                (code == 200).then_some(())
            },
        )
        .await;
    }
    Ok(running)
}

/// The sample names a `/metrics` page can carry, from its `# TYPE` lines, so that families
/// without samples yet count too: a counter `x` is `x_total`, a histogram `x` is `x_bucket`,
/// `x_sum` and `x_count`, and so on.
pub fn exported_names(page: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in page.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#") || words.next() != Some("TYPE") {
            continue;
        }
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count", "_created"],
            "summary" => &["", "_sum", "_count", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// The metric names a PromQL expression reads: what is left once strings, label matchers,
/// ranges, grouping clauses, function calls, keywords and numbers are taken out.
pub fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    // Drop quoted strings, then `{…}` and `[…]`.
    let mut plain = String::new();
    let mut quote = None;
    let mut depth = 0usize;
    for c in expr.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth = depth.saturating_sub(1),
            (None, c) if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    const KEYWORDS: [&str; 7] = [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "group_left",
        "group_right",
    ];
    // Aggregations may put their grouping before the parenthesis: `sum by (x) (…)`.
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    let chars: Vec<char> = plain.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let call = j < chars.len() && chars[j] == '(';
            if GROUPING.contains(&word.as_str()) && call {
                // Skip the label list.
                while j < chars.len() && chars[j] != ')' {
                    j += 1;
                }
                i = j + 1;
                continue;
            }
            // A Grafana variable (`$__rate_interval`) is no metric either.
            let variable = start > 0 && chars[start - 1] == '$';
            let reserved =
                KEYWORDS.contains(&word.as_str()) || AGGREGATIONS.contains(&word.as_str());
            if !(call || reserved || variable) {
                names.insert(word);
            }
        } else if c.is_ascii_digit() || c == '.' {
            // A number (1e-3 too), never a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_metric_names_of_an_expression() {
        let e = r#"sum by (le, verb) (rate(a_total{x="y", z=~"b|c"}[5m])) / on (pod) group_left b
            or histogram_quantile(0.99, rate(h_bucket[$__rate_interval])) > 1e-3 and time() - c offset 5m
            or max without (x) (d)"#;
        assert_eq!(
            promql_metric_names(e).into_iter().collect::<Vec<_>>(),
            ["a_total", "b", "c", "d", "h_bucket"]
        );
    }

    #[test]
    fn names_the_samples_of_each_family() {
        let page =
            "# HELP a A.\n# TYPE a counter\na_total 1\n# TYPE h histogram\n# TYPE g gauge\n# EOF\n";
        let names = exported_names(page);
        for n in ["a_total", "h_bucket", "h_sum", "h_count", "g"] {
            assert!(names.contains(n), "{n} in {names:?}");
        }
        assert!(!names.contains("a"));
    }
}
