//! The whole loop on the local fleet: agents turn synthetic nodes and pods into scores, the
//! scheduler turns scores into decisions. A burst of pods on the chosen cluster moves a
//! Placement with numberOfClusters 1; a NoSelect taint on the chosen cluster
//! fails it over to the backup (the disaster-recovery story of OCM's extensible-scheduling enhancement).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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

/// `fleet` with the cache at `cache` and no override pointing elsewhere.
fn fleet_with_cache(cache: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet"));
    cmd.args(args).env("OCM_PLACEMENT_CACHE", cache);
    for var in [
        "TESTENV_KUBE_APISERVER",
        "TESTENV_ETCD",
        "TESTENV_OCM_CRDS",
        "TESTENV_KUBE_CONTROLLER_MANAGER",
        "TESTENV_OCM_BIN_DIR",
        "OCM_PROMETHEUS",
        "OCM_THANOS",
        "FLEET_SIMULATED",
        "FLEET_THANOS",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("run the fleet binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A new, empty cache folder for one test.
fn empty_cache(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fleet-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the cache folder");
    dir
}

/// On a fresh clone the cache is empty: `fleet --check-deps` names every build the fleet needs
/// and the exact command, and `--no-build-deps` stops at once with the same commands, before
/// building or starting anything.
#[test]
fn fleet_names_what_an_empty_cache_lacks_and_the_commands() {
    let cache = empty_cache("empty");

    let real = fleet_with_cache(&cache, &["--check-deps"]);
    let (out, err) = (text(&real.stdout), text(&real.stderr));
    assert_eq!(real.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains(&format!("missing from the cache {}", cache.display())),
        "{out}"
    );
    assert!(
        out.contains(
            "\n  tests/control-plane/build.sh etcd kube-apiserver kube-controller-manager crds\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("\n  tests/ocm/build.sh registration-operator registration addon\n"),
        "{out}"
    );
    assert!(out.contains("min to build)"), "the expected time: {out}");
    assert!(err.contains("error: 2 build(s) missing"), "{err}");

    let simulated = fleet_with_cache(&cache, &["--simulated", "--check-deps"]);
    let out = text(&simulated.stdout);
    assert_eq!(simulated.status.code(), Some(1), "{out}");
    assert!(
        out.contains("\n  tests/control-plane/build.sh etcd kube-apiserver crds\n"),
        "no kube-controller-manager without real clusters: {out}"
    );
    assert!(!out.contains("tests/ocm/build.sh"), "no OCM agents: {out}");

    let thanos = fleet_with_cache(&cache, &["--thanos", "--check-deps"]);
    let out = text(&thanos.stdout);
    assert!(out.contains("\n  tests/prometheus/build.sh\n"), "{out}");
    assert!(out.contains("\n  tests/thanos/build.sh\n"), "{out}");

    let refused = fleet_with_cache(&cache, &["--simulated", "--no-build-deps"]);
    let err = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("tests/control-plane/build.sh etcd kube-apiserver crds"),
        "{err}"
    );
    assert!(
        !err.contains("building"),
        "nothing is built with --no-build-deps: {err}"
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// What the cache holds is not built again: with etcd and kube-apiserver there, only the CRDs
/// are missing for the simulated fleet.
#[test]
fn fleet_asks_only_for_what_the_cache_lacks() {
    let cache = empty_cache("partial");
    let version = |key| testenv::paths::version(key).expect("a pinned version");
    for (dir, file) in [
        (format!("etcd-{}", version("ETCD_VERSION")), "etcd"),
        (
            format!("kube-apiserver-{}", version("KUBE_VERSION")),
            "kube-apiserver",
        ),
    ] {
        let dir = cache.join("control-plane").join(dir);
        std::fs::create_dir_all(&dir).expect("create");
        std::fs::write(dir.join(file), "#!/bin/sh\n").expect("write");
    }
    let run = fleet_with_cache(&cache, &["--simulated", "--check-deps"]);
    let out = text(&run.stdout);
    assert_eq!(run.status.code(), Some(1), "{out}");
    assert!(
        out.contains("\n  tests/control-plane/build.sh crds\n"),
        "only the CRDs: {out}"
    );
    assert!(
        out.contains("the OCM CRDs (under a minute to build)"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&cache);
}
