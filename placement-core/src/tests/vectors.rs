//! Upstream's worked numeric vectors, exact selections and scores: open-cluster-management-io/ocm
//! `test/integration/placement/prioritizer_test.go` (default, Exact CPU and memory, Balance,
//! a new cluster, Steady), `pkg/placement/plugins/balance/balance_test.go` and the toleration
//! test's taints.

use serde_json::json;

use super::fixtures::*;

fn three() -> World {
    World::new(vec![
        cluster("c0").resources("10", "50"),
        cluster("c1").resources("7", "90"),
        cluster("c2").resources("9", "80"),
    ])
}

fn cpu_mem_exact() -> serde_json::Value {
    json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}, "weight": 1},
        {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableMemory"}, "weight": 1}]}})
}

#[test]
fn v1_default_policy_ties_break_by_name() {
    let w = three();
    let o = w.schedule(&placement("ns", "p", json!({"numberOfClusters": 2})));
    assert_eq!(o.totals, vec![100, 100, 100]);
    assert_eq!(prioritizer(&o, "Balance"), vec![Some(100); 3]);
    assert_eq!(prioritizer(&o, "Steady"), vec![Some(0); 3]);
    assert_eq!(selected(&o), ["c0", "c1"]);
}

#[test]
fn v2_exact_cpu_and_memory() {
    let w = three();
    let o = w.schedule(&placement("ns", "p", cpu_mem_exact()));
    assert_eq!(
        prioritizer(&o, "ResourceAllocatableCPU"),
        [Some(100), Some(-100), Some(33)]
    );
    assert_eq!(
        prioritizer(&o, "ResourceAllocatableMemory"),
        [Some(-100), Some(100), Some(50)]
    );
    assert_eq!(o.totals, [0, 0, 83]);
    assert_eq!(selected(&o), ["c2", "c0"]);
}

#[test]
fn v3_balance_counts_other_placements() {
    let mut w = three();
    w.decision(decision("other", "q", 1, (0, ""), &["c0"]));
    let o = w.schedule(&placement("ns", "p", json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Balance"}, "weight": 2},
        {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}, "weight": 1}]}})));
    assert_eq!(
        prioritizer(&o, "Balance"),
        [Some(-100), Some(100), Some(100)]
    );
    assert_eq!(o.totals, [-100, 100, 233]);
    assert_eq!(selected(&o), ["c2", "c1"]);
}

#[test]
fn v4_a_new_cluster_rescales_and_wins() {
    let mut w = three();
    w.add(cluster("c3").resources("10", "100"));
    let o = w.schedule(&placement("ns", "p", cpu_mem_exact()));
    assert_eq!(
        prioritizer(&o, "ResourceAllocatableCPU"),
        [Some(100), Some(-100), Some(33), Some(100)]
    );
    // The reference table says c2 gets 20; Go computes ((0.6 - 0.5) * 2.0) * 100.0 =
    // 19.999999999999996 and truncates it to 19, as we do (checked with go run).
    assert_eq!(
        prioritizer(&o, "ResourceAllocatableMemory"),
        [Some(-100), Some(60), Some(19), Some(100)]
    );
    assert_eq!(o.totals, [0, -40, 52, 200]);
    assert_eq!(selected(&o), ["c3", "c2"]);
    w.snapshot.remove_cluster("c3");
    assert_eq!(
        chosen(&w.schedule(&placement("ns", "p", cpu_mem_exact()))),
        ["c0", "c2"]
    );
}

#[test]
fn v5_steady_keeps_the_decision() {
    let mut w = three();
    let spec = json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Additive", "configurations": [
        {"scoreCoordinate": {"builtIn": "Steady"}, "weight": 3},
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": 1},
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableMemory"}, "weight": 1}]}});
    let mut p = placement("ns", "p", spec);
    let first = w.apply(&mut p);
    assert_eq!(chosen(&first), ["c0", "c2"]);
    w.decision(decision("other", "q", 1, (0, ""), &["c1"]));
    w.add(cluster("c3").resources("10", "100"));
    let o = w.schedule(&p);
    assert_eq!(
        prioritizer(&o, "Steady"),
        [Some(100), Some(0), Some(100), Some(0)]
    );
    assert_eq!(
        prioritizer(&o, "Balance"),
        [Some(100), Some(-100), Some(100), Some(100)]
    );
    assert_eq!(o.totals, [400, -140, 452, 300]); // 453 in the reference: see v4
    assert_eq!(selected(&o), ["c2", "c0"]);
}

#[test]
fn v6_addon_scores_exact() {
    let mut w = three();
    let spec = json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1}]}});
    let p = placement("ns", "p", spec);
    let o = w.schedule(&p);
    assert_eq!(o.totals, [0, 0, 0]);
    assert_eq!(selected(&o), ["c0", "c1"]);
    for (c, v) in [("c0", 80), ("c1", 90), ("c2", 100)] {
        w.score(score(c, "demo", &[("demo", v)], Some(at(600))));
    }
    assert_eq!(chosen(&w.schedule(&p)), ["c1", "c2"]);
    w.score(score("c0", "demo", &[("demo", 100)], Some(at(600))));
    let o = w.schedule(&p);
    assert_eq!(chosen(&o), ["c0", "c2"]);
    assert_eq!(
        o.requeue_at,
        Some(at(601).0),
        "reschedule when the scores expire"
    );
}

#[test]
fn v7_balance_unit_vector() {
    let mut w = World::new(vec![cluster("c1"), cluster("c2"), cluster("c3")]);
    w.decision(decision("a", "x", 1, (0, ""), &["c1", "c2"]));
    w.decision(decision("b", "y", 1, (0, ""), &["c1", "c3"]));
    let o = w.schedule(&placement("ns", "p", json!({})));
    assert_eq!(prioritizer(&o, "Balance"), [Some(-100), Some(0), Some(0)]);
}

#[test]
fn balance_thirds_truncate_like_go() {
    // usage 1/3 -> 2*int64(16.67) = 32; usage 2/3 -> -32.
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    w.decision(decision("o", "x", 1, (0, ""), &["a", "b", "c"]));
    w.decision(decision("o", "y", 1, (0, ""), &["b", "c"]));
    w.decision(decision("o", "z", 1, (0, ""), &["c"]));
    let o = w.schedule(&placement("ns", "p", json!({})));
    assert_eq!(
        prioritizer(&o, "Balance"),
        [Some(32), Some(-32), Some(-100)]
    );
}

#[test]
fn v8_tolerations_and_no_select_if_new_stickiness() {
    let mut w = World::new(vec![
        cluster("c0").taint("key1", "value1", "NoSelect", Some(at(0))),
        cluster("c1").taint("key2", "value2", "NoSelectIfNew", Some(at(0))),
        cluster("c2").taint("key3", "value3", "PreferNoSelect", Some(at(0))),
        cluster("c3"),
    ]);
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 4, "tolerations": [
        {"key": "key1", "operator": "Exists", "effect": "PreferNoSelect"},
        {"key": "key2", "operator": "Exists", "effect": "NoSelect"},
        {"key": "key3", "operator": "Exists", "effect": "NoSelect"},
        {"key": "key4", "operator": "Exists", "effect": "NoSelect"}]}),
    );
    let o = w.apply(&mut p);
    assert_eq!(chosen(&o), ["c2", "c3"]);
    assert_eq!(
        dropped(&o, 1),
        [
            "c0: taint key1=value1:NoSelect is not tolerated",
            "c1: taint key2=value2:NoSelectIfNew is not tolerated"
        ]
    );
    w.add(cluster("c3").taint("key4", "", "NoSelectIfNew", Some(at(0))));
    assert_eq!(
        chosen(&w.schedule(&p)),
        ["c2", "c3"],
        "c3 stays: already decided"
    );
}
