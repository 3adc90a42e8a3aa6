use super::*;
use serde_json::json;

fn work(status: serde_json::Value) -> ManifestWork {
    serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "addon-a-deploy-0", "namespace": "c1", "generation": 2},
            "spec": {
                "workload": {"manifests": []},
                "manifestConfigs": [{
                    "resourceIdentifier": {"group": "apps", "resource": "deployments", "namespace": "ns", "name": "a-agent"},
                    "feedbackRules": [{"type": "WellKnownStatus"}]
                }]
            },
            "status": status
        }))
        .expect("a work")
}

fn cond(t: &str, s: &str, generation: i64) -> serde_json::Value {
    json!({"type": t, "status": s, "reason": "R", "message": format!("{t} is {s}"),
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
}

fn feedback(ready: i64, replicas: i64) -> serde_json::Value {
    json!({"manifests": [{
        "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment",
                         "resource": "deployments", "namespace": "ns", "name": "a-agent"},
        "statusFeedback": {"values": [
            {"name": "ReadyReplicas", "fieldValue": {"type": "Integer", "integer": ready}},
            {"name": "Replicas", "fieldValue": {"type": "Integer", "integer": replicas}}
        ]},
        "conditions": []
    }]})
}

#[test]
fn available_follows_the_work_then_the_deployment_feedback() {
    let applied = cond("Applied", "True", 2);
    let cases = [
        ("no status", json!({}), "Unknown", "WorkNotApplied"),
        (
            "work unavailable",
            json!({"conditions": [applied.clone(), cond("Available", "False", 2)]}),
            "False",
            "WorkNotApplied",
        ),
        (
            "no feedback yet",
            json!({"conditions": [applied.clone(), cond("Available", "True", 2)]}),
            "Unknown",
            "NoProbeResult",
        ),
        (
            "no ready replica",
            json!({"conditions": [applied.clone(), cond("Available", "True", 2)],
                       "resourceStatus": feedback(0, 1)}),
            "False",
            "ProbeUnavailable",
        ),
        (
            "one ready replica",
            json!({"conditions": [applied.clone(), cond("Available", "True", 2)],
                       "resourceStatus": feedback(1, 1)}),
            "True",
            "ProbeAvailable",
        ),
        (
            "scaled to zero",
            json!({"conditions": [applied.clone(), cond("Available", "True", 2)],
                       "resourceStatus": feedback(0, 0)}),
            "True",
            "ProbeAvailable",
        ),
    ];
    for (name, status, want_status, want_reason) in cases {
        let w = work(status);
        let (s, r, _) = available(Some(&w), "a");
        assert_eq!((s, r), (want_status, want_reason), "{name}");
    }
    assert_eq!(available(None, "a").1, "WorkNotFound");
    let w = work(
        json!({"conditions": [applied, cond("Available", "True", 2)],
                             "resourceStatus": feedback(0, 2)}),
    );
    assert_eq!(
        available(Some(&w), "a").2,
        "Probe addon unavailable with err desiredNumberReplicas is 2 but readyReplica is 0 for deployments ns/a-agent"
    );
}

#[test]
fn readiness_needs_the_current_generation() {
    let cases = [
        (
            vec![cond("Applied", "True", 2), cond("Available", "True", 2)],
            true,
            None,
        ),
        (
            vec![cond("Applied", "True", 1), cond("Available", "True", 1)],
            false,
            None,
        ),
        (vec![cond("Applied", "True", 2)], false, None),
        (
            vec![cond("Applied", "False", 2), cond("Available", "True", 2)],
            false,
            Some("Applied is False".to_owned()),
        ),
        (vec![cond("Applied", "False", 1)], false, None),
    ];
    for (conds, ready, failed) in cases {
        let w = work(json!({ "conditions": conds }));
        assert_eq!(work_ready(&w), ready, "{conds:?}");
        assert_eq!(work_failed(&w), failed, "{conds:?}");
    }
    let w = work(json!({"conditions": [cond("Applied", "False", 2)]}));
    assert_eq!(manifest_applied(&w).map(|v| v.0), Some("False"));
    assert_eq!(manifest_applied(&work(json!({}))), None);
}
