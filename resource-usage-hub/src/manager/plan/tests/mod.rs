//! The planner driven pass by pass to a fixed point, in memory ([`crate::manager::testing`]).

use super::cma::owned_by;
use super::work::annotation_of;
use super::*;
use crate::manager::testing::{apply_in_memory, report_work_in_memory};
use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
use serde_json::{Value, json};

const ADDON: &str = "ruc";

fn settings() -> Settings {
    Settings {
        addon: ADDON.into(),
        agent: format!("{ADDON}-agent"),
        template: AgentTemplate {
            addon_name: ADDON.into(),
            image: "example.com/agent:1".into(),
            default_install_namespace: "agents".into(),
            definitions: String::new(),
        },
        health: HealthMode::Work,
        manage_cma: true,
    }
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("a time")
}

fn cma(strategy: Value, annotations: Value) -> Arc<ClusterManagementAddOn> {
    Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "addon.open-cluster-management.io/v1alpha1",
                "kind": "ClusterManagementAddOn",
                "metadata": {"name": ADDON, "uid": "cma-uid", "annotations": annotations},
                "spec": {
                    "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"}],
                    "installStrategy": strategy
                }
            }))
            .expect("a cma"),
        )
}

fn lifecycle_self() -> Value {
    json!({"addon.open-cluster-management.io/lifecycle": "self"})
}

/// Accepted ManagedClusters of these names.
fn managed(names: &[&str]) -> BTreeMap<String, Arc<ManagedCluster>> {
    names
        .iter()
        .map(|n| {
            let c: ManagedCluster = serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1",
                "kind": "ManagedCluster",
                "metadata": {"name": n, "annotations": {
                    "addon.open-cluster-management.io/values": "{}", "other.io/x": "y"}},
                "spec": {"hubAcceptsClient": true}
            }))
            .expect("a cluster");
            ((*n).to_owned(), Arc::new(c))
        })
        .collect()
}

fn placements(rollout: Value) -> Value {
    json!({"type": "Placements", "placements": [{"namespace": "p", "name": "fleet", "rolloutStrategy": rollout}]})
}

fn decision(name: &str, group: Option<(i32, &str)>, clusters: &[&str]) -> Arc<PlacementDecision> {
    let mut labels = json!({"cluster.open-cluster-management.io/placement": "fleet"});
    if let Some((i, n)) = group {
        labels["cluster.open-cluster-management.io/decision-group-index"] = json!(i.to_string());
        labels["cluster.open-cluster-management.io/decision-group-name"] = json!(n);
    }
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "PlacementDecision",
            "metadata": {"name": name, "namespace": "p", "labels": labels},
            "status": {"decisions": decisions}
        }))
        .expect("a decision"),
    )
}

/// The placement `p/fleet` with this status.
fn fleet(status: Value) -> BTreeMap<(String, String), Arc<Placement>> {
    let p: Placement = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "Placement",
        "metadata": {"name": "fleet", "namespace": "p"},
        "spec": {},
        "status": status
    }))
    .expect("a placement");
    BTreeMap::from([(("p".to_owned(), "fleet".to_owned()), Arc::new(p))])
}

/// A `PlacementSatisfied` condition as the scheduler writes it.
fn satisfied_condition(status: &str, reason: &str) -> Value {
    json!({"type": "PlacementSatisfied", "status": status, "reason": reason,
               "message": format!("{reason} message"), "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// `p/fleet` scheduled, selecting `n` clusters.
fn satisfied(n: usize) -> BTreeMap<(String, String), Arc<Placement>> {
    fleet(json!({"numberOfSelectedClusters": n,
                     "conditions": [satisfied_condition("True", "AllDecisionsScheduled")]}))
}

fn user_mca(cluster: &str) -> Arc<ManagedClusterAddOn> {
    let mut m = ManagedClusterAddOn::new(ADDON, ManagedClusterAddOnSpec::default());
    m.metadata.namespace = Some(cluster.into());
    m.metadata.uid = Some(format!("mca-{cluster}"));
    Arc::new(m)
}

/// Plans and applies until nothing is left to do; returns every action taken.
fn converge(s: &Settings, snap: &mut Snapshot) -> Vec<Action> {
    let mut all = Vec::new();
    for _ in 0..6 {
        let p = plan(s, snap);
        if p.actions.is_empty() {
            return all;
        }
        apply_in_memory(snap, &p.actions);
        all.extend(p.actions);
    }
    panic!("no fixed point: {:?}", plan(s, snap).actions);
}

fn cond<'a>(snap: &'a Snapshot, cluster: &str, ty: &str) -> Option<(&'a str, &'a str)> {
    snap.mcas[cluster]
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, ty))
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

fn kinds(actions: &[Action]) -> Vec<(&'static str, Option<&str>)> {
    actions.iter().map(|a| (a.kind(), a.cluster())).collect()
}

mod config_refs;
mod install;
mod review;
mod status;
