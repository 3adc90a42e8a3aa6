//! What the per-Placement CEL budget buys: one pass of a hostile Placement (a celSelector that
//! spends upstream's whole per-expression limit, 1,000,000 units, on every cluster) over a
//! fleet, with the pass's budget and without it (upstream's per-cluster budget only), and a
//! normal celSelector for scale. The core only, no control plane.
//!
//! ```sh
//! cargo run --release -p placement-core --example cel_budget -- 10000
//! ```
//!
//! Without the pass budget, the hostile pass is timed on a sample of clusters and extrapolated
//! to the fleet (the whole pass would take that long, holding a worker).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use ocm_api::{ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement};
use placement_core::{Limits, Snapshot, schedule_with};
use serde_json::json;

fn fleet(n: usize, limits: Limits) -> Snapshot {
    let mut s = Snapshot::new();
    let set: ManagedClusterSet = serde_json::from_value(json!({
        "metadata": {"name": "set"},
        "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
    }))
    .expect("set");
    s.upsert_set(Arc::new(set));
    let binding: ManagedClusterSetBinding = serde_json::from_value(json!({
        "metadata": {"name": "set", "namespace": "ns"},
        "spec": {"clusterSet": "set"}
    }))
    .expect("binding");
    s.upsert_binding(&binding);
    for i in 0..n {
        let c: ManagedCluster = serde_json::from_value(json!({
            "metadata": {"name": format!("c{i:05}"), "labels": {
                "cluster.open-cluster-management.io/clusterset": "set", "env": "prod"}},
            "spec": {"hubAcceptsClient": true}
        }))
        .expect("cluster");
        s.upsert_cluster(Arc::new(c));
    }
    s.set_limits(limits);
    s
}

fn placement(expression: &str) -> Placement {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"predicates": [{"requiredClusterSelector": {"celSelector": {"celExpressions": [expression]}}}]}
    }))
    .expect("placement")
}

/// One pass with the deadline of `limits`; its time and the PlacementSatisfied reason.
fn pass(s: &Snapshot, p: &Placement) -> (Duration, String) {
    let started = Instant::now();
    let until = started + s.limits().cel_time;
    let deadline = || Instant::now() >= until;
    let out = schedule_with(s, p, Timestamp::now(), &mut (), &deadline);
    let reason = out
        .placement_status
        .conditions
        .iter()
        .find(|c| c.type_ == "PlacementSatisfied")
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default();
    (started.elapsed(), reason)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let l = format!(
        "[{}]",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let hostile = placement(&format!(
        "{l}.exists(a, {l}.exists(b, {l}.exists(c, c < 0)))"
    ));
    let normal = placement("managedCluster.metadata.labels['env'] == 'prod'");

    let budgeted = fleet(n, Limits::default());
    let (t, reason) = pass(&budgeted, &normal);
    println!("normal celSelector, {n} clusters, default budget: {t:?} ({reason})");
    let (t, reason) = pass(&budgeted, &hostile);
    println!("hostile celSelector, {n} clusters, default budget: {t:?} ({reason})");
    let cost_only = fleet(
        n,
        Limits {
            cel_time: Duration::from_secs(3600),
            ..Limits::default()
        },
    );
    let (t, reason) = pass(&cost_only, &hostile);
    println!("hostile celSelector, {n} clusters, cost budget only: {t:?} ({reason})");

    // Upstream's budget only: a sample, extrapolated.
    let sample = 20.min(n);
    let unbounded = fleet(
        sample,
        Limits {
            cel_cost: u64::MAX,
            cel_time: Duration::from_secs(3600),
            ..Limits::default()
        },
    );
    let (t, _) = pass(&unbounded, &hostile);
    let per_cluster = t / u32::try_from(sample).unwrap_or(1).max(1);
    println!(
        "hostile celSelector without a pass budget: {per_cluster:?} per cluster, so about {:?} for {n} clusters",
        per_cluster * u32::try_from(n).unwrap_or(u32::MAX)
    );
}
