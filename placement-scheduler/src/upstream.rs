//! Running as OCM's own placement controller: the cluster-manager operator starts its
//! placement image as `/placement controller [--feature-gates=...] [--kubeconfig=...]
//! [--tls-min-version=...] [--tls-cipher-suites=...]` (its `placement/deployment.yaml`), probes
//! `https://:8443/healthz`, and runs several replicas that elect a leader on the Lease
//! `placement-lock` (library-go's `<component>-lock`). An operator who sets the
//! ClusterManager's `spec.placementImagePullSpec` to this project's scheduler image gets this
//! binary started that way; this module makes it behave as that component would, down to the
//! one port it listens on.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{Request, StatusCode};
use prometheus_client::registry::Registry;

/// The executable name upstream's deployment runs (`/placement`).
pub const UPSTREAM_BINARY: &str = "placement";
/// The executable name kubectl runs for `kubectl placement ...`.
pub const KUBECTL_PLUGIN: &str = "kubectl-placement";
/// The Lease upstream's placement replicas elect their leader on.
pub const UPSTREAM_LEASE: &str = "placement-lock";
/// The Lease this project's scheduler elects its leader on when started as itself.
pub const OWN_LEASE: &str = "placement-scheduler";
/// Where upstream serves its probes (HTTPS), unless `--listen`/`--health-port` say otherwise.
pub const UPSTREAM_LISTEN: &str = "0.0.0.0:8443";
/// The service serving certificate upstream's server uses when it is mounted.
const SERVING_CERT_DIR: &str = "/var/run/secrets/serving-cert";
/// The pod's namespace, which library-go takes for the Lease's when `--namespace` is not given.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// How the executable was invoked, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invocation {
    /// `placement-scheduler ...` (or any other name).
    Scheduler,
    /// As OCM's placement image: `/placement controller ...`.
    Upstream,
    /// As a kubectl plugin: `kubectl-placement explain ns/name`.
    KubectlPlugin,
}

impl Invocation {
    /// The program name to show in help and errors.
    pub fn display_name(self) -> &'static str {
        match self {
            Invocation::Scheduler => "placement-scheduler",
            Invocation::Upstream => UPSTREAM_BINARY,
            Invocation::KubectlPlugin => "kubectl placement",
        }
    }
}

/// How the process was invoked, and its arguments for parsing. An image whose entrypoint is
/// this binary under another name, started with upstream's `args` (`/placement controller`),
/// receives `/placement` as its first argument: that counts as upstream's invocation, and the
/// argument is dropped.
pub fn invocation(mut args: Vec<OsString>) -> (Invocation, Vec<OsString>) {
    let name = |a: &OsString| {
        Path::new(a)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    };
    match args.first().and_then(name).as_deref() {
        Some(UPSTREAM_BINARY) => return (Invocation::Upstream, args),
        Some(KUBECTL_PLUGIN) => return (Invocation::KubectlPlugin, args),
        _ => {}
    }
    if args.get(1).and_then(name).as_deref() == Some(UPSTREAM_BINARY) {
        args.remove(1);
        return (Invocation::Upstream, args);
    }
    (Invocation::Scheduler, args)
}

/// The flags upstream's `placement controller` takes (library-go's controller command and
/// OCM's common options) that the scheduler has no flag of its own for. Those that map onto
/// something the scheduler does are honoured; the others are accepted and ignored, with a
/// debug log naming them, so that the operator's command line always starts.
#[derive(clap::Args, Clone, Debug, Default)]
#[command(next_help_heading = "OCM placement compatibility (the cluster-manager operator's flags)")]
pub struct UpstreamArgs {
    /// Upstream's spelling of --leader-elect=false.
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub disable_leader_election: bool,
    /// The namespace of the leader-election Lease (library-go's component namespace); it
    /// overrides --leader-election-namespace. Started as `placement`, the default is the pod's
    /// namespace, as upstream's.
    #[arg(long, env = "COMPONENT_NAMESPACE")]
    pub namespace: Option<String>,
    /// Where to serve /healthz, /readyz and /metrics over HTTPS, as upstream does for the
    /// kubelet's probes (with the service serving certificate in /var/run/secrets/serving-cert
    /// when mounted, else a self-signed one). Started as `placement`, default 0.0.0.0:8443 and
    /// the only port served unless --metrics-bind-address or --debug-bind-address is given;
    /// otherwise off unless given.
    #[arg(long, env = "LISTEN_ADDRESS")]
    pub listen: Option<SocketAddr>,
    /// The port of --listen (0: keep --listen's).
    #[arg(long, env = "HEALTH_PORT", default_value_t = 0)]
    pub health_port: u16,
    /// Upstream's client QPS: overrides --client-qps when given.
    #[arg(long, env = "KUBE_API_QPS")]
    pub kube_api_qps: Option<f64>,
    /// Upstream's client burst: overrides --client-burst when given.
    #[arg(long, env = "KUBE_API_BURST")]
    pub kube_api_burst: Option<u32>,
    /// Upstream's placement feature gates (`Name=true`, repeatable or comma separated).
    /// Accepted and ignored: this scheduler has no feature gates.
    #[arg(long, env = "FEATURE_GATES", value_delimiter = ',')]
    pub feature_gates: Vec<String>,
    /// Accepted and ignored: the TLS versions served are TLS 1.2 and 1.3.
    #[arg(long, env = "TLS_MIN_VERSION")]
    pub tls_min_version: Option<String>,
    /// Accepted and ignored: rustls's default cipher suites are served.
    #[arg(long, env = "TLS_CIPHER_SUITES")]
    pub tls_cipher_suites: Option<String>,
    /// library-go's GenericOperatorConfig file. Accepted and ignored.
    #[arg(long = "config", env = "OPERATOR_CONFIG")]
    pub operator_config: Option<PathBuf>,
    /// library-go's files whose change restarts the process. Accepted and ignored (the TLS
    /// files of the debug endpoint are read again when they change).
    #[arg(long, env = "TERMINATE_ON_FILES", value_delimiter = ',')]
    pub terminate_on_files: Vec<PathBuf>,
}

impl UpstreamArgs {
    /// Logs, at debug, every upstream flag given that this binary accepts and ignores.
    pub fn log_ignored(&self) {
        let mut ignored: Vec<String> = Vec::new();
        if !self.feature_gates.is_empty() {
            ignored.push(format!("--feature-gates={}", self.feature_gates.join(",")));
        }
        let mut optional = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                ignored.push(format!("--{flag}={v}"));
            }
        };
        optional("tls-min-version", self.tls_min_version.clone());
        optional("tls-cipher-suites", self.tls_cipher_suites.clone());
        optional(
            "config",
            self.operator_config
                .as_ref()
                .map(|p| p.display().to_string()),
        );
        for f in &self.terminate_on_files {
            ignored.push(format!("--terminate-on-files={}", f.display()));
        }
        if !ignored.is_empty() {
            tracing::debug!(
                flags = %ignored.join(" "),
                "upstream placement flags accepted and ignored (no equivalent in this scheduler)"
            );
        }
    }

    /// Where the HTTPS health server listens: --listen (with --health-port), or upstream's
    /// default when started as `placement`; `None`: not served.
    pub fn listen_address(&self, invocation: Invocation) -> Option<SocketAddr> {
        let default = || {
            (invocation == Invocation::Upstream)
                .then(|| UPSTREAM_LISTEN.parse().ok())
                .flatten()
        };
        let mut addr = self.listen.or_else(default)?;
        if self.health_port != 0 {
            addr.set_port(self.health_port);
        }
        Some(addr)
    }

    /// The Lease's namespace: --namespace; started as `placement`, the pod's namespace (as
    /// library-go); else `configured` (--leader-election-namespace).
    pub fn lease_namespace(&self, invocation: Invocation, configured: &str) -> String {
        if let Some(ns) = self.namespace.as_deref().filter(|ns| !ns.is_empty()) {
            return ns.to_owned();
        }
        if invocation == Invocation::Upstream
            && let Ok(ns) = std::fs::read_to_string(POD_NAMESPACE_FILE)
            && !ns.trim().is_empty()
        {
            return ns.trim().to_owned();
        }
        configured.to_owned()
    }
}

/// Whether to open one of the scheduler's own listeners, which upstream's placement controller
/// does not have (the plain-HTTP metrics port, the debug endpoint): started as itself, yes;
/// started as `placement`, only when `asked` for (its flag or environment variable given).
/// Upstream's controller serves only its HTTPS port (library-go's controller command:
/// `/healthz`, `/metrics` on `:8443`), and that is all the operator's Deployment expects in
/// OCM's pod, where a port of ours could also collide with the optional `debug-server` sidecar
/// (`:9443`).
pub fn opens_own_listener(invocation: Invocation, asked: bool) -> bool {
    invocation != Invocation::Upstream || asked
}

/// The Lease name this invocation elects its leader on: upstream's when started as
/// `placement`, so that during the operator's rolling update from upstream's image the new
/// pods wait as standbys until the old leader is gone, instead of writing beside it.
pub fn lease_name(invocation: Invocation) -> &'static str {
    match invocation {
        Invocation::Upstream => UPSTREAM_LEASE,
        _ => OWN_LEASE,
    }
}

/// Why upstream's probe port cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ProbesError {
    #[error("--listen {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Address(std::io::Error),
    #[error(transparent)]
    Tls(#[from] ocm_runtime::tls::TlsError),
}

/// `/healthz`, `/readyz` and `/metrics` over HTTPS on `addr`, as upstream serves them for the
/// kubelet's probes: a future to spawn.
pub async fn serve_probes(
    addr: SocketAddr,
    registry: Arc<Registry>,
    health: ocm_runtime::Health,
    limits: ocm_runtime::HttpLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, ProbesError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ProbesError::Bind {
            address: addr,
            source,
        })?;
    let bound = listener.local_addr().map_err(ProbesError::Address)?;
    let cert = Path::new(SERVING_CERT_DIR).join("tls.crt");
    let key = Path::new(SERVING_CERT_DIR).join("tls.key");
    let tls = if cert.exists() && key.exists() {
        ocm_runtime::tls::server_config(&cert, &key)?
    } else {
        let generated = ocm_runtime::tls::self_signed(&ocm_runtime::tls::self_signed_names(bound))?;
        tracing::info!(fingerprint = %generated.fingerprint, "no serving certificate mounted: the probe port serves a self-signed one");
        generated.config
    };
    tracing::info!(address = %bound, "serving /healthz, /readyz and /metrics over HTTPS (upstream's probe port)");
    let handler = move |req: Request<hyper::body::Incoming>| {
        let response =
            ocm_runtime::metrics::handle(&registry, &health, &req).unwrap_or_else(|| {
                ocm_runtime::http::respond(StatusCode::NOT_FOUND, "text/plain", "not found\n")
            });
        async move { response }
    };
    Ok(ocm_runtime::http::serve(
        ocm_runtime::Listener::new(listener, limits),
        Some(tls),
        handler,
        shutdown,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_invocation_is_told_by_the_executable_name() {
        let (i, a) = invocation(args(&["/placement", "controller"]));
        assert_eq!(
            (i, a),
            (Invocation::Upstream, args(&["/placement", "controller"]))
        );
        // An image entrypoint under our own name, given upstream's args.
        let (i, a) = invocation(args(&["/placement-scheduler", "/placement", "controller"]));
        assert_eq!(
            (i, a),
            (
                Invocation::Upstream,
                args(&["/placement-scheduler", "controller"])
            )
        );
        let (i, _) = invocation(args(&[
            "/usr/local/bin/kubectl-placement",
            "explain",
            "a/b",
        ]));
        assert_eq!(i, Invocation::KubectlPlugin);
        let (i, a) = invocation(args(&["placement-scheduler", "controller"]));
        assert_eq!(
            (i, a),
            (
                Invocation::Scheduler,
                args(&["placement-scheduler", "controller"])
            )
        );
        assert_eq!(invocation(Vec::new()).0, Invocation::Scheduler);
    }

    #[test]
    fn the_probe_address_and_lease_follow_the_invocation() {
        let none = UpstreamArgs::default();
        assert_eq!(none.listen_address(Invocation::Scheduler), None);
        assert_eq!(
            none.listen_address(Invocation::Upstream),
            "0.0.0.0:8443".parse().ok()
        );
        let port = UpstreamArgs {
            health_port: 9000,
            ..UpstreamArgs::default()
        };
        assert_eq!(
            port.listen_address(Invocation::Upstream),
            "0.0.0.0:9000".parse().ok()
        );
        assert!(opens_own_listener(Invocation::Scheduler, false));
        assert!(!opens_own_listener(Invocation::Upstream, false));
        assert!(opens_own_listener(Invocation::Upstream, true));
        assert_eq!(lease_name(Invocation::Upstream), "placement-lock");
        assert_eq!(lease_name(Invocation::Scheduler), "placement-scheduler");
        let ns = UpstreamArgs {
            namespace: Some("hub".into()),
            ..UpstreamArgs::default()
        };
        assert_eq!(ns.lease_namespace(Invocation::Scheduler, "x"), "hub");
        assert_eq!(none.lease_namespace(Invocation::Scheduler, "x"), "x");
    }
}
