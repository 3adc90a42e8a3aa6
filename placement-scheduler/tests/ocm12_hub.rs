//! A hub of OCM 1.2, whose CRDs predate `decisions[].score` and the Placement's
//! `lastScoreUpdateTime` (this binary's control plane has them removed, as in
//! open-cluster-management-io/api v1.2.0's CRDs), as a user who swaps our scheduler into such a
//! hub meets it: a Placement over 150 clusters gets both its PlacementDecisions (100 + 50), no
//! object carries a field the hub does not know, a pass that changes no decision writes
//! nothing, and a restarted scheduler writes nothing (the apiserver's own counters). A test
//! binary of its own: its control plane's CRDs are not upstream's current ones.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use kube::Api;
use serde_json::{Value, json};

/// Makes the control plane's CRDs those of OCM 1.2, and waits until its published OpenAPI
/// says so (what the scheduler reads at start).
async fn make_it_ocm_1_2(hub: &Hub) {
    testenv::crds::as_ocm_1_2(&hub.client, |doc| {
        placement_scheduler::controller::schema::from_document(doc)
            == Some(placement_core::ScoreFields::Absent)
    })
    .await
    .unwrap();
}

/// The scheduler-written objects of `hub`'s namespace as raw JSON: its Placement `p` and its
/// PlacementDecisions.
async fn raw(hub: &Hub) -> (Value, Vec<Value>) {
    let placements: Api<kube::core::DynamicObject> = Api::namespaced_with(
        hub.client.clone(),
        &hub.ns,
        &kube::discovery::ApiResource::erase::<ocm_api::Placement>(&()),
    );
    let decisions: Api<kube::core::DynamicObject> = Api::namespaced_with(
        hub.client.clone(),
        &hub.ns,
        &kube::discovery::ApiResource::erase::<ocm_api::PlacementDecision>(&()),
    );
    let p = serde_json::to_value(placements.get("p").await.unwrap()).unwrap();
    let ds = decisions
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    (p, ds)
}

#[tokio::test]
async fn on_an_ocm_1_2_hub_decisions_are_written_once_and_stay_put_across_a_restart() {
    let hub = Hub::without_controller("ocm12").await;
    make_it_ocm_1_2(&hub).await;
    let names: Vec<String> = (0..150).map(|i| format!("c{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    hub.clusters(&refs, json!({})).await;
    let dir = std::env::temp_dir().join(format!("pl-ocm12-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    testenv::shared()
        .await
        .write_kubeconfig(&dir.join("kubeconfig"))
        .unwrap();

    let (first, metrics) = binary::start(&hub, &dir, 1, &[]);
    // Every cluster, default prioritizers (Balance and Steady give every cluster a score).
    hub.placement("p", json!({})).await;
    hub.expect_count("p", 150).await;
    let rest = binary::at_rest(metrics, 0.0).await;
    let (placement, decisions) = raw(&hub).await;
    let sizes: BTreeMap<String, usize> = decisions
        .iter()
        .map(|d| {
            (
                d["metadata"]["name"].as_str().unwrap().to_owned(),
                d["status"]["decisions"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        sizes,
        BTreeMap::from([("p-decision-1".into(), 100), ("p-decision-2".into(), 50)])
    );
    for d in &decisions {
        for e in d["status"]["decisions"].as_array().unwrap() {
            assert_eq!(e.get("score"), None, "{e}");
        }
    }
    assert_eq!(placement["status"].get("lastScoreUpdateTime"), None);
    assert_eq!(placement["status"]["numberOfSelectedClusters"], 150);

    // A change that wakes the Placement's pass and changes no decision: nothing is written.
    let before = binary::hub_writes(&hub).await;
    hub.patch_cluster(
        &hub.cluster_name("c007"),
        json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    let again = binary::at_rest(metrics, rest.passes).await;
    assert_eq!(
        again.writes, rest.writes,
        "writes of a pass that changed nothing"
    );
    first.check_alive().unwrap();

    // The restart: killed, and started again.
    drop(first);
    let (second, _) = binary::restart_writes_nothing(&hub, &dir, 2, &[], &before).await;
    second.check_alive().unwrap();
    drop(second);
    std::fs::remove_dir_all(&dir).unwrap();
}
