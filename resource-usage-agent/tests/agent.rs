//! The resource-usage agent binary against a real apiserver (hub and managed cluster are the
//! same control plane here; each test has its own namespaces, nodes and add-on name), with the
//! shipped least-privilege RBAC for both of its identities.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use ocm_api::wellknown::score::RESOURCE_USAGE_SCORE;
use serde_json::json;

fn expected(pairs: &[(&str, i32)]) -> BTreeMap<String, i32> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// Every case of the arithmetic in one cluster. Nodes: n1 (16 CPU, 64Gi), n2 (8, 32Gi), n3
/// cordoned (32, 128Gi). Counted pods (expectations worked out by hand, in cores and GiB):
/// - p-plain on n1: containers 1 + 0.5 CPU, 2 + 1 Gi            -> 1.5, 3
/// - p-init on n1: init 4 CPU 1Gi; container 1 CPU 4Gi         -> max(1, 4) = 4, max(4, 1) = 4
/// - p-sidecar on n2: sidecar 0.5 CPU 0.5Gi (restartPolicy Always), then init 2 CPU 0.25Gi,
///   container 1 CPU 1Gi -> steady 1.5, init-time 2.5 -> 2.5 CPU; memory steady 1.5 Gi
/// - p-overhead on n2: container 1 CPU 1Gi, RuntimeClass overhead 250m 128Mi -> 1.25, 1.125
///
/// Not counted: a Succeeded pod, a pod being deleted, a pod on the cordoned node, an unbound
/// pod. Free: n1 10.5 CPU, 57 Gi; n2 4.25 CPU, 29.375 Gi; cluster 14.75 CPU, 86.375 Gi.
/// With --cpu-range 0:20 and --memory-range 0:128Gi:
/// cpu cluster 200*14.75/20-100 = 47.5 -> 47; node 200*10.5/20-100 = 5;
/// mem cluster 200*86.375/128-100 = 34.96 -> 34; node 200*57/128-100 = -10.94 -> -10.
#[tokio::test]
async fn scores_follow_nodes_and_pods_and_expire_when_the_agent_stops() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "usage").await;
    let ns = testenv::namespace(&admin, "usage-pods").await.expect("ns");
    for n in [
        node(&setup, "n1", &[("cpu", "16"), ("memory", "64Gi")], false),
        node(&setup, "n2", &[("cpu", "8"), ("memory", "32Gi")], false),
        node(&setup, "n3", &[("cpu", "32"), ("memory", "128Gi")], true),
    ] {
        create_node(&admin, &n).await;
    }
    let n1 = node_name(&setup, "n1");
    let n2 = node_name(&setup, "n2");
    let n3 = node_name(&setup, "n3");
    let rc = format!("rc-{}", setup.fleet);
    let runtime_class: k8s_openapi::api::node::v1::RuntimeClass = serde_json::from_value(json!({
        "metadata": { "name": rc }, "handler": "runc",
        "overhead": { "podFixed": { "cpu": "250m", "memory": "128Mi" } },
    }))
    .expect("runtime class");
    Api::all(admin.clone())
        .create(&PostParams::default(), &runtime_class)
        .await
        .expect("create runtime class");
    let pods = [
        pod(
            "p-plain",
            Some(&n1),
            json!({ "containers": [
                container("a", &[("cpu", "1"), ("memory", "2Gi")]),
                container("b", &[("cpu", "500m"), ("memory", "1Gi")]),
            ]}),
        ),
        pod(
            "p-init",
            Some(&n1),
            json!({
                "initContainers": [container("i", &[("cpu", "4"), ("memory", "1Gi")])],
                "containers": [container("a", &[("cpu", "1"), ("memory", "4Gi")])],
            }),
        ),
        pod(
            "p-sidecar",
            Some(&n2),
            json!({
                "initContainers": [
                    sidecar("s", &[("cpu", "500m"), ("memory", "512Mi")]),
                    container("i", &[("cpu", "2"), ("memory", "256Mi")]),
                ],
                "containers": [container("a", &[("cpu", "1"), ("memory", "1Gi")])],
            }),
        ),
        pod(
            "p-overhead",
            Some(&n2),
            json!({
                "runtimeClassName": rc,
                "containers": [container("a", &[("cpu", "1"), ("memory", "1Gi")])],
            }),
        ),
        pod(
            "p-done",
            Some(&n1),
            json!({ "containers": [container("a", &[("cpu", "8")])] }),
        ),
        pod(
            "p-deleting",
            Some(&n2),
            json!({ "containers": [container("a", &[("cpu", "4")])] }),
        ),
        pod(
            "p-cordoned",
            Some(&n3),
            json!({ "containers": [container("a", &[("cpu", "2")])] }),
        ),
        pod(
            "p-unbound",
            None,
            json!({ "containers": [container("a", &[("cpu", "6")])] }),
        ),
    ];
    for p in &pods {
        create_pod(&admin, &ns, p).await;
    }
    set_pod_phase(&admin, &ns, "p-done", "Succeeded").await;
    // A bound pod being deleted stays (no kubelet confirms) with its deletionTimestamp set.
    Api::<Pod>::namespaced(admin.clone(), &ns)
        .delete("p-deleting", &DeleteParams::default())
        .await
        .expect("delete");

    let port = free_port();
    let mut args = setup.run_args(port);
    args.extend(["--cpu-range=0:20".into(), "--memory-range=0:128Gi".into()]);
    let mut agent = Agent::spawn(&args, &setup.dir.join("agent.log"), port);

    let want = expected(&[
        ("cpuAvailable", 47),
        ("cpuClusterAvailable", 47),
        ("cpuNodeAvailable", 5),
        ("memAvailable", 34),
        ("memClusterAvailable", 34),
        ("memNodeAvailable", -10),
    ]);
    let first = eventually("the expected scores", DEADLINE, || async {
        let s = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?;
        (scores_of(&s) == want).then_some(s)
    })
    .await;
    let condition = first.conditions.first().expect("a condition");
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_str()
        ),
        (
            "AddOnPlacementScoreUpdated",
            "True",
            "AddOnPlacementScoreUpdated"
        )
    );
    let v0 = first.valid_until.clone().expect("validUntil").0;
    assert!(v0 > jiff::Timestamp::now(), "validUntil in the future");

    // A new pod (2 CPU on n1) moves the scores: cluster free 12.75 -> 27;
    // the freest node is n1 at 8.5 -> -15.
    create_pod(
        &admin,
        &ns,
        &pod(
            "p-new",
            Some(&n1),
            json!({ "containers": [container("a", &[("cpu", "2")])] }),
        ),
    )
    .await;
    let started = std::time::Instant::now();
    eventually("the scores after a new pod", DEADLINE, || async {
        let s = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?;
        let got = scores_of(&s);
        (got.get("cpuClusterAvailable") == Some(&27) && got.get("cpuNodeAvailable") == Some(&-15))
            .then_some(())
    })
    .await;
    eprintln!(
        "a new pod reached the hub's scores after {:?}",
        started.elapsed()
    );

    // validUntil advances at every refresh (2 s here), twice.
    let mut last = v0;
    for _ in 0..2 {
        last = eventually("validUntil to advance", DEADLINE, || async {
            let s = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?;
            let v = s.valid_until?.0;
            (v > last).then_some(v)
        })
        .await;
    }

    // The health Lease is renewed in the agent's namespace.
    let lease = eventually("the health Lease", DEADLINE, || async {
        Api::<Lease>::namespaced(admin.clone(), &setup.agent_ns)
            .get_opt(&setup.addon)
            .await
            .ok()
            .flatten()
    })
    .await;
    assert!(lease.spec.and_then(|s| s.renew_time).is_some());
    assert_eq!(agent.metric("score_provider_hub_backoff").await, Some(0.0));

    // While the scores are valid the scheduler reads them; once the agent is gone they expire
    // (TTL 6 s) and the scheduling core reads 0.
    let live = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE)
        .await
        .expect("scores");
    let value = scores_of(&live)["cpuAvailable"];
    assert_eq!(
        scheduler_addon_score(&setup.cluster, &live, jiff::Timestamp::now()),
        value
    );
    agent.kill();
    let dead = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE)
        .await
        .expect("scores");
    let until = dead.valid_until.clone().expect("validUntil").0;
    eventually("the scores to expire", DEADLINE, || async {
        (jiff::Timestamp::now() > until).then_some(())
    })
    .await;
    assert_eq!(
        scheduler_addon_score(&setup.cluster, &dead, jiff::Timestamp::now()),
        0,
        "expired scores read as 0"
    );
    assert_ne!(
        value, 0,
        "the live score was not 0, so the check above can fail"
    );
}

/// A restartable init container (a sidecar).
fn sidecar(name: &str, requests: &[(&str, &str)]) -> serde_json::Value {
    let mut c = container(name, requests);
    c["restartPolicy"] = json!("Always");
    c
}

/// What the scheduling core's AddOn prioritizer gives `cluster` for `cpuAvailable` of these
/// scores at `now`.
fn scheduler_addon_score(
    cluster: &str,
    status: &ocm_api::AddOnPlacementScoreStatus,
    now: jiff::Timestamp,
) -> i32 {
    use placement_core::{Snapshot, schedule};
    let mut snap = Snapshot::new();
    let mc: ocm_api::ManagedCluster = serde_json::from_value(json!({
        "metadata": { "name": cluster, "labels": { "cluster.open-cluster-management.io/clusterset": "s" } },
        "spec": { "hubAcceptsClient": true },
    }))
    .expect("cluster");
    snap.upsert_cluster(Arc::new(mc));
    let set: ocm_api::ManagedClusterSet =
        serde_json::from_value(json!({ "metadata": { "name": "s" }, "spec": { "clusterSelector": { "selectorType": "ExclusiveClusterSetLabel" } } })).expect("set");
    snap.upsert_set(Arc::new(set));
    let binding: ocm_api::ManagedClusterSetBinding = serde_json::from_value(json!({
        "metadata": { "name": "s", "namespace": "p" }, "spec": { "clusterSet": "s" },
    }))
    .expect("binding");
    snap.upsert_binding(&binding);
    let score: ocm_api::AddOnPlacementScore = serde_json::from_value(json!({
        "metadata": { "name": RESOURCE_USAGE_SCORE, "namespace": cluster },
        "status": status,
    }))
    .expect("score");
    snap.upsert_score(Arc::new(score));
    let placement: ocm_api::Placement = serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": "p" },
        "spec": { "prioritizerPolicy": { "mode": "Exact", "configurations": [
            { "scoreCoordinate": { "type": "AddOn", "addOn": { "resourceName": RESOURCE_USAGE_SCORE, "scoreName": "cpuAvailable" } }, "weight": 1 }
        ]}},
    }))
    .expect("placement");
    let outcome = schedule(&snap, &placement, now);
    let p = outcome
        .prioritizers
        .iter()
        .find(|p| p.name.starts_with("AddOn"))
        .expect("the AddOn prioritizer ran");
    p.scores
        .first()
        .copied()
        .flatten()
        .expect("a score for the cluster") as i32
}

/// GPUs count when the cluster has them; all GPU nodes cordoned is -100, not absent.
#[tokio::test]
async fn gpus_when_present_and_minus_100_when_none_schedulable() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "gpu").await;
    let ns = testenv::namespace(&admin, "gpu-pods").await.expect("ns");
    create_node(
        &admin,
        &node(
            &setup,
            "g1",
            &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "4")],
            false,
        ),
    )
    .await;
    let g1 = node_name(&setup, "g1");
    create_pod(
        &admin,
        &ns,
        &pod(
            "train",
            Some(&g1),
            json!({ "containers": [container("a", &[("nvidia.com/gpu", "1")])] }),
        ),
    )
    .await;
    let port = free_port();
    let _agent = Agent::spawn(&setup.run_args(port), &setup.dir.join("agent.log"), port);
    // 3 free GPUs of 0..20: 200*3/20-100 = -70.
    eventually("GPU scores", DEADLINE, || async {
        let s = scores_of(&score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?);
        (s.get("gpuClusterAvailable") == Some(&-70) && s.get("gpuNodeAvailable") == Some(&-70))
            .then_some(())
    })
    .await;
    Api::<Node>::all(admin.clone())
        .patch(
            &g1,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "unschedulable": true } })),
        )
        .await
        .expect("cordon");
    let s = eventually("GPU at -100 after cordoning", DEADLINE, || async {
        let s = scores_of(&score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?);
        (s.get("gpuClusterAvailable") == Some(&-100) && s.get("gpuNodeAvailable") == Some(&-100))
            .then_some(s)
    })
    .await;
    assert!(
        !s.contains_key("tpuClusterAvailable"),
        "no TPUs: no TPU items"
    );
    assert_eq!(
        s.get("cpuClusterAvailable"),
        Some(&-100),
        "nothing schedulable"
    );
}

/// The shipped RBAC: the agent's hub identity writes its own cluster's scores and nothing
/// else; its managed-cluster identity reads nodes and pods but no Secrets, and touches
/// Leases only in its own namespace.
#[tokio::test]
async fn least_privilege_for_both_identities() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "rbac").await;
    let other = testenv::namespace(&admin, "rbac-other").await.expect("ns");
    let (user, groups) = setup.hub_identity();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let hub = cp.client_as(&user, &groups).expect("hub identity");
    let score: ocm_api::AddOnPlacementScore =
        serde_json::from_value(json!({ "metadata": { "name": RESOURCE_USAGE_SCORE } }))
            .expect("score");
    let own: Api<ocm_api::AddOnPlacementScore> = Api::namespaced(hub.clone(), &setup.cluster);
    own.create(&PostParams::default(), &score)
        .await
        .expect("own namespace: create");
    own.patch_status(
        RESOURCE_USAGE_SCORE,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "scores": [{ "name": "x", "value": 1 }] } })),
    )
    .await
    .expect("own namespace: status");
    let refused =
        |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    // No delete, even of its own scores: a definition the agent stops evaluating leaves its
    // scores to expire.
    assert!(refused(
        own.delete(RESOURCE_USAGE_SCORE, &DeleteParams::default())
            .await
            .map(|_| ())
    ));
    let theirs: Api<ocm_api::AddOnPlacementScore> = Api::namespaced(hub.clone(), &other);
    assert!(refused(
        theirs
            .create(&PostParams::default(), &score)
            .await
            .map(|_| ())
    ));
    // Nor any other score there, such as one a shipped definition names.
    let defined: ocm_api::AddOnPlacementScore =
        serde_json::from_value(json!({ "metadata": { "name": "gpu-memory" } })).expect("score");
    assert!(refused(
        theirs
            .create(&PostParams::default(), &defined)
            .await
            .map(|_| ())
    ));
    assert!(refused(
        Api::<Secret>::namespaced(hub.clone(), &setup.cluster)
            .list(&Default::default())
            .await
            .map(|_| ())
    ));
    assert!(refused(
        Api::<ocm_api::ManagedCluster>::all(hub.clone())
            .list(&Default::default())
            .await
            .map(|_| ())
    ));

    let (user, groups) = setup.managed_identity();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let managed = cp.client_as(&user, &groups).expect("managed identity");
    Api::<Node>::all(managed.clone())
        .list(&Default::default())
        .await
        .expect("nodes");
    Api::<Pod>::all(managed.clone())
        .list(&Default::default())
        .await
        .expect("pods");
    assert!(refused(
        Api::<Secret>::namespaced(managed.clone(), &setup.agent_ns)
            .list(&Default::default())
            .await
            .map(|_| ())
    ));
    assert!(refused(
        Api::<Secret>::all(managed.clone())
            .list(&Default::default())
            .await
            .map(|_| ())
    ));
    let lease = |name: &str| -> Lease {
        serde_json::from_value(json!({ "metadata": { "name": name } })).expect("lease")
    };
    Api::<Lease>::namespaced(managed.clone(), &setup.agent_ns)
        .create(&PostParams::default(), &lease(&setup.addon))
        .await
        .expect("own Lease");
    assert!(refused(
        Api::<Lease>::namespaced(managed.clone(), &other)
            .create(&PostParams::default(), &lease(&setup.addon))
            .await
            .map(|_| ())
    ));
    assert!(refused(
        Api::<Pod>::namespaced(managed.clone(), &setup.agent_ns)
            .create(
                &PostParams::default(),
                &pod("x", None, json!({ "containers": [container("a", &[])] }))
            )
            .await
            .map(|_| ())
    ));
}

/// `print --source host` on this machine: free CPU between 0 and the CPU count, available
/// memory above 0 and at most the total, every score in range.
#[tokio::test]
async fn host_mode_gives_sane_values_on_this_machine() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_resource-usage-agent"))
        .args(["print", "--source", "host"])
        .output()
        .expect("run the agent");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu = v["free"]["cpu"]["cluster"].as_f64().expect("free CPU");
    assert!((0.0..=cpus).contains(&cpu), "free CPU {cpu} of {cpus}");
    let mem = v["free"]["memory"]["cluster"]
        .as_f64()
        .expect("free memory");
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kib| kib * 1024.0)
        .expect("MemTotal");
    assert!(
        mem > 0.0 && mem <= total,
        "available memory {mem} of {total}"
    );
    let scores = v["scores"]["local"].as_object().expect("scores");
    assert!(scores.contains_key("cpuAvailable") && scores.contains_key("memNodeAvailable"));
    assert!(!scores.contains_key("gpuClusterAvailable"));
    for (name, value) in scores {
        let x = value.as_i64().expect("a number");
        assert!((-100..=100).contains(&x), "{name} = {x}");
    }
}

/// Bad input gets a clear error, not a panic.
#[test]
fn bad_flags_and_a_broken_kubeconfig_are_clear_errors() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_resource-usage-agent"))
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run the agent");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let dir = std::env::temp_dir().join(format!("agent-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let broken = dir.join("broken.kubeconfig");
    std::fs::write(&broken, "apiVersion: v1\nclusters: [oops").expect("write");
    let (code, err) = run(&[
        "run",
        "--cluster-name=c",
        "--source=host",
        &format!("--hub-kubeconfig={}", broken.display()),
        "--health-lease=false",
        "--metrics-bind-address=127.0.0.1:0",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot read the hub kubeconfig"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, err) = run(&["print", "--source=host", "--cpu-range=5:5"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("min < max"), "{err}");
    let (code, err) = run(&[
        "run",
        "--cluster-name=c",
        "--source=host",
        "--hub-kubeconfig=/nonexistent",
        "--refresh-period=60s",
        "--score-ttl=10s",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--score-ttl"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A managed cluster's wrong clock does not move scores' validity: the agent's clock is 10
/// minutes off (libfaketime moves the real binary's wall clock; the apiserver's is right),
/// behind and ahead. `validUntil` and the condition's transition time are the hub's time: the
/// score is valid for about the TTL by the hub's clock, the scheduling core counts it, and the
/// agent exports and logs the offset. Timed by the local clock, the score written 10 minutes
/// behind would already have expired, and the one 10 minutes ahead would outlive a dead agent
/// by 10 minutes.
#[tokio::test]
async fn a_skewed_agent_clock_still_keeps_its_score_valid() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let lib = libfaketime();
    let lib = lib.to_str().expect("a UTF-8 path");
    // (skew, the hub's clock minus the agent's)
    for (skew, offset) in [("-10m", 600.0), ("+10m", -600.0)] {
        let setup = Setup::new(cp, cp, "skew").await;
        create_node(
            &admin,
            &node(&setup, "n1", &[("cpu", "8"), ("memory", "32Gi")], false),
        )
        .await;
        let port = free_port();
        let mut args = setup.run_args(port);
        args.extend(["--cpu-range=0:20".into(), "--memory-range=0:128Gi".into()]);
        let env = [
            ("LD_PRELOAD", lib),
            ("FAKETIME", skew),
            // Timers and intervals run on the real monotonic clock.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ];
        let agent = Agent::spawn_with_env(&args, &env, &setup.dir.join("agent.log"), port);

        // free 8 of 0:20 CPU -> 200 * 8 / 20 - 100 = -20.
        let status = eventually("the scores", DEADLINE, || async {
            let s = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?;
            (scores_of(&s).get("cpuAvailable") == Some(&-20)).then_some(s)
        })
        .await;
        let now = jiff::Timestamp::now();
        let until = status.valid_until.clone().expect("validUntil").0;
        let left = until.duration_since(now);
        // TTL 6 s, written less than a refresh period (2 s) ago, to the second.
        assert!(
            left > jiff::SignedDuration::ZERO && left <= jiff::SignedDuration::from_secs(8),
            "skew {skew}: validUntil {until} is {left:#} from the hub's now {now}"
        );
        assert_eq!(
            scheduler_addon_score(&setup.cluster, &status, now),
            -20,
            "skew {skew}: the scheduler counts the score"
        );
        let transition = status
            .conditions
            .first()
            .expect("a condition")
            .last_transition_time
            .0;
        assert!(
            transition.duration_since(now).abs() < jiff::SignedDuration::from_secs(60),
            "skew {skew}: lastTransitionTime {transition} is the hub's time, now {now}"
        );
        let measured = eventually("the clock offset metric", DEADLINE, || async {
            agent
                .metric("score_provider_hub_clock_offset_seconds")
                .await
        })
        .await;
        assert!(
            (measured - offset).abs() < 5.0,
            "skew {skew}: offset {measured} s, want about {offset}"
        );
        assert!(
            agent
                .log_text()
                .contains("the local clock differs from the hub's"),
            "skew {skew}: the offset is logged"
        );
        eprintln!("skew {skew}: offset measured {measured} s, validUntil {left:#} ahead");
    }
}

/// The agent's wall clock is stepped while it runs (NTP, an administrator, a resumed VM):
/// libfaketime reads the agent's offset from a file it re-reads every second, and the test
/// rewrites that file; the monotonic clock stays real, as it does in a real step. Steps of
/// an hour back, an hour forward, 400 days forward and back to the true time, one after the
/// other on one running agent. After each, within one refresh period (plus slack), the hub
/// must hold a score the agent wrote after the step whose `validUntil` is sane by the hub's
/// clock (`now < validUntil <= now + TTL + slack`), and from then on the agent must go on
/// renewing it, never letting it expire or run ahead. Timed by the local wall clock, a step
/// back makes the agent believe its score has an hour left (it stops writing and the score
/// expires), and a step forward writes a `validUntil` an hour or 400 days ahead.
#[tokio::test]
async fn a_wall_clock_step_while_running_costs_at_most_one_refresh_period() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let lib = libfaketime();
    let lib = lib.to_str().expect("a UTF-8 path");
    let setup = Setup::new(cp, cp, "step").await;
    create_node(
        &admin,
        &node(&setup, "n1", &[("cpu", "8"), ("memory", "32Gi")], false),
    )
    .await;
    let offset_file = setup.dir.join("faketime");
    // Written whole (a rename), so that libfaketime never reads half a file.
    let step_to = |spec: &str| {
        let tmp = setup.dir.join("faketime.tmp");
        std::fs::write(&tmp, format!("{spec}\n")).expect("write the offset");
        std::fs::rename(&tmp, &offset_file).expect("replace the offset");
    };
    step_to("+0");
    let port = free_port();
    let mut args = setup.run_args(port);
    args.extend(["--cpu-range=0:20".into(), "--memory-range=0:128Gi".into()]);
    let offset_path = offset_file.to_str().expect("a UTF-8 path");
    let env = [
        ("LD_PRELOAD", lib),
        ("FAKETIME_TIMESTAMP_FILE", offset_path),
        // Read the file again at most a second after it changes.
        ("FAKETIME_CACHE_DURATION", "1"),
        // A step moves the wall clock only: timers run on the real monotonic clock.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let agent = Agent::spawn_with_env(&args, &env, &setup.dir.join("agent.log"), port);
    eventually("the first scores", DEADLINE, || async {
        let s = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE).await?;
        (scores_of(&s).get("cpuAvailable") == Some(&-20)).then_some(())
    })
    .await;

    // run_args: --refresh-period=2s --score-ttl=6s.
    let period = Duration::from_secs(2);
    let ttl = jiff::SignedDuration::from_secs(6);
    // libfaketime's one-second cache, the header's one-second resolution, a busy machine.
    let slack = Duration::from_secs(3);
    let watch = Duration::from_secs(12);
    let api = Api::<ocm_api::AddOnPlacementScore>::namespaced(admin.clone(), &setup.cluster);
    let mut failures = Vec::new();
    for (spec, hub_minus_agent) in [
        ("-3600", 3600.0),
        ("+0", 0.0),
        ("+3600", -3600.0),
        ("+34560000", -34_560_000.0),
        ("+0", 0.0),
    ] {
        let before = api
            .get(RESOURCE_USAGE_SCORE)
            .await
            .expect("the score")
            .metadata
            .resource_version;
        step_to(spec);
        let stepped = tokio::time::Instant::now();
        // (a write after the step was seen, writes seen, the first insane reading)
        let mut renewed_at = None;
        let mut versions = Vec::new();
        let mut insane = None;
        // The range of `validUntil - now` read after the grace period, for the log.
        let mut ahead: Option<(jiff::SignedDuration, jiff::SignedDuration)> = None;
        while stepped.elapsed() < watch {
            let obj = api.get(RESOURCE_USAGE_SCORE).await.expect("the score");
            let now = jiff::Timestamp::now();
            let until = obj
                .status
                .as_ref()
                .and_then(|s| s.valid_until.as_ref())
                .map(|t| t.0);
            let sane = until.is_some_and(|u| {
                now < u && u.duration_since(now) <= ttl + jiff::SignedDuration::from_secs(2)
            });
            let rv = obj.metadata.resource_version.clone();
            if rv != before && !versions.contains(&rv) {
                versions.push(rv);
                if sane && renewed_at.is_none() {
                    renewed_at = Some(stepped.elapsed());
                }
            }
            let graced = stepped.elapsed() > period + slack;
            if let Some(left) = until.map(|u| u.duration_since(now)).filter(|_| graced) {
                ahead = Some(ahead.map_or((left, left), |(lo, hi)| (lo.min(left), hi.max(left))));
            }
            if !sane && graced && insane.is_none() {
                insane = Some(format!(
                    "{:.1} s after the step validUntil was {until:?}, the hub's now {now}",
                    stepped.elapsed().as_secs_f64()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let offset = agent
            .metric("score_provider_hub_clock_offset_seconds")
            .await;
        eprintln!(
            "step {spec}: first sane write after {renewed_at:?}, {} writes in {watch:?}, \
             validUntil - now from {:?} to {:?} after that, offset metric {offset:?}",
            versions.len(),
            ahead.map(|a| a.0),
            ahead.map(|a| a.1),
        );
        if renewed_at.is_none_or(|t| t > period + slack) {
            failures.push(format!(
                "step {spec}: no sane write within {:?} (first after {renewed_at:?})",
                period + slack
            ));
        }
        if let Some(what) = insane {
            failures.push(format!("step {spec}: {what}"));
        }
        // A write about every period: at least half of them.
        if versions.len() < 3 {
            failures.push(format!(
                "step {spec}: only {} writes in {watch:?}",
                versions.len()
            ));
        }
        if offset.is_none_or(|o| (o - hub_minus_agent).abs() >= 5.0) {
            failures.push(format!(
                "step {spec}: offset metric {offset:?}, want about {hub_minus_agent}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The framework's writer (the hub scorer writes through it too) never overwrites a newer
/// status: each status patch carries the `resourceVersion` it was decided on. Another writer
/// changes the status after our read (here it adds a condition); our next write must not
/// overwrite that newer status with one built on the old read: it conflicts, reads again and
/// decides again, so the other writer's condition survives. Written as the agent's own hub
/// identity.
#[tokio::test]
async fn a_write_decided_on_a_stale_read_does_not_overwrite_a_newer_status() {
    use score_provider::hub::HubClock;
    use score_provider::{Computed, ScoreWriter, Scores, WriteSettings};

    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "stale").await;
    let (user, groups) = setup.hub_identity();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let agent = cp.client_as(&user, &groups).expect("agent client");
    let mut writer = ScoreWriter::new(WriteSettings {
        score_name: RESOURCE_USAGE_SCORE.into(),
        ttl: Duration::from_secs(180),
        period: Duration::from_secs(60),
        renew_every: Duration::from_secs(60),
        hysteresis: 0,
        manager: "stale-test".into(),
    });
    let clock = HubClock::local();
    let computed =
        |v: i32| Computed::single(&setup.cluster, [("cpu", v)].into_iter().collect::<Scores>());
    let results = writer.write_all(&agent, &computed(10), &clock, 1).await;
    assert!(results[0].1.is_ok(), "{results:?}");

    // Another writer, after our read.
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).expect("now");
    let other = json!({ "status": { "conditions": [
        { "type": "AddOnPlacementScoreUpdated", "status": "True", "reason": "AddOnPlacementScoreUpdated",
          "message": "Placement scores are updated", "lastTransitionTime": now.to_string() },
        { "type": "OtherWriter", "status": "True", "reason": "Newer", "message": "written after the agent's read",
          "lastTransitionTime": now.to_string() },
    ]}});
    Api::<ocm_api::AddOnPlacementScore>::namespaced(admin.clone(), &setup.cluster)
        .patch_status(
            RESOURCE_USAGE_SCORE,
            &PatchParams::default(),
            &Patch::Merge(&other),
        )
        .await
        .expect("the other writer's patch");

    let results = writer.write_all(&agent, &computed(20), &clock, 1).await;
    assert!(results[0].1.is_ok(), "{results:?}");
    let status = score_status(&admin, &setup.cluster, RESOURCE_USAGE_SCORE)
        .await
        .expect("status");
    assert_eq!(scores_of(&status), expected(&[("cpu", 20)]));
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert!(
        types.contains(&"OtherWriter"),
        "the newer status was overwritten: {types:?}"
    );
}

/// A hub-side provider rating whichever clusters the test says.
struct Fleet {
    clusters: Arc<std::sync::Mutex<Vec<String>>>,
}

impl score_provider::ScoreProvider for Fleet {
    async fn compute(&mut self) -> Result<score_provider::Computed, score_provider::ProviderError> {
        let clusters = self.clusters.lock().map(|c| c.clone()).unwrap_or_default();
        let mut out = score_provider::Computed::new();
        for c in clusters {
            let scores: score_provider::Scores = [("cpu", 7)].into_iter().collect();
            out.insert(c, score_provider::Outcome::Scores(scores));
        }
        Ok(out)
    }
}

/// The value of `score_provider_cache_entries{cache="writer_known"}`.
fn writer_known(registry: &prometheus_client::registry::Registry) -> Option<i64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("score_provider_cache_entries{cache=\"writer_known\"} "))
        .and_then(|v| v.trim().parse().ok())
}

/// The writer's memory does not grow with cluster churn: a hub-side provider scores 1,000
/// clusters through the framework, then the clusters go (the hub scorer stops rating a deleted
/// cluster): what the writer knew of them goes too (`writer_known` back to its start). 1,000,
/// not 10,000: each cluster needs its namespace and its score object on the shared apiserver.
#[tokio::test]
async fn the_writer_forgets_clusters_that_are_gone() {
    use futures::StreamExt;
    const CLUSTERS: usize = 1_000;
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let prefix = testenv::namespace(&admin, "churn")
        .await
        .expect("namespace");
    let names: Vec<String> = (0..CLUSTERS).map(|i| format!("{prefix}-{i}")).collect();
    futures::stream::iter(names.iter().map(|n| {
        let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone());
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": n}})).expect("a namespace");
        async move {
            api.create(&PostParams::default(), &ns)
                .await
                .expect("namespace")
        }
    }))
    .buffer_unordered(16)
    .collect::<Vec<_>>()
    .await;

    let clusters = Arc::new(std::sync::Mutex::new(names.clone()));
    let mut settings = score_provider::Settings::new(score_provider::WriteSettings {
        score_name: RESOURCE_USAGE_SCORE.into(),
        ttl: Duration::from_secs(600),
        period: Duration::from_millis(500),
        renew_every: Duration::from_millis(500),
        hysteresis: 0,
        manager: "churn-test".into(),
    });
    settings.debounce = Duration::from_millis(50);
    let runner = score_provider::Runner::new(
        Fleet {
            clusters: clusters.clone(),
        },
        score_provider::HubClient::fixed(admin.clone()),
        settings,
    );
    let mut registry = prometheus_client::registry::Registry::default();
    runner.metrics().register(&mut registry);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.run(async {
        let _ = stopped.await;
    }));

    let started = std::time::Instant::now();
    let peak = eventually("every cluster written and known", DEADLINE, || async {
        writer_known(&registry).filter(|n| *n == CLUSTERS as i64)
    })
    .await;
    let written = started.elapsed();
    // The scores are on the hub: the map held real objects.
    let last = names.last().expect("a cluster");
    assert!(
        Api::<ocm_api::AddOnPlacementScore>::namespaced(admin.clone(), last)
            .get_opt(RESOURCE_USAGE_SCORE)
            .await
            .expect("get score")
            .is_some()
    );
    clusters.lock().map(|mut c| c.clear()).expect("lock");
    let end = eventually("the writer forgets them", DEADLINE, || async {
        writer_known(&registry).filter(|n| *n == 0)
    })
    .await;
    eprintln!(
        "writer churn: {CLUSTERS} clusters written in {written:?}; writer_known peak {peak}, end {end}"
    );
    let _ = stop.send(());
    let _ = task.await;
}

/// Started while its hub cannot be reached (nothing listens at the hub kubeconfig's address),
/// the agent keeps running for 10 s, alive and not ready, `/readyz` naming the hub and the last
/// error. Once the hub answers at that address (a forwarder to the real apiserver), it writes
/// the cluster's scores and turns ready.
#[tokio::test]
async fn started_before_the_hub_the_agent_waits_for_it_then_writes_scores() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "late-hub").await;
    let n1 = node(&setup, "n1", &[("cpu", "16"), ("memory", "64Gi")], false);
    create_node(&admin, &n1).await;
    let port = free_port();
    let server = format!("https://127.0.0.1:{port}");
    let (user, groups) = setup.hub_identity();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    std::fs::write(
        &setup.hub_kubeconfig,
        cp.kubeconfig_at(&server, Some((&user, &groups))),
    )
    .expect("hub kubeconfig");
    let metrics = free_port();
    let mut args = setup.run_args(metrics);
    args.push("--cpu-range=0:20".into());
    let mut agent = Agent::spawn(&args, &setup.dir.join("agent.log"), metrics);
    let probes = ([127, 0, 0, 1], metrics).into();
    eventually(
        "/readyz to name the connection's error",
        DEADLINE,
        || async {
            let body = testenv::forward::waiting_for(probes, &server).await.ok()?;
            body.contains("Connection refused").then_some(())
        },
    )
    .await;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        assert!(agent.running(), "exited while the hub was unreachable");
        if let Err(e) = testenv::forward::waiting_for(probes, &server).await {
            panic!("not waiting for the hub: {e}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let _hub = testenv::forward::Forwarder::start(port, cp.address())
        .await
        .expect("forwarder");
    // 16 free cores of 0..20: 200*16/20-100 = 60.
    let cluster = setup.cluster.as_str();
    eventually("the scores on the hub", DEADLINE, || async {
        let s = score_status(&admin, cluster, RESOURCE_USAGE_SCORE).await?;
        (scores_of(&s).get("cpuAvailable") == Some(&60)).then_some(())
    })
    .await;
    eventually("/readyz to be 200", DEADLINE, || async {
        let (status, _) = testenv::http::get(probes, "/readyz").await.ok()?;
        (status == 200).then_some(())
    })
    .await;
    agent.kill();
}
