//! Against a real kube-apiserver with the upstream OCM CRDs: every CRD installs; for each kind,
//! an object with every upstream field set survives our types — created through them and read
//! back equal, written upstream-style and read through them, and written back through them
//! (spec and status subresource) without losing a field.

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

mod common;

use std::fmt::Debug;

use common::{body, fixture, storage_version, uncovered_paths, upstream_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::wait::Condition;
use kube::runtime::wait::conditions::is_crd_established;
use kube::{Api, Client, Resource};
use ocm_api::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How to reach a kind: `Api::all` for cluster-scoped kinds, `Api::namespaced` for the rest.
type MakeApi<K> = fn(Client, Option<&str>) -> Api<K>;

fn cluster_api<K>(client: Client, _: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>,
{
    Api::all(client)
}

fn namespaced_api<K>(client: Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(client, ns.expect("a namespaced kind gets a namespace"))
}

fn with_name(mut v: Value, name: &str) -> Value {
    v["metadata"]["name"] = json!(name);
    v
}

fn without_status(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    v
}

/// The whole check for one kind. `K` is our type; `file` the fixture with every field set.
async fn roundtrip<K>(file: &str, plural: &str, make_api: MakeApi<K>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + PartialEq + Serialize + DeserializeOwned,
{
    let raw = fixture(&format!("upstream/{file}"));
    let group = K::group(&()).to_string();

    // The fixture sets every field upstream's schema has (else the round trip proves little).
    let crd = upstream_crd(&group, plural);
    let missing = uncovered_paths(&crd, &raw);
    assert!(
        missing.is_empty(),
        "{file} leaves out upstream fields: {missing:#?}"
    );

    // Offline: decoding into our type and encoding again gives the same object.
    let typed: K =
        serde_json::from_value(raw.clone()).expect("our type decodes the upstream object");
    assert_eq!(
        body(&serde_json::to_value(&typed).unwrap()),
        body(&raw),
        "offline round trip of {file}"
    );

    let cp = testenv::shared().await;
    let client = cp.client().unwrap();
    let ns = match crd.spec.scope.as_str() {
        "Namespaced" => Some(
            testenv::namespace(&client, &format!("rt-{plural}"))
                .await
                .unwrap(),
        ),
        _ => None,
    };
    let api = make_api(client.clone(), ns.as_deref());
    let ar = ApiResource::erase::<K>(&());
    let dyn_api: Api<DynamicObject> = match &ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let base = raw["metadata"]["name"].as_str().unwrap().to_string();

    // 1. Upstream-style writer (untyped JSON): create, then the status subresource.
    let upstream_name = format!("{base}-upstream");
    let obj: DynamicObject =
        serde_json::from_value(with_name(without_status(&raw), &upstream_name)).unwrap();
    dyn_api.create(&PostParams::default(), &obj).await.unwrap();
    if raw.get("status").is_some() {
        dyn_api
            .patch_status(
                &upstream_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": raw["status"]})),
            )
            .await
            .unwrap();
    }
    // Read through our type: nothing missing.
    let got = api.get(&upstream_name).await.unwrap();
    assert_eq!(
        body(&serde_json::to_value(&got).unwrap()),
        body(&raw),
        "{file}: typed read"
    );
    // Write back through our type: the whole object to the status subresource, then to the
    // main resource, as a read-modify-write controller does. Nothing may be lost.
    let has_status_subresource = storage_version(&crd)
        .subresources
        .as_ref()
        .is_some_and(|s| s.status.is_some());
    let got = if has_status_subresource {
        api.replace_status(&upstream_name, &PostParams::default(), &got)
            .await
            .unwrap()
    } else {
        got // e.g. AddOnDeploymentConfig: no status at all
    };
    api.replace(&upstream_name, &PostParams::default(), &got)
        .await
        .unwrap();
    let after = serde_json::to_value(dyn_api.get(&upstream_name).await.unwrap()).unwrap();
    assert_eq!(body(&after), body(&raw), "{file}: after typed write-back");

    // 2. Our types as the writer: create, then a status patch through the status subresource.
    let typed_name = format!("{base}-typed");
    let mut created: K = typed.clone();
    created.meta_mut().name = Some(typed_name.clone());
    api.create(&PostParams::default(), &created).await.unwrap();
    let status = serde_json::to_value(&typed).unwrap().get("status").cloned();
    if let Some(status) = status {
        api.patch_status(
            &typed_name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
    }
    let read_back = api.get(&typed_name).await.unwrap();
    let mut expected = typed.clone();
    *expected.meta_mut() = read_back.meta().clone();
    assert_eq!(
        read_back, expected,
        "{file}: created through our type, read back equal"
    );
}

#[tokio::test]
async fn every_upstream_crd_is_established_and_served() {
    let cp = testenv::shared().await;
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client().unwrap());
    let expected = testenv::upstream_crds().unwrap();
    assert!(
        expected.len() >= 10,
        "expected the OCM CRDs, found {}",
        expected.len()
    );
    for crd in expected {
        let name = crd.metadata.name.unwrap();
        let live = crds.get(&name).await.unwrap();
        assert!(
            is_crd_established().matches_object(Some(&live)),
            "{name} is not Established"
        );
    }
}

#[tokio::test]
async fn managed_cluster() {
    roundtrip::<ManagedCluster>("managedcluster.yaml", "managedclusters", cluster_api).await;
}

#[tokio::test]
async fn managed_cluster_set() {
    roundtrip::<ManagedClusterSet>("managedclusterset.yaml", "managedclustersets", cluster_api)
        .await;
}

#[tokio::test]
async fn managed_cluster_set_binding() {
    roundtrip::<ManagedClusterSetBinding>(
        "managedclustersetbinding.yaml",
        "managedclustersetbindings",
        namespaced_api,
    )
    .await;
}

#[tokio::test]
async fn placement() {
    roundtrip::<Placement>("placement.yaml", "placements", namespaced_api).await;
}

#[tokio::test]
async fn placement_decision() {
    roundtrip::<PlacementDecision>(
        "placementdecision.yaml",
        "placementdecisions",
        namespaced_api,
    )
    .await;
}

#[tokio::test]
async fn addon_placement_score() {
    roundtrip::<AddOnPlacementScore>(
        "addonplacementscore.yaml",
        "addonplacementscores",
        namespaced_api,
    )
    .await;
}

#[tokio::test]
async fn cluster_management_addon() {
    roundtrip::<ClusterManagementAddOn>(
        "clustermanagementaddon.yaml",
        "clustermanagementaddons",
        cluster_api,
    )
    .await;
}

#[tokio::test]
async fn managed_cluster_addon() {
    roundtrip::<ManagedClusterAddOn>(
        "managedclusteraddon.yaml",
        "managedclusteraddons",
        namespaced_api,
    )
    .await;
}

#[tokio::test]
async fn addon_deployment_config() {
    roundtrip::<AddOnDeploymentConfig>(
        "addondeploymentconfig.yaml",
        "addondeploymentconfigs",
        namespaced_api,
    )
    .await;
}

#[tokio::test]
async fn manifest_work() {
    roundtrip::<ManifestWork>("manifestwork.yaml", "manifestworks", namespaced_api).await;
}
