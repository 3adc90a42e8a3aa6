//! The limits of one pass (ours, not upstream's): list items in the spec, the Placement's CEL
//! budget (cost and time), and a compiler that cannot run. Each stops the pass without
//! touching the current decisions.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use super::fixtures::*;
use crate::plan::limit_event;
use crate::{Code, Limit, Limits, Outcome, schedule_with};
use ocm_api::Placement;
use ocm_cel::test_hooks::FAIL_SPAWN;

/// Clusters `c00`..`c<n>` with label env=prod, and placement `p` decided on all of them.
fn decided(n: usize, limits: Limits) -> (World, Placement) {
    let clusters = (0..n)
        .map(|i| cluster(&format!("c{i:02}")).label("env", "prod"))
        .collect();
    let mut w = World::new(clusters);
    w.snapshot.set_limits(limits);
    let mut p = placement("ns", "p", json!({}));
    let out = w.apply(&mut p);
    assert_eq!(out.selected.len(), n);
    (w, p)
}

/// `p` with `spec`, scheduled: asserts that nothing is written and the decisions are kept.
fn held(w: &World, p: &Placement, spec: Value, deadline: &dyn crate::Deadline) -> Outcome {
    let mut changed = p.clone();
    changed.spec = serde_json::from_value(spec).unwrap();
    let out = schedule_with(&w.snapshot, &changed, now(), &mut (), deadline);
    assert!(out.writes.is_empty(), "{:?}", out.writes);
    let existing: Vec<_> = w
        .snapshot
        .decisions_of("ns", "p")
        .iter()
        .map(|d| (**d).clone())
        .collect();
    assert_eq!(out.decisions, existing);
    assert!(out.selected.is_empty());
    out
}

fn items(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("v{i}")).collect()
}

#[test]
fn each_list_counts_towards_the_limit() {
    let limits = Limits {
        list_items: 4,
        ..Limits::default()
    };
    let (w, p) = decided(2, limits);
    let expr = |values: Vec<String>| json!([{"key": "env", "operator": "In", "values": values}]);
    let selector = |s: Value| json!({"predicates": [{"requiredClusterSelector": s}]});
    let group = |s: Value| {
        json!({"decisionStrategy": {"groupStrategy": {"decisionGroups": [
            {"groupName": "g", "groupClusterSelector": s}]}}})
    };
    let label_map: serde_json::Map<String, Value> =
        (0..5).map(|i| (format!("k{i}"), json!("v"))).collect();
    let many = |n: usize, item: Value| Value::Array(vec![item; n]);
    // (spec, the largest list it names, its size)
    let cases: Vec<(Value, &str, usize)> = vec![
        (json!({"clusterSets": items(5)}), "spec.clusterSets", 5),
        (
            json!({"predicates": many(5, json!({}))}),
            "spec.predicates",
            5,
        ),
        (
            selector(
                json!({"labelSelector": {"matchExpressions": many(5, json!({"key": "k", "operator": "Exists"}))}}),
            ),
            "spec.predicates[0].requiredClusterSelector.labelSelector.matchExpressions",
            5,
        ),
        (
            selector(json!({"labelSelector": {"matchExpressions": expr(items(5))}})),
            "spec.predicates[0].requiredClusterSelector.labelSelector.matchExpressions[0].values",
            5,
        ),
        (
            selector(json!({"labelSelector": {"matchLabels": label_map}})),
            "spec.predicates[0].requiredClusterSelector.labelSelector.matchLabels",
            5,
        ),
        (
            selector(json!({"claimSelector": {"matchExpressions": expr(items(5))}})),
            "spec.predicates[0].requiredClusterSelector.claimSelector.matchExpressions[0].values",
            5,
        ),
        (
            selector(json!({"celSelector": {"celExpressions": vec!["true"; 5]}})),
            "spec.predicates[0].requiredClusterSelector.celSelector.celExpressions",
            5,
        ),
        (
            json!({"prioritizerPolicy": {"configurations": many(5, json!({"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Steady"}}))}}),
            "spec.prioritizerPolicy.configurations",
            5,
        ),
        (
            json!({"tolerations": many(5, json!({"key": "k", "operator": "Exists"}))}),
            "spec.tolerations",
            5,
        ),
        (
            json!({"decisionStrategy": {"groupStrategy": {"decisionGroups": many(5, json!({"groupName": "g", "groupClusterSelector": {}}))}}}),
            "spec.decisionStrategy.groupStrategy.decisionGroups",
            5,
        ),
        (
            group(json!({"labelSelector": {"matchExpressions": expr(items(5))}})),
            "spec.decisionStrategy.groupStrategy.decisionGroups[0].groupClusterSelector.labelSelector.matchExpressions[0].values",
            5,
        ),
        // A total: three lists of two.
        (
            json!({"clusterSets": items(2), "tolerations": many(2, json!({"key": "k", "operator": "Exists"})), "predicates": many(2, json!({}))}),
            "spec.clusterSets",
            2,
        ),
    ];
    for (spec, path, size) in cases {
        let out = held(&w, &p, spec.clone(), &());
        assert_eq!(out.status.code, Code::Exceeded(Limit::ListItems), "{spec}");
        let (status, reason, message) = condition(&out, "PlacementSatisfied");
        assert_eq!((status, reason), ("False", "ListLimitExceeded"), "{spec}");
        assert!(
            message.contains(&format!("the largest is {path} with {size}")),
            "{spec}: {message}"
        );
        assert!(message.contains("limit of 4"), "{message}");
        assert_eq!(
            condition(&out, "PlacementMisconfigured").0,
            "False",
            "{spec}"
        );
        assert_eq!(
            out.placement_status.number_of_selected_clusters, 2,
            "{spec}"
        );
    }
    // At the limit: scheduled.
    let mut at_limit = p.clone();
    at_limit.spec = serde_json::from_value(json!({"clusterSets": ["set", "x", "y", "z"]})).unwrap();
    let out = w.schedule(&at_limit);
    assert_eq!(out.status.code, Code::Success);
    assert_eq!(out.selected.len(), 2);
}

#[test]
fn more_spread_constraints_than_the_api_allows_are_refused() {
    let (w, p) = decided(2, Limits::default());
    let term = json!({"topologyKey": "zone", "topologyKeyType": "Label"});
    let out = held(
        &w,
        &p,
        json!({"spreadPolicy": {"spreadConstraints": vec![term.clone(); 9]}}),
        &(),
    );
    let (_, reason, message) = condition(&out, "PlacementSatisfied");
    assert_eq!(reason, "ListLimitExceeded");
    assert!(
        message.starts_with(
            "spec.spreadPolicy.spreadConstraints has 9 items, more than the API's limit of 8"
        ),
        "{message}"
    );
    let mut eight = p.clone();
    eight.spec =
        serde_json::from_value(json!({"spreadPolicy": {"spreadConstraints": vec![term; 8]}}))
            .unwrap();
    assert_ne!(
        w.schedule(&eight).status.code,
        Code::Exceeded(Limit::ListItems)
    );
}

/// `managedCluster.metadata.labels["env"] == "prod"` costs 5 units per cluster (cel-go's
/// figure too).
const FIVE_UNITS: &str = r#"managedCluster.metadata.labels["env"] == "prod""#;

fn cel_spec(expression: &str) -> Value {
    json!({"predicates": [{"requiredClusterSelector": {"celSelector": {"celExpressions": [expression]}}}]})
}

#[test]
fn the_cel_cost_budget_is_for_the_whole_pass() {
    // (budget, Some(clusters done when it ran out) or None: scheduled)
    let cases = [
        (50, None),
        (49, Some(9)),
        (22, Some(4)),
        (5, Some(1)),
        (4, Some(0)),
    ];
    for (budget, ran_out) in cases {
        let limits = Limits {
            cel_cost: budget,
            ..Limits::default()
        };
        let (w, p) = decided(10, limits);
        let Some(done) = ran_out else {
            let mut q = p.clone();
            q.spec = serde_json::from_value(cel_spec(FIVE_UNITS)).unwrap();
            let out = w.schedule(&q);
            assert_eq!(out.status.code, Code::Success, "{budget}");
            assert_eq!(out.selected.len(), 10);
            continue;
        };
        let out = held(&w, &p, cel_spec(FIVE_UNITS), &());
        assert_eq!(
            out.status.code,
            Code::Exceeded(Limit::CelBudget),
            "{budget}"
        );
        let (status, reason, message) = condition(&out, "PlacementSatisfied");
        assert_eq!((status, reason), ("False", "CELBudgetExceeded"));
        assert_eq!(
            message,
            format!(
                "celSelector evaluation used up the placement's CEL cost budget ({budget} units) after {done} of 10 clusters; not scheduled, the current decisions are kept"
            )
        );
    }
}

/// 100^3 iterations: cut at upstream's per-call limit on every cluster.
fn runaway() -> String {
    let l = format!(
        "[{}]",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    format!("{l}.all(a, {l}.all(b, {l}.all(c, true)))")
}

#[test]
fn the_per_cluster_budget_still_makes_a_cluster_not_match() {
    // An expression past upstream's per-call limit is false for that cluster (upstream's
    // behaviour), not the end of the pass, while the pass's budget lasts.
    let (w, p) = decided(3, Limits::default());
    let mut q = p.clone();
    q.spec = serde_json::from_value(cel_spec(&runaway())).unwrap();
    let out = w.schedule(&q);
    assert_eq!(out.status.code, Code::Success);
    assert_eq!(out.filtered.len(), 0);
}

#[test]
fn the_deadline_is_looked_at_every_sixteen_clusters() {
    // (calls answered "not yet", clusters done when it passed)
    for (not_yet, done) in [(0usize, 0usize), (1, 16), (2, 32)] {
        let (w, p) = decided(40, Limits::default());
        let calls = AtomicUsize::new(0);
        let deadline = || calls.fetch_add(1, Ordering::Relaxed) + 1 > not_yet;
        let out = held(&w, &p, cel_spec(FIVE_UNITS), &deadline);
        let (_, reason, message) = condition(&out, "PlacementSatisfied");
        assert_eq!(reason, "CELBudgetExceeded");
        assert_eq!(
            message,
            format!(
                "celSelector evaluation used up the placement's CEL time budget (5s) after {done} of 40 clusters; not scheduled, the current decisions are kept"
            )
        );
    }
    // An expensive selector (upstream's whole per-call limit per cluster): looked at inside
    // the evaluation, which stops in the first cluster.
    let (w, p) = decided(3, Limits::default());
    let calls = AtomicUsize::new(0);
    let deadline = || calls.fetch_add(1, Ordering::Relaxed) + 1 > 1;
    let out = held(&w, &p, cel_spec(&runaway()), &deadline);
    let (_, _, message) = condition(&out, "PlacementSatisfied");
    assert!(
        message.contains("time budget (5s) after 0 of 3 clusters"),
        "{message}"
    );
    // Without CEL the deadline is not asked.
    let (w, p) = decided(40, Limits::default());
    let never = || panic!("asked");
    let mut q = p.clone();
    q.spec = serde_json::from_value(
        json!({"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"env": "prod"}}}}]}),
    )
    .unwrap();
    let out = schedule_with(&w.snapshot, &q, now(), &mut (), &never);
    assert_eq!(out.selected.len(), 40);
    // A deadline that does not pass changes nothing.
    let later = || false;
    q.spec = serde_json::from_value(cel_spec(FIVE_UNITS)).unwrap();
    let out = schedule_with(&w.snapshot, &q, now(), &mut (), &later);
    assert_eq!(out.selected.len(), 40);
}

#[test]
fn a_limit_warns_once_per_change_of_the_condition() {
    let limits = Limits {
        cel_cost: 22,
        ..Limits::default()
    };
    let (mut w, mut p) = decided(10, limits);
    p.spec = serde_json::from_value(cel_spec(FIVE_UNITS)).unwrap();
    let first = w.apply(&mut p);
    let event = limit_event(None, &first).expect("a warning");
    assert_eq!(
        (event.type_, event.reason, event.action),
        (
            crate::EventType::Warning,
            "CELBudgetExceeded",
            "SchedulingSkipped"
        )
    );
    assert_eq!(event.note, first.status.message);
    let again = w.schedule(&p);
    assert_eq!(again.placement_status, first.placement_status);
    assert!(limit_event(p.status.as_ref(), &again).is_none());
    // Within budget again: scheduled, no warning.
    w.snapshot.set_limits(Limits::default());
    let ok = w.schedule(&p);
    assert_eq!(ok.status.code, Code::Success);
    assert!(limit_event(p.status.as_ref(), &ok).is_none());
}

#[test]
fn a_compiler_that_cannot_run_is_transient_and_not_cached() {
    let (w, p) = decided(3, Limits::default());
    // An expression no other test compiles (the cache is shared).
    let spec = cel_spec(r#"managedCluster.metadata.name != "transient-compile-test""#);
    FAIL_SPAWN.with(|f| f.set(true));
    let out = held(&w, &p, spec.clone(), &());
    FAIL_SPAWN.with(|f| f.set(false));
    assert_eq!(out.status.code, Code::Transient);
    assert!(
        out.status
            .message
            .contains("cannot start the compiler thread")
    );
    // Nothing to write: the status stays as it was.
    assert_eq!(Some(&out.placement_status), p.status.as_ref());
    assert_eq!(out.requeue_at, None);
    // The next try compiles.
    let mut q = p.clone();
    q.spec = serde_json::from_value(spec).unwrap();
    let out = w.schedule(&q);
    assert_eq!(out.status.code, Code::Success);
    assert_eq!(out.selected.len(), 3);
}

#[test]
fn a_syntax_error_is_still_a_misconfiguration() {
    let (w, p) = decided(2, Limits::default());
    let mut q = p.clone();
    q.spec = serde_json::from_value(cel_spec("managedCluster.(")).unwrap();
    let out = w.schedule(&q);
    assert_eq!(out.status.code, Code::Misconfigured);
    assert_eq!(condition(&out, "PlacementMisconfigured").0, "True");
}

/// A condition message never exceeds what `metav1.Condition` allows (32,768 characters): a
/// longer one would make the apiserver refuse the whole status write, again at every retry.
#[test]
fn condition_messages_fit_the_schema() {
    use ocm_api::conditions::MAX_MESSAGE;
    let w = World::new(vec![cluster("a")]);
    // Compile errors quote the expression: many long broken ones make a long message.
    let broken: Vec<String> = (0..2)
        .map(|i| {
            format!(
                "managedCluster.metadata.name == '{}' &&",
                "x".repeat(40000 + i)
            )
        })
        .collect();
    let o = w.schedule(&placement(
        "ns",
        "p",
        json!({"predicates": [{"requiredClusterSelector": {"celSelector": {"celExpressions": broken}}}]}),
    ));
    assert_eq!(o.status.code, crate::Code::Misconfigured);
    assert!(
        o.status.message.len() > MAX_MESSAGE,
        "{}",
        o.status.message.len()
    );
    for c in &o.placement_status.conditions {
        assert!(
            c.message.len() <= MAX_MESSAGE,
            "{}: {}",
            c.type_,
            c.message.len()
        );
    }
    let (_, _, m) = condition(&o, "PlacementMisconfigured");
    assert!(m.ends_with("...(truncated)"));
}

#[test]
fn one_clusters_selector_stops_at_the_deadline() {
    // One cluster, ten expressions that each spend most of upstream's per-call limit: the whole
    // per-cluster budget, seconds in an unoptimised build. The deadline is looked at inside
    // the evaluation, so the pass stops soon after it, in the first cluster.
    let (w, p) = decided(1, Limits::default());
    let l = format!(
        "[{}]",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let expression = format!("{l}.all(a, {l}.all(b, [0,1,2,3,4,5,6,7].all(c, c >= 0)))");
    let spec = json!({"predicates": [{"requiredClusterSelector": {"celSelector": {
        "celExpressions": vec![expression; 10]}}}]});
    // A deadline that has passed at its second look (the caller's clock, counted here).
    let looks = std::sync::atomic::AtomicUsize::new(0);
    let deadline = || looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1;
    let out = held(&w, &p, spec, &deadline);
    let (_, reason, message) = condition(&out, "PlacementSatisfied");
    assert_eq!(reason, "CELBudgetExceeded");
    assert!(
        message.contains("time budget (5s) after 0 of 1 clusters"),
        "{message}"
    );
}
