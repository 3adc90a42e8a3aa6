//! Scale harness for the add-on manager: a real control plane (testenv's etcd and
//! kube-apiserver with the upstream OCM CRDs), a fleet of accepted ManagedClusters selected by
//! one placement, and the release `resource-usage-hub manager` as a child process. Prints a
//! markdown report; nothing is asserted beyond the manager doing its job.
//!
//! ```sh
//! cargo build --release -p resource-usage-hub --bin resource-usage-hub --example manager_scale
//! target/release/examples/manager_scale --no-build                 # 1,000 clusters
//! target/release/examples/manager_scale --no-build --clusters 100 --steady 10s
//! ```
//!
//! Phases: create the clusters (namespace + ManagedCluster), the AddOnDeploymentConfig, the
//! ClusterManagementAddOn (`Placements`, rollout `All`) and the PlacementDecisions (100
//! clusters each); start the manager and time until every cluster has its ManifestWork; a
//! steady window (RSS sampled each second, writes and passes counted from /metrics, one
//! unrelated event a second so that passes run); then an edit of the config, timed until every
//! work carries the new rendering.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use ocm_api::ManagedCluster;
use ocm_api::addon::v1alpha1::{AddOnDeploymentConfig, ClusterManagementAddOn};
use ocm_api::cluster::v1beta1::PlacementDecision;
use ocm_api::work::v1::ManifestWork;
use serde_json::json;
use testenv::harness::BoxError;
use testenv::process::ChildProcess;
use testenv::scrape::{self, total as counter};
use testenv::{procfs, wait};

type Result<T, E = BoxError> = std::result::Result<T, E>;

const ADDON: &str = "resource-usage-collect";
const HUB_NS: &str = "scale-addon";
const HASH: &str = "addon.ocm-placement.io/rendering-hash";

/// Scale harness for the add-on manager on a real apiserver.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// The steady window: RSS sampled, writes counted.
    #[arg(long, default_value = "30s", value_parser = ocm_runtime::flags::parse_duration)]
    steady: Duration,
    /// Use target/release/resource-usage-hub as it is.
    #[arg(long)]
    no_build: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    testenv::harness::main_printing("the manager, kube-apiserver and etcd", run(&args))
}

fn name(i: usize) -> String {
    format!("scale-cluster-{i:05}")
}

async fn run(args: &Args) -> Result<String> {
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
    let n = args.clusters;
    futures::stream::iter(0..n)
        .map(|i| create_cluster(client.clone(), name(i)))
        .buffer_unordered(32)
        .collect::<Vec<Result<()>>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>>>()?;
    create_ns(&client, HUB_NS).await?;
    let fleet_secs = started.elapsed().as_secs_f64();

    let adc: AddOnDeploymentConfig = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
        "metadata": {"name": "agents", "namespace": HUB_NS},
        "spec": {"customizedVariables": [{"name": "REFRESH_PERIOD", "value": "60s"}]}
    }))?;
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), HUB_NS)
        .create(&PostParams::default(), &adc)
        .await?;
    let cma: ClusterManagementAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ClusterManagementAddOn",
        "metadata": {"name": ADDON, "annotations": {"addon.open-cluster-management.io/lifecycle": "self"}},
        "spec": {
            "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                                  "defaultConfig": {"namespace": HUB_NS, "name": "agents"}}],
            "installStrategy": {"type": "Placements", "placements": [{"namespace": HUB_NS, "name": "fleet"}]}
        }
    }))?;
    Api::<ClusterManagementAddOn>::all(client.clone())
        .create(&PostParams::default(), &cma)
        .await?;
    let decisions = Api::<PlacementDecision>::namespaced(client.clone(), HUB_NS);
    for (g, chunk) in (0..n).collect::<Vec<_>>().chunks(100).enumerate() {
        let d: PlacementDecision = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
            "metadata": {"name": format!("fleet-decision-{}", g + 1), "labels": {
                "cluster.open-cluster-management.io/placement": "fleet",
                "cluster.open-cluster-management.io/decision-group-index": "0",
                "cluster.open-cluster-management.io/decision-group-name": ""}}
        }))?;
        let d = decisions.create(&PostParams::default(), &d).await?;
        let list: Vec<_> = chunk
            .iter()
            .map(|i| json!({"clusterName": name(*i), "reason": ""}))
            .collect();
        decisions
            .patch_status(
                &d.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"decisions": list}})),
            )
            .await?;
    }

    let dir = std::env::temp_dir().join(format!("manager-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig)?;
    let port = testenv::ports::free()?;
    let metrics_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    eprintln!("{n} clusters ready after {fleet_secs:.1} s; starting the manager");
    let t0 = Instant::now();
    let mut cmd = Command::new(&binary);
    cmd.args([
        "manager",
        "--agent-image=quay.io/ocm-placement/resource-usage-agent:scale",
        "--leader-elect=false",
        "--log-format=json",
        "--client-qps=200",
        "--client-burst=400",
    ])
    .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
    .env("KUBECONFIG", &kubeconfig)
    .env("RUST_LOG", "warn")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    let manager = ChildProcess::start_unlogged("the manager", cmd)?;
    let pid = manager.pid();
    let works = Api::<ManifestWork>::all(client.clone());
    let selector =
        ListParams::default().labels(&format!("open-cluster-management.io/addon-name={ADDON}"));
    wait::poll(Duration::from_secs(600), Duration::from_millis(200), || {
        let works = works.clone();
        let selector = selector.clone();
        async move {
            let done = works.list_metadata(&selector).await.ok()?.items.len();
            (done >= n).then_some(())
        }
    })
    .await
    .ok_or("the works did not all appear within 10 minutes")?;
    let install_secs = t0.elapsed().as_secs_f64();
    let install_cpu = procfs::cpu_time(pid).as_secs_f64();
    let peak_install = procfs::status_bytes(pid, "VmHWM");
    manager.check_alive()?;

    // Settled: status writes done too (a pass with nothing to write). Events keep passes coming.
    let mut k = 0;
    let mut last = counter(
        &scrape::get(metrics_addr).await?,
        "addon_manager_writes_total",
    );
    loop {
        poke(&decisions, &mut k).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = counter(
            &scrape::get(metrics_addr).await?,
            "addon_manager_writes_total",
        );
        if now == last {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            return Err("the manager did not settle within 10 minutes".into());
        }
        last = now;
    }
    let settle_secs = t0.elapsed().as_secs_f64();
    let install_writes = last;

    // Steady: one unrelated event a second (a PlacementDecision of another placement).
    let m0 = scrape::get(metrics_addr).await?;
    let cpu0 = procfs::cpu_time(pid);
    let mut rss = Vec::new();
    let steady_start = Instant::now();
    while steady_start.elapsed() < args.steady {
        poke(&decisions, &mut k).await?;
        rss.push(procfs::status_bytes(pid, "VmRSS"));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let m1 = scrape::get(metrics_addr).await?;
    let steady_cpu = (procfs::cpu_time(pid) - cpu0).as_secs_f64();
    manager.check_alive()?;
    let passes =
        counter(&m1, "addon_manager_passes_total") - counter(&m0, "addon_manager_passes_total");
    let writes =
        counter(&m1, "addon_manager_writes_total") - counter(&m0, "addon_manager_writes_total");
    let pass_sum = counter(&m1, "addon_manager_pass_duration_seconds_sum")
        - counter(&m0, "addon_manager_pass_duration_seconds_sum");
    rss.sort_unstable();
    let median = rss.get(rss.len() / 2).copied().unwrap_or(0);
    let max = rss.last().copied().unwrap_or(0);

    // A config edit: every work gets the new rendering (rollout All).
    let before = works.list(&selector).await?;
    let old: std::collections::BTreeSet<String> = before
        .items
        .iter()
        .filter_map(|w| w.annotations().get(HASH).cloned())
        .collect();
    let w0 = counter(
        &scrape::get(metrics_addr).await?,
        "addon_manager_writes_total",
    );
    let t1 = Instant::now();
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), HUB_NS)
        .patch(
            "agents",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"customizedVariables": [{"name": "REFRESH_PERIOD", "value": "30s"}]}})),
        )
        .await?;
    wait::poll(Duration::from_secs(600), Duration::from_millis(200), || {
        let old = old.clone();
        let works = works.clone();
        let selector = selector.clone();
        async move {
            let list = works.list(&selector).await.ok()?;
            let fresh = list
                .items
                .iter()
                .filter(|w| w.annotations().get(HASH).is_some_and(|h| !old.contains(h)))
                .count();
            (fresh >= n).then_some(())
        }
    })
    .await
    .ok_or("the new rendering did not reach every work within 10 minutes")?;
    let rollout_secs = t1.elapsed().as_secs_f64();
    let rollout_writes = counter(
        &scrape::get(metrics_addr).await?,
        "addon_manager_writes_total",
    ) - w0;
    let peak = procfs::status_bytes(pid, "VmHWM");
    manager.check_alive()?;
    drop(manager);
    let _ = std::fs::remove_dir_all(&dir);

    let mb = |b: u64| b as f64 / 1e6;
    Ok(format!(
        "## add-on manager, {n} clusters (one placement, 100 clusters per decision)\n\n\
         | measure | value |\n| --- | --- |\n\
         | start to every work written (list, plan, {n} MCAs, RBAC, works) | {install_secs:.1} s, {install_cpu:.1} s of manager CPU |\n\
         | start to settled (every status written; a pass writes nothing) | {settle_secs:.1} s, {install_writes:.0} writes |\n\
         | peak RSS during the install (VmHWM) | {:.1} MB |\n\
         | steady RSS (VmRSS median / max over {:.0} s) | {:.1} MB / {:.1} MB |\n\
         | steady passes / writes (one unrelated event a second) | {passes:.0} / {writes:.0} |\n\
         | one steady pass (mean) | {:.1} ms |\n\
         | manager CPU in the steady window | {:.1} % of one core |\n\
         | config edit to every work rewritten (rollout All) | {rollout_secs:.1} s, {rollout_writes:.0} writes |\n\
         | peak RSS overall | {:.1} MB |\n",
        mb(peak_install),
        args.steady.as_secs_f64(),
        mb(median),
        mb(max),
        if passes > 0.0 {
            pass_sum / passes * 1e3
        } else {
            0.0
        },
        steady_cpu / args.steady.as_secs_f64() * 100.0,
        mb(peak),
    ))
}

/// An event the manager sees and has nothing to do about.
async fn poke(decisions: &Api<PlacementDecision>, k: &mut usize) -> Result<()> {
    let d: PlacementDecision = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": format!("unrelated-{k}"), "labels": {"cluster.open-cluster-management.io/placement": "other"}}
    }))?;
    decisions.create(&PostParams::default(), &d).await?;
    *k += 1;
    Ok(())
}

async fn create_ns(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

async fn create_cluster(client: Client, name: String) -> Result<()> {
    create_ns(&client, &name).await?;
    let c: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": name}, "spec": {"hubAcceptsClient": true}
    }))?;
    Api::<ManagedCluster>::all(client)
        .create(&PostParams::default(), &c)
        .await?;
    Ok(())
}
