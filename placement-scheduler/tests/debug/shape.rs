//! The result shape on outcomes built by hand and by the core: upstream's JSON, errors
//! with upstream's messages and codes.

use super::*;

// ---------------------------------------------------------------------------------------------
// The result shape

fn names(ns: &[&str]) -> Vec<Name> {
    ns.iter().map(|n| Name::from(*n)).collect()
}

fn stored_placement() -> Placement {
    serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "Placement",
        "metadata": {
            "name": "web", "namespace": "team",
            "labels": {"app": "web"}, "annotations": {"note": "x"},
            "uid": "1234", "resourceVersion": "7", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["f"], "managedFields": [{"manager": "kubectl"}]
        },
        "spec": {"numberOfClusters": 2, "clusterSets": ["s"]},
        "status": {"numberOfSelectedClusters": 2, "conditions": []}
    }))
    .unwrap()
}

type Prioritizer<'a> = (&'a str, i32, Vec<Option<i64>>);

/// An outcome with just what the debug view reads.
fn outcome(
    available: &[&str],
    filters: Vec<(&'static str, &[&str])>,
    filtered: &[&str],
    prioritizers: Vec<Prioritizer<'_>>,
    totals: Vec<i64>,
) -> Outcome {
    Outcome {
        namespace: "team".into(),
        name: "web".into(),
        bindings: vec!["s".into()],
        cluster_sets: vec!["s".into()],
        available: names(available),
        terminating: Vec::new(),
        filters: filters
            .into_iter()
            .map(|(n, dropped)| FilterResult {
                name: n,
                dropped: dropped
                    .iter()
                    .map(|d| {
                        (
                            Name::from(*d),
                            DropReason::MissingTopologyKey("zone".into()),
                        )
                    })
                    .collect(),
            })
            .collect(),
        filtered: names(filtered),
        prioritizers: prioritizers
            .into_iter()
            .map(|(n, weight, scores)| PrioritizerResult {
                name: n.into(),
                weight,
                scores,
            })
            .collect(),
        totals,
        selected: Vec::new(),
        held: Vec::new(),
        spread: None,
        unscheduled: 0,
        status: Status::success(),
        notes: Vec::new(),
        validity_capped: Vec::new(),
        groups: Vec::new(),
        decisions: Vec::new(),
        writes: Vec::new(),
        placement_status: Default::default(),
        requeue_at: None,
        margin: None,
    }
}

#[test]
fn cumulative_filters_scores_and_totals_in_upstreams_shape() {
    let o = outcome(
        &["a", "b", "c", "d", "e"],
        vec![("Predicate", &["d"]), ("TaintToleration", &["b"])],
        &["a", "c", "e"],
        vec![
            ("Balance", 1, vec![Some(100), Some(100), Some(-100)]),
            ("Steady", 1, vec![Some(0), Some(100), Some(0)]),
            (
                "ResourceAllocatableCPU",
                2,
                vec![Some(-100), None, Some(100)],
            ),
            ("AddOn/usage/cpu", 3, vec![Some(10), Some(0), Some(-5)]),
        ],
        vec![30, 200, 85],
    );
    assert_eq!(
        body(&stored_placement(), &o),
        json!({
            "placement": {
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "Placement",
                "metadata": {
                    "name": "web", "namespace": "team",
                    "labels": {"app": "web"}, "annotations": {"note": "x"}
                },
                "spec": {
                    "clusterSets": ["s"], "numberOfClusters": 2,
                    "prioritizerPolicy": {}
                }
            },
            "filteredPipelineResults": [
                {"name": "Predicate", "filteredClusters": ["a", "b", "c", "e"]},
                // The last one in score order, as upstream's in-place sort leaves it.
                {"name": "Predicate,TaintToleration", "filteredClusters": ["c", "e", "a"]}
            ],
            "prioritizeResults": [
                {"name": "Balance", "weight": 1, "scores": {"a": 100, "c": 100, "e": -100}},
                {"name": "Steady", "weight": 1, "scores": {"a": 0, "c": 100, "e": 0}},
                // No entry for a cluster the prioritizer has no opinion on.
                {"name": "ResourceAllocatableCPU", "weight": 2, "scores": {"a": -100, "e": 100}},
                {"name": "AddOn/usage/cpu", "weight": 3, "scores": {"a": 10, "c": 0, "e": -5}}
            ],
            "aggregatedScores": [
                {"clusterName": "c", "score": 200},
                {"clusterName": "e", "score": 85},
                {"clusterName": "a", "score": 30}
            ]
        })
    );
}

#[test]
fn a_third_filter_extends_the_pipeline_name_and_only_the_last_is_in_score_order() {
    let o = outcome(
        &["a", "b", "c", "d"],
        vec![
            ("Predicate", &[]),
            ("TaintToleration", &["a"]),
            ("SpreadConstraints", &["c"]),
        ],
        &["b", "d"],
        vec![("Balance", 1, vec![Some(0), Some(100)])],
        vec![0, 100],
    );
    assert_eq!(
        body(&stored_placement(), &o)["filteredPipelineResults"],
        json!([
            {"name": "Predicate", "filteredClusters": ["a", "b", "c", "d"]},
            {"name": "Predicate,TaintToleration", "filteredClusters": ["b", "c", "d"]},
            {"name": "Predicate,TaintToleration,SpreadConstraints", "filteredClusters": ["d", "b"]}
        ])
    );
}

#[test]
fn equal_totals_sort_by_name_and_negative_totals_come_last() {
    let o = outcome(
        &["z", "m", "a", "q"],
        vec![("Predicate", &[]), ("TaintToleration", &[])],
        &["a", "m", "q", "z"],
        vec![],
        vec![-10, 50, 0, 50],
    );
    let v = body(&stored_placement(), &o);
    assert_eq!(
        v["aggregatedScores"],
        json!([
            {"clusterName": "m", "score": 50},
            {"clusterName": "z", "score": 50},
            {"clusterName": "q", "score": 0},
            {"clusterName": "a", "score": -10}
        ])
    );
    assert_eq!(
        v["filteredPipelineResults"][1]["filteredClusters"],
        json!(["m", "z", "q", "a"])
    );
    // No prioritizer ran (Exact mode without configurations): the list is left out.
    assert!(v.get("prioritizeResults").is_none());
}

#[test]
fn empty_lists_are_left_out_but_an_emptied_filter_shows_an_empty_list() {
    // Misconfigured before the filters: only the placement, without status.
    let o = outcome(&["a"], vec![], &[], vec![], vec![]);
    let v = body(&stored_placement(), &o);
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["placement"]);
    assert!(v["placement"].get("status").is_none());

    // Every cluster dropped: each filter still has its (empty) list; nothing was scored.
    let o = outcome(
        &["a"],
        vec![("Predicate", &["a"]), ("TaintToleration", &[])],
        &[],
        vec![("Balance", 1, vec![]), ("Steady", 1, vec![])],
        vec![],
    );
    let v = body(&stored_placement(), &o);
    assert_eq!(
        v["filteredPipelineResults"],
        json!([
            {"name": "Predicate", "filteredClusters": []},
            {"name": "Predicate,TaintToleration", "filteredClusters": []}
        ])
    );
    assert_eq!(
        v["prioritizeResults"],
        json!([
            {"name": "Balance", "weight": 1, "scores": {}},
            {"name": "Steady", "weight": 1, "scores": {}}
        ])
    );
    assert!(v.get("aggregatedScores").is_none());
}

#[test]
fn the_result_reads_back_and_keeps_no_runtime_metadata() {
    let o = outcome(
        &["a", "b"],
        vec![("Predicate", &["b"]), ("TaintToleration", &[])],
        &["a"],
        vec![("Balance", 1, vec![Some(100)])],
        vec![100],
    );
    let r = debug_result(&stored_placement(), &o);
    let back: DebugResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r);
    let p = back.placement.unwrap();
    assert_eq!(p.metadata.uid, None);
    assert_eq!(p.metadata.resource_version, None);
    assert_eq!(p.metadata.generation, None);
    assert_eq!(p.metadata.creation_timestamp, None);
    assert_eq!(p.metadata.finalizers, None);
    assert_eq!(p.metadata.managed_fields, None);
    assert_eq!(p.status, None);
    assert_eq!(p.spec, stored_placement().spec);
}

#[test]
fn held_moves_are_listed_only_when_there_are_some() {
    let mut o = outcome(
        &["a", "b"],
        vec![("Predicate", &[]), ("TaintToleration", &[])],
        &["a"],
        vec![("AddOn/r/s", 1, vec![Some(10), Some(17)])],
        vec![10, 17],
    );
    let v = serde_json::to_value(debug_result(&stored_placement(), &o)).unwrap();
    assert!(v.get("heldMoves").is_none(), "{v}");
    o.held = vec![placement_core::HeldMove {
        incoming: "b".into(),
        outgoing: "a".into(),
        reason: "gain 7 < minScoreGain 20".into(),
    }];
    let v = serde_json::to_value(debug_result(&stored_placement(), &o)).unwrap();
    assert_eq!(
        v["heldMoves"],
        json!(["b would replace a: gain 7 < minScoreGain 20"])
    );
}

#[test]
fn errors_carry_upstreams_messages_and_codes() {
    let cases: Vec<(DebugError, StatusCode, &str)> = vec![
        (
            DebugError::Forbidden {
                verb: "get",
                namespace: "team".into(),
                reason: String::new(),
            },
            StatusCode::FORBIDDEN,
            "user does not have permission to get placements in namespace team",
        ),
        (
            DebugError::Forbidden {
                verb: "create",
                namespace: "team".into(),
                reason: "no rule".into(),
            },
            StatusCode::FORBIDDEN,
            "user does not have permission to create placements in namespace team: no rule",
        ),
        (
            DebugError::InvalidPath,
            StatusCode::BAD_REQUEST,
            "invalid debug path: namespace and name required",
        ),
        (
            DebugError::NotFound("web".into()),
            StatusCode::NOT_FOUND,
            "placement 'web' not found",
        ),
        (
            DebugError::MethodNotAllowed("DELETE".into()),
            StatusCode::METHOD_NOT_ALLOWED,
            "method DELETE not allowed",
        ),
        (
            DebugError::DeclaredBodyTooLarge {
                declared: 2_000_000,
                limit: MAX_REQUEST_BODY_BYTES,
            },
            StatusCode::BAD_REQUEST,
            "request body too large: 2000000 bytes exceeds maximum of 1048576 bytes",
        ),
        (
            DebugError::BodyTooLarge(MAX_REQUEST_BODY_BYTES),
            StatusCode::BAD_REQUEST,
            "request body too large: exceeds maximum of 1048576 bytes",
        ),
        (
            DebugError::AccessReview(ReviewError::Timeout(REVIEW_TIMEOUT)),
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to check permissions: no answer within 10s",
        ),
    ];
    for (e, status, message) in cases {
        assert_eq!(e.status(), status, "{e}");
        assert_eq!(e.to_string(), message);
        let r = e.response();
        assert_eq!(r.status(), status);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    }
    let r = DebugError::NoToken.response();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    let e = DebugError::Busy(4);
    assert_eq!(
        e.to_string(),
        "too many debug requests in progress (at most 4, --debug-max-concurrent-requests): retry later"
    );
    let r = e.response();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[header::RETRY_AFTER], "1");
}
