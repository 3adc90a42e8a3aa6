//! Criterion benchmarks of the scheduling core (docs/performance.md records their figures):
//! - one Placement (Additive defaults + CPU + Memory + two AddOn scores, with and without one
//!   spread constraint) over 1,000, 10,000 and 100,000 clusters;
//! - one full pass of 10,000 Placements over 1,000 clusters in upstream's benchmark shape
//!   (numberOfClusters 10, Exact, AddOn demo/demo + ResourceAllocatableCPU + Balance, every
//!   cluster scored 80 and valid for 1000 min), each placement already holding its decisions.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use ocm_api::cluster::v1::ManagedClusterStatus;
use ocm_api::wellknown::label;
use ocm_api::*;
use placement_core::{Snapshot, schedule};
use serde_json::json;

fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().unwrap()
}

fn fleet(n: usize) -> Snapshot {
    let mut s = Snapshot::new();
    s.upsert_set(Arc::new(serde_json::from_value(json!({"metadata": {"name": "set"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}})).unwrap()));
    s.upsert_binding(
        &serde_json::from_value(
            json!({"metadata": {"name": "set", "namespace": "ns"}, "spec": {"clusterSet": "set"}}),
        )
        .unwrap(),
    );
    let valid = Some(Time(now() + jiff::SignedDuration::from_mins(1000)));
    for i in 0..n {
        let name = format!("cluster-{i:06}");
        let mut status = ManagedClusterStatus::default();
        let cpu = Quantity(format!("{}", 8 + (i * 7919) % 120));
        let mem = Quantity(format!("{}Gi", 16 + (i * 104_729) % 480));
        status.allocatable =
            BTreeMap::from([("cpu".into(), cpu.clone()), ("memory".into(), mem.clone())]);
        status.capacity = status.allocatable.clone();
        let c = ManagedCluster {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([
                    (label::CLUSTERSET.into(), "set".into()),
                    ("zone".into(), format!("zone-{}", i % 20)),
                ])),
                ..Default::default()
            },
            spec: Default::default(),
            status: Some(status),
        };
        s.upsert_cluster(Arc::new(c));
        for (res, base) in [("resource-usage-score", 37), ("demo", 80)] {
            let v = if res == "demo" {
                80
            } else {
                ((i * base) % 201) as i32 - 100
            };
            let items = if res == "demo" {
                vec![AddOnPlacementScoreItem {
                    name: "demo".into(),
                    value: v,
                }]
            } else {
                vec![
                    AddOnPlacementScoreItem {
                        name: "cpuAvailable".into(),
                        value: v,
                    },
                    AddOnPlacementScoreItem {
                        name: "memAvailable".into(),
                        value: -v,
                    },
                ]
            };
            s.upsert_score(Arc::new(AddOnPlacementScore {
                metadata: ObjectMeta {
                    name: Some(res.into()),
                    namespace: Some(name.clone()),
                    ..Default::default()
                },
                spec: Default::default(),
                status: Some(AddOnPlacementScoreStatus {
                    conditions: vec![],
                    scores: items,
                    valid_until: valid.clone(),
                }),
            }));
        }
    }
    s
}

fn one_placement(spread: bool) -> Placement {
    let mut spec = json!({
        "numberOfClusters": 10,
        "prioritizerPolicy": {"mode": "Additive", "configurations": [
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}, "weight": 1},
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableMemory"}, "weight": 1},
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 2},
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "memAvailable"}}, "weight": 1}]}
    });
    if spread {
        spec["spreadPolicy"] = json!({"spreadConstraints": [{"topologyKey": "zone", "topologyKeyType": "Label", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]});
    }
    serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}))
        .unwrap()
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("one_placement");
    g.sample_size(20);
    for n in [1_000, 10_000, 100_000] {
        let mut snapshot = fleet(n);
        for spread in [false, true] {
            let p = one_placement(spread);
            let name = if spread { "spread" } else { "no_spread" };
            // Warm: the snapshot's per-key caches (set members, topology domains, score
            // columns) are filled, as for every placement after the first since the last change.
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| black_box(schedule(&snapshot, &p, now())))
            });
            // Cold: the first placement after a change rebuilds them.
            g.bench_with_input(BenchmarkId::new(format!("{name}_cold"), n), &n, |b, _| {
                b.iter(|| {
                    snapshot.clear_caches();
                    black_box(schedule(&snapshot, &p, now()))
                })
            });
        }
    }
    g.finish();
}

fn upstream_shape() -> (Snapshot, Vec<Placement>) {
    let mut snapshot = fleet(1_000);
    let mut placements = Vec::with_capacity(10_000);
    for i in 0..10_000usize {
        let name = format!("placement-{i:05}");
        let p: Placement = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {
            "numberOfClusters": 10,
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
                {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}, "weight": 1},
                {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Balance"}, "weight": 1}]}}}))
        .unwrap();
        // Steady state: each placement already holds its 10 clusters.
        let decisions: Vec<ClusterDecision> = (0..10)
            .map(|k| ClusterDecision {
                cluster_name: format!("cluster-{:06}", (i * 10 + k) % 1_000),
                reason: String::new(),
                score: 0,
            })
            .collect();
        snapshot.upsert_decision(Arc::new(PlacementDecision {
            metadata: ObjectMeta {
                name: Some(format!("{name}-decision-1")),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([
                    (label::PLACEMENT.into(), name.clone()),
                    (label::DECISION_GROUP_INDEX.into(), "0".into()),
                    (label::DECISION_GROUP_NAME.into(), String::new()),
                ])),
                ..Default::default()
            },
            spec: Default::default(),
            status: Some(ocm_api::cluster::v1beta1::PlacementDecisionStatus { decisions }),
        }));
        placements.push(p);
    }
    (snapshot, placements)
}

fn full_pass(c: &mut Criterion) {
    let (snapshot, placements) = upstream_shape();
    let mut g = c.benchmark_group("full_pass");
    g.sample_size(10);
    g.bench_function("10000_placements_x_1000_clusters", |b| {
        b.iter(|| {
            for p in &placements {
                black_box(schedule(&snapshot, p, now()));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, single, full_pass);
criterion_main!(benches);
