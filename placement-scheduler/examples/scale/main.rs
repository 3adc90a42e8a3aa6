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
//! # Throughput (writes per Placement by verb, CPU, peak RSS, then 30 s idle):
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario throughput --placements 100 --clusters 10 --out t-100x10.md
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario throughput --placements 1000 --clusters 1000 --out t-1000x1000.md
//! # Reaction to moves (at 100x1, 2,000x1, 2,000x100, and the burst at 1,000x100, one table):
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario react --out react.md
//! # one shape: --scenario moves|burst --clusters N --placements M; a prebuilt controller:
//! # --controller-bin <path> (e.g. a build of an earlier commit, to compare with).
//! # Flap: 30 clusters whose scores wander (true value + uniform noise ±15, a
//! # step every 2 s, 60 steps, --seed 1), 50 placements of 3 in Additive and in Exact mode:
//! # decision changes per placement per 100 steps and regret; ours without and with a
//! # stability annotation, then upstream (flap.rs):
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario flap --stability '{"minScoreGain": 30}' --out flap.md
//! # knobs: --clusters --placements --steps --step-interval --noise --seed --flap-mode
//! # Steady state (steady.rs): 1,000 clusters renewing every --step-interval, 5% of the scores
//! # changing each period, 10,000 placements over 10 sets and namespaces; ours then upstream:
//! cargo run --release -p placement-scheduler --example scale -- --controller both \
//!     --scenario steady --steps 60 --step-interval 1s --out steady.md
//! # The floor: the same writes with no controller (--placements of them):
//! cargo run --release -p placement-scheduler --example scale -- --scenario floor --placements 2000
//! # --json <path>: the figures as JSON too (throughput, moves/burst/react, flap), with the
//! # run's date, commit and command: the format of docs/figures/data/ (data.rs), which
//! # `cargo run -p plots` draws into docs/figures/*.svg.
//! ```
//!
//! placement-scheduler/examples/scale/: this file holds the flags and runs the scenarios; `hub.rs` the
//! control plane and the fleet, `controller.rs` the controller's binary and process,
//! `upstream.rs` upstream's (its flags, its HTTPS metrics), `measure.rs` what is read and what
//! changed between two points, one file per scenario (`throughput.rs`, `reaction.rs`,
//! `moves.rs`: score moves and the burst, `flap.rs`: wandering scores), `report.rs` and
//! `data.rs` (`--json`). What every harness needs (ports,
//! builds, processes, retries, polls, /metrics, /proc) is in `testenv`.
//!
//! The harness builds the controller binary itself (`cargo build -p placement-scheduler --bin
//! placement-scheduler` in the harness's own profile) unless `--no-build` or
//! `--controller-bin` is given. It reads the controller's CPU time from `/proc/<pid>/stat`, its
//! peak RSS from `VmHWM` in `/proc/<pid>/status`, its own counters from its `/metrics`, and
//! the apiserver's `apiserver_request_total` (with the harness's own requests subtracted).
//! Everything it starts is stopped at the end, on error and on Ctrl-C / SIGTERM; the
//! controller also gets `PR_SET_PDEATHSIG` (testenv's processes), so that it dies with the
//! harness even when the harness is killed outright. The targets of the
//! issue are reported, not asserted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
use ocm_runtime::flags::parse_duration;
use parking_lot::Mutex;
use serde_json::{Value, json};
use testenv::harness::BoxError;
use testenv::process::ChildProcess;
use testenv::procfs;
use testenv::scrape::{self, Sample};

mod controller;
mod data;
mod flap;
mod hub;
mod measure;
mod moves;
mod reaction;
mod report;
mod steady;
mod throughput;
mod upstream;

use controller::*;
use flap::FlapMode;
use hub::*;
use measure::*;
use reaction::*;
use report::*;
use throughput::*;

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
    /// Also write the figures as JSON to this file, with the run's date, commit and command
    /// (the throughput, moves/burst/react and flap scenarios' figures; the format of
    /// docs/figures/data/, which `cargo run -p plots` draws).
    #[arg(long)]
    json: Option<PathBuf>,
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
    /// Flap, steady: steps; each rewrites every cluster's score.
    #[arg(long, default_value_t = 60)]
    steps: usize,
    /// Flap, steady: the time between steps (steady: a period, each cluster's renewal).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    step_interval: Duration,
    /// Flap: the noise's amplitude A (a score is its true value + uniform noise in [-A, A]).
    #[arg(long, default_value_t = 15)]
    noise: i64,
    /// Flap, steady: the seed of the true values' order and of the noise (steady: of the
    /// values and of which change).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Flap: also run ours with this stability annotation
    /// (`scheduling.ocm-placement.io/stability`, JSON, e.g. '{"minScoreGain": 30}') on every
    /// placement, beside ours without it.
    #[arg(long)]
    stability: Option<String>,
    /// Flap: the placements' prioritizer policy (both: Additive, then Exact).
    #[arg(long, value_enum, default_value_t = FlapMode::Both)]
    flap_mode: FlapMode,
    /// Flap: after the last step, "settled" is when no placement's set of clusters has
    /// changed for this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    flap_quiet: Duration,
    /// Steady: clustersets, each bound in a namespace of its own; the clusters and the
    /// placements are spread evenly over them.
    #[arg(long, default_value_t = 10)]
    steady_sets: usize,
    /// Steady: the percentage of the clusters whose score changes value each period.
    #[arg(long, default_value_t = 5)]
    change_percent: u64,
    /// Serve OCM 1.2's CRDs (without `decisions[].score` and the Placement's
    /// `lastScoreUpdateTime`): the hub upstream's v1.2.0 controller is built for, where ours
    /// writes no scores either, so both controllers make the same writes.
    #[arg(long)]
    ocm_1_2_crds: bool,
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
    /// The reaction shape: N clusters with a score each, M placements of one cluster all reading
    /// the same scores; a move writes one score that makes another cluster the best.
    Moves,
    /// N clusters, M placements as in `moves`; every cluster's score rewritten at once.
    Burst,
    /// The reaction table: moves at 100x1, 2,000x1 and 2,000x100, then the burst at 1,000x100.
    React,
    /// N clusters (default 30) whose scores wander around fixed true values, M placements
    /// (default 50) of 3: decision changes and regret, Additive and Exact (see `flap.rs`).
    Flap,
    /// Steady state: every cluster renews its score each period, a share of them with a new
    /// value; placements over several sets and namespaces (see `steady.rs`). Defaults: 1,000
    /// clusters, 10,000 placements, 10 sets.
    Steady,
    /// The apiserver's floor: the writes a controller makes, made by the harness with no
    /// scheduling (see `steady.rs`).
    Floor,
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

fn main() -> ExitCode {
    let args = Args::parse();
    testenv::harness::main("the controller, kube-apiserver and etcd", run(&args))
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
    let mut flaps = Vec::new();
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
        Scenario::Flap => {
            if let Some(st) = &args.stability {
                match serde_json::from_str::<Value>(st) {
                    Ok(Value::Object(_)) => {}
                    _ => return Err(format!("--stability {st:?}: not a JSON object").into()),
                }
            }
            let plan = flap::Plan::new(
                args.clusters.unwrap_or(30),
                args.steps,
                args.noise,
                args.seed,
            );
            for &mode in args.flap_mode.modes() {
                for &kind in kinds {
                    flaps.push(flap::run(&env, &plan, kind, mode, None).await?);
                    if kind == Kind::Ours && args.stability.is_some() {
                        let st = args.stability.as_deref();
                        flaps.push(flap::run(&env, &plan, kind, mode, st).await?);
                    }
                }
            }
            sections.push(flap::section(&plan, args, &flaps));
        }
        Scenario::Steady => {
            let mut runs = Vec::new();
            for &kind in kinds {
                runs.push(steady::run(&env, kind).await?);
            }
            sections.push(steady::section(&runs));
        }
        Scenario::Floor => {
            sections.push(steady::floor(&env).await?);
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
    if let Some(path) = &args.json {
        let runs = data::Runs {
            throughput: &throughputs,
            moves: &reactions,
            flap: &flaps,
        };
        data::write(path, &data::document(args, started, &rev, &runs))?;
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
