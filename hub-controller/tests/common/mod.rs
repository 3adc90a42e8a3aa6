//! What the hub crate's integration tests share.
#![allow(dead_code)]

use kube::api::{Patch, PatchParams, PostParams};
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

/// Lets `subject` (a User or a Group) create and read CSRs, as OCM's registration lets
/// cluster agents.
pub async fn allow_csr_create(client: &Client, name: &str, kind: &str, subject: &str) {
    let pp = PatchParams::apply("test").force();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get"]}]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]
    });
    Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&role))
        .await
        .expect("clusterrole");
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&binding))
        .await
        .expect("clusterrolebinding");
}
