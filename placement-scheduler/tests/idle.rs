//! The controller at rest: a settled fleet makes no passes and no writes, through
//! Balance waves and resyncs alike. A test binary of its own: Balance reads every
//! PlacementDecision and the resync every cluster and score on the hub, so the other tests'
//! objects would be real input changes here.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use placement_scheduler::controller::Options;
use serde_json::json;

/// Passes (every result) and writes (every verb and resource) so far.
fn activity(registry: &prometheus_client::registry::Registry) -> (f64, f64) {
    (
        metric_sum(registry, "scheduling_duration_seconds_count"),
        metric_sum(registry, "api_writes_total"),
    )
}

#[tokio::test]
async fn a_settled_balance_fleet_does_no_work_at_rest() {
    let hub = Hub::without_controller("idle").await;
    hub.clusters(&["c0", "c1", "c2", "c3", "c4", "c5"], json!({}))
        .await;
    let balance_delay = Duration::from_secs(1);
    let resync = Duration::from_secs(2);
    let (ctl, registry) = start_controller_with(
        &hub.client,
        Options {
            namespaces: vec![hub.ns.clone()],
            workers: 4,
            balance_delay,
            resync,
            ..Options::default()
        },
    );
    // Eight placements of two clusters each on six: Balance alone, with ties everywhere, so
    // every placement's decision moves the others' Balance input.
    let names: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
    for n in &names {
        hub.placement(
            n,
            json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"builtIn": "Balance"}, "weight": 1}]}}),
        )
        .await;
    }
    for n in &names {
        hub.expect_count(n, 2).await;
    }
    let (passes, writes) = activity(&registry);
    assert!(
        passes > 0.0 && writes > 0.0,
        "passes and writes are counted"
    );
    // The Balance waves converge: a window longer than a wave's delay plus a resync period
    // (+10% jitter) without a pass or a write (an interval without activity: no event shows
    // the last wave, so the window is waited out).
    let window = balance_delay + resync.mul_f64(1.1) + Duration::from_secs(1);
    let settled = eventually("the Balance waves to converge", || async {
        let before = activity(&registry);
        tokio::time::sleep(window).await;
        (activity(&registry) == before).then_some(before)
    })
    .await;
    // At rest: three more resync periods and Balance delays, nothing. A sleep, because what is
    // asserted is that nothing happens: a resync that starts no pass leaves no event or
    // counter to wait for (a resync counter would let this wait for three of them instead).
    tokio::time::sleep(resync * 3).await;
    assert_eq!(
        activity(&registry),
        settled,
        "(passes, writes) at rest moved"
    );
    ctl.stop().await;
}
