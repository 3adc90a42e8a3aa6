//! The usage index at the size the agent is budgeted for: 1,000 nodes and 30,000 pods.
//!
//! `cargo bench -p resource-usage-agent --bench usage`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use resource_usage_agent::usage::index::{NodeFilter, UsageIndex};
use resource_usage_agent::usage::slim::{SlimNode, SlimPod};
use serde_json::json;

const NODES: usize = 1_000;
const PODS: usize = 30_000;

fn node(i: usize) -> SlimNode {
    let mut allocatable = json!({"cpu": "31850m", "memory": "125Gi", "pods": "110"});
    if i.is_multiple_of(10) {
        allocatable["nvidia.com/gpu"] = json!("8");
    }
    let spec = if i % 100 == 99 {
        json!({"unschedulable": true})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:04}"), "labels": {"pool": format!("p{}", i % 3)}},
        "spec": spec,
        "status": {"allocatable": allocatable},
    }))
    .expect("a valid node")
}

/// A pod with an app container, a sidecar and an init container, like a meshed workload.
fn pod(i: usize, node: usize) -> SlimPod {
    let mut app =
        json!({"cpu": format!("{}m", 100 + i % 900), "memory": format!("{}Mi", 64 + i % 512)});
    if node.is_multiple_of(10) && i.is_multiple_of(7) {
        app["nvidia.com/gpu"] = json!("1");
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": format!("ns-{}", i % 200), "name": format!("workload-{i}-7f9c8d6b5-x2x9k")},
        "spec": {
            "nodeName": format!("node-{node:04}"),
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "500m", "memory": "32Mi"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}},
            ],
            "containers": [{"name": "app", "resources": {"requests": app}}],
        },
        "status": {"phase": "Running"},
    }))
    .expect("a valid pod")
}

fn build(nodes: &[SlimNode], pods: &[SlimPod]) -> UsageIndex {
    let mut index = UsageIndex::new(NodeFilter::default());
    for n in nodes {
        index.apply_node(n);
    }
    for p in pods {
        index.apply_pod(p).expect("valid requests");
    }
    index
}

fn usage(c: &mut Criterion) {
    let nodes: Vec<SlimNode> = (0..NODES).map(node).collect();
    let pods: Vec<SlimPod> = (0..PODS).map(|i| pod(i, i % NODES)).collect();

    c.bench_function("build 1000 nodes / 30000 pods", |b| {
        b.iter(|| build(black_box(&nodes), black_box(&pods)))
    });

    let mut index = build(&nodes, &pods);
    // The same pod, alternately bound to two nodes with different requests: every
    // application subtracts the old contribution and adds the new one.
    let moves = [pod(12_345, 17), pod(12_346, 18)].map(|mut p| {
        p.metadata.name = Some("moving".into());
        p
    });
    let mut turn = 0;
    c.bench_function("one pod update (move)", |b| {
        b.iter(|| {
            turn ^= 1;
            index
                .apply_pod(black_box(&moves[turn]))
                .expect("valid requests");
        })
    });
    // A status-only update: requests and node unchanged.
    let running = pod(5, 5);
    c.bench_function("one pod update (status only)", |b| {
        b.iter(|| {
            index
                .apply_pod(black_box(&running))
                .expect("valid requests")
        })
    });
    c.bench_function("totals over 1000 nodes", |b| {
        b.iter(|| black_box(&index).totals())
    });
    c.bench_function("relist 30000 pods", |b| {
        b.iter_batched(
            || pods.clone(),
            |pods| index.replace_pods(pods),
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, usage);
criterion_main!(benches);
