//! The add-on manager against a real apiserver with upstream CRDs: install through
//! placements, registration and RBAC, CSR approval, the rendered works, the whole loop with
//! the agent binary on a second apiserver acting as the managed cluster, and progressive
//! rollout by decision groups.

mod common;

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
use resource_usage_hub::manager::controller::{self, AlwaysLeader, Handle, Options};
use resource_usage_hub::manager::plan::{HealthMode, RENDERING_HASH, Settings};
use resource_usage_hub::manager::registration::{default_groups, default_user};
use resource_usage_hub::manager::render::{self, AgentTemplate};
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
        leader: Arc::new(AlwaysLeader),
    };
    tokio::spawn(controller::run(client, handle, options, async {
        let _ = rx.await;
    }));
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
    spec["workload"]["manifests"][5]["metadata"]["annotations"][RENDERING_HASH]
        .as_str()
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

#[tokio::test]
async fn installs_through_placements_and_follows_configs() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    // The golden files are rendered for the default add-on name; this is the only test using it.
    let addon = "resource-usage-collect";
    let pns = namespace(&client, "placements").await;
    let mut clusters = Vec::new();
    for _ in 0..3 {
        clusters.push(cluster(&client, "cluster").await);
    }
    let c: Vec<&str> = clusters.iter().map(String::as_str).collect();
    create_cma(
        &client,
        addon,
        json!({"type": "Placements", "placements": [{"namespace": pns, "name": "global"}]}),
    )
    .await;
    decision(&client, &pns, "global-decision-1", "global", None, &c).await;
    let _m = start(cp, settings(addon));

    // Every selected cluster: an MCA owned by the CMA, hub RBAC, and the rendered work.
    let cma_uid = Api::<ClusterManagementAddOn>::all(client.clone())
        .get(addon)
        .await
        .expect("cma")
        .uid()
        .expect("uid");
    for cl in &c {
        let m = eventually("the MCA is registered", DEADLINE, || async {
            mca(&client, cl, addon)
                .await
                .filter(|m| condition(m, "RegistrationApplied").map(|c| c.0) == Some("True"))
        })
        .await;
        assert_eq!(
            m.owner_references().first().map(|o| o.uid.as_str()),
            Some(cma_uid.as_str())
        );
        let status = m.status.clone().expect("status");
        assert_eq!(status.namespace, AGENT_NS);
        assert_eq!(status.health_check.mode, "Customized");
        assert_eq!(status.registrations.len(), 1);
        assert_eq!(
            status.registrations[0].signer_name,
            "kubernetes.io/kube-apiserver-client"
        );
        assert_eq!(
            status.registrations[0].subject.user,
            default_user(cl, addon, &format!("{addon}-agent"))
        );
        assert_eq!(
            status.registrations[0].subject.groups,
            default_groups(cl, addon).to_vec()
        );
        assert_eq!(
            condition(&m, "Available").map(|c| (c.0, c.1)),
            Some(("Unknown", "WorkNotApplied"))
        );

        let w = eventually("the work", DEADLINE, || work(&client, cl, addon)).await;
        let spec = serde_json::to_value(&w.spec).expect("spec");
        let want = golden("work-default.json", "cluster1", cl);
        let want_hash = golden_hash(&want);
        assert_eq!(
            unstamped(spec, &rendering_hash(&w)),
            unstamped(want, &want_hash),
            "work of {cl}"
        );
        assert_eq!(
            w.labels()
                .get("open-cluster-management.io/addon-name")
                .map(String::as_str),
            Some(addon)
        );
        assert_eq!(
            w.owner_references()
                .first()
                .map(|o| (o.kind.as_str(), o.uid.as_str())),
            Some(("ManagedClusterAddOn", m.uid().unwrap_or_default().as_str()))
        );
        let binding = Api::<RoleBinding>::namespaced(client.clone(), cl)
            .get(&format!("open-cluster-management:{addon}:agent"))
            .await
            .expect("binding");
        assert_eq!(
            binding.owner_references().first().map(|o| o.kind.as_str()),
            Some("ManagedClusterAddOn")
        );
        assert_eq!(
            (
                binding.role_ref.kind.as_str(),
                binding.role_ref.name.as_str()
            ),
            (
                "ClusterRole",
                format!("open-cluster-management:{addon}:agent-hub").as_str()
            )
        );
        assert_eq!(
            subjects(&binding),
            [
                (
                    "User".to_owned(),
                    default_user(cl, addon, &format!("{addon}-agent"))
                ),
                ("Group".to_owned(), default_groups(cl, addon)[0].clone())
            ]
        );
    }

    // A cluster that leaves the placement loses its MCA, work and permission.
    set_decisions(&client, &pns, "global-decision-1", &c[..2]).await;
    eventually(
        "the third cluster's add-on is removed",
        DEADLINE,
        || async {
            let gone = mca(&client, c[2], addon).await.is_none()
                && work(&client, c[2], addon).await.is_none()
                && Api::<RoleBinding>::namespaced(client.clone(), c[2])
                    .get_opt(&format!("open-cluster-management:{addon}:agent"))
                    .await
                    .expect("binding")
                    .is_none();
            gone.then_some(())
        },
    )
    .await;
    assert!(mca(&client, c[0], addon).await.is_some());

    // A config on one cluster rewrites that cluster's work only.
    let before = work(&client, c[0], addon).await.expect("work");
    let adc = render::golden_adc();
    create_adc(
        &client,
        c[1],
        "tuned",
        serde_json::to_value(&adc).expect("adc"),
    )
    .await;
    Api::<ManagedClusterAddOn>::namespaced(client.clone(), c[1])
        .patch(
            addon,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "tuned"}]}})),
        )
        .await
        .expect("configure");
    let tuned = eventually("the configured work", DEADLINE, || async {
        work(&client, c[1], addon).await.filter(|w| {
            let want = golden("work-adc.json", "cluster2", c[1]);
            let want_hash = golden_hash(&want);
            serde_json::to_value(&w.spec)
                .ok()
                .map(|s| unstamped(s, &rendering_hash(w)))
                == Some(unstamped(want, &want_hash))
        })
    })
    .await;
    assert!(
        tuned
            .annotations()
            .get("open-cluster-management.io/config-spec-hash")
            .is_some_and(|h| h.contains(&format!(
                "addondeploymentconfigs.addon.open-cluster-management.io/{}/tuned",
                c[1]
            ))),
        "config-spec-hash: {:?}",
        tuned.annotations()
    );
    let m1 = eventually("the MCA reports its config", DEADLINE, || async {
        mca(&client, c[1], addon).await.filter(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| s.namespace == "custom-agents" && s.config_references.len() == 1)
        })
    })
    .await;
    assert_eq!(condition(&m1, "Configured").map(|c| c.0), Some("True"));

    // Editing that config rewrites that work again; the other cluster's work is untouched.
    let hash = rendering_hash(&tuned);
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), c[1])
        .patch(
            "tuned",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"customizedVariables": [{"name": "CPU_RANGE", "value": "0:128"}]}}),
            ),
        )
        .await
        .expect("edit adc");
    let retuned = eventually("the work follows the edit", DEADLINE, || async {
        work(&client, c[1], addon)
            .await
            .filter(|w| rendering_hash(w) != hash)
    })
    .await;
    assert!(
        serde_json::to_string(&retuned.spec)
            .expect("spec")
            .contains("0:128")
    );
    let after = work(&client, c[0], addon).await.expect("work");
    assert_eq!(after.resource_version(), before.resource_version());

    // Converged: a pass over the unchanged hub writes nothing (what the server defaults or
    // prunes compares equal to what the manager wrote).
    let settled = eventually("the manager settles", DEADLINE, || async {
        let writes = _m.counter("addon_manager_writes_total");
        let passes = _m.counter("addon_manager_passes_total");
        create_adc(&client, &pns, &format!("unrelated-{passes}"), json!({})).await;
        eventually("a pass", DEADLINE, || async {
            (_m.counter("addon_manager_passes_total") > passes).then_some(())
        })
        .await;
        (_m.counter("addon_manager_writes_total") == writes).then_some(writes)
    })
    .await;
    assert!(settled > 0);
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

#[tokio::test]
async fn approves_only_the_agents_exact_csr_and_the_identity_writes_only_its_scores() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let addon = "csr-addon";
    apply_agent_role(&client, addon).await;
    let c1 = cluster(&client, "csr-cluster").await;
    let c2 = cluster(&client, "csr-cluster").await;
    create_cma(&client, addon, json!({"type": "Manual"})).await;
    create_mca(&client, &c1, addon).await;
    create_mca(&client, &c2, addon).await;
    for c in [&c1, &c2] {
        let group = registration_agent(c).1[0].clone();
        common::allow_csr_create(&client, &format!("csr-create-{c}"), "Group", &group).await;
    }
    let _m = start(cp, settings(addon));
    let agent = format!("{addon}-agent");
    let user = default_user(&c1, addon, &agent);
    let g = default_groups(&c1, addon);

    // The wrong ones first, so that the pass that approves the right one has seen them all.
    let bad: Vec<CsrCase<'_>> = vec![
        (
            format!("{c1}-extra-group"),
            c1.as_str(),
            user.clone(),
            vec![&g[0], &g[1], "cluster-admins"],
            (&c1, addon),
        ),
        (
            format!("{c1}-wrong-cn"),
            c1.as_str(),
            default_user(&c2, addon, &agent),
            vec![&g[0], &g[1]],
            (&c1, addon),
        ),
        (
            format!("{c1}-other-addon"),
            c1.as_str(),
            user.clone(),
            vec![&g[0], &g[1]],
            (&c1, "other-addon"),
        ),
        // Cluster 2's registration agent asking for cluster 1's add-on identity.
        (
            format!("{c1}-from-c2"),
            c2.as_str(),
            user.clone(),
            vec![&g[0], &g[1]],
            (&c1, addon),
        ),
    ];
    for (name, as_cluster, cn, orgs, labels) in &bad {
        request_csr(cp, as_cluster, name, *labels, cn, orgs).await;
    }
    let good = format!("{c1}-good");
    request_csr(cp, &c1, &good, (&c1, addon), &user, &[&g[0], &g[1]]).await;
    let csrs = Api::<CertificateSigningRequest>::all(client.clone());
    eventually("the agent's CSR is approved", DEADLINE, || async {
        csrs.get(&good).await.ok().filter(approved)
    })
    .await;
    for (name, ..) in &bad {
        let csr = csrs.get(name).await.expect("csr");
        assert!(!approved(&csr), "{name} must not be approved");
    }

    // The registration identity: its cluster's scores, nothing else.
    eventually("the hub permission", DEADLINE, || async {
        mca(&client, &c1, addon)
            .await
            .filter(|m| condition(m, "RegistrationApplied").map(|c| c.0) == Some("True"))
    })
    .await;
    let gs: Vec<&str> = g.iter().map(String::as_str).collect();
    let agent_client = cp.client_as(&user, &gs).expect("agent client");
    let score = |ns: &str| -> AddOnPlacementScore {
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1alpha1",
            "kind": "AddOnPlacementScore",
            "metadata": {"name": "resource-usage-score", "namespace": ns}
        }))
        .expect("a score")
    };
    let own = Api::<AddOnPlacementScore>::namespaced(agent_client.clone(), &c1);
    own.create(&PostParams::default(), &score(&c1))
        .await
        .expect("the agent creates its score");
    own.patch_status(
        "resource-usage-score",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": AddOnPlacementScoreStatus::default()})),
    )
    .await
    .expect("the agent patches its score's status");
    let forbidden = |r: Result<AddOnPlacementScore, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    let other = Api::<AddOnPlacementScore>::namespaced(agent_client.clone(), &c2);
    assert!(
        forbidden(other.create(&PostParams::default(), &score(&c2)).await),
        "another cluster's namespace"
    );
    assert!(
        matches!(own.list(&Default::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "listing is not granted"
    );
    assert!(
        matches!(own.delete("resource-usage-score", &Default::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "deleting is not granted"
    );
    let works = Api::<ManifestWork>::namespaced(agent_client, &c1);
    assert!(
        matches!(works.list(&Default::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "nothing but scores"
    );
}

/// What OCM gives the klusterlet's registration agent of `cluster` on its add-ons (upstream's
/// registration Role in the cluster namespace): read them, write their status.
async fn allow_mca_status(client: &Client, cluster: &str) {
    let name = format!("registration-{cluster}");
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": cluster},
        "rules": [
            {"apiGroups": ["addon.open-cluster-management.io"], "resources": ["managedclusteraddons"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["addon.open-cluster-management.io"], "resources": ["managedclusteraddons/status"], "verbs": ["patch", "update"]}
        ]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": cluster},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": registration_agent(cluster).1[0]}]
    });
    for o in [role, binding] {
        testenv::apply(client, &o, cluster)
            .await
            .expect("registration RBAC");
    }
}

#[tokio::test]
async fn a_subject_the_spoke_writes_reaches_a_rolebinding_only_if_it_is_its_agent() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "subject-addon";
    apply_agent_role(&admin, addon).await;
    let c1 = cluster(&admin, "subject-cluster").await;
    let c2 = cluster(&admin, "subject-cluster").await;
    create_cma(&admin, addon, json!({"type": "Manual"})).await;
    create_mca(&admin, &c1, addon).await;
    allow_mca_status(&admin, &c1).await;
    let _m = start(cp, settings(addon));
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), &c1);
    let name = format!("open-cluster-management:{addon}:agent");
    eventually("the default binding", DEADLINE, || async {
        bindings.get_opt(&name).await.ok().flatten()
    })
    .await;

    // The spoke's registration agent (its hub identity and OCM's permission on its add-ons'
    // status) declares the token driver with a hostile subject.
    let (user, groups) = registration_agent(&c1);
    let g: Vec<&str> = groups.iter().map(String::as_str).collect();
    let spoke = Api::<ManagedClusterAddOn>::namespaced(
        cp.client_as(&user, &g).expect("registration agent client"),
        &c1,
    );
    let own_sa = format!("system:serviceaccount:{c1}:{c1}-{addon}-agent");
    let injected = format!(
        "{own_sa}\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:authenticated"
    );
    let other_cluster = format!("system:serviceaccount:{c2}:{c2}-{addon}-agent");
    // (With a group, as the earlier manager bound a token subject only with one.)
    let group = format!("system:serviceaccounts:{c1}");
    let allowed = [
        (
            "User".to_owned(),
            default_user(&c1, addon, &format!("{addon}-agent")),
        ),
        ("Group".to_owned(), default_groups(&c1, addon)[0].clone()),
        ("ServiceAccount".to_owned(), format!("{c1}-{addon}-agent")),
    ];
    for (what, hostile, shown) in [
        (
            "a newline and YAML",
            injected.as_str(),
            "\\n- apiGroup".to_owned(),
        ),
        (
            "another cluster's agent",
            other_cluster.as_str(),
            c2.clone(),
        ),
    ] {
        let status = json!({"status": {
            "kubeClientDriver": "token",
            "registrations": [{"signerName": "kubernetes.io/kube-apiserver-client",
                               "subject": {"user": hostile, "groups": [group]}}]}});
        eventually(
            &format!("{what}: the spoke writes its status"),
            DEADLINE,
            || async {
                // (The manager writes the status too: retry on a conflict.)
                spoke
                    .patch_status(addon, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .ok()
            },
        )
        .await;
        let m = eventually(
            &format!("{what}: refused with a condition"),
            DEADLINE,
            || async {
                let m = mca(&admin, &c1, addon).await?;
                // Whatever the binding is meanwhile, it never names anyone else.
                if let Some(b) = bindings.get_opt(&name).await.expect("binding") {
                    let bad: Vec<_> = subjects(&b)
                        .into_iter()
                        .filter(|s| !allowed.contains(s))
                        .collect();
                    assert!(bad.is_empty(), "{what}: bound {bad:?}");
                }
                let refused = condition(&m, "RegistrationApplied").is_some_and(|c| {
                    (c.0, c.1) == ("False", "InvalidSubject") && c.2.contains(&shown)
                });
                (refused && bindings.get_opt(&name).await.ok()?.is_none()).then_some(m)
            },
        )
        .await;
        let message = condition(&m, "RegistrationApplied")
            .map(|c| c.2)
            .unwrap_or_default();
        assert!(
            message.contains("is not this cluster's agent service account")
                && !message.contains('\n'),
            "{what}: {message}"
        );
    }

    // The agent's own service account, as upstream's token driver reports it, is bound.
    let status = json!({"status": {"registrations": [{"signerName": "kubernetes.io/kube-apiserver-client",
        "subject": {"user": own_sa, "groups": null}}]}});
    eventually(
        "the spoke reports its own service account",
        DEADLINE,
        || async {
            spoke
                .patch_status(addon, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .ok()
        },
    )
    .await;
    let b = eventually("the agent's service account is bound", DEADLINE, || async {
        let m = mca(&admin, &c1, addon).await?;
        let applied = condition(&m, "RegistrationApplied").map(|c| c.0) == Some("True");
        let b = bindings.get_opt(&name).await.ok()??;
        applied.then_some(b)
    })
    .await;
    assert_eq!(subjects(&b), [allowed[2].clone()]);
    assert_eq!(
        b.subjects.as_ref().and_then(|s| s[0].namespace.as_deref()),
        Some(c1.as_str())
    );
}

#[tokio::test]
async fn rolls_out_group_by_group_and_stops_at_a_failing_mandatory_group() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let addon = "rollout-addon";
    let pns = namespace(&client, "rollout").await;
    let mut clusters = Vec::new();
    for _ in 0..3 {
        clusters.push(cluster(&client, "rollout-cluster").await);
    }
    let c: Vec<&str> = clusters.iter().map(String::as_str).collect();
    create_adc(
        &client,
        &pns,
        "agent-config",
        json!({"customizedVariables": [{"name": "REFRESH_PERIOD", "value": "60s"}]}),
    )
    .await;
    create_cma(
        &client,
        addon,
        json!({"type": "Placements", "placements": [{
            "namespace": pns, "name": "fleet",
            "configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "agent-config"}],
            "rolloutStrategy": {"type": "ProgressivePerGroup", "progressivePerGroup": {
                "mandatoryDecisionGroups": [{"groupName": "canary"}]}}
        }]}),
    )
    .await;
    decision(
        &client,
        &pns,
        "fleet-decision-1",
        "fleet",
        Some((0, "canary")),
        &c[..1],
    )
    .await;
    decision(
        &client,
        &pns,
        "fleet-decision-2",
        "fleet",
        Some((1, "")),
        &c[1..2],
    )
    .await;
    decision(
        &client,
        &pns,
        "fleet-decision-3",
        "fleet",
        Some((2, "")),
        &c[2..],
    )
    .await;
    let _m = start(cp, settings(addon));

    // Install: the canary group first; the others wait for it.
    eventually("the canary's work", DEADLINE, || work(&client, c[0], addon)).await;
    for cl in &c[1..] {
        let m = eventually("a later group waits", DEADLINE, || async {
            mca(&client, cl, addon)
                .await
                .filter(|m| condition(m, "Progressing").map(|c| c.1) == Some("WaitingForCanary"))
        })
        .await;
        assert!(
            work(&client, cl, addon).await.is_none(),
            "{cl} installed before the canary"
        );
        assert!(m.status.is_some());
    }
    // Each group goes once the previous one is Available.
    for i in 0..3 {
        report_work(&client, c[i], addon, true).await;
        eventually("the group completes", DEADLINE, || async {
            mca(&client, c[i], addon).await.filter(|m| {
                condition(m, "Progressing").map(|c| c.1) == Some("Completed")
                    && condition(m, "Available").map(|c| c.0) == Some("True")
            })
        })
        .await;
        if i + 1 < 3 {
            eventually("the next group's work", DEADLINE, || {
                work(&client, c[i + 1], addon)
            })
            .await;
        }
        for later in &c[(i + 2).min(3)..] {
            assert!(
                work(&client, later, addon).await.is_none(),
                "{later} went early"
            );
        }
    }
    let cma_api = Api::<ClusterManagementAddOn>::all(client.clone());
    let progression_message = |cma: &ClusterManagementAddOn| -> Option<(String, String)> {
        cma.status
            .as_ref()?
            .install_progressions
            .first()
            .and_then(|p| {
                p.conditions
                    .iter()
                    .find(|c| c.type_ == "Progressing")
                    .map(|c| (c.reason.clone(), c.message.clone()))
            })
    };
    eventually("the install completes", DEADLINE, || async {
        cma_api
            .get(addon)
            .await
            .ok()
            .and_then(|c| progression_message(&c))
            .filter(|(r, _)| r == "Completed")
    })
    .await;

    // A config change rolls out the same way; a failing canary stops it.
    let old: Vec<String> = {
        let mut v = Vec::new();
        for cl in &c {
            v.push(rendering_hash(
                &work(&client, cl, addon).await.expect("work"),
            ));
        }
        v
    };
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), &pns)
        .patch(
            "agent-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"customizedVariables": [{"name": "REFRESH_PERIOD", "value": "30s"}]}})),
        )
        .await
        .expect("edit config");
    eventually("the canary gets the new rendering", DEADLINE, || async {
        work(&client, c[0], addon)
            .await
            .filter(|w| rendering_hash(w) != old[0])
    })
    .await;
    report_work(&client, c[0], addon, false).await;
    let m = eventually("the canary fails", DEADLINE, || async {
        mca(&client, c[0], addon)
            .await
            .filter(|m| condition(m, "Progressing").map(|c| c.1) == Some("Failed"))
    })
    .await;
    assert_eq!(condition(&m, "ManifestApplied").map(|c| c.0), Some("False"));
    // The pass that saw the failure decided about the other groups too; they were not touched.
    eventually("the progression reports the failure", DEADLINE, || async {
        cma_api
            .get(addon)
            .await
            .ok()
            .and_then(|c| progression_message(&c))
            .filter(|(r, m)| r == "Progressing" && m.contains("1 failed"))
    })
    .await;
    for (i, cl) in c.iter().enumerate().skip(1) {
        let w = work(&client, cl, addon).await.expect("work");
        assert_eq!(
            rendering_hash(&w),
            old[i],
            "{cl} must keep the old rendering"
        );
        let m = mca(&client, cl, addon).await.expect("mca");
        assert_eq!(
            condition(&m, "Progressing").map(|c| c.1),
            Some("WaitingForCanary")
        );
    }
    // The canary recovers: the rollout moves on.
    report_work(&client, c[0], addon, true).await;
    eventually(
        "the second group gets the new rendering",
        DEADLINE,
        || async {
            work(&client, c[1], addon)
                .await
                .filter(|w| rendering_hash(w) != old[1])
        },
    )
    .await;
    assert_eq!(
        rendering_hash(&work(&client, c[2], addon).await.expect("work")),
        old[2]
    );
}

/// The managed cluster: a second apiserver of its own.
async fn managed() -> &'static ControlPlane {
    static MANAGED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
    MANAGED
        .get_or_init(|| async {
            ControlPlane::start(testenv::Options::default())
                .await
                .unwrap_or_else(|e| panic!("cannot start the managed cluster's apiserver: {e}"))
        })
        .await
}

/// The agent binary (built by `cargo build` if this test runs alone).
fn agent_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir")
        .to_path_buf();
    let bin = dir.join("resource-usage-agent");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "-p",
                "resource-usage-agent",
                "--bin",
                "resource-usage-agent",
            ])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building the agent");
    }
    bin
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_works_manifests_run_the_agent_that_scores_on_the_hub() {
    let hub_cp = testenv::shared().await;
    let spoke_cp = managed().await;
    let hub = hub_cp.client().expect("hub client");
    let spoke = spoke_cp.client().expect("managed client");
    let addon = "loop-addon";
    apply_agent_role(&hub, addon).await;
    let cluster = cluster(&hub, "loop-cluster").await;
    create_cma(&hub, addon, json!({"type": "Manual"})).await;
    create_mca(&hub, &cluster, addon).await;
    let _m = start(hub_cp, settings(addon));
    let w = eventually("the work", DEADLINE, || work(&hub, &cluster, addon)).await;

    // Apply the manifests as the work agent would (the klusterlet pre-creates the namespace).
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": AGENT_NS}})).expect("ns");
    match Api::<Namespace>::all(spoke.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("agent namespace: {e}"),
    }
    let mut deployment = None;
    for m in &w.spec.workload.manifests {
        let obj = &m.raw;
        testenv::apply(&spoke, obj, AGENT_NS)
            .await
            .unwrap_or_else(|e| panic!("the managed cluster refuses {}: {e}", obj["kind"]));
        if obj["kind"] == "Deployment" {
            deployment = Some(obj.clone());
        }
    }
    let deployment = deployment.expect("a Deployment in the work");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("service account")
        .to_owned();
    assert!(
        Api::<ServiceAccount>::namespaced(spoke.clone(), AGENT_NS)
            .get_opt(&sa)
            .await
            .expect("sa")
            .is_some()
    );

    // What the kubelet and the klusterlet give the pod: the service account's token for the
    // managed cluster, the registration certificate's kubeconfig for the hub.
    let dir = tempdir(&cluster);
    let token = Api::<ServiceAccount>::namespaced(spoke.clone(), AGENT_NS)
        .create_token_request(&sa, &PostParams::default(), &Default::default())
        .await
        .expect("token request")
        .status
        .expect("token")
        .token;
    let managed_kubeconfig = dir.join("managed-kubeconfig");
    std::fs::write(
        &managed_kubeconfig,
        token_kubeconfig(spoke_cp, &dir, &token),
    )
    .expect("write kubeconfig");
    let hub_dir = dir.join("hub-kubeconfig");
    std::fs::create_dir_all(&hub_dir).expect("dir");
    let agent_name = format!("{addon}-agent");
    let groups = default_groups(&cluster, addon);
    let g: Vec<&str> = groups.iter().map(String::as_str).collect();
    let cert = hub_cp
        .client_certificate(
            &default_user(&cluster, addon, &agent_name),
            &g,
            Duration::from_secs(3600),
        )
        .expect("cert");
    hub_cp
        .write_cert_kubeconfig(&hub_dir, &cert)
        .expect("hub kubeconfig");

    // A node for the agent to count.
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": format!("{cluster}-node")},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node");
    let nodes = Api::<Node>::all(spoke.clone());
    let created = nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    nodes
        .patch_status(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": node.status})),
        )
        .await
        .expect("node status");
    nodes
        .patch(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": []}})),
        )
        .await
        .expect("node taints");

    // The Deployment's arguments, with the mount path and the port mapped to this machine.
    let args: Vec<String> = args
        .into_iter()
        .map(|a| {
            a.replace("/managed/hub-kubeconfig", &hub_dir.display().to_string())
                .replace("0.0.0.0:8080", "127.0.0.1:0")
        })
        .collect();
    assert!(
        args.iter()
            .any(|a| a == &format!("--cluster-name={cluster}"))
    );
    let child = Command::new(agent_binary())
        .args(&args)
        .env("KUBECONFIG", &managed_kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("agent");
    let _agent = Process(child);
    let scores = Api::<AddOnPlacementScore>::namespaced(hub.clone(), &cluster);
    let score = eventually("the agent's score on the hub", DEADLINE, || async {
        scores
            .get_opt("resource-usage-score")
            .await
            .ok()
            .flatten()
            .filter(|s| s.status.as_ref().is_some_and(|st| !st.scores.is_empty()))
    })
    .await;
    let status = score.status.expect("status");
    assert!(
        status.scores.iter().any(|s| s.name == "cpuAvailable"),
        "{:?}",
        status.scores
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kubeconfig that authenticates with a service-account token, as in a pod.
fn token_kubeconfig(cp: &ControlPlane, dir: &Path, token: &str) -> String {
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, cp.ca_pem().expect("ca")).expect("write ca");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: managed\n  cluster:\n    server: {}\n    certificate-authority: {:?}\nusers:\n- name: agent\n  user:\n    token: {token}\ncontexts:\n- name: managed\n  context:\n    cluster: managed\n    user: agent\ncurrent-context: managed\n",
        cp.server(),
        ca.display().to_string()
    )
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

/// `status/reason: message` of the CMA's PlacementScheduled for its first placement.
async fn placement_scheduled(client: &Client, addon: &str) -> Option<String> {
    let cma = Api::<ClusterManagementAddOn>::all(client.clone())
        .get_opt(addon)
        .await
        .ok()??;
    let progression = cma.status?.install_progressions.into_iter().next()?;
    let c = progression
        .conditions
        .into_iter()
        .find(|c| c.type_ == "PlacementScheduled")?;
    Some(format!("{}/{}: {}", c.status, c.reason, c.message))
}

/// Issue 16 item 2: a placement whose scheduling failed or is unknown (misconfigured with its
/// decisions emptied, Unknown, its status gone, the placement gone) uninstalls nothing; the
/// ClusterManagementAddOn says why; when it is scheduled again with the same clusters nothing
/// is reinstalled. The manager binary runs as the chart's identity.
#[tokio::test]
async fn an_unscheduled_placement_uninstalls_nothing() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "unscheduled-addon";
    let system = namespace(&admin, "unscheduled-system").await;
    let (_dir, kubeconfig) = as_the_manager(cp, &admin, addon, &system).await;
    let pns = namespace(&admin, "unscheduled-placements").await;
    let clusters = [
        cluster(&admin, "unscheduled").await,
        cluster(&admin, "unscheduled").await,
    ];
    let c: Vec<&str> = clusters.iter().map(String::as_str).collect();
    create_cma(
        &admin,
        addon,
        json!({"type": "Placements", "placements": [{"namespace": pns, "name": "fleet"}]}),
    )
    .await;
    decision(&admin, &pns, "fleet-decision-1", "fleet", None, &c).await;
    let _manager = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "manager",
            "--addon-name",
            addon,
            "--agent-image",
            IMAGE,
            "--leader-elect=false",
            "--event-debounce=50ms",
        ])
        .arg(format!(
            "--metrics-bind-address=127.0.0.1:{}",
            testenv::free_port()
        ))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Process)
        .expect("manager binary");

    // Installed: an add-on and a work per cluster.
    let installed = || async {
        let mut out = Vec::new();
        for cl in &c {
            let m = mca(&admin, cl, addon).await?;
            let w = work(&admin, cl, addon).await?;
            out.push((m.uid()?, w.uid()?, w.metadata.generation));
        }
        Some(out)
    };
    let before = eventually("the add-on on both clusters", DEADLINE, installed).await;
    eventually("the placement reported scheduled", DEADLINE, || async {
        placement_scheduled(&admin, addon)
            .await
            .filter(|c| c.starts_with("True/PlacementScheduled"))
    })
    .await;

    let placements = Api::<Placement>::namespaced(admin.clone(), &pns);
    let misconfigured = json!({"numberOfSelectedClusters": 0, "conditions": [
        {"type": "PlacementMisconfigured", "status": "True", "reason": "Misconfigured",
         "message": "the CEL compiler could not start", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        satisfied("False", "Misconfigured")]});
    let unknown = json!({"numberOfSelectedClusters": 0,
                         "conditions": [satisfied("Unknown", "Scheduling")]});
    let cases = [
        (
            "misconfigured",
            Some(misconfigured),
            "False/PlacementFailed",
        ),
        ("Unknown", Some(unknown), "False/PlacementUnknown"),
        (
            "status removed",
            Some(Value::Null),
            "False/PlacementUnknown",
        ),
        ("placement deleted", None, "False/PlacementNotFound"),
    ];
    for (what, status, expected) in cases {
        // As a failing scheduler leaves it: the decisions emptied, the status saying why.
        set_decisions_only(&admin, &pns, "fleet-decision-1", &[]).await;
        match status {
            Some(s) => set_placement_status(&admin, &pns, "fleet", s).await,
            None => {
                placements
                    .delete("fleet", &Default::default())
                    .await
                    .expect("delete placement");
            }
        }
        let reported = eventually(
            &format!("{what}: the ClusterManagementAddOn says why"),
            DEADLINE,
            || async {
                placement_scheduled(&admin, addon)
                    .await
                    .filter(|c| c.starts_with(expected))
            },
        )
        .await;
        assert!(
            reported.contains(&format!("{pns}/fleet")),
            "{what}: {reported}"
        );
        // The pass that wrote the condition planned no uninstall: everything is still there,
        // the same objects, the works untouched.
        assert_eq!(installed().await.as_ref(), Some(&before), "{what}");

        // Scheduled again, the same clusters: nothing reinstalled.
        set_decisions(&admin, &pns, "fleet-decision-1", &c).await;
        eventually(&format!("{what}: scheduled again"), DEADLINE, || async {
            placement_scheduled(&admin, addon)
                .await
                .filter(|c| c.starts_with("True/PlacementScheduled"))
        })
        .await;
        assert_eq!(installed().await.as_ref(), Some(&before), "{what}");
    }

    // A genuine answer still uninstalls: the placement selects one cluster.
    set_decisions(&admin, &pns, "fleet-decision-1", &c[..1]).await;
    eventually("the other cluster's add-on goes", DEADLINE, || async {
        mca(&admin, c[1], addon).await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        mca(&admin, c[0], addon).await.and_then(|m| m.uid()),
        Some(before[0].0.clone())
    );
}

#[tokio::test]
async fn the_binary_runs_with_least_privilege_and_hands_over_leadership() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "binary-addon";
    let system = namespace(&admin, "manager-system").await;
    let (dir, kubeconfig) = as_the_manager(cp, &admin, addon, &system).await;

    // What an earlier version left: the agent's Role and a RoleBinding to it, owned by the MCA.
    let c0 = cluster(&admin, "binary-cluster").await;
    create_mca(&admin, &c0, addon).await;
    let permission = format!("open-cluster-management:{addon}:agent");
    let m0 = mca(&admin, &c0, addon).await.expect("mca");
    let owned = json!({"labels": {"open-cluster-management.io/addon-name": addon},
        "ownerReferences": [{"apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ManagedClusterAddOn", "name": addon, "uid": m0.uid(), "controller": true}]});
    let mut legacy_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": permission, "namespace": c0},
        "rules": [{"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["addonplacementscores"], "verbs": ["get", "create"]}]});
    let mut legacy_binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": permission, "namespace": c0},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": permission},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": default_user(&c0, addon, &format!("{addon}-agent"))}]});
    for o in [&mut legacy_role, &mut legacy_binding] {
        o["metadata"]["labels"] = owned["labels"].clone();
        o["metadata"]["ownerReferences"] = owned["ownerReferences"].clone();
        testenv::apply(&admin, o, &c0)
            .await
            .expect("a legacy object");
    }

    let spawn = |port: u16| {
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "manager",
                "--addon-name",
                addon,
                "--agent-image",
                IMAGE,
                "--leader-elect=true",
                "--leader-election-namespace",
                &system,
                "--leader-election-lease-duration=2s",
                "--leader-election-renew-deadline=1500ms",
                "--leader-election-retry-period=300ms",
                "--event-debounce=50ms",
            ])
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Process)
            .expect("manager binary")
    };
    let ports = [testenv::free_port(), testenv::free_port()];
    let mut procs = vec![Some(spawn(ports[0])), Some(spawn(ports[1]))];

    // The leader creates the ClusterManagementAddOn and installs where it is asked to.
    let cmas = Api::<ClusterManagementAddOn>::all(admin.clone());
    let cma = eventually(
        "the manager creates its ClusterManagementAddOn",
        DEADLINE,
        || async { cmas.get_opt(addon).await.ok().flatten() },
    )
    .await;
    assert_eq!(
        cma.annotations()
            .get("addon.open-cluster-management.io/lifecycle")
            .map(String::as_str),
        Some("self")
    );
    let c1 = cluster(&admin, "binary-cluster").await;
    create_mca(&admin, &c1, addon).await;
    eventually(
        "the work, written with the manager's own permission",
        DEADLINE,
        || work(&admin, &c1, addon),
    )
    .await;
    eventually(
        "the agent's hub permission, granted with the manager's own",
        DEADLINE,
        || async {
            mca(&admin, &c1, addon)
                .await
                .filter(|m| condition(m, "RegistrationApplied").map(|c| c.0) == Some("True"))
        },
    )
    .await;
    // The earlier version's Role is gone and the binding names the ClusterRole now.
    eventually("the legacy permission is migrated", DEADLINE, || async {
        let role = Api::<Role>::namespaced(admin.clone(), &c0)
            .get_opt(&permission)
            .await
            .ok()?;
        let b = Api::<RoleBinding>::namespaced(admin.clone(), &c0)
            .get_opt(&permission)
            .await
            .ok()??;
        (role.is_none() && b.role_ref.kind == "ClusterRole").then_some(())
    })
    .await;
    common::allow_csr_create(
        &admin,
        &format!("csr-create-{c1}"),
        "Group",
        &registration_agent(&c1).1[0],
    )
    .await;
    let agent_user = default_user(&c1, addon, &format!("{addon}-agent"));
    let ag = default_groups(&c1, addon);
    request_csr(
        cp,
        &c1,
        &format!("{c1}-agent"),
        (&c1, addon),
        &agent_user,
        &[&ag[0], &ag[1]],
    )
    .await;
    eventually(
        "the CSR, approved with the manager's own permission",
        DEADLINE,
        || async {
            Api::<CertificateSigningRequest>::all(admin.clone())
                .get(&format!("{c1}-agent"))
                .await
                .ok()
                .filter(approved)
        },
    )
    .await;
    for port in ports {
        eventually("healthz, readyz", DEADLINE, || async {
            let h = get(port, "/healthz").await?;
            let r = get(port, "/readyz").await?;
            (h.0 == 200 && r.0 == 200).then_some(())
        })
        .await;
    }
    // Exactly one of them works; the other stands by.
    let counts = eventually("one leader", DEADLINE, || async {
        let a = passes(&get(ports[0], "/metrics").await?.1);
        let b = passes(&get(ports[1], "/metrics").await?.1);
        ((a > 0) != (b > 0)).then_some((a, b))
    })
    .await;
    let leader = usize::from(counts.1 > 0);
    let standby = 1 - leader;
    procs[leader] = None;
    let c2 = cluster(&admin, "binary-cluster").await;
    create_mca(&admin, &c2, addon).await;
    eventually("the standby takes over", DEADLINE, || {
        work(&admin, &c2, addon)
    })
    .await;
    // (A pass counts once its writes are done.)
    eventually("the new leader counts its pass", DEADLINE, || async {
        (passes(&get(ports[standby], "/metrics").await?.1) > 0).then_some(())
    })
    .await;
    drop(procs);

    // What the manager's identity may not do.
    let as_manager = cp
        .client_as_service_account(&system, MANAGER_ACCOUNT)
        .expect("manager client");
    let forbidden =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(
        forbidden(
            Api::<k8s_openapi::api::core::v1::Secret>::all(as_manager.clone())
                .list(&Default::default())
                .await
                .map(drop)
        ),
        "secrets"
    );
    assert!(
        forbidden(
            Api::<ClusterManagementAddOn>::all(as_manager.clone())
                .delete(addon, &Default::default())
                .await
                .map(drop)
        ),
        "deleting the ClusterManagementAddOn"
    );
    // Writes to existing objects only under the add-on's own names.
    let other_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "not-the-agents", "namespace": c1}, "rules": []});
    assert!(
        forbidden(
            Api::<Role>::namespaced(as_manager.clone(), &c1)
                .patch(
                    "not-the-agents",
                    &PatchParams::apply("resource-usage-hub").force(),
                    &Patch::Apply(&other_role)
                )
                .await
                .map(drop)
        ),
        "another Role"
    );
    assert!(
        forbidden(
            Api::<ManifestWork>::namespaced(as_manager.clone(), &c1)
                .delete("someone-elses-work", &Default::default())
                .await
                .map(drop)
        ),
        "another work"
    );
    refuses_what_the_manager_must_not_grant(&as_manager, addon, &c1, &system).await;
    assert!(
        forbidden(
            Api::<AddOnPlacementScore>::namespaced(as_manager.clone(), &c1)
                .list(&Default::default())
                .await
                .map(drop)
        ),
        "listing scores"
    );
    assert!(
        forbidden(
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(as_manager, &c1)
                .list(&Default::default())
                .await
                .map(drop)
        ),
        "leases outside its namespace"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// As the manager's identity: no role but the agent's can be bound, to no one but a cluster's
/// own agent; no Role, no ManifestWork of another name, can be made.
async fn refuses_what_the_manager_must_not_grant(
    as_manager: &Client,
    addon: &str,
    cluster: &str,
    own_ns: &str,
) {
    let create = |kind: &'static str, ns: Option<String>, obj: Value| {
        let client = as_manager.clone();
        async move {
            let (group, version) = match kind {
                "ManifestWork" => ("work.open-cluster-management.io", "v1"),
                _ => ("rbac.authorization.k8s.io", "v1"),
            };
            let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
            let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await?;
            let api: Api<kube::api::DynamicObject> = match &ns {
                Some(ns) => Api::namespaced_with(client, ns, &ar),
                None => Api::all_with(client, &ar),
            };
            let o: kube::api::DynamicObject =
                serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &o)
                .await
                .map(|o| serde_json::to_value(o).unwrap_or_default())
        }
    };
    let agent_role = format!("open-cluster-management:{addon}:agent-hub");
    let agent_binding = format!("open-cluster-management:{addon}:agent");
    let binding = |ns: &str, name: &str, role: (&str, &str), subject: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
            "subjects": [subject]})
    };
    let user =
        |n: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": n});
    let everyone = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"});
    let agent = default_user(cluster, addon, &format!("{addon}-agent"));
    let cases: Vec<(&str, &'static str, Option<String>, Value)> = vec![
        (
            "a ClusterRoleBinding to cluster-admin",
            "ClusterRoleBinding",
            None,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("{addon}-escalate")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [user("mallory")]}),
        ),
        (
            "cluster-admin in a cluster namespace, under the agent's binding name",
            "RoleBinding",
            Some(cluster.to_owned()),
            binding(
                cluster,
                &agent_binding,
                ("ClusterRole", "cluster-admin"),
                user(&agent),
            ),
        ),
        (
            "cluster-admin in its own namespace",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                "escalate",
                ("ClusterRole", "cluster-admin"),
                user("mallory"),
            ),
        ),
        (
            "admin in a cluster namespace",
            "RoleBinding",
            Some(cluster.to_owned()),
            binding(
                cluster,
                "escalate-admin",
                ("ClusterRole", "admin"),
                user(&agent),
            ),
        ),
        (
            "admin in its own namespace",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                "escalate-admin",
                ("ClusterRole", "admin"),
                user("mallory"),
            ),
        ),
        (
            "the agent's role to everyone",
            "RoleBinding",
            Some(cluster.to_owned()),
            binding(
                cluster,
                "scores-for-all",
                ("ClusterRole", &agent_role),
                everyone.clone(),
            ),
        ),
        (
            "the agent's role to everyone, under the agent's binding name elsewhere",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                &agent_binding,
                ("ClusterRole", &agent_role),
                everyone.clone(),
            ),
        ),
        (
            "the agent's role to another cluster's agent",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                &agent_binding,
                ("ClusterRole", &agent_role),
                user(&agent),
            ),
        ),
        (
            "a Role with the agent's permissions",
            "Role",
            Some(cluster.to_owned()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "scores", "namespace": cluster},
                "rules": [{"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["addonplacementscores"], "verbs": ["get", "create"]}]}),
        ),
        (
            "a ManifestWork of another name",
            "ManifestWork",
            Some(cluster.to_owned()),
            json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": "not-the-addons", "namespace": cluster},
                "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pwned"}}]}}}),
        ),
    ];
    let mut allowed = Vec::new();
    for (what, kind, ns, obj) in cases {
        let r = create(kind, ns, obj).await;
        if !matches!(&r, Err(kube::Error::Api(s)) if s.code == 403) {
            allowed.push(format!("{what}: {r:?}"));
        }
    }
    assert!(
        allowed.is_empty(),
        "the manager's identity could: {allowed:#?}"
    );
}

/// The deposed-leader attack on the manager, with real processes as the chart's manager
/// identity: the leader is frozen (SIGSTOP) in the middle of installing on four clusters, with
/// writes waiting in its client's rate limiter; the standby takes the Lease, finishes, and then
/// removes everything when the add-on is deleted from those clusters; the old leader runs again
/// (SIGCONT). For 30 s nothing of the add-on comes back on those clusters, and the old leader
/// exits.
#[tokio::test]
async fn a_deposed_manager_writes_nothing_and_exits() {
    use k8s_openapi::api::coordination::v1::Lease;

    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "deposed-addon";
    let system = namespace(&admin, "manager-deposed").await;
    let (dir, kubeconfig) = as_the_manager(cp, &admin, addon, &system).await;
    let spawn = |name: &str, extra: &[&str]| {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args(["manager", "--addon-name", addon, "--agent-image", IMAGE])
            .args(["--leader-election-namespace", &system])
            .args([
                "--leader-election-lease-duration=4s",
                "--leader-election-renew-deadline=3s",
                "--leader-election-retry-period=500ms",
                "--event-debounce=50ms",
            ])
            .arg(format!(
                "--metrics-bind-address=127.0.0.1:{}",
                testenv::free_port()
            ))
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(Process)
            .expect("manager binary")
    };
    let signal = |p: &Process, signal: &str| {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &p.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal}");
    };
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &system);
    let holder = || async {
        let lease = leases.get_opt(&format!("{addon}-manager")).await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    };

    // The old leader: a slow client (2 requests/s), so that a pass keeps writes waiting.
    let mut old = spawn("old-leader", &["--client-qps=2", "--client-burst=1"]);
    let old_id = eventually("the first manager to lead", DEADLINE, holder).await;
    let _new = spawn("new-leader", &[]);
    let mut clusters = Vec::new();
    for _ in 0..4 {
        let c = cluster(&admin, "deposed-cluster").await;
        create_mca(&admin, &c, addon).await;
        clusters.push(c);
    }
    // What the add-on has on a cluster: its RoleBinding and ManifestWork (2 when installed); a
    // Role would be a write the manager may no longer make, so it is counted too.
    let installed = |c: String| {
        let admin = admin.clone();
        async move {
            let role = Api::<Role>::namespaced(admin.clone(), &c)
                .list(&Default::default())
                .await
                .expect("roles");
            let binding = Api::<RoleBinding>::namespaced(admin.clone(), &c)
                .list(&Default::default())
                .await
                .expect("bindings");
            let works = Api::<ManifestWork>::namespaced(admin.clone(), &c)
                .list(&Default::default())
                .await
                .expect("works");
            role.items.len() + binding.items.len() + works.items.len()
        }
    };
    eventually("the old leader's first writes", DEADLINE, || async {
        for c in &clusters {
            if installed(c.clone()).await > 0 {
                return Some(());
            }
        }
        None
    })
    .await;
    signal(&old, "STOP");
    let mut done = 0;
    for c in &clusters {
        done += usize::from(installed(c.clone()).await == 2);
    }
    assert!(
        done < clusters.len(),
        "the old leader finished before it was stopped"
    );

    // The standby takes over, finishes, then removes the add-on from every cluster.
    eventually("the standby to take the Lease", DEADLINE, || async {
        holder().await.filter(|h| *h != old_id)
    })
    .await;
    for c in &clusters {
        eventually("the new leader's install", DEADLINE, || async {
            (installed(c.clone()).await == 2).then_some(())
        })
        .await;
    }
    for c in &clusters {
        Api::<ManagedClusterAddOn>::namespaced(admin.clone(), c)
            .delete(addon, &Default::default())
            .await
            .expect("delete mca");
    }
    for c in &clusters {
        eventually("the new leader's removal", DEADLINE, || async {
            (installed(c.clone()).await == 0 && mca(&admin, c, addon).await.is_none()).then_some(())
        })
        .await;
    }

    // The old leader runs again, its lease long gone and writes pending.
    signal(&old, "CONT");
    let resumed = std::time::Instant::now();
    let mut exited = None;
    while resumed.elapsed() < Duration::from_secs(30) {
        if exited.is_none() {
            exited = old.0.try_wait().expect("try_wait");
        }
        for c in &clusters {
            assert_eq!(
                installed(c.clone()).await,
                0,
                "the old leader wrote on {c} after it resumed"
            );
            assert!(mca(&admin, c, addon).await.is_none());
        }
        assert_ne!(holder().await.as_deref(), Some(old_id.as_str()));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = std::fs::read_to_string(dir.join("old-leader.log")).expect("log");
    let status = exited.unwrap_or_else(|| panic!("the old leader is still running:\n{log}"));
    assert!(!status.success(), "the old leader exited with {status:?}");
    assert!(log.contains("lost the leader lease"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
