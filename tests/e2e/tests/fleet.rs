//! The whole loop on the local fleet: agents turn synthetic nodes and pods into scores, the
//! scheduler turns scores into decisions. A burst of pods on the chosen cluster moves a
//! Placement with numberOfClusters 1; a NoSelect taint on the chosen cluster
//! fails it over to the backup (seed 000, story 3).

use std::time::Duration;

use e2e::fleet::{Fleet, Options, binaries};
use serde_json::json;
use testenv::eventually;

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn load_moves_the_decision_and_a_taint_fails_it_over() {
    let logs = std::env::temp_dir().join(format!("fleet-test-logs-{}", std::process::id()));
    let opts = Options {
        clusters: vec![
            ("east".into(), 16),
            ("west".into(), 24),
            ("south".into(), 32),
        ],
        refresh: Duration::from_secs(3),
        debounce: Duration::from_millis(500),
        bin_dir: binaries(false).expect("the fleet's binaries"),
        log_dir: logs.clone(),
        leader_elect: false,
    };
    let mut fleet = Fleet::start(&opts).await.expect("the fleet");
    fleet
        .placement(
            "primary",
            json!({"numberOfClusters": 1, "clusterSets": ["fleet"],
                   "prioritizerPolicy": {"mode": "Exact", "configurations": [
                       {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 1}]}}),
        )
        .await
        .expect("placement");

    // Every agent scores, and the most free cluster is chosen.
    for c in ["east", "west", "south"] {
        eventually(&format!("{c}'s score"), DEADLINE, || fleet.cpu_score(c)).await;
    }
    eventually("south chosen (32 free cores)", DEADLINE, || async {
        (fleet.decisions("primary").await.ok()? == ["south"]).then_some(())
    })
    .await;
    fleet.check().expect("all running");

    // A burst of pods on south (28 cores): it is the least free now, and the decision moves.
    // (How fast it moves is the fleet binary's figure, not this test's: `cargo run -p e2e
    // --bin fleet -- --simulated` prints each change with its time.)
    fleet.load("south", 28, 1000).await.expect("load");
    eventually("the decision leaves south", DEADLINE, || async {
        (fleet.decisions("primary").await.ok()? == ["west"]).then_some(())
    })
    .await;
    assert!(
        fleet.cpu_score("south").await < fleet.cpu_score("west").await,
        "scores moved"
    );

    // The chosen cluster becomes unavailable (NoSelect taint): the backup takes over.
    fleet.taint("west").await.expect("taint");
    eventually("failover to the backup", DEADLINE, || async {
        (fleet.decisions("primary").await.ok()? == ["east"]).then_some(())
    })
    .await;
    fleet.check().expect("all running");
    drop(fleet);
    let _ = std::fs::remove_dir_all(&logs);
}
