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
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use testenv::process::ChildProcess;
use testenv::scrape;

/// The bound the story runs with (the default is 10 minutes).
const BOUND: Duration = Duration::from_secs(20);

/// The controller binary as the control plane's admin, for `hub`'s namespace, with the
/// shortened bound; its metrics address.
fn scheduler(hub: &Hub, dir: &Path, n: u32) -> (ChildProcess, SocketAddr) {
    let metrics: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_placement-scheduler"));
    cmd.args([
        "controller",
        "--leader-elect=false",
        "--debug-bind-address",
        "",
    ])
    .arg("--kubeconfig")
    .arg(dir.join("kubeconfig"))
    .args(["--metrics-bind-address", &metrics.to_string()])
    .args(["--namespaces", &hub.ns])
    .args(["--max-score-validity", &format!("{}s", BOUND.as_secs())]);
    let child = ChildProcess::start(
        "the scheduler",
        cmd,
        &dir.join(format!("scheduler-{n}.log")),
    )
    .unwrap();
    (child, metrics)
}

/// Waits until the binary is ready and at rest: it has made a pass, its queue holds nothing
/// ready, deferred or processing, and two readings a second apart show no new pass or write.
/// Returns its successful writes by (verb, resource).
async fn at_rest(metrics: SocketAddr) -> BTreeMap<String, f64> {
    let read = || async move {
        let text = scrape::get(metrics).await.ok()?;
        let samples = scrape::parse(&text);
        let passes = scrape::sum(&samples, "placement_schedules_total", |_| true);
        let busy = scrape::sum(&samples, "placement_queue_depth", |l| {
            l.get("state").is_some_and(|s| s != "waiting")
        });
        let mut writes = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == "placement_api_writes_total")
        {
            if s.labels.get("result").map(String::as_str) == Some("success") {
                let key = format!(
                    "{} {}",
                    s.labels.get("verb").cloned().unwrap_or_default(),
                    s.labels.get("resource").cloned().unwrap_or_default()
                );
                *writes.entry(key).or_insert(0.0) += s.value;
            }
        }
        Some((passes, busy, writes))
    };
    let deadline = Instant::now() + DEADLINE;
    let mut last = None;
    loop {
        let ready = testenv::http::get(metrics, "/readyz").await.ok();
        if let (Some((200, _)), Some(now)) = (ready, read().await) {
            let key = (now.0, now.2.clone());
            if now.0 >= 1.0 && now.1 == 0.0 && last.as_ref() == Some(&key) {
                return now.2;
            }
            last = Some(key);
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler was not ready and at rest within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The apiserver's write requests on the objects a scheduler writes, by (verb, resource).
async fn hub_writes(hub: &Hub) -> BTreeMap<(String, String), f64> {
    let samples = scrape::apiserver(&hub.client).await.unwrap();
    let mut writes = scrape::requests_by_verb(&samples, |_, resource| {
        matches!(resource, "placementdecisions" | "placements" | "events")
    });
    writes.retain(|(verb, _), _| matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"));
    writes
}

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

    let (first, metrics) = scheduler(&hub, &dir, 1);
    hub.placement(
        "dr",
        json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "dr", "scoreName": "dr"}}, "weight": 1}]}}),
    )
    .await;
    hub.expect("dr", &["dr-primary"]).await;
    // Past the bound: an unset validUntil never expires.
    stays_on(&hub, "dr", "dr-primary", BOUND + Duration::from_secs(5)).await;
    at_rest(metrics).await;
    first.check_alive().unwrap();

    // The restart: killed, and started again with the same flags.
    drop(first);
    let before = hub_writes(&hub).await;
    let (second, metrics) = scheduler(&hub, &dir, 2);
    let written = at_rest(metrics).await;
    assert!(
        written.values().all(|n| *n == 0.0),
        "the restarted scheduler wrote {written:?}"
    );
    let after = hub_writes(&hub).await;
    assert_eq!(
        scrape::delta(&after, &before),
        BTreeMap::new(),
        "writes by verb on the hub across the restart"
    );
    // And past the bound again, counted from the restart.
    stays_on(&hub, "dr", "dr-primary", BOUND + Duration::from_secs(5)).await;
    let after = hub_writes(&hub).await;
    assert_eq!(
        scrape::delta(&after, &before),
        BTreeMap::new(),
        "writes by verb on the hub after the restart"
    );
    second.check_alive().unwrap();
    drop(second);
    std::fs::remove_dir_all(&dir).unwrap();
}
