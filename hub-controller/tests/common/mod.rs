//! What the hub crate's integration tests share.
#![allow(dead_code)]

use kube::api::PostParams;
use kube::{Api, Client};
use ocm_api::ManagedCluster;
use serde_json::json;

/// A managed cluster the hub accepts, with its namespace (named from `prefix`); its name.
pub async fn accepted_cluster(client: &Client, prefix: &str) -> String {
    let name = testenv::namespace(client, prefix).await.expect("namespace");
    let c: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedCluster",
        "metadata": {"name": name},
        "spec": {"hubAcceptsClient": true}
    }))
    .expect("a cluster");
    Api::<ManagedCluster>::all(client.clone())
        .create(&PostParams::default(), &c)
        .await
        .expect("create cluster");
    name
}
