//! The agent binary through a hub outage: the hub is a control plane of its own (this test
//! kills and restarts its kube-apiserver), the managed cluster is the shared one. While the hub
//! is down the agent stays up, says so in its metrics and computes on; once the hub is back it
//! shows the scores of the managed cluster as it is now, not as it was when the hub went away.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::*;
use serde_json::json;
use testenv::{ControlPlane, Options};

/// The agent's score object (the binary's default `--score-name`).
const SCORE: &str = "resource-usage-score";

/// The six scores for CPU and memory at cluster and node scope (`*Available` is cluster scope).
fn expected(
    cpu_cluster: i32,
    cpu_node: i32,
    mem_cluster: i32,
    mem_node: i32,
) -> BTreeMap<String, i32> {
    [
        ("cpuAvailable", cpu_cluster),
        ("cpuClusterAvailable", cpu_cluster),
        ("cpuNodeAvailable", cpu_node),
        ("memAvailable", mem_cluster),
        ("memClusterAvailable", mem_cluster),
        ("memNodeAvailable", mem_node),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect()
}

#[tokio::test]
async fn the_hub_shows_current_scores_after_an_outage() {
    let managed = testenv::shared().await;
    // The hub is this test's own: stopping the shared control plane would stop the managed
    // cluster too.
    let hub = ControlPlane::start(Options::default().with_upstream_crds())
        .await
        .expect("the hub control plane");
    let setup = Setup::new(&hub, managed, "outage").await;
    let hub_admin = hub.client().expect("hub admin");
    let managed_admin = managed.client().expect("managed admin");

    // Two nodes: 20 cores and 80Gi in all, the larger node 16 cores and 64Gi.
    for (name, cpu, memory) in [("n1", "16", "64Gi"), ("n2", "4", "16Gi")] {
        let n = node(
            &setup,
            name,
            &[("cpu", cpu), ("memory", memory), ("pods", "110")],
            false,
        );
        create_node(&managed_admin, &n).await;
    }
    let (n1, n2) = (node_name(&setup, "n1"), node_name(&setup, "n2"));
    for (name, on, cpu, memory) in [("p1", &n1, "6", "24Gi"), ("p2", &n2, "1", "4Gi")] {
        let p = pod(
            name,
            Some(on),
            json!({ "containers": [container("c", &[("cpu", cpu), ("memory", memory)])] }),
        );
        create_pod(&managed_admin, &setup.agent_ns, &p).await;
    }

    let port = free_port();
    let mut args = setup.run_args(port);
    args.extend(["--cpu-range=0:20".into(), "--memory-range=0:128Gi".into()]);
    let log = setup.dir.join("agent.log");
    let mut agent = Agent::spawn(&args, &log, port);
    let pid = agent.pid();

    // Free: cluster 20-7 = 13 cores, 80-28 = 52Gi; freest node n1 with 10 cores, 40Gi.
    // 200*13/20-100 = 30; 200*10/20-100 = 0; 200*52/128-100 = -18.75 -> -18;
    // 200*40/128-100 = -37.5 -> -37.
    let before = expected(30, 0, -18, -37);
    let (hub_ref, cluster, before_ref) = (&hub_admin, setup.cluster.as_str(), &before);
    eventually("the first scores on the hub", DEADLINE, || async move {
        let s = score_status(hub_ref, cluster, SCORE).await?;
        (scores_of(&s) == *before_ref).then_some(())
    })
    .await;

    // The outage.
    hub.stop_apiserver().expect("stop the hub's apiserver");
    let down_at = Instant::now();
    let a = &agent;
    eventually(
        "the agent to report the hub outage",
        DEADLINE,
        || async move {
            let backoff = a.metric("score_provider_hub_backoff").await?;
            let failed = a
                .metric(r#"score_provider_writes_total{result="hub_unavailable"}"#)
                .await?;
            (backoff == 1.0 && failed > 0.0).then_some(())
        },
    )
    .await;
    assert!(agent.running(), "the agent exited when the hub went away");

    // The managed cluster changes while the hub is away: a big pod on n1.
    let pod_changes = r#"score_provider_changes_total{what="pod"}"#;
    let computes_ok = r#"score_provider_computes_total{result="ok"}"#;
    let changes_before = agent.metric(pod_changes).await.unwrap_or(0.0);
    let big = pod(
        "big",
        Some(&n1),
        json!({ "containers": [container("c", &[("cpu", "8"), ("memory", "32Gi")])] }),
    );
    create_pod(&managed_admin, &setup.agent_ns, &big).await;
    let a = &agent;
    eventually("the agent to see the new pod", DEADLINE, || async move {
        let n = a.metric(pod_changes).await?;
        (n > changes_before).then_some(())
    })
    .await;
    // Computing goes on: recomputes after the change (the debounced one and the periodic
    // ones), every one while the hub is down.
    let computed_at_change = agent.metric(computes_ok).await.expect("computes_total");
    eventually(
        "the agent to recompute while the hub is down",
        DEADLINE,
        || async move {
            let n = a.metric(computes_ok).await?;
            (n >= computed_at_change + 2.0).then_some(())
        },
    )
    .await;
    assert_eq!(
        agent.metric("score_provider_hub_backoff").await,
        Some(1.0),
        "still backing off: the hub is down"
    );
    assert!(agent.running(), "the agent exited during the hub outage");

    // The hub comes back.
    let restart = Instant::now();
    hub.start_apiserver()
        .await
        .expect("restart the hub's apiserver");
    let hub_ready = Instant::now();
    eprintln!(
        "hub down for {:?}; its apiserver took {:?} to be ready again",
        hub_ready - down_at,
        hub_ready - restart
    );
    // Free now: cluster 13-8 = 5 cores, 52-32 = 20Gi; n1 has 2 cores and 8Gi left, so the
    // freest node is n2 with 3 cores and 12Gi.
    // 200*5/20-100 = -50; 200*3/20-100 = -70; 200*20/128-100 = -68.75 -> -68;
    // 200*12/128-100 = -81.25 -> -81.
    let after = expected(-50, -70, -68, -81);
    let hub_admin = hub.client().expect("hub admin after the restart");
    let (hub_ref, after_ref) = (&hub_admin, &after);
    let status = eventually(
        "the hub to show the scores computed during the outage",
        DEADLINE,
        || async move {
            let s = score_status(hub_ref, cluster, SCORE).await?;
            (scores_of(&s) == *after_ref).then_some(s)
        },
    )
    .await;
    let recovered = Instant::now();
    eprintln!(
        "recovery: current scores on the hub {:?} after its apiserver was ready ({:?} after the restart began)",
        recovered - hub_ready,
        recovered - restart
    );
    let valid_until = status.valid_until.expect("validUntil").0;
    assert!(
        valid_until > jiff::Timestamp::now(),
        "validUntil {valid_until} is not in the future"
    );
    let a = &agent;
    eventually("the agent to leave back-off", DEADLINE, || async move {
        let backoff = a.metric("score_provider_hub_backoff").await?;
        (backoff == 0.0).then_some(())
    })
    .await;
    assert!(agent.running(), "the agent exited");
    assert_eq!(agent.pid(), pid);
}
