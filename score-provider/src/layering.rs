//! The rule the crate split exists for: the framework knows none of its providers. Its normal
//! dependency tree holds no provider crate and nothing only a provider needs (the host probe).

use std::process::Command;

/// Providers built on the framework, and what only they need.
const FORBIDDEN: &[&str] = &[
    "resource-usage-agent",
    "addon-manager-and-scorer",
    "sysinfo",
];

/// The package names in `cargo tree -p score-provider -e normal`, one per line.
fn normal_dependencies() -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .args(["-p", env!("CARGO_PKG_NAME")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo tree: {e}"));
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_framework_depends_on_no_provider() {
    let tree = normal_dependencies();
    assert!(
        tree.iter().any(|name| name == env!("CARGO_PKG_NAME")),
        "cargo tree does not list the crate itself: {tree:?}"
    );
    let offending: Vec<&String> = tree
        .iter()
        .filter(|name| FORBIDDEN.contains(&name.as_str()))
        .collect();
    assert!(
        offending.is_empty(),
        "score-provider must not depend on its providers, but its normal dependencies include \
         {offending:?} (see `cargo tree -p score-provider -e normal -i <crate>`)"
    );
}
