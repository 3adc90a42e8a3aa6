//! Scale harness for the resource-usage agent: a real control plane (testenv's etcd and
//! kube-apiserver with the upstream OCM CRDs) acting as both hub and managed cluster, a fleet of
//! nodes and bound pods of realistic size, and the release `resource-usage-agent run` as a
//! child process. It measures the agent's budget (steady RSS under 50 MB, one recompute
//! under 50 ms with 1,000 nodes and 30,000 pods) and prints a markdown report; the targets are
//! reported, not asserted.
//!
//! ```sh
//! cargo build --release -p resource-usage-agent --bin resource-usage-agent --example agent_scale
//! target/release/examples/agent_scale --no-build                       # 1,000 nodes, 30,000 pods
//! target/release/examples/agent_scale --no-build --nodes 50 --pods 1000 --steady 15s
//! ```
//!
//! Phases: create the nodes (create, write status, clear the admission's not-ready taint) and
//! the pods (bound through `spec.nodeName`, spread round-robin over the nodes and over
//! `--namespaces` namespaces); start the agent and time until its AddOnPlacementScore holds the
//! scores the harness expects from what it created (initial list + index build + first write);
//! then a steady window in which a background task creates and deletes `--churn` pods a second
//! (so that recomputes come from the debounce as well as from the refresh period) while the
//! agent's VmRSS is sampled every second; finally, with the churn stopped, the scores must
//! again match the harness's expectation.
//!
//! CPU time comes from `/proc/<pid>/stat`, memory from `/proc/<pid>/status`, the recompute
//! cost from the agent's `score_provider_compute_duration_seconds` histogram. Everything is
//! stopped at the end, on error and on Ctrl-C / SIGTERM; the agent also gets
//! `PR_SET_PDEATHSIG` (testenv's processes).
//!
//! resource-usage-agent/examples/agent_scale/: this file holds the flags, the run and the report;
//! `fleet.rs` what is created and the scores expected of it, `churn.rs` the steady window's
//! churn, `agent.rs` the agent's binary and process. What every harness needs (ports, builds,
//! processes, retries, polls, /metrics, /proc) is in `testenv`.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
// No poisoning: a panicked churn or watch task leaves its state readable for the report.
use ocm_api::AddOnPlacementScore;
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::{RESOURCE_USAGE_SCORE, names};
use parking_lot::Mutex;
use serde_json::{Value, json};
use testenv::harness::BoxError;
use testenv::process::ChildProcess;
use testenv::procfs;
use testenv::retry::api as retry;
use testenv::scrape::{self, Sample};

mod agent;
mod churn;
mod fleet;

use agent::*;
use churn::*;
use fleet::*;

type Result<T, E = BoxError> = std::result::Result<T, E>;

const CLUSTER: &str = "scale-cluster";
const CHURN_NS: &str = "scale-churn";
/// Per node: 32 cores and 128 GiB allocatable.
const NODE_CPU_M: i64 = 32_000;
const NODE_MEM: i64 = 128 << 30;
const MI: i64 = 1 << 20;
const CHANGES: &str = "score_provider_changes_total";
const COMPUTE: &str = "score_provider_compute_duration_seconds";

/// Scale harness for the resource-usage agent on a real apiserver.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    #[arg(long, default_value_t = 30_000)]
    pods: usize,
    /// Namespaces the pods are spread over.
    #[arg(long, default_value_t = 30)]
    namespaces: usize,
    /// The steady window: churn running, RSS sampled every second.
    #[arg(long, default_value = "60s", value_parser = ocm_runtime::flags::parse_duration)]
    steady: Duration,
    /// Pods created (and as many deleted) per second during the steady window.
    #[arg(long, default_value_t = 20.0)]
    churn: f64,
    /// The agent's --refresh-period.
    #[arg(long, default_value = "10s", value_parser = ocm_runtime::flags::parse_duration)]
    refresh_period: Duration,
    /// The agent's --debounce.
    #[arg(long, default_value = "1s", value_parser = ocm_runtime::flags::parse_duration)]
    debounce: Duration,
    /// Harness requests in flight at once while creating the fleet.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up waiting for the first (and the final) scores after this long.
    #[arg(long, default_value = "10m", value_parser = ocm_runtime::flags::parse_duration)]
    timeout: Duration,
    /// More arguments for `resource-usage-agent run` (repeatable), e.g. `--agent-arg=--hysteresis=5`.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Environment for the agent, `KEY=VALUE` (repeatable; it gets nothing else), e.g.
    /// `--agent-env GLIBC_TUNABLES=glibc.malloc.trim_threshold=0`.
    #[arg(long = "agent-env")]
    agent_env: Vec<String>,
    /// Do not run `cargo build` for the agent binary first.
    #[arg(long)]
    no_build: bool,
    /// At the end, attach gdb to the agent to read glibc's `malloc_stats()` (heap in use vs
    /// held) and call `malloc_trim(0)`: tells live memory from memory the allocator keeps.
    #[arg(long)]
    heap_probe: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    testenv::harness::main_printing("the agent, kube-apiserver and etcd", run(&args))
}

async fn run(args: &Args) -> Result<String> {
    if args.nodes == 0 || args.namespaces == 0 {
        return Err("--nodes and --namespaces must be at least 1".into());
    }
    let bin = agent_binary(args.no_build)?;
    let work = std::env::temp_dir().join(format!("agent-scale-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    eprintln!("work dir (kubeconfig, agent log): {}", work.display());
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let t = Instant::now();
    let cp = testenv::ControlPlane::start(testenv::Options::default().with_upstream_crds()).await?;
    let cp_time = t.elapsed();
    let kubeconfig = work.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig)?;
    let client = cp.client()?;
    let [etcd_pid, apiserver_pid] = cp.pids();

    let namespaces: Vec<String> = (0..args.namespaces)
        .map(|k| format!("shop-{k:02}"))
        .collect();
    for ns in namespaces
        .iter()
        .map(String::as_str)
        .chain([CLUSTER, CHURN_NS])
    {
        let body: Namespace = serde_json::from_value(json!({ "metadata": { "name": ns } }))?;
        let (api, pp) = (Api::<Namespace>::all(client.clone()), PostParams::default());
        retry(|| api.create(&pp, &body)).await?;
    }

    eprintln!("creating {} nodes", args.nodes);
    let t = Instant::now();
    let nodes_api = Api::<Node>::all(client.clone());
    let mut results = futures::stream::iter(0..args.nodes)
        .map(|n| create_node(&nodes_api, n))
        .buffer_unordered(args.concurrency);
    while let Some(r) = results.next().await {
        r?;
    }
    drop(results);
    let node_time = t.elapsed();

    eprintln!(
        "creating {} pods in {} namespaces",
        args.pods, args.namespaces
    );
    let t = Instant::now();
    let mut expected = Expected {
        per_node: vec![(0, 0); args.nodes],
        bounds: [(0.0, 1.0); 2],
    };
    let done = AtomicU64::new(0);
    let mut results = futures::stream::iter(0..args.pods)
        .map(|i| {
            let (client, ns, done) = (client.clone(), &namespaces[i % args.namespaces], &done);
            async move {
                let profile = profile_of(i);
                let name = format!("{}-{:06}", PROFILES[profile].app, i);
                let body = pod_body(&name, ns, &node_name(i % args.nodes), profile);
                create_pod(&client, ns, body).await?;
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if d % 5000 == 0 {
                    eprintln!("  {d} pods ({:.0}/s)", d as f64 / t.elapsed().as_secs_f64());
                }
                Ok::<_, BoxError>(i)
            }
        })
        .buffer_unordered(args.concurrency);
    while let Some(r) = results.next().await {
        let i = r?;
        expected.add(i % args.nodes, profile_of(i), 1);
    }
    drop(results);
    let pod_time = t.elapsed();
    let pod_size = sample_size(Api::<Pod>::namespaced(client.clone(), &namespaces[0])).await;
    let node_size = sample_size(nodes_api).await;
    let apiserver_rss_fleet = procfs::status_bytes(apiserver_pid, "VmRSS");

    // The agent, and the first scores.
    let ranges = expected.range_args();
    let want = expected.scores()?;
    let metrics = SocketAddr::from(([127, 0, 0, 1], testenv::ports::free()?));
    let mut agent_args = vec![
        "run".to_string(),
        format!("--hub-kubeconfig={}", kubeconfig.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cluster-name={CLUSTER}"),
        "--addon-namespace=default".into(),
        "--health-lease=false".into(),
        format!("--metrics-bind-address={metrics}"),
        format!("--refresh-period={}", args.refresh_period.as_secs_f64()),
        format!("--debounce={}", args.debounce.as_secs_f64()),
        "--log-level=info".into(),
    ];
    agent_args.extend(ranges.iter().cloned());
    agent_args.extend(args.agent_args.iter().cloned());
    eprintln!("starting the agent; waiting for scores {want:?}");
    let agent = Agent::start(
        &bin,
        &agent_args,
        &args.agent_env,
        work.join("agent.log"),
        metrics,
    )?;
    let t = Instant::now();
    let scores_api = Api::<AddOnPlacementScore>::namespaced(client.clone(), CLUSTER);
    let first = wait_scores(&scores_api, &agent, &want, args.timeout).await?;
    let (first_time, first_cpu) = (t.elapsed(), procfs::cpu_time(agent.pid));
    let hwm_first = procfs::status_bytes(agent.pid, "VmHWM");
    let rss_first = procfs::status_bytes(agent.pid, "VmRSS");

    // Steady window with churn.
    eprintln!(
        "steady window: {:?} with {} pods/s churn",
        args.steady, args.churn
    );
    let m0 = agent.metrics().await?;
    let (cpu0, api_cpu0, etcd_cpu0, busy0) = (
        procfs::cpu_time(agent.pid),
        procfs::cpu_time(apiserver_pid),
        procfs::cpu_time(etcd_pid),
        procfs::machine_busy(),
    );
    let churn = Churn::start(client.clone(), args.churn, args.nodes);
    let window = Instant::now();
    let mut rss = Vec::new();
    let mut api_rss = Vec::new();
    while window.elapsed() < args.steady {
        tokio::time::sleep(Duration::from_secs(1)).await;
        agent.check_alive()?;
        rss.push(procfs::status_bytes(agent.pid, "VmRSS"));
        api_rss.push(procfs::status_bytes(apiserver_pid, "VmRSS"));
    }
    let wall = window.elapsed();
    let (cpu1, api_cpu1, etcd_cpu1, busy1) = (
        procfs::cpu_time(agent.pid),
        procfs::cpu_time(apiserver_pid),
        procfs::cpu_time(etcd_pid),
        procfs::machine_busy(),
    );
    let m1 = agent.metrics().await?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid)).unwrap_or_default();
    let churned = churn.stop().await;

    // Churn over and its pods deleted: the scores must match again (counting any pod whose
    // deletion failed).
    for (node, profile) in churned.live.values() {
        expected.add(*node, *profile, 1);
    }
    // Past the debounce, so that the last recompute saw every change.
    tokio::time::sleep(args.debounce + Duration::from_secs(2)).await;
    let want_final = expected.scores()?;
    let last = wait_scores(&scores_api, &agent, &want_final, args.timeout).await?;
    let hwm = procfs::status_bytes(agent.pid, "VmHWM");
    let m_end = agent.metrics().await?;
    let probe = if args.heap_probe {
        let (held, used) = heap_probe(agent.pid, &agent.log)?;
        let rss = procfs::status_bytes(agent.pid, "VmRSS");
        let anon = procfs::status_bytes(agent.pid, "RssAnon");
        Some(format!(
            "{} / {} ; {} / {}",
            mb(used),
            mb(held),
            mb(rss),
            mb(anon)
        ))
    } else {
        None
    };
    drop(agent);

    // The report.
    let delta = |name: &str, label: Option<(&str, &str)>| {
        metric(&m1, name, label) - metric(&m0, name, label)
    };
    let computes = delta("score_provider_computes_total", Some(("result", "ok")));
    let c_sum = delta("score_provider_compute_duration_seconds_sum", None);
    let c_count = delta("score_provider_compute_duration_seconds_count", None);
    let hist: Vec<(f64, f64)> = (scrape::buckets(&m1, COMPUTE)
        .into_iter()
        .zip(scrape::buckets(&m0, COMPUTE)))
    .map(|((le, a), (_, b))| (le, a - b))
    .collect();
    let quantile = |q: f64| {
        let hit = hist
            .iter()
            .find(|(_, c)| c_count > 0.0 && *c >= q * c_count);
        hit.map_or("-".into(), |(le, _)| format!("≤ {}", ms_f(*le)))
    };
    let writes: Vec<String> = [
        "created",
        "updated",
        "unchanged",
        "refused",
        "hub_unavailable",
    ]
    .iter()
    .map(|r| (r, delta("score_provider_writes_total", Some(("result", r)))))
    .filter(|(_, v)| *v > 0.0)
    .map(|(r, v)| format!("{v:.0} {r}"))
    .collect();
    let all_count = metric(
        &m_end,
        "score_provider_compute_duration_seconds_count",
        None,
    );
    let all_sum = metric(&m_end, "score_provider_compute_duration_seconds_sum", None);
    let mut sorted = rss.clone();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    let max = sorted.last().copied().unwrap_or(0);
    let secs = wall.as_secs_f64();
    let (agent_cpu, api_cpu, etcd_cpu) = (cpu1 - cpu0, api_cpu1 - api_cpu0, etcd_cpu1 - etcd_cpu0);
    let others = (busy1 - busy0).saturating_sub(agent_cpu + api_cpu + etcd_cpu);
    let verdict = |ok: bool| if ok { "✅" } else { "❌" };
    let field = |text: &str, key: &str| procfs::field_bytes(text, key).map_or("-".into(), mb);
    let profiles: Vec<String> = (PROFILES.iter().map(|p| (p.app, p.effective())))
        .map(|(app, (c, m))| format!("{app} {c}m/{}Mi", m / MI))
        .collect();
    let probe = probe.map_or(String::new(), |p| {
        format!("| glibc heap in use / held (`malloc_stats`); VmRSS / RssAnon after `malloc_trim(0)` | {p} | |\n")
    });
    let c_mean = mean(c_sum, c_count);
    Ok(format!(
        "## resource-usage agent: {nodes} nodes, {pods} pods

Machine: {cores} cores, load average before the run `{load}`; etcd and kube-apiserver (testenv) on the same machine. Agent `{bin}` with `--refresh-period={refresh:?} --debounce={debounce:?}`, extra arguments {extra:?}, environment {env:?}. Steady window {steady:?}.

| measure | value | target |
|---|---|---|
| time to first scores (spawn → initial list of nodes and pods → index → score object written, read back and matching); agent CPU in that time | {first_t}; {first_cpu} | |
| VmRSS, steady window (median / max of {n} samples) | {rss_med} / {rss_max} | < 50 MB {rss_ok} |
| VmRSS right after the first scores | {rss_first} | |
| VmHWM (peak RSS): after the first scores / whole run | {hwm_first} / {hwm} | |
| RssAnon / RssFile at the end of the window | {anon} / {file} | |
{probe}| one recompute, steady window: mean (`_sum / _count`) | {c_mean} over {c_count:.0} | < 50 ms {c_ok} |
| one recompute, steady window: p50 / p99 / max (histogram bucket upper bounds) | {p50} / {p99} / {pmax} | |
| one recompute over the agent's life: mean | {all_mean} over {all_count:.0} | |
| recomputes (ok) / writes, steady window | {computes:.0} ({compute_rate:.2}/s) / {writes} | |
| pod / node changes the agent saw, steady window | {pod_changes:.0} / {node_changes:.0} | |
| agent CPU, steady window | {agent_cpu} ({agent_pct:.2}% of one core) | |
| churn, steady window | {created} created, {deleted} deleted, {failed} failed ({churn_rate:.1}/s) | |
| CPU in the steady window: kube-apiserver / etcd / everything else (this harness, other builds) | {api_cpu} / {etcd_cpu} / {others} (of {secs:.0} s × {cores} cores) | |
| kube-apiserver VmRSS: after creating the fleet / max in the window | {api_fleet} / {api_max} | |
| churn stopped and its {cleaned} remaining pods deleted; debounce + 2 s later, scores match the harness's expectation | yes ({live} churn pods could not be deleted) | |

Setup: control plane {cp_t}; {nodes} nodes in {node_t} ({node_rate:.0}/s, 3 requests each); {pods} pods in {pod_t} ({pod_rate:.0}/s), concurrency {conc}. Objects as served (JSON incl. managedFields): pod ≈ {pod_kb} ({pod_mf} of it managedFields), node ≈ {node_kb} ({node_mf}). Pod profiles (effective requests): {profiles}. The cluster-scope ranges given to the agent are centred on the free amounts the harness expects (`{ranges}`): one point is 0.1 core or 0.1 GiB, so a single pod more or less than created would show; node scope is 0 to one node's allocatable.

First scores: {first}.  
Final scores: {last}.
",
        nodes = args.nodes,
        pods = args.pods,
        cores = std::thread::available_parallelism().map_or(0, |n| n.get()),
        load = load_before.trim(),
        bin = bin.display(),
        refresh = args.refresh_period,
        debounce = args.debounce,
        extra = args.agent_args,
        env = args.agent_env,
        steady = args.steady,
        first_t = secs_f(first_time),
        first_cpu = secs_f(first_cpu),
        n = rss.len(),
        rss_med = mb(median),
        rss_max = mb(max),
        rss_ok = verdict(max < 50_000_000),
        rss_first = mb(rss_first),
        hwm_first = mb(hwm_first),
        hwm = mb(hwm),
        anon = field(&status, "RssAnon"),
        file = field(&status, "RssFile"),
        c_mean = ms_f(c_mean),
        c_ok = verdict(c_count > 0.0 && c_mean < 0.05),
        p50 = quantile(0.5),
        p99 = quantile(0.99),
        pmax = quantile(1.0),
        all_mean = ms_f(mean(all_sum, all_count)),
        compute_rate = computes / secs,
        writes = if writes.is_empty() { "none".into() } else { writes.join(", ") },
        pod_changes = delta(CHANGES, Some(("what", "pod"))),
        node_changes = delta(CHANGES, Some(("what", "node"))),
        agent_pct = 100.0 * agent_cpu.as_secs_f64() / secs,
        agent_cpu = secs_f(agent_cpu),
        created = churned.created,
        deleted = churned.deleted,
        failed = churned.failed,
        churn_rate = churned.created as f64 / secs,
        api_cpu = secs_f(api_cpu),
        etcd_cpu = secs_f(etcd_cpu),
        others = secs_f(others),
        api_fleet = mb(apiserver_rss_fleet),
        api_max = mb(api_rss.iter().copied().max().unwrap_or(0)),
        live = churned.live.len(),
        cleaned = churned.cleaned,
        ranges = ranges.join(" "),
        cp_t = secs_f(cp_time),
        node_t = secs_f(node_time),
        node_rate = args.nodes as f64 / node_time.as_secs_f64(),
        pod_t = secs_f(pod_time),
        pod_rate = args.pods as f64 / pod_time.as_secs_f64(),
        conc = args.concurrency,
        pod_kb = kb(pod_size.0),
        pod_mf = kb(pod_size.1),
        node_kb = kb(node_size.0),
        node_mf = kb(node_size.1),
        profiles = profiles.join(", "),
        first = fmt_scores(&first),
        last = fmt_scores(&last),
    ))
}

fn mean(sum: f64, count: f64) -> f64 {
    if count > 0.0 { sum / count } else { 0.0 }
}

/// The sum of series `name` whose labels hold `label` (`None`: every series).
fn metric(samples: &[Sample], name: &str, label: Option<(&str, &str)>) -> f64 {
    scrape::sum(samples, name, |l| {
        label.is_none_or(|(k, v)| l.get(k).is_some_and(|x| x == v))
    })
}

fn fmt_scores(s: &BTreeMap<String, i32>) -> String {
    s.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn kb(bytes: usize) -> String {
    format!("{:.1} KB", bytes as f64 / 1e3)
}

fn secs_f(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ms_f(secs: f64) -> String {
    if secs.is_infinite() {
        "+Inf".into()
    } else {
        format!("{:.3} ms", secs * 1e3)
    }
}
