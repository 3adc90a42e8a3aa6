//! What the hub crate's integration tests share.
#![allow(dead_code)]

pub mod scores;

use std::path::PathBuf;

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ocm_api::ManagedCluster;
use serde_json::json;
use testenv::ControlPlane;

/// OCM's registration labels the namespace it makes for cluster `<c>` with this label, value
/// `<c>` (ocm `pkg/registration/hub/managedcluster/controller.go`); the manager's admission
/// policy takes only namespaces so labelled for cluster namespaces.
pub const CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";

/// A namespace named from `prefix`, labelled as OCM's registration labels a cluster's
/// namespace; its name.
pub async fn cluster_namespace(client: &Client, prefix: &str) -> String {
    let name = testenv::namespace(client, prefix).await.expect("namespace");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {CLUSTER_NAME_LABEL: name}}})),
        )
        .await
        .expect("label the cluster namespace");
    name
}

/// A managed cluster the hub accepts, with its namespace (named from `prefix`, labelled as
/// OCM labels it); its name.
pub async fn accepted_cluster(client: &Client, prefix: &str) -> String {
    let name = cluster_namespace(client, prefix).await;
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

/// A temp dir for one test, named from `tag`.
pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hub-manager-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The service account the manager binaries run as in these tests, bound to the chart's
/// manager RBAC for `addon` in `system`.
pub const MANAGER_ACCOUNT: &str = "resource-usage-hub";

/// The chart's manager RBAC for [`MANAGER_ACCOUNT`] in `system`, applied; a temp dir for the
/// test and, in it, a kubeconfig that is that account.
pub async fn as_the_manager(
    cp: &ControlPlane,
    admin: &Client,
    addon: &str,
    system: &str,
) -> (PathBuf, PathBuf) {
    apply_manager_rbac(admin, addon, system, MANAGER_ACCOUNT).await;
    let dir = tempdir(system);
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        cp.kubeconfig_as_service_account(system, MANAGER_ACCOUNT),
    )
    .expect("kubeconfig");
    (dir, kubeconfig)
}

/// The manager's RBAC (`charts/ocm-placement/files/manager-rbac.yaml`) for `sa` in `ns`, and
/// the agent's ClusterRole it binds, applied as the chart installs them.
pub async fn apply_manager_rbac(client: &Client, addon: &str, ns: &str, sa: &str) {
    // The manager watches ScoreDefinitions (this project's CRD, which the chart installs).
    testenv::install_crds(client, ocm_api::crds::ours())
        .await
        .expect("the ScoreDefinition CRD");
    let text = include_str!("../../../charts/ocm-placement/files/manager-rbac.yaml")
        .replace("{{ADDON}}", addon)
        .replace("{{NAMESPACE}}", ns)
        .replace("{{SUBJECT}}", sa);
    testenv::apply_yaml(client, &text, ns)
        .await
        .expect("the manager's RBAC");
    apply_agent_role(client, addon).await;
}

/// The agent's hub ClusterRole (`charts/ocm-placement/files/agent-hub-rbac.yaml`), which the
/// chart installs with the manager and the manager binds per cluster.
pub async fn apply_agent_role(client: &Client, addon: &str) {
    let text = include_str!("../../../charts/ocm-placement/files/agent-hub-rbac.yaml")
        .replace("{{ADDON}}", addon);
    testenv::apply_yaml(client, &text, "default")
        .await
        .expect("the agent's ClusterRole");
}
