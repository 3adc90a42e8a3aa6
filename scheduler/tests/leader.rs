//! Two controller replicas with leader election on a real apiserver: only the leader writes,
//! and when it dies the standby takes over within the lease duration.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use ocm_runtime::{LeaderElector, LeaderTimings};
use placement_scheduler::controller::Leader;
use serde_json::json;

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
        let leader: Arc<dyn Leader> = Arc::new(leadership.clone());
        let controller = start_controller(&hub.client, &hub.ns, Some(leader));
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
    let took = died.elapsed();
    assert!(replicas[0].1.is_leader());
    assert!(writes(&replicas[0].3) > 0);
    // Within the lease duration plus a retry period and the test's polling, with slack for a
    // loaded machine; the point is that it happens, and not before the lease expired.
    assert!(took < Duration::from_secs(20), "took over after {took:?}");
}
