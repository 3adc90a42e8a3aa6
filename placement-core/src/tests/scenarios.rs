//! Upstream's unit scenarios (open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/schedule_test.go` and `scheduling_controller_test.go`):
//! conditions for every reason,
//! misconfigurations, clusterset selector types, decision objects and events.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::*;
use crate::{Code, EventType, Snapshot, schedule};

#[test]
fn satisfied_conditions_for_every_reason() {
    type Setup = Box<dyn Fn(&mut World) -> serde_json::Value>;
    let cases: Vec<(&str, Setup, (&str, &str, &str))> = vec![
        (
            "all scheduled",
            Box::new(|_| json!({"numberOfClusters": 3})),
            (
                "True",
                "AllDecisionsScheduled",
                "All cluster decisions scheduled",
            ),
        ),
        (
            "not all scheduled",
            Box::new(|_| json!({"numberOfClusters": 7})),
            (
                "False",
                "NotAllDecisionsScheduled",
                "2 cluster decisions unscheduled",
            ),
        ),
        (
            "no match",
            Box::new(
                |_| json!({"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"x": "y"}}}}]}),
            ),
            (
                "False",
                "NoManagedClusterMatched",
                "No ManagedCluster matches any of the cluster predicate",
            ),
        ),
        (
            "zero clusters wanted",
            Box::new(|_| json!({"numberOfClusters": 0})),
            (
                "False",
                "NoManagedClusterMatched",
                "No ManagedCluster matches any of the cluster predicate",
            ),
        ),
        (
            "no intersection",
            Box::new(|_| json!({"clusterSets": ["a", "b"]})),
            (
                "False",
                "NoIntersection",
                "None of ManagedClusterSets [a,b] is bound to placement namespace",
            ),
        ),
        (
            "no bindings",
            Box::new(|w| {
                w.snapshot.remove_binding("ns", "set");
                json!({})
            }),
            (
                "False",
                "NoManagedClusterSetBindings",
                "No valid ManagedClusterSetBindings found in placement namespace",
            ),
        ),
        (
            "binding to a missing set",
            Box::new(|w| {
                w.snapshot.remove_set("set");
                json!({})
            }),
            (
                "False",
                "NoManagedClusterSetBindings",
                "No valid ManagedClusterSetBindings found in placement namespace",
            ),
        ),
        (
            "empty sets",
            Box::new(|w| {
                for i in 1..=5 {
                    w.snapshot.remove_cluster(&format!("c{i}"));
                }
                json!({})
            }),
            (
                "False",
                "AllManagedClusterSetsEmpty",
                "All ManagedClusterSets [set] have no member ManagedCluster",
            ),
        ),
    ];
    for (name, setup, want) in cases {
        let mut w = five();
        let spec = setup(&mut w);
        let o = w.schedule(&placement("ns", "p", spec));
        assert_eq!(condition(&o, "PlacementSatisfied"), want, "{name}");
        assert_eq!(
            condition(&o, "PlacementMisconfigured"),
            (
                "False",
                "Succeedconfigured",
                "Placement configurations check pass"
            ),
            "{name}"
        );
        // Whatever happened, the placement has at least one (possibly empty) decision object.
        assert!(!o.decisions.is_empty(), "{name}");
    }
}

#[test]
fn misconfigurations_select_nothing_and_say_why() {
    let cases = [
        (
            json!({"tolerations": [{"operator": "Equal", "value": "v"}]}),
            "TaintToleration:If the key is empty, operator must be Exists.",
        ),
        (
            json!({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
            "TaintToleration:If the operator is Exists, the value should be empty.",
        ),
        (
            json!({"prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Foo"}}]}}),
            ":incorrect builtin prioritizer: Foo",
        ),
        (
            json!({"prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Spread"}}]}}),
            ":incorrect builtin prioritizer: Spread",
        ),
        (
            json!({"prioritizerPolicy": {"mode": "Fancy"}}),
            ":incorrect prioritizer policy mode: Fancy",
        ),
        (
            json!({"prioritizerPolicy": {"configurations": [{"weight": 1}]}}),
            ":scoreCoordinate field is required",
        ),
        (
            json!({"prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"type": "AddOn"}}]}}),
            ":addOn should not be empty",
        ),
        (
            json!({"prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"builtIn": "Steady"}, "weight": 11}]}}),
            ":weight 11 is out of range [-10, 10]",
        ),
        (
            json!({"numberOfClusters": -1}),
            ":numberOfClusters must not be negative: -1",
        ),
        (
            json!({"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}}]}),
            "Predicate:values: Invalid value",
        ),
        (
            json!({"predicates": [{"requiredClusterSelector": {"claimSelector": {"matchExpressions": [{"key": "k", "operator": "Bad"}]}}}]}),
            "Predicate:\"Bad\" is not a valid label selector operator",
        ),
        (
            json!({"spreadPolicy": {"spreadConstraints": [{"topologyKey": "zone", "topologyKeyType": "Node"}]}}),
            "SpreadConstraints:spreadConstraints[0]: topologyKeyType must be Label or Claim",
        ),
    ];
    for (spec, want) in cases {
        let w = five();
        let o = w.schedule(&placement("ns", "p", spec.clone()));
        assert_eq!(o.status.code, Code::Misconfigured, "{spec}");
        let (st, reason, msg) = condition(&o, "PlacementMisconfigured");
        assert_eq!((st, reason), ("True", "Misconfigured"), "{spec}");
        assert!(msg.starts_with(want), "{spec}: {msg}");
        assert_eq!(
            condition(&o, "PlacementSatisfied").1,
            "NoManagedClusterMatched",
            "{spec}"
        );
        // Upstream: a misconfigured placement still gets one empty decision object.
        assert_eq!(o.decisions.len(), 1);
        assert_eq!(o.placement_status.number_of_selected_clusters, 0);
    }
}

#[test]
fn a_misconfiguration_once_fixed_schedules() {
    let mut w = five();
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 1, "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
    );
    let o = w.apply(&mut p);
    assert_eq!(o.decisions.len(), 1);
    assert_eq!(o.decisions[0].status.as_ref().unwrap().decisions.len(), 0);
    p.spec.tolerations.clear();
    let o = w.apply(&mut p);
    assert_eq!(chosen(&o), ["c1"]);
    assert_eq!(condition(&o, "PlacementSatisfied").0, "True");
    assert_eq!(condition(&o, "PlacementMisconfigured").0, "False");
}

#[test]
fn clusterset_selector_types() {
    let base = || {
        let mut s = Snapshot::new();
        for (n, set, env) in [
            ("a", Some("s1"), "prod"),
            ("b", None, "dev"),
            ("c", Some("s2"), "prod"),
        ] {
            let mut c = cluster(n).no_set().label("env", env);
            if let Some(set) = set {
                c = c.set(set);
            }
            s.upsert_cluster(Arc::new(c.0));
        }
        s
    };
    let cases = [
        ("exclusive label", exclusive_set("s1"), Ok(vec!["a"])),
        ("legacy empty selector type", serde_json::from_value(json!({"metadata": {"name": "s2"}, "spec": {"clusterSelector": {}}})).unwrap(), Ok(vec!["c"])),
        ("label selector", selector_set("x", json!({"matchLabels": {"env": "prod"}})), Ok(vec!["a", "c"])),
        ("select everything", selector_set("global", json!({})), Ok(vec!["a", "b", "c"])),
        ("nil selector selects nothing", serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": {"clusterSelector": {"selectorType": "LabelSelector"}}})).unwrap(), Ok(vec![])),
        ("unknown type", serde_json::from_value(json!({"metadata": {"name": "u"}, "spec": {"clusterSelector": {"selectorType": "Magic"}}})).unwrap(), Err("failed to get clusters from ClusterSet u: unsupported SelectorType Magic")),
    ];
    for (name, set, want) in cases {
        let mut s = base();
        let set_name = set.metadata.name.clone().unwrap();
        s.upsert_set(Arc::new(set));
        s.upsert_binding(&binding("ns", &set_name));
        let o = schedule(&s, &placement("ns", "p", json!({})), now());
        match want {
            Ok(clusters) => {
                assert_eq!(chosen(&o), clusters, "{name}");
            }
            Err(msg) => {
                assert_eq!(o.status.code, Code::Error, "{name}");
                assert_eq!(
                    condition(&o, "PlacementSatisfied"),
                    ("False", "NotAllDecisionsScheduled", msg)
                );
                assert!(
                    o.writes.is_empty(),
                    "an unreadable clusterset never empties decisions"
                );
            }
        }
    }
}

#[test]
fn sets_intersect_with_spec_cluster_sets_and_union_without_duplicates() {
    let mut w = World::new(vec![cluster("a"), cluster("b").set("other")]);
    w.snapshot.upsert_set(Arc::new(exclusive_set("other")));
    w.snapshot.upsert_binding(&binding("ns", "other"));
    w.snapshot
        .upsert_set(Arc::new(selector_set("global", json!({}))));
    w.snapshot.upsert_binding(&binding("ns", "global"));
    let o = w.schedule(&placement("ns", "p", json!({})));
    assert_eq!(o.cluster_sets, ["global", "other", "set"]);
    assert_eq!(chosen(&o), ["a", "b"]);
    let o = w.schedule(&placement(
        "ns",
        "p",
        json!({"clusterSets": ["other", "missing"]}),
    ));
    assert_eq!(o.cluster_sets, ["other"]);
    assert_eq!(chosen(&o), ["b"]);
}

#[test]
fn terminating_clusters_are_dropped() {
    let mut w = five();
    w.add(cluster("c3").terminating());
    let o = w.schedule(&placement("ns", "p", json!({})));
    assert_eq!(chosen(&o), ["c1", "c2", "c4", "c5"]);
    assert_eq!(names(&o.terminating), ["c3"]);
}

#[test]
fn predicates_or_across_and_within() {
    let w = World::new(vec![
        cluster("a").label("env", "prod").claim("region", "east"),
        cluster("b").label("env", "prod").claim("region", "west"),
        cluster("c").label("env", "dev").claim("region", "west"),
        cluster("d").label("env", "qa"),
    ]);
    let p = placement(
        "ns",
        "p",
        json!({"predicates": [
        {"requiredClusterSelector": {
            "labelSelector": {"matchLabels": {"env": "prod"}},
            "claimSelector": {"matchExpressions": [{"key": "region", "operator": "In", "values": ["east"]}]}}},
        {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"env": "dev"}}}}]}),
    );
    let o = w.schedule(&p);
    assert_eq!(chosen(&o), ["a", "c"]);
    assert_eq!(
        dropped(&o, 0),
        [
            "b: predicate 1: claimSelector does not match; predicate 2: labelSelector does not match",
            "d: predicate 1: labelSelector does not match; predicate 2: labelSelector does not match",
        ]
    );
}

#[test]
fn additive_defaults_exact_and_empty_policies() {
    let w = World::new(vec![
        cluster("a").resources("1", "1Gi"),
        cluster("b").resources("2", "2Gi"),
    ]);
    let policy =
        |p: serde_json::Value| w.schedule(&placement("ns", "p", json!({"prioritizerPolicy": p})));
    let names = |o: &crate::Outcome| {
        o.prioritizers
            .iter()
            .map(|p| (p.name.clone(), p.weight))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&policy(json!({}))),
        [("Balance".into(), 1), ("Steady".into(), 1)]
    );
    assert_eq!(
        names(&policy(
            json!({"configurations": [{"scoreCoordinate": {"builtIn": "Balance"}, "weight": 0},
            {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": -2}]})
        )),
        [("Steady".into(), 1), ("ResourceAllocatableCPU".into(), -2)]
    );
    assert_eq!(names(&policy(json!({"mode": "Exact"}))), []);
    let o = policy(
        json!({"mode": "Exact", "configurations": [{"scoreCoordinate": {"builtIn": "ResourceAllocatableMemory"}, "weight": -1}]}),
    );
    assert_eq!(o.totals, [100, -100]);
    // Two AddOn coordinates never merge (upstream keys them by pointer): both are scored.
    let o = policy(json!({"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1},
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 2}]}));
    assert_eq!(o.prioritizers.len(), 2);
}

#[test]
fn addon_scores_missing_partial_expired() {
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c"), cluster("d")]);
    w.score(score("a", "r", &[("s", 50), ("s", 70)], None)); // the last item wins
    w.score(score("b", "r", &[("other", 90)], None));
    w.score(score("c", "r", &[("s", 90)], Some(at(-1))));
    let o = w.schedule(&placement("ns", "p", json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}})));
    assert_eq!(
        prioritizer(&o, "AddOn/r/s"),
        [Some(70), Some(0), Some(0), Some(0)]
    );
    assert_eq!(o.status.code, Code::Warning);
    assert_eq!(o.status.message, "AddOnPlacementScores c/r expired");
    assert_eq!(o.status.plugin, "AddOn/r/s");
    // A Warning still schedules and is satisfied; the DecisionUpdate event is a Warning.
    assert_eq!(condition(&o, "PlacementSatisfied").0, "True");
    let update = o.events().find(|e| e.reason == "DecisionUpdate").unwrap();
    assert_eq!(update.type_, EventType::Warning);
    assert_eq!(
        update.note,
        "Decision p-decision-1 is updated with placement p in namespace ns: AddOnPlacementScores c/r expired in plugin AddOn/r/s"
    );
}

#[test]
fn out_of_range_scores_are_clamped_and_noted() {
    let mut w = World::new(vec![cluster("a")]);
    w.score(score("a", "r", &[("s", 1000)], None));
    let o = w.schedule(&placement("ns", "p", json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}})));
    assert_eq!(o.totals, [100]);
    assert_eq!(
        o.notes,
        ["AddOn/r/s: values outside [-100, 100] clamped for a"]
    );
}

#[test]
fn toleration_seconds_expire_and_requeue() {
    let w = World::new(vec![
        cluster("a").taint("k", "", "NoSelect", Some(at(-5))),
        cluster("b").taint("k", "", "NoSelect", Some(at(-30))),
        cluster("c").taint("k", "", "NoSelect", None),
    ]);
    let tol = |secs: i64| json!({"tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": secs}]});
    let mut w = w;
    let mut p = placement("ns", "p", tol(20));
    let o = w.apply(&mut p);
    // a: added 5 s ago, 20 s tolerated -> in; b: 30 s ago -> expired; c: no timeAdded -> expired.
    assert_eq!(chosen(&o), ["a"]);
    assert_eq!(
        dropped(&o, 1),
        [
            "b: taint k:NoSelect: toleration expired",
            "c: taint k:NoSelect: toleration expired"
        ]
    );
    // The pass that decides it already requeues at its expiry, 15 s from now (upstream only
    // on its next pass, which the echo of its own write starts).
    assert_eq!(o.requeue_at, Some(at(15).0));
    // And every pass after it while it stays decided.
    let o = w.schedule(&p);
    assert_eq!(o.requeue_at, Some(at(15).0));
    // Exactly at expiry it is gone (now < timeAdded + seconds, strictly).
    let o = schedule(&w.snapshot, &p, at(15).0);
    assert!(o.selected.is_empty());
}

#[test]
fn cel_predicates_on_labels_claims_and_scores() {
    let mut w = World::new(vec![
        cluster("c1")
            .label("version", "1.2")
            .claim("region", "us-east"),
        cluster("c2")
            .label("version", "1.3")
            .claim("region", "us-west"),
        cluster("c3")
            .label("version", "1.3")
            .claim("region", "us-east"),
    ]);
    for (c, v) in [("c1", 90), ("c2", 70), ("c3", 85)] {
        w.score(score(c, "demo", &[("demo", v)], None));
    }
    let cel = |exprs: serde_json::Value| {
        placement(
            "ns",
            "p",
            json!({"predicates": [{"requiredClusterSelector": {"celSelector": {"celExpressions": exprs}}}]}),
        )
    };
    let cases = [
        (
            json!(["managedCluster.metadata.labels[\"version\"] == \"1.3\""]),
            vec!["c2", "c3"],
        ),
        (
            json!([
                "managedCluster.status.clusterClaims.exists(c, c.name == \"region\" && c.value == \"us-east\")"
            ]),
            vec!["c1", "c3"],
        ),
        (
            json!([
                "managedCluster.scores(\"demo\").filter(s, s.name == 'demo').all(e, e.value > 80)"
            ]),
            vec!["c1", "c3"],
        ),
        // ANDed within the selector.
        (
            json!([
                "managedCluster.metadata.labels[\"version\"] == \"1.3\"",
                "managedCluster.scores(\"demo\").all(e, e.value > 80)"
            ]),
            vec!["c3"],
        ),
        // A missing score object, a missing key, a non-bool: false, not an error.
        (
            json!(["managedCluster.scores(\"nope\").size() == 0"]),
            vec![],
        ),
        (
            json!(["managedCluster.metadata.labels[\"missing\"] == \"x\""]),
            vec![],
        ),
        (json!(["managedCluster.metadata.name"]), vec![]),
    ];
    for (exprs, want) in cases {
        let o = w.schedule(&cel(exprs.clone()));
        assert_eq!(chosen(&o), want, "{exprs}");
        assert_eq!(o.status.code, Code::Success, "{exprs}");
    }
    // An invalid expression is a misconfiguration, with the compiler's message.
    let o = w.schedule(&cel(json!(["xxxx.expression"])));
    assert_eq!(o.status.code, Code::Misconfigured);
    let msg = condition(&o, "PlacementMisconfigured").2;
    assert!(msg.starts_with("Predicate:compilation failed: "), "{msg}");
    // CEL ORs with other predicates like any selector.
    let p = placement(
        "ns",
        "p",
        json!({"predicates": [
        {"requiredClusterSelector": {"celSelector": {"celExpressions": ["managedCluster.metadata.name == \"c1\""]}}},
        {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"version": "1.3"}}, "celSelector": {"celExpressions": ["managedCluster.metadata.name.endsWith(\"2\")"]}}}]}),
    );
    assert_eq!(chosen(&w.schedule(&p)), ["c1", "c2"]);
    w.score(score("c2", "demo", &[("demo", 95)], None));
    assert_eq!(
        chosen(&w.schedule(&cel(json!([
            "managedCluster.scores(\"demo\").all(e, e.value > 80)"
        ])))),
        ["c1", "c2", "c3"],
        "a score update is seen"
    );
}

#[test]
fn review_edge_cases() {
    // A scoreRateLimit the CRD accepts but no duration holds: no panic.
    let w = five();
    let o = w.schedule(&placement(
        "ns",
        "p",
        json!({"scoreRateLimit": "9999999999999999h"}),
    ));
    assert_eq!(o.selected.len(), 5);

    // Like upstream, filters with no clusters to look at validate nothing.
    let mut empty = five();
    empty.snapshot.remove_binding("ns", "set");
    let o = empty.schedule(&placement("ns", "p", json!({"predicates": [{"requiredClusterSelector": {"celSelector": {"celExpressions": ["xxxx"]}}}]})));
    assert_eq!(condition(&o, "PlacementMisconfigured").0, "False");
    let o = w.schedule(&placement("ns", "p", json!({
        "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"none": "x"}}}}],
        "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]})));
    assert_eq!(condition(&o, "PlacementMisconfigured").0, "False");

    // Only terminating members: the sets count as empty.
    let mut t = World::new(vec![cluster("a").terminating()]);
    let o = t.schedule(&placement("ns", "p", json!({})));
    assert_eq!(
        condition(&o, "PlacementSatisfied").1,
        "AllManagedClusterSetsEmpty"
    );
    t.add(cluster("b"));

    // DoNotSchedule refusals show without numberOfClusters too.
    let w2 = World::new(vec![
        cluster("a1").label("zone", "a"),
        cluster("a2").label("zone", "a"),
        cluster("a3").label("zone", "a"),
        cluster("b1").label("zone", "b"),
    ]);
    let o = w2.schedule(&placement("ns", "p", json!({"spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone", "topologyKeyType": "Label", "whenUnsatisfiable": "DoNotSchedule"}]}})));
    assert_eq!(o.unscheduled, 1);
    let (_, reason, msg) = condition(&o, "PlacementSatisfied");
    assert_eq!(reason, "NotAllDecisionsScheduled");
    assert!(
        msg.starts_with(
            "1 cluster decisions unscheduled: spread constraints allow no more clusters"
        ),
        "{msg}"
    );

    // A new empty decision: only DecisionCreate (upstream's status patch is a no-op).
    let o = w.schedule(&placement("ns", "p", json!({"numberOfClusters": 0})));
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["DecisionCreate"]);

    // A bad selector in a later group keeps the groups before it.
    let g = World::new(vec![cluster("c1").label("g", "1"), cluster("c2")]);
    let o = g.schedule(&placement("ns", "p", json!({"decisionStrategy": {"groupStrategy": {"decisionGroups": [
        {"groupName": "one", "groupClusterSelector": {"labelSelector": {"matchLabels": {"g": "1"}}}},
        {"groupName": "two", "groupClusterSelector": {"labelSelector": {"matchExpressions": [{"key": "g", "operator": "In", "values": []}]}}}]}}})));
    assert_eq!(o.status.code, Code::Misconfigured);
    let groups: Vec<(String, i32)> = o
        .placement_status
        .decision_groups
        .iter()
        .map(|g| (g.decision_group_name.clone(), g.clusters_count))
        .collect();
    assert_eq!(groups, [("one".to_string(), 1)]);

    // A decided cluster that is leaving anyway adds no requeue time.
    let mut r = World::new(vec![
        cluster("a")
            .taint("soon", "", "NoSelect", Some(at(0)))
            .taint("never", "", "NoSelect", Some(at(0))),
    ]);
    r.decision(decision("ns", "p", 1, (0, ""), &["a"]));
    let o = r.schedule(&placement(
        "ns",
        "p",
        json!({"tolerations": [{"key": "soon", "operator": "Exists", "tolerationSeconds": 100}]}),
    ));
    assert!(o.selected.is_empty());
    assert_eq!(o.requeue_at, None);
}
