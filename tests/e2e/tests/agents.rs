//! The whole loop through upstream OCM's own agents: a hub with OCM's registration
//! controller, the CSR signer and the add-on conversion webhook, and two managed clusters, each
//! with its own apiserver and a real klusterlet agent (registration + work). Our scheduler and
//! add-on manager run under the chart's RBAC.
//!
//! Asserted on the real objects, step by step: the clusters register (CSR approved for the
//! bootstrap user, signed, `ManagedClusterConditionAvailable`); our manager ships the
//! resource-usage agent through a ManifestWork that the real work agent applies on the
//! cluster's apiserver; its `RolledOut` condition rule evaluates (no expression error on a
//! fresh Deployment) and turns true once the Deployment rolls out, with feedback; the real
//! registration agent asks for the add-on's certificate, our manager approves it, the signer
//! signs it for the add-on's identity, and `<addon>-hub-kubeconfig` appears on the cluster;
//! the resource-usage agent, run with that secret as the kubelet would run the Deployment,
//! writes its score; the scheduler decides and follows load; disabling the add-on on a
//! cluster removes its ManifestWork, the objects on the cluster and the agent's hub permission.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use e2e::fleet::binaries;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use ocm_api::{AddOnPlacementScore, ManagedClusterAddOn, PlacementDecision};
use serde_json::{Value, json};
use testenv::ocm_agents::{BOOTSTRAP_USER, OcmCluster, OcmHub};
use testenv::{ControlPlane, eventually};

/// Liveness bound for each step (generous: a loaded 2-core machine; measured steps take 1-15 s).
const DEADLINE: Duration = Duration::from_secs(180);
const ADDON: &str = ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;
const INSTALL_NS: &str = e2e::agents::INSTALL_NAMESPACE;
const HUB_NS: &str = "open-cluster-management-hub";
const PLACEMENTS: &str = "fleet";
/// Cluster name and CPU cores (two nodes of half each).
const CLUSTERS: [(&str, u32); 2] = [("alpha", 8), ("beta", 16)];

/// Our processes; killed when dropped. A lock inside, so that polls can check them.
struct Processes(std::sync::Mutex<Vec<(String, Child)>>);

impl Drop for Processes {
    fn drop(&mut self) {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, c) in all.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Processes {
    fn spawn(&self, logs: &Path, name: &str, bin: &Path, args: &[String]) {
        let log = std::fs::File::create(logs.join(format!("{name}.log"))).expect("log file");
        let child = Command::new(bin)
            .args(args)
            .env_remove("KUBECONFIG")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name.to_owned(), child));
    }

    /// Panics when one has exited.
    fn check(&self) {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (name, c) in all.iter_mut() {
            if let Ok(Some(s)) = c.try_wait() {
                panic!("{name} exited: {s}");
            }
        }
    }
}

#[tokio::test]
async fn the_whole_loop_through_upstream_agents() {
    let bin_dir = binaries(true).expect("our binaries");
    let logs = std::env::temp_dir().join(format!("agents-test-logs-{}", std::process::id()));
    std::fs::create_dir_all(&logs).expect("log dir");
    eprintln!("logs of our processes: {}", logs.display());

    let hub = ControlPlane::start(testenv::Options::default().with_upstream_crds())
        .await
        .expect("the hub");
    let client = hub.client().expect("hub client");
    let ocm = OcmHub::start(&hub).await.expect("OCM's hub components");
    eprintln!("OCM hub logs: {}", ocm.log_dir().display());

    for obj in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLACEMENTS}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HUB_NS}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": "fleet"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "fleet", "namespace": PLACEMENTS}, "spec": {"clusterSet": "fleet"}}),
    ] {
        testenv::apply(&client, &obj, PLACEMENTS)
            .await
            .expect("setup");
    }

    // Step times go to stderr for the README's figures; nothing asserts them.
    let start = std::time::Instant::now();
    let step = |what: &str| eprintln!("{:>6.1} s  {what}", start.elapsed().as_secs_f64());
    // 1. Registration through the real klusterlet.
    let mut clusters = Vec::new();
    for (name, cores) in CLUSTERS {
        let c = OcmCluster::start(
            &hub,
            &ocm,
            name,
            json!({"cluster.open-cluster-management.io/clusterset": "fleet", "addon": "on"}),
        )
        .await
        .expect("a managed cluster");
        eprintln!("{name}: logs in {}", c.log_dir().display());
        e2e::agents::add_nodes(&c.cp.client().expect("spoke client"), name, cores)
            .await
            .expect("nodes");
        clusters.push(c);
    }
    for c in &clusters {
        eventually(&format!("{} available", c.name), DEADLINE, || async {
            ocm.check().expect("OCM hub processes run");
            c.check().expect("the cluster's processes run");
            let mc = dynamic(
                &client,
                "cluster.open-cluster-management.io",
                "v1",
                "ManagedCluster",
                None,
            )
            .get_opt(&c.name)
            .await
            .ok()??;
            (condition(&mc.data, "ManagedClusterConditionAvailable")?["status"] == "True")
                .then_some(())
        })
        .await;
        // The cluster's certificate: asked for by the bootstrap user, approved, signed.
        let csrs = Api::<CertificateSigningRequest>::all(client.clone())
            .list(&ListParams::default().labels(&format!(
                "open-cluster-management.io/cluster-name={}",
                c.name
            )))
            .await
            .expect("list CSRs");
        let csr = csrs
            .items
            .iter()
            .find(|r| r.spec.username.as_deref() == Some(BOOTSTRAP_USER))
            .expect("the cluster's CSR from the bootstrap user");
        assert!(
            csr.status
                .as_ref()
                .and_then(|s| s.certificate.as_ref())
                .is_some(),
            "the cluster's CSR is signed"
        );
    }

    step("both clusters registered (CSR approved and signed, accepted, available)");
    // 2. Our components, as the chart's identities.
    let manager_rbac = include_str!("../../../charts/ocm-placement/files/manager-rbac.yaml")
        .replace("{{ADDON}}", ADDON)
        .replace("{{NAMESPACE}}", HUB_NS)
        .replace("{{SUBJECT}}", "manager");
    let agent_role = include_str!("../../../charts/ocm-placement/files/agent-hub-rbac.yaml")
        .replace("{{ADDON}}", ADDON);
    let scheduler_rbac = include_str!("../../../charts/ocm-placement/files/scheduler-rbac.yaml")
        .replace("{{NAMESPACE}}", HUB_NS)
        .replace("{{SUBJECT}}", "scheduler");
    for yaml in [&manager_rbac, &agent_role, &scheduler_rbac] {
        testenv::apply_yaml(&client, yaml, HUB_NS)
            .await
            .expect("the chart's RBAC");
    }
    let procs = Processes(std::sync::Mutex::new(Vec::new()));
    let kubeconfig_of = |sa: &str| {
        let path = logs.join(format!("{sa}.kubeconfig"));
        std::fs::write(&path, hub.kubeconfig_as_service_account(HUB_NS, sa)).expect("kubeconfig");
        format!("--kubeconfig={}", path.display())
    };
    procs.spawn(
        &logs,
        "scheduler",
        &bin_dir.join("placement-scheduler"),
        &[
            "controller".into(),
            "--leader-elect=false".into(),
            "--debug-bind-address=".into(),
            "--metrics-bind-address=127.0.0.1:0".into(),
            kubeconfig_of("scheduler"),
        ],
    );
    procs.spawn(
        &logs,
        "manager",
        &bin_dir.join("resource-usage-hub"),
        &[
            "manager".into(),
            "--leader-elect=false".into(),
            "--agent-image=quay.io/ocm-placement/resource-usage-agent:local".into(),
            "--metrics-bind-address=127.0.0.1:0".into(),
            kubeconfig_of("manager"),
        ],
    );
    for (name, spec) in [
        (
            "install",
            json!({"clusterSets": ["fleet"], "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"addon": "on"}}}}]}),
        ),
        (
            "cpu",
            json!({"numberOfClusters": 1, "clusterSets": ["fleet"],
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 1}]}}),
        ),
    ] {
        testenv::apply(
            &client,
            &json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
                "metadata": {"name": name, "namespace": PLACEMENTS}, "spec": spec}),
            PLACEMENTS,
        )
        .await
        .expect("placement");
    }
    testenv::apply(
        &client,
        &json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ClusterManagementAddOn",
            "metadata": {"name": ADDON, "annotations": {"addon.open-cluster-management.io/lifecycle": "self"}},
            "spec": {"addOnMeta": {"displayName": ADDON},
                     "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"}],
                     "installStrategy": {"type": "Placements", "placements": [{"namespace": PLACEMENTS, "name": "install"}]}}}),
        PLACEMENTS,
    )
    .await
    .expect("the ClusterManagementAddOn");

    // 3. Per cluster: the work applied by the real work agent, its condition rule, the add-on's
    // certificate, and our agent running with it.
    let work_name = format!("addon-{ADDON}-deploy-0");
    let biggest = CLUSTERS.iter().map(|(_, c)| *c).max().unwrap_or(1);
    for c in &clusters {
        let spoke = c.cp.client().expect("spoke client");
        let works = dynamic(
            &client,
            "work.open-cluster-management.io",
            "v1",
            "ManifestWork",
            Some(&c.name),
        );
        // Applied on the cluster's own apiserver by the real work agent.
        let deployment = eventually(
            &format!("the agent's Deployment on {}", c.name),
            DEADLINE,
            || async {
                procs_ok(&ocm, c);
                Api::<Deployment>::namespaced(spoke.clone(), INSTALL_NS)
                    .get_opt(&format!("{ADDON}-agent"))
                    .await
                    .ok()?
            },
        )
        .await;
        // Before any rollout the rule evaluates to False (not rolled out yet); an unknown status
        // field must never be an expression error.
        let rolled_out = eventually(
            &format!("RolledOut evaluated on {}", c.name),
            DEADLINE,
            || async {
                let w = works.get_opt(&work_name).await.ok()??;
                deployment_condition(&w.data, "RolledOut")
            },
        )
        .await;
        assert_eq!(
            (rolled_out["status"].as_str(), rolled_out["reason"].as_str()),
            (Some("False"), Some("ConditionRuleEvaluated")),
            "a fresh Deployment is not rolled out yet, and the rule is no error: {rolled_out}"
        );
        // Play the kubelet and the deployment controller: every replica runs this rendering.
        e2e::agents::roll_out(&spoke, &deployment)
            .await
            .expect("the Deployment's status");
        let work = eventually(
            &format!("RolledOut=True and feedback on {}", c.name),
            DEADLINE,
            || async {
                let w = works.get_opt(&work_name).await.ok()??;
                let rolled = deployment_condition(&w.data, "RolledOut")?;
                let feedback = deployment_manifest(&w.data)?["statusFeedback"]["values"]
                    .as_array()?
                    .clone();
                (rolled["status"] == "True"
                    && feedback.iter().any(|v| v["name"] == "AvailableReplicas"))
                .then_some(w)
            },
        )
        .await;
        assert_eq!(
            condition(&work.data, "Applied").map(|c| c["status"].clone()),
            Some(json!("True")),
            "the work is applied"
        );

        // The add-on's certificate: the real registration agent asks, our manager approves,
        // the signer signs, for the add-on agent's identity.
        let agent_user = format!(
            "system:open-cluster-management:cluster:{}:addon:{ADDON}:agent:{ADDON}-agent",
            c.name
        );
        step(&format!("{}: work applied, rolled out, feedback", c.name));
        let csr = eventually(&format!("the add-on's CSR of {} signed", c.name), DEADLINE, || async {
            procs.check();
            let list = Api::<CertificateSigningRequest>::all(client.clone())
                .list(&ListParams::default().labels(&format!(
                    "open-cluster-management.io/cluster-name={},open-cluster-management.io/addon-name={ADDON}",
                    c.name
                )))
                .await
                .ok()?;
            list.items.into_iter().find(|r| {
                r.status.as_ref().is_some_and(|s| s.certificate.is_some())
            })
        })
        .await;
        let cluster_user = format!("system:open-cluster-management:{}:{}", c.name, c.agent_id);
        assert_eq!(
            csr.spec.username.as_deref(),
            Some(cluster_user.as_str()),
            "asked by the cluster's agent"
        );
        assert_eq!(csr.spec.signer_name, "kubernetes.io/kube-apiserver-client");
        let approved = csr
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Approved").cloned())
            .expect("approved");
        assert_eq!(approved.status, "True");
        // The identity in the signed certificate: what the apiserver will see.
        let dir = logs.join(format!("hub-kubeconfig-{}", c.name));
        let kubeconfig = eventually(
            &format!("{ADDON}-hub-kubeconfig on {}", c.name),
            DEADLINE,
            || async {
                e2e::agents::hub_kubeconfig(&spoke, ADDON, INSTALL_NS, &dir)
                    .await
                    .ok()?
            },
        )
        .await;
        let whoami = hub_client_from(&kubeconfig).await;
        let review = Api::<SelfSubjectReview>::all(whoami)
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .expect("the add-on's certificate logs in");
        assert_eq!(
            review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username),
            Some(agent_user)
        );

        step(&format!(
            "{}: add-on certificate issued, its kubeconfig secret on the cluster",
            c.name
        ));
        // ManagedClusterAddOn: registered, and available from the work's feedback.
        eventually(
            &format!("the ManagedClusterAddOn of {} available", c.name),
            DEADLINE,
            || async {
                let mca = Api::<ManagedClusterAddOn>::namespaced(client.clone(), &c.name)
                    .get_opt(ADDON)
                    .await
                    .ok()??;
                let v = serde_json::to_value(&mca).ok()?;
                let ok = |t: &str| condition(&v, t).is_some_and(|c| c["status"] == "True");
                // ClusterCertificateRotated: set by the real registration agent once the
                // add-on's certificate is in its secret.
                (ok("RegistrationApplied")
                    && ok("ManifestApplied")
                    && ok("Available")
                    && ok("ClusterCertificateRotated"))
                .then_some(())
            },
        )
        .await;

        // What the kubelet would run from the Deployment: our agent with the secret's
        // kubeconfig, as its service account on the cluster (the RBAC the work applied).
        let spoke_kubeconfig = logs.join(format!("spoke-{}.kubeconfig", c.name));
        std::fs::write(
            &spoke_kubeconfig,
            c.cp.kubeconfig_as_service_account(INSTALL_NS, &format!("{ADDON}-agent")),
        )
        .expect("kubeconfig");
        Api::<ServiceAccount>::namespaced(spoke.clone(), INSTALL_NS)
            .get(&format!("{ADDON}-agent"))
            .await
            .expect("the agent's service account, applied by the work agent");
        procs.spawn(
            &logs,
            &format!("agent-{}", c.name),
            &bin_dir.join("resource-usage-agent"),
            &[
                "run".into(),
                format!("--hub-kubeconfig={}", kubeconfig.display()),
                format!("--kubeconfig={}", spoke_kubeconfig.display()),
                format!("--cluster-name={}", c.name),
                format!("--addon-namespace={INSTALL_NS}"),
                format!("--cpu-range=0:{biggest}"),
                "--refresh-period=2s".into(),
                "--debounce=200ms".into(),
                "--metrics-bind-address=127.0.0.1:0".into(),
            ],
        );
    }

    // 4. Scores arrive, the scheduler decides, and follows load.
    for c in &clusters {
        eventually(&format!("{}'s score", c.name), DEADLINE, || async {
            procs.check();
            cpu_score(&client, &c.name).await
        })
        .await;
    }
    step("both scores written");
    wait_decisions(&client, "cpu", &["beta"]).await;
    let beta = &clusters[1];
    load(&beta.cp.client().expect("spoke"), "beta", 16, 900).await;
    wait_decisions(&client, "cpu", &["alpha"]).await;
    step("load moved the decision");

    // 5. Disabling the add-on on beta (it leaves the install Placement): its ManifestWork, the
    // objects on the cluster and the agent's hub permission go.
    dynamic(
        &client,
        "cluster.open-cluster-management.io",
        "v1",
        "ManagedCluster",
        None,
    )
    .patch(
        "beta",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"addon": "off"}}})),
    )
    .await
    .expect("label beta");
    let works = dynamic(
        &client,
        "work.open-cluster-management.io",
        "v1",
        "ManifestWork",
        Some("beta"),
    );
    let spoke = beta.cp.client().expect("spoke");
    eventually("beta's add-on removed", DEADLINE, || async {
        let mca = Api::<ManagedClusterAddOn>::namespaced(client.clone(), "beta")
            .get_opt(ADDON)
            .await
            .ok()?;
        let work = works.get_opt(&work_name).await.ok()?;
        let deployment = Api::<Deployment>::namespaced(spoke.clone(), INSTALL_NS)
            .get_opt(&format!("{ADDON}-agent"))
            .await
            .ok()?;
        let bindings = Api::<RoleBinding>::namespaced(client.clone(), "beta")
            .list(&ListParams::default())
            .await
            .ok()?;
        let agent_bound = bindings.items.iter().any(|b| b.name_any().contains(ADDON));
        (mca.is_none() && work.is_none() && deployment.is_none() && !agent_bound).then_some(())
    })
    .await;
    // The agent's certificate no longer writes its score.
    let denied = hub_client_from(&logs.join("hub-kubeconfig-beta").join("kubeconfig")).await;
    let err = Api::<AddOnPlacementScore>::namespaced(denied, "beta")
        .patch_status(
            "resource-usage-score",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"scores": []}})),
        )
        .await
        .expect_err("the agent's hub permission is gone");
    assert!(
        matches!(err, kube::Error::Api(ref e) if e.code == 403),
        "{err}"
    );
    // alpha keeps its add-on.
    assert!(
        Api::<ManagedClusterAddOn>::namespaced(client.clone(), "alpha")
            .get_opt(ADDON)
            .await
            .expect("get")
            .is_some()
    );
    step("add-on disabled on beta: work, objects and permission gone");
    procs.check();
}

fn procs_ok(ocm: &OcmHub, c: &OcmCluster) {
    ocm.check().expect("OCM hub processes run");
    c.check().expect("the cluster's processes run");
}

fn dynamic(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The condition `type_` of an object's `status.conditions`.
fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// The work's status entry of the Deployment.
fn deployment_manifest(work: &Value) -> Option<&Value> {
    work["status"]["resourceStatus"]["manifests"]
        .as_array()?
        .iter()
        .find(|m| m["resourceMeta"]["kind"] == "Deployment")
}

fn deployment_condition(work: &Value, type_: &str) -> Option<Value> {
    deployment_manifest(work)?["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn hub_client_from(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("the secret's kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("a config from the secret's kubeconfig");
    Client::try_from(config).expect("client")
}

/// `pods` pods requesting `millicores` each on the cluster's nodes.
async fn load(spoke: &Client, cluster: &str, pods: usize, millicores: u32) {
    testenv::apply(
        spoke,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "load"}}),
        "load",
    )
    .await
    .expect("namespace");
    let api = Api::<Pod>::namespaced(spoke.clone(), "load");
    for i in 0..pods {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("load-{i}")},
            "spec": {"nodeName": format!("{cluster}-n{}", i % 2),
                     "containers": [{"name": "work", "image": "example.invalid/load",
                                     "resources": {"requests": {"cpu": format!("{millicores}m")}}}]}
        }))
        .expect("pod");
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
}

async fn cpu_score(client: &Client, cluster: &str) -> Option<i32> {
    let s = Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
        .get_opt("resource-usage-score")
        .await
        .ok()??;
    s.status?
        .scores
        .iter()
        .find(|i| i.name == "cpuAvailable")
        .map(|i| i.value)
}

async fn wait_decisions(client: &Client, placement: &str, want: &[&str]) {
    eventually(
        &format!("{placement} decides {want:?}"),
        DEADLINE,
        || async {
            let api = Api::<PlacementDecision>::namespaced(client.clone(), PLACEMENTS);
            let lp = ListParams::default().labels(&format!(
                "cluster.open-cluster-management.io/placement={placement}"
            ));
            let mut out: Vec<String> = api
                .list(&lp)
                .await
                .ok()?
                .items
                .iter()
                .flat_map(|d| d.status.iter().flat_map(|s| s.decisions.iter()))
                .map(|d| d.cluster_name.clone())
                .collect();
            out.sort();
            (out == want).then_some(())
        },
    )
    .await;
}
