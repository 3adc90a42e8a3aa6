//! One reconcile pass of the add-on manager over 1,000 clusters (ten decision groups of 100):
//! the first pass (nothing installed yet), a steady pass (everything current: the pass after
//! every event), and the pass that starts a rollout of a new image.

use std::collections::BTreeMap;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use ocm_api::ManagedCluster;
use ocm_api::addon::v1alpha1::ClusterManagementAddOn;
use ocm_api::cluster::v1beta1::PlacementDecision;
use resource_usage_hub::manager::plan::{self, HealthMode, Settings, Snapshot};
use resource_usage_hub::manager::render::AgentTemplate;
use resource_usage_hub::manager::testing;
use serde_json::json;

const CLUSTERS: usize = 1_000;
const GROUPS: usize = 10;

fn settings(image: &str) -> Settings {
    Settings {
        addon: "resource-usage-collect".into(),
        agent: "resource-usage-collect-agent".into(),
        template: AgentTemplate {
            addon_name: "resource-usage-collect".into(),
            image: image.into(),
            default_install_namespace: "open-cluster-management-agent-addon".into(),
            definitions: String::new(),
        },
        health: HealthMode::Work,
        manage_cma: true,
    }
}

fn fleet() -> Snapshot {
    let cma: ClusterManagementAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ClusterManagementAddOn",
        "metadata": {"name": "resource-usage-collect", "uid": "u",
                     "annotations": {"addon.open-cluster-management.io/lifecycle": "self"}},
        "spec": {
            "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"}],
            "installStrategy": {"type": "Placements", "placements": [{"namespace": "p", "name": "fleet",
                "rolloutStrategy": {"type": "ProgressivePerGroup"}}]}
        }
    }))
    .expect("a cma");
    let per = CLUSTERS / GROUPS;
    let decisions = (0..GROUPS)
        .map(|g| {
            let clusters: Vec<_> = (g * per..(g + 1) * per)
                .map(|i| json!({"clusterName": format!("cluster-{i:04}"), "reason": ""}))
                .collect();
            let d: PlacementDecision = serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "PlacementDecision",
                "metadata": {"name": format!("fleet-decision-{g}"), "namespace": "p", "labels": {
                    "cluster.open-cluster-management.io/placement": "fleet",
                    "cluster.open-cluster-management.io/decision-group-index": g.to_string(),
                    "cluster.open-cluster-management.io/decision-group-name": ""}},
                "status": {"decisions": clusters}
            }))
            .expect("a decision");
            Arc::new(d)
        })
        .collect();
    let clusters = (0..CLUSTERS)
        .map(|i| {
            let name = format!("cluster-{i:04}");
            let c: ManagedCluster = serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1",
                "kind": "ManagedCluster",
                "metadata": {"name": name},
                "spec": {"hubAcceptsClient": true}
            }))
            .expect("a cluster");
            (name, Arc::new(c))
        })
        .collect();
    Snapshot {
        cma: Some(Arc::new(cma)),
        decisions,
        clusters,
        placements: BTreeMap::new(),
        now: jiff::Timestamp::from_second(1_800_000_000).expect("a time"),
        ..Snapshot::default()
    }
}

/// Every cluster installed and its agent reported ready, the rollout settled.
fn installed(s: &Settings) -> Snapshot {
    let mut snap = fleet();
    for _ in 0..(3 * GROUPS + 5) {
        let p = plan::plan(s, &snap);
        if p.actions.is_empty() {
            break;
        }
        testing::apply_in_memory(&mut snap, &p.actions);
        let ready: Vec<String> = snap.works.keys().cloned().collect();
        for c in ready {
            testing::report_work_in_memory(&mut snap, &c, true);
        }
    }
    assert_eq!(snap.works.len(), CLUSTERS, "the fleet did not settle");
    snap
}

fn bench(c: &mut Criterion) {
    let s = settings("example.com/agent:1");
    let fresh = fleet();
    c.bench_function("plan: first pass, 1,000 clusters", |b| {
        b.iter(|| plan::plan(&s, &fresh))
    });
    let steady = installed(&s);
    assert!(plan::plan(&s, &steady).actions.is_empty());
    c.bench_function(
        "plan: steady pass, no renderings kept (1,000 renders)",
        |b| b.iter(|| plan::plan(&s, &steady)),
    );
    // What the controller runs: renderings kept from the previous pass.
    let mut renders = plan::Renders::default();
    plan::plan_with(&s, &steady, &mut renders);
    c.bench_function("plan: steady pass, 1,000 clusters installed", |b| {
        b.iter(|| plan::plan_with(&s, &steady, &mut renders))
    });
    let next = settings("example.com/agent:2");
    let mut renders = plan::Renders::default();
    plan::plan_with(&next, &steady, &mut renders);
    c.bench_function("plan: a new image, first group of 100 rolls", |b| {
        b.iter(|| plan::plan_with(&next, &steady, &mut renders))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
