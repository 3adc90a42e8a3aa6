//! The cluster's nodes and bound pods, reduced to what the scores need and kept up to date
//! event by event.
//!
//! The agent watches every pod in the cluster and must stay small (under 50 MB with 30,000
//! pods), so nothing here keeps an object: a node is its allocatable amounts and two flags, a
//! pod is the node it is bound to (an interned id) and its effective requests. Each node keeps
//! the running sum of its pods' requests, so an event costs O(1) and [`UsageIndex::totals`]
//! costs O(nodes) whatever the number of pods.
//!
//! Upstream (addon-contrib `resource-usage-collect-addon`) recomputes everything from its
//! informer caches once a minute, listing all pods for every node and resource, and its
//! per-node sums drop init containers by mistake; see `score-addon.md` §1.4–1.5.

use std::collections::HashMap;
use std::ops::Index;

use k8s_openapi::api::core::v1::{Node, Pod};
use ocm_api::selector::{NoLabels, Selector};

use super::requests::{Amounts, RequestsError, Resource, pod_requests};

/// Which nodes count toward the cluster's free resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFilter {
    /// Only nodes whose labels match count; `None` takes every node.
    pub selector: Option<Selector>,
    /// A node with a `NoSchedule` or `NoExecute` taint under one of these keys is left out:
    /// nothing new can land there (a node that is not ready or unreachable, by default).
    pub excluded_taints: Vec<String>,
}

impl NodeFilter {
    /// The taints the node lifecycle controller puts on nodes that stopped reporting.
    pub const DEFAULT_EXCLUDED_TAINTS: [&'static str; 2] = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ];

    fn selects(&self, node: &Node) -> bool {
        let Some(selector) = &self.selector else {
            return true;
        };
        match &node.metadata.labels {
            Some(labels) => selector.matches(labels),
            None => selector.matches(&NoLabels),
        }
    }

    fn has_excluded_taint(&self, node: &Node) -> bool {
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
        taints.unwrap_or_default().iter().any(|t| {
            matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                && self.excluded_taints.contains(&t.key)
        })
    }
}

impl Default for NodeFilter {
    fn default() -> Self {
        Self {
            selector: None,
            excluded_taints: Self::DEFAULT_EXCLUDED_TAINTS.map(String::from).to_vec(),
        }
    }
}

/// One resource, cluster-wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceTotals {
    /// The cluster has this resource: a node matching the selector (schedulable or not) has
    /// some allocatable. CPU and memory are always present. This tells "no GPUs" apart from
    /// "all GPUs taken", which upstream's scores cannot.
    pub present: bool,
    /// Σ allocatable − Σ requests over the counted nodes; negative when overcommitted.
    pub cluster_free: i64,
    /// The most left on any one counted node with allocatable of this resource; `None` when
    /// no counted node has it.
    pub node_free: Option<i64>,
}

/// What the cluster has left, per resource, in each resource's unit, plus counts for logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Indexed like [`Amounts`]: in the order of [`Resource::ALL`]; or index by `Resource`.
    pub resources: [ResourceTotals; 4],
    /// Known nodes that count (selected, schedulable, no excluded taint).
    pub nodes_counted: usize,
    /// Known nodes left out, for whatever reason.
    pub nodes_excluded: usize,
    /// Pods bound to counted nodes.
    pub pods_counted: usize,
}

impl Totals {
    pub fn get(&self, resource: Resource) -> ResourceTotals {
        self[resource]
    }
}

impl Index<Resource> for Totals {
    type Output = ResourceTotals;

    fn index(&self, resource: Resource) -> &ResourceTotals {
        &self.resources[resource as usize]
    }
}

/// An interned node name. Ids are reused once neither the node nor any pod names it.
type NodeId = u32;

/// A node object, reduced.
#[derive(Debug)]
struct NodeState {
    allocatable: Amounts,
    /// Matches the selector (whether or not it is schedulable).
    selected: bool,
    /// Selected, schedulable and without an excluded taint.
    counted: bool,
    /// Allocatable quantities that did not parse (those resources count as absent).
    warnings: Vec<String>,
    /// The relist this node was last seen in.
    epoch: u32,
}

impl NodeState {
    fn new(name: &str, node: &Node, filter: &NodeFilter, epoch: u32) -> Self {
        let (allocatable, warnings) = allocatable(name, node);
        let selected = filter.selects(node);
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        Self {
            allocatable,
            selected,
            counted: selected && !cordoned && !filter.has_excluded_taint(node),
            warnings,
            epoch,
        }
    }
}

/// A node's allocatable, each malformed quantity counted as absent with a warning.
fn allocatable(name: &str, node: &Node) -> (Amounts, Vec<String>) {
    let mut amounts = Amounts::ZERO;
    let mut warnings = Vec::new();
    let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    for (key, quantity) in list.into_iter().flatten() {
        let Some(resource) = Resource::from_name(key) else {
            continue;
        };
        match resource.amount(&quantity.0) {
            Ok(amount) => amounts[resource] = amount,
            Err(err) => warnings.push(format!(
                "node {name}: status.allocatable[{key}] ignored, the node counts as having none: {err}"
            )),
        }
    }
    (amounts, warnings)
}

/// Per-node sums of pod requests. Kept in i128 so that adding and later subtracting a pod
/// always restores the previous value exactly (saturating i64 sums would not).
type Sums = [i128; 4];

/// Everything the index knows under one node name.
#[derive(Debug, Default)]
struct NodeSlot {
    name: Box<str>,
    /// `None` while only pods name this node (it has not arrived yet, or was deleted).
    node: Option<NodeState>,
    used: Sums,
    pods: usize,
}

/// Node names interned to small ids, with the per-node sums.
#[derive(Debug, Default)]
struct Nodes {
    ids: HashMap<Box<str>, NodeId>,
    slots: Vec<NodeSlot>,
    free: Vec<NodeId>,
}

impl Nodes {
    fn id(&self, name: &str) -> Option<NodeId> {
        self.ids.get(name).copied()
    }

    fn intern(&mut self, name: &str) -> NodeId {
        if let Some(id) = self.id(name) {
            return id;
        }
        let slot = NodeSlot {
            name: name.into(),
            ..NodeSlot::default()
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                // Four billion distinct node names would not fit in memory anyway.
                let id = NodeId::try_from(self.slots.len()).unwrap_or(NodeId::MAX);
                self.slots.push(slot);
                id
            }
        };
        self.ids.insert(name.into(), id);
        id
    }

    fn slot(&mut self, id: NodeId) -> &mut NodeSlot {
        &mut self.slots[id as usize]
    }

    fn name(&self, id: NodeId) -> &str {
        &self.slots[id as usize].name
    }

    fn add_pod(&mut self, id: NodeId, requests: Amounts) {
        let slot = self.slot(id);
        slot.pods += 1;
        for (sum, amount) in slot.used.iter_mut().zip(requests.0) {
            *sum += i128::from(amount);
        }
    }

    fn remove_pod(&mut self, id: NodeId, requests: Amounts) {
        let slot = self.slot(id);
        slot.pods -= 1;
        for (sum, amount) in slot.used.iter_mut().zip(requests.0) {
            *sum -= i128::from(amount);
        }
        self.release_if_unused(id);
    }

    fn forget_node(&mut self, id: NodeId) {
        self.slot(id).node = None;
        self.release_if_unused(id);
    }

    /// Frees the name once neither a node object nor a pod refers to it, so that churning
    /// node names (autoscaled pools) do not grow the index.
    fn release_if_unused(&mut self, id: NodeId) {
        let slot = &mut self.slots[id as usize];
        if slot.node.is_none() && slot.pods == 0 {
            let name = std::mem::take(&mut slot.name);
            self.ids.remove(&name);
            self.free.push(id);
        }
    }
}

/// A counted pod, reduced.
#[derive(Debug, Clone, Copy)]
struct PodEntry {
    node: NodeId,
    requests: Amounts,
    /// The relist this pod was last seen in.
    epoch: u32,
}

/// The cluster's nodes and the pods bound to them, maintained incrementally.
///
/// Feed it the watch events: `apply_*` for added and modified objects, `delete_*` for deleted
/// ones, and on a relist either `replace_*` with the whole list or `begin_*_relist`, each
/// object through `apply_*`, then `end_*_relist` (the latter streams a relist without holding
/// every object at once, as kube-runtime's watcher delivers it).
#[derive(Debug)]
pub struct UsageIndex {
    filter: NodeFilter,
    nodes: Nodes,
    /// namespace → name → entry. Only pods that count are kept; two levels so that lookups
    /// by (namespace, name) borrow instead of building a key.
    pods: HashMap<Box<str>, HashMap<Box<str>, PodEntry>>,
    pod_count: usize,
    node_epoch: u32,
    pod_epoch: u32,
}

impl UsageIndex {
    pub fn new(filter: NodeFilter) -> Self {
        Self {
            filter,
            nodes: Nodes::default(),
            pods: HashMap::new(),
            pod_count: 0,
            node_epoch: 0,
            pod_epoch: 0,
        }
    }

    /// Adds or updates a node. A nameless node (not something the API server returns) is
    /// ignored.
    pub fn apply_node(&mut self, node: &Node) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        let state = NodeState::new(name, node, &self.filter, self.node_epoch);
        let id = self.nodes.intern(name);
        self.nodes.slot(id).node = Some(state);
    }

    /// Forgets a node. Its pods stay (they are deleted by their own events) and count
    /// again if the node comes back.
    pub fn delete_node(&mut self, name: &str) {
        if let Some(id) = self.nodes.id(name) {
            self.nodes.forget_node(id);
        }
    }

    /// Adds, updates or drops a pod. A pod counts when it is bound (`spec.nodeName`), not
    /// finished (`status.phase` neither Succeeded nor Failed) and not being deleted; any
    /// other version of it removes what an earlier version contributed.
    ///
    /// A pod whose requests do not parse is dropped too, and the error returned for the
    /// caller to log.
    pub fn apply_pod(&mut self, pod: &Pod) -> Result<(), RequestsError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match counted_requests(pod) {
            Ok(Some((node, requests))) => self.upsert_pod(namespace, name, node, requests),
            Ok(None) => self.delete_pod(namespace, name),
            Err(mut err) => {
                self.delete_pod(namespace, name);
                err.pod = Some(format!("{namespace}/{name}"));
                return Err(err);
            }
        }
        Ok(())
    }

    /// Forgets a pod.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let Some(by_name) = self.pods.get_mut(namespace) else {
            return;
        };
        if let Some(entry) = by_name.remove(name) {
            self.nodes.remove_pod(entry.node, entry.requests);
            self.pod_count -= 1;
        }
        if by_name.is_empty() {
            self.pods.remove(namespace);
        }
    }

    /// Replaces every node with `nodes` (a relist).
    pub fn replace_nodes(&mut self, nodes: impl IntoIterator<Item = Node>) {
        self.begin_node_relist();
        for node in nodes {
            self.apply_node(&node);
        }
        self.end_node_relist();
    }

    /// Replaces every pod with `pods` (a relist). Pods whose requests do not parse are left
    /// out; their errors are returned.
    pub fn replace_pods(&mut self, pods: impl IntoIterator<Item = Pod>) -> Vec<RequestsError> {
        self.begin_pod_relist();
        let errors = pods
            .into_iter()
            .filter_map(|pod| self.apply_pod(&pod).err())
            .collect();
        self.end_pod_relist();
        errors
    }

    /// Starts a streamed node relist: nodes not applied before [`Self::end_node_relist`]
    /// are then dropped.
    pub fn begin_node_relist(&mut self) {
        self.node_epoch = self.node_epoch.wrapping_add(1);
    }

    /// Drops the nodes not applied since [`Self::begin_node_relist`].
    pub fn end_node_relist(&mut self) {
        let epoch = self.node_epoch;
        for id in 0..self.nodes.slots.len() {
            let node = self.nodes.slots[id].node.as_ref();
            if node.is_some_and(|n| n.epoch != epoch) {
                // Ids are u32 by construction (see `Nodes::intern`).
                self.nodes.forget_node(id as NodeId);
            }
        }
    }

    /// Starts a streamed pod relist: pods not applied before [`Self::end_pod_relist`] are
    /// then dropped.
    pub fn begin_pod_relist(&mut self) {
        self.pod_epoch = self.pod_epoch.wrapping_add(1);
    }

    /// Drops the pods not applied since [`Self::begin_pod_relist`].
    pub fn end_pod_relist(&mut self) {
        let epoch = self.pod_epoch;
        let nodes = &mut self.nodes;
        let mut removed = 0;
        self.pods.retain(|_, by_name| {
            by_name.retain(|_, entry| {
                let keep = entry.epoch == epoch;
                if !keep {
                    nodes.remove_pod(entry.node, entry.requests);
                    removed += 1;
                }
                keep
            });
            !by_name.is_empty()
        });
        self.pod_count -= removed;
    }

    /// The cluster's free resources, in O(nodes).
    pub fn totals(&self) -> Totals {
        let mut allocatable: Sums = [0; 4];
        let mut used: Sums = [0; 4];
        let mut node_free: [Option<i128>; 4] = [None; 4];
        let mut present = Resource::ALL.map(|r| matches!(r, Resource::Cpu | Resource::Memory));
        let mut totals = Totals::default();
        for slot in &self.nodes.slots {
            let Some(node) = &slot.node else {
                continue;
            };
            if node.selected {
                for (present, amount) in present.iter_mut().zip(node.allocatable.0) {
                    *present |= amount > 0;
                }
            }
            if !node.counted {
                totals.nodes_excluded += 1;
                continue;
            }
            totals.nodes_counted += 1;
            totals.pods_counted += slot.pods;
            for i in 0..Resource::ALL.len() {
                let has = i128::from(node.allocatable.0[i]);
                allocatable[i] += has;
                used[i] += slot.used[i];
                if has > 0 {
                    let free = has - slot.used[i];
                    node_free[i] = Some(node_free[i].map_or(free, |best| best.max(free)));
                }
            }
        }
        totals.resources = std::array::from_fn(|i| ResourceTotals {
            present: present[i],
            cluster_free: saturate(allocatable[i] - used[i]),
            node_free: node_free[i].map(saturate),
        });
        totals
    }

    /// Why some allocatable was ignored, one line per malformed quantity on a known node.
    pub fn warnings(&self) -> impl Iterator<Item = &str> + '_ {
        let nodes = self.nodes.slots.iter().filter_map(|s| s.node.as_ref());
        nodes.flat_map(|n| n.warnings.iter().map(String::as_str))
    }

    /// Known node objects.
    pub fn node_count(&self) -> usize {
        self.nodes.slots.iter().filter(|s| s.node.is_some()).count()
    }

    /// Pods that count, on whatever node (known or not).
    pub fn pod_count(&self) -> usize {
        self.pod_count
    }

    fn upsert_pod(&mut self, namespace: &str, name: &str, node: &str, requests: Amounts) {
        let epoch = self.pod_epoch;
        if let Some(entry) = self.pods.get_mut(namespace).and_then(|m| m.get_mut(name)) {
            entry.epoch = epoch;
            // Most pod updates are status changes: nothing to redo.
            if entry.requests == requests && self.nodes.name(entry.node) == node {
                return;
            }
            self.nodes.remove_pod(entry.node, entry.requests);
            entry.node = self.nodes.intern(node);
            entry.requests = requests;
            self.nodes.add_pod(entry.node, requests);
            return;
        }
        let id = self.nodes.intern(node);
        self.nodes.add_pod(id, requests);
        let entry = PodEntry {
            node: id,
            requests,
            epoch,
        };
        let by_name = self.pods.entry(namespace.into()).or_default();
        by_name.insert(name.into(), entry);
        self.pod_count += 1;
    }

    #[cfg(test)]
    fn interned(&self) -> usize {
        self.nodes.ids.len()
    }
}

/// The node a pod occupies and its requests, or `None` when it occupies nothing.
fn counted_requests(pod: &Pod) -> Result<Option<(&str, Amounts)>, RequestsError> {
    let Some(spec) = &pod.spec else {
        return Ok(None);
    };
    let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) || pod.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    Ok(Some((node, pod_requests(spec)?)))
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const GI: i64 = 1 << 30;

    fn node(name: &str, allocatable: Value) -> Node {
        node_with(name, allocatable, json!({}), json!({}))
    }

    fn node_with(name: &str, allocatable: Value, labels: Value, spec: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {"allocatable": allocatable},
        }))
        .unwrap()
    }

    fn cordoned(name: &str, allocatable: Value) -> Node {
        node_with(name, allocatable, json!({}), json!({"unschedulable": true}))
    }

    fn tainted(name: &str, allocatable: Value, key: &str, effect: &str) -> Node {
        let spec = json!({"taints": [{"key": key, "effect": effect}]});
        node_with(name, allocatable, json!({}), spec)
    }

    fn pod(name: &str, node: Option<&str>, requests: Value) -> Pod {
        pod_with(name, node, requests, "Running", false)
    }

    fn pod_with(
        name: &str,
        node: Option<&str>,
        requests: Value,
        phase: &str,
        deleting: bool,
    ) -> Pod {
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

    fn index(nodes: &[Node], pods: &[Pod]) -> UsageIndex {
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
        ApplyNode(Box<Node>),
        DeleteNode(String),
        ApplyPod(Box<Pod>),
        DeletePod(String, String),
        ReplaceNodes(Vec<Node>),
        ReplacePods(Vec<Pod>),
    }

    const NODE_NAMES: [&str; 4] = ["n0", "n1", "n2", "n3"];

    fn any_node() -> impl Strategy<Value = Node> {
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

    fn any_pod() -> impl Strategy<Value = Pod> {
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
        nodes: std::collections::BTreeMap<String, Node>,
        pods: std::collections::BTreeMap<(String, String), Pod>,
    }

    fn key(p: &Pod) -> (String, String) {
        let m = &p.metadata;
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
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
}
