//! A hub outage, against the real binaries on one hub: the scheduler, the
//! add-on manager and the hub scorer with leader election on, one resource-usage agent per
//! cluster. The apiserver they use is killed for 60 s; meanwhile the test keeps writing through
//! a second apiserver on the same etcd (a Placement and a score change), then compacts etcd, so
//! that every watch resumes from a compacted `resourceVersion` and gets 410 Gone.
//!
//! Asserted: no PlacementDecision of an untouched Placement is deleted or changes, no
//! ManagedClusterAddOn is deleted (watched throughout through the second apiserver); every
//! process runs throughout; each Lease has the same holder after the outage as before; the
//! changes made in the gap are seen (relist, no missed update); and work resumes after the
//! return: a new Placement is scheduled, the scorer writes again, a load change moves a
//! decision.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::fleet::{Fleet, LEASE_NAMESPACE, Options, PLACEMENTS, binaries};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use ocm_api::{AddOnPlacementScore, ManagedCluster, ManagedClusterAddOn, PlacementDecision};
use serde_json::{Value, json};
use testenv::eventually;
use testenv::prometheus::{Exporter, Prometheus};

/// Liveness bound for anything to happen (generous: a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(90);
const OUTAGE: Duration = Duration::from_secs(60);
/// How soon after the return work must have resumed: "within seconds", generously (measured
/// 7 to 9 s on a loaded 2-core machine; with client-go's watch backoff it was 77 s).
const RESUME: Duration = Duration::from_secs(30);
const ADDON: &str = ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;
const LEASES: [&str; 3] = [
    "placement-scheduler",
    "resource-usage-collect-manager",
    "resource-usage-hub-scorer",
];
/// A score only the test writes, to change during the gap.
const GAP_SCORE: &str = "gap-score";
/// The scorer's score (its own name, apart from the agents').
const HUB_SCORE: &str = "hub-score";
/// Placements nothing touches: their decisions must stay exactly as they were.
const UNTOUCHED: [&str; 2] = ["install", "steady"];

#[tokio::test]
async fn a_hub_outage_loses_nothing_and_the_gap_is_relisted() {
    let logs = std::env::temp_dir().join(format!("outage-test-logs-{}", std::process::id()));
    let clusters = [("east", 16u32), ("west", 24), ("south", 32)];
    let opts = Options {
        clusters: clusters
            .iter()
            .map(|(c, n)| ((*c).to_owned(), *n))
            .collect(),
        // The default refresh (and so score TTL, three periods): scores outlive the outage.
        refresh: Duration::from_secs(60),
        debounce: Duration::from_millis(500),
        // Built now, so that the drill never runs stale binaries.
        bin_dir: binaries(true).expect("the fleet's binaries"),
        log_dir: logs.clone(),
        leader_elect: true,
    };
    let mut fleet = Fleet::start(&opts).await.expect("the fleet");
    let client = fleet.client.clone();

    // The scorer reads a real Prometheus that scrapes one node per cluster.
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(exposition(&clusters));
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");
    // The chart's built-in definition, filling the scorer's own score object.
    let mut scorer_args: Vec<String> =
        vec!["--refresh-period=5s".into(), "--score-ttl=180s".into()];
    scorer_args.extend(
        fleet
            .builtin_definition(testenv::scoring::Builtin {
                name: "outage".into(),
                score_name: HUB_SCORE.into(),
                refresh_period: "5s".into(),
                window: "1m".into(),
                step: "1s".into(),
                max_data_age: "30s".into(),
                range: Some(("32".into(), "128Gi".into())),
                labels: Vec::new(),
            })
            .await
            .expect("the scorer's definition"),
    );
    let scorer_args: Vec<&str> = scorer_args.iter().map(String::as_str).collect();
    fleet
        .start_scorer(&opts, &prom.url(), &scorer_args)
        .expect("scorer");

    // What the Placements select on.
    label(&client, "east", "a").await;
    label(&client, "west", "b").await;
    for (c, v) in [("east", 100), ("west", 0), ("south", 0)] {
        set_score(&client, c, v).await;
    }
    // The add-on installs through the Placement `install` (every cluster).
    fleet
        .install_addon("install")
        .await
        .expect("the ClusterManagementAddOn");
    let placements = [
        ("install", json!({"clusterSets": ["fleet"]})),
        ("steady", prefer_free_cpu()),
        ("gap", gap_selector("a")),
        (
            "scored",
            json!({"numberOfClusters": 1, "clusterSets": ["fleet"],
                   "prioritizerPolicy": {"mode": "Exact", "configurations": [
                       {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": GAP_SCORE, "scoreName": "value"}}, "weight": 1}]}}),
        ),
    ];
    for (name, spec) in placements {
        fleet.placement(name, spec).await.expect("placement");
    }
    for (placement, want) in [
        ("install", vec!["east", "south", "west"]),
        ("steady", vec!["south"]),
        ("gap", vec!["east"]),
        ("scored", vec!["east"]),
    ] {
        wait_decisions(&fleet, placement, &want).await;
    }
    for (c, _) in &clusters {
        eventually(&format!("the add-on on {c}"), DEADLINE, || async {
            Api::<ManagedClusterAddOn>::namespaced(client.clone(), c)
                .get_opt(ADDON)
                .await
                .ok()?
        })
        .await;
        eventually(&format!("the scorer's score of {c}"), DEADLINE, || {
            valid_until(&client, c, HUB_SCORE)
        })
        .await;
    }
    let holders = eventually("every Lease held", DEADLINE, || async {
        let mut out = BTreeMap::new();
        for l in LEASES {
            out.insert(l, holder(&client, l).await.filter(|h| !h.is_empty())?);
        }
        Some(out)
    })
    .await;
    fleet.check().expect("all running before the outage");

    // The baseline, then watch it through a second apiserver for the rest of the test.
    let second = fleet
        .cp
        .second_apiserver()
        .await
        .expect("a second apiserver");
    let via_second = second.client().expect("client");
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let baseline = untouched_decisions(&client).await;
    let addons = addon_uids(&client).await;
    let watches = [
        tokio::spawn(watch_decisions(
            via_second.clone(),
            baseline.clone(),
            violations.clone(),
        )),
        tokio::spawn(watch_addons(
            via_second.clone(),
            addons.clone(),
            violations.clone(),
        )),
    ];
    let scorer_before = valid_until(&client, "east", HUB_SCORE).await;

    // The outage. Meanwhile, through the second apiserver: `gap` now wants the other cluster,
    // and the score `scored` follows flips.
    fleet.cp.stop_apiserver().expect("stop the apiserver");
    let down = Instant::now();
    Api::<ocm_api::Placement>::namespaced(via_second.clone(), PLACEMENTS)
        .patch(
            "gap",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": gap_selector("b")})),
        )
        .await
        .expect("change gap during the outage");
    for (c, v) in [("east", 0), ("west", 100)] {
        set_score(&via_second, c, v).await;
    }
    let compacted = fleet.cp.compact_etcd().await.expect("compact etcd");
    eprintln!("etcd compacted at revision {compacted}");
    // Every process keeps running the whole time (the old code exited on a missed renewal).
    while down.elapsed() < OUTAGE {
        fleet.check().expect("every process runs during the outage");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    fleet
        .cp
        .start_apiserver()
        .await
        .expect("restart the apiserver");
    let back = Instant::now();
    eprintln!("the apiserver was down for {:?}", down.elapsed());

    // Work resumes: a new Placement is scheduled.
    fleet
        .placement("after", gap_selector("a"))
        .await
        .expect("a new placement");
    wait_decisions_within(&fleet, "after", &["east"], RESUME).await;
    let resumed = back.elapsed();
    // The gap's changes were not missed: each watch relisted after its 410 Gone.
    wait_decisions_within(&fleet, "gap", &["west"], RESUME).await;
    wait_decisions_within(&fleet, "scored", &["west"], RESUME).await;
    let relisted = back.elapsed();
    // The fault was the one meant: the watches resumed from a compacted resourceVersion.
    for component in ["scheduler", "manager"] {
        let log =
            std::fs::read_to_string(logs.join(format!("{component}.log"))).unwrap_or_default();
        assert!(
            log.contains("too old resource version"),
            "{component}'s watches were not answered 410 Gone after the outage"
        );
    }
    // The scorer scores again.
    eventually("the scorer writes again", DEADLINE, || async {
        valid_until(&client, "east", HUB_SCORE)
            .await
            .filter(|v| Some(*v) > scorer_before)
    })
    .await;
    let scorer_resumed = back.elapsed();
    // Each Lease is held by the same process as before, and renewed since the return.
    for l in LEASES {
        eventually(&format!("{l} renewed"), DEADLINE, || async {
            let lease = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
                .get(l)
                .await
                .ok()?;
            let spec = lease.spec?;
            let renewed = spec.renew_time?.0;
            (renewed > jiff::Timestamp::now() - jiff::SignedDuration::from_secs(5)).then_some(())
        })
        .await;
        assert_eq!(
            holder(&client, l).await.as_deref(),
            Some(holders[l].as_str()),
            "the Lease {l} changed holder"
        );
    }
    fleet.check().expect("every process runs after the outage");

    // Nothing untouched changed or went away, during the outage or after.
    assert_eq!(untouched_decisions(&client).await, baseline);
    assert_eq!(addon_uids(&client).await, addons);
    for w in watches {
        w.abort();
    }
    let seen = violations.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(seen.is_empty(), "changes to untouched objects: {seen:#?}");

    // The agents' scores move decisions again: a burst of pods on south.
    let burst = Instant::now();
    fleet.load("south", 28, 1000).await.expect("load");
    wait_decisions(&fleet, "steady", &["west"]).await;
    let moved = burst.elapsed();
    fleet.check().expect("every process runs at the end");
    eprintln!(
        "after the return: a new Placement scheduled in {resumed:?}; the gap's changes scheduled in {relisted:?}; the scorer wrote in {scorer_resumed:?}; a load change moved a decision in {moved:?}"
    );
    drop(fleet);
    let _ = std::fs::remove_dir_all(&logs);
}

/// The Placement spec that selects clusters labelled `gap=<value>`, one of them.
fn gap_selector(value: &str) -> Value {
    json!({"numberOfClusters": 1, "clusterSets": ["fleet"],
           "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"gap": value}}}}]})
}

/// One cluster, the most free CPU by the agents' scores.
fn prefer_free_cpu() -> Value {
    json!({"numberOfClusters": 1, "clusterSets": ["fleet"],
           "prioritizerPolicy": {"mode": "Exact", "configurations": [
               {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 1}]}})
}

async fn label(client: &Client, cluster: &str, value: &str) {
    Api::<ManagedCluster>::all(client.clone())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"gap": value}}})),
        )
        .await
        .expect("label");
}

/// Writes the test's own score `value` for `cluster` (no `validUntil`: it does not expire).
async fn set_score(client: &Client, cluster: &str, value: i32) {
    let api = Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster);
    if api.get_opt(GAP_SCORE).await.expect("read score").is_none() {
        let s: AddOnPlacementScore = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
            "metadata": {"name": GAP_SCORE, "namespace": cluster}}))
        .expect("score");
        api.create(&PostParams::default(), &s)
            .await
            .expect("create score");
    }
    let now = jiff::Timestamp::now().to_string();
    api.patch_status(
        GAP_SCORE,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "conditions": [{"type": "AddOnPlacementScoreUpdated", "status": "True", "reason": "Test",
                            "message": "set by the test", "lastTransitionTime": now}],
            "scores": [{"name": "value", "value": value}]}})),
    )
    .await
    .expect("score status");
}

async fn wait_decisions(fleet: &Fleet, placement: &str, want: &[&str]) {
    wait_decisions_within(fleet, placement, want, DEADLINE).await;
}

async fn wait_decisions_within(fleet: &Fleet, placement: &str, want: &[&str], within: Duration) {
    eventually(&format!("{placement} decides {want:?}"), within, || async {
        (fleet.decisions(placement).await.ok()? == want).then_some(())
    })
    .await;
}

async fn holder(client: &Client, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .get_opt(lease)
        .await
        .ok()??
        .spec?
        .holder_identity
}

async fn valid_until(client: &Client, cluster: &str, score: &str) -> Option<jiff::Timestamp> {
    Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
        .get_opt(score)
        .await
        .ok()??
        .status?
        .valid_until
        .map(|t| t.0)
}

/// Name → (uid, clusters) of the untouched Placements' decisions.
type Decisions = BTreeMap<String, (String, Vec<String>)>;

fn untouched(d: &PlacementDecision) -> bool {
    d.labels()
        .get("cluster.open-cluster-management.io/placement")
        .is_some_and(|p| UNTOUCHED.contains(&p.as_str()))
}

fn content(d: &PlacementDecision) -> (String, Vec<String>) {
    let clusters = d
        .status
        .iter()
        .flat_map(|s| s.decisions.iter())
        .map(|x| x.cluster_name.clone())
        .collect();
    (d.uid().unwrap_or_default(), clusters)
}

async fn untouched_decisions(client: &Client) -> Decisions {
    Api::<PlacementDecision>::namespaced(client.clone(), PLACEMENTS)
        .list(&ListParams::default())
        .await
        .expect("decisions")
        .items
        .iter()
        .filter(|d| untouched(d))
        .map(|d| (d.name_any(), content(d)))
        .collect()
}

async fn addon_uids(client: &Client) -> BTreeMap<String, String> {
    Api::<ManagedClusterAddOn>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("add-ons")
        .items
        .iter()
        .map(|m| {
            (
                format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any()),
                m.uid().unwrap_or_default(),
            )
        })
        .collect()
}

/// Records every change to an untouched Placement's decisions (a delete, a new object, other
/// clusters).
async fn watch_decisions(client: Client, baseline: Decisions, out: Arc<Mutex<Vec<String>>>) {
    let api = Api::<PlacementDecision>::namespaced(client, PLACEMENTS);
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let problem = match event {
            Ok(Event::Apply(d) | Event::InitApply(d)) if untouched(&d) => {
                let now = content(&d);
                (baseline.get(&d.name_any()) != Some(&now))
                    .then(|| format!("{} became {now:?}", d.name_any()))
            }
            Ok(Event::Delete(d)) if untouched(&d) => Some(format!("{} deleted", d.name_any())),
            _ => None,
        };
        if let (Some(p), Ok(mut v)) = (problem, out.lock()) {
            v.push(p);
        }
    }
}

/// Records every ManagedClusterAddOn deleted or replaced.
async fn watch_addons(
    client: Client,
    baseline: BTreeMap<String, String>,
    out: Arc<Mutex<Vec<String>>>,
) {
    let api = Api::<ManagedClusterAddOn>::all(client);
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let problem = match event {
            Ok(Event::Apply(m) | Event::InitApply(m)) => {
                let key = format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any());
                (baseline.get(&key) != m.uid().as_ref()).then(|| format!("{key} replaced"))
            }
            Ok(Event::Delete(m)) => Some(format!(
                "{}/{} deleted",
                m.namespace().unwrap_or_default(),
                m.name_any()
            )),
            _ => None,
        };
        if let (Some(p), Ok(mut v)) = (problem, out.lock()) {
            v.push(p);
        }
    }
}

/// One schedulable, ready node per cluster with `cores` CPUs and 64 GiB, no pods, as
/// kube-state-metrics exposes it (what the chart's built-in definition reads).
fn exposition(clusters: &[(&str, u32)]) -> String {
    let mut out = String::new();
    for (c, cores) in clusters {
        let node = format!("{c}-n0");
        out += &format!(
            "kube_node_status_allocatable{{cluster=\"{c}\",node=\"{node}\",resource=\"cpu\",unit=\"core\"}} {cores}\n"
        );
        out += &format!(
            "kube_node_status_allocatable{{cluster=\"{c}\",node=\"{node}\",resource=\"memory\",unit=\"byte\"}} {}\n",
            64u64 << 30
        );
        out += &format!("kube_node_spec_unschedulable{{cluster=\"{c}\",node=\"{node}\"}} 0\n");
        out += &format!(
            "kube_node_status_condition{{cluster=\"{c}\",node=\"{node}\",condition=\"Ready\",status=\"true\"}} 1\n"
        );
        out += &format!(
            "kube_node_status_condition{{cluster=\"{c}\",node=\"{node}\",condition=\"Ready\",status=\"false\"}} 0\n"
        );
    }
    out
}
