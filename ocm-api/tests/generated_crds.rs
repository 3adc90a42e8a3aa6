//! The CRDs generated from our types (`crdgen`) install into a fresh apiserver (no upstream
//! CRDs in it) and accept the design documents' objects: the extensible-scheduling enhancement's Placements and
//! AddOnPlacementScores, the decision-strategy proposal's Placements with decision groups. Their status goes through the status
//! subresource, and what is read back equals what was written.

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

mod common;

use std::collections::BTreeSet;

use common::{body, fixture_docs};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn control_plane() -> &'static testenv::ControlPlane {
    static CP: tokio::sync::OnceCell<testenv::ControlPlane> = tokio::sync::OnceCell::const_new();
    CP.get_or_init(|| async {
        testenv::ControlPlane::start(
            testenv::Options::default()
                .with_crds(ocm_api::crds::all())
                .with_crds(ocm_api::crds::ours()),
        )
        .await
        .expect("start a control plane with the generated CRDs")
    })
    .await
}

#[tokio::test]
async fn generated_crds_accept_the_seed_objects() {
    let cp = control_plane().await;
    let client = cp.client().unwrap();
    let docs = fixture_docs("enhancements.yaml");
    assert_eq!(docs.len(), 8);

    let namespaces: BTreeSet<String> = docs
        .iter()
        .filter_map(|d| d["metadata"]["namespace"].as_str().map(String::from))
        .collect();
    for ns in namespaces {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    for doc in docs {
        let (group, version) = doc["apiVersion"].as_str().unwrap().split_once('/').unwrap();
        let kind = doc["kind"].as_str().unwrap();
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let ns = doc["metadata"]["namespace"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);

        // Our types decode the seed object.
        match kind {
            "Placement" => drop(serde_json::from_value::<ocm_api::Placement>(doc.clone()).unwrap()),
            "AddOnPlacementScore" => {
                drop(serde_json::from_value::<ocm_api::AddOnPlacementScore>(doc.clone()).unwrap())
            }
            other => panic!("unexpected kind {other} in enhancements.yaml"),
        }

        let mut spec_only = doc.clone();
        let status = spec_only.as_object_mut().unwrap().remove("status");
        let obj: DynamicObject = serde_json::from_value(spec_only).unwrap();
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{kind} {ns}/{name} refused: {e}"));
        if let Some(status) = status {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} {ns}/{name} status refused: {e}"));
        }
        let back = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        assert_eq!(
            without_defaults(kind, body(&back)),
            body(&doc),
            "{kind} {ns}/{name} read back"
        );
    }
}

/// The apiserver fills the CRD defaults the design documents leave out; take them off again to compare.
fn without_defaults(kind: &str, mut v: Value) -> Value {
    if kind == "Placement" {
        let spec = &mut v["spec"];
        for (field, default) in [
            ("sortBy", json!("ClusterName")),
            ("scoreRateLimit", json!("1m")),
        ] {
            assert_eq!(spec[field], default, "CRD default of {field}");
            spec.as_object_mut().unwrap().remove(field);
        }
        if spec["prioritizerPolicy"]
            .as_object()
            .is_some_and(|p| p.is_empty())
        {
            assert!(
                spec.as_object_mut()
                    .unwrap()
                    .remove("prioritizerPolicy")
                    .is_some()
            );
        }
    }
    v
}

#[tokio::test]
async fn generated_crds_reject_what_upstream_rejects() {
    let cp = control_plane().await;
    let client = cp.client().unwrap();
    let ns = testenv::namespace(&client, "reject").await.unwrap();
    let placements: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::erase::<ocm_api::Placement>(&()),
    );
    let bad = [
        (
            "weight out of [-10, 10]",
            json!({"prioritizerPolicy": {"configurations": [
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Steady"}, "weight": 11}]}}),
        ),
        (
            "unknown scoreCoordinate type",
            json!({"prioritizerPolicy": {"configurations": [
            {"scoreCoordinate": {"type": "Magic"}}]}}),
        ),
        (
            "maxSkew below 1",
            json!({"spreadPolicy": {"spreadConstraints": [
            {"topologyKey": "region", "topologyKeyType": "Label", "maxSkew": 0}]}}),
        ),
        (
            "bad clustersPerDecisionGroup",
            json!({"decisionStrategy": {"groupStrategy": {
            "clustersPerDecisionGroup": "101%"}}}),
        ),
        ("bad scoreRateLimit", json!({"scoreRateLimit": "1d"})),
        ("unknown sortBy", json!({"sortBy": "Random"})),
    ];
    for (i, (what, spec)) in bad.into_iter().enumerate() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "Placement",
            "metadata": {"name": format!("bad-{i}")},
            "spec": spec,
        }))
        .unwrap();
        let err = placements
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(what);
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 422),
            "{what}: expected 422 Invalid, got {err:?}"
        );
    }

    let scores: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::erase::<ocm_api::AddOnPlacementScore>(&()),
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1alpha1",
        "kind": "AddOnPlacementScore",
        "metadata": {"name": "out-of-range"},
    }))
    .unwrap();
    scores.create(&PostParams::default(), &obj).await.unwrap();
    let err = scores
        .patch_status(
            "out-of-range",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"scores": [{"name": "cpu", "value": 101}]}})),
        )
        .await
        .expect_err("a score above 100");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "got {err:?}"
    );
}

/// The ScoreDefinition CRD's schema and CEL rules refuse what no evaluator could run, with
/// messages that say why, and accept the shipped examples and the built-in definition.
#[tokio::test]
async fn score_definitions_are_checked_by_the_apiserver() {
    let cp = control_plane().await;
    let client = cp.client().unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scoring.ocm-placement.io", "v1alpha1", "ScoreDefinition"),
        "scoredefinitions",
    );
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let create = |v: Value| {
        let api = api.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(v).unwrap();
            api.create(&PostParams::default(), &obj).await
        }
    };
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scoring");
    for file in ["gpu-memory.yaml", "ingress-latency.yaml"] {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        let v: Value = serde_saphyr::from_str(&text).unwrap();
        create(v).await.unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    let builtin = testenv::scoring::builtin(&testenv::scoring::Builtin {
        name: "resource-usage".into(),
        score_name: "resource-usage-score".into(),
        refresh_period: "60s".into(),
        window: "15m".into(),
        step: "1m".into(),
        max_data_age: "15m".into(),
        range: Some(("100".into(), "512Gi".into())),
        labels: vec![],
    })
    .unwrap();
    create(builtin).await.expect("the built-in definition");

    let def = |name: &str, spec: Value| {
        json!({"apiVersion": "scoring.ocm-placement.io/v1alpha1", "kind": "ScoreDefinition",
               "metadata": {"name": name}, "spec": spec})
    };
    let rule = |normalise: Value| json!([{"name": "s", "expression": "x", "normalise": normalise}]);
    let cases = [
        (
            "no-max",
            json!({"scoreName": "s", "scores": rule(json!({"type": "Range", "min": "0"}))}),
            "Range needs min and max",
        ),
        (
            "minmax-bounds",
            json!({"scoreName": "s", "scores": rule(json!({"type": "MinMax", "min": "0"}))}),
            "min and max belong to Range only",
        ),
        (
            "inverted",
            json!({"scoreName": "s", "scores": rule(json!({"type": "Range", "min": "2Gi", "max": "1Gi"}))}),
            "min must be less than max",
        ),
        (
            "not-quantity",
            json!({"scoreName": "s", "scores": rule(json!({"type": "Range", "min": "zero", "max": "1"}))}),
            "min must be a quantity",
        ),
        (
            "agent-rank",
            json!({"scoreName": "s", "evaluator": "Agent", "scores": rule(json!({"type": "Rank"}))}),
            "normalise by Range only",
        ),
        (
            "period",
            json!({"scoreName": "s", "refreshPeriod": "soon", "scores": rule(json!({"type": "Rank"}))}),
            "refreshPeriod",
        ),
        (
            "missing",
            json!({"scoreName": "s", "scores": [{"name": "s", "expression": "x", "normalise": {"type": "Rank"}, "missingValue": 200}]}),
            "missingValue",
        ),
        ("none", json!({"scoreName": "s", "scores": []}), "scores"),
        (
            "bad-name",
            json!({"scoreName": "Not_A_Name", "scores": rule(json!({"type": "Rank"}))}),
            "scoreName",
        ),
    ];
    for (name, spec, needle) in cases {
        match create(def(name, spec)).await {
            Err(kube::Error::Api(s)) if s.code == 422 => {
                assert!(s.message.contains(needle), "{name}: {}", s.message);
            }
            other => panic!("{name}: expected a 422 naming {needle:?}, got {other:?}"),
        }
    }
}
