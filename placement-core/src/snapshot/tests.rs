//! The snapshot's copy-on-write and slot bookkeeping.

use serde_json::json;

use super::*;

fn cluster(name: &str, set: &str) -> Arc<ManagedCluster> {
    Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {label::CLUSTERSET: set}}, "spec": {}}),
        )
        .unwrap(),
    )
}

fn score(cluster: &str, value: i32) -> Arc<AddOnPlacementScore> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "demo", "namespace": cluster},
            "status": {"scores": [{"name": "demo", "value": value}]}}))
        .unwrap(),
    )
}

fn decision(ns: &str, placement: &str, clusters: &[&str]) -> Arc<PlacementDecision> {
    let entries: Vec<_> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": format!("{placement}-decision-1"),
            "namespace": ns, "labels": {label::PLACEMENT: placement}},
            "status": {"decisions": entries}}),
        )
        .unwrap(),
    )
}

fn set(name: &str) -> Arc<ManagedClusterSet> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}))
        .unwrap(),
    )
}

fn members(s: &Snapshot, set: &str) -> Vec<String> {
    match s.members(set) {
        SetMembers::Members(m) => m
            .iter()
            .filter_map(|&i| s.slot(i))
            .map(|c| c.name.to_string())
            .collect(),
        SetMembers::Invalid(e) => vec![e],
    }
}

fn value(s: &Snapshot, cluster: &str) -> Option<i32> {
    s.score_column("demo", "demo")
        .by_slot
        .get(s.cluster(cluster)?.slot)
        .copied()
        .flatten()?
        .value
}

/// 600 clusters: several chunks of the slab and every shard of the maps are in use.
fn big() -> Snapshot {
    let mut s = Snapshot::new();
    s.upsert_set(set("a"));
    s.upsert_set(set("b"));
    for i in 0..600 {
        let name = format!("c{i:03}");
        s.upsert_cluster(cluster(&name, if i % 2 == 0 { "a" } else { "b" }));
        s.upsert_score(score(&name, 1));
        s.upsert_decision(decision(
            &format!("ns{}", i % 7),
            &format!("p{i}"),
            &[&name],
        ));
    }
    s
}

#[test]
fn a_change_to_a_clone_leaves_the_original_as_it_was() {
    let original = big();
    // Fill the caches before cloning: the clone shares them.
    assert_eq!(members(&original, "a").len(), 300);
    assert_eq!(value(&original, "c599"), Some(1));
    let mut copy = original.clone();

    copy.upsert_cluster(cluster("c000", "b")); // moves between sets
    copy.remove_cluster("c001");
    copy.upsert_cluster(cluster("new", "a"));
    copy.upsert_score(score("c599", 7));
    copy.remove_score("c598", "demo");
    copy.upsert_decision(decision("ns0", "p0", &["c599", "c598"]));
    copy.remove_decision("ns1", "p1-decision-1");

    // The original: nothing moved, its caches still answer for it.
    assert_eq!(members(&original, "a").len(), 300);
    assert!(members(&original, "a").contains(&"c000".to_owned()));
    assert!(original.cluster("c001").is_some());
    assert!(original.cluster("new").is_none());
    assert_eq!(value(&original, "c599"), Some(1));
    assert_eq!(value(&original, "c598"), Some(1));
    assert_eq!(original.decision_count("c599"), 1);
    assert_eq!(original.decision_count("c000"), 1);
    assert_eq!(original.decisions_of("ns1", "p1").len(), 1);
    assert_eq!(original.cluster("c599").map(|c| c.decisions), Some(1));
    assert_eq!(original.counts()[0], ("ManagedCluster", 600));

    // The copy: every change, and caches recomputed for it.
    let a = members(&copy, "a");
    assert_eq!(a.len(), 300);
    assert!(!a.contains(&"c000".to_owned()) && a.contains(&"new".to_owned()));
    assert!(members(&copy, "b").contains(&"c000".to_owned()));
    assert!(copy.cluster("c001").is_none());
    assert_eq!(value(&copy, "c599"), Some(7));
    assert_eq!(value(&copy, "c598"), None);
    assert_eq!(
        copy.score("c599", "demo")
            .and_then(|s| s.status.as_ref())
            .map(|s| s.scores[0].value),
        Some(7)
    );
    assert_eq!(copy.decision_count("c599"), 2);
    assert_eq!(copy.decision_count("c000"), 0);
    assert_eq!(copy.cluster("c599").map(|c| c.decisions), Some(2));
    assert!(copy.decisions_of("ns1", "p1").is_empty());
    assert_eq!(copy.counts()[0], ("ManagedCluster", 600));
    assert_eq!(copy.counts()[4], ("PlacementDecision", 599));
}

#[test]
fn an_updated_cluster_keeps_its_slot() {
    let mut s = big();
    let slot = s.cluster("c010").map(|c| c.slot);
    s.upsert_cluster(cluster("c010", "b"));
    assert_eq!(s.cluster("c010").map(|c| c.slot), slot);
    assert!(members(&s, "b").contains(&"c010".to_owned()));
    assert!(!members(&s, "a").contains(&"c010".to_owned()));
    // Its score and decision count stay beside it.
    assert_eq!(value(&s, "c010"), Some(1));
    assert_eq!(s.cluster("c010").map(|c| c.decisions), Some(1));
    // A freed slot is reused.
    let freed = s.cluster("c020").map(|c| c.slot);
    s.remove_cluster("c020");
    s.upsert_cluster(cluster("c999", "a"));
    assert_eq!(s.cluster("c999").map(|c| c.slot), freed);
    assert_eq!(s.slot_count(), 600);
}
