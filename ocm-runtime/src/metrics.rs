//! `/metrics`, `/healthz` and `/readyz` on one port, the endpoints Prometheus and the kubelet
//! probe. Readiness and liveness are separate on purpose: a standby replica or one still
//! filling its caches is alive but not ready, and must not be restarted for it.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, StatusCode};
use parking_lot::{Mutex, MutexGuard};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tokio::net::TcpListener;

use crate::http::{HttpResponse, Listener, respond, serve};

/// The OpenMetrics text format, what `prometheus_client::encoding::text` writes.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Flags for the metrics and health server.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: SocketAddr,
    /// Connection limits of this port (and of the scheduler's debug port).
    #[command(flatten)]
    pub limits: crate::http::HttpLimits,
}

impl ServeArgs {
    /// Binds `--metrics-bind-address`, with the connection limits.
    pub async fn bind(&self) -> Result<Listener, ServeError> {
        let tcp = TcpListener::bind(self.metrics_bind_address)
            .await
            .map_err(|source| ServeError::Bind {
                address: self.metrics_bind_address,
                source,
            })?;
        Ok(Listener::new(tcp, self.limits.clone()))
    }
}

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("cannot listen on {address} (--metrics-bind-address): {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Whether the process is alive and ready, set by the code that knows. Clones share the state.
/// A new `Health` is healthy and not ready (`starting`).
#[derive(Clone, Debug)]
pub struct Health {
    inner: Arc<Mutex<HealthState>>,
}

#[derive(Debug)]
struct HealthState {
    /// `None` when healthy, else why not.
    unhealthy: Option<String>,
    /// `None` when ready, else why not.
    not_ready: Option<String>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(HealthState {
                unhealthy: None,
                not_ready: Some("starting".into()),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, HealthState> {
        self.inner.lock()
    }

    /// Ready, or not ready with the reason `not ready`.
    pub fn set_ready(&self, ready: bool) {
        self.state().not_ready = (!ready).then(|| "not ready".into());
    }

    /// Not ready, saying why (`/readyz` answers 503 with it).
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        self.state().not_ready = Some(reason.into());
    }

    /// Healthy, or unhealthy with the reason `unhealthy`.
    pub fn set_healthy(&self, healthy: bool) {
        self.state().unhealthy = (!healthy).then(|| "unhealthy".into());
    }

    /// Unhealthy, saying why (`/healthz` answers 500 with it; the kubelet restarts the pod).
    pub fn set_unhealthy(&self, reason: impl Into<String>) {
        self.state().unhealthy = Some(reason.into());
    }

    pub fn is_ready(&self) -> bool {
        self.state().not_ready.is_none()
    }

    /// Why not ready (what `/readyz` answers with), or `None` when ready.
    pub fn not_ready(&self) -> Option<String> {
        self.state().not_ready.clone()
    }

    pub fn is_healthy(&self) -> bool {
        self.state().unhealthy.is_none()
    }
}

/// Which of a controller's watches have listed once, and the last error of those that have not:
/// what `/readyz` says while they are not all synced (a missing CRD shows up as its name and
/// the apiserver's 404). Clones share the state.
#[derive(Clone, Debug)]
pub struct WatchSync {
    inner: Arc<Mutex<SyncState>>,
}

#[derive(Debug)]
struct SyncState {
    /// How many watches the controller runs; ready when that many have synced.
    expected: usize,
    /// By kind: its resource (`plural.group`), whether it has listed, its last error since.
    watches: std::collections::BTreeMap<&'static str, WatchState>,
}

#[derive(Debug)]
struct WatchState {
    resource: String,
    synced: bool,
    last_error: Option<String>,
}

impl WatchSync {
    /// For a controller that runs `expected` watches.
    pub fn new(expected: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(SyncState {
                expected,
                watches: Default::default(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, SyncState> {
        self.inner.lock()
    }

    /// A watch of `kind` on `resource_url` (`Api::resource_url`) has started.
    pub fn started(&self, kind: &'static str, resource_url: &str) {
        self.state().watches.insert(
            kind,
            WatchState {
                resource: resource_name(resource_url),
                synced: false,
                last_error: None,
            },
        );
    }

    /// The watch of `kind` has listed (once is enough: a relist keeps serving the old stores).
    pub fn synced(&self, kind: &'static str) {
        if let Some(w) = self.state().watches.get_mut(kind) {
            w.synced = true;
            w.last_error = None;
        }
    }

    /// The watch of `kind` failed (it retries with backoff); kept for the reason until it lists.
    pub fn failed(&self, kind: &'static str, error: &dyn std::fmt::Display) {
        if let Some(w) = self.state().watches.get_mut(kind) {
            w.last_error = Some(error.to_string());
        }
    }

    /// `None` once every watch has listed, else which have not and why, e.g.
    /// `waiting for the first list of AddOnPlacementScore (addonplacementscores.cluster.open-cluster-management.io: <404 error>)`.
    pub fn not_ready(&self) -> Option<String> {
        let st = self.state();
        let synced = st.watches.values().filter(|w| w.synced).count();
        if synced >= st.expected {
            return None;
        }
        let mut pending: Vec<String> = st
            .watches
            .iter()
            .filter(|(_, w)| !w.synced)
            .map(|(kind, w)| match &w.last_error {
                Some(e) => format!("{kind} ({}: {e})", w.resource),
                None => format!("{kind} ({})", w.resource),
            })
            .collect();
        let not_started = st.expected.saturating_sub(st.watches.len());
        if not_started > 0 {
            pending.push(format!("{not_started} watch(es) not started"));
        }
        Some(format!(
            "waiting for the first list of {}",
            pending.join("; ")
        ))
    }

    /// Keeps `health`'s readiness to [`Self::not_ready`] until every watch has listed, then
    /// ready for good (a standby is ready too: it keeps warm stores).
    pub async fn report_to(self, health: Health) {
        loop {
            match self.not_ready() {
                None => {
                    health.set_ready(true);
                    return;
                }
                Some(reason) => health.set_not_ready(reason),
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

/// `plural.group` (a CRD's name) or `plural` (core) from a resource URL
/// (`/apis/<group>/<version>/[namespaces/<ns>/]<plural>`, `/api/v1/<plural>`).
fn resource_name(url: &str) -> String {
    let parts: Vec<&str> = url.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["apis", group, .., plural] => format!("{plural}.{group}"),
        [.., plural] => (*plural).to_owned(),
        [] => url.to_owned(),
    }
}

/// Serves `/metrics` from `registry`, `/healthz` and `/readyz` from `health` on `listener`
/// until `shutdown` completes.
pub async fn serve_metrics(
    listener: impl Into<Listener>,
    registry: Arc<Registry>,
    health: Health,
    shutdown: impl Future<Output = ()>,
) {
    let listener = listener.into();
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    }
    let handler = move |req: Request<hyper::body::Incoming>| {
        let response = handle(&registry, &health, &req)
            .unwrap_or_else(|| respond(StatusCode::NOT_FOUND, TEXT, "not found\n"));
        async move { response }
    };
    serve(listener, None, handler, shutdown).await;
}

/// The answer for `/metrics`, `/healthz` and `/readyz`, or `None` for any other path, so that
/// another server (the scheduler's debug endpoint) can serve them too.
pub fn handle<B>(registry: &Registry, health: &Health, req: &Request<B>) -> Option<HttpResponse> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return None;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
        r.headers_mut().insert(
            http::header::ALLOW,
            http::HeaderValue::from_static("GET, HEAD"),
        );
        return Some(r);
    }
    Some(match path {
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => respond(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, text),
                Err(e) => {
                    tracing::error!(error = %e, "encoding the metrics failed");
                    respond(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        TEXT,
                        "encoding the metrics failed\n",
                    )
                }
            }
        }
        "/healthz" => match health.state().unhealthy.clone() {
            None => respond(StatusCode::OK, TEXT, "ok\n"),
            Some(why) => respond(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{why}\n")),
        },
        _ => match health.state().not_ready.clone() {
            None => respond(StatusCode::OK, TEXT, "ok\n"),
            Some(why) => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{why}\n")),
        },
    })
}

// Label values: closed sets only.

/// The label value of everything outside a [`ClosedLabel`] set.
pub const OTHER: &str = "other";

/// The values a metric label may take. Labels never take a value from input as it is: a
/// tenant's Placement, a managed cluster's series or a client's request could otherwise create
/// series without bound, and each one costs memory here and in every Prometheus that scrapes
/// us. A value outside the set is counted as [`OTHER`].
#[derive(Clone, Copy, Debug)]
pub struct ClosedLabel(&'static [&'static str]);

impl ClosedLabel {
    pub const fn new(values: &'static [&'static str]) -> Self {
        Self(values)
    }

    /// `value` when it is in the set, else [`OTHER`].
    pub fn label(&self, value: &str) -> &'static str {
        self.0
            .iter()
            .find(|v| **v == value)
            .copied()
            .unwrap_or(OTHER)
    }

    /// The values of the set.
    pub fn values(&self) -> &'static [&'static str] {
        self.0
    }

    /// The most series one label of this set makes: its values and [`OTHER`].
    pub fn bound(&self) -> usize {
        self.0.len() + 1
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    #[test]
    fn watch_sync_names_what_has_not_listed() {
        let w = WatchSync::new(3);
        assert!(w.not_ready().unwrap().contains("3 watch(es) not started"));
        w.started(
            "Placement",
            "/apis/cluster.open-cluster-management.io/v1beta1/placements",
        );
        w.started(
            "AddOnPlacementScore",
            "/apis/cluster.open-cluster-management.io/v1alpha1/addonplacementscores",
        );
        w.started("Node", "/api/v1/nodes");
        assert!(w.not_ready().unwrap().contains("Node (nodes)"));
        w.synced("Node");
        w.synced("Placement");
        w.failed("AddOnPlacementScore", &"404 Not Found");
        let reason = w.not_ready().unwrap();
        assert!(
            reason.contains("AddOnPlacementScore (addonplacementscores.cluster.open-cluster-management.io: 404 Not Found)"),
            "{reason}"
        );
        assert!(!reason.contains("Placement ("), "{reason}");
        w.synced("AddOnPlacementScore");
        assert_eq!(w.not_ready(), None);
    }

    #[test]
    fn health_transitions() {
        let h = Health::new();
        assert!(h.is_healthy());
        assert!(!h.is_ready());
        let r = Registry::default();
        let ready = |h: &Health| handle(&r, h, &get("/readyz")).unwrap().status();
        assert_eq!(ready(&h), StatusCode::SERVICE_UNAVAILABLE);
        h.set_ready(true);
        assert_eq!(ready(&h), StatusCode::OK);
        h.clone().set_not_ready("waiting for the Lease");
        assert_eq!(ready(&h), StatusCode::SERVICE_UNAVAILABLE);
        h.set_unhealthy("watch stuck");
        assert!(!h.is_healthy());
        h.set_healthy(true);
        assert!(h.is_healthy());
    }

    #[test]
    fn routes() {
        let r = Registry::default();
        let h = Health::new();
        assert!(handle(&r, &h, &get("/")).is_none());
        assert!(handle(&r, &h, &get("/metricsx")).is_none());
        let post = Request::post("/metrics").body(()).unwrap();
        let resp = handle(&r, &h, &post).unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[http::header::ALLOW], "GET, HEAD");
    }

    #[test]
    fn bind_address_flag() {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.serve.metrics_bind_address.to_string(), "0.0.0.0:8080");
        assert!(Cli::try_parse_from(["x", "--metrics-bind-address=nowhere"]).is_err());
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn values_outside_the_set_are_other() {
        const RESULTS: ClosedLabel = ClosedLabel::new(&["ok", "error"]);
        assert_eq!(RESULTS.label("ok"), "ok");
        assert_eq!(RESULTS.label("error"), "error");
        assert_eq!(RESULTS.label("Ok"), OTHER);
        assert_eq!(RESULTS.label(""), OTHER);
        let seen: std::collections::BTreeSet<&str> = (0..1000)
            .map(|i| RESULTS.label(&format!("tenant-{i}")))
            .chain(["ok", "error"].map(|v| RESULTS.label(v)))
            .collect();
        assert_eq!(seen.len(), RESULTS.bound());
    }
}
