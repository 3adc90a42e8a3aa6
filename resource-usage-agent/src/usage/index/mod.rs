//! The cluster's nodes and bound pods, reduced to what the scores need and kept up to date
//! event by event.
//!
//! The agent watches every pod in the cluster and must stay small (under 50 MB with 30,000
//! pods), so nothing here keeps an object: a node is its allocatable amounts and two flags, a
//! pod is the node it is bound to (an interned id) and its effective requests. Each node keeps
//! the running sum of its pods' requests, so an event costs O(1) and [`UsageIndex::totals`]
//! costs O(nodes) whatever the number of pods.
//!
//! Upstream (open-cluster-management-io/addon-contrib
//! `resource-usage-collect-addon/pkg/addon/agent/calculate.go`) recomputes everything from its
//! informer caches once a minute, listing all pods for every node and resource, and its
//! per-node sums drop init containers by mistake (it compares an init container's request with
//! the running total of the whole node, not of the pod).

use std::collections::HashMap;
use std::ops::Index;

use ocm_api::score::resource_usage::Resource;
use ocm_api::selector::{NoLabels, Selector};

use super::requests::{Amounts, RequestsError, pod_requests};
use super::slim::{SlimNode, SlimPod};

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

    fn selects(&self, node: &SlimNode) -> bool {
        let Some(selector) = &self.selector else {
            return true;
        };
        match &node.metadata.labels {
            Some(labels) => selector.matches(labels),
            None => selector.matches(&NoLabels),
        }
    }

    fn has_excluded_taint(&self, node: &SlimNode) -> bool {
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
    fn new(name: &str, node: &SlimNode, filter: &NodeFilter, epoch: u32) -> Self {
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
fn allocatable(name: &str, node: &SlimNode) -> (Amounts, Vec<String>) {
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
    pub fn apply_node(&mut self, node: &SlimNode) {
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
    pub fn apply_pod(&mut self, pod: &SlimPod) -> Result<(), RequestsError> {
        let (namespace, name) = pod.key();
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
    pub fn replace_nodes(&mut self, nodes: impl IntoIterator<Item = SlimNode>) {
        self.begin_node_relist();
        for node in nodes {
            self.apply_node(&node);
        }
        self.end_node_relist();
    }

    /// Replaces every pod with `pods` (a relist). Pods whose requests do not parse are left
    /// out; their errors are returned.
    pub fn replace_pods(&mut self, pods: impl IntoIterator<Item = SlimPod>) -> Vec<RequestsError> {
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
fn counted_requests(pod: &SlimPod) -> Result<Option<(&str, Amounts)>, RequestsError> {
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
mod tests;
