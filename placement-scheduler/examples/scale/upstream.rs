//! Upstream OCM's placement controller (`placement controller`, open-cluster-management.io/ocm
//! `cmd/placement`), built from its Go module by `tests/ocm/build.sh` and started the way its
//! chart does, minus the pod: a kubeconfig, no leader election, client QPS unthrottled.
//!
//! Its command is openshift/library-go's `controllercmd`: `--kubeconfig`, `--namespace` (where
//! its own operator events go; without it, it reads the in-cluster service-account file),
//! `--listen` (an HTTPS server with a self-signed certificate for /metrics and /healthz,
//! authenticated and authorized by delegation to the apiserver: TokenReview and
//! SubjectAccessReview, so the admin's bearer token may read it). OCM's own options add
//! `--disable-leader-election`, `--kube-api-qps` and `--kube-api-burst` (defaults 50 / 100).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use kube::Client;

use testenv::scrape::{self, Sample};

use crate::{Args, Result};

/// Upstream's scheduling-pass histogram (`scheduling_` subsystem + `scheduling_duration_seconds`),
/// the counterpart of ours `placement_scheduling_duration_seconds`.
pub const PASSES: &str = "scheduling_scheduling_duration_seconds_count";

/// The cached binary, built first by `tests/ocm/build.sh` (a progress line, then Go's output)
/// unless `--upstream-bin` names one.
pub fn binary(args: &Args) -> Result<PathBuf> {
    if let Some(p) = &args.upstream_bin {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(format!("--upstream-bin {}: no such file", p.display()).into())
        };
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ocm/build.sh");
    eprintln!(
        "upstream placement controller: {} (builds OCM's cmd/placement from its Go module on first use: several minutes)",
        script.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .arg("placement")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", script.display(), out.status).into());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .last()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| format!("{} printed no binary path", script.display()))?;
    Ok(PathBuf::from(path))
}

/// `placement controller ...` for one hub: `listen` is where its HTTPS metrics server binds.
pub fn command(cmd: &mut Command, args: &Args, kubeconfig: &Path, ns: &str, listen: SocketAddr) {
    cmd.arg("controller")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--namespace={ns}"))
        .arg(format!("--listen={listen}"))
        .arg("--disable-leader-election")
        .arg(format!("--kube-api-qps={}", args.client_qps))
        .arg(format!("--kube-api-burst={}", args.client_burst))
        .args(&args.upstream_args);
}

/// A client for upstream's HTTPS server: the hub's admin credentials (delegated authn/authz
/// accepts them), its self-signed certificate accepted.
pub fn metrics_client(cp: &testenv::ControlPlane, listen: SocketAddr) -> Result<Client> {
    let mut config = cp.config(None)?;
    config.cluster_url = format!("https://{listen}").parse()?;
    config.root_cert = None;
    config.accept_invalid_certs = true;
    Ok(Client::try_from(config)?)
}

/// GET `path` from upstream's server.
async fn get(client: &Client, path: &str) -> Result<String, kube::Error> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(req).await
}

/// Its server answers (any HTTP status: it serves once its informers are started beside it,
/// the closest it has to a readiness signal).
pub async fn is_up(client: &Client) -> bool {
    matches!(
        get(client, "/healthz").await,
        Ok(_) | Err(kube::Error::Api(_))
    )
}

/// Its metrics; none (with a warning) when its server refuses them, so that a run still
/// measures what the apiserver and /proc show.
pub async fn metrics(client: &Client) -> Vec<Sample> {
    match get(client, "/metrics").await {
        Ok(text) => scrape::parse(&text),
        Err(e) => {
            eprintln!("warning: upstream's /metrics: {e}; its passes are not counted");
            Vec::new()
        }
    }
}
