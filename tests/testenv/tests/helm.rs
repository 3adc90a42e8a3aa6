//! The helm harness itself: the cached binary is the pinned version, renders a chart with a
//! value from `--set`, runs in its own homes, and reports failures with helm's own words.

use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use testenv::Error;
use testenv::helm::{helm, helm_output, stderr, stdout, version};

/// A chart directory under the temp dir, removed on drop (also when the test panics).
struct ChartDir(PathBuf);

impl Drop for ChartDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The smallest chart with a template: one ConfigMap whose `greeting` comes from the values.
fn write_chart(dir: &Path) {
    let files = [
        (
            "Chart.yaml",
            "apiVersion: v2\nname: tiny\nversion: 0.1.0\ntype: application\n",
        ),
        ("values.yaml", "greeting: hello\n"),
        (
            "templates/configmap.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n  \
             namespace: {{ .Release.Namespace }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create the chart's folders");
        }
        std::fs::write(&path, text).expect("write a chart file");
    }
}

#[test]
fn pinned_helm_renders_a_chart_with_set_values() {
    let start = Instant::now();
    let pinned = version().expect("HELM_VERSION is pinned");

    let out = helm(&["version", "--short"], None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stdout(&out).trim(), pinned, "stderr: {}", stderr(&out));

    // helm's state lives in this process's home, not the user's.
    let env = stdout(&helm(&["env"], None).unwrap_or_else(|e| panic!("{e}")));
    let tmp = std::env::temp_dir().join("ocm-testenv-helm");
    for key in ["HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"] {
        let line = env
            .lines()
            .find(|l| l.starts_with(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in helm env:\n{env}"));
        assert!(line.contains(&*tmp.to_string_lossy()), "{line}");
    }

    let chart =
        ChartDir(std::env::temp_dir().join(format!("ocm-helm-chart-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&chart.0);
    write_chart(&chart.0);
    let chart_path = chart.0.to_string_lossy().into_owned();
    let out = helm(
        &[
            "template",
            "demo",
            &chart_path,
            "--namespace",
            "hub",
            "--set",
            "greeting=from-set",
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let rendered = stdout(&out);
    let cm: ConfigMap = serde_saphyr::from_str(&rendered)
        .unwrap_or_else(|e| panic!("not one ConfigMap ({e}):\n{rendered}"));
    assert_eq!(cm.metadata.name.as_deref(), Some("demo-settings"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some("hub"));
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get("greeting"))
            .map(String::as_str),
        Some("from-set"),
        "{rendered}"
    );

    // A failure comes back with helm's status and message, both ways.
    let missing = chart.0.join("no-such-chart").to_string_lossy().into_owned();
    let args = ["template", "demo", missing.as_str()];
    let raw = helm_output(&args, None).expect("helm runs");
    assert!(!raw.status.success());
    let err = match helm(&args, None) {
        Err(e) => e,
        Ok(out) => panic!(
            "helm template of a missing chart succeeded: {}",
            stdout(&out)
        ),
    };
    // The message alone says what failed and why.
    let message = err.to_string();
    assert!(
        message.contains("no-such-chart") && message.contains("exit status"),
        "{message}"
    );
    match err {
        Error::CommandFailed { command, output } => {
            assert!(command.starts_with("helm template demo "), "{command}");
            assert_eq!(output.status.code(), raw.status.code());
            assert!(
                stderr(&output).contains("no-such-chart"),
                "{}",
                stderr(&output)
            );
        }
        other => panic!("expected CommandFailed, got {other:?}"),
    }
    eprintln!(
        "helm {pinned}: all checks in {:?}\n{message}",
        start.elapsed()
    );
}
