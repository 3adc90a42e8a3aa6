//! A real Thanos fleet for tests of the Thanos-backed scorer: per cluster a Prometheus (an HA
//! pair when asked) with `external_labels {cluster, replica}` and its sidecar, and Thanos Query
//! over the sidecars with `--query.replica-label=replica`, as real fleets run it.
//!
//! The `thanos` binary is built by `tests/thanos/build.sh` (called by `tests/run.sh`) into the
//! cache at the version pinned as `THANOS_VERSION` in `tests/control-plane/versions.env`;
//! [`binary`] computes the same path. Every process is a child that cannot outlive the test
//! binary (see [`crate::process`]); each keeps its ports across [`Store::stop_sidecar`] /
//! [`Store::start_sidecar_again`] and the Prometheus equivalents, and its log in its directory.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! use std::time::Duration;
//! use testenv::prometheus::Exporter;
//! use testenv::thanos::{EndpointMode, Query, Store};
//!
//! let exporter = Exporter::start().await?;
//! exporter.set("kube_node_status_allocatable{node=\"n1\",resource=\"cpu\"} 4\n");
//! let mut store = Store::start("c1", "a", exporter.addr(), Duration::from_secs(1)).await?;
//! let query = Query::start(&[store.grpc_addr()], EndpointMode::Strict).await?;
//! store.stop_sidecar();                 // one dead store
//! store.start_sidecar_again().await?;  // back on the same port
//! # let _ = query.url(); Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::ManagedChild;
use crate::prometheus::{Prometheus, exited_process, free_port};
use crate::{Error, http, paths};

/// Overrides the cached binary.
pub const BINARY_ENV: &str = "OCM_THANOS";
/// The key of the pin in `tests/control-plane/versions.env`.
const VERSION_KEY: &str = "THANOS_VERSION";
/// The external label that names a replica of an HA pair: what Query deduplicates along.
pub const REPLICA_LABEL: &str = "replica";
/// The external label that names the cluster.
pub const CLUSTER_LABEL: &str = "cluster";
/// A sidecar is ready once it has read Prometheus' external labels; Query at once. Generous
/// for a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts with fresh ports when a port picked as free was taken before the process bound it.
const START_ATTEMPTS: usize = 3;

/// The thanos binary: `$OCM_THANOS` if set, else `<cache root>/thanos-<THANOS_VERSION>/thanos`,
/// where `tests/thanos/build.sh` puts it.
pub fn binary() -> Result<PathBuf, Error> {
    let (path, origin) = match std::env::var_os(BINARY_ENV) {
        Some(p) => (PathBuf::from(p), BINARY_ENV),
        None => {
            let version = paths::version(VERSION_KEY).ok_or_else(|| {
                Error::Invalid(format!(
                    "no {VERSION_KEY} in tests/control-plane/versions.env"
                ))
            })?;
            let control_plane = paths::cache_root();
            let root = control_plane.parent().unwrap_or(&control_plane);
            (
                root.join(format!("thanos-{version}")).join("thanos"),
                "the cache",
            )
        }
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Io {
            action: format!(
                "run thanos: no file at {} (from {origin}); build it with tests/thanos/build.sh or \
                 tests/run.sh, or point {BINARY_ENV} at one",
                path.display()
            ),
            source: std::io::ErrorKind::NotFound.into(),
        })
    }
}

/// How Query holds its endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointMode {
    /// `--endpoint`: a store that fails its health check leaves Query's set until it answers.
    Endpoint,
    /// `--endpoint-strict`: every store stays in the set, dead or not (a common production
    /// setting): each query still asks the dead one.
    Strict,
}

impl EndpointMode {
    fn flag(self) -> &'static str {
        match self {
            EndpointMode::Endpoint => "--endpoint",
            EndpointMode::Strict => "--endpoint-strict",
        }
    }
}

/// One thanos process (a sidecar, a Query) on fixed ports, restartable, killed on drop.
struct Daemon {
    bin: PathBuf,
    name: &'static str,
    /// Arguments besides the ports.
    args: Vec<String>,
    http_port: u16,
    grpc_port: u16,
    log: PathBuf,
    child: Option<ManagedChild>,
}

impl Daemon {
    /// Starts on free ports (fresh ones when they were taken meanwhile); returns once ready.
    async fn start(name: &'static str, args: Vec<String>, dir: &Path) -> Result<Daemon, Error> {
        let mut daemon = Daemon {
            bin: binary()?,
            name,
            args,
            http_port: 0,
            grpc_port: 0,
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        let mut attempt = 1;
        loop {
            daemon.http_port = free_port()?;
            daemon.grpc_port = free_port()?;
            match daemon.spawn_and_wait().await {
                Err(Error::ProcessExited { ref tail, .. })
                    if attempt < START_ATTEMPTS && tail.contains("address already in use") =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(daemon),
            }
        }
    }

    fn http_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http_port))
    }

    fn grpc_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.grpc_port))
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ManagedChild::pid)
    }

    /// SIGKILL, as a crash; idempotent.
    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            child.kill();
        }
    }

    async fn start_again(&mut self) -> Result<(), Error> {
        if self.child.as_ref().is_some_and(ManagedChild::running) {
            return Err(Error::Invalid(format!(
                "thanos {} on port {} is running: stop it before starting it again",
                self.name, self.http_port
            )));
        }
        self.stop();
        self.spawn_and_wait().await
    }

    async fn spawn_and_wait(&mut self) -> Result<(), Error> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg(self.name)
            .arg(format!("--http-address=127.0.0.1:{}", self.http_port))
            .arg(format!("--grpc-address=127.0.0.1:{}", self.grpc_port))
            .arg("--log.level=warn")
            .args(&self.args);
        let child = ManagedChild::spawn("thanos", cmd, &self.log).map_err(Error::io(format!(
            "start {} {} (log: {})",
            self.bin.display(),
            self.name,
            self.log.display()
        )))?;
        self.child = Some(child);
        let addr = self.http_addr();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answer = tokio::time::timeout(PROBE_TIMEOUT, http::get(addr, "/-/ready")).await;
            if let Some(status) = self.child.as_ref().and_then(ManagedChild::exited) {
                self.child = None;
                return Err(exited_process("thanos", status, &self.log));
            }
            let last = match answer {
                Ok(Ok((200, _))) => return Ok(()),
                Ok(Ok((status, body))) => format!("{status} {}", body.trim()),
                Ok(Err(e)) => e,
                Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
            };
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: format!("thanos {} on {addr}", self.name),
                    seconds: READY_TIMEOUT.as_secs(),
                    detail: format!(" (last answer: {last}); log: {}", self.log.display()),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One cluster's store (one replica of it): a Prometheus scraping the cluster's exporter
/// (whose series carry no `cluster` label) with `external_labels {cluster, replica}`, and its
/// sidecar, started once Prometheus is ready. Dropping it kills both and removes their data.
pub struct Store {
    cluster: String,
    replica: String,
    prometheus: Prometheus,
    sidecar: Daemon,
}

impl Store {
    pub async fn start(
        cluster: &str,
        replica: &str,
        target: SocketAddr,
        scrape_interval: Duration,
    ) -> Result<Store, Error> {
        let labels = BTreeMap::from([
            (CLUSTER_LABEL.to_owned(), cluster.to_owned()),
            (REPLICA_LABEL.to_owned(), replica.to_owned()),
        ]);
        let prometheus = Prometheus::start_external(&[target], scrape_interval, &labels).await?;
        let sidecar = Daemon::start(
            "sidecar",
            vec![
                format!("--prometheus.url={}", prometheus.url()),
                format!("--tsdb.path={}", prometheus.dir().join("data").display()),
            ],
            prometheus.dir(),
        )
        .await?;
        Ok(Store {
            cluster: cluster.to_owned(),
            replica: replica.to_owned(),
            prometheus,
            sidecar,
        })
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The sidecar's StoreAPI, what Query is pointed at.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.sidecar.grpc_addr()
    }

    /// Process ids of Prometheus and the sidecar while running (for memory figures).
    pub fn pids(&self) -> Vec<u32> {
        self.prometheus
            .pid()
            .into_iter()
            .chain(self.sidecar.pid())
            .collect()
    }

    /// Kills the sidecar (SIGKILL); Prometheus keeps scraping. Idempotent.
    pub fn stop_sidecar(&mut self) {
        self.sidecar.stop();
    }

    /// Starts the sidecar again on the same ports; returns once it is ready.
    pub async fn start_sidecar_again(&mut self) -> Result<(), Error> {
        self.sidecar.start_again().await
    }

    /// Kills Prometheus (SIGKILL); the sidecar stays up and fails its calls. Idempotent.
    pub fn stop_prometheus(&mut self) {
        self.prometheus.stop();
    }

    /// Starts Prometheus again on the same port with the same data; returns once it is ready.
    pub async fn start_prometheus_again(&mut self) -> Result<(), Error> {
        self.prometheus.start_again().await
    }

    /// The directory of the config, the data and both logs (`prometheus.log`, `sidecar.log`).
    pub fn dir(&self) -> &Path {
        self.prometheus.dir()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // The sidecar first: it reads the directory Prometheus' drop removes.
        self.sidecar.stop();
    }
}

/// Thanos Query over `endpoints` with `--query.replica-label=replica`, in its own directory
/// (its log); killed and removed on drop.
pub struct Query {
    daemon: Daemon,
    dir: PathBuf,
}

impl Query {
    pub async fn start(endpoints: &[SocketAddr], mode: EndpointMode) -> Result<Query, Error> {
        let dir = paths::instance_dir("ocm-testenv-thanos-query")?;
        let mut args = vec![format!("--query.replica-label={REPLICA_LABEL}")];
        args.extend(endpoints.iter().map(|e| format!("{}={e}", mode.flag())));
        let daemon = match Daemon::start("query", args, &dir).await {
            Ok(d) => d,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        Ok(Query { daemon, dir })
    }

    /// `http://127.0.0.1:<port>`: the Prometheus-compatible query API.
    pub fn url(&self) -> String {
        format!("http://{}", self.daemon.http_addr())
    }

    pub fn addr(&self) -> SocketAddr {
        self.daemon.http_addr()
    }

    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The directory holding `query.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Query {
    fn drop(&mut self) {
        self.daemon.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
