//! The hub scorer against a real Prometheus (Debian's, installed by tests/prometheus/build.sh)
//! scraping kube-state-metrics series the test serves for a small fleet, and a real apiserver
//! with the upstream CRDs as the hub: scores equal what the same data says, stale data expires,
//! a Prometheus outage is reported and recovered from, and the placement core selects by them;
//! a spoke's series under another cluster's name never become that cluster's scores; started
//! before its hub, the scorer waits for it.

#[path = "../common/mod.rs"]
mod common;

mod definitions;
mod hostile;
mod leader;
mod scores;
mod startup;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::scores::{
    Process, builtin_definition, condition, create_cluster, metric, score, scores_of, valid_until,
};
use kube::Client;
use kube::api::{Api, PostParams};
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::{RESOURCE_USAGE_SCORE, names};
use ocm_api::{AddOnPlacementScore, ManagedCluster};
use serde_json::json;
use testenv::eventually;
use testenv::prometheus::{Exporter, Prometheus, Target};

const DEADLINE: Duration = Duration::from_secs(90);
const GI: f64 = 1024.0 * 1024.0 * 1024.0;

/// A node of the fleet as kube-state-metrics reports it.
struct Node {
    name: &'static str,
    cpu: f64,
    memory_gi: f64,
    schedulable: bool,
    ready: bool,
}

/// A pod's requests on a node ("" = pending, unbound).
struct Pod {
    name: &'static str,
    node: &'static str,
    cpu: f64,
    memory_gi: f64,
}

struct Cluster {
    name: String,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
}

impl Cluster {
    /// Free (cluster, freest node) over schedulable, Ready nodes, as the agent counts.
    fn free(&self, cpu: bool) -> (f64, f64) {
        let mut total = 0.0;
        let mut best = f64::NEG_INFINITY;
        for n in self.nodes.iter().filter(|n| n.schedulable && n.ready) {
            let alloc = if cpu { n.cpu } else { n.memory_gi * GI };
            let used: f64 = self
                .pods
                .iter()
                .filter(|p| p.node == n.name)
                .map(|p| if cpu { p.cpu } else { p.memory_gi * GI })
                .sum();
            total += alloc - used;
            best = best.max(alloc - used);
        }
        (total, best)
    }

    fn exposition(&self) -> String {
        let c = &self.name;
        let mut out = String::new();
        for n in &self.nodes {
            let node = format!("{c}-{}", n.name);
            out += &format!(
                "kube_node_status_allocatable{{cluster=\"{c}\",node=\"{node}\",resource=\"cpu\",unit=\"core\"}} {}\n",
                n.cpu
            );
            out += &format!(
                "kube_node_status_allocatable{{cluster=\"{c}\",node=\"{node}\",resource=\"memory\",unit=\"byte\"}} {}\n",
                n.memory_gi * GI
            );
            out += &format!(
                "kube_node_spec_unschedulable{{cluster=\"{c}\",node=\"{node}\"}} {}\n",
                u8::from(!n.schedulable)
            );
            for (status, v) in [("true", n.ready), ("false", !n.ready)] {
                out += &format!(
                    "kube_node_status_condition{{cluster=\"{c}\",node=\"{node}\",condition=\"Ready\",status=\"{status}\"}} {}\n",
                    u8::from(v)
                );
            }
        }
        for p in &self.pods {
            let node = if p.node.is_empty() {
                String::new()
            } else {
                format!("{c}-{}", p.node)
            };
            for (resource, unit, v) in
                [("cpu", "core", p.cpu), ("memory", "byte", p.memory_gi * GI)]
            {
                out += &format!(
                    "kube_pod_container_resource_requests{{cluster=\"{c}\",namespace=\"apps\",pod=\"{}\",container=\"main\",node=\"{node}\",resource=\"{resource}\",unit=\"{unit}\"}} {v}\n",
                    p.name
                );
            }
        }
        out
    }
}

fn node(name: &'static str, cpu: f64, memory_gi: f64) -> Node {
    Node {
        name,
        cpu,
        memory_gi,
        schedulable: true,
        ready: true,
    }
}

fn pod(name: &'static str, node: &'static str, cpu: f64, memory_gi: f64) -> Pod {
    Pod {
        name,
        node,
        cpu,
        memory_gi,
    }
}

fn fleet(prefix: &str) -> Vec<Cluster> {
    vec![
        Cluster {
            name: format!("{prefix}-a"),
            nodes: vec![
                node("n1", 16.0, 64.0),
                node("n2", 16.0, 64.0),
                // Not counted: cordoned, and not Ready.
                Node {
                    schedulable: false,
                    ..node("cordoned", 64.0, 256.0)
                },
                Node {
                    ready: false,
                    ..node("down", 64.0, 256.0)
                },
            ],
            pods: vec![
                pod("p1", "n1", 4.0, 8.0),
                pod("p2", "n2", 10.0, 40.0),
                pod("p3", "cordoned", 1.0, 1.0),
                pod("pending", "", 2.0, 2.0),
            ],
        },
        Cluster {
            name: format!("{prefix}-b"),
            nodes: vec![node("n1", 8.0, 32.0)],
            // Overcommitted CPU: 10 requested of 8.
            pods: vec![pod("p1", "n1", 10.0, 30.0)],
        },
        Cluster {
            name: format!("{prefix}-c"),
            nodes: vec![node("n1", 32.0, 128.0)],
            pods: vec![],
        },
    ]
}

/// The scores the agent's formula gives for `c` with the test's ranges (0..32 cores,
/// 0..128 GiB).
fn expected(c: &Cluster) -> BTreeMap<String, i32> {
    let cpu = Normaliser::new(0.0, 32.0).expect("range");
    let mem = Normaliser::new(0.0, 128.0 * GI).expect("range");
    let (cc, cn) = c.free(true);
    let (mc, mn) = c.free(false);
    [
        (names::CPU_CLUSTER, cpu.normalise(cc)),
        (names::CPU, cpu.normalise(cc)),
        (names::CPU_NODE, cpu.normalise(cn)),
        (names::MEM_CLUSTER, mem.normalise(mc)),
        (names::MEM, mem.normalise(mc)),
        (names::MEM_NODE, mem.normalise(mn)),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect()
}

/// Which clusters a placement preferring free CPU selects, by the scheduling core.
fn select(clusters: &[&str], scores: &[AddOnPlacementScore], n: i32) -> Vec<String> {
    select_by(clusters, scores, n, RESOURCE_USAGE_SCORE, "cpuAvailable")
}

/// Which `n` clusters a placement ranking by the AddOn score `resource`/`score` selects, by
/// the scheduling core.
fn select_by(
    clusters: &[&str],
    scores: &[AddOnPlacementScore],
    n: i32,
    resource: &str,
    score: &str,
) -> Vec<String> {
    use placement_core::{Snapshot, schedule};
    let mut snap = Snapshot::new();
    for c in clusters {
        let mc: ManagedCluster = serde_json::from_value(json!({
            "metadata": {"name": c, "labels": {"cluster.open-cluster-management.io/clusterset": "fleet"}},
            "spec": {"hubAcceptsClient": true}
        }))
        .expect("cluster");
        snap.upsert_cluster(Arc::new(mc));
    }
    let set: ocm_api::ManagedClusterSet = serde_json::from_value(json!({
        "metadata": {"name": "fleet"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
    }))
    .expect("set");
    snap.upsert_set(Arc::new(set));
    let binding: ocm_api::ManagedClusterSetBinding = serde_json::from_value(json!({
        "metadata": {"name": "fleet", "namespace": "p"}, "spec": {"clusterSet": "fleet"}
    }))
    .expect("binding");
    snap.upsert_binding(&binding);
    for s in scores {
        snap.upsert_score(Arc::new(s.clone()));
    }
    let placement: ocm_api::Placement = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "p"},
        "spec": {"numberOfClusters": n, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": resource, "scoreName": score}}, "weight": 1}
        ]}}
    }))
    .expect("placement");
    let outcome = schedule(&snap, &placement, jiff::Timestamp::now());
    let mut selected: Vec<String> = outcome.selected.iter().map(|n| n.to_string()).collect();
    selected.sort();
    selected
}
