//! Scale harness for the placement controller: a real control plane (testenv's etcd and
//! kube-apiserver with the upstream OCM CRDs), the release `placement-scheduler controller` as a
//! child process, and two scenarios.
//!
//! ```sh
//! # upstream's benchmark shape: N clusters, M placements (numberOfClusters 10, Exact,
//! # AddOn demo/demo + ResourceAllocatableCPU + Balance)
//! cargo run --release -p placement-scheduler --example scale -- --scenario throughput --placements 1000 --clusters 1000
//! # reaction latency: 1,000 clusters x 100 placements, 100 score updates and 100 taints
//! cargo run --release -p placement-scheduler --example scale -- --scenario reaction
//! # the same, then the score updates again while a hostile Placement is being scheduled (a
//! # celSelector spending the whole per-cluster CEL budget on each of the 10,000 clusters,
//! # re-triggered so that it stays busy): the normal placements' p50/p99 beside the unloaded ones.
//! # A run this size outlasts the default 10-minute score validity bound (scores written at
//! # setup would expire mid-run and move decisions on their own): turn it off.
//! cargo run --release -p placement-scheduler --example scale -- --scenario reaction --hostile \
//!     --clusters 10000 --placements 200 --controller-arg=--max-score-validity=0s
//! # everything: 100x1, 1,000x1,000, 10,000x1,000 and reaction, each on a fresh control plane
//! cargo run --release -p placement-scheduler --example scale -- --scenario all --out scale.md
//!
//! # Side by side with upstream OCM's placement controller (`--controller both`: ours, then
//! # upstream, each on a fresh control plane; `upstream` alone works too). Upstream's binary is
//! # built from its Go module by tests/ocm/build.sh on first use (OCM_VERSION in
//! # tests/control-plane/versions.env) and cached; `--upstream-bin` names another.
//! # Issue 17 (throughput, writes per Placement by verb, CPU, peak RSS, then 30 s idle):
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario throughput --placements 100 --clusters 10 --out t-100x10.md
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario throughput --placements 1000 --clusters 1000 --out t-1000x1000.md
//! # Issue 22 (moves at 100x1, 2,000x1, 2,000x100 and the burst at 1,000x100, one table):
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario react --out react.md
//! # one shape: --scenario moves|burst --clusters N --placements M; a prebuilt controller:
//! # --controller-bin /work/bench/base/placement-scheduler (e.g. the "before" binary).
//! ```
//!
//! scheduler/examples/scale/: `upstream.rs` starts upstream's controller (its flags, its HTTPS
//! metrics), `moves.rs` runs issue 22's shapes; this file holds the control plane, the
//! measurement helpers and the throughput and reaction scenarios.
//!
//! The harness builds the controller binary itself (`cargo build -p placement-scheduler --bin
//! placement-scheduler` in the harness's own profile) unless `--no-build` or
//! `--controller-bin` is given. It reads the controller's CPU time from `/proc/<pid>/stat`, its
//! peak RSS from `VmHWM` in `/proc/<pid>/status`, its own counters from its `/metrics`, and
//! the apiserver's `apiserver_request_total` (with the harness's own requests subtracted).
//! Everything it starts is stopped at the end, on error and on Ctrl-C / SIGTERM; the
//! controller also gets `PR_SET_PDEATHSIG` through `setpriv` when that is installed, so that
//! it dies with the harness even when the harness is killed outright. The targets of the
//! issue are reported, not asserted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use serde_json::{Value, json};
use testenv::procfs;

mod moves;
mod upstream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

const CLUSTERSET_LABEL: &str = ocm_api::wellknown::label::CLUSTERSET;
const PLACEMENT_LABEL: &str = ocm_api::wellknown::label::PLACEMENT;
const GROUP_LABEL: &str = "scale.ocm-placement.io/group";
const TAINT_KEY: &str = "scale.ocm-placement.io/drain";
const FIELD_MANAGER: &str = "scale-harness";

/// Scale harness for the placement controller on a real control plane.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// What to run: `all` runs upstream's three benchmark sizes and the reaction scenario, each
    /// on a fresh control plane.
    #[arg(long, value_enum, default_value_t = Scenario::Throughput)]
    scenario: Scenario,
    /// Placements (default: throughput 100, reaction 100).
    #[arg(long)]
    placements: Option<usize>,
    /// Clusters (default: throughput 1, reaction 1000).
    #[arg(long)]
    clusters: Option<usize>,
    /// Reaction: how many score updates, and how many taints, to measure.
    #[arg(long, default_value_t = 100)]
    changes: usize,
    /// Also write the markdown report to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Harness requests in flight at once while creating clusters, scores and placements.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// How often the throughput scenario lists the PlacementDecisions (`1s`, `500ms`; default
    /// 1 s, 2 s from 5,000 placements on: a list of 10,000 decisions is work for the apiserver).
    #[arg(long, value_parser = parse_duration)]
    poll_interval: Option<Duration>,
    /// Give up waiting for the decisions after this long.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    timeout: Duration,
    /// After every decision is there, "settled" is when the controller has made no write for
    /// this long. Longer than the controller's `--balance-delay` (5m:
    /// placements using Balance are rescheduled in one wave that long after decisions moved)
    /// and the default `scoreRateLimit` (1m: deferred score updates).
    #[arg(long, default_value = "6m", value_parser = parse_duration)]
    settle: Duration,
    /// Stop waiting for "settled" after this long (from when all were decided).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    settle_timeout: Duration,
    /// Reaction: after the unloaded measurements, measure the score updates again while a
    /// hostile Placement (see `hostile_placement`) is being scheduled.
    #[arg(long)]
    hostile: bool,
    /// Reaction: how long one change may take before it counts as timed out.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    change_timeout: Duration,
    /// The controller's --workers.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// The controller's --client-qps (generous: the apiserver should be the limit).
    #[arg(long, default_value_t = 5000.0)]
    client_qps: f64,
    /// The controller's --client-burst.
    #[arg(long, default_value_t = 10000)]
    client_burst: u32,
    /// The controller's --event-debounce (empty, the default: the controller's own default;
    /// `100ms` was the default before leading-edge scheduling).
    #[arg(long, default_value = "")]
    event_debounce: String,
    /// The controller's RUST_LOG.
    #[arg(long, default_value = "info")]
    controller_log: String,
    /// More arguments for `placement-scheduler controller` (repeatable), e.g.
    /// `--controller-arg=--balance-delay=5s`.
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    controller_args: Vec<String>,
    /// The controller binary to run (default: `placement-scheduler` next to this example's
    /// target directory, built first).
    #[arg(long)]
    controller_bin: Option<PathBuf>,
    /// Do not run `cargo build` for the controller binary first.
    #[arg(long)]
    no_build: bool,
    /// Which controller: ours, upstream OCM's (`placement controller`, built from its Go module
    /// by tests/ocm/build.sh on first use), or both, one after the other on fresh control
    /// planes, with a side-by-side table.
    #[arg(long, value_enum, default_value_t = Which::Ours)]
    controller: Which,
    /// Upstream's binary (default: the one tests/ocm/build.sh builds and caches).
    #[arg(long)]
    upstream_bin: Option<PathBuf>,
    /// More arguments for upstream's `placement controller` (repeatable).
    #[arg(long = "upstream-arg", allow_hyphen_values = true)]
    upstream_args: Vec<String>,
    /// Throughput: once settled, the controller's CPU, passes and writes over this long with
    /// nothing changing (`0s`: skip).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    idle: Duration,
    /// Moves: score moves measured per shape.
    #[arg(long, default_value_t = 30)]
    moves: usize,
    /// Burst: score writes in the burst (over every cluster, as fast as the harness can).
    #[arg(long, default_value_t = 1000)]
    burst_writes: usize,
    /// Where the kubeconfig and the controller's logs go (default: a new directory under
    /// $TMPDIR; kept, so that the logs can be read after a run).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// N clusters, M placements in upstream's benchmark shape: time until all are decided.
    Throughput,
    /// Latency from a score update, and from a taint, to the moved PlacementDecision.
    Reaction,
    /// Throughput at 100x1, 1,000x1,000 and 10,000x1,000, then reaction.
    All,
    /// Issue 22's shape: N clusters with a score each, M placements of one cluster all reading
    /// the same scores; a move writes one score that makes another cluster the best.
    Moves,
    /// N clusters, M placements as in `moves`; every cluster's score rewritten at once.
    Burst,
    /// Issue 22's table: moves at 100x1, 2,000x1 and 2,000x100, then the burst at 1,000x100.
    React,
}

/// The controllers a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    Ours,
    Upstream,
    Both,
}

impl Which {
    fn kinds(self) -> &'static [Kind] {
        match self {
            Which::Ours => &[Kind::Ours],
            Which::Upstream => &[Kind::Upstream],
            Which::Both => &[Kind::Ours, Kind::Upstream],
        }
    }
}

/// One controller implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ours,
    Upstream,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::Upstream => "upstream",
        }
    }
}

/// `1.5`, `1.5s`, `250ms`, `2m`, `1h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit in {s:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The runtime is built here rather than with #[tokio::main] only to keep `main` short; the
    // scenarios run on this (main) thread, which lives as long as the process: the controller
    // child's parent-death signal is tied to the thread that forked it.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: cannot listen for SIGTERM: {e}");
                    return ExitCode::FAILURE;
                }
            };
        // When a signal wins, the scenario future is dropped here: the controller child and the
        // control plane it owns are killed by their Drop impls before we return.
        tokio::select! {
            r = run(&args) => match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: stopping the controller, kube-apiserver and etcd");
                ExitCode::from(130)
            }
            _ = term.recv() => {
                eprintln!("terminated: stopping the controller, kube-apiserver and etcd");
                ExitCode::from(143)
            }
        }
    });
    // Do not wait for blocking tasks (a stuck request) longer than this.
    rt.shutdown_timeout(Duration::from_secs(5));
    code
}

async fn run(args: &Args) -> Result<()> {
    let kinds = args.controller.kinds();
    let ours = if kinds.contains(&Kind::Ours) {
        Some(controller_binary(args)?)
    } else {
        None
    };
    let upstream = if kinds.contains(&Kind::Upstream) {
        Some(upstream::binary(args)?)
    } else {
        None
    };
    // The tree the controller was just built from (others may commit while the run goes on).
    let rev = if args.controller_bin.is_some() || args.no_build {
        format!("an existing binary (tree now at {})", git_rev())
    } else {
        git_rev()
    };
    let work_dir = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("ocm-scale-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| format!("create {}: {e}", work_dir.display()))?;
    for (k, b) in [("ours", &ours), ("upstream", &upstream)] {
        if let Some(b) = b {
            eprintln!("controller ({k}): {}", b.display());
        }
    }
    eprintln!(
        "work dir (kubeconfig, controller logs): {}",
        work_dir.display()
    );
    let env = Env {
        args,
        ours,
        upstream,
        work_dir,
    };
    let started = jiff::Timestamp::now();
    let mut sections = Vec::new();
    let mut summary = Vec::new();
    let mut throughputs = Vec::new();
    let mut reactions = Vec::new();
    match args.scenario {
        Scenario::Throughput => {
            for &kind in kinds {
                let r = throughput(
                    &env,
                    kind,
                    args.placements.unwrap_or(100),
                    args.clusters.unwrap_or(1),
                )
                .await?;
                summary.push(r.summary_row());
                sections.push(r.section());
                throughputs.push(r);
            }
        }
        Scenario::Reaction => {
            for &kind in kinds {
                let r = reaction(
                    &env,
                    kind,
                    args.clusters.unwrap_or(1000),
                    args.placements.unwrap_or(100),
                )
                .await?;
                sections.push(r.section());
            }
        }
        Scenario::All => {
            for (p, c) in [(100, 1), (1000, 1000), (10_000, 1000)] {
                for &kind in kinds {
                    let r = throughput(&env, kind, p, c).await?;
                    eprintln!("{}", r.summary_row());
                    summary.push(r.summary_row());
                    sections.push(r.section());
                    throughputs.push(r);
                }
            }
            for &kind in kinds {
                let r = reaction(&env, kind, 1000, 100).await?;
                sections.push(r.section());
            }
        }
        Scenario::Moves | Scenario::Burst | Scenario::React => {
            let shapes: Vec<(moves::Shape, usize, usize)> = match args.scenario {
                Scenario::Moves => vec![(
                    moves::Shape::Moves,
                    args.clusters.unwrap_or(100),
                    args.placements.unwrap_or(1),
                )],
                Scenario::Burst => vec![(
                    moves::Shape::Burst,
                    args.clusters.unwrap_or(1000),
                    args.placements.unwrap_or(100),
                )],
                _ => vec![
                    (moves::Shape::Moves, 100, 1),
                    (moves::Shape::Moves, 2000, 1),
                    (moves::Shape::Moves, 2000, 100),
                    (moves::Shape::Burst, 1000, 100),
                ],
            };
            for (shape, c, p) in shapes {
                for &kind in kinds {
                    let r = moves::run(&env, kind, shape, c, p).await?;
                    eprintln!("{}", r.detail_row());
                    reactions.push(r);
                }
            }
            sections.push(moves::section(&reactions));
        }
    }
    if !throughputs.is_empty() {
        sections.insert(0, compare_throughput(&throughputs));
    }
    let report = render_report(args, started, &summary, &sections, &rev);
    print!("{report}");
    if let Some(out) = &args.out {
        std::fs::write(out, &report).map_err(|e| format!("write {}: {e}", out.display()))?;
        eprintln!("report written to {}", out.display());
    }
    Ok(())
}

struct Env<'a> {
    args: &'a Args,
    /// Our controller's binary, when the run measures it.
    ours: Option<PathBuf>,
    /// Upstream's, when the run measures it.
    upstream: Option<PathBuf>,
    work_dir: PathBuf,
}

impl Env<'_> {
    fn binary(&self, kind: Kind) -> Result<&Path> {
        match kind {
            Kind::Ours => self.ours.as_deref(),
            Kind::Upstream => self.upstream.as_deref(),
        }
        .ok_or_else(|| format!("no {} controller binary", kind.name()).into())
    }
}

// ---------------------------------------------------------------------------------------------
// The controller binary and process

/// `target/<profile>/placement-scheduler`, next to this example (`target/<profile>/examples/`),
/// built first with cargo unless told otherwise.
fn controller_binary(args: &Args) -> Result<PathBuf> {
    if let Some(p) = &args.controller_bin {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(format!("--controller-bin {}: no such file", p.display()).into())
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("unexpected executable path {}", exe.display()))?;
    let profile = profile_dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bin = profile_dir.join("placement-scheduler");
    if profile != "release" {
        eprintln!(
            "warning: the harness runs from the {profile:?} profile, so it measures a {profile:?} controller; use --release for meaningful figures"
        );
    }
    if !args.no_build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-p",
            "placement-scheduler",
            "--bin",
            "placement-scheduler",
        ]);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        eprintln!("building the controller: {cmd:?}");
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run cargo (pass --no-build to skip): {e}"))?;
        if !status.success() {
            return Err(format!("cargo build of placement-scheduler failed ({status})").into());
        }
    }
    if !bin.is_file() {
        return Err(format!(
            "{} is missing: run `cargo build --release -p placement-scheduler` first",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("pick a free port: {e}"))?;
    Ok(l.local_addr()?.port())
}

/// A placement controller (ours or upstream's) as a child process; killed and reaped on drop.
struct Controller {
    child: Child,
    pid: u32,
    /// Ours: its plain-HTTP metrics port. Upstream: its HTTPS server's.
    metrics: SocketAddr,
    /// Upstream: a client for its HTTPS server.
    https: Option<Client>,
    log: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Controller {
    async fn start(env: &Env<'_>, kind: Kind, hub: &Hub, log: PathBuf) -> Result<Self> {
        let args = env.args;
        let bin = env.binary(kind)?;
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let mut cmd = match which("setpriv") {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        // Only what we pass: no KUBECONFIG, NAMESPACES, WORKERS... from the caller's shell.
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        let mut https = None;
        match kind {
            Kind::Ours => {
                cmd.env("RUST_LOG", &args.controller_log);
                cmd.arg("controller")
                    .arg("--kubeconfig")
                    .arg(&hub.kubeconfig)
                    .arg(format!("--client-qps={}", args.client_qps))
                    .arg(format!("--client-burst={}", args.client_burst))
                    .arg("--leader-elect=false")
                    .arg(format!("--metrics-bind-address={metrics}"))
                    .arg("--debug-bind-address=")
                    .arg(format!("--workers={}", args.workers))
                    .args(
                        (!args.event_debounce.is_empty())
                            .then(|| format!("--event-debounce={}", args.event_debounce)),
                    )
                    .arg(format!("--namespaces={}", hub.ns))
                    .args(&args.controller_args);
            }
            Kind::Upstream => {
                // Its library writes a self-signed serving certificate under $TMPDIR.
                if let Some(tmp) = std::env::var_os("TMPDIR") {
                    cmd.env("TMPDIR", tmp);
                }
                upstream::command(&mut cmd, args, &hub.kubeconfig, &hub.ns, metrics);
                https = Some(upstream::metrics_client(&hub.cp, metrics)?);
            }
        }
        let out =
            std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let mut c = Controller {
            pid: child.id(),
            child,
            metrics,
            https,
            log,
        };
        c.wait_ready(Duration::from_secs(120)).await?;
        Ok(c)
    }

    fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "the controller exited ({status}); last lines of {}:\n{}",
                self.log.display(),
                tail(&self.log, 20)
            )
            .into()),
            Err(e) => Err(format!("cannot check the controller: {e}").into()),
        }
    }

    async fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            self.check_alive()?;
            let ready = match &self.https {
                Some(c) => upstream::is_up(c).await,
                None => matches!(http_get(self.metrics, "/readyz").await, Ok((200, _))),
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the controller was not ready within {limit:?}; log {}",
                    self.log.display()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn metrics(&self) -> Result<Vec<Sample>> {
        if let Some(c) = &self.https {
            return Ok(upstream::metrics(c).await);
        }
        let (status, body) = http_get(self.metrics, "/metrics").await?;
        if status != 200 {
            return Err(format!("controller /metrics answered {status}").into());
        }
        Ok(parse_metrics(&body))
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A plain HTTP/1.0 GET on loopback (the controller's metrics port).
async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    Ok(testenv::http::get(addr, path).await?)
}

// ---------------------------------------------------------------------------------------------
// /proc

// ---------------------------------------------------------------------------------------------
// Prometheus text

#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (head, rest) = match l.rfind('}') {
                Some(i) => (&l[..=i], &l[i + 1..]),
                None => l.split_once(' ')?,
            };
            let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
            let (name, labels) = match head.split_once('{') {
                Some((n, ls)) => (n, parse_labels(ls.strip_suffix('}').unwrap_or(ls))),
                None => (head.trim(), BTreeMap::new()),
            };
            Some(Sample {
                name: name.to_owned(),
                labels,
                value,
            })
        })
        .collect()
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(o) => value.push(o),
                    None => {}
                },
                '"' => break,
                o => value.push(o),
            }
        }
        out.insert(key.trim().to_owned(), value);
    }
}

fn metric_sum(
    samples: &[Sample],
    name: &str,
    keep: impl Fn(&BTreeMap<String, String>) -> bool,
) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && keep(&s.labels))
        .map(|s| s.value)
        .sum()
}

/// Controller writes by (VERB, resource[/subresource]), the apiserver's spelling.
fn controller_writes(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == "placement_api_writes_total")
    {
        // The controller counts kube's calls (create, patch, delete); the apiserver's verbs.
        let verb = match s.labels.get("verb").map(String::as_str).unwrap_or_default() {
            "create" => "POST".to_owned(),
            other => other.to_uppercase(),
        };
        let resource = s.labels.get("resource").cloned().unwrap_or_default();
        *out.entry((verb, resource)).or_insert(0.0) += s.value;
    }
    out
}

/// Apiserver requests for the OCM and events APIs by (VERB, resource[/subresource]).
fn apiserver_requests(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == "apiserver_request_total")
    {
        let group = s
            .labels
            .get("group")
            .map(String::as_str)
            .unwrap_or_default();
        // Core events too: a controller on client-go's older recorder writes those.
        let core_event =
            group.is_empty() && s.labels.get("resource").is_some_and(|r| r == "events");
        if group != "cluster.open-cluster-management.io" && group != "events.k8s.io" && !core_event
        {
            continue;
        }
        let verb = s.labels.get("verb").cloned().unwrap_or_default();
        let mut resource = s.labels.get("resource").cloned().unwrap_or_default();
        if let Some(sub) = s.labels.get("subresource").filter(|s| !s.is_empty()) {
            resource = format!("{resource}/{sub}");
        }
        *out.entry((verb, resource)).or_insert(0.0) += s.value;
    }
    out
}

/// Writes (POST, PUT, PATCH, DELETE) in a map by (VERB, resource).
fn api_writes(m: &BTreeMap<(String, String), f64>) -> f64 {
    m.iter()
        .filter(|((verb, _), _)| matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .map(|(_, v)| v)
        .sum()
}

fn delta_map(
    after: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// One control plane per run

struct Hub {
    // Dropped last (declared last in the users' structs is not enough: hold it here and drop
    // the controller first explicitly).
    cp: testenv::ControlPlane,
    client: Client,
    ns: String,
    set: String,
    kubeconfig: PathBuf,
    started_in: Duration,
    /// Requests the harness made, by (VERB, resource), to subtract from the apiserver's count.
    harness: Arc<Mutex<BTreeMap<(String, String), f64>>>,
}

impl Hub {
    async fn start(env: &Env<'_>, name: &str) -> Result<Hub> {
        let t = Instant::now();
        eprintln!("[{name}] starting etcd and kube-apiserver with the upstream CRDs");
        let cp = testenv::ControlPlane::start(testenv::Options::default().with_upstream_crds())
            .await
            .map_err(|e| format!("cannot start the control plane: {e}"))?;
        let client = cp.client()?;
        let kubeconfig = env.work_dir.join(format!("{name}.kubeconfig"));
        cp.write_kubeconfig(&kubeconfig)?;
        let hub = Hub {
            cp,
            client,
            ns: name.to_owned(),
            set: name.to_owned(),
            kubeconfig,
            started_in: t.elapsed(),
            harness: Arc::default(),
        };
        retry(|| {
            let api: Api<Namespace> = Api::all(hub.client.clone());
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": hub.ns}})).unwrap_or_default();
            async move { api.create(&PostParams::default(), &ns).await.map(drop) }
        })
        .await?;
        hub.apply_all::<ManagedClusterSet>(
            &hub.set,
            json!({"spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        )
        .await?;
        hub.apply_ns::<ManagedClusterSetBinding>(
            &hub.ns,
            &hub.set,
            json!({"spec": {"clusterSet": hub.set}}),
        )
        .await?;
        Ok(hub)
    }

    fn count(&self, verb: &str, resource: &str, n: f64) {
        let mut h = self.harness.lock().unwrap_or_else(|p| p.into_inner());
        *h.entry((verb.to_owned(), resource.to_owned()))
            .or_insert(0.0) += n;
    }

    fn harness_requests(&self) -> BTreeMap<(String, String), f64> {
        self.harness
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Server-side apply of a cluster-scoped object.
    async fn apply_all<K>(&self, name: &str, body: Value) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let obj = typed_body::<K>(name, None, body);
        let (pp, patch) = (
            PatchParams::apply(FIELD_MANAGER).force(),
            Patch::Apply(&obj),
        );
        retry(|| api.patch(name, &pp, &patch)).await?;
        Ok(())
    }

    /// Server-side apply of a namespaced object.
    async fn apply_ns<K>(&self, ns: &str, name: &str, body: Value) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let obj = typed_body::<K>(name, Some(ns), body);
        let (pp, patch) = (
            PatchParams::apply(FIELD_MANAGER).force(),
            Patch::Apply(&obj),
        );
        retry(|| api.patch(name, &pp, &patch)).await?;
        Ok(())
    }

    async fn apiserver_metrics(&self) -> Result<Vec<Sample>> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let text = self
            .client
            .request_text(req)
            .await
            .map_err(|e| format!("apiserver /metrics: {e}"))?;
        Ok(parse_metrics(&text))
    }

    /// Creates `n` clusters `cluster-00000`... in the set, each with a namespace and an
    /// AddOnPlacementScore `demo` (item `demo`, valid for 1,000 minutes).
    async fn create_fleet(
        &self,
        n: usize,
        concurrency: usize,
        labels: impl Fn(usize) -> BTreeMap<String, String>,
        score: impl Fn(usize) -> i64,
    ) -> Result<()> {
        let valid_until = rfc3339(jiff::Timestamp::now() + jiff::SignedDuration::from_mins(1000));
        let done = AtomicU64::new(0);
        let t = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| {
                let mut l = labels(i);
                l.insert(CLUSTERSET_LABEL.into(), self.set.clone());
                let value = score(i);
                let valid_until = valid_until.clone();
                let done = &done;
                async move {
                    let name = cluster_name(i);
                    self.apply_all::<ManagedCluster>(
                        &name,
                        json!({"metadata": {"labels": l}, "spec": {"hubAcceptsClient": true}}),
                    )
                    .await?;
                    let ns_api: Api<Namespace> = Api::all(self.client.clone());
                    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
                        .unwrap_or_default();
                    let post = PostParams::default();
                    match retry(|| ns_api.create(&post, &ns)).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(BoxError::from(e)),
                    }
                    self.apply_ns::<AddOnPlacementScore>(&name, "demo", json!({}))
                        .await?;
                    set_score(&self.client, &name, value, &valid_until).await?;
                    let k = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if k.is_multiple_of(250) {
                        eprintln!("  {k}/{n} clusters with scores ({:.0?})", t.elapsed());
                    }
                    Ok::<(), BoxError>(())
                }
            })
            .buffer_unordered(concurrency.max(1))
            .try_collect::<()>()
            .await
    }

    /// Creates the placements `p-00000`... concurrently; each one's spec from `spec(i)`.
    async fn create_placements(
        &self,
        m: usize,
        concurrency: usize,
        spec: impl Fn(usize) -> Value,
    ) -> Result<()> {
        let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.ns);
        futures::stream::iter(0..m)
            .map(|i| {
                let p: Result<Placement, _> = serde_json::from_value(json!({
                    "metadata": {"name": placement_name(i), "namespace": self.ns},
                    "spec": spec(i),
                }));
                let api = api.clone();
                async move {
                    let p = p?;
                    let post = PostParams::default();
                    retry(|| api.create(&post, &p)).await?;
                    self.count("POST", "placements", 1.0);
                    Ok::<(), BoxError>(())
                }
            })
            .buffer_unordered(concurrency.max(1))
            .try_collect::<()>()
            .await
    }
}

fn typed_body<K: Resource<DynamicType = ()>>(
    name: &str,
    ns: Option<&str>,
    mut body: Value,
) -> Value {
    body["apiVersion"] = json!(K::api_version(&()));
    body["kind"] = json!(K::kind(&()));
    body["metadata"]["name"] = json!(name);
    if let Some(ns) = ns {
        body["metadata"]["namespace"] = json!(ns);
    }
    body
}

async fn set_score(client: &Client, cluster: &str, value: i64, valid_until: &str) -> Result<()> {
    let api: Api<AddOnPlacementScore> = Api::namespaced(client.clone(), cluster);
    let status = json!({"status": {"scores": [{"name": "demo", "value": value}], "validUntil": valid_until}});
    let (pp, patch) = (PatchParams::default(), Patch::Merge(&status));
    retry(|| api.patch_status("demo", &pp, &patch)).await?;
    Ok(())
}

fn cluster_name(i: usize) -> String {
    format!("cluster-{i:05}")
}

fn placement_name(i: usize) -> String {
    format!("p-{i:05}")
}

/// RFC 3339 at whole seconds, as the API stores times.
fn rfc3339(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// Retries an API call on throttling, server errors and connection failures (the apiserver
/// is busy on 2 cores); returns the last error otherwise.
async fn retry<T, F, Fut>(mut f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(50);
    let mut attempt = 0;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < 8 && transient(&e) => {
                attempt += 1;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 429 || s.code >= 500 || (s.code == 409 && s.reason == "Conflict")
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Points in time and what changed between them

/// Everything read at one moment.
struct Point {
    at: Instant,
    controller_cpu: Duration,
    apiserver_cpu: Duration,
    etcd_cpu: Duration,
    harness_cpu: Duration,
    /// Busy CPU time of the whole machine (all processes).
    machine_cpu: Duration,
    controller: Vec<Sample>,
    apiserver: Vec<Sample>,
    harness: BTreeMap<(String, String), f64>,
}

impl Point {
    async fn take(hub: &Hub, ctl: &Controller) -> Result<Point> {
        let controller = ctl.metrics().await?;
        let apiserver = hub.apiserver_metrics().await?;
        // The harness's GET /metrics is not an OCM request; nothing to subtract for it.
        let [etcd, apiserver_pid] = hub.cp.pids();
        Ok(Point {
            at: Instant::now(),
            controller_cpu: procfs::cpu_time(ctl.pid),
            apiserver_cpu: procfs::cpu_time(apiserver_pid),
            etcd_cpu: procfs::cpu_time(etcd),
            harness_cpu: procfs::cpu_time(std::process::id()),
            machine_cpu: procfs::machine_busy(),
            controller,
            apiserver,
            harness: hub.harness_requests(),
        })
    }
}

/// What happened between two points.
struct Window {
    wall: Duration,
    controller_cpu: Duration,
    apiserver_cpu: Duration,
    etcd_cpu: Duration,
    harness_cpu: Duration,
    /// CPU used by every other process on the machine (a busy neighbour skews the figures).
    other_cpu: Duration,
    /// Controller's own counters: writes by (VERB, resource).
    writes: BTreeMap<(String, String), f64>,
    write_failures: f64,
    /// Every request through the controller's client (its rate limiter's permits).
    requests: f64,
    passes: f64,
    scheduling_seconds: f64,
    /// Apiserver's requests by (VERB, resource), the harness's own subtracted.
    apiserver: BTreeMap<(String, String), f64>,
    /// The harness's own requests in the window.
    harness: BTreeMap<(String, String), f64>,
}

impl Window {
    fn between(a: &Point, b: &Point) -> Window {
        let c = |p: &Point, name: &str| metric_sum(&p.controller, name, |_| true);
        let failed = |p: &Point| {
            metric_sum(&p.controller, "placement_api_writes_total", |l| {
                l.get("result").is_some_and(|r| r != "success")
            })
        };
        let harness = delta_map(&b.harness, &a.harness);
        let mut apiserver = delta_map(
            &apiserver_requests(&b.apiserver),
            &apiserver_requests(&a.apiserver),
        );
        for (k, v) in &harness {
            if let Some(x) = apiserver.get_mut(k) {
                *x -= v;
            }
        }
        apiserver.retain(|_, v| *v != 0.0);
        Window {
            wall: b.at - a.at,
            controller_cpu: b.controller_cpu.saturating_sub(a.controller_cpu),
            apiserver_cpu: b.apiserver_cpu.saturating_sub(a.apiserver_cpu),
            etcd_cpu: b.etcd_cpu.saturating_sub(a.etcd_cpu),
            harness_cpu: b.harness_cpu.saturating_sub(a.harness_cpu),
            other_cpu: b
                .machine_cpu
                .saturating_sub(a.machine_cpu)
                .saturating_sub(b.controller_cpu.saturating_sub(a.controller_cpu))
                .saturating_sub(b.apiserver_cpu.saturating_sub(a.apiserver_cpu))
                .saturating_sub(b.etcd_cpu.saturating_sub(a.etcd_cpu))
                .saturating_sub(b.harness_cpu.saturating_sub(a.harness_cpu)),
            writes: delta_map(
                &controller_writes(&b.controller),
                &controller_writes(&a.controller),
            ),
            write_failures: failed(b) - failed(a),
            requests: c(b, "kube_client_rate_limiter_permits_total")
                - c(a, "kube_client_rate_limiter_permits_total"),
            // Ours or upstream's (each process exports one of them).
            passes: c(b, "placement_scheduling_duration_seconds_count")
                - c(a, "placement_scheduling_duration_seconds_count")
                + c(b, upstream::PASSES)
                - c(a, upstream::PASSES),
            scheduling_seconds: c(b, "placement_scheduling_duration_seconds_sum")
                - c(a, "placement_scheduling_duration_seconds_sum"),
            apiserver,
            harness,
        }
    }

    fn cpu_share(&self) -> f64 {
        pct(self.controller_cpu, self.wall)
    }

    fn total_writes(&self) -> f64 {
        self.writes.values().sum()
    }
}

fn pct(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        100.0 * part.as_secs_f64() / whole.as_secs_f64()
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario: throughput

struct ThroughputResult {
    kind: Kind,
    /// `--idle` after settled: nothing changed.
    idle: Option<Window>,
    placements: usize,
    clusters: usize,
    per_placement: usize,
    control_plane_start: Duration,
    fleet_setup: Duration,
    controller_ready: Duration,
    create: Duration,
    polls: u64,
    poll_interval: Duration,
    /// From the first Placement created until all are decided (None: timed out).
    decided: Option<Duration>,
    decided_count: usize,
    to_decided: Window,
    /// Until the controller made no write for `settle` (None: still writing at the limit).
    settled: Option<Duration>,
    to_settled: Window,
    peak_rss: u64,
    /// Decisions per cluster (min, max) when all were decided, and at the end.
    load_at_decided: (usize, usize),
    load_at_end: (usize, usize),
    concurrency: usize,
    total: Duration,
}

async fn throughput(
    env: &Env<'_>,
    kind: Kind,
    placements: usize,
    clusters: usize,
) -> Result<ThroughputResult> {
    let args = env.args;
    let run_started = Instant::now();
    let name = format!("throughput-{}-{placements}x{clusters}", kind.name());
    let hub = Hub::start(env, &name).await?;
    eprintln!(
        "[{name}] control plane up in {:.1?}; creating {clusters} clusters with AddOnPlacementScores",
        hub.started_in
    );
    let t = Instant::now();
    hub.create_fleet(clusters, args.concurrency, |_| BTreeMap::new(), |_| 80)
        .await?;
    let fleet_setup = t.elapsed();

    let t = Instant::now();
    let mut ctl = Controller::start(
        env,
        kind,
        &hub,
        env.work_dir.join(format!("{name}.controller.log")),
    )
    .await?;
    let controller_ready = t.elapsed();
    eprintln!(
        "[{name}] fleet in {fleet_setup:.1?}, controller (pid {}) ready in {controller_ready:.1?}; creating {placements} placements",
        ctl.pid
    );

    let per_placement = clusters.min(10);
    let spec = json!({
        "numberOfClusters": 10,
        "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}, "weight": 1},
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Balance"}, "weight": 1},
        ]},
    });
    let p0 = Point::take(&hub, &ctl).await?;
    let t0 = Instant::now();
    hub.create_placements(placements, args.concurrency, |_| spec.clone())
        .await?;
    let create = t0.elapsed();
    eprintln!(
        "[{name}] {placements} placements created in {create:.1?}; waiting for their decisions"
    );

    let poll_interval = args.poll_interval.unwrap_or(if placements >= 5000 {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(1)
    });
    let pd_api: Api<PlacementDecision> = Api::namespaced(hub.client.clone(), &hub.ns);
    let mut polls = 0u64;
    let mut last_progress = Instant::now();
    let mut load_at_decided: (usize, usize);
    let (decided, decided_count) = loop {
        ctl.check_alive()?;
        // From the watch cache (resourceVersion=0): the cheapest complete list there is.
        let lp = ListParams::default().match_any();
        let list = retry(|| pd_api.list(&lp)).await?;
        polls += 1;
        hub.count("LIST", "placementdecisions", 1.0);
        let seen_at = t0.elapsed();
        let (per, spread) = decisions_load(&list.items, clusters);
        load_at_decided = spread;
        let complete = per.values().filter(|n| **n == per_placement).count();
        if complete >= placements {
            break (Some(seen_at), complete);
        }
        if seen_at > args.timeout {
            eprintln!("[{name}] timed out after {seen_at:.0?}: {complete}/{placements} decided");
            break (None, complete);
        }
        if last_progress.elapsed() >= Duration::from_secs(15) {
            last_progress = Instant::now();
            eprintln!(
                "[{name}] {seen_at:.0?}: {complete}/{placements} placements decided, {} PlacementDecisions, controller CPU {:.1?}",
                list.items.len(),
                procfs::cpu_time(ctl.pid).saturating_sub(p0.controller_cpu)
            );
        }
        tokio::time::sleep(poll_interval).await;
    };
    let p1 = Point::take(&hub, &ctl).await?;
    let to_decided = Window::between(&p0, &p1);
    if let Some(d) = decided {
        eprintln!(
            "[{name}] all {placements} decided {d:.1?} after the first Placement; controller CPU {:.1?} ({:.0}% of wall); waiting until it stops writing",
            to_decided.controller_cpu,
            to_decided.cpu_share()
        );
    }

    // Settled: no controller write for `settle`: the decisions (and statuses, events) stay as
    // they are. Scheduling passes that write nothing do not count (a Balance wave can
    // reschedule every Balance placement without changing anything); their CPU is in the
    // window all the same. (Not the queue depth either: it may count requeue timers.) Writes
    // are the apiserver's count (the harness writes nothing meanwhile), so that upstream's
    // controller, which does not count its own, settles the same way.
    let activity = |api: &[Sample], m: &[Sample]| {
        (
            api_writes(&apiserver_requests(api)),
            metric_sum(m, "placement_scheduling_duration_seconds_count", |_| true)
                + metric_sum(m, upstream::PASSES, |_| true),
        )
    };
    let mut last = activity(&p1.apiserver, &p1.controller);
    let mut last_change = p1.at;
    let mut reported = (p1.at, controller_writes(&p1.controller), last.1);
    let settle_deadline = Instant::now() + args.settle_timeout;
    let settled = loop {
        ctl.check_alive()?;
        let m = ctl.metrics().await?;
        let api = hub.apiserver_metrics().await?;
        let now = Instant::now();
        let current = activity(&api, &m);
        if now - reported.0 >= Duration::from_secs(15) {
            let writes = controller_writes(&m);
            let new: Vec<String> = delta_map(&writes, &reported.1)
                .iter()
                .map(|((verb, res), n)| format!("{verb} {res} {n}"))
                .collect();
            if !new.is_empty() || current.1 != reported.2 {
                eprintln!(
                    "[{name}] {:.0?}: in the last {:.0?}: {} passes, writes: {}; controller CPU {:.1?}",
                    now - t0,
                    now - reported.0,
                    current.1 - reported.2,
                    if new.is_empty() {
                        "none".to_owned()
                    } else {
                        new.join(", ")
                    },
                    procfs::cpu_time(ctl.pid).saturating_sub(p0.controller_cpu)
                );
            }
            reported = (now, writes, current.1);
        }
        if current.0 != last.0 {
            last = current;
            last_change = now;
        } else if now - last_change >= args.settle {
            break Some(last_change - t0);
        }
        if now > settle_deadline {
            eprintln!(
                "[{name}] still writing {:.0?} after the first Placement",
                now - t0
            );
            break None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let p2 = Point::take(&hub, &ctl).await?;
    let to_settled = Window::between(&p0, &p2);
    let idle = if args.idle.is_zero() {
        None
    } else {
        eprintln!("[{name}] settled; {:.0?} idle", args.idle);
        tokio::time::sleep(args.idle).await;
        ctl.check_alive()?;
        Some(Window::between(&p2, &Point::take(&hub, &ctl).await?))
    };
    let lp = ListParams::default().match_any();
    let list = retry(|| pd_api.list(&lp)).await?;
    hub.count("LIST", "placementdecisions", 1.0);
    let load_at_end = decisions_load(&list.items, clusters).1;
    let peak_rss = procfs::status_bytes(ctl.pid, "VmHWM");
    let hub_started_in = hub.started_in;
    drop(ctl);
    drop(hub);
    Ok(ThroughputResult {
        kind,
        idle,
        placements,
        clusters,
        per_placement,
        control_plane_start: hub_started_in,
        fleet_setup,
        controller_ready,
        create,
        polls,
        poll_interval,
        decided,
        decided_count,
        to_decided,
        settled,
        to_settled,
        peak_rss,
        load_at_decided,
        load_at_end,
        concurrency: args.concurrency,
        total: run_started.elapsed(),
    })
}

/// Clusters decided per placement, and (min, max) decisions per cluster over `clusters`
/// clusters (those named in no decision count 0).
fn decisions_load(
    items: &[PlacementDecision],
    clusters: usize,
) -> (HashMap<String, usize>, (usize, usize)) {
    let mut per: HashMap<String, usize> = HashMap::new();
    let mut load: HashMap<&str, usize> = HashMap::new();
    for d in items {
        let entries = d.status.as_ref().map_or(&[][..], |s| &s.decisions[..]);
        if let Some(p) = d
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PLACEMENT_LABEL))
        {
            *per.entry(p.clone()).or_insert(0) += entries.len();
        }
        for e in entries {
            *load.entry(e.cluster_name.as_str()).or_insert(0) += 1;
        }
    }
    let max = load.values().copied().max().unwrap_or(0);
    let min = if load.len() < clusters {
        0
    } else {
        load.values().copied().min().unwrap_or(0)
    };
    (per, (min, max))
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn mb(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

fn num(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

impl ThroughputResult {
    fn size(&self) -> String {
        format!(
            "{} × {} ({})",
            num(self.placements as f64),
            num(self.clusters as f64),
            self.kind.name()
        )
    }

    /// Apiserver writes per Placement from the first Placement until settled, by verb.
    fn writes_per_placement(&self) -> (f64, String) {
        let w = &self.to_settled.apiserver;
        let n = self.placements.max(1) as f64;
        let by_verb: Vec<String> = w
            .iter()
            .filter(|((verb, _), _)| matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
            .map(|((verb, res), v)| format!("{verb} {res} {:.2}", v / n))
            .collect();
        (api_writes(w) / n, by_verb.join(", "))
    }

    fn summary_row(&self) -> String {
        let w = &self.to_decided;
        format!(
            "| {} | {} | {} | {} | {} ({:.0}%) | {} | {} / {} | {} | {} | {:.0}% |",
            self.size(),
            secs(self.create),
            self.decided.map_or_else(
                || format!("timeout ({}/{})", self.decided_count, self.placements),
                secs
            ),
            self.settled.map_or_else(
                || format!("still writing at {}", secs(self.to_settled.wall)),
                secs
            ),
            secs(w.controller_cpu),
            w.cpu_share(),
            mb(self.peak_rss),
            secs(w.apiserver_cpu),
            secs(w.etcd_cpu),
            num(w.total_writes()),
            num(w.requests),
            pct(w.other_cpu, w.wall * cpus()),
        )
    }

    fn section(&self) -> String {
        let mut s = String::new();
        let d = &self.to_decided;
        let st = &self.to_settled;
        let _ = writeln!(
            s,
            "### Throughput: {} placements × {} clusters, {} controller\n",
            num(self.placements as f64),
            num(self.clusters as f64),
            self.kind.name()
        );
        let _ = writeln!(
            s,
            "Each Placement: numberOfClusters 10, Exact, AddOn demo/demo + ResourceAllocatableCPU + Balance (weight 1 each); every cluster scores `demo` = 80. Done = every Placement's decisions hold {} clusters.\n",
            self.per_placement
        );
        let _ = writeln!(s, "| measure | to all decided | to settled |");
        let _ = writeln!(s, "| --- | --- | --- |");
        let _ = writeln!(
            s,
            "| wall time from the first Placement created | {} | {} |",
            self.decided.map_or_else(
                || format!(
                    "timeout ({}/{} decided)",
                    self.decided_count, self.placements
                ),
                secs
            ),
            self.settled
                .map_or_else(|| format!("still writing after {}", secs(st.wall)), secs),
        );
        let _ = writeln!(
            s,
            "| controller CPU | {} ({:.1}% of wall) | {} ({:.1}% of wall) |",
            secs(d.controller_cpu),
            d.cpu_share(),
            secs(st.controller_cpu),
            st.cpu_share()
        );
        let _ = writeln!(
            s,
            "| kube-apiserver CPU | {} ({:.0}%) | {} ({:.0}%) |",
            secs(d.apiserver_cpu),
            pct(d.apiserver_cpu, d.wall),
            secs(st.apiserver_cpu),
            pct(st.apiserver_cpu, st.wall)
        );
        let _ = writeln!(
            s,
            "| etcd CPU | {} ({:.0}%) | {} ({:.0}%) |",
            secs(d.etcd_cpu),
            pct(d.etcd_cpu, d.wall),
            secs(st.etcd_cpu),
            pct(st.etcd_cpu, st.wall)
        );
        let _ = writeln!(
            s,
            "| harness CPU (creates, polls, metrics) | {} | {} |",
            secs(d.harness_cpu),
            secs(st.harness_cpu)
        );
        let _ = writeln!(
            s,
            "| CPU of every other process on the machine (contention; ideally ~0) | {} ({:.0}% of the machine) | {} ({:.0}% of the machine) |",
            secs(d.other_cpu),
            pct(d.other_cpu, d.wall * cpus()),
            secs(st.other_cpu),
            pct(st.other_cpu, st.wall * cpus()),
        );
        let _ = writeln!(
            s,
            "| scheduling passes (core time) | {} ({}) | {} ({}) |",
            num(d.passes),
            secs(Duration::from_secs_f64(d.scheduling_seconds.max(0.0))),
            num(st.passes),
            secs(Duration::from_secs_f64(st.scheduling_seconds.max(0.0)))
        );
        let _ = writeln!(
            s,
            "| controller writes (failed) | {} ({}) | {} ({}) |",
            num(d.total_writes()),
            num(d.write_failures),
            num(st.total_writes()),
            num(st.write_failures)
        );
        let _ = writeln!(
            s,
            "| controller requests, all (client rate-limiter permits) | {} | {} |",
            num(d.requests),
            num(st.requests)
        );
        let _ = writeln!(
            s,
            "| controller write rate | {:.0}/s | {:.0}/s |",
            d.total_writes() / d.wall.as_secs_f64().max(1e-9),
            st.total_writes() / st.wall.as_secs_f64().max(1e-9)
        );
        let _ = writeln!(
            s,
            "| controller peak RSS (VmHWM, whole run) | {} | |",
            mb(self.peak_rss)
        );
        let _ = writeln!(
            s,
            "| decisions per cluster, min–max (Balance) | {}–{} | {}–{} (at the end) |",
            self.load_at_decided.0, self.load_at_decided.1, self.load_at_end.0, self.load_at_end.1
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "API requests from the first Placement until settled, by verb. *controller* is the controller's own count of its writes (one per call, retries included in the call); *apiserver* is `apiserver_request_total` for the OCM and events APIs with the harness's own requests ({} Placement creates, {} PlacementDecision lists) subtracted: the controller's requests as the apiserver saw them. The controller counts every event it publishes as a create; kube's event recorder PATCHes the existing event instead (an event series) when the same event repeats within 6 minutes.\n",
            num(st
                .harness
                .get(&("POST".into(), "placements".into()))
                .copied()
                .unwrap_or(0.0)),
            num(st
                .harness
                .get(&("LIST".into(), "placementdecisions".into()))
                .copied()
                .unwrap_or(0.0))
        );
        let _ = writeln!(s, "| verb | resource | controller | apiserver |");
        let _ = writeln!(s, "| --- | --- | --- | --- |");
        let keys: BTreeSet<&(String, String)> =
            st.writes.keys().chain(st.apiserver.keys()).collect();
        for k in keys {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                k.0,
                k.1,
                st.writes.get(k).map_or_else(|| "–".to_owned(), |v| num(*v)),
                st.apiserver
                    .get(k)
                    .map_or_else(|| "–".to_owned(), |v| num(*v)),
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Setup: control plane {}, {} clusters with namespaces and scores {}, controller ready (all watches listed) {}; {} Placements created in {} ({:.0}/s, {} at a time); decisions listed every {} ({} lists); whole run {}.\n",
            secs(self.control_plane_start),
            num(self.clusters as f64),
            secs(self.fleet_setup),
            secs(self.controller_ready),
            num(self.placements as f64),
            secs(self.create),
            self.placements as f64 / self.create.as_secs_f64().max(1e-9),
            self.concurrency,
            ms(self.poll_interval),
            self.polls,
            secs(self.total),
        );
        if let Some(w) = &self.idle {
            let _ = writeln!(
                s,
                "Idle, {} after settled with nothing changing: controller CPU {}, {} scheduling passes, {} apiserver writes{}.\n",
                secs(w.wall),
                secs(w.controller_cpu),
                num(w.passes),
                num(api_writes(&w.apiserver)),
                if w.apiserver.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({})",
                        w.apiserver
                            .iter()
                            .map(|((v, r), n)| format!("{v} {r} {}", num(*n)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            );
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario: reaction

/// The PlacementDecisions of one namespace as a watch shows them, with the client-side time at
/// which each placement's set of clusters last changed.
#[derive(Default)]
struct Seen {
    pds: HashMap<String, (String, Vec<String>)>,
    changed: HashMap<String, Instant>,
}

impl Seen {
    fn clusters_of(&self, placement: &str) -> BTreeSet<&str> {
        self.pds
            .values()
            .filter(|(p, _)| p == placement)
            .flat_map(|(_, cs)| cs.iter().map(String::as_str))
            .collect()
    }

    fn apply(&mut self, d: &PlacementDecision, deleted: bool, at: Instant) {
        let name = d.metadata.name.clone().unwrap_or_default();
        let Some(placement) = d
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PLACEMENT_LABEL))
            .cloned()
        else {
            return;
        };
        let before = self
            .clusters_of(&placement)
            .into_iter()
            .map(str::to_owned)
            .collect::<BTreeSet<_>>();
        if deleted {
            self.pds.remove(&name);
        } else {
            let clusters = d
                .status
                .as_ref()
                .map(|s| s.decisions.iter().map(|c| c.cluster_name.clone()).collect())
                .unwrap_or_default();
            self.pds.insert(name, (placement.clone(), clusters));
        }
        let after = self
            .clusters_of(&placement)
            .into_iter()
            .map(str::to_owned)
            .collect::<BTreeSet<_>>();
        if before != after {
            self.changed.insert(placement, at);
        }
    }
}

struct DecisionWatch {
    seen: Arc<Mutex<Seen>>,
    rx: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DecisionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DecisionWatch {
    fn start(client: &Client, ns: &str) -> DecisionWatch {
        let api: Api<PlacementDecision> = Api::namespaced(client.clone(), ns);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                let mut n = 0u64;
                while let Some(ev) = stream.next().await {
                    let at = Instant::now();
                    let (d, deleted) = match ev {
                        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => (d, false),
                        Ok(watcher::Event::Delete(d)) => (d, true),
                        Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                        Err(e) => {
                            eprintln!("PlacementDecision watch: {e}; retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    seen.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .apply(&d, deleted, at);
                    n += 1;
                    let _ = tx.send(n);
                }
            }
        });
        DecisionWatch { seen, rx, task }
    }

    /// Waits until the placement's decisions are exactly `want`; returns when the watch saw
    /// that (None: not by `deadline`).
    async fn wait_for(
        &mut self,
        placement: &str,
        want: &BTreeSet<String>,
        deadline: Instant,
    ) -> Option<Instant> {
        loop {
            {
                let s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                let have = s.clusters_of(placement);
                if have.len() == want.len() && want.iter().all(|w| have.contains(w.as_str())) {
                    return s.changed.get(placement).copied();
                }
            }
            match tokio::time::timeout_at(deadline.into(), self.rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }
}

#[derive(Default)]
struct Latencies {
    /// Change request sent -> watch shows the moved decision.
    samples: Vec<Duration>,
    /// How long the change's own API call took.
    write: Vec<Duration>,
    timeouts: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Latencies {
    fn row(&self, what: &str) -> String {
        let mut v = self.samples.clone();
        v.sort();
        let mut w = self.write.clone();
        w.sort();
        let mean = if v.is_empty() {
            Duration::ZERO
        } else {
            v.iter().sum::<Duration>() / v.len() as u32
        };
        format!(
            "| {what} | {} | {} | {} | {} | {} | {} | {} | {} |",
            v.len(),
            ms(percentile(&v, 50.0)),
            ms(percentile(&v, 99.0)),
            ms(v.last().copied().unwrap_or_default()),
            ms(mean),
            ms(v.first().copied().unwrap_or_default()),
            ms(percentile(&w, 50.0)),
            self.timeouts,
        )
    }
}

struct ReactionResult {
    clusters: usize,
    placements: usize,
    group: usize,
    control_plane_start: Duration,
    fleet_setup: Duration,
    initial: Option<Duration>,
    score: Latencies,
    taint: Latencies,
    /// The score updates again with the hostile Placement being scheduled (`--hostile`).
    hostile: Option<Latencies>,
    changes: Window,
    peak_rss: u64,
    debounce: String,
    total: Duration,
}

async fn reaction(
    env: &Env<'_>,
    kind: Kind,
    clusters: usize,
    placements: usize,
) -> Result<ReactionResult> {
    let args = env.args;
    let run_started = Instant::now();
    if placements == 0 || clusters / placements < 2 {
        return Err(format!("reaction needs at least 2 clusters per placement ({clusters} clusters, {placements} placements)").into());
    }
    let group = clusters / placements;
    if group > 80 {
        return Err(
            "reaction: at most 80 clusters per placement (scores start at 10 + index)".into(),
        );
    }
    let per_group_changes = args.changes.div_ceil(placements);
    if per_group_changes >= group {
        return Err(format!("reaction: {} changes over {placements} placements would taint every cluster of a group; use more clusters or fewer changes", args.changes).into());
    }
    let name = format!("reaction-{}-{clusters}x{placements}", kind.name());
    let hub = Hub::start(env, &name).await?;
    eprintln!(
        "[{name}] control plane up in {:.1?}; {clusters} clusters in {placements} groups of {group}",
        hub.started_in
    );

    // Group g holds clusters g*group .. g*group+group-1; member j scores 10 + j, so the last
    // member is each placement's first choice.
    let t = Instant::now();
    hub.create_fleet(
        clusters,
        args.concurrency,
        |i| {
            let mut l = BTreeMap::new();
            if i / group < placements {
                l.insert(GROUP_LABEL.to_owned(), format!("g-{:05}", i / group));
            }
            l
        },
        |i| 10 + (i % group) as i64,
    )
    .await?;
    let fleet_setup = t.elapsed();
    let valid_until = rfc3339(jiff::Timestamp::now() + jiff::SignedDuration::from_mins(1000));

    let mut ctl = Controller::start(
        env,
        kind,
        &hub,
        env.work_dir.join(format!("{name}.controller.log")),
    )
    .await?;
    let mut watch = DecisionWatch::start(&hub.client, &hub.ns);
    let mut scores: Vec<Vec<i64>> = (0..placements)
        .map(|_| (0..group).map(|j| 10 + j as i64).collect())
        .collect();
    let mut tainted: Vec<Vec<bool>> = vec![vec![false; group]; placements];
    let best = |scores: &[i64], tainted: &[bool]| -> Option<usize> {
        // Highest score, then the lower name (lower index).
        (0..scores.len())
            .filter(|j| !tainted[*j])
            .max_by(|a, b| scores[*a].cmp(&scores[*b]).then(b.cmp(a)))
    };
    let member = |g: usize, j: usize| cluster_name(g * group + j);
    let want_one = |c: String| BTreeSet::from([c]);

    let t0 = Instant::now();
    hub.create_placements(placements, args.concurrency, |g| {
        json!({
            "numberOfClusters": 1,
            "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {GROUP_LABEL: format!("g-{g:05}")}}}}],
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
            ]},
        })
    })
    .await?;
    let mut initial = Some(Duration::ZERO);
    for g in 0..placements {
        let want = want_one(member(g, group - 1));
        match watch
            .wait_for(&placement_name(g), &want, Instant::now() + args.timeout)
            .await
        {
            Some(at) => initial = initial.map(|i| i.max(at.saturating_duration_since(t0))),
            None => {
                initial = None;
                break;
            }
        }
    }
    let Some(initial_d) = initial else {
        return Err(format!(
            "[{name}] the placements were not all decided within {:?}",
            args.timeout
        )
        .into());
    };
    eprintln!(
        "[{name}] {placements} placements decided {initial_d:.1?} after the first was created; {} score updates follow",
        args.changes
    );
    // Let the initial writes (status, events) finish before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p0 = Point::take(&hub, &ctl).await?;

    let mut score_lat = Latencies::default();
    for k in 0..args.changes {
        ctl.check_alive()?;
        let g = k % placements;
        let (g_scores, g_tainted) = (&mut scores[g], &tainted[g]);
        score_update(
            &hub,
            &mut watch,
            args,
            &valid_until,
            g,
            group,
            g_scores,
            g_tainted,
        )
        .await?
        .record(&mut score_lat, &format!("[{name}] score update {k}"));
        if (k + 1) % 25 == 0 {
            eprintln!("[{name}] {} score updates measured", k + 1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let clusters_api: Api<ManagedCluster> = Api::all(hub.client.clone());
    let mut taint_lat = Latencies::default();
    for k in 0..args.changes {
        ctl.check_alive()?;
        let g = k % placements;
        let current = best(&scores[g], &tainted[g]).ok_or("no candidate left")?;
        tainted[g][current] = true;
        let next = best(&scores[g], &tainted[g]).ok_or("no candidate left after the taint")?;
        let cluster = member(g, current);
        let expected = member(g, next);
        let taints: Vec<Value> = vec![
            json!({"key": TAINT_KEY, "effect": "NoSelect", "timeAdded": rfc3339(jiff::Timestamp::now())}),
        ];
        let body = json!({"spec": {"taints": taints}});
        let sent = Instant::now();
        let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
        retry(|| clusters_api.patch(&cluster, &pp, &patch)).await?;
        hub.count("PATCH", "managedclusters", 1.0);
        taint_lat.write.push(sent.elapsed());
        match watch
            .wait_for(
                &placement_name(g),
                &want_one(expected.clone()),
                sent + args.change_timeout,
            )
            .await
        {
            Some(at) => taint_lat.samples.push(at.saturating_duration_since(sent)),
            None => {
                taint_lat.timeouts += 1;
                eprintln!(
                    "[{name}] taint {k}: {} did not move from {cluster} to {expected} within {:?}",
                    placement_name(g),
                    args.change_timeout
                );
            }
        }
        if (k + 1) % 25 == 0 {
            eprintln!("[{name}] {} taints measured", k + 1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let p1 = Point::take(&hub, &ctl).await?;
    let changes = Window::between(&p0, &p1);
    let peak_rss = procfs::status_bytes(ctl.pid, "VmHWM");

    // Last, so that the unloaded rows above are not disturbed by a pass still running.
    let hostile = if args.hostile {
        let busy = HostilePlacement::start(&hub).await?;
        eprintln!(
            "[{name}] hostile placement created; {} score updates follow while it is scheduled",
            args.changes
        );
        let mut lat = Latencies::default();
        for k in 0..args.changes {
            ctl.check_alive()?;
            let g = k % placements;
            let (g_scores, g_tainted) = (&mut scores[g], &tainted[g]);
            score_update(
                &hub,
                &mut watch,
                args,
                &valid_until,
                g,
                group,
                g_scores,
                g_tainted,
            )
            .await?
            .record(&mut lat, &format!("[{name}] score update {k} (hostile)"));
            if (k + 1) % 25 == 0 {
                eprintln!("[{name}] {} score updates measured (hostile)", k + 1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "[{name}] the hostile placement was re-triggered {} times",
            busy.stop().await
        );
        Some(lat)
    } else {
        None
    };
    drop(watch);
    drop(ctl);
    let control_plane_start = hub.started_in;
    drop(hub);
    Ok(ReactionResult {
        clusters,
        placements,
        group,
        control_plane_start,
        fleet_setup,
        initial,
        score: score_lat,
        taint: taint_lat,
        hostile,
        changes,
        peak_rss,
        debounce: if args.event_debounce.is_empty() {
            "the controller's default".to_owned()
        } else {
            args.event_debounce.clone()
        },
        total: run_started.elapsed(),
    })
}

impl ReactionResult {
    fn section(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "### Reaction: {} clusters × {} placements\n",
            num(self.clusters as f64),
            num(self.placements as f64)
        );
        let _ = writeln!(
            s,
            "Each Placement selects its own {} clusters by label (numberOfClusters 1, Exact, AddOn demo/demo weight 1). One change at a time: a score update that makes another cluster of the group the best, or a NoSelect taint on the chosen cluster. Latency: from sending the change (client clock) until a watch on the PlacementDecisions shows the placement's decision moved. The controller's --event-debounce is {}.\n",
            self.group, self.debounce
        );
        let _ = writeln!(
            s,
            "| change | n | p50 | p99 | max | mean | min | the change's own API call, p50 | timeouts |"
        );
        let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        let _ = writeln!(s, "{}", self.score.row("AddOnPlacementScore update"));
        let _ = writeln!(s, "{}", self.taint.row("NoSelect taint"));
        if let Some(h) = &self.hostile {
            let _ = writeln!(
                s,
                "{}",
                h.row("AddOnPlacementScore update, hostile Placement being scheduled")
            );
        }
        let _ = writeln!(s);
        if let Some(h) = &self.hostile {
            let p99 = |l: &Latencies| {
                let mut v = l.samples.clone();
                v.sort();
                percentile(&v, 99.0)
            };
            let (base, loaded) = (p99(&self.score), p99(h));
            let _ = writeln!(
                s,
                "Hostile Placement: one more Placement whose celSelector spends the whole per-expression CEL budget on every one of the {} clusters, re-triggered every {} so that a pass of it is always running or queued. Score-update p99 {} unloaded, {} with it ({:.2}×; the target is at most 2×).\n",
                num(self.clusters as f64),
                ms(HOSTILE_RETRIGGER),
                ms(base),
                ms(loaded),
                loaded.as_secs_f64() / base.as_secs_f64().max(1e-9),
            );
        }
        let c = &self.changes;
        let _ = writeln!(
            s,
            "During the {} changes ({}): other processes on the machine used {} CPU ({:.0}% of the machine); controller CPU {} ({:.1}% of wall), {} scheduling passes, {} writes ({} failed), {} requests in all; controller peak RSS (VmHWM) {}. Setup: control plane {}, fleet {}, the {} placements decided {} after the first was created; whole run {}.\n",
            self.score.samples.len()
                + self.taint.samples.len()
                + self.score.timeouts
                + self.taint.timeouts,
            secs(c.wall),
            secs(c.other_cpu),
            pct(c.other_cpu, c.wall * cpus()),
            secs(c.controller_cpu),
            c.cpu_share(),
            num(c.passes),
            num(c.total_writes()),
            num(c.write_failures),
            num(c.requests),
            mb(self.peak_rss),
            secs(self.control_plane_start),
            secs(self.fleet_setup),
            self.placements,
            self.initial.map_or_else(|| "—".into(), secs),
            secs(self.total),
        );
        s
    }
}

/// What one measured change came to.
enum Measured {
    /// Send -> seen by the watch, and the change's own API call.
    Moved(Duration, Duration),
    /// Not seen within `--change-timeout`; what was expected.
    TimedOut(Duration, String),
}

impl Measured {
    fn record(self, into: &mut Latencies, what: &str) {
        match self {
            Measured::Moved(lat, write) => {
                into.samples.push(lat);
                into.write.push(write);
            }
            Measured::TimedOut(write, expected) => {
                into.write.push(write);
                into.timeouts += 1;
                eprintln!("{what}: {expected}");
            }
        }
    }
}

/// One score update in group `g` that makes another cluster of the group its best, measured
/// until the watch shows the placement's decision moved there.
#[allow(clippy::too_many_arguments)]
async fn score_update(
    hub: &Hub,
    watch: &mut DecisionWatch,
    args: &Args,
    valid_until: &str,
    g: usize,
    group: usize,
    scores: &mut [i64],
    tainted: &[bool],
) -> Result<Measured> {
    let best = (0..group)
        .filter(|j| !tainted[*j])
        .max_by(|a, b| scores[*a].cmp(&scores[*b]).then(b.cmp(a)))
        .ok_or("no candidate left")?;
    let target = (1..group)
        .map(|d| (best + d) % group)
        .find(|j| !tainted[*j])
        .ok_or("no other candidate")?;
    let value = scores[best] + 1;
    if value > 100 {
        return Err("reaction: scores would exceed 100; use fewer changes".into());
    }
    scores[target] = value;
    let cluster = cluster_name(g * group + target);
    let body = json!({"status": {"scores": [{"name": "demo", "value": value}], "validUntil": valid_until}});
    let api = Api::<AddOnPlacementScore>::namespaced(hub.client.clone(), &cluster);
    let sent = Instant::now();
    let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
    retry(|| api.patch_status("demo", &pp, &patch)).await?;
    hub.count("PATCH", "addonplacementscores/status", 1.0);
    let write = sent.elapsed();
    let want = BTreeSet::from([cluster.clone()]);
    Ok(
        match watch
            .wait_for(&placement_name(g), &want, sent + args.change_timeout)
            .await
        {
            Some(at) => Measured::Moved(at.saturating_duration_since(sent), write),
            None => Measured::TimedOut(
                write,
                format!(
                    "{} did not move to {cluster} within {:?}",
                    placement_name(g),
                    args.change_timeout
                ),
            ),
        },
    )
}

/// How often the hostile placement is touched (an annotation) so that it is scheduled again.
const HOSTILE_RETRIGGER: Duration = Duration::from_millis(500);

/// A `celSelector` expression that spends the whole per-expression CEL budget on every
/// cluster: nested comprehensions of 10^7 iterations, stopped by the budget (false).
fn hostile_cel_expression() -> String {
    let mut e = "true".to_owned();
    for v in ["a", "b", "c", "d", "e", "f", "g"] {
        e = format!("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].all({v}, {e})");
    }
    e
}

/// One hostile Placement over every cluster of the hub, kept busy: an annotation bump every
/// [`HOSTILE_RETRIGGER`] reschedules it (a pass already running finishes first; the queue
/// holds at most one more).
struct HostilePlacement {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<u64>,
}

impl HostilePlacement {
    const NAME: &'static str = "hostile";

    async fn start(hub: &Hub) -> Result<HostilePlacement> {
        let api: Api<Placement> = Api::namespaced(hub.client.clone(), &hub.ns);
        let p: Placement = serde_json::from_value(json!({
            "metadata": {"name": Self::NAME, "namespace": hub.ns},
            "spec": {"predicates": [{"requiredClusterSelector": {"celSelector": {
                "celExpressions": [hostile_cel_expression()]}}}]},
        }))?;
        let post = PostParams::default();
        retry(|| api.create(&post, &p)).await?;
        hub.count("POST", "placements", 1.0);
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = &mut stopped => return n,
                    _ = tokio::time::sleep(HOSTILE_RETRIGGER) => {}
                }
                let body = json!({"metadata": {"annotations": {"scale.ocm-placement.io/poke": n.to_string()}}});
                let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
                if let Err(e) = api.patch(Self::NAME, &pp, &patch).await {
                    eprintln!("hostile placement: poke failed: {e}");
                }
                n += 1;
            }
        });
        Ok(HostilePlacement { stop, task })
    }

    /// Stops re-triggering; returns how many times it did.
    async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// The report

fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
}

fn machine() -> String {
    let cpus = cpus();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = proc_meminfo_gb();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs ({model}), {mem:.0} GB RAM, Linux {}",
        kernel.trim()
    )
}

fn proc_meminfo_gb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0)
}

/// The commit the controller was built from, `-dirty` with uncommitted changes.
fn git_rev() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_owned())
}

/// Issue 17's table: one row per shape, ours / upstream side by side ("—" for one not run).
fn compare_throughput(results: &[ThroughputResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Throughput, ours / upstream\n\n| shape (placements × clusters) | wall ours / upstream | controller CPU ours / upstream | peak RSS ours / upstream | writes per Placement ours / upstream | CPU while idle ours / upstream | passes while idle ours / upstream |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut shapes: Vec<(usize, usize)> =
        results.iter().map(|r| (r.placements, r.clusters)).collect();
    shapes.dedup();
    let mut detail = String::new();
    for (p, c) in shapes {
        let of = |k: Kind| {
            results
                .iter()
                .find(|r| r.kind == k && r.placements == p && r.clusters == c)
        };
        let pair = |f: &dyn Fn(&ThroughputResult) -> String| {
            let one = |k| of(k).map_or_else(|| "—".to_owned(), f);
            format!("{} / {}", one(Kind::Ours), one(Kind::Upstream))
        };
        let _ = writeln!(
            s,
            "| {} × {} | {} | {} | {} | {} | {} | {} |",
            num(p as f64),
            num(c as f64),
            pair(&|r| r.decided.map_or_else(|| "timeout".to_owned(), secs)),
            pair(&|r| secs(r.to_decided.controller_cpu)),
            pair(&|r| mb(r.peak_rss)),
            pair(&|r| format!("{:.2}", r.writes_per_placement().0)),
            pair(&|r| r.idle.as_ref().map_or_else(
                || "—".to_owned(),
                |w| format!("{} in {}", secs(w.controller_cpu), secs(w.wall))
            )),
            pair(&|r| r
                .idle
                .as_ref()
                .map_or_else(|| "—".to_owned(), |w| num(w.passes))),
        );
        for k in [Kind::Ours, Kind::Upstream] {
            if let Some(r) = of(k) {
                let _ = writeln!(
                    detail,
                    "- {} × {} {}: writes per Placement until settled, by verb: {}; settled {}",
                    num(p as f64),
                    num(c as f64),
                    k.name(),
                    r.writes_per_placement().1,
                    r.settled.map_or_else(|| "never".to_owned(), secs),
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nWall: first Placement created → every Placement has its decisions (harness's list poll); controller CPU over the same window; writes: the apiserver's `apiserver_request_total` (OCM and event APIs, the harness's own subtracted) from the first Placement until settled; idle: after settled, `--idle` with nothing changing (upstream's passes from its `scheduling_scheduling_duration_seconds` histogram).\n\n{detail}"
    );
    s
}

fn render_report(
    args: &Args,
    started: jiff::Timestamp,
    summary: &[String],
    sections: &[String],
    rev: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Placement controller scale run\n");
    let _ = writeln!(
        s,
        "{} UTC; {}; kube-apiserver {}, etcd {} (testenv, `--unsafe-no-fsync`); controller built from {}, run with `--workers={} --client-qps={} --client-burst={} --event-debounce={}{}{}`, leader election off.\n",
        started.strftime("%Y-%m-%d %H:%M"),
        machine(),
        testenv::paths::version("KUBE_VERSION").unwrap_or("?"),
        testenv::paths::version("ETCD_VERSION").unwrap_or("?"),
        rev,
        args.workers,
        args.client_qps,
        args.client_burst,
        if args.event_debounce.is_empty() {
            "(its default)"
        } else {
            &args.event_debounce
        },
        if args.controller_args.is_empty() {
            ""
        } else {
            " "
        },
        args.controller_args.join(" "),
    );
    if args.controller != Which::Ours {
        let _ = writeln!(
            s,
            "Upstream: OCM's `placement controller` {} (tests/ocm/build.sh), run with `--disable-leader-election --kube-api-qps={} --kube-api-burst={}{}{}`, watching every namespace.\n",
            testenv::paths::version("OCM_VERSION").unwrap_or("?"),
            args.client_qps,
            args.client_burst,
            if args.upstream_args.is_empty() {
                ""
            } else {
                " "
            },
            args.upstream_args.join(" "),
        );
    }
    if !summary.is_empty() {
        let _ = writeln!(
            s,
            "| placements × clusters | create placements | first Placement → all decided | → settled | controller CPU (% of wall) | peak RSS | apiserver / etcd CPU | controller writes | controller requests | other processes' CPU |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for row in summary {
            let _ = writeln!(s, "{row}");
        }
        let _ = writeln!(
            s,
            "\nCPU, writes and requests are counted from the first Placement created until all are decided; \"settled\" is the last controller write before {} without any (passes that write nothing do not count); the last column is the CPU that other processes on the machine used meanwhile, as a share of all its CPUs (contention that skews the figures).\n",
            secs(args.settle)
        );
    }
    for sec in sections {
        let _ = writeln!(s, "{sec}");
    }
    let _ = writeln!(
        s,
        "Targets (issue 4, reported not asserted): 10,000 × 1,000 limited by the apiserver's write rate, controller CPU < 25% of wall time; peak RSS < 300 MB; reaction p99 < 1 s."
    );
    s
}
