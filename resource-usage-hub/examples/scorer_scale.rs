//! Scale harness for the hub scorer on ScoreDefinitions: a real control plane (testenv's etcd
//! and kube-apiserver with the upstream OCM CRDs and our ScoreDefinition CRD), a fleet of
//! accepted ManagedClusters, an exporter serving every cluster's series of every definition, a
//! real Prometheus scraping it every second, and the release `resource-usage-hub scorer` as a
//! child process evaluating the definitions every `--period`. Prints a markdown report;
//! nothing is asserted beyond every cluster being scored by every definition before measuring.
//!
//! ```sh
//! CARGO_INCREMENTAL=0 cargo build --release -p resource-usage-hub --bin resource-usage-hub --example scorer_scale
//! target/release/examples/scorer_scale --no-build              # 1,000 clusters, 20 definitions
//! target/release/examples/scorer_scale --no-build --clusters 100 --definitions 5 --rounds 3
//! ```
//!
//! Flags: `--clusters`, `--definitions`, `--period`, `--valid-for`, `--rounds`, `--no-build`.
//!
//! The definitions (`bench-dNN`, metric `bench_mNN` by the label `cluster`) cycle through five
//! kinds, so that the set is representative: three series per cluster (`shard`) summed and
//! maxed (two score items, Range and MinMax); one series per cluster by Range, by MinMax, by
//! Rank, and by Range lower-is-better. The last definition has no series for every tenth
//! cluster and gives those `missingValue: -100`.
//!
//! Rounds are windows of one period on fixed deadlines. In the first phase the harness gives
//! 5% of the clusters (a different 5% each round) new values for every definition at the start
//! of each window; in the second nothing changes. At the end of each window it reads the
//! scorer's `/metrics` (query time, write results), the apiserver's `apiserver_request_total`
//! (PATCH and POST on `addonplacementscores`), the scorer's CPU time and RSS from procfs, and
//! lists the AddOnPlacementScores (from the apiserver's watch cache) to count the objects
//! whose scores moved since the previous window.
//!
//! The score writer rewrites an object when its scores moved, its condition changed, or its
//! `validUntil` is due for renewal (`score-provider/src/writer.rs`): every `validFor` minus two
//! periods, at least every period. With the default `validFor` (three periods) every periodic
//! refresh renews every object, so the writes of a round are about clusters × definitions in
//! either phase; `--valid-for` longer makes renewals rarer, and the writes follow the moves. The
//! moved objects are the part of the writes that carried new scores, the rest (`PATCH − moved`)
//! renewed `validUntil` only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use ocm_api::{AddOnPlacementScore, ManagedCluster};
use serde_json::{Value, json};
use testenv::harness::BoxError;
use testenv::process::ChildProcess;
use testenv::prometheus::{Exporter, Prometheus};
use testenv::scrape::{self, Sample};
use testenv::{procfs, wait};

type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The label the harness's definitions carry and the scorer selects.
const SELECTOR: &str = "bench=scorer-scale";
/// Shards of a multi-series definition's metric per cluster.
const SHARDS: u64 = 3;

/// Scale harness for the hub scorer on ScoreDefinitions.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    #[arg(long, default_value_t = 20)]
    definitions: usize,
    /// Every definition's refresh period, and the length of a measured round.
    #[arg(long, default_value = "10s", value_parser = ocm_runtime::flags::parse_duration)]
    period: Duration,
    /// Every definition's `validFor` (default three periods). A longer one renews a steady
    /// score less often: the writer renews at most every `validFor` minus two periods.
    #[arg(long, value_parser = ocm_runtime::flags::parse_duration)]
    valid_for: Option<Duration>,
    /// Rounds per phase (5% of the clusters changing each round; then nothing changing).
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Use target/release/resource-usage-hub as it is.
    #[arg(long)]
    no_build: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    testenv::harness::main_printing(
        "the scorer, Prometheus, kube-apiserver and etcd",
        run(&args),
    )
}

fn cluster(i: usize) -> String {
    format!("bench-{i:05}")
}

fn definition_name(d: usize) -> String {
    format!("bench-d{d:02}")
}

/// What a definition looks like; by its index, cycling.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Three series per cluster: `sum` (Range 0..300) and `max` (MinMax).
    MultiSum,
    Range,
    MinMax,
    Rank,
    /// Range, lower is better.
    RangeLower,
}

fn kind(d: usize) -> Kind {
    [
        Kind::MultiSum,
        Kind::Range,
        Kind::MinMax,
        Kind::Rank,
        Kind::RangeLower,
    ][d % 5]
}

/// The definition `d` of `defs`, refreshed every `period`.
fn definition(d: usize, defs: usize, period: Duration, valid_for: Option<Duration>) -> Value {
    let m = format!("bench_m{d:02}");
    let item = |name: &str, expr: String, normalise: Value| json!({"name": name, "expression": expr, "normalise": normalise});
    let mut scores = match kind(d) {
        Kind::MultiSum => vec![
            item(
                "sum",
                format!("sum by ({{{{LABEL}}}}) ({m})"),
                json!({"type": "Range", "min": "0", "max": "300"}),
            ),
            item(
                "max",
                format!("max by ({{{{LABEL}}}}) ({m})"),
                json!({"type": "MinMax"}),
            ),
        ],
        Kind::Range => vec![item(
            "v",
            format!("max by ({{{{LABEL}}}}) ({m})"),
            json!({"type": "Range", "min": "0", "max": "100"}),
        )],
        Kind::MinMax => vec![item(
            "v",
            format!("max by ({{{{LABEL}}}}) ({m})"),
            json!({"type": "MinMax"}),
        )],
        Kind::Rank => vec![item(
            "v",
            format!("max by ({{{{LABEL}}}}) ({m})"),
            json!({"type": "Rank"}),
        )],
        Kind::RangeLower => vec![item(
            "v",
            format!("max by ({{{{LABEL}}}}) ({m})"),
            json!({"type": "Range", "min": "0", "max": "100", "direction": "LowerIsBetter"}),
        )],
    };
    if d + 1 == defs {
        for s in &mut scores {
            s["missingValue"] = json!(-100);
        }
    }
    let mut def = json!({
        "apiVersion": "scoring.ocm-placement.io/v1alpha1",
        "kind": "ScoreDefinition",
        "metadata": {"name": definition_name(d), "labels": {"bench": "scorer-scale"}},
        "spec": {
            "scoreName": definition_name(d),
            "refreshPeriod": format!("{}ms", period.as_millis()),
            "scores": scores,
        }
    });
    if let Some(v) = valid_for {
        def["spec"]["validFor"] = json!(format!("{}s", v.as_secs()));
    }
    def
}

/// A deterministic value in [0, 100) for (cluster, definition, shard, version): splitmix64.
fn value(c: usize, d: usize, shard: u64, version: u32) -> f64 {
    let mut x = ((c as u64) << 32) ^ ((d as u64) << 16) ^ (shard << 12) ^ u64::from(version);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x % 10_000) as f64 / 100.0
}

/// The exporter's text: every definition's series for every cluster at its version (the last
/// definition has none for every tenth cluster).
fn exposition(versions: &[u32], defs: usize) -> String {
    let mut out = String::with_capacity(versions.len() * defs * 60);
    for d in 0..defs {
        for (c, v) in versions.iter().enumerate() {
            if d + 1 == defs && c % 10 == 9 {
                continue;
            }
            let name = cluster(c);
            if kind(d) == Kind::MultiSum {
                for s in 0..SHARDS {
                    let _ = writeln!(
                        out,
                        "bench_m{d:02}{{cluster=\"{name}\",shard=\"{s}\"}} {}",
                        value(c, d, s, *v)
                    );
                }
            } else {
                let _ = writeln!(
                    out,
                    "bench_m{d:02}{{cluster=\"{name}\"}} {}",
                    value(c, d, 0, *v)
                );
            }
        }
    }
    out
}

/// Every score object's items, by (namespace, name), read from the watch cache (only the
/// scorer writes them here).
async fn score_items(client: &Client) -> Result<BTreeMap<(String, String), Vec<(String, i32)>>> {
    let api = Api::<AddOnPlacementScore>::all(client.clone());
    // A loaded apiserver drops a 20,000-object list now and then: try again.
    let params = ListParams::default().match_any();
    let list = testenv::retry::api(|| api.list(&params)).await?;
    Ok(list
        .items
        .into_iter()
        .map(|s| {
            let key = (s.namespace().unwrap_or_default(), s.name_any());
            let items = s
                .status
                .map(|st| st.scores.into_iter().map(|i| (i.name, i.value)).collect())
                .unwrap_or_default();
            (key, items)
        })
        .collect())
}

/// What one window measured.
struct Round {
    phase: &'static str,
    changed_clusters: usize,
    query_sum: f64,
    query_max: f64,
    cpu: f64,
    rss: u64,
    computes: f64,
    created: f64,
    updated: f64,
    unchanged: f64,
    failed: f64,
    patch: f64,
    post: f64,
    moved: usize,
    definition_status: f64,
}

/// The apiserver's request counts this harness reports: (PATCH on addonplacementscores
/// status, POST of addonplacementscores, PATCH on scoredefinitions status).
fn apiserver_counts(samples: &[Sample]) -> (f64, f64, f64) {
    let by = scrape::requests_by_verb(samples, |group, resource| {
        (group == "cluster.open-cluster-management.io" && resource == "addonplacementscores")
            || (group == "scoring.ocm-placement.io" && resource == "scoredefinitions")
    });
    let get = |verb: &str, resource: &str| {
        by.get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(0.0)
    };
    (
        get("PATCH", "addonplacementscores/status") + get("PATCH", "addonplacementscores"),
        get("POST", "addonplacementscores"),
        // The scorer writes a definition's status by server-side apply (verb APPLY).
        get("APPLY", "scoredefinitions/status") + get("PATCH", "scoredefinitions/status"),
    )
}

async fn run(args: &Args) -> Result<String> {
    let (n, defs) = (args.clusters, args.definitions);
    if n == 0 || defs == 0 || args.rounds == 0 {
        return Err("--clusters, --definitions and --rounds must be at least 1".into());
    }
    let binary = testenv::build::workspace_binary(
        "resource-usage-hub",
        "resource-usage-hub",
        testenv::build::Profile::Release,
        !args.no_build,
    )?;
    eprintln!("starting the control plane");
    let cp = testenv::ControlPlane::start(testenv::Options::default().with_upstream_crds()).await?;
    let client = cp.client()?;

    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| create_cluster(client.clone(), cluster(i)))
        .buffer_unordered(32)
        .collect::<Vec<Result<()>>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>>>()?;
    eprintln!(
        "{n} clusters ready after {:.1} s; starting Prometheus",
        started.elapsed().as_secs_f64()
    );

    let mut versions = vec![0u32; n];
    let exporter = Exporter::start().await?;
    exporter.set(exposition(&versions, defs));
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1)).await?;
    let scrapes = exporter.scrapes();
    wait::poll(Duration::from_secs(60), Duration::from_millis(200), || {
        let done = exporter.scrapes() >= scrapes + 2;
        async move { done.then_some(()) }
    })
    .await
    .ok_or("Prometheus did not scrape the exporter within a minute")?;

    for d in 0..defs {
        testenv::scoring::apply(&client, &definition(d, defs, args.period, args.valid_for)).await?;
    }

    let dir = std::env::temp_dir().join(format!("scorer-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig)?;
    let port = testenv::ports::free()?;
    let metrics_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    eprintln!("{defs} definitions applied; starting the scorer");
    let t0 = Instant::now();
    let mut cmd = Command::new(&binary);
    cmd.args(["scorer", "--leader-elect=false", "--log-format=json"])
        .arg(format!("--definition-selector={SELECTOR}"))
        .arg(format!(
            "--definition-min-period={}ms",
            args.period.as_millis()
        ))
        .arg(format!("--max-definitions={}", defs.max(50)))
        .arg(format!("--definition-max-series={}", (n * 4).max(10_000)))
        .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
        .arg(format!("--prometheus-url={}", prom.url()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let scorer = ChildProcess::start_unlogged("the scorer", cmd)?;
    let pid = scorer.pid();

    // Sanity: every cluster scored by every definition (each object holds its items).
    let want = n * defs;
    let scored = Arc::new(AtomicUsize::new(0));
    wait::poll(Duration::from_secs(900), Duration::from_secs(10), || {
        let client = client.clone();
        let scored = Arc::clone(&scored);
        async move {
            let items = score_items(&client).await.ok()?;
            let with_scores = items.values().filter(|v| !v.is_empty()).count();
            scored.store(with_scores, Ordering::Relaxed);
            (with_scores >= want).then_some(())
        }
    })
    .await
    .ok_or_else(|| {
        format!(
            "only {} of {want} score objects had scores within 15 minutes",
            scored.load(Ordering::Relaxed)
        )
    })?;
    let first_secs = t0.elapsed().as_secs_f64();
    let first_cpu = procfs::cpu_time(pid).as_secs_f64();
    scorer.check_alive()?;
    eprintln!(
        "every cluster scored by every definition after {first_secs:.1} s; settling one period"
    );
    tokio::time::sleep(args.period).await;

    let mut prev_metrics = scrape::parse(&scrape::get(metrics_addr).await?);
    let mut prev_api = apiserver_counts(&scrape::apiserver(&client).await?);
    let mut prev_cpu = procfs::cpu_time(pid);
    let mut prev_items = score_items(&client).await?;
    let changed_per_round = n.div_ceil(20);
    let mut rounds = Vec::new();
    let start = tokio::time::Instant::now();
    for r in 0..2 * args.rounds {
        let changing = r < args.rounds;
        let mut changed_clusters = 0;
        if changing {
            let first = r * changed_per_round;
            for k in 0..changed_per_round.min(n) {
                versions[(first + k) % n] += 1;
            }
            changed_clusters = changed_per_round.min(n);
            exporter.set(exposition(&versions, defs));
        }
        tokio::time::sleep_until(start + args.period * (r as u32 + 1)).await;

        let text = scrape::get(metrics_addr).await?;
        let metrics = scrape::parse(&text);
        let api = apiserver_counts(&scrape::apiserver(&client).await?);
        let cpu = procfs::cpu_time(pid);
        let rss = procfs::status_bytes(pid, "VmRSS");
        let items = score_items(&client).await?;
        scorer.check_alive()?;

        let queries: Vec<f64> = metrics
            .iter()
            .filter(|s| s.name == "scorer_query_seconds")
            .map(|s| s.value)
            .collect();
        let delta = |name: &str, result: &str| {
            let of = |m: &[Sample]| {
                scrape::sum(m, name, |l| {
                    result.is_empty() || l.get("result").is_some_and(|v| v == result)
                })
            };
            of(&metrics) - of(&prev_metrics)
        };
        let moved = items
            .iter()
            .filter(|(k, v)| prev_items.get(*k) != Some(*v))
            .count();
        rounds.push(Round {
            phase: if changing { "5% change" } else { "no change" },
            changed_clusters,
            query_sum: queries.iter().sum(),
            query_max: queries.iter().copied().fold(0.0, f64::max),
            cpu: (cpu - prev_cpu).as_secs_f64(),
            rss,
            computes: delta("score_provider_computes_total", ""),
            created: delta("score_provider_writes_total", "created"),
            updated: delta("score_provider_writes_total", "updated"),
            unchanged: delta("score_provider_writes_total", "unchanged"),
            failed: delta("score_provider_writes_total", "refused")
                + delta("score_provider_writes_total", "hub_unavailable"),
            patch: api.0 - prev_api.0,
            post: api.1 - prev_api.1,
            moved,
            definition_status: api.2 - prev_api.2,
        });
        eprintln!(
            "round {} done ({} s)",
            r + 1,
            start.elapsed().as_secs_f64().round()
        );
        prev_metrics = metrics;
        prev_api = api;
        prev_cpu = cpu;
        prev_items = items;
    }
    let peak = procfs::status_bytes(pid, "VmHWM");
    scorer.check_alive()?;
    drop(scorer);
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);

    let mb = |b: u64| b as f64 / 1e6;
    let period = args.period.as_secs_f64();
    let mut out = format!(
        "## hub scorer, {n} clusters × {defs} definitions, period {period} s\n\n\
         First evaluation of every definition (start to {want} score objects with scores): \
         {first_secs:.1} s, {first_cpu:.1} s of scorer CPU. Peak RSS (VmHWM) at the end: \
         {:.1} MB. A round is one period; {changed_per_round} clusters get new values for \
         every definition at the start of each round of the first phase.\n\n\
         | round | phase | clusters changed | query s (sum / max over defs) | scorer CPU s | \
         CPU % of one core | VmRSS MB | computes | writes created / updated / unchanged / failed | \
         apiserver PATCH / POST on scores | objects with moved scores | renewal-only PATCH | \
         definition status writes |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        mb(peak),
    );
    for (i, r) in rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} / {:.3} | {:.2} | {:.0} | {:.1} | {:.0} | {:.0} / {:.0} / {:.0} / {:.0} | {:.0} / {:.0} | {} | {:.0} | {:.0} |",
            i + 1,
            r.phase,
            r.changed_clusters,
            r.query_sum,
            r.query_max,
            r.cpu,
            r.cpu / period * 100.0,
            mb(r.rss),
            r.computes,
            r.created,
            r.updated,
            r.unchanged,
            r.failed,
            r.patch,
            r.post,
            r.moved,
            (r.patch - r.moved as f64).max(0.0),
            r.definition_status,
        );
    }
    Ok(out)
}

async fn create_cluster(client: Client, name: String) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let c: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": name}, "spec": {"hubAcceptsClient": true}
    }))?;
    Api::<ManagedCluster>::all(client)
        .create(&PostParams::default(), &c)
        .await?;
    Ok(())
}
