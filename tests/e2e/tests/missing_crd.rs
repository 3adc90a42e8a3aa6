//! A CRD missing at start: the scheduler, the add-on manager and a
//! resource-usage agent start against a hub without the AddOnPlacementScore and
//! ClusterManagementAddOn CRDs. They keep running, `/readyz` answers 503 naming the missing CRD,
//! and once the CRDs are installed they become ready and work (a Placement is scheduled, the
//! ClusterManagementAddOn is created, the agent's score is written) without a restart. Its own
//! control plane: the CRDs are missing for the whole hub. (The hub scorer shares the agent's
//! runner and its readiness.)

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use e2e::fleet::binaries;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::ListParams;
use ocm_api::{AddOnPlacementScore, ClusterManagementAddOn, PlacementDecision};
use serde_json::json;
use testenv::{ControlPlane, eventually};

const DEADLINE: Duration = Duration::from_secs(90);
const SCORES_CRD: &str = "addonplacementscores.cluster.open-cluster-management.io";
const CMA_CRD: &str = "clustermanagementaddons.addon.open-cluster-management.io";
const ADDON: &str = ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;

/// Killed when dropped.
struct Process(&'static str, Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.1.kill();
        let _ = self.1.wait();
    }
}

impl Process {
    fn running(&mut self) -> bool {
        matches!(self.1.try_wait(), Ok(None))
    }
}

/// The apiserver's answer for a resource it does not serve, as kube's errors print it.
fn says_not_found(body: &str) -> bool {
    ["404", "NotFound", "could not find the requested resource"]
        .iter()
        .any(|s| body.contains(s))
}

fn is_missing(crd: &CustomResourceDefinition) -> bool {
    matches!(crd.metadata.name.as_deref(), Some(SCORES_CRD | CMA_CRD))
}

#[tokio::test]
async fn a_missing_crd_is_named_on_readyz_and_installing_it_recovers() {
    let all = testenv::upstream_crds().expect("the upstream CRDs");
    let (missing, present): (Vec<_>, Vec<_>) = all.into_iter().partition(is_missing);
    assert_eq!(missing.len(), 2, "both CRDs are upstream's");
    let cp = ControlPlane::start(testenv::Options::default().with_crds(present))
        .await
        .expect("a control plane");
    let client = cp.client().expect("client");
    let dir = std::env::temp_dir().join(format!("missing-crd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = format!("--kubeconfig={}", kubeconfig.display());
    let bin = binaries(true).expect("the binaries");

    let spawn = |name: &'static str, exe: &str, args: &[&str], port: u16| {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
        let child = Command::new(bin.join(exe))
            .args(args)
            .arg(&k)
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect(name);
        Process(name, child)
    };
    // The agent's cluster namespace on the hub, and its own namespace (the hub plays the
    // managed cluster too).
    for ns in ["crd-late", "late", "late-agent"] {
        testenv::apply(
            &client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ns,
        )
        .await
        .expect("namespace");
    }
    let hub = format!("--hub-kubeconfig={}", kubeconfig.display());
    let [sched_port, mgr_port, agent_port] = [(); 3].map(|()| testenv::free_port());
    let mut procs = [
        (
            spawn(
                "scheduler",
                "placement-scheduler",
                &[
                    "controller",
                    "--leader-elect=false",
                    "--debug-bind-address=",
                ],
                sched_port,
            ),
            sched_port,
            SCORES_CRD,
        ),
        (
            spawn(
                "manager",
                "resource-usage-hub",
                &[
                    "manager",
                    "--leader-elect=false",
                    "--agent-image=example.invalid/agent:test",
                ],
                mgr_port,
            ),
            mgr_port,
            CMA_CRD,
        ),
        (
            spawn(
                "agent",
                "resource-usage-agent",
                &[
                    "run",
                    &hub,
                    "--cluster-name=late",
                    "--addon-namespace=late-agent",
                    "--refresh-period=2s",
                    "--debounce=200ms",
                ],
                agent_port,
            ),
            agent_port,
            SCORES_CRD,
        ),
    ];

    // Not ready, and saying which CRD is missing; still running.
    for (p, port, crd) in &mut procs {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        let (status, body) = eventually(
            &format!("{}'s /readyz to name {crd}", p.0),
            DEADLINE,
            || async {
                testenv::http::get(addr, "/readyz")
                    .await
                    .ok()
                    .filter(|(_, body)| body.contains(*crd) && says_not_found(body))
            },
        )
        .await;
        assert_eq!(status, 503, "{}: {body}", p.0);
        eprintln!("{}: /readyz {status}: {body}", p.0);
        assert!(p.running(), "{} exited", p.0);
    }

    // The CRDs arrive: ready, and working, without a restart.
    cp.install_crds(missing).await.expect("install the CRDs");
    for (p, port, _) in &mut procs {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        eventually(&format!("{} ready", p.0), DEADLINE, || async {
            testenv::http::get(addr, "/readyz")
                .await
                .ok()
                .filter(|(s, _)| *s == 200)
        })
        .await;
        assert!(p.running(), "{} exited", p.0);
    }
    // The scheduler schedules (a Placement over a bound set with one cluster).
    for obj in [
        json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
               "metadata": {"name": "late", "labels": {"cluster.open-cluster-management.io/clusterset": "late"}},
               "spec": {"hubAcceptsClient": true}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
               "metadata": {"name": "late"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
               "metadata": {"name": "late", "namespace": "crd-late"}, "spec": {"clusterSet": "late"}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
               "metadata": {"name": "p", "namespace": "crd-late"}, "spec": {"clusterSets": ["late"]}}),
    ] {
        testenv::apply(&client, &obj, "crd-late")
            .await
            .expect("apply");
    }
    eventually("the Placement scheduled", DEADLINE, || async {
        let list = Api::<PlacementDecision>::namespaced(client.clone(), "crd-late")
            .list(&ListParams::default())
            .await
            .ok()?;
        list.items
            .iter()
            .flat_map(|d| d.status.iter().flat_map(|s| s.decisions.iter()))
            .any(|d| d.cluster_name == "late")
            .then_some(())
    })
    .await;
    // The manager makes its ClusterManagementAddOn.
    eventually("the ClusterManagementAddOn created", DEADLINE, || async {
        Api::<ClusterManagementAddOn>::all(client.clone())
            .get_opt(ADDON)
            .await
            .ok()?
    })
    .await;
    // The agent writes its score.
    eventually("the agent's score", DEADLINE, || async {
        Api::<AddOnPlacementScore>::namespaced(client.clone(), "late")
            .get_opt("resource-usage-score")
            .await
            .ok()?
    })
    .await;
    for (p, _, _) in &mut procs {
        assert!(p.running(), "{} exited", p.0);
    }
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}
