//! The real `helm`, for tests of the project's Helm chart.
//!
//! `tests/helm/build.sh` (called by `tests/run.sh`) builds the version pinned as `HELM_VERSION`
//! in `tests/control-plane/versions.env` into the cache; [`binary`] computes the same path from
//! the same pin. [`helm`] runs it with its cache, config and data homes in a directory of this
//! test process, so tests never read or write the user's repositories, registry logins or
//! plugins, and with the kubeconfig the test names, never the user's.
//!
//! ```no_run
//! # fn demo(kubeconfig: &std::path::Path) -> Result<(), testenv::Error> {
//! use testenv::helm::{helm, helm_output};
//!
//! let out = helm(&["template", "demo", "charts/hub", "--set", "replicas=2"], None)?;
//! let manifests = String::from_utf8_lossy(&out.stdout);
//! helm(&["install", "demo", "charts/hub", "--wait"], Some(kubeconfig))?;
//! // A run that is expected to fail: the exit status and output, whatever the status.
//! let refused = helm_output(&["install", "demo", "charts/hub"], Some(kubeconfig))?;
//! assert!(!refused.status.success());
//! # let _ = manifests; Ok(()) }
//! ```
//!
//! The calls block until helm exits. Against a control plane that is harmless (it runs in its
//! own processes); an async test that also serves something in-process (an exporter, a webhook)
//! on the same runtime should call them through `tokio::task::spawn_blocking`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use crate::process::{self, Shutdown};
use crate::{Error, paths};

/// Overrides the cached binary.
pub const BINARY_ENV: &str = "OCM_HELM";
/// The key of the pin in `tests/control-plane/versions.env`.
const VERSION_KEY: &str = "HELM_VERSION";

/// The pinned Helm version, e.g. `v4.3.1`: what `helm version --short` of the cached binary
/// prints.
pub fn version() -> Result<&'static str, Error> {
    paths::version(VERSION_KEY).ok_or_else(|| {
        Error::Invalid(format!(
            "no {VERSION_KEY} in tests/control-plane/versions.env"
        ))
    })
}

/// The helm binary: `$OCM_HELM` if set, else `<cache root>/helm-<HELM_VERSION>/helm`, where
/// `tests/helm/build.sh` puts it.
pub fn binary() -> Result<PathBuf, Error> {
    let (path, origin) = match std::env::var_os(BINARY_ENV) {
        Some(p) => (PathBuf::from(p), BINARY_ENV),
        None => (
            cache_dir()
                .join(format!("helm-{}", version()?))
                .join("helm"),
            "the cache",
        ),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Io {
            action: format!(
                "run helm: no file at {} (from {origin}); build it with tests/helm/build.sh or \
                 tests/run.sh, or point {BINARY_ENV} at one",
                path.display()
            ),
            source: std::io::ErrorKind::NotFound.into(),
        })
    }
}

/// Runs `helm args…` (see [`helm_output`] for its environment) and returns its output, or
/// [`Error::CommandFailed`] with its status, stdout and stderr when it exits with a failure.
pub fn helm(args: &[&str], kubeconfig: Option<&Path>) -> Result<Output, Error> {
    let output = helm_output(args, kubeconfig)?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(Error::CommandFailed {
            command: command_line(args),
            output,
        })
    }
}

/// Runs `helm args…` and returns its output whatever its exit status: for tests that expect a
/// failure. An error only when helm cannot be found or started.
///
/// Every inherited `HELM_*` variable is dropped, so a developer's own settings (namespace,
/// kube context, repository file, …) cannot leak in. `HELM_CACHE_HOME`, `HELM_CONFIG_HOME`,
/// `HELM_DATA_HOME` and `HOME` (where client-go keeps its discovery cache) point into a
/// directory of this process, removed when it exits. `KUBECONFIG` is `kubeconfig`, or else an
/// empty file, so that without one helm reaches no cluster at all.
pub fn helm_output(args: &[&str], kubeconfig: Option<&Path>) -> Result<Output, Error> {
    let bin = binary()?;
    let home = home()?;
    let mut cmd = Command::new(&bin);
    cmd.args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(|k| k.starts_with("HELM_")) {
            cmd.env_remove(key);
        }
    }
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HOME", home.join("home"))
        .env(
            "KUBECONFIG",
            kubeconfig.map_or_else(|| home.join("empty-kubeconfig"), Path::to_path_buf),
        );
    cmd.output().map_err(Error::io(format!(
        "run {} ({})",
        bin.display(),
        command_line(args)
    )))
}

/// `helm` and the arguments, each quoted only if it needs it, for error messages.
fn command_line(args: &[&str]) -> String {
    std::iter::once("helm")
        .chain(args.iter().copied())
        .map(|a| {
            if !a.is_empty() && !a.contains(|c: char| c.is_whitespace() || "'\"\\$".contains(c)) {
                a.to_owned()
            } else {
                format!("{a:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `<cache root>/`, next to the control plane's folder: the script puts `helm-<version>` there.
fn cache_dir() -> PathBuf {
    let control_plane = paths::cache_root();
    control_plane
        .parent()
        .unwrap_or(&control_plane)
        .to_path_buf()
}

/// The per-process helm home, `$TMPDIR/ocm-testenv-helm/<pid>`, removed at exit.
struct HelmHome(PathBuf);

impl Shutdown for HelmHome {
    fn shutdown(&self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Creates the per-process helm home on first use. Homes of processes that no longer run (killed
/// outright, so no exit hook ran) are removed first, and so is one left under this very pid by an
/// earlier process: helm state must never carry over from one test run to the next.
fn home() -> Result<&'static Path, Error> {
    static HOME: OnceLock<Arc<HelmHome>> = OnceLock::new();
    let home = HOME.get_or_init(|| {
        let root = std::env::temp_dir().join("ocm-testenv-helm");
        paths::sweep(&root);
        let own = root.join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&own);
        let home = Arc::new(HelmHome(own));
        let hook: Arc<dyn Shutdown> = home.clone();
        process::register_for_exit(&hook);
        home
    });
    let dir = home.0.as_path();
    // Created on every call, not once: cheap, and a test that removed the directory (or a
    // failed first attempt) does not break the next run.
    for sub in ["cache", "config", "data", "home"] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).map_err(Error::io(format!("create {}", path.display())))?;
    }
    let empty = dir.join("empty-kubeconfig");
    if !empty.is_file() {
        std::fs::write(&empty, "").map_err(Error::io(format!("write {}", empty.display())))?;
    }
    Ok(dir)
}

/// A convenience for messages and assertions: the output's stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The output's stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_arguments_that_need_it() {
        assert_eq!(
            command_line(&["template", "x", "--set", "a=b c", ""]),
            "helm template x --set \"a=b c\" \"\""
        );
    }

    #[test]
    fn the_pin_is_in_versions_env() {
        let v = version().expect("HELM_VERSION is pinned");
        assert!(v.starts_with('v'), "{v}");
    }
}
