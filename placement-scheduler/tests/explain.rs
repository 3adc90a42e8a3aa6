//! `placement-scheduler explain NAMESPACE/NAME` against a live hub: the simulate report of the
//! placement as the hub holds it, and how its live decisions differ from what it would pick
//! now; as `kubectl-placement`; and its errors (not found, forbidden, broken kubeconfig).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::{Value, json};

fn explain(exe: &Path, args: &[&str], kubeconfig: &Path) -> Output {
    Command::new(exe)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// A user allowed exactly what explain reads, and its kubeconfig in `dir`.
async fn reader(hub: &Hub, dir: &Path) -> PathBuf {
    let user = format!("{}-reader", hub.ns);
    let rbac = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "{user}"}}
rules:
- apiGroups: ["cluster.open-cluster-management.io"]
  resources: ["placements"]
  verbs: ["get"]
- apiGroups: ["cluster.open-cluster-management.io"]
  resources: ["managedclusters", "managedclustersets", "managedclustersetbindings", "placementdecisions", "addonplacementscores"]
  verbs: ["list"]
- apiGroups: ["scoring.ocm-placement.io"]
  resources: ["scoredefinitions"]
  verbs: ["list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "{user}"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "{user}"}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{user}"}}]
"#
    );
    testenv::apply_yaml(&hub.client, &rbac, &hub.ns)
        .await
        .unwrap();
    let path = dir.join("reader.kubeconfig");
    let cp = testenv::shared().await;
    std::fs::write(&path, cp.kubeconfig(Some((&user, &[])))).unwrap();
    path
}

/// The controller decides a and b; then the scores change (c best, b worst) while no
/// controller runs: explain, as a read-only identity, reports the scores of now and that it
/// would drop b and add c; the same as `kubectl placement explain`; and as JSON.
#[tokio::test]
async fn explain_reports_the_live_decisions_against_now() {
    let mut hub = Hub::new("pl-explain").await;
    let names = hub.clusters(&["a", "b", "c"], json!({})).await;
    let (a, b, c) = (&names[0], &names[1], &names[2]);
    for (cluster, cpu) in [(a, 80), (b, 60), (c, 20)] {
        hub.score(cluster, "usage", &[("cpu", cpu)], None).await;
    }
    hub.placement(
        "p",
        json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "usage", "scoreName": "cpu"}}, "weight": 1}]}}),
    )
    .await;
    hub.expect("p", &["a", "b"]).await;
    hub.expect_condition("p", "PlacementSatisfied", "True", "AllDecisionsScheduled")
        .await;
    hub.controller.take().unwrap().stop().await;
    // Where the scores come from: a ScoreDefinition filling `usage`, which explain names.
    let definition = format!("{}-usage", hub.ns);
    testenv::scoring::apply(
        &hub.client,
        &json!({"apiVersion": "scoring.ocm-placement.io/v1alpha1", "kind": "ScoreDefinition",
                "metadata": {"name": definition},
                "spec": {"scoreName": "usage", "scores": [
                    {"name": "cpu", "expression": "x", "normalise": {"type": "MinMax"}}]}}),
    )
    .await
    .unwrap();
    hub.score(c, "usage", &[("cpu", 100)], None).await;
    hub.score(b, "usage", &[("cpu", 10)], None).await;

    let dir = std::env::temp_dir().join(format!("pl-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = reader(&hub, &dir).await;
    let key = format!("{}/p", hub.ns);
    let exe = Path::new(env!("CARGO_BIN_EXE_placement-scheduler"));
    let out = explain(exe, &["explain", &key], &kubeconfig);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    for line in [
        format!("Placement {key}\n"),
        "  PlacementSatisfied: True (AllDecisionsScheduled)".into(),
        "  scores:\n".into(),
        format!("    {c}  "),
        "  live decisions vs now:\n".into(),
        "    live: 2 clusters in 1 PlacementDecision(s), numberOfSelectedClusters 2 (now 2)\n"
            .into(),
        format!("    would remove: {b}\n"),
        format!("    would add: {c}\n"),
        "    condition PlacementSatisfied: live True (AllDecisionsScheduled), now True (AllDecisionsScheduled): agree\n".into(),
        format!("  score sources:\n    usage: ScoreDefinition {definition}\n"),
    ] {
        assert!(stdout.contains(&line), "{line:?} not in\n{stdout}");
    }
    // The score table has the new scores: c first with 100.
    let c_row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with(c.as_str()))
        .unwrap();
    assert!(c_row.contains("100") && c_row.contains("#1"), "{c_row}");

    // As a kubectl plugin: kubectl runs `kubectl-placement explain ns/p`.
    let plugin = dir.join("kubectl-placement");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(exe, &plugin).unwrap();
    let out = explain(&plugin, &["explain", &key], &kubeconfig);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plugin_stdout = text(&out.stdout);
    assert!(
        plugin_stdout.contains(&format!("    would add: {c}\n")),
        "{plugin_stdout}"
    );
    let help = explain(&plugin, &["--help"], &kubeconfig);
    assert!(
        text(&help.stdout).contains("kubectl placement"),
        "{}",
        text(&help.stdout)
    );

    let out = explain(exe, &["explain", &key, "-o", "json"], &kubeconfig);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["live"]["removed"], json!([b]));
    assert_eq!(v["live"]["added"], json!([c]));
    assert_eq!(v["placement"], json!(key));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Clear errors: a Placement that does not exist, an identity without RBAC (the verb and
/// resource named), a kubeconfig that cannot be read, a malformed key.
#[tokio::test]
async fn explain_errors_name_the_problem() {
    let hub = Hub::without_controller("pl-explain-err").await;
    hub.placement("p", json!({})).await;
    let dir = std::env::temp_dir().join(format!("pl-explain-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_placement-scheduler"));
    let cp = testenv::shared().await;

    let admin = dir.join("admin.kubeconfig");
    cp.write_kubeconfig(&admin).unwrap();
    let missing = format!("{}/nope", hub.ns);
    let out = explain(exe, &["explain", &missing], &admin);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("Placement {missing} not found")),
        "{stderr}"
    );

    let nobody = dir.join("nobody.kubeconfig");
    let user = format!("{}-nobody", hub.ns);
    std::fs::write(&nobody, cp.kubeconfig(Some((&user, &[])))).unwrap();
    let out = explain(exe, &["explain", &format!("{}/p", hub.ns)], &nobody);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    let want = format!(
        "forbidden: this identity may not get placements.cluster.open-cluster-management.io in namespace {}",
        hub.ns
    );
    assert!(stderr.contains(&want), "{stderr}");

    let broken = dir.join("broken.kubeconfig");
    std::fs::write(&broken, "clusters: [not a kubeconfig").unwrap();
    let out = explain(exe, &["explain", &format!("{}/p", hub.ns)], &broken);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot read the kubeconfig {}", broken.display())),
        "{stderr}"
    );

    let out = explain(exe, &["explain", "just-a-name"], &admin);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("expected NAMESPACE/NAME, got \"just-a-name\""),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
