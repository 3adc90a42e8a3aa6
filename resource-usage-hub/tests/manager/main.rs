//! The add-on manager against a real apiserver with upstream CRDs: install through
//! placements, registration and RBAC, CSR approval, the rendered works, the whole loop with
//! the agent binary on a second apiserver acting as the managed cluster, progressive rollout
//! by decision groups, and a start before the hub answers. One control plane for the binary; each topic is a module and
//! each test has its own namespaces, clusters and add-on name.

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod agent;
mod binary;
mod config_refs;
mod definitions;
mod install;
mod registration;
mod rollout;
mod startup;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{MANAGER_ACCOUNT, apply_agent_role, as_the_manager, tempdir};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfig, ClusterManagementAddOn, ManagedClusterAddOn,
};
use ocm_api::cluster::v1beta1::{Placement, PlacementDecision};
use ocm_api::work::v1::ManifestWork;
use ocm_api::{AddOnPlacementScore, AddOnPlacementScoreStatus};
use resource_usage_hub::manager::controller::{self, Handle, Options};
use resource_usage_hub::manager::plan::{HealthMode, RENDERING_HASH, Settings};
use resource_usage_hub::manager::registration::{default_groups, default_user};
use resource_usage_hub::manager::render::AgentTemplate;
use resource_usage_hub::manager::testing;
use serde_json::{Value, json};
use testenv::{ControlPlane, eventually};

const DEADLINE: Duration = Duration::from_secs(60);
const IMAGE: &str = "quay.io/ocm-placement/resource-usage-agent:test";
const AGENT_NS: &str = "open-cluster-management-agent-addon";

/// A manager running in this test's runtime; stopped on drop.
struct Manager {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    registry: Arc<prometheus_client::registry::Registry>,
}

impl Manager {
    /// The sum of a counter family's samples in the manager's /metrics text.
    fn counter(&self, name: &str) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("encode");
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn settings(addon: &str) -> Settings {
    Settings {
        addon: addon.to_owned(),
        agent: format!("{addon}-agent"),
        template: AgentTemplate {
            addon_name: addon.to_owned(),
            image: IMAGE.to_owned(),
            default_install_namespace: AGENT_NS.to_owned(),
            definitions: String::new(),
        },
        health: HealthMode::Work,
        manage_cma: true,
    }
}

fn start(cp: &ControlPlane, settings: Settings) -> Manager {
    let client = cp.client().expect("client");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut registry = prometheus_client::registry::Registry::default();
    let handle = Handle::new(&mut registry);
    let options = Options {
        settings,
        debounce: Duration::from_millis(50),
        resync: Duration::from_secs(30),
        leadership: ocm_runtime::Leadership::always(),
    };
    tokio::spawn(async move {
        // The manager watches ScoreDefinitions (this project's CRD, not upstream's).
        testenv::install_crds(&client, ocm_api::crds::ours())
            .await
            .expect("the ScoreDefinition CRD");
        controller::run(client, handle, options, async {
            let _ = rx.await;
        })
        .await;
    });
    Manager {
        stop: Some(tx),
        registry: Arc::new(registry),
    }
}

async fn namespace(client: &Client, prefix: &str) -> String {
    testenv::namespace(client, prefix).await.expect("namespace")
}

/// A managed cluster the hub accepts, with its namespace.
async fn cluster(client: &Client, prefix: &str) -> String {
    common::accepted_cluster(client, prefix).await
}

async fn create_cma(client: &Client, addon: &str, strategy: Value) {
    let cma: ClusterManagementAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ClusterManagementAddOn",
        "metadata": {"name": addon, "annotations": {"addon.open-cluster-management.io/lifecycle": "self"}},
        "spec": {
            "addOnMeta": {"displayName": addon},
            "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"}],
            "installStrategy": strategy
        }
    }))
    .expect("a cma");
    Api::<ClusterManagementAddOn>::all(client.clone())
        .create(&PostParams::default(), &cma)
        .await
        .expect("create cma");
}

/// A PlacementDecision of `placement` (status written as the scheduler does).
async fn decision(
    client: &Client,
    ns: &str,
    name: &str,
    placement: &str,
    group: Option<(i32, &str)>,
    clusters: &[&str],
) {
    let mut labels = BTreeMap::from([(
        "cluster.open-cluster-management.io/placement".to_owned(),
        placement.to_owned(),
    )]);
    if let Some((i, n)) = group {
        labels.insert(
            "cluster.open-cluster-management.io/decision-group-index".into(),
            i.to_string(),
        );
        labels.insert(
            "cluster.open-cluster-management.io/decision-group-name".into(),
            n.to_owned(),
        );
    }
    let api = Api::<PlacementDecision>::namespaced(client.clone(), ns);
    let d: PlacementDecision = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "PlacementDecision",
        "metadata": {"name": name, "labels": labels},
    }))
    .expect("a decision");
    if api.get_opt(name).await.expect("get decision").is_none() {
        api.create(&PostParams::default(), &d)
            .await
            .expect("create decision");
    }
    set_decisions(client, ns, name, clusters).await;
}

/// Sets a decision's clusters, then its Placement's status as a scheduler that succeeded
/// leaves it (see [`mark_scheduled`]).
async fn set_decisions(client: &Client, ns: &str, name: &str, clusters: &[&str]) {
    set_decisions_only(client, ns, name, clusters).await;
    let d = Api::<PlacementDecision>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("decision");
    if let Some(p) = d
        .labels()
        .get("cluster.open-cluster-management.io/placement")
    {
        mark_scheduled(client, ns, p).await;
    }
}

/// Sets a decision's clusters, leaving its Placement alone.
async fn set_decisions_only(client: &Client, ns: &str, name: &str, clusters: &[&str]) {
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    Api::<PlacementDecision>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"decisions": decisions}})),
        )
        .await
        .expect("decision status");
}

/// A `PlacementSatisfied` condition as the scheduler writes it.
fn satisfied(status: &str, reason: &str) -> Value {
    json!({"type": "PlacementSatisfied", "status": status, "reason": reason,
           "message": format!("{reason}"), "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// The Placement as a scheduler that succeeded leaves it: satisfied, selecting the clusters
/// its decisions hold (created when missing).
async fn mark_scheduled(client: &Client, ns: &str, placement: &str) {
    let n: usize = Api::<PlacementDecision>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "cluster.open-cluster-management.io/placement={placement}"
        )))
        .await
        .expect("decisions")
        .items
        .iter()
        .map(|d| d.status.as_ref().map_or(0, |s| s.decisions.len()))
        .sum();
    set_placement_status(
        client,
        ns,
        placement,
        json!({"numberOfSelectedClusters": n,
               "conditions": [satisfied("True", "AllDecisionsScheduled")]}),
    )
    .await;
}

/// Writes the Placement's status (`null`: none), creating the Placement when missing.
async fn set_placement_status(client: &Client, ns: &str, name: &str, status: Value) {
    let api = Api::<Placement>::namespaced(client.clone(), ns);
    if api.get_opt(name).await.expect("get placement").is_none() {
        let p: Placement = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "Placement",
            "metadata": {"name": name, "namespace": ns},
            "spec": {}
        }))
        .expect("a placement");
        api.create(&PostParams::default(), &p)
            .await
            .expect("create placement");
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .expect("placement status");
}

async fn create_adc(client: &Client, ns: &str, name: &str, spec: Value) {
    let adc: AddOnDeploymentConfig = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "AddOnDeploymentConfig",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))
    .expect("an adc");
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &adc)
        .await
        .expect("create adc");
}

async fn create_mca(client: &Client, cluster: &str, addon: &str) {
    let mca: ManagedClusterAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ManagedClusterAddOn",
        "metadata": {"name": addon, "namespace": cluster},
        "spec": {}
    }))
    .expect("an mca");
    Api::<ManagedClusterAddOn>::namespaced(client.clone(), cluster)
        .create(&PostParams::default(), &mca)
        .await
        .expect("create mca");
}

async fn work(client: &Client, cluster: &str, addon: &str) -> Option<ManifestWork> {
    Api::<ManifestWork>::namespaced(client.clone(), cluster)
        .get_opt(&format!("addon-{addon}-deploy-0"))
        .await
        .expect("get work")
}

async fn mca(client: &Client, cluster: &str, addon: &str) -> Option<ManagedClusterAddOn> {
    Api::<ManagedClusterAddOn>::namespaced(client.clone(), cluster)
        .get_opt(addon)
        .await
        .expect("get mca")
}

fn condition<'a>(m: &'a ManagedClusterAddOn, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    m.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

fn rendering_hash(w: &ManifestWork) -> String {
    w.annotations()
        .get(RENDERING_HASH)
        .cloned()
        .unwrap_or_default()
}

/// Reports the work applied and its Deployment ready, as the work agent would.
async fn report_work(client: &Client, cluster: &str, addon: &str, applied: bool) {
    let w = work(client, cluster, addon).await.expect("a work");
    let generation = w.metadata.generation.unwrap_or_default();
    let applied_status = if applied { "True" } else { "False" };
    let cond = |t: &str, s: &str| {
        json!({"type": t, "status": s, "reason": if s == "True" { "AppliedManifestWorkComplete" } else { "AppliedManifestWorkFailed" },
               "message": format!("{t} {s}"), "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
    };
    let deployment = format!("{addon}-agent");
    let ns = w
        .spec
        .workload
        .manifests
        .iter()
        .find(|m| m.raw.get("kind") == Some(&json!("Deployment")))
        .and_then(|m| m.raw.pointer("/metadata/namespace"))
        .and_then(Value::as_str)
        .unwrap_or(AGENT_NS)
        .to_owned();
    Api::<ManifestWork>::namespaced(client.clone(), cluster)
        .patch_status(
            &w.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "conditions": [cond("Applied", applied_status), cond("Available", "True")],
                "resourceStatus": {"manifests": [{
                    "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment",
                                     "resource": "deployments", "namespace": ns, "name": deployment},
                    "statusFeedback": {"values": [
                        {"name": "ReadyReplicas", "fieldValue": {"type": "Integer", "integer": 1}},
                        {"name": "Replicas", "fieldValue": {"type": "Integer", "integer": 1}}
                    ]},
                    // The work's CEL rule on the Deployment, as the work agent evaluates it.
                    "conditions": [cond("RolledOut", applied_status)]
                }]}
            }})),
        )
        .await
        .expect("work status");
}

/// A work spec without the rollout stamp (the rendering hash on the Deployment and in its
/// RolledOut rule), which depends on the cluster's name; checked against `hash`.
fn unstamped(mut spec: Value, hash: &str) -> Value {
    for m in spec["workload"]["manifests"]
        .as_array_mut()
        .expect("manifests")
    {
        if let Some(a) = m
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            assert_eq!(a.remove(RENDERING_HASH), Some(json!(hash)));
            if a.is_empty()
                && let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.remove("annotations");
            }
        }
    }
    for c in spec["manifestConfigs"].as_array_mut().expect("configs") {
        if let Some(c) = c.as_object_mut()
            && let Some(rules) = c.remove("conditionRules")
        {
            assert!(
                rules.to_string().contains(hash),
                "the RolledOut rule names the hash"
            );
        }
    }
    spec
}

/// The rendering hash a golden file was stamped with.
fn golden_hash(spec: &Value) -> String {
    spec["workload"]["manifests"]
        .as_array()
        .and_then(|m| m.iter().find(|o| o["kind"] == "Deployment"))
        .map(|d| &d["metadata"]["annotations"][RENDERING_HASH])
        .and_then(Value::as_str)
        .expect("golden hash")
        .to_owned()
}

/// The golden work spec for `cluster` (the files name `cluster1` / `cluster2`).
fn golden(file: &str, placeholder: &str, cluster: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/expected")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("golden file");
    serde_json::from_str(&text.replace(placeholder, cluster)).expect("golden json")
}

/// The klusterlet's registration agent of `cluster` on the hub.
fn registration_agent(cluster: &str) -> (String, Vec<String>) {
    (
        format!("system:open-cluster-management:{cluster}:agent1"),
        vec![
            format!("system:open-cluster-management:{cluster}"),
            "system:open-cluster-management:managed-clusters".into(),
        ],
    )
}

/// What OCM's registration controller gives the klusterlet of `cluster` on the hub, in the
/// cluster namespace (ocm `pkg/registration/hub/manifests/rbac/`:
/// `managedcluster-registration-clusterrole.yaml` and `managedcluster-work-clusterrole.yaml`,
/// bound by `managedcluster-registration-rolebinding.yaml` and
/// `managedcluster-work-rolebinding.yaml` to the cluster's group): read its add-ons and write
/// their status (not their spec), read and write its ManifestWorks, its Leases, Events.
async fn apply_klusterlet_rbac(client: &Client, cluster: &str) {
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    let registration = "open-cluster-management:managedcluster:registration";
    let work = "open-cluster-management:managedcluster:work";
    let roles = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": registration},
        "rules": [
            rule(&["coordination.k8s.io"], &["leases"], &["get", "list", "watch", "update"]),
            rule(&["addon.open-cluster-management.io"], &["managedclusteraddons"], &["get", "list", "watch"]),
            rule(&["addon.open-cluster-management.io"], &["managedclusteraddons/status"], &["patch", "update"]),
            rule(&["events.k8s.io"], &["events"], &["list", "watch", "create"]),
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": work},
        "rules": [
            rule(&["", "events.k8s.io"], &["events"], &["create", "patch", "update"]),
            rule(&["work.open-cluster-management.io"], &["manifestworks"],
                 &["get", "list", "watch", "update", "patch", "delete"]),
            rule(&["work.open-cluster-management.io"], &["manifestworks/status"], &["patch", "update"]),
        ]}),
    ];
    let group = |name: String| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name});
    let binding = |role: &str, what: &str, subjects: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": format!("open-cluster-management:managedcluster:{cluster}:{what}"),
                            "namespace": cluster},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": subjects})
    };
    let bindings = [
        binding(
            registration,
            "registration",
            json!([
                group(format!("system:open-cluster-management:{cluster}")),
                group(format!("open-cluster-management:{cluster}"))
            ]),
        ),
        binding(
            work,
            "work",
            json!([group(format!("system:open-cluster-management:{cluster}"))]),
        ),
    ];
    for o in roles.iter().chain(&bindings) {
        testenv::apply(client, o, cluster)
            .await
            .expect("the klusterlet's RBAC");
    }
}

async fn request_csr(
    cp: &ControlPlane,
    as_cluster: &str,
    name: &str,
    labels: (&str, &str),
    cn: &str,
    orgs: &[&str],
) {
    let (user, groups) = registration_agent(as_cluster);
    let g: Vec<&str> = groups.iter().map(String::as_str).collect();
    let client = cp.client_as(&user, &g).expect("registration agent client");
    let (pem, _key) = testenv::certificate_request(cn, orgs).expect("request");
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {
            "open-cluster-management.io/cluster-name": labels.0,
            "open-cluster-management.io/addon-name": labels.1}},
        "spec": {"request": k8s_openapi::ByteString(pem.into_bytes()),
                 "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["digital signature", "client auth"]}
    }))
    .expect("a csr");
    Api::<CertificateSigningRequest>::all(client)
        .create(&PostParams::default(), &csr)
        .await
        .expect("create csr");
}

/// A CSR to create: name, the cluster whose registration agent asks, CN, O's, labels
/// (cluster, add-on).
type CsrCase<'a> = (String, &'a str, String, Vec<&'a str>, (&'a str, &'a str));

fn approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Approved" && c.status == "True")
        })
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A RoleBinding's subjects as (kind, name).
fn subjects(b: &RoleBinding) -> Vec<(String, String)> {
    b.subjects
        .iter()
        .flatten()
        .map(|s| (s.kind.clone(), s.name.clone()))
        .collect()
}

async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    testenv::http::get(([127, 0, 0, 1], port).into(), path)
        .await
        .ok()
}

fn passes(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with("addon_manager_passes_total "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
