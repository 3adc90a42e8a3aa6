//! The Helm chart (`charts/ocm-placement`) with the real `helm` (built from its Go module by
//! tests/helm/build.sh): lint, render, the values schema, the CRDs against crdgen, and install,
//! upgrade and uninstall into real apiservers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use ocm_api::addon::v1alpha1::ClusterManagementAddOn;
use ocm_api::{ManagedClusterSetBinding, Placement};
use serde_json::Value;
use testenv::{ControlPlane, eventually, helm};

const DEADLINE: Duration = Duration::from_secs(60);

fn chart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/ocm-placement")
        .display()
        .to_string()
}

fn render(extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec!["template", "r", chart.as_str(), "--namespace", "hub"];
    args.extend_from_slice(extra);
    let out = helm::helm(&args, None).expect("helm template");
    serde_saphyr::from_multiple::<Value>(&helm::stdout(&out))
        .expect("rendered YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
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

    // Defaults: scheduler and manager with their RBAC, the add-on with its Placement; no CRDs,
    // no scorer.
    let docs = render(&[]);
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
        "scheduler.debug.enabled=true,scheduler.debug.tlsSecret=debug-tls,installCRDs=true",
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
    let self_signed = render(&["--set", "scheduler.debug.enabled=true"]);
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
        "scheduler.debug.enabled=true,scheduler.debug.insecure=true",
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
        "scheduler.debug.enabled=true,scheduler.debug.insecure=true,scheduler.debug.tlsSecret=t",
        "scheduler.debug.enabled=true,scheduler.debug.port=8080",
        "leaderElection.enabled=false",
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

/// helm blocks; run it off the runtime.
async fn run(args: Vec<String>, kubeconfig: PathBuf) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        helm::helm(&a, Some(&kubeconfig))
    })
    .await
    .expect("helm task")
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
        strings(&["install", "r", &chart, "--namespace", &ns]),
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
            "scheduler.replicas=1,scorer.enabled=true,scorer.prometheusURL=http://prometheus:9090",
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
            "installCRDs=true,manager.enabled=false",
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

/// Runs each Deployment's container args (what `helm template` renders for this release) as its
/// service account; the metrics address moves to a free loopback port.
async fn run_as_the_chart(cp: &ControlPlane, ns: &str) {
    use std::process::{Command, Stdio};
    let docs = {
        let chart = chart();
        let out = helm::helm(
            &[
                "template", "r", &chart, "--namespace", ns, "--set",
                "scheduler.replicas=1,scorer.enabled=true,scorer.prometheusURL=http://prometheus:9090",
            ],
            None,
        )
        .expect("helm template");
        serde_saphyr::from_multiple::<Value>(&helm::stdout(&out)).expect("yaml")
    };
    let bins = e2e::fleet::binaries(false).expect("binaries");
    let mut children = Vec::new();
    let mut ports = Vec::new();
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let spec = &d["spec"]["template"]["spec"];
        let sa = spec["serviceAccountName"]
            .as_str()
            .expect("service account");
        let image = spec["containers"][0]["image"].as_str().expect("image");
        // quay.io/ocm-placement/<binary>:<tag>
        let binary = image
            .rsplit('/')
            .next()
            .and_then(|i| i.split(':').next())
            .expect("binary name");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let args: Vec<String> = spec["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .map(|a| {
                if a.starts_with("--metrics-bind-address=") {
                    format!("--metrics-bind-address=127.0.0.1:{port}")
                } else {
                    a.to_owned()
                }
            })
            .collect();
        let user = format!("system:serviceaccount:{ns}:{sa}");
        let groups = [
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{ns}"),
        ];
        let g: Vec<&str> = groups.iter().map(String::as_str).collect();
        let kc = std::env::temp_dir().join(format!("chart-run-{}-{sa}", std::process::id()));
        std::fs::write(&kc, cp.kubeconfig(Some((&user, &g)))).expect("kubeconfig");
        let child = Command::new(bins.join(binary))
            .args(&args)
            .arg(format!("--kubeconfig={}", kc.display()))
            .env("POD_NAMESPACE", ns)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{binary}: {e}"));
        children.push(child);
        ports.push((args[0].clone(), port));
    }
    assert_eq!(ports.len(), 3, "{ports:?}");
    for (command, port) in &ports {
        // The scorer's queries fail (no Prometheus): alive, not ready. The others: ready.
        let path = if command == "scorer" {
            "/healthz"
        } else {
            "/readyz"
        };
        eventually(
            &format!("{command} on {port} answers {path}"),
            DEADLINE,
            || async {
                let (code, _) = testenv::http::get(([127, 0, 0, 1], *port).into(), path)
                    .await
                    .ok()?;
                (code == 200).then_some(())
            },
        )
        .await;
    }
    let client = cp.client().expect("client");
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
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
