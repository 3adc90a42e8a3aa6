//! `docs/flags.md`: every flag and environment variable of every binary, generated from the
//! binaries' own `--help`, so the reference cannot disagree with them. `cargo run -p e2e --bin
//! flags-reference` rewrites it; `tests/flags_reference.rs` fails when it is out of date.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A command whose `--help` the reference shows: (package, binary, subcommand, what it is).
pub const COMMANDS: &[(&str, &str, Option<&str>, &str)] = &[
    (
        "placement-scheduler",
        "placement-scheduler",
        Some("controller"),
        "the scheduler on a hub (also what OCM's operator runs as `/placement controller` in swap mode)",
    ),
    (
        "placement-scheduler",
        "placement-scheduler",
        Some("simulate"),
        "schedule Placements from files, no cluster",
    ),
    (
        "placement-scheduler",
        "placement-scheduler",
        Some("explain"),
        "explain a live Placement (also `kubectl placement explain`)",
    ),
    (
        "resource-usage-hub",
        "resource-usage-hub",
        Some("manager"),
        "the add-on manager on the hub",
    ),
    (
        "resource-usage-hub",
        "resource-usage-hub",
        Some("scorer"),
        "the hub scorer: scores from Prometheus or Thanos",
    ),
    (
        "resource-usage-agent",
        "resource-usage-agent",
        Some("run"),
        "the agent on a managed cluster",
    ),
    (
        "resource-usage-agent",
        "resource-usage-agent",
        Some("print"),
        "this machine's or cluster's scores as JSON, no hub",
    ),
    ("e2e", "fleet", None, "the local fleet"),
    (
        "e2e",
        "crdgen",
        None,
        "print this project's CRDs (the chart's `files/crds.yaml`)",
    ),
];

/// One option or argument of a `--help`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flag {
    /// `--name <VALUE>`, `-o, --output <OUTPUT>` or `[PATHS]...`.
    pub usage: String,
    pub env: Option<String>,
    pub default: Option<String>,
    pub help: String,
}

/// The options of one clap `--help` text (long or short form), in their order.
pub fn parse_help(text: &str) -> Vec<Flag> {
    let mut flags: Vec<Flag> = Vec::new();
    let mut in_section = false;
    for line in text.lines() {
        // `Options:`, `Arguments:` and clap's `help_heading` sections (`Some heading:`).
        if !line.starts_with(' ') && line.ends_with(':') && !line.starts_with("Usage") {
            in_section = true;
            continue;
        }
        if !in_section {
            continue;
        }
        if !line.is_empty() && !line.starts_with(' ') {
            in_section = false; // another section (a footer)
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        let starts_flag = (2..=6).contains(&indent)
            && (trimmed.starts_with('-') || trimmed.starts_with('[') || trimmed.starts_with('<'));
        if starts_flag {
            // The short form puts the help on the same line, after two or more spaces.
            let (usage, rest) = match trimmed.split_once("  ") {
                Some((u, r)) => (u.trim().to_owned(), r.trim().to_owned()),
                None => (trimmed.to_owned(), String::new()),
            };
            let mut flag = Flag {
                usage,
                ..Flag::default()
            };
            absorb(&mut flag, &rest);
            flags.push(flag);
        } else if let Some(flag) = flags.last_mut() {
            absorb(flag, trimmed);
        }
    }
    flags
}

/// Adds a line of help text to `flag`, taking `[env: X=]` and `[default: Y]` out of it.
fn absorb(flag: &mut Flag, text: &str) {
    let mut text = text.to_owned();
    for (key, slot) in [("env", &mut flag.env), ("default", &mut flag.default)] {
        let open = format!("[{key}: ");
        if let Some(at) = text.find(&open)
            && let Some(len) = text[at..].find(']')
        {
            let value = text[at + open.len()..at + len]
                .trim_end_matches('=')
                .to_owned();
            *slot = Some(value);
            text.replace_range(at..at + len + 1, "");
        }
    }
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let text = text
        .strip_prefix("- ")
        .map_or(text.to_owned(), |t| format!("`{t}"));
    let text = match text.split_once(':') {
        Some((value, rest)) if text.starts_with('`') && !value.contains(' ') => {
            format!("{value}`:{rest}")
        }
        _ => text,
    };
    if !flag.help.is_empty() {
        flag.help.push(' ');
    }
    flag.help
        .push_str(&text.split_whitespace().collect::<Vec<_>>().join(" "));
}

/// The Markdown page, from each command's `--help` text (in [`COMMANDS`] order).
pub fn render(helps: &[String]) -> String {
    let mut out = String::from(
        "# Flags and environment variables\n\n\
         Every flag of every binary, with the environment variable that sets it when the flag is\n\
         not given, and its default. Generated from the binaries' own `--help` by\n\
         `cargo run -p e2e --bin flags-reference` (a test fails when this page is out of date).\n\n\
         Durations take `15s`, `1m30s`, `500ms`, ISO 8601 (`PT15S`) or a bare number of seconds.\n\
         What the limits do when they trip: [operate.md](operate.md#limits-and-failure-behaviour).\n",
    );
    for ((_, bin, sub, what), help) in COMMANDS.iter().zip(helps) {
        let name = match sub {
            Some(s) => format!("{bin} {s}"),
            None => (*bin).to_owned(),
        };
        out.push_str(&format!("\n## {name}\n\n{}.\n\n", capitalise(what)));
        out.push_str("| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n");
        let shown = parse_help(help)
            .into_iter()
            .filter(|f| f.usage != "-h, --help" && f.usage != "-V, --version");
        for f in shown {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                f.usage,
                f.env.map_or(String::new(), |e| format!("`{e}`")),
                f.default.map_or(String::new(), |d| format!("`{d}`")),
                f.help.replace('|', "\\|"),
            ));
        }
    }
    out
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The `--help` text of each of [`COMMANDS`], from the binaries in `bin_dir` (built first by
/// the caller).
pub fn helps(bin_dir: &Path) -> Result<Vec<String>, String> {
    COMMANDS
        .iter()
        .map(|(_, bin, sub, _)| {
            let mut cmd = Command::new(bin_dir.join(bin));
            cmd.args(sub.iter()).arg("--help");
            // Environment variables would show as `[env: X=value]`: the page must not depend on
            // the caller's environment.
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default());
            let out = cmd
                .output()
                .map_err(|e| format!("run {} --help: {e}", bin_dir.join(bin).display()))?;
            if !out.status.success() {
                return Err(format!("{bin} {sub:?} --help exited with {}", out.status));
            }
            String::from_utf8(out.stdout).map_err(|e| format!("{bin} --help: not UTF-8: {e}"))
        })
        .collect()
}

/// Builds the binaries of [`COMMANDS`] with cargo into `target/debug` and returns that folder.
pub fn build_binaries() -> Result<PathBuf, String> {
    let root = repo_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    crate::fleet::clean_cargo_env(&mut cmd);
    cmd.current_dir(&root).args(["build", "--quiet"]);
    let mut packages: Vec<&str> = COMMANDS.iter().map(|c| c.0).collect();
    packages.dedup();
    for p in packages {
        cmd.args(["-p", p]);
    }
    cmd.arg("--bins");
    let status = cmd.status().map_err(|e| format!("run cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of the binaries failed: {status}"));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("debug"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_short_help_forms_are_read() {
        let long = "About\n\nUsage: x [OPTIONS] [PATHS]...\n\nArguments:\n  [PATHS]...\n          Files\n\nOptions:\n  -o, --output <OUTPUT>\n          Possible values:\n          - text: A report\n          - json: JSON\n          \n          [default: text]\n\n      --now <NOW>\n          The time\n          \n          [env: SIMULATE_NOW=]\n\n  -h, --help\n          Print help\n";
        let flags = parse_help(long);
        assert_eq!(flags.len(), 4, "{flags:?}");
        assert_eq!(flags[0].usage, "[PATHS]...");
        assert_eq!(flags[1].usage, "-o, --output <OUTPUT>");
        assert_eq!(flags[1].default.as_deref(), Some("text"));
        assert_eq!(
            flags[1].help,
            "Possible values: `text`: A report `json`: JSON"
        );
        assert_eq!(flags[2].env.as_deref(), Some("SIMULATE_NOW"));
        let short = "About\n\nUsage: fleet [OPTIONS]\n\nOptions:\n      --every <EVERY>    Seconds between [default: 20]\n      --thanos           The mode [env: FLEET_THANOS=]\n  -h, --help             Print help\n";
        let flags = parse_help(short);
        assert_eq!(flags.len(), 3);
        assert_eq!(flags[0].default.as_deref(), Some("20"));
        assert_eq!(flags[0].help, "Seconds between");
        assert_eq!(flags[1].env.as_deref(), Some("FLEET_THANOS"));
    }
}
