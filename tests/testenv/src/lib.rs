//! A real Kubernetes control plane for tests: `etcd` and `kube-apiserver` started as child
//! processes on free loopback ports, RBAC on, CRDs installed and `Established`, an admin client
//! and clients for any other identity, everything killed and removed when it is dropped, when
//! the test binary exits, or when it is killed (see [`process`]).
//!
//! The binaries and the upstream OCM CRDs come from the versioned cache that
//! `tests/control-plane/build.sh` fills; [`paths`] says where.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! let cp = testenv::shared().await;               // one per test binary, upstream OCM CRDs in
//! let ns = testenv::namespace(&cp.client()?, "roundtrip").await?;  // one namespace per test
//! let alice = cp.client_as("alice", &["team-a"])?;  // real RBAC applies to her
//! // An agent's identity as a client certificate, laid out like a mounted hub-kubeconfig secret.
//! let cert = cp.client_certificate("agent", &["agents"], std::time::Duration::from_secs(3600))?;
//! let kubeconfig = cp.write_cert_kubeconfig(std::path::Path::new("/tmp/hub"), &cert)?;
//! # let _ = (ns, alice, kubeconfig); Ok(()) }
//! ```

pub mod apply;
pub mod build;
pub mod crds;
pub mod forward;
pub mod harness;
pub mod helm;
pub mod http;
pub mod ocm_agents;
pub mod paths;
pub mod ports;
pub mod process;
pub mod procfs;
pub mod prometheus;
pub mod retry;
pub mod scoring;
pub mod scrape;
pub mod thanos;
pub mod wait;

mod control_plane;
mod pki;

pub use apply::{apply, apply_yaml};
pub use control_plane::{ControlPlane, Options, SecondApiServer, service_account};
pub use crds::{install_crds, namespace, upstream_crds};
pub use pki::{
    ClientCertificate, certificate_request, certificate_request_der,
    certificate_request_der_with_name, pem_encode,
};
pub use prometheus::{Exporter, Prometheus};

/// A loopback port that was free when picked, for a process the test starts (it may be taken
/// before that process binds it; tests that cannot retry pick it just before the start).
///
/// # Panics
/// When no port can be picked (see [`ports::free`] for the fallible form).
pub fn free_port() -> u16 {
    ports::free().expect("a free loopback port")
}

use std::path::PathBuf;

/// Everything that can go wrong starting or using a control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{what} not found at {path}: run tests/control-plane/build.sh (it builds the pinned versions into the cache)"
    )]
    MissingBinary { what: &'static str, path: PathBuf },
    #[error(
        "no Prometheus binary ({reason}): run tests/prometheus/build.sh or tests/run.sh (they install Debian's prometheus into the cache), or set OCM_PROMETHEUS"
    )]
    MissingPrometheus { reason: String },
    #[error("cannot {action}: {source}")]
    Io {
        action: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{process} exited early ({status}); last lines of its log {log}:\n{tail}")]
    ProcessExited {
        process: &'static str,
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error("{what} not ready within {seconds}s{detail}")]
    NotReady {
        what: String,
        seconds: u64,
        detail: String,
    },
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot parse {file}: {message}")]
    Parse { file: String, message: String },
    #[error("cannot generate keys: {0}")]
    Pki(#[from] rcgen::Error),
    /// A request the control plane cannot honour, e.g. a restart after shutdown.
    #[error("{0}")]
    Invalid(String),
    /// A command (helm) that exited with a failure; `output` holds its status and everything
    /// it printed, for tests that look closer.
    #[error(
        "`{command}` failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        .output.status,
        String::from_utf8_lossy(&.output.stdout).trim_end(),
        String::from_utf8_lossy(&.output.stderr).trim_end()
    )]
    CommandFailed {
        command: String,
        output: std::process::Output,
    },
}

impl Error {
    pub(crate) fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let action = action.into();
        move |source| Error::Io { action, source }
    }
}

/// The control plane shared by every test of this test binary, with the upstream OCM CRDs
/// installed. Started on first use; shut down when the binary exits.
///
/// Each `#[tokio::test]` has its own runtime, so take clients with [`ControlPlane::client`]
/// inside the test: a client is bound to the runtime it was built on.
///
/// # Panics
/// When the control plane cannot start: every test of the binary needs it, and the message
/// says why (most often: the binaries are not built yet).
pub async fn shared() -> &'static ControlPlane {
    static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
    // The first caller's runtime does the start; the processes do not depend on it.
    SHARED
        .get_or_init(|| async {
            match ControlPlane::start(Options::default().with_upstream_crds()).await {
                Ok(cp) => cp,
                Err(e) => panic!("testenv: cannot start the shared control plane: {e}"),
            }
        })
        .await
}

/// Polls `f` every 100 ms until it returns `Some`, or panics with `what` after `deadline`:
/// how tests wait for an outcome (never a bare sleep).
///
/// # Panics
/// When `deadline` passes first: the test failed.
pub async fn eventually<T, F, Fut>(what: &str, deadline: std::time::Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match wait::poll(deadline, std::time::Duration::from_millis(100), f).await {
        Some(v) => v,
        None => panic!("timed out after {deadline:?} waiting for {what}"),
    }
}
