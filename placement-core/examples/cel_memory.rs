//! Resident memory of the scheduler's CEL compiles: sixteen Placements in one namespace, each
//! with a large celSelector (`LISTS` expressions, each a name compared with a list literal of
//! `ELEMENTS` elements, under the 100,000-code-point source limit), scheduled through the core
//! (compile cache included). Reads /proc/self/statm before and after.
//!
//! ```sh
//! cargo run --release -p placement-core --example cel_memory            # 10 x 45,000: refused
//! cargo run --release -p placement-core --example cel_memory -- 4 6000  # the largest legal
//! ```

use std::sync::Arc;

use jiff::Timestamp;
use ocm_api::{ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement};
use placement_core::{Snapshot, schedule};
use serde_json::json;

const PLACEMENTS: usize = 16;
/// Expressions per Placement and elements per list, unless given as arguments.
const LISTS: usize = 10;
const ELEMENTS: usize = 45_000;

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// Resident set size in MB.
fn rss_mb() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / 1e6
}

fn main() {
    let mut s = Snapshot::new();
    let set: ManagedClusterSet = serde_json::from_value(json!({
        "metadata": {"name": "set"},
        "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
    }))
    .expect("set");
    s.upsert_set(Arc::new(set));
    let binding: ManagedClusterSetBinding = serde_json::from_value(json!({
        "metadata": {"name": "set", "namespace": "tenant"}, "spec": {"clusterSet": "set"}
    }))
    .expect("binding");
    s.upsert_binding(&binding);
    let c: ManagedCluster = serde_json::from_value(json!({
        "metadata": {"name": "c1", "labels": {"cluster.open-cluster-management.io/clusterset": "set"}},
        "spec": {"hubAcceptsClient": true}
    }))
    .expect("cluster");
    s.upsert_cluster(Arc::new(c));
    let (lists, elements) = (arg(1, LISTS), arg(2, ELEMENTS));
    println!("before: {:.1} MB resident", rss_mb());
    let list = format!(
        "managedCluster.metadata.name in [{}]",
        vec!["0"; elements].join(",")
    );
    let mut outcomes = Vec::new();
    for i in 0..PLACEMENTS {
        // Each Placement's expressions differ, so nothing is shared between them.
        let expressions: Vec<String> = (0..lists)
            .map(|j| format!("{list} || {i} == {j}"))
            .collect();
        let p: Placement = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}"), "namespace": "tenant"},
            "spec": {"predicates": [{"requiredClusterSelector": {"celSelector": {
                "celExpressions": expressions}}}]}
        }))
        .expect("placement");
        let out = schedule(&s, &p, Timestamp::now());
        outcomes.push(format!(
            "{:?}: {:.200}",
            out.status.code, out.status.message
        ));
    }
    println!(
        "after {PLACEMENTS} placements x {lists} expressions x {elements} elements: {:.1} MB resident",
        rss_mb()
    );
    println!(
        "first outcome: {}",
        outcomes.first().cloned().unwrap_or_default()
    );
}
