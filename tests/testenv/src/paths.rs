//! Where the control-plane binaries and the upstream CRDs are: the versioned cache that
//! `tests/control-plane/build.sh` fills. The versions come from the same `versions.env` the
//! script reads, so the two can never disagree.

use std::path::{Path, PathBuf};

const VERSIONS_ENV: &str = include_str!("../../control-plane/versions.env");

/// A pinned version from `versions.env`.
pub fn version(key: &str) -> Option<&'static str> {
    VERSIONS_ENV.lines().find_map(|line| {
        let (k, v) = line.trim().split_once('=')?;
        (k == key).then_some(v.trim())
    })
}

/// The cache root: `$OCM_PLACEMENT_CACHE`, else `${XDG_CACHE_HOME:-$HOME/.cache}/ocm-placement`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("OCM_PLACEMENT_CACHE") {
        return PathBuf::from(dir).join("control-plane");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("ocm-placement").join("control-plane")
}

fn versioned(key: &str, dir_prefix: &str, file: &str, env: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let v = version(key).unwrap_or("unknown");
    cache_root().join(format!("{dir_prefix}-{v}")).join(file)
}

/// `kube-apiserver` (override: `TESTENV_KUBE_APISERVER`).
pub fn kube_apiserver() -> PathBuf {
    versioned(
        "KUBE_VERSION",
        "kube-apiserver",
        "kube-apiserver",
        "TESTENV_KUBE_APISERVER",
    )
}

/// `etcd` (override: `TESTENV_ETCD`).
pub fn etcd() -> PathBuf {
    versioned("ETCD_VERSION", "etcd", "etcd", "TESTENV_ETCD")
}

/// The folder of upstream OCM CRD YAML files (override: `TESTENV_OCM_CRDS`).
pub fn upstream_crds_dir() -> PathBuf {
    versioned("OCM_API_VERSION", "ocm-api", "crds", "TESTENV_OCM_CRDS")
}

/// This project's own CRDs, as the chart ships them (`charts/ocm-placement/crds`).
pub fn project_crds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/ocm-placement/crds")
}

/// The chart's built-in ScoreDefinition template (`files/definitions/resource-usage.yaml`).
pub fn builtin_definition() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/ocm-placement/files/definitions/resource-usage.yaml")
}

/// `$TMPDIR/<root>/<pid>-<n>`, new and empty, for one process (etcd and kube-apiserver,
/// Prometheus). Directories of processes that no longer run are removed first.
pub(crate) fn instance_dir(root: &str) -> Result<PathBuf, crate::Error> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = std::env::temp_dir().join(root);
    std::fs::create_dir_all(&root)
        .map_err(crate::Error::io(format!("create {}", root.display())))?;
    sweep(&root);
    let dir = root.join(format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(crate::Error::io(format!("create {}", dir.display())))?;
    Ok(dir)
}

/// Removes the entries of `root` named `<pid>` or `<pid>-...` whose process no longer runs
/// (killed outright, so no drop or exit hook ran).
pub(crate) fn sweep(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if owner.is_some_and(|pid| !crate::process::is_running(pid)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `kube-controller-manager` (override: `TESTENV_KUBE_CONTROLLER_MANAGER`), built by
/// `tests/control-plane/build.sh` beside kube-apiserver.
pub fn kube_controller_manager() -> PathBuf {
    versioned(
        "KUBE_VERSION",
        "kube-controller-manager",
        "kube-controller-manager",
        "TESTENV_KUBE_CONTROLLER_MANAGER",
    )
}

/// One of upstream OCM's binaries (`registration-operator`, `registration`, `addon`), built by
/// `tests/ocm/build.sh` into `<cache>/ocm-$OCM_VERSION/` (override: `TESTENV_OCM_BIN_DIR`, the
/// directory holding them).
pub fn ocm_binary(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("TESTENV_OCM_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let root = cache_root();
    let base = root.parent().map(PathBuf::from).unwrap_or(root);
    base.join(format!(
        "ocm-{}",
        version("OCM_VERSION").unwrap_or("unknown")
    ))
    .join(name)
}
