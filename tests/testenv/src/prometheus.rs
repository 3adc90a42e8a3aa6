//! A real Prometheus for tests of the Prometheus-backed scorer, and an in-process exporter for it
//! to scrape.
//!
//! The binary is Debian's `prometheus`, which `tests/prometheus/build.sh` (called by
//! `tests/run.sh`) extracts into the cache; [`binary`] says where. [`Prometheus`] runs it as a
//! child process that cannot outlive the test binary (see [`crate::process`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! use std::time::Duration;
//! use testenv::prometheus::{Exporter, Prometheus, query};
//!
//! let exporter = Exporter::start().await?;
//! exporter.set("fleet_cpu_free{cluster=\"a\"} 3\n");
//! let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1)).await?;
//! // The first sample is queryable about one scrape interval after the start: poll.
//! let data = query(&prom.url(), "fleet_cpu_free").await?;
//! # let _ = data; Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::task::{JoinHandle, JoinSet};

use crate::process::ManagedChild;
use crate::{Error, http, paths};

/// Overrides the cached binary.
pub const BINARY_ENV: &str = "OCM_PROMETHEUS";
/// How long Prometheus may take to answer `/-/ready` (well under a second when idle; a restart
/// replays its WAL first, and a loaded 2-core machine is slow).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
/// One readiness probe: Prometheus answers at once, whatever else holds the port may not.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts with a fresh port when the port picked as free was taken before Prometheus bound it.
const START_ATTEMPTS: usize = 3;
/// The exposition format Prometheus expects from a plain-text exporter.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus binary: `$OCM_PROMETHEUS` if set, else the one `tests/prometheus/build.sh`
/// recorded in `<cache root>/prometheus/current`.
pub fn binary() -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os(BINARY_ENV) {
        let path = PathBuf::from(p);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::MissingPrometheus {
                reason: format!("{BINARY_ENV} names {}, which is no file", path.display()),
            })
        };
    }
    let current = cache_dir().join("current");
    let text = std::fs::read_to_string(&current).map_err(|e| Error::MissingPrometheus {
        reason: format!("cannot read {}: {e}", current.display()),
    })?;
    let path = PathBuf::from(text.trim_end_matches(['\n', '\r']));
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingPrometheus {
            reason: format!(
                "{} names {}, which is no file",
                current.display(),
                path.display()
            ),
        })
    }
}

/// `<cache root>/prometheus`, next to the control plane's folder in the same cache root.
fn cache_dir() -> PathBuf {
    let control_plane = paths::cache_root();
    control_plane
        .parent()
        .unwrap_or(&control_plane)
        .join("prometheus")
}

/// An HTTP server on a free loopback port serving `GET /metrics` with the text a test sets:
/// the fleet's exporter, as Prometheus scrapes it. Stops when dropped.
///
/// It runs on the runtime that started it, so keep it within one test.
pub struct Exporter {
    addr: SocketAddr,
    state: Arc<ExporterState>,
    task: Option<JoinHandle<()>>,
}

struct ExporterState {
    body: Mutex<Bytes>,
    scrapes: AtomicU64,
}

impl Exporter {
    /// Starts serving an empty body on `127.0.0.1:<free port>`.
    pub async fn start() -> Result<Exporter, Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::io("bind the exporter to a loopback port"))?;
        let addr = listener
            .local_addr()
            .map_err(Error::io("read the exporter's address"))?;
        let state = Arc::new(ExporterState {
            body: Mutex::new(Bytes::new()),
            scrapes: AtomicU64::new(0),
        });
        let task = tokio::spawn(serve(listener, Arc::clone(&state)));
        Ok(Exporter {
            addr,
            state,
            task: Some(task),
        })
    }

    /// The address to scrape.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the body of `/metrics` (Prometheus text exposition format). A series left out
    /// is marked stale by the next scrape, so it drops out of instant queries.
    pub fn set(&self, text: impl Into<String>) {
        let body = Bytes::from(text.into());
        // The lock only guards a swap: a poisoned one still holds a whole value.
        *self
            .state
            .body
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = body;
    }

    /// How many times `/metrics` was served: after [`Exporter::set`], wait for this to grow to
    /// know Prometheus has scraped the new text.
    pub fn scrapes(&self) -> u64 {
        self.state.scrapes.load(Ordering::Relaxed)
    }

    /// Stops serving: the listener and every open connection are closed when this returns,
    /// so the next scrape fails (the target is down). Idempotent.
    pub async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Resolves once the task, its listener and its connections are dropped.
            let _ = task.await;
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepts until aborted. The connections live in a `JoinSet` owned by this task, so aborting
/// it also closes the scraper's keep-alive connections.
async fn serve(listener: tokio::net::TcpListener, state: Arc<ExporterState>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Most often out of file descriptors: retrying at once would spin.
                Err(_) => {
                    tokio::time::sleep(POLL).await;
                    continue;
                }
            },
            // Reaps finished connections so the set does not grow over a long test.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(respond(&req, &state)) }
            });
            // A connection the scraper resets is no concern of the test.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn respond(req: &Request<Incoming>, state: &ExporterState) -> Response<Full<Bytes>> {
    let (status, body) = if req.uri().path() != "/metrics" {
        (StatusCode::NOT_FOUND, Bytes::from_static(b"not found\n"))
    } else if req.method() != Method::GET {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            Bytes::from_static(b"GET only\n"),
        )
    } else {
        state.scrapes.fetch_add(1, Ordering::Relaxed);
        let body = state
            .body
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (StatusCode::OK, body)
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(TEXT_FORMAT),
    );
    response
}

/// A running Prometheus scraping static targets as the job `fleet`. Its port is fixed at the
/// first start, so [`Prometheus::stop`] and [`Prometheus::start_again`] keep the URL (and the
/// data). Dropping it kills the process and removes its directory.
pub struct Prometheus {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<ManagedChild>,
}

impl Prometheus {
    /// Writes a config scraping `targets` every `scrape_interval` and starts Prometheus on a
    /// free loopback port; returns once `/-/ready` answers 200.
    pub async fn start(
        targets: &[SocketAddr],
        scrape_interval: Duration,
    ) -> Result<Prometheus, Error> {
        if scrape_interval.as_millis() == 0 {
            return Err(Error::Invalid(
                "Prometheus needs a scrape interval of at least 1ms".into(),
            ));
        }
        Self::start_with(config_yaml(targets, scrape_interval)).await
    }

    /// Like [`Prometheus::start`], but Prometheus attaches each target's `labels` to what it
    /// scrapes there and they win over the target's own (`honor_labels: false`; a served
    /// label of the same name is kept as `exported_<name>`): labels the hub sets from who
    /// sends, as Thanos Receive's tenant label, which a sender cannot forge.
    pub async fn start_labelled(
        targets: &[Target],
        scrape_interval: Duration,
    ) -> Result<Prometheus, Error> {
        if scrape_interval.as_millis() == 0 {
            return Err(Error::Invalid(
                "Prometheus needs a scrape interval of at least 1ms".into(),
            ));
        }
        Self::start_with(labelled_config_yaml(targets, scrape_interval)).await
    }

    /// Like [`Prometheus::start`], with `external_labels`: the labels a Thanos sidecar
    /// announces for everything this Prometheus holds (`{cluster, replica}` in a fleet), which
    /// the scraped series themselves do not carry.
    pub async fn start_external(
        targets: &[SocketAddr],
        scrape_interval: Duration,
        external_labels: &BTreeMap<String, String>,
    ) -> Result<Prometheus, Error> {
        if scrape_interval.as_millis() == 0 {
            return Err(Error::Invalid(
                "Prometheus needs a scrape interval of at least 1ms".into(),
            ));
        }
        Self::start_with(with_external_labels(
            config_yaml(targets, scrape_interval),
            external_labels,
        ))
        .await
    }

    async fn start_with(config_text: String) -> Result<Prometheus, Error> {
        let bin = binary()?;
        let dir = paths::instance_dir("ocm-testenv-prometheus")?;
        let config = dir.join("prometheus.yml");
        write_file(&config, &config_text)?;
        let mut prometheus = Prometheus {
            bin,
            dir,
            port: 0,
            child: None,
        };
        let mut attempt = 1;
        loop {
            prometheus.port = free_port()?;
            match prometheus.spawn_and_wait().await {
                Err(Error::ProcessExited { ref tail, .. })
                    if attempt < START_ATTEMPTS && tail.contains("address already in use") =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(prometheus),
            }
        }
    }

    /// `http://127.0.0.1:<port>`, the same across restarts.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The listen address (what [`crate::http::get`] takes).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ManagedChild::pid)
    }

    /// The directory holding the config, the data (`data/`) and the log (`prometheus.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the process (SIGKILL, as a crash would) and reaps it; the data stays for
    /// [`Prometheus::start_again`]. Idempotent.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            child.kill();
        }
    }

    /// Starts the stopped Prometheus again on the same port with the same data; returns once
    /// it is ready. Fails if it is running, or if its port was taken meanwhile.
    pub async fn start_again(&mut self) -> Result<(), Error> {
        if self.child.as_ref().is_some_and(ManagedChild::running) {
            return Err(Error::Invalid(format!(
                "Prometheus on port {} is running: stop it before starting it again",
                self.port
            )));
        }
        self.stop();
        self.spawn_and_wait().await
    }

    async fn spawn_and_wait(&mut self) -> Result<(), Error> {
        let log = self.dir.join("prometheus.log");
        let mut cmd = Command::new(&self.bin);
        cmd.arg(format!(
            "--config.file={}",
            self.dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            self.dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
        .arg("--log.level=warn");
        let child = ManagedChild::spawn("prometheus", cmd, &log).map_err(Error::io(format!(
            "start {} (log: {})",
            self.bin.display(),
            log.display()
        )))?;
        // Held by self at once, so that a failed wait below still kills it on drop.
        self.child = Some(child);
        let addr = self.addr();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answer = tokio::time::timeout(PROBE_TIMEOUT, http::get(addr, "/-/ready")).await;
            // After the probe: a 200 from whoever took the port first must not count.
            if let Some(status) = self.child.as_ref().and_then(ManagedChild::exited) {
                self.child = None;
                return Err(exited(status, &log));
            }
            let last = match answer {
                Ok(Ok((200, _))) => return Ok(()),
                Ok(Ok((status, body))) => format!("{status} {}", body.trim()),
                Ok(Err(e)) => e,
                Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
            };
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: format!("Prometheus on {addr}"),
                    seconds: READY_TIMEOUT.as_secs(),
                    detail: format!(" (last answer: {last}); log: {}", log.display()),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // Killed first: a running Prometheus would write into the directory being removed.
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One job, `fleet`, with `honor_labels` so that the exporter's `cluster` (and any `instance`
/// or `job`) labels are kept as the fleet's exporters set them.
fn config_yaml(targets: &[SocketAddr], scrape_interval: Duration) -> String {
    let targets = targets
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    // Prometheus durations take `ms`; its default scrape timeout (10s) is cut down to the
    // interval when the interval is shorter.
    let interval = scrape_interval.as_millis();
    [
        "global:".to_owned(),
        format!("  scrape_interval: {interval}ms"),
        format!("  evaluation_interval: {interval}ms"),
        "scrape_configs:".to_owned(),
        "  - job_name: fleet".to_owned(),
        "    honor_labels: true".to_owned(),
        "    metrics_path: /metrics".to_owned(),
        "    static_configs:".to_owned(),
        format!("      - targets: [{targets}]"),
        String::new(),
    ]
    .join("\n")
}

/// `config` (one of the above) with `global.external_labels` set.
fn with_external_labels(config: String, labels: &BTreeMap<String, String>) -> String {
    // A JSON string is a YAML flow scalar: any value is quoted safely.
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}: {}", serde_json::Value::from(v.as_str())))
        .collect();
    config.replacen(
        "global:\n",
        &format!("global:\n  external_labels: {{{}}}\n", labels.join(", ")),
        1,
    )
}

/// A scrape target with the labels Prometheus attaches to its series (see
/// [`Prometheus::start_labelled`]).
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub labels: BTreeMap<String, String>,
}

/// One job, `fleet`, a static config per target with its labels, which win over served ones.
fn labelled_config_yaml(targets: &[Target], scrape_interval: Duration) -> String {
    let interval = scrape_interval.as_millis();
    let mut lines = vec![
        "global:".to_owned(),
        format!("  scrape_interval: {interval}ms"),
        format!("  evaluation_interval: {interval}ms"),
        "scrape_configs:".to_owned(),
        "  - job_name: fleet".to_owned(),
        "    honor_labels: false".to_owned(),
        "    metrics_path: /metrics".to_owned(),
        "    static_configs:".to_owned(),
    ];
    for t in targets {
        lines.push(format!("      - targets: [\"{}\"]", t.addr));
        // A JSON string is a YAML flow scalar: any value is quoted safely.
        let labels: Vec<String> = t
            .labels
            .iter()
            .map(|(k, v)| format!("{k}: {}", serde_json::Value::from(v.as_str())))
            .collect();
        lines.push(format!("        labels: {{{}}}", labels.join(", ")));
    }
    lines.push(String::new());
    lines.join("\n")
}

/// The data of an instant query's answer: `{"resultType": ..., "result": [...]}` (see
/// [`samples`] for a vector). An error when Prometheus cannot be reached or rejects the query.
///
/// `url` is what [`Prometheus::url`] returns: `http://<ip>:<port>`.
pub async fn query(url: &str, promql: &str) -> Result<serde_json::Value, Error> {
    let addr: SocketAddr = url
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .and_then(|hostport| hostport.parse().ok())
        .ok_or_else(|| Error::Invalid(format!("{url} is not http://<ip>:<port>")))?;
    let path = format!("/api/v1/query?query={}", percent_encode(promql));
    let (status, body) = http::get(addr, &path).await.map_err(|e| Error::Io {
        action: format!("query {promql:?}"),
        source: std::io::Error::other(e),
    })?;
    let answer: serde_json::Value = serde_json::from_str(&body).map_err(|e| Error::Parse {
        file: format!("Prometheus's answer ({status}) to {promql:?}"),
        message: e.to_string(),
    })?;
    if status != 200 || answer["status"] != "success" {
        return Err(Error::Invalid(format!(
            "Prometheus answered {status} to {promql:?}: {} {}",
            answer["errorType"].as_str().unwrap_or("?"),
            answer["error"].as_str().unwrap_or("(no message)"),
        )));
    }
    Ok(answer["data"].clone())
}

/// One element of an instant vector: its labels (with `__name__` if kept) and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The elements of a [`query`] answer that is an instant vector (empty when nothing matched).
pub fn samples(data: &serde_json::Value) -> Result<Vec<Sample>, Error> {
    let bad = |message: String| Error::Parse {
        file: "a Prometheus query answer".into(),
        message,
    };
    if data["resultType"] != "vector" {
        return Err(bad(format!(
            "resultType is {}, not vector",
            data["resultType"]
        )));
    }
    let result = data["result"]
        .as_array()
        .ok_or_else(|| bad("no result array".into()))?;
    result
        .iter()
        .map(|item| {
            let labels = item["metric"]
                .as_object()
                .ok_or_else(|| bad(format!("no metric object in {item}")))?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            // Values come as [unix time, "string"] so that NaN and ±Inf survive JSON.
            let value = item["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| bad(format!("no value in {item}")))?;
            Ok(Sample { labels, value })
        })
        .collect()
}

/// RFC 3986 percent-encoding of everything but the unreserved characters, for a query value.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) fn free_port() -> Result<u16, Error> {
    // Free when picked; `start` retries if it is taken before Prometheus binds it.
    crate::ports::free()
}

pub(crate) fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(Error::io(format!("write {}", path.display())))
}

fn exited(status: String, log: &Path) -> Error {
    exited_process("prometheus", status, log)
}

/// [`Error::ProcessExited`] for `process`, with the last lines of its log.
pub(crate) fn exited_process(process: &'static str, status: String, log: &Path) -> Error {
    crate::process::exited(process, status, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encodes_promql() {
        assert_eq!(
            percent_encode("up{job=\"fleet\"} > 0.5"),
            "up%7Bjob%3D%22fleet%22%7D%20%3E%200.5"
        );
    }

    #[test]
    fn labelled_config_sets_labels_per_target() {
        let yaml = labelled_config_yaml(
            &[Target {
                addr: "127.0.0.1:1".parse().expect("addr"),
                labels: BTreeMap::from([("tenant".to_owned(), "a\"b".to_owned())]),
            }],
            Duration::from_secs(1),
        );
        assert!(yaml.contains("honor_labels: false\n"), "{yaml}");
        assert!(
            yaml.contains(
                "      - targets: [\"127.0.0.1:1\"]\n        labels: {tenant: \"a\\\"b\"}\n"
            ),
            "{yaml}"
        );
    }

    #[test]
    fn external_labels_go_under_global() {
        let yaml = with_external_labels(
            config_yaml(
                &["127.0.0.1:1".parse().expect("addr")],
                Duration::from_secs(1),
            ),
            &BTreeMap::from([
                ("cluster".to_owned(), "c1".to_owned()),
                ("replica".to_owned(), "a".to_owned()),
            ]),
        );
        assert!(
            yaml.starts_with("global:\n  external_labels: {cluster: \"c1\", replica: \"a\"}\n  scrape_interval: 1000ms\n"),
            "{yaml}"
        );
    }

    #[test]
    fn config_lists_targets_and_interval() {
        let yaml = config_yaml(
            &[
                "127.0.0.1:1".parse().expect("addr"),
                "127.0.0.1:2".parse().expect("addr"),
            ],
            Duration::from_millis(1500),
        );
        assert!(yaml.contains("scrape_interval: 1500ms\n"), "{yaml}");
        assert!(yaml.contains("honor_labels: true\n"), "{yaml}");
        assert!(
            yaml.contains(
                "    static_configs:\n      - targets: [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n"
            ),
            "{yaml}"
        );
    }
}
