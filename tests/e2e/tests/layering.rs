//! The crate graph's rules, checked on the workspace as it is (one place for all of them):
//!
//! - the scheduling core and its CEL environment do no IO: their normal dependency trees hold
//!   no Kubernetes client, no async runtime and no HTTP stack, and their sources read no clock
//!   (the caller passes `now` and a deadline);
//! - the OCM types crate stays types: no command-line parser in its tree (`crdgen` is a tool
//!   binary of `tests/e2e`);
//! - the score-provider framework knows none of its providers: its tree holds no provider
//!   crate and nothing only a provider needs (the host probe);
//! - the hub (add-on manager and hub scorer) and the agent stay apart: the hub's tree holds
//!   neither the agent nor the agent's host probe (the score formula both use is in
//!   `ocm-api`, the agent's manifests are the manager's), and the agent's holds no hub;
//! - the binaries that ship do not carry the figures' plotting library (`tools/plots`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates that would let the core talk to the API server, spawn tasks or open connections.
const NO_IO: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "tokio",
    "hyper",
    "reqwest",
];

/// Each package, what its normal dependency tree must not hold, and the rule's name.
const RULES: &[(&str, &[&str], &str)] = &[
    ("placement-core", NO_IO, "stay sans-IO"),
    ("ocm-cel", NO_IO, "stay sans-IO"),
    ("ocm-api", &["clap"], "stay a types crate"),
    (
        "score-provider",
        &["resource-usage-agent", "resource-usage-hub", "sysinfo"],
        "know none of its providers",
    ),
    (
        "resource-usage-hub",
        &["resource-usage-agent", "sysinfo"],
        "stay apart from the agent (neither its crate nor its host probe)",
    ),
    (
        "resource-usage-agent",
        &["resource-usage-hub"],
        "stay apart from the hub",
    ),
    (
        "placement-scheduler",
        NO_PLOTS,
        "ship without the plotting tool",
    ),
    (
        "resource-usage-agent",
        NO_PLOTS,
        "ship without the plotting tool",
    ),
    (
        "resource-usage-hub",
        NO_PLOTS,
        "ship without the plotting tool",
    ),
];

/// What only `tools/plots` (the docs' figures) needs.
const NO_PLOTS: &[&str] = &["plots", "plotters", "plotters-svg", "plotters-backend"];

/// Clock reads; the core takes time as input instead.
const CLOCK_READS: &[&str] = &["Timestamp::now", "SystemTime::now", "Instant::now"];

/// The sans-IO crates' folders, relative to the workspace root.
const CLOCK_FREE: &[&str] = &["placement-core", "ocm-cel"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The package names in `cargo tree -p <package> -e normal`, one per line.
fn normal_dependencies(package: &str) -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
        ])
        .arg(package)
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo tree: {e}"));
    assert!(
        output.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn each_crate_depends_only_on_what_its_layer_allows() {
    for (package, forbidden, rule) in RULES {
        let tree = normal_dependencies(package);
        assert!(
            tree.iter().any(|name| name == package),
            "cargo tree -p {package} does not list {package} itself: {tree:?}"
        );
        let offending: Vec<&String> = tree
            .iter()
            .filter(|name| forbidden.contains(&name.as_str()))
            .collect();
        assert!(
            offending.is_empty(),
            "{package} must {rule}, but its normal dependencies include {offending:?} \
             (see `cargo tree -p {package} -e normal -i <crate>` for the path)"
        );
    }
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_clock_read_in_the_sources() {
    let mut found = Vec::new();
    for folder in CLOCK_FREE {
        let src = workspace_root().join(folder).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(!files.is_empty(), "no sources under {}", src.display());
        for file in files {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for (n, line) in text.lines().enumerate() {
                // Comments may name the clock the caller reads.
                let code = line.split("//").next().unwrap_or_default();
                if CLOCK_READS.iter().any(|c| code.contains(c)) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the core reads no clock (take `now` or a deadline from the caller):\n{}",
        found.join("\n")
    );
}
