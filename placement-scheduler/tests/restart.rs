//! Scores keep their meaning across the validity bound and a restart, as a user meets them:
//! the disaster-recovery story of static scores (an administrator writes two
//! AddOnPlacementScores once, with no `validUntil`, upstream's "never expires"), with the
//! validity bound shortened to 20 s, the `placement-scheduler controller` binary restarted
//! (killed, as a crash or a rollout would), and the apiserver's own request counters to show
//! that the restarted scheduler wrote nothing. A test binary of its own: the apiserver's
//! counters are the whole control plane's, so no other test may write beside it.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// The bound the story runs with (the default is 10 minutes).
const BOUND: Duration = Duration::from_secs(20);

/// Asserts that `placement` selects `want` throughout `window`: what is asserted is that
/// nothing happens, so the window is waited out (polled every 250 ms, failing at the first
/// move).
async fn stays_on(hub: &Hub, placement: &str, want: &str, window: Duration) {
    let end = Instant::now() + window;
    while Instant::now() < end {
        assert_eq!(
            hub.chosen(placement).await,
            [want],
            "the workload moved {:?} into the window",
            window - (end - Instant::now())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn static_scores_keep_a_workload_on_its_cluster_across_the_bound_and_a_restart() {
    let hub = Hub::without_controller("dr").await;
    // Named so that a tie (both scores counting as 0) goes to the backup.
    let names = hub.clusters(&["dr-backup", "dr-primary"], json!({})).await;
    let (backup, primary) = (&names[0], &names[1]);
    assert!(backup < primary);
    hub.score(primary, "dr", &[("dr", 100)], None).await;
    hub.score(backup, "dr", &[("dr", 0)], None).await;
    let dir = std::env::temp_dir().join(format!("pl-dr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    testenv::shared()
        .await
        .write_kubeconfig(&dir.join("kubeconfig"))
        .unwrap();

    let bound = format!("{}s", BOUND.as_secs());
    let flags = ["--max-score-validity", bound.as_str()];
    let (first, metrics) = binary::start(&hub, &dir, 1, &flags);
    hub.placement(
        "dr",
        json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "dr", "scoreName": "dr"}}, "weight": 1}]}}),
    )
    .await;
    hub.expect("dr", &["dr-primary"]).await;
    // Past the bound: an unset validUntil never expires.
    stays_on(&hub, "dr", "dr-primary", BOUND + Duration::from_secs(5)).await;
    binary::at_rest(metrics, 0.0).await;
    first.check_alive().unwrap();

    // The restart: killed, and started again with the same flags.
    drop(first);
    let before = binary::hub_writes(&hub).await;
    let (second, _) = binary::restart_writes_nothing(&hub, &dir, 2, &flags, &before).await;
    // And past the bound again, counted from the restart.
    stays_on(&hub, "dr", "dr-primary", BOUND + Duration::from_secs(5)).await;
    let after = binary::hub_writes(&hub).await;
    assert_eq!(
        testenv::scrape::delta(&after, &before),
        BTreeMap::new(),
        "writes by verb on the hub after the restart"
    );
    second.check_alive().unwrap();
    drop(second);
    std::fs::remove_dir_all(&dir).unwrap();
}
