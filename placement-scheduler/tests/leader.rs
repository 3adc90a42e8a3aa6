//! Two controller replicas with leader election on a real apiserver: only the leader writes,
//! when it dies the standby takes over, and a leader frozen past its
//! lease (SIGSTOP) writes nothing once it runs again and exits.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::Api;
use kube::api::ListParams;
use ocm_api::{Placement, PlacementDecision};
use ocm_runtime::{LeaderElector, LeaderTimings};
use serde_json::{Value, json};

fn writes(r: &Running) -> u64 {
    // Every write the controller made to PlacementDecisions and Placements, whatever its result.
    let m = &r.handle.metrics;
    let mut total = 0;
    for verb in ["create", "patch", "delete"] {
        for resource in [
            "placementdecisions",
            "placementdecisions/status",
            "placements/status",
        ] {
            for result in ["success", "error", "not_found", "already_exists"] {
                total += m
                    .api_writes
                    .get_or_create(&placement_scheduler::controller::metrics::WriteLabels {
                        verb: verb.into(),
                        resource: resource.into(),
                        result: result.into(),
                    })
                    .get();
            }
        }
    }
    total
}

#[tokio::test]
async fn only_the_leader_writes_and_a_standby_takes_over() {
    let hub = Hub::without_controller("pl-leader").await;
    hub.clusters(&["a", "b"], json!({})).await;
    let timings = LeaderTimings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    };
    let mut replicas = Vec::new();
    for id in ["one", "two"] {
        let elector = LeaderElector::new(
            hub.client.clone(),
            &hub.ns,
            "placement-scheduler",
            id,
            timings,
        )
        .unwrap();
        let leadership = elector.leadership();
        let task = tokio::spawn(elector.run(std::future::pending()));
        let controller = start_controller(&hub.client, &hub.ns, Some(leadership.clone()));
        replicas.push((id, leadership, task, controller));
    }
    hub.placement("p", json!({})).await;
    hub.expect("p", &["a", "b"]).await;
    let leader = replicas
        .iter()
        .position(|r| r.1.is_leader())
        .expect("a leader");
    let standby = 1 - leader;
    assert!(!replicas[standby].1.is_leader());
    assert!(writes(&replicas[leader].3) > 0);
    assert_eq!(writes(&replicas[standby].3), 0, "the standby wrote");

    // The leader dies without releasing its Lease.
    let (_, _, task, controller) = replicas.remove(leader);
    task.abort();
    drop(controller);
    let died = Instant::now();
    hub.placement("q", json!({"numberOfClusters": 1})).await;
    hub.expect("q", &["a"]).await;
    assert!(replicas[0].1.is_leader());
    assert!(writes(&replicas[0].3) > 0);
    eprintln!("the standby took over after {:?}", died.elapsed());
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to a child process.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal}");
}

/// Kills the child when the test ends, however it ends (a stopped one too).
struct Replica(Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The holder of the test's scheduler Lease.
async fn holder(leases: &Api<Lease>) -> Option<String> {
    let lease = leases.get_opt("placement-scheduler").await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// `resourceVersion` of every PlacementDecision and Placement in `ns`, by kind and name.
async fn versions(hub: &Hub) -> BTreeMap<String, String> {
    let lp = ListParams::default();
    let mut out = BTreeMap::new();
    for d in Api::<PlacementDecision>::namespaced(hub.client.clone(), &hub.ns)
        .list(&lp)
        .await
        .unwrap()
    {
        let name = d.metadata.name.unwrap_or_default();
        out.insert(
            format!("PlacementDecision/{name}"),
            d.metadata.resource_version.unwrap_or_default(),
        );
    }
    for p in Api::<Placement>::namespaced(hub.client.clone(), &hub.ns)
        .list(&lp)
        .await
        .unwrap()
    {
        let name = p.metadata.name.unwrap_or_default();
        out.insert(
            format!("Placement/{name}"),
            p.metadata.resource_version.unwrap_or_default(),
        );
    }
    out
}

/// Names of the events `instance` reported in `ns`.
async fn events_of(hub: &Hub, instance: &str) -> Vec<String> {
    Api::<KubeEvent>::namespaced(hub.client.clone(), &hub.ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reporting_instance.as_deref() == Some(instance))
        .filter_map(|e| e.metadata.name)
        .collect()
}

/// The attack of a deposed leader, with real processes as the chart's scheduler identity: the
/// leader is frozen (SIGSTOP) in the middle of a pass with writes waiting in its client's rate
/// limiter; the standby takes the Lease and, after another change, writes newer decisions; the
/// old leader runs again (SIGCONT). Until it exits (within 30 s) no PlacementDecision,
/// Placement or Lease changes and it publishes no event.
#[tokio::test]
async fn a_deposed_leader_writes_nothing_and_exits() {
    const PLACEMENTS: usize = 8;
    let hub = Hub::without_controller("pl-deposed").await;
    hub.clusters(&["a", "b"], json!({"pick": "yes"})).await;
    hub.clusters(&["c", "d"], json!({})).await;
    let names: Vec<String> = (0..PLACEMENTS).map(|i| format!("p{i}")).collect();
    for n in &names {
        hub.placement(
            n,
            json!({"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"pick": "yes"}}}}]}),
        )
        .await;
    }

    // Both replicas run as the chart's scheduler service account.
    let dir = std::env::temp_dir().join(format!("pl-deposed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let account = common::as_scheduler_account(&hub, "placement-scheduler", &dir).await;
    let kubeconfig = account.kubeconfig;
    let start = |instance: &str, extra: &[&str]| {
        let log = std::fs::File::create(dir.join(format!("{instance}.log"))).unwrap();
        Command::new(env!("CARGO_BIN_EXE_placement-scheduler"))
            .args(["controller", "--debug-bind-address", ""])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(format!("--leader-election-namespace={}", hub.ns))
            .args([
                "--leader-election-lease-duration=4s",
                "--leader-election-renew-deadline=3s",
                "--leader-election-retry-period=500ms",
                "--balance-delay=1h",
            ])
            .args([
                "--metrics-bind-address",
                &format!("127.0.0.1:{}", testenv::free_port()),
            ])
            .args(["--namespaces", &hub.ns])
            .args(extra)
            .env("POD_NAME", instance)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(Replica)
            .unwrap()
    };
    let leases: Api<Lease> = Api::namespaced(hub.client.clone(), &hub.ns);

    // The old leader: a slow client (4 requests/s) and two workers, so that a pass keeps
    // writes waiting in the rate limiter (and, before the fix, its renewals did not).
    let mut old = start(
        "old-leader",
        &["--client-qps=4", "--client-burst=1", "--workers=2"],
    );
    let old_id = eventually("the first replica to lead", || holder(&leases)).await;
    for n in &names {
        hub.expect(n, &["a", "b"]).await;
    }
    let mut new = start("new-leader", &[]);

    // A change for every placement; freeze the leader once it has written some of it.
    hub.cluster("c", json!({"pick": "yes"}), Value::Null).await;
    eventually(
        "the old leader to write its first new decisions",
        || async {
            for n in &names {
                if hub.chosen(n).await.len() == 3 {
                    return Some(());
                }
            }
            None
        },
    )
    .await;
    signal(&old.0, "STOP");
    let stopped = Instant::now();
    let mut done = 0;
    for n in &names {
        done += usize::from(hub.chosen(n).await.len() == 3);
    }
    assert!(
        done < PLACEMENTS,
        "the old leader finished its pass before it was stopped"
    );
    eprintln!("the old leader was stopped after {done} of {PLACEMENTS} placements");

    // The standby takes over and finishes; then a second change that only it sees.
    let new_id = eventually("the standby to take the Lease", || async {
        holder(&leases).await.filter(|h| *h != old_id)
    })
    .await;
    eprintln!(
        "the standby took the Lease {:?} after the stop",
        stopped.elapsed()
    );
    for n in &names {
        hub.expect(n, &["a", "b", "c"]).await;
    }
    hub.cluster("d", json!({"pick": "yes"}), Value::Null).await;
    for n in &names {
        hub.expect(n, &["a", "b", "c", "d"]).await;
        eventually(&format!("{n}'s status to count 4 clusters"), || async {
            (hub.get_placement(n)
                .await
                .status?
                .number_of_selected_clusters
                == 4)
                .then_some(())
        })
        .await;
    }
    let before = versions(&hub).await;
    let old_events = events_of(&hub, "old-leader").await;

    // The old leader runs again, its lease long gone and writes pending. Until it has exited
    // (30 s at most: a liveness deadline) and for a short tail after, no object, event or
    // Lease changes. The tail covers requests the apiserver had received before the exit: no
    // event shows that they are done, so that interval is waited out.
    signal(&old.0, "CONT");
    let resumed = Instant::now();
    let (deadline, tail) = (Duration::from_secs(30), Duration::from_secs(2));
    let mut exited: Option<(std::process::ExitStatus, Instant)> = None;
    loop {
        if exited.is_none()
            && let Some(status) = old.0.try_wait().unwrap()
        {
            eprintln!(
                "the old leader exited {:?} after SIGCONT",
                resumed.elapsed()
            );
            exited = Some((status, Instant::now()));
        }
        let now = versions(&hub).await;
        assert_eq!(
            now, before,
            "an object changed after the old leader resumed"
        );
        let events = events_of(&hub, "old-leader").await;
        assert_eq!(
            events, old_events,
            "the old leader published events after it resumed"
        );
        assert_eq!(holder(&leases).await.as_deref(), Some(new_id.as_str()));
        match exited {
            Some((_, at)) if at.elapsed() >= tail => break,
            None if resumed.elapsed() >= deadline => break,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for n in &names {
        assert_eq!(hub.chosen(n).await, ["a", "b", "c", "d"]);
    }
    let log = std::fs::read_to_string(dir.join("old-leader.log")).unwrap();
    let (status, _) = exited.unwrap_or_else(|| panic!("the old leader is still running:\n{log}"));
    assert!(!status.success(), "the old leader exited with {status:?}");
    assert!(log.contains("lost the leader lease"), "{log}");

    // Releasing the Lease on SIGTERM is a hand-over, not a loss: a clean exit.
    signal(&new.0, "TERM");
    let status = eventually("the new leader to stop on SIGTERM", || {
        let exited = new.0.try_wait().unwrap();
        async move { exited }
    })
    .await;
    let log = std::fs::read_to_string(dir.join("new-leader.log")).unwrap();
    assert!(status.success(), "exit {status:?}:\n{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}
