//! The Helm chart (`charts/ocm-placement`) with the real `helm` (built from its Go module by
//! tests/helm/build.sh): lint, render, the values schema, the CRDs against crdgen, the README's
//! values table, the monitoring objects and the metrics they name (scraped from the running
//! binaries; the rules checked by promtool), and install, upgrade and uninstall into real
//! apiservers. The upgrade from an earlier commit's chart is in `chart_upgrade.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use ocm_api::addon::v1alpha1::ClusterManagementAddOn;
use ocm_api::{ManagedClusterSetBinding, Placement};
use serde_json::{Value, json};
use testenv::{ControlPlane, eventually, helm};

const DEADLINE: Duration = Duration::from_secs(60);

fn chart() -> String {
    e2e::chart::chart_dir().display().to_string()
}

fn render(extra: &[&str]) -> Vec<Value> {
    e2e::chart::render(&e2e::chart::chart_dir(), "hub", extra).expect("helm template")
}

fn kinds(docs: &[Value]) -> Vec<(String, String)> {
    let mut k: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    k.sort();
    k
}

fn args_of(docs: &[Value], deployment: &str) -> Vec<String> {
    let d = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == deployment)
        .unwrap_or_else(|| panic!("Deployment {deployment}"));
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn lints_renders_and_checks_its_values() {
    let chart = chart();
    helm::helm(&["lint", "--strict", &chart], None).expect("helm lint --strict");

    // Defaults: the manager with its RBAC, the add-on with its Placement; no scheduler (OCM's
    // runs on every hub), no CRDs, no scorer, no monitoring.
    let defaults = render(&[]);
    let k = kinds(&defaults);
    assert!(
        !k.iter().any(|(_, n)| n.contains("placement-scheduler")),
        "{k:?}"
    );
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
        "Service",
    ] {
        assert!(!k.iter().any(|(x, _)| x == kind), "{kind} in {k:?}");
    }
    // With the scheduler on: its Deployment and RBAC too.
    let docs = render(&["--set", "scheduler.enabled=true"]);
    let k = kinds(&docs);
    for want in [
        ("ClusterManagementAddOn", "resource-usage-collect"),
        ("Placement", "resource-usage-collect-global"),
        ("ManagedClusterSetBinding", "global"),
        ("Deployment", "placement-scheduler"),
        ("Deployment", "resource-usage-hub-manager"),
        ("ClusterRole", "open-cluster-management:placement-scheduler"),
        (
            "ClusterRole",
            "open-cluster-management:resource-usage-collect:manager",
        ),
        (
            "Role",
            "open-cluster-management:placement-scheduler:leader-election",
        ),
        // The agent's hub permission, bound per cluster by the manager, and the admission
        // policy that limits what the manager may create.
        (
            "ClusterRole",
            "open-cluster-management:resource-usage-collect:agent-hub",
        ),
        (
            "ValidatingAdmissionPolicy",
            "ocm-placement-resource-usage-collect-manager",
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "ocm-placement-resource-usage-collect-manager",
        ),
    ] {
        assert!(
            k.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {k:?}"
        );
    }
    assert!(!k.iter().any(|(kind, _)| kind == "CustomResourceDefinition"));
    assert!(!k.iter().any(|(_, n)| n.contains("scorer")));
    let scheduler = args_of(&docs, "placement-scheduler");
    assert!(
        scheduler.iter().any(|x| x == "--max-score-validity=10m"),
        "{scheduler:?}"
    );
    // It takes over from OCM's placement controller only when told to.
    assert!(
        !scheduler.iter().any(|x| x == "--take-over"),
        "{scheduler:?}"
    );
    let take_over = render(&["--set", "scheduler.enabled=true,scheduler.takeOver=true"]);
    let scheduler = args_of(&take_over, "placement-scheduler");
    assert!(
        scheduler.iter().any(|x| x == "--take-over"),
        "{scheduler:?}"
    );
    let manager = args_of(&docs, "resource-usage-hub-manager");
    for a in [
        "manager",
        "--manage-cma=false",
        "--agent-image=quay.io/ocm-placement/resource-usage-agent:0.1.0",
        "--leader-elect=true",
    ] {
        assert!(manager.iter().any(|x| x == a), "{a} in {manager:?}");
    }
    let cma = docs
        .iter()
        .find(|d| d["kind"] == "ClusterManagementAddOn")
        .expect("cma");
    assert_eq!(
        cma["metadata"]["annotations"]["addon.open-cluster-management.io/lifecycle"],
        "self"
    );
    assert_eq!(
        cma["spec"]["installStrategy"]["placements"][0]["namespace"],
        "hub"
    );
    let placement = docs
        .iter()
        .find(|d| d["kind"] == "Placement")
        .expect("placement");
    let tolerated: Vec<&str> = placement["spec"]["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert_eq!(
        tolerated,
        [
            "cluster.open-cluster-management.io/unreachable",
            "cluster.open-cluster-management.io/unavailable"
        ]
    );
    // The RBAC is the files', with the release's names.
    let binding = docs
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding"
                && d["metadata"]["name"] == "open-cluster-management:placement-scheduler"
        })
        .expect("binding");
    assert_eq!(binding["subjects"][0]["namespace"], "hub");
    assert_eq!(binding["subjects"][0]["name"], "placement-scheduler");

    // Everything on: the scorer with its credentials, the debug Service, the CRDs.
    let docs = render(&[
        "--set",
        "scorer.enabled=true,scorer.prometheusURL=https://thanos:9091,scorer.tokenSecret=prom-token,scorer.caConfigMap=prom-ca",
        "--set",
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.tlsSecret=debug-tls,installCRDs=true",
    ]);
    let scheduler = args_of(&docs, "placement-scheduler");
    for a in [
        "--debug-bind-address=0.0.0.0:9443",
        "--tls-cert-file=/etc/debug-tls/tls.crt",
        "--tls-key-file=/etc/debug-tls/tls.key",
    ] {
        assert!(scheduler.iter().any(|x| x == a), "{a} in {scheduler:?}");
    }
    let scorer = args_of(&docs, "resource-usage-hub-scorer");
    for a in [
        "scorer",
        "--prometheus-url=https://thanos:9091",
        "--prometheus-token-file=/etc/prometheus-auth/token",
        "--prometheus-ca-file=/etc/prometheus-ca/ca.crt",
        "--thanos-dedup=true",
        "--thanos-partial-response=true",
    ] {
        assert!(scorer.iter().any(|x| x == a), "{a} in {scorer:?}");
    }
    assert!(kinds(&docs).contains(&("Service".into(), "placement-scheduler-debug".into())));

    // The debug endpoint without a Secret: HTTPS with a self-signed certificate. Insecure:
    // plain HTTP on the pod's loopback, with no port or Service to reach it from outside.
    let self_signed = render(&[
        "--set",
        "scheduler.enabled=true,scheduler.debug.enabled=true",
    ]);
    let scheduler = args_of(&self_signed, "placement-scheduler");
    assert!(
        scheduler
            .iter()
            .any(|x| x == "--debug-bind-address=0.0.0.0:9443")
    );
    assert!(
        !scheduler
            .iter()
            .any(|x| x.starts_with("--tls-") || x.starts_with("--debug-insecure")),
        "{scheduler:?}"
    );
    let loopback = render(&[
        "--set",
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.insecure=true",
    ]);
    let scheduler = args_of(&loopback, "placement-scheduler");
    for a in [
        "--debug-bind-address=127.0.0.1:9443",
        "--debug-insecure-loopback",
    ] {
        assert!(scheduler.iter().any(|x| x == a), "{a} in {scheduler:?}");
    }
    assert!(!kinds(&loopback).contains(&("Service".into(), "placement-scheduler-debug".into())));
    let pod = &loopback
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "placement-scheduler")
        .expect("Deployment placement-scheduler")["spec"]["template"]["spec"];
    assert!(
        !pod["containers"][0]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == "debug"),
        "{pod}"
    );

    // The CRDs are crdgen's (plus helm's keep policy).
    let mut crds: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .cloned()
        .collect();
    for c in &mut crds {
        let annotations = c["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations");
        assert_eq!(
            annotations.remove("helm.sh/resource-policy"),
            Some(Value::String("keep".into()))
        );
        if annotations.is_empty() {
            c["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("annotations");
        }
    }
    crds.sort_by_key(|c| {
        c["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let mut want: Vec<Value> = ocm_api::crds::all()
        .iter()
        .map(|c| serde_json::to_value(c).expect("crd"))
        .collect();
    want.sort_by_key(|c| {
        c["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    assert_eq!(
        crds, want,
        "charts/ocm-placement/files/crds.yaml is out of date: run tests/e2e/regen-crds.sh"
    );

    // The schema refuses what would not run.
    for bad in [
        "logFormat=xml",
        "scorer.enabled=true",
        "addon.name=Not_A_Name",
        "leaderElection.leaseDuration=fifteen",
        "scheduler.replicas=-1",
        "unknownKey=1",
        "client.burst=4000000",
        // The templates' own checks.
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.insecure=true,scheduler.debug.tlsSecret=t",
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.port=8080",
        "leaderElection.enabled=false",
        "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true",
        "scheduler.takeOver=yes",
        "monitoring.serviceMonitor.interval=often",
    ] {
        let out =
            helm::helm_output(&["template", "r", &chart, "--set", bad], None).expect("helm ran");
        assert!(!out.status.success(), "{bad} should be refused");
    }
}

async fn kubeconfig(cp: &ControlPlane, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chart-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("kubeconfig");
    cp.write_kubeconfig(&path).expect("kubeconfig");
    path
}

async fn run(args: Vec<String>, kubeconfig: PathBuf) -> std::process::Output {
    e2e::chart::helm_on(args, kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn installs_upgrades_and_uninstalls_on_a_hub() {
    // A hub running OCM's cluster-manager: the CRDs are there already.
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let ns = testenv::namespace(&client, "ocm-placement")
        .await
        .expect("ns");
    let kc = kubeconfig(cp, "hub").await;
    let chart = chart();
    run(
        strings(&[
            "install",
            "r",
            &chart,
            "--namespace",
            &ns,
            "--set",
            "scheduler.enabled=true",
        ]),
        kc.clone(),
    )
    .await;

    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    for name in ["placement-scheduler", "resource-usage-hub-manager"] {
        let d = deployments.get(name).await.expect("deployment");
        assert_eq!(d.spec.and_then(|s| s.replicas), Some(2));
        Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .expect("service account");
    }
    let cma = Api::<ClusterManagementAddOn>::all(client.clone())
        .get("resource-usage-collect")
        .await
        .expect("the add-on");
    assert_eq!(cma.spec.install_strategy.type_, "Placements");
    Api::<Placement>::namespaced(client.clone(), &ns)
        .get("resource-usage-collect-global")
        .await
        .expect("placement");
    Api::<ManagedClusterSetBinding>::namespaced(client.clone(), &ns)
        .get("global")
        .await
        .expect("binding");
    let roles = Api::<ClusterRole>::all(client.clone());
    roles
        .get("open-cluster-management:placement-scheduler")
        .await
        .expect("scheduler role");
    roles
        .get("open-cluster-management:resource-usage-collect:agent-hub")
        .await
        .expect("the agent's hub role");
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let policy_bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    let policy = "ocm-placement-resource-usage-collect-manager";
    policies.get(policy).await.expect("the manager's policy");
    policy_bindings
        .get(policy)
        .await
        .expect("the manager's policy binding");

    // Upgrade: fewer scheduler replicas, the scorer on.
    run(
        strings(&[
            "upgrade",
            "r",
            &chart,
            "--namespace",
            &ns,
            "--set",
            "scheduler.enabled=true,scheduler.replicas=1,scorer.enabled=true,scorer.prometheusURL=http://prometheus:9090",
        ]),
        kc.clone(),
    )
    .await;
    let scheduler = deployments
        .get("placement-scheduler")
        .await
        .expect("scheduler");
    assert_eq!(scheduler.spec.and_then(|s| s.replicas), Some(1));
    deployments
        .get("resource-usage-hub-scorer")
        .await
        .expect("scorer after the upgrade");
    roles
        .get("open-cluster-management:resource-usage-hub:scorer")
        .await
        .expect("scorer role");

    // The binaries run with exactly the chart's arguments, as the chart's service accounts
    // (the RBAC it installed), against this hub: they come up, and the scheduler writes the
    // chart's Placement.
    run_as_the_chart(cp, &ns).await;

    // Uninstall: everything goes.
    run(strings(&["uninstall", "r", "--namespace", &ns]), kc.clone()).await;
    eventually("everything removed", DEADLINE, || async {
        let gone = deployments
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            && Api::<ClusterManagementAddOn>::all(client.clone())
                .get_opt("resource-usage-collect")
                .await
                .ok()?
                .is_none()
            && roles
                .get_opt("open-cluster-management:placement-scheduler")
                .await
                .ok()?
                .is_none()
            && roles
                .get_opt("open-cluster-management:resource-usage-collect:agent-hub")
                .await
                .ok()?
                .is_none()
            && policies.get_opt(policy).await.ok()?.is_none()
            && policy_bindings.get_opt(policy).await.ok()?.is_none()
            && Api::<Placement>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
            && Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .iter()
                .all(|a| a.metadata.name.as_deref() == Some("default"))
            && Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
            && Api::<ManagedClusterSetBinding>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty();
        gone.then_some(())
    })
    .await;
}

#[tokio::test]
async fn installs_the_crds_when_asked_and_keeps_them() {
    // A bare hub: no OCM CRDs. Without the manager (its add-on objects need the CRDs first).
    let cp = ControlPlane::start(testenv::Options::default())
        .await
        .expect("a bare control plane");
    let client = cp.client().expect("client");
    let ns = testenv::namespace(&client, "ocm-placement")
        .await
        .expect("ns");
    let kc = kubeconfig(&cp, "bare").await;
    run(
        strings(&[
            "install",
            "r",
            &chart(),
            "--namespace",
            &ns,
            "--set",
            "installCRDs=true,manager.enabled=false,scheduler.enabled=true",
        ]),
        kc.clone(),
    )
    .await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let names: Vec<String> = ocm_api::crds::all()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    for n in &names {
        crds.get(n).await.expect("CRD installed");
    }
    run(strings(&["uninstall", "r", "--namespace", &ns]), kc).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    eventually("the scheduler removed", DEADLINE, || async {
        deployments
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    for n in &names {
        crds.get(n).await.expect("CRDs are kept");
    }
}

/// Runs the chart's three components with exactly the rendered arguments, as the chart's
/// service accounts, and a resource-usage agent: they come up, the scheduler schedules the
/// chart's Placement, and every metric the chart's alerts and dashboard name is one of theirs.
/// prometheus-client shows a labelled family only once it has a series, so the scene makes
/// each series real: a cluster for the add-on whose namespace refuses ManifestWorks (a quota
/// of 0: the manager's write fails), a scorer whose Prometheus does not resolve (its queries
/// fail), and a scheduler and a manager run as an identity without RBAC (their watches fail).
async fn run_as_the_chart(cp: &ControlPlane, ns: &str) {
    let client = cp.client().expect("client");
    let cluster = format!("{ns}-c1");
    for (obj, namespace) in [
        (
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
                "metadata": {"name": "global"},
                "spec": {"clusterSelector": {"selectorType": "LabelSelector", "labelSelector": {}}}}),
            "",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster}}),
            "",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-works"},
                "spec": {"hard": {"count/manifestworks.work.open-cluster-management.io": "0"}}}),
            cluster.as_str(),
        ),
        (
            json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": cluster}, "spec": {"hubAcceptsClient": true}}),
            "",
        ),
    ] {
        testenv::apply(&client, &obj, namespace)
            .await
            .unwrap_or_else(|e| panic!("{obj}: {e}"));
    }
    // No kube-controller-manager here: the quota's status as its quota controller would set it
    // (without one, admission lets creates through).
    let works = "count/manifestworks.work.open-cluster-management.io";
    Api::<ResourceQuota>::namespaced(client.clone(), &cluster)
        .patch_status(
            "no-works",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {works: "0"}, "used": {works: "0"}}})),
        )
        .await
        .expect("the quota's status");

    let docs = e2e::chart::render(
        &e2e::chart::chart_dir(),
        ns,
        &[
            "--set",
            "scheduler.enabled=true,scheduler.replicas=1,scorer.enabled=true,scorer.prometheusURL=http://prometheus.invalid:9090",
        ],
    )
    .expect("helm template");
    let bins = e2e::fleet::binaries(false).expect("binaries");
    let running = e2e::chart::run_as_the_chart(cp, &docs, ns, &bins)
        .await
        .expect("the chart's components");
    assert_eq!(running.ports.len(), 3, "{:?}", running.ports);
    eventually(
        "the chart's Placement scheduled by the chart's scheduler",
        DEADLINE,
        || async {
            let p = Api::<Placement>::namespaced(client.clone(), ns)
                .get("resource-usage-collect-global")
                .await
                .ok()?;
            p.status
                .filter(|s| s.conditions.iter().any(|c| c.type_ == "PlacementSatisfied"))
                .map(|_| ())
        },
    )
    .await;

    // The agent (on a managed cluster in production; here this apiserver plays the cluster
    // too), and the scheduler and the manager without RBAC.
    let mut others = Vec::new();
    let mut ports: Vec<(String, u16)> = running.ports.clone();
    let admin = std::env::temp_dir().join(format!("chart-agent-{}", std::process::id()));
    cp.write_kubeconfig(&admin).expect("kubeconfig");
    let nobody = std::env::temp_dir().join(format!("chart-nobody-{}", std::process::id()));
    std::fs::write(&nobody, cp.kubeconfig_as_service_account(ns, "nobody")).expect("kubeconfig");
    let (admin, nobody) = (admin.display().to_string(), nobody.display().to_string());
    for (name, binary, args) in [
        (
            "agent",
            "resource-usage-agent",
            vec![
                "run".to_owned(),
                format!("--hub-kubeconfig={admin}"),
                format!("--kubeconfig={admin}"),
                format!("--cluster-name={cluster}"),
                format!("--addon-namespace={ns}"),
            ],
        ),
        (
            "scheduler without RBAC",
            "placement-scheduler",
            vec![
                "controller".to_owned(),
                "--leader-elect=false".to_owned(),
                "--debug-bind-address=".to_owned(),
                format!("--kubeconfig={nobody}"),
            ],
        ),
        (
            "manager without RBAC",
            "resource-usage-hub",
            vec![
                "manager".to_owned(),
                "--leader-elect=false".to_owned(),
                "--agent-image=agent:test".to_owned(),
                format!("--kubeconfig={nobody}"),
            ],
        ),
    ] {
        let port = e2e::chart::free_port().expect("port");
        let child = std::process::Command::new(bins.join(binary))
            .args(&args)
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .env("POD_NAMESPACE", ns)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        others.push(child);
        ports.push((name.to_owned(), port));
    }

    let named = named_metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let missing = loop {
        let mut exported = BTreeSet::new();
        for (_, port) in &ports {
            if let Ok((200, page)) =
                testenv::http::get(([127, 0, 0, 1], *port).into(), "/metrics").await
            {
                exported.extend(e2e::chart::exported_names(&page));
            }
        }
        let missing: Vec<&String> = named.keys().filter(|n| !exported.contains(*n)).collect();
        if missing.is_empty() || std::time::Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for mut c in others {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(running);
    assert!(
        missing.is_empty(),
        "named by files/prometheus-rules.yaml or files/grafana-dashboard.json but exported by no binary (scraped: {ports:?}): {missing:?} (where: {named:?})"
    );
}

/// Every metric name in the alert expressions and the dashboard's queries, with where it is.
fn named_metrics() -> BTreeMap<String, String> {
    let files = e2e::chart::chart_dir().join("files");
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(files.join("prometheus-rules.yaml")).expect("rules file"),
    )
    .expect("rules YAML");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(files.join("grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let mut exprs = Vec::new();
    for g in rules["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            let what = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("?");
            exprs.push((
                format!("alert {what}"),
                r["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            exprs.push((
                format!("panel {}", p["title"].as_str().unwrap_or("?")),
                t["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    let mut named = BTreeMap::new();
    for (what, expr) in &exprs {
        for name in e2e::chart::promql_metric_names(expr) {
            named.entry(name).or_insert_with(|| what.clone());
        }
    }
    // The parser found what is there (a guard against a parser that finds nothing).
    assert!(named.len() >= 15, "{named:?}");
    named
}

#[test]
fn the_readme_values_table_is_current() {
    let chart = e2e::chart::chart_dir();
    let inputs = e2e::chart_readme::Inputs::read(&chart).expect("the chart's files");
    let want = inputs.generate().unwrap_or_else(|e| {
        panic!(
            "charts/ocm-placement: {e}\n(fix values.schema.json or values.yaml, then run `{}`)",
            e2e::chart_readme::COMMAND
        )
    });
    assert!(
        want == inputs.readme,
        "charts/ocm-placement/README.md is out of date: run `{}`",
        e2e::chart_readme::COMMAND
    );
}

/// `promtool check rules` on the chart's rules file, and `promtool test rules` with the alerts'
/// unit tests (fixtures/prometheus-rules.test.yaml): each fires on trouble, not on health.
#[test]
fn the_rules_pass_promtool() {
    let rules = e2e::chart::chart_dir().join("files/prometheus-rules.yaml");
    let tests = e2e::chart::fixture("prometheus-rules.test.yaml");
    let promtool = e2e::chart::promtool().unwrap_or_else(|e| panic!("{e}"));
    for (verb, file) in [("check", &rules), ("test", &tests)] {
        let out = std::process::Command::new(&promtool)
            .args([verb, "rules"])
            .arg(file)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {verb} rules {}:\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// With monitoring on, each enabled component gets a monitor that selects its pods (through a
/// Service, or directly) on the port that serves /metrics; the rules and the dashboard are the
/// files' own.
#[test]
fn monitoring_selects_each_component_on_its_metrics_port() {
    let all = "scheduler.enabled=true,scorer.enabled=true,scorer.prometheusURL=http://p:9090";
    let components = [
        "placement-scheduler",
        "resource-usage-hub-manager",
        "resource-usage-hub-scorer",
    ];
    let matches = |selector: &Value, labels: &Value| {
        selector
            .as_object()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
    };
    let deployment = |docs: &[Value], name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("Deployment {name}"))
    };
    // The container port a name or number refers to, and that it is the metrics address's.
    let serves_metrics = |d: &Value, port: &Value| {
        let container = &d["spec"]["template"]["spec"]["containers"][0];
        let number = container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| &p["name"] == port || &p["containerPort"] == port)
            .and_then(|p| p["containerPort"].as_u64());
        let bind = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .find_map(|a| a.strip_prefix("--metrics-bind-address="))
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse::<u64>().ok());
        number.is_some() && number == bind
    };

    // ServiceMonitors: Service -> pods -> port.
    let docs = render(&[
        "--set",
        all,
        "--set",
        "monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.labels.release=kp,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
    ]);
    for name in components {
        let d = deployment(&docs, name);
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        let monitor = docs
            .iter()
            .find(|m| m["kind"] == "ServiceMonitor" && m["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("ServiceMonitor {name}"));
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(monitor["metadata"]["labels"]["release"], "kp");
        assert_eq!(monitor["spec"]["namespaceSelector"]["matchNames"][0], "hub");
        let services: Vec<&Value> = docs
            .iter()
            .filter(|s| {
                s["kind"] == "Service"
                    && s["metadata"]["namespace"] == "hub"
                    && matches(
                        &monitor["spec"]["selector"]["matchLabels"],
                        &s["metadata"]["labels"],
                    )
            })
            .collect();
        assert_eq!(
            services.len(),
            1,
            "{name}: one Service selected: {services:?}"
        );
        let service = services[0];
        assert!(
            matches(&service["spec"]["selector"], pod_labels),
            "{name}: {service}"
        );
        let endpoint = &monitor["spec"]["endpoints"][0];
        assert_eq!(endpoint["path"], "/metrics");
        let port = service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == endpoint["port"])
            .unwrap_or_else(|| panic!("{name}: the Service has the monitor's port"));
        assert!(serves_metrics(&d, &port["targetPort"]), "{name}: {port}");
        // Only the component's own pods.
        for other in components.iter().filter(|o| **o != name) {
            let o = deployment(&docs, other);
            assert!(!matches(
                &service["spec"]["selector"],
                &o["spec"]["template"]["metadata"]["labels"]
            ));
        }
    }
    // The rules and the dashboard, unchanged from the files.
    let files = e2e::chart::chart_dir().join("files");
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    let want: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(files.join("prometheus-rules.yaml")).expect("rules"),
    )
    .expect("rules YAML");
    assert_eq!(rule["spec"], want);
    let dashboard = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "ocm-placement-dashboard")
        .expect("dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        dashboard["data"]["ocm-placement.json"]
            .as_str()
            .expect("json"),
    )
    .expect("dashboard JSON");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(files.join("grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    assert_eq!(shipped, file);

    // PodMonitors: pods -> port, and no Services.
    let docs = render(&["--set", all, "--set", "monitoring.podMonitor.enabled=true"]);
    assert!(
        !kinds(&docs)
            .iter()
            .any(|(k, n)| k == "Service" && n.ends_with("-metrics"))
    );
    for name in components {
        let d = deployment(&docs, name);
        let monitor = docs
            .iter()
            .find(|m| m["kind"] == "PodMonitor" && m["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("PodMonitor {name}"));
        assert!(matches(
            &monitor["spec"]["selector"]["matchLabels"],
            &d["spec"]["template"]["metadata"]["labels"]
        ));
        let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
        assert!(serves_metrics(&d, &endpoint["port"]), "{name}: {endpoint}");
    }
    // Disabled components get no monitor.
    let docs = render(&["--set", "monitoring.podMonitor.enabled=true"]);
    let monitors: Vec<String> = kinds(&docs)
        .into_iter()
        .filter(|(k, _)| k == "PodMonitor")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(monitors, ["resource-usage-hub-manager"]);
}

/// The notes an install prints (`helm install --dry-run=client` renders them without a hub).
fn notes(set: &str) -> String {
    let chart = chart();
    let out = helm::helm(
        &[
            "install",
            "r",
            &chart,
            "--namespace",
            "hub",
            "--dry-run=client",
            "--set",
            set,
        ],
        None,
    )
    .expect("helm install --dry-run=client");
    let text = helm::stdout(&out);
    text.split_once("NOTES:")
        .map(|(_, n)| n.to_owned())
        .unwrap_or_else(|| panic!("no NOTES in {text}"))
}

#[test]
fn the_notes_say_what_was_installed_and_warn_about_a_second_scheduler() {
    let chart = chart();
    helm::helm(
        &[
            "lint",
            "--strict",
            &chart,
            "--set",
            "scheduler.enabled=true,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
        ],
        None,
    )
    .expect("helm lint --strict, everything on");

    let defaults = notes("logLevel=info");
    for want in [
        "ClusterManagementAddOn resource-usage-collect",
        "hub/resource-usage-collect-global",
        "kubectl get clustermanagementaddon resource-usage-collect",
        "kubectl get addonplacementscores -A --field-selector metadata.name=resource-usage-score",
        "kubectl get placementdecisions -A",
        "placement-scheduler explain NAMESPACE/NAME",
        "kubectl placement explain NAMESPACE/NAME",
    ] {
        assert!(
            defaults.contains(want),
            "{want:?} in the notes:\n{defaults}"
        );
    }
    assert!(!defaults.contains("WARNING"), "{defaults}");

    let ours = notes("scheduler.enabled=true");
    assert!(
        ours.contains("WARNING: this release runs its own placement scheduler"),
        "{ours}"
    );
    assert!(ours.contains("spec.placementImagePullSpec"), "{ours}");
    assert!(ours.contains("refuses to start"), "{ours}");
    let take_over = notes("scheduler.enabled=true,scheduler.takeOver=true");
    assert!(
        take_over.contains("scheduler.takeOver is set"),
        "{take_over}"
    );
}
