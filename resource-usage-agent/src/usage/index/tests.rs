use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;
use serde_json::{Value, json};

const GI: i64 = 1 << 30;

fn node(name: &str, allocatable: Value) -> SlimNode {
    node_with(name, allocatable, json!({}), json!({}))
}

fn node_with(name: &str, allocatable: Value, labels: Value, spec: Value) -> SlimNode {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable},
    }))
    .unwrap()
}

fn cordoned(name: &str, allocatable: Value) -> SlimNode {
    node_with(name, allocatable, json!({}), json!({"unschedulable": true}))
}

fn tainted(name: &str, allocatable: Value, key: &str, effect: &str) -> SlimNode {
    let spec = json!({"taints": [{"key": key, "effect": effect}]});
    node_with(name, allocatable, json!({}), spec)
}

fn pod(name: &str, node: Option<&str>, requests: Value) -> SlimPod {
    pod_with(name, node, requests, "Running", false)
}

fn pod_with(
    name: &str,
    node: Option<&str>,
    requests: Value,
    phase: &str,
    deleting: bool,
) -> SlimPod {
    let mut v = json!({
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
        "status": {"phase": phase},
    });
    if let Some(node) = node {
        v["spec"]["nodeName"] = json!(node);
    }
    if deleting {
        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    serde_json::from_value(v).unwrap()
}

fn index(nodes: &[SlimNode], pods: &[SlimPod]) -> UsageIndex {
    let mut index = UsageIndex::new(NodeFilter::default());
    for n in nodes {
        index.apply_node(n);
    }
    for p in pods {
        index.apply_pod(p).unwrap();
    }
    index
}

fn cpu(totals: &Totals) -> (i64, Option<i64>) {
    let t = totals[Resource::Cpu];
    (t.cluster_free, t.node_free)
}

fn gpu(totals: &Totals) -> ResourceTotals {
    totals[Resource::Gpu]
}

#[test]
fn sums_requests_per_node() {
    let idx = index(
        &[
            node("a", json!({"cpu": "4", "memory": "16Gi"})),
            node("b", json!({"cpu": "8", "memory": "32Gi"})),
        ],
        &[
            pod("p1", Some("a"), json!({"cpu": "1", "memory": "1Gi"})),
            pod("p2", Some("b"), json!({"cpu": "7500m", "memory": "2Gi"})),
            pod("p3", Some("b"), json!({"memory": "2Gi"})),
        ],
    );
    let t = idx.totals();
    assert_eq!(cpu(&t), (3500, Some(3000)));
    let mem = t[Resource::Memory];
    assert_eq!((mem.cluster_free, mem.node_free), (43 * GI, Some(28 * GI)));
    assert!(mem.present && t[Resource::Cpu].present);
    assert!(!t[Resource::Gpu].present && !t[Resource::Tpu].present);
    assert_eq!(
        (t.nodes_counted, t.nodes_excluded, t.pods_counted),
        (2, 0, 3)
    );
    assert_eq!((idx.node_count(), idx.pod_count()), (2, 3));
    assert_eq!(idx.warnings().count(), 0);
}

#[test]
fn overcommitted_nodes_go_negative() {
    let idx = index(
        &[node("a", json!({"cpu": "1"}))],
        &[pod("p", Some("a"), json!({"cpu": "3"}))],
    );
    assert_eq!(cpu(&idx.totals()), (-2000, Some(-2000)));
}

#[test]
fn which_pods_count() {
    let cases = [
        ("running", pod("p", Some("a"), json!({"cpu": "1"})), 1000),
        (
            "bound pending",
            pod_with("p", Some("a"), json!({"cpu": "1"}), "Pending", false),
            1000,
        ),
        ("unbound", pod("p", None, json!({"cpu": "1"})), 0),
        ("empty nodeName", pod("p", Some(""), json!({"cpu": "1"})), 0),
        (
            "succeeded",
            pod_with("p", Some("a"), json!({"cpu": "1"}), "Succeeded", false),
            0,
        ),
        (
            "failed",
            pod_with("p", Some("a"), json!({"cpu": "1"}), "Failed", false),
            0,
        ),
        (
            "deleting",
            pod_with("p", Some("a"), json!({"cpu": "1"}), "Running", true),
            0,
        ),
    ];
    for (name, p, used) in cases {
        // Applied fresh, and as an update of a running version of the same pod.
        let fresh = index(&[node("a", json!({"cpu": "4"}))], std::slice::from_ref(&p));
        let before = pod("p", Some("a"), json!({"cpu": "2"}));
        let updated = index(&[node("a", json!({"cpu": "4"}))], &[before, p]);
        for idx in [fresh, updated] {
            assert_eq!(cpu(&idx.totals()).0, 4000 - used, "{name}");
            assert_eq!(idx.pod_count(), usize::from(used > 0), "{name}");
        }
    }
}

#[test]
fn deleting_pods() {
    let mut idx = index(
        &[node("a", json!({"cpu": "4"}))],
        &[
            pod("p1", Some("a"), json!({"cpu": "1"})),
            pod("p2", Some("a"), json!({"cpu": "2"})),
        ],
    );
    idx.delete_pod("ns", "p1");
    idx.delete_pod("ns", "p1");
    idx.delete_pod("other", "p2");
    assert_eq!(cpu(&idx.totals()), (2000, Some(2000)));
    idx.delete_pod("ns", "p2");
    assert_eq!(cpu(&idx.totals()), (4000, Some(4000)));
    assert_eq!(idx.pod_count(), 0);
}

#[test]
fn which_nodes_count() {
    let alloc = || json!({"cpu": "4", "nvidia.com/gpu": "2"});
    let cases = [
        ("schedulable", node("n", alloc()), true),
        ("cordoned", cordoned("n", alloc()), false),
        (
            "not ready",
            tainted("n", alloc(), "node.kubernetes.io/not-ready", "NoSchedule"),
            false,
        ),
        (
            "unreachable",
            tainted("n", alloc(), "node.kubernetes.io/unreachable", "NoExecute"),
            false,
        ),
        (
            "not ready, prefer only",
            tainted(
                "n",
                alloc(),
                "node.kubernetes.io/not-ready",
                "PreferNoSchedule",
            ),
            true,
        ),
        (
            "someone else's taint",
            tainted("n", alloc(), "dedicated", "NoSchedule"),
            true,
        ),
    ];
    for (name, n, counts) in cases {
        let idx = index(&[n], &[pod("p", Some("n"), json!({"cpu": "1"}))]);
        let t = idx.totals();
        let want = if counts {
            (3000, Some(3000))
        } else {
            (0, None)
        };
        assert_eq!(cpu(&t), want, "{name}");
        assert_eq!(t.nodes_counted, usize::from(counts), "{name}");
        assert_eq!(t.nodes_excluded, usize::from(!counts), "{name}");
        assert_eq!(t.pods_counted, usize::from(counts), "{name}");
        // Excluded or not, the node shows the cluster has GPUs.
        assert!(gpu(&t).present, "{name}");
    }
}

#[test]
fn the_selector_picks_nodes() {
    let selector = LabelSelector {
        match_labels: Some([("pool".to_owned(), "gpu".to_owned())].into()),
        ..LabelSelector::default()
    };
    let filter = NodeFilter {
        selector: Some(Selector::from_label_selector(&selector).unwrap()),
        excluded_taints: vec![],
    };
    let mut idx = UsageIndex::new(filter);
    let gpus = json!({"cpu": "8", "nvidia.com/gpu": "4", "google.com/tpu": "0"});
    idx.apply_node(&node_with(
        "in",
        gpus.clone(),
        json!({"pool": "gpu"}),
        json!({}),
    ));
    idx.apply_node(&node_with("out", gpus, json!({"pool": "cpu"}), json!({})));
    idx.apply_node(&node(
        "unlabelled",
        json!({"cpu": "2", "google.com/tpu": "4"}),
    ));
    let t = idx.totals();
    assert_eq!(cpu(&t), (8000, Some(8000)));
    assert_eq!(
        gpu(&t),
        ResourceTotals {
            present: true,
            cluster_free: 4,
            node_free: Some(4),
        }
    );
    // TPUs only on a node the selector leaves out: absent.
    assert!(!t[Resource::Tpu].present);
    assert_eq!((t.nodes_counted, t.nodes_excluded), (1, 2));
}

#[test]
fn a_pod_moving_between_nodes() {
    let mut idx = index(
        &[
            node("a", json!({"cpu": "4"})),
            node("b", json!({"cpu": "2"})),
        ],
        &[pod("p", Some("a"), json!({"cpu": "1"}))],
    );
    assert_eq!(cpu(&idx.totals()), (5000, Some(3000)));
    idx.apply_pod(&pod("p", Some("b"), json!({"cpu": "1"})))
        .unwrap();
    assert_eq!(cpu(&idx.totals()), (5000, Some(4000)));
    idx.apply_pod(&pod("p", Some("b"), json!({"cpu": "1500m"})))
        .unwrap();
    assert_eq!(cpu(&idx.totals()), (4500, Some(4000)));
    assert_eq!(idx.totals().pods_counted, 1);
}

#[test]
fn nodes_coming_and_going() {
    let mut idx = index(&[], &[pod("p", Some("a"), json!({"cpu": "1"}))]);
    // Bound to a node not seen yet: kept, not counted.
    let t = idx.totals();
    assert_eq!(
        (cpu(&t), t.pods_counted, idx.pod_count()),
        ((0, None), 0, 1)
    );
    idx.apply_node(&node("a", json!({"cpu": "4"})));
    assert_eq!(cpu(&idx.totals()), (3000, Some(3000)));
    idx.delete_node("a");
    assert_eq!(cpu(&idx.totals()), (0, None));
    assert_eq!(idx.node_count(), 0);
    idx.apply_node(&node("a", json!({"cpu": "8"})));
    assert_eq!(cpu(&idx.totals()), (7000, Some(7000)));
    // Cordoning and uncordoning is just an update.
    idx.apply_node(&cordoned("a", json!({"cpu": "8"})));
    assert_eq!(cpu(&idx.totals()), (0, None));
    idx.apply_node(&node("a", json!({"cpu": "8"})));
    assert_eq!(cpu(&idx.totals()), (7000, Some(7000)));
}

#[test]
fn names_are_released() {
    let mut idx = index(
        &[node("a", json!({"cpu": "4"}))],
        &[pod("p", Some("b"), json!({"cpu": "1"}))],
    );
    assert_eq!(idx.interned(), 2);
    idx.delete_pod("ns", "p");
    assert_eq!(idx.interned(), 1);
    idx.apply_pod(&pod("p", Some("a"), json!({}))).unwrap();
    idx.delete_node("a");
    assert_eq!(idx.interned(), 1, "the pod still names a");
    idx.delete_pod("ns", "p");
    assert_eq!(idx.interned(), 0);
    idx.apply_node(&node("c", json!({"cpu": "1"})));
    assert_eq!(idx.nodes.slots.len(), 2, "slots are reused");
    assert_eq!(cpu(&idx.totals()), (1000, Some(1000)));
}

#[test]
fn relists_drop_what_is_gone() {
    let mut idx = index(
        &[
            node("a", json!({"cpu": "4"})),
            node("b", json!({"cpu": "4"})),
        ],
        &[
            pod("p1", Some("a"), json!({"cpu": "1"})),
            pod("p2", Some("b"), json!({"cpu": "1"})),
        ],
    );
    let errors = idx.replace_pods([
        pod("p2", Some("b"), json!({"cpu": "2"})),
        pod("p3", Some("a"), json!({"cpu": "bad"})),
    ]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].pod.as_deref(), Some("ns/p3"));
    assert_eq!(cpu(&idx.totals()), (6000, Some(4000)));
    assert_eq!(idx.pod_count(), 1);

    idx.replace_nodes([
        node("b", json!({"cpu": "4"})),
        node("c", json!({"cpu": "1"})),
    ]);
    assert_eq!(cpu(&idx.totals()), (3000, Some(2000)));
    assert_eq!(idx.node_count(), 2);

    // The streamed form.
    idx.begin_pod_relist();
    idx.apply_pod(&pod("p4", Some("c"), json!({"cpu": "1"})))
        .unwrap();
    idx.end_pod_relist();
    idx.begin_node_relist();
    idx.apply_node(&node("c", json!({"cpu": "1"})));
    idx.end_node_relist();
    let t = idx.totals();
    assert_eq!(cpu(&t), (0, Some(0)));
    assert_eq!(
        (idx.node_count(), idx.pod_count(), t.pods_counted),
        (1, 1, 1)
    );
    assert_eq!(idx.interned(), 1);
}

#[test]
fn no_gpus_means_absent() {
    let idx = index(
        &[node("a", json!({"cpu": "4", "nvidia.com/gpu": "0"}))],
        &[],
    );
    assert_eq!(gpu(&idx.totals()), ResourceTotals::default());
}

#[test]
fn gpus_all_cordoned_are_present_but_not_free() {
    let idx = index(
        &[
            cordoned("g", json!({"cpu": "4", "nvidia.com/gpu": "8"})),
            node("c", json!({"cpu": "4"})),
        ],
        &[pod("p", Some("g"), json!({"nvidia.com/gpu": "1"}))],
    );
    assert_eq!(
        gpu(&idx.totals()),
        ResourceTotals {
            present: true,
            cluster_free: 0,
            node_free: None,
        }
    );
}

#[test]
fn gpus_all_taken_are_present_with_nothing_free() {
    let idx = index(
        &[node(
            "g",
            json!({"nvidia.com/gpu": "2", "google.com/tpu": "4"}),
        )],
        &[pod(
            "p",
            Some("g"),
            json!({"nvidia.com/gpu": "2", "google.com/tpu": "1"}),
        )],
    );
    let t = idx.totals();
    assert_eq!(
        gpu(&t),
        ResourceTotals {
            present: true,
            cluster_free: 0,
            node_free: Some(0),
        }
    );
    assert_eq!(t[Resource::Tpu].node_free, Some(3));
}

#[test]
fn malformed_allocatable_is_absent_with_a_warning() {
    let mut idx = index(
        &[node(
            "a",
            json!({"cpu": "4", "nvidia.com/gpu": "two", "memory": "1Gi"}),
        )],
        &[],
    );
    let t = idx.totals();
    assert_eq!(gpu(&t), ResourceTotals::default());
    assert_eq!(cpu(&t), (4000, Some(4000)));
    let warnings: Vec<_> = idx.warnings().collect();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with("node a: status.allocatable[nvidia.com/gpu] ignored"),
        "{}",
        warnings[0]
    );
    idx.apply_node(&node("a", json!({"cpu": "4", "nvidia.com/gpu": "2"})));
    assert_eq!(idx.warnings().count(), 0);
    assert!(gpu(&idx.totals()).present);
}

#[test]
fn malformed_requests_drop_the_pod() {
    let mut idx = index(
        &[node("a", json!({"cpu": "4"}))],
        &[pod("p", Some("a"), json!({"cpu": "1"}))],
    );
    let err = idx
        .apply_pod(&pod("p", Some("a"), json!({"cpu": "1x"})))
        .unwrap_err();
    assert_eq!(err.pod.as_deref(), Some("ns/p"));
    assert_eq!(err.field, "spec.containers[0].resources.requests[cpu]");
    assert_eq!(cpu(&idx.totals()), (4000, Some(4000)));
    assert_eq!(idx.pod_count(), 0);
}

// ----- incremental == from scratch, for any sequence of events -----

#[derive(Clone, Debug)]
enum Op {
    ApplyNode(Box<SlimNode>),
    DeleteNode(String),
    ApplyPod(Box<SlimPod>),
    DeletePod(String, String),
    ReplaceNodes(Vec<SlimNode>),
    ReplacePods(Vec<SlimPod>),
}

const NODE_NAMES: [&str; 4] = ["n0", "n1", "n2", "n3"];

fn any_node() -> impl Strategy<Value = SlimNode> {
    let quantity = prop::sample::select(vec!["", "0", "2", "500m", "3.5", "bad"]);
    (
        prop::sample::select(NODE_NAMES.to_vec()),
        prop::sample::select(vec!["", "gpu", "cpu"]),
        any::<bool>(),
        prop::sample::select(vec![
            None,
            Some(("node.kubernetes.io/not-ready", "NoSchedule")),
            Some(("node.kubernetes.io/unreachable", "NoExecute")),
            Some(("node.kubernetes.io/not-ready", "PreferNoSchedule")),
            Some(("dedicated", "NoSchedule")),
        ]),
        [
            quantity.clone(),
            quantity.clone(),
            quantity.clone(),
            quantity,
        ],
    )
        .prop_map(|(name, pool, unschedulable, taint, quantities)| {
            let mut allocatable = serde_json::Map::new();
            for (r, q) in Resource::ALL.iter().zip(quantities) {
                if !q.is_empty() {
                    allocatable.insert(r.name().into(), json!(q));
                }
            }
            let labels = if pool.is_empty() {
                json!({})
            } else {
                json!({"pool": pool})
            };
            let taints: Vec<Value> = taint
                .map(|(key, effect)| json!({"key": key, "effect": effect}))
                .into_iter()
                .collect();
            let spec = json!({"unschedulable": unschedulable, "taints": taints});
            node_with(name, Value::Object(allocatable), labels, spec)
        })
}

/// Requests: mostly a few fixed profiles, so that updates often keep a pod's requests
/// (and only move it, or change its phase), sometimes any mix.
fn any_requests() -> impl Strategy<Value = Value> {
    let quantity = prop::sample::select(vec!["", "0", "1", "250m", "2Gi", "bad"]);
    let mixed = [
        quantity.clone(),
        quantity.clone(),
        quantity.clone(),
        quantity,
    ]
    .prop_map(|quantities| {
        let mut requests = serde_json::Map::new();
        for (r, q) in Resource::ALL.iter().zip(quantities) {
            if !q.is_empty() {
                requests.insert(r.name().into(), json!(q));
            }
        }
        Value::Object(requests)
    });
    let profiles = prop::sample::select(vec![
        json!({}),
        json!({"cpu": "1"}),
        json!({"cpu": "250m", "memory": "2Gi"}),
        json!({"nvidia.com/gpu": "1", "google.com/tpu": "2"}),
    ]);
    prop_oneof![3 => profiles, 1 => mixed]
}

fn any_pod() -> impl Strategy<Value = SlimPod> {
    (
        prop::sample::select(vec!["a", "b"]),
        prop::sample::select(vec!["p0", "p1", "p2"]),
        prop::option::of(prop::sample::select(NODE_NAMES.to_vec())),
        prop::sample::select(vec!["Running", "Pending", "Succeeded", "Failed"]),
        prop::bool::weighted(0.1),
        any_requests(),
    )
        .prop_map(|(namespace, name, node, phase, deleting, requests)| {
            let mut p = pod_with(name, node, requests, phase, deleting);
            p.metadata.namespace = Some(namespace.into());
            p
        })
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any_node().prop_map(|n| Op::ApplyNode(Box::new(n))),
        1 => prop::sample::select(NODE_NAMES.to_vec()).prop_map(|n| Op::DeleteNode(n.into())),
        8 => any_pod().prop_map(|p| Op::ApplyPod(Box::new(p))),
        2 => (prop::sample::select(vec!["a", "b"]), prop::sample::select(vec!["p0", "p1", "p2"]))
            .prop_map(|(ns, n)| Op::DeletePod(ns.into(), n.into())),
        1 => prop::collection::vec(any_node(), 0..4).prop_map(Op::ReplaceNodes),
        1 => prop::collection::vec(any_pod(), 0..5).prop_map(Op::ReplacePods),
    ]
}

fn any_filter() -> impl Strategy<Value = NodeFilter> {
    prop::bool::ANY.prop_map(|select_gpu_pool| {
        let selector = select_gpu_pool.then(|| {
            let s = LabelSelector {
                match_labels: Some([("pool".to_owned(), "gpu".to_owned())].into()),
                ..LabelSelector::default()
            };
            Selector::from_label_selector(&s).unwrap()
        });
        NodeFilter {
            selector,
            ..NodeFilter::default()
        }
    })
}

/// The cluster as the API server would list it after the same events.
#[derive(Default)]
struct Cluster {
    nodes: std::collections::BTreeMap<String, SlimNode>,
    pods: std::collections::BTreeMap<(String, String), SlimPod>,
}

fn key(p: &SlimPod) -> (String, String) {
    let (namespace, name) = p.key();
    (namespace.to_owned(), name.to_owned())
}

impl Cluster {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::ApplyNode(n) => {
                self.nodes
                    .insert(n.metadata.name.clone().unwrap(), (**n).clone());
            }
            Op::DeleteNode(name) => {
                self.nodes.remove(name);
            }
            Op::ApplyPod(p) => {
                self.pods.insert(key(p), (**p).clone());
            }
            Op::DeletePod(ns, name) => {
                self.pods.remove(&(ns.clone(), name.clone()));
            }
            Op::ReplaceNodes(nodes) => {
                self.nodes.clear();
                for n in nodes {
                    self.nodes
                        .insert(n.metadata.name.clone().unwrap(), n.clone());
                }
            }
            Op::ReplacePods(pods) => {
                self.pods.clear();
                for p in pods {
                    self.pods.insert(key(p), p.clone());
                }
            }
        }
    }

    /// The totals, recomputed naively from the objects (the rules written out again).
    fn totals(&self, filter: &NodeFilter) -> Totals {
        let mut t = Totals::default();
        let mut node_free: [Option<i128>; 4] = [None; 4];
        let mut cluster_free = [0i128; 4];
        t.resources[0].present = true;
        t.resources[1].present = true;
        for (name, node) in &self.nodes {
            let alloc = |r: Resource| {
                let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
                let q = list.and_then(|l| l.get(r.name()));
                q.and_then(|q| r.amount(&q.0).ok()).unwrap_or(0)
            };
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let selected = filter.selector.as_ref().is_none_or(|s| s.matches(&labels));
            let spec = node.spec.clone().unwrap_or_default();
            let cordoned = spec.unschedulable.unwrap_or(false);
            let tainted = spec.taints.unwrap_or_default().iter().any(|t| {
                (t.effect == "NoSchedule" || t.effect == "NoExecute")
                    && filter.excluded_taints.contains(&t.key)
            });
            for (i, r) in Resource::ALL.into_iter().enumerate() {
                if selected && alloc(r) > 0 {
                    t.resources[i].present = true;
                }
            }
            if !selected || cordoned || tainted {
                t.nodes_excluded += 1;
                continue;
            }
            t.nodes_counted += 1;
            let mut used = [0i128; 4];
            for p in self.pods.values() {
                let spec = p.spec.as_ref().unwrap();
                let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                let on_node = spec.node_name.as_deref() == Some(name.as_str());
                let live = !matches!(phase.as_deref(), Some("Succeeded" | "Failed"))
                    && p.metadata.deletion_timestamp.is_none();
                if let (true, true, Ok(requests)) = (on_node, live, pod_requests(spec)) {
                    t.pods_counted += 1;
                    for (u, a) in used.iter_mut().zip(requests.0) {
                        *u += i128::from(a);
                    }
                }
            }
            for (i, r) in Resource::ALL.into_iter().enumerate() {
                let free = i128::from(alloc(r)) - used[i];
                cluster_free[i] += free;
                if alloc(r) > 0 {
                    node_free[i] = Some(node_free[i].map_or(free, |b| b.max(free)));
                }
            }
        }
        for i in 0..4 {
            t.resources[i].cluster_free = saturate(cluster_free[i]);
            t.resources[i].node_free = node_free[i].map(saturate);
        }
        t
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn incremental_equals_from_scratch(
        filter in any_filter(),
        ops in prop::collection::vec(any_op(), 1..40),
    ) {
        let mut idx = UsageIndex::new(filter.clone());
        let mut cluster = Cluster::default();
        for op in &ops {
            match op {
                Op::ApplyNode(n) => idx.apply_node(n),
                Op::DeleteNode(name) => idx.delete_node(name),
                Op::ApplyPod(p) => {
                    let _ = idx.apply_pod(p);
                }
                Op::DeletePod(ns, name) => idx.delete_pod(ns, name),
                Op::ReplaceNodes(nodes) => idx.replace_nodes(nodes.clone()),
                Op::ReplacePods(pods) => {
                    let _ = idx.replace_pods(pods.clone());
                }
            }
            cluster.apply(op);
            prop_assert_eq!(idx.totals(), cluster.totals(&filter));
            prop_assert_eq!(idx.node_count(), cluster.nodes.len());
        }
        // No name outlives both its node and its pods.
        let mut names: std::collections::BTreeSet<&str> =
            cluster.nodes.keys().map(String::as_str).collect();
        for p in cluster.pods.values() {
            let spec = p.spec.as_ref().unwrap();
            let live = !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            ) && p.metadata.deletion_timestamp.is_none();
            if let (Some(n), true, Ok(_)) = (spec.node_name.as_deref(), live, pod_requests(spec)) {
                names.insert(n);
            }
        }
        prop_assert_eq!(idx.interned(), names.len());
    }
}
