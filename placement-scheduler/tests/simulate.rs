//! `simulate` over the example fleet (golden report) and the command line's handling of bad
//! input. Regenerate the golden files with `UPDATE_GOLDEN=1 cargo test -p placement-scheduler --test simulate`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const NOW: &str = "2026-11-22T08:00:00Z";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn simulate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_placement-scheduler"))
        .arg("simulate")
        .args(["--now", NOW])
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == actual,
        "{name} differs from the golden file; diff it with UPDATE_GOLDEN=1 and review:\n{actual}"
    );
}

#[test]
fn the_built_in_fleet_matches_the_golden_report() {
    let (ok, out, err) = simulate(&[]);
    assert!(ok, "{err}");
    golden("fleet.txt", &out);
    // The same files from disk give the same report.
    let (ok, from_disk, _) = simulate(&["examples/fleet"]);
    assert!(ok);
    assert_eq!(from_disk, out);
}

/// The ScoreDefinitions example: definitions read as where the scores come from, the scores
/// the scorer writes, the placements that rank by them, and their decisions.
#[test]
fn the_scoring_example_names_its_score_sources() {
    let (ok, out, err) = simulate(&["examples/scoring"]);
    assert!(ok, "{err}");
    golden("scoring.txt", &out);
    assert!(
        out.contains("group 0 \"\"  gpu-training-decision-1  [gpu-east]"),
        "{out}"
    );
    assert!(
        out.contains("gpu-memory: ScoreDefinition gpu-memory"),
        "{out}"
    );
}

#[test]
fn failover_moves_the_dr_workload_to_the_backup() {
    let pick = |args: &[&str]| {
        let (ok, out, err) = simulate(args);
        assert!(ok, "{err}");
        out.lines()
            .find(|l| l.contains("dr-workload-decision-1"))
            .unwrap()
            .to_owned()
    };
    assert!(pick(&["examples/fleet", "--placement", "dr/dr-workload"]).ends_with("[dr-primary]"));
    assert!(
        pick(&[
            "examples/fleet",
            "examples/fleet-failover",
            "--placement",
            "dr/dr-workload"
        ])
        .ends_with("[dr-backup]")
    );
}

#[test]
fn yaml_and_json_print_the_objects_to_write() {
    let (ok, out, err) = simulate(&["-o", "json", "--placement", "ops/canary-rollout"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items[0]["kind"], "Placement");
    assert_eq!(
        items[0]["status"]["decisionGroups"][0]["decisionGroupName"],
        "canary"
    );
    assert!(items[1..].iter().all(|d| d["kind"] == "PlacementDecision"));
    assert_eq!(
        items[1]["metadata"]["labels"]["cluster.open-cluster-management.io/decision-group-index"],
        "0"
    );
    let (ok, yaml, err) = simulate(&["-o", "yaml", "--placement", "ops/canary-rollout"]);
    assert!(ok, "{err}");
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(from_yaml, v);
}

#[test]
fn kubectl_json_lists_with_go_nulls_are_read() {
    // `kubectl get -o json`-style Lists as Go's encoding/json writes them: `"conditions": null`,
    // `"decisions": null`, `"validUntil": null`, and `"items": null` for an empty one.
    let dir = "ocm-api/tests/fixtures/go-json";
    let (list, empty) = (format!("{dir}/list.json"), format!("{dir}/empty-list.json"));
    for file in [&list, &empty] {
        assert!(
            std::fs::read_to_string(repo().join(file))
                .unwrap()
                .contains("null")
        );
    }
    let (ok, out, err) = simulate(&[&list, &empty, "--placement", "ns1/go-placement"]);
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("go-placement-decision-1") && l.ends_with("[c1]")),
        "{out}"
    );
    assert!(
        out.contains("from 1 eligible clusters in sets [prod-set]"),
        "{out}"
    );
}

#[test]
fn bad_input_names_the_file_and_the_object() {
    let dir = std::env::temp_dir().join(format!("simulate-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "broken.yaml",
            "kind: [unclosed\n",
            "broken.yaml: document 0: not valid YAML",
        ),
        (
            "unknown.yaml",
            "apiVersion: cluster.open-cluster-management.io/v1\nkind: Gadget\nmetadata: {name: g}\n",
            "unknown.yaml: document 1: Gadget g: unknown kind \"Gadget\"",
        ),
        (
            "foreign.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
            "foreign.yaml: document 1: ConfigMap cm: unsupported apiVersion \"v1\"",
        ),
        (
            "refers.yaml",
            "apiVersion: cluster.open-cluster-management.io/v1beta1\nkind: Placement\nmetadata: {name: p, namespace: ns}\nspec: {clusterSets: [nope]}\n",
            "refers.yaml: Placement ns/p: spec.clusterSets names ManagedClusterSet \"nope\", which no file holds",
        ),
        (
            "typed.yaml",
            "---\napiVersion: cluster.open-cluster-management.io/v1beta1\nkind: Placement\nmetadata: {name: p, namespace: ns}\nspec: {numberOfClusters: many}\n",
            "typed.yaml: document 1: Placement ns/p: invalid type",
        ),
    ];
    for (file, text, want) in cases {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        let (ok, _, err) = simulate(&[path.to_str().unwrap()]);
        assert!(!ok, "{file} should fail");
        assert!(err.contains(want), "{file}: {err}");
    }
    let (ok, _, err) = simulate(&[dir.join("missing.yaml").to_str().unwrap()]);
    assert!(!ok && err.contains("missing.yaml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
