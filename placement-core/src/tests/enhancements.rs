//! The examples of upstream's proposals (open-cluster-management-io/enhancements
//! `enhancements/sig-architecture/`): the user stories of `32-extensiblescheduling`, and the
//! use cases of `70-spread-policy` on its provider/region/zone table.

use serde_json::json;

use super::fixtures::*;

#[test]
fn story_negative_weight_picks_the_last_cluster() {
    let mut w = World::new((1..=5).map(|i| cluster(&format!("c{i}"))).collect());
    for (c, v) in [("c1", 10), ("c2", 90), ("c3", 50), ("c4", -20), ("c5", 70)] {
        w.score(score(c, "resource-usage-score", &[("cpuratio", v)], None));
    }
    let spec = |weight: i32| {
        json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuratio"}}, "weight": weight}]}})
    };
    assert_eq!(
        selected(&w.schedule(&placement("ns", "top", spec(1)))),
        ["c2"]
    );
    assert_eq!(
        selected(&w.schedule(&placement("ns", "last", spec(-1)))),
        ["c4"]
    );
}

#[test]
fn story_agent_scores_move_the_decision() {
    let mut w = World::new(vec![cluster("a"), cluster("b")]);
    w.score(score(
        "a",
        "resource-usage-score",
        &[("cpuAvailable", 80)],
        None,
    ));
    w.score(score(
        "b",
        "resource-usage-score",
        &[("cpuAvailable", 20)],
        None,
    ));
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 1, "prioritizerPolicy": {"configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 3}]}}),
    );
    assert_eq!(selected(&w.apply(&mut p)), ["a"]);
    // a fills up: its score drops below b's by more than Steady's 100 can hold.
    w.score(score(
        "a",
        "resource-usage-score",
        &[("cpuAvailable", -60)],
        None,
    ));
    assert_eq!(selected(&w.apply(&mut p)), ["b"]);
}

#[test]
fn story_disaster_recovery_fails_over_and_back() {
    let mut w = World::new(vec![cluster("primary"), cluster("backup")]);
    w.score(score(
        "primary",
        "disasterrecovery",
        &[("workload", 100)],
        None,
    ));
    w.score(score(
        "backup",
        "disasterrecovery",
        &[("workload", 0)],
        None,
    ));
    let mut p = placement(
        "ns1",
        "placement",
        json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "disasterrecovery", "scoreName": "workload"}}, "weight": 1}]}}),
    );
    w.snapshot.upsert_binding(&binding("ns1", "set"));
    assert_eq!(selected(&w.apply(&mut p)), ["primary"]);
    w.add(cluster("primary").taint(
        "cluster.open-cluster-management.io/unavailable",
        "",
        "NoSelect",
        Some(at(0)),
    ));
    let o = w.apply(&mut p);
    assert_eq!(selected(&o), ["backup"]);
    assert_eq!(condition(&o, "PlacementSatisfied").0, "True");
    w.add(cluster("primary"));
    assert_eq!(selected(&w.apply(&mut p)), ["primary"]);
}

/// The spread-policy proposal's table, with `n` clusters per zone.
fn spread_policy_fleet(per_zone: &[(&str, &str, &str, usize)]) -> World {
    let mut cs = Vec::new();
    for (provider, region, zone, n) in per_zone {
        for i in 0..*n {
            cs.push(
                cluster(&format!("{zone}-{i}"))
                    .label("provider", provider)
                    .label("region", region)
                    .label("zone", zone),
            );
        }
    }
    World::new(cs)
}

fn full_table() -> World {
    spread_policy_fleet(&[
        ("aws", "us-east-1", "us-east-1a", 3),
        ("aws", "us-east-1", "us-east-1b", 3),
        ("aws", "us-west-1", "us-west-1a", 3),
        ("alibaba", "cn-hangzhou", "cn-hangzhou-e", 3),
        ("alibaba", "cn-shenzhen", "cn-shenzhen-a", 3),
    ])
}

fn zones(o: &crate::Outcome) -> Vec<String> {
    let mut z: Vec<String> = o
        .selected
        .iter()
        .map(|n| n.rsplit_once('-').unwrap().0.to_string())
        .collect();
    z.sort();
    z
}

#[test]
fn use_case_2_even_spread_across_zones() {
    let mut w = full_table();
    // Make us-east-1a look better to the prioritizers, so top-N alone would take it all.
    for i in 0..3 {
        w.score(score(&format!("us-east-1a-{i}"), "s", &[("s", 90)], None));
    }
    for when in ["ScheduleAnyway", "DoNotSchedule"] {
        let o = w.schedule(&placement("ns", "p", json!({
            "numberOfClusters": 4,
            "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"region": "us-east-1"}}}}],
            "prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "s", "scoreName": "s"}}, "weight": 1}]},
            "spreadPolicy": {"spreadConstraints": [{"topologyKey": "zone", "topologyKeyType": "Label", "maxSkew": 1, "whenUnsatisfiable": when}]}})));
        assert_eq!(
            zones(&o),
            ["us-east-1a", "us-east-1a", "us-east-1b", "us-east-1b"],
            "{when}"
        );
    }
}

#[test]
fn use_case_3_max_skew_refuses_and_says_so() {
    let w = spread_policy_fleet(&[
        ("aws", "us-east-1", "us-east-1a", 3),
        ("aws", "us-east-1", "us-east-1b", 1),
    ]);
    let spec = |skew: i32| {
        json!({"numberOfClusters": 4, "spreadPolicy": {"spreadConstraints": [
            {"topologyKey": "zone", "topologyKeyType": "Label", "maxSkew": skew, "whenUnsatisfiable": "DoNotSchedule"}]}})
    };
    let o = w.schedule(&placement("ns", "p", spec(1)));
    assert_eq!(zones(&o), ["us-east-1a", "us-east-1a", "us-east-1b"]);
    assert_eq!(o.unscheduled, 1);
    let (st, reason, msg) = condition(&o, "PlacementSatisfied");
    assert_eq!((st, reason), ("False", "NotAllDecisionsScheduled"));
    assert_eq!(
        msg,
        "1 cluster decisions unscheduled: spread constraints allow no more clusters (label zone (maxSkew 1, DoNotSchedule): us-east-1a=2,us-east-1b=1)"
    );
    let o = w.schedule(&placement("ns", "p", spec(2)));
    assert_eq!(o.selected.len(), 4);
    // ScheduleAnyway takes all four, as evenly as it can.
    let o = w.schedule(&placement(
        "ns",
        "p",
        json!({"numberOfClusters": 4, "spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone", "topologyKeyType": "Label"}]}}),
    ));
    assert_eq!(o.selected.len(), 4);
}

#[test]
fn use_case_4_affinity_prefers_aws() {
    let affinity = r#"[{"topologyKey":"provider","topologyKeyType":"Label","weight":3,
        "topologyWeights":[{"weight":20,"operator":"In","values":["aws"]}]}]"#;
    let mut p = placement("ns", "p", json!({"numberOfClusters": 4}));
    p.metadata.annotations = Some(
        [(
            "scheduling.ocm-placement.io/topology-affinity".to_string(),
            affinity.to_string(),
        )]
        .into(),
    );
    // Enough aws clusters: only aws.
    let o = full_table().schedule(&p);
    assert!(
        o.selected.iter().all(|c| c.starts_with("us-")),
        "{:?}",
        o.selected
    );
    assert_eq!(
        prioritizer(&o, "TopologyAffinity/provider")
            .iter()
            .filter(|s| **s == Some(100))
            .count(),
        9
    );
    // Two aws clusters: both, then the others.
    let w = spread_policy_fleet(&[
        ("aws", "us-east-1", "us-east-1a", 2),
        ("alibaba", "cn-hangzhou", "cn-hangzhou-e", 3),
    ]);
    assert_eq!(
        zones(&w.schedule(&p)),
        ["cn-hangzhou-e", "cn-hangzhou-e", "us-east-1a", "us-east-1a"]
    );
    // Bad annotation content: misconfigured, with a clear message.
    p.metadata.annotations = Some(
        [(
            "scheduling.ocm-placement.io/topology-affinity".to_string(),
            "[{\"topologyKey\": 1}]".to_string(),
        )]
        .into(),
    );
    let o = full_table().schedule(&p);
    let msg = condition(&o, "PlacementMisconfigured").2;
    assert!(msg.starts_with("TopologyAffinity:annotation scheduling.ocm-placement.io/topology-affinity: invalid type"), "{msg}");
}

#[test]
fn use_case_5_joint_even_regions_and_zone_affinity() {
    let affinity = r#"[{"topologyKey":"zone","weight":2,"topologyWeights":[
        {"weight":20,"operator":"In","values":["us-east-1a","us-west-1a"]},
        {"weight":10,"operator":"In","values":["us-east-1b"]}]}]"#;
    let mut p = placement(
        "ns",
        "p",
        json!({
        "numberOfClusters": 4,
        "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"provider": "aws"}}}}],
        "spreadPolicy": {"spreadConstraints": [{"topologyKey": "region", "topologyKeyType": "Label", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}}),
    );
    p.metadata.annotations = Some(
        [(
            "scheduling.ocm-placement.io/topology-affinity".to_string(),
            affinity.to_string(),
        )]
        .into(),
    );
    let o = full_table().schedule(&p);
    assert_eq!(
        zones(&o),
        ["us-east-1a", "us-east-1a", "us-west-1a", "us-west-1a"]
    );
}

#[test]
fn several_constraints_work_jointly_earlier_first() {
    // Provider first, then zone: 4 clusters = 2 aws + 2 alibaba, and within aws one per zone.
    let o = full_table().schedule(&placement("ns", "p", json!({"numberOfClusters": 4, "spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "provider", "topologyKeyType": "Label", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"},
        {"topologyKey": "zone", "topologyKeyType": "Label"}]}})));
    let z = zones(&o);
    assert_eq!(
        z.iter().filter(|z| z.starts_with("us-")).count(),
        2,
        "{z:?}"
    );
    let mut aws: Vec<&String> = z.iter().filter(|z| z.starts_with("us-")).collect();
    aws.dedup();
    assert_eq!(aws.len(), 2, "two different aws zones: {z:?}");
    let mut ali: Vec<&String> = z.iter().filter(|z| z.starts_with("cn-")).collect();
    ali.dedup();
    assert_eq!(ali.len(), 2, "both alibaba zones: {z:?}");
}
