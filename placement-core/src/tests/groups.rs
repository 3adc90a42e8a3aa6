//! Decision groups: upstream's layout for a new placement (the placement-strategy proposal's
//! example, open-cluster-management-io/enhancements
//! `enhancements/sig-architecture/64-placementStrategy`, and the integration test's canary
//! example), percentages, and stability across reschedules.

use serde_json::json;

use super::fixtures::*;
use crate::{Code, Outcome};

/// (index, name, decision names, cluster count) per group.
fn groups(o: &Outcome) -> Vec<(i32, String, Vec<String>, i32)> {
    o.placement_status
        .decision_groups
        .iter()
        .map(|g| {
            (
                g.decision_group_index,
                g.decision_group_name.clone(),
                g.decisions.clone(),
                g.clusters_count,
            )
        })
        .collect()
}

fn members(o: &Outcome, decision: &str) -> Vec<String> {
    o.decisions
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(decision))
        .map(|d| {
            d.status
                .as_ref()
                .unwrap()
                .decisions
                .iter()
                .map(|e| e.cluster_name.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn g(i: i32, name: &str, ds: &[&str], n: i32) -> (i32, String, Vec<String>, i32) {
    (
        i,
        name.into(),
        ds.iter().map(|s| s.to_string()).collect(),
        n,
    )
}

#[test]
fn canary_example_from_the_integration_test() {
    let mut w = World::new(vec![
        cluster("o1").label("vendor", "openShift"),
        cluster("o2").label("vendor", "openShift"),
        cluster("x1"),
        cluster("x2"),
        cluster("x3"),
    ]);
    let mut p = placement(
        "ns",
        "p",
        json!({"decisionStrategy": {"groupStrategy": {
        "clustersPerDecisionGroup": 2,
        "decisionGroups": [{"groupName": "canary", "groupClusterSelector": {"labelSelector": {"matchLabels": {"vendor": "openShift"}}}}]}}}),
    );
    let o = w.apply(&mut p);
    assert_eq!(
        groups(&o),
        [
            g(0, "canary", &["p-decision-1"], 2),
            g(1, "", &["p-decision-2"], 2),
            g(2, "", &["p-decision-3"], 1),
        ]
    );
    assert_eq!(members(&o, "p-decision-2"), ["x1", "x2"]);
    let labels = o.decisions[0].metadata.labels.as_ref().unwrap();
    assert_eq!(
        labels["cluster.open-cluster-management.io/decision-group-name"],
        "canary"
    );
    // One canary and the last other cluster leave: the same result as upstream's.
    w.snapshot.remove_cluster("o1");
    w.snapshot.remove_cluster("x3");
    let o = w.apply(&mut p);
    assert_eq!(
        groups(&o),
        [
            g(0, "canary", &["p-decision-1"], 1),
            g(1, "", &["p-decision-2"], 2)
        ]
    );
    assert!(o.writes.iter().any(|w| w.write
        == crate::Write::Delete {
            name: "p-decision-3".into()
        }));
}

#[test]
fn placement_strategy_example_three_hundred_twenty_clusters() {
    let mut cs = Vec::new();
    for i in 0..10 {
        cs.push(cluster(&format!("west-{i:02}")).label("prod-canary-west", "true"));
        cs.push(cluster(&format!("east-{i:02}")).label("prod-canary-east", "true"));
    }
    // The proposal says "320 (290 clusters + 10 + 10)": 290 + 20 is 310, and 150 + 140 needs
    // 290.
    for i in 0..290 {
        cs.push(cluster(&format!("cls{i:03}")));
    }
    let w = World::new(cs);
    let o = w.schedule(&placement("ns", "ztp", json!({"decisionStrategy": {"groupStrategy": {
        "clustersPerDecisionGroup": 150,
        "decisionGroups": [
            {"groupName": "prod-canary-west", "groupClusterSelector": {"labelSelector": {"matchExpressions": [{"key": "prod-canary-west", "operator": "Exists"}]}}},
            {"groupName": "prod-canary-east", "groupClusterSelector": {"labelSelector": {"matchExpressions": [{"key": "prod-canary-east", "operator": "Exists"}]}}}]}}})));
    assert_eq!(o.placement_status.number_of_selected_clusters, 310);
    assert_eq!(
        groups(&o),
        [
            g(0, "prod-canary-west", &["ztp-decision-1"], 10),
            g(1, "prod-canary-east", &["ztp-decision-2"], 10),
            g(2, "", &["ztp-decision-3", "ztp-decision-4"], 150),
            g(3, "", &["ztp-decision-5", "ztp-decision-6"], 140),
        ]
    );
    assert_eq!(members(&o, "ztp-decision-4").len(), 50);
}

#[test]
fn percentages_round_up() {
    let w = World::new((0..3).map(|i| cluster(&format!("c{i}"))).collect());
    let o = w.schedule(&placement(
        "ns",
        "p",
        json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": "25%"}}}),
    ));
    assert_eq!(
        groups(&o),
        [
            g(0, "", &["p-decision-1"], 1),
            g(1, "", &["p-decision-2"], 1),
            g(2, "", &["p-decision-3"], 1),
        ]
    );
    let w = World::new((0..100).map(|i| cluster(&format!("c{i:03}"))).collect());
    let o = w.schedule(&placement(
        "ns",
        "p",
        json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": "20%"}}}),
    ));
    assert_eq!(o.groups.len(), 5);
    assert!(o.groups.iter().all(|g| g.cluster_count() == 20));
}

#[test]
fn a_bad_percentage_deletes_every_decision() {
    let mut w = World::new(vec![cluster("a")]);
    let mut p = placement("ns", "p", json!({}));
    w.apply(&mut p);
    p.spec
        .decision_strategy
        .group_strategy
        .clusters_per_decision_group =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("abc".into()));
    let o = w.apply(&mut p);
    assert_eq!(o.status.code, Code::Misconfigured);
    assert_eq!(
        condition(&o, "PlacementMisconfigured").2,
        ":abc invalid type: string is not a percentage"
    );
    assert!(o.decisions.is_empty());
    assert!(o.placement_status.decision_groups.is_empty());
    assert!(matches!(
        o.writes[..],
        [crate::PlannedWrite {
            write: crate::Write::Delete { .. },
            ..
        }]
    ));
}

#[test]
fn a_joining_cluster_does_not_shift_others() {
    // Upstream re-chunks by name: "b0" joining would push every later cluster one place on.
    let mut w = World::new((1..=6).map(|i| cluster(&format!("c{i}"))).collect());
    let mut p = placement(
        "ns",
        "p",
        json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": 2}}}),
    );
    let before = w.apply(&mut p);
    assert_eq!(
        groups(&before),
        [
            g(0, "", &["p-decision-1"], 2),
            g(1, "", &["p-decision-2"], 2),
            g(2, "", &["p-decision-3"], 2),
        ]
    );
    w.add(cluster("b0"));
    let o = w.apply(&mut p);
    assert_eq!(
        groups(&o)[..3],
        before
            .placement_status
            .decision_groups
            .iter()
            .map(|g| (
                g.decision_group_index,
                g.decision_group_name.clone(),
                g.decisions.clone(),
                g.clusters_count
            ))
            .collect::<Vec<_>>()[..]
    );
    assert_eq!(groups(&o)[3], g(3, "", &["p-decision-4"], 1));
    assert_eq!(members(&o, "p-decision-4"), ["b0"]);
    // Every object keeps its clusters (the others' writes only refresh scores: the selection
    // changed, so scores are written, as scoreRateLimit says).
    for (k, want) in [(1, ["c1", "c2"]), (2, ["c3", "c4"]), (3, ["c5", "c6"])] {
        assert_eq!(members(&o, &format!("p-decision-{k}")), want);
    }
}

#[test]
fn newcomers_fill_the_most_recent_group_with_room_first() {
    // The proposal's special case: clusters left group 1 while group 2 exists; newcomers go to
    // group 2, then 1.
    let mut w = World::new((1..=6).map(|i| cluster(&format!("c{i}"))).collect());
    let mut p = placement(
        "ns",
        "p",
        json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": 3}}}),
    );
    w.apply(&mut p); // [c1 c2 c3] [c4 c5 c6]
    w.snapshot.remove_cluster("c2");
    w.snapshot.remove_cluster("c5");
    w.apply(&mut p); // [c1 c3] [c4 c6]
    w.add(cluster("n1")).add(cluster("n2")).add(cluster("n3"));
    let o = w.apply(&mut p);
    assert_eq!(members(&o, "p-decision-1"), ["c1", "c3", "n2"]);
    assert_eq!(members(&o, "p-decision-2"), ["c4", "c6", "n1"]);
    assert_eq!(members(&o, "p-decision-3"), ["n3"]);
}

#[test]
fn a_cluster_that_changes_class_moves_and_is_never_missing() {
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    let mut p = placement(
        "ns",
        "p",
        json!({"decisionStrategy": {"groupStrategy": {
        "decisionGroups": [{"groupName": "canary", "groupClusterSelector": {"labelSelector": {"matchLabels": {"canary": "true"}}}}]}}}),
    );
    let o = w.apply(&mut p);
    assert_eq!(groups(&o), [g(0, "", &["p-decision-1"], 3)]);
    w.add(cluster("b").label("canary", "true"));
    let o = w.apply(&mut p); // apply() checks no kept cluster went missing
    assert_eq!(
        groups(&o),
        [
            g(0, "canary", &["p-decision-2"], 1),
            g(1, "", &["p-decision-1"], 2)
        ]
    );
}
