//! The snapshot the core schedules from: every object the scheduler reads, indexed once.
//!
//! The controller keeps one `Snapshot` up to date from its watches (`upsert_*`/`remove_*`),
//! `simulate` fills one from files; both hand it to [`crate::core::schedule`]. The indexes are
//! what makes one pass over thousands of placements cheap: clusters by exclusive clusterset
//! label, decisions by owning placement, decision counts per cluster (Balance) and each
//! cluster's scores beside the cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use jiff::{SignedDuration, Timestamp};

use ocm_api::cluster::v1beta1::PlacementDecisionStatus;
use ocm_api::selector::Selector;
use ocm_api::wellknown::{label, selector_type};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding,
    PlacementDecision,
};

use super::cel::{CelCluster, ScoreSource};

/// A cluster's name, shared between the snapshot and outcomes without copying.
pub type Name = Arc<str>;

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// One ManagedCluster with what the scheduler derives from it, computed once.
pub struct ClusterInfo {
    pub name: Name,
    pub object: Arc<ManagedCluster>,
    /// `status.clusterClaims` as a map (a duplicate name keeps the last value, as upstream).
    pub claims: BTreeMap<String, String>,
    /// Allocatable CPU and memory, present only when both allocatable and capacity are set
    /// and parse (ResourceAllocatable* skip the others).
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
    pub terminating: bool,
    /// Its place in the snapshot's slab (stable while the cluster exists).
    pub slot: usize,
    /// Decision entries naming it across all namespaces (a mirror for Balance).
    pub decisions: u32,
    /// This cluster's AddOnPlacementScores (a mirror of the snapshot's score index), with
    /// their names interned so that the AddOn prioritizer compares integers.
    scores: Vec<ScoreEntry>,
    cel: OnceLock<CelCluster>,
}

impl ClusterInfo {
    fn new(object: Arc<ManagedCluster>) -> Self {
        let name: Name = object.metadata.name.as_deref().unwrap_or_default().into();
        let claims = object
            .status
            .as_ref()
            .map(|s| {
                s.cluster_claims
                    .iter()
                    .map(|c| (c.name.clone(), c.value.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let resource = |r: &str| {
            let status = object.status.as_ref()?;
            status.capacity.get(r)?;
            ocm_api::quantity::parse(&status.allocatable.get(r)?.0).ok()
        };
        Self {
            cpu: resource("cpu"),
            memory: resource("memory"),
            terminating: object.metadata.deletion_timestamp.is_some(),
            slot: 0,
            decisions: 0,
            name,
            claims,
            scores: Vec::new(),
            cel: OnceLock::new(),
            object,
        }
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.object.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
    }

    pub fn taints(&self) -> &[ocm_api::Taint] {
        &self.object.spec.taints
    }

    /// The AddOnPlacementScore `<this cluster>/<resource>`.
    pub fn score(&self, resource: &str) -> Option<&AddOnPlacementScore> {
        self.scores
            .iter()
            .find(|s| s.object.metadata.name.as_deref() == Some(resource))
            .map(|s| &*s.object)
    }

    /// The score object with interned name `resource`.
    pub fn score_entry(&self, resource: u32) -> Option<&ScoreEntry> {
        self.scores.iter().find(|s| s.resource == resource)
    }

    /// The cluster as CEL sees it, converted on first use.
    pub fn cel(&self) -> &CelCluster {
        self.cel.get_or_init(|| CelCluster::new(&self.object))
    }

    /// The value of a topology key (a label or a claim).
    pub fn topology_value(&self, key: &str, claim: bool) -> Option<&str> {
        if claim {
            self.claims.get(key).map(String::as_str)
        } else {
            self.labels().get(key).map(String::as_str)
        }
    }
}

/// One AddOnPlacementScore of a cluster, pre-digested.
pub struct ScoreEntry {
    pub object: Arc<AddOnPlacementScore>,
    /// Interned `metadata.name` (see [`Snapshot::name_id`]).
    pub resource: u32,
    /// Interned item names and their values, in the object's order.
    pub items: Vec<(u32, i32)>,
    pub valid_until: Option<jiff::Timestamp>,
    /// When the controller saw this version of the object (`None`: from a file, or unknown).
    pub observed_at: Option<Timestamp>,
}

/// The default of [`Snapshot::max_score_validity`].
pub const DEFAULT_MAX_SCORE_VALIDITY: SignedDuration = SignedDuration::from_mins(10);

/// How long after it was observed a score may stay valid, whatever its `validUntil` says
/// (`None`: as long as `validUntil` says, upstream's behaviour).
///
/// `validUntil` is written by the score's provider, often a managed cluster the hub does not
/// trust: a `validUntil` years ahead (or none, which upstream reads as "never expires") would
/// freeze a score after its provider stopped. The bound counts from when the scheduler
/// observed the object's current version, a time the provider cannot set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxScoreValidity(pub Option<SignedDuration>);

impl MaxScoreValidity {
    /// A flag's duration; zero turns the bound off (upstream's behaviour).
    pub fn from_duration(d: std::time::Duration) -> Self {
        if d.is_zero() {
            Self(None)
        } else {
            Self(Some(
                SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX),
            ))
        }
    }
}

impl Default for MaxScoreValidity {
    fn default() -> Self {
        Self(Some(DEFAULT_MAX_SCORE_VALIDITY))
    }
}

/// One cluster's cell of a [`ScoreColumn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreCell {
    /// The item's value (the last one with the name), `None` if absent.
    pub value: Option<i32>,
    /// The object's `validUntil`, as written.
    pub valid_until: Option<Timestamp>,
    /// See [`ScoreEntry::observed_at`].
    pub observed_at: Option<Timestamp>,
}

/// A topology key's value for every cluster slot, as small integers (computed once per
/// snapshot state, shared by every placement that spreads over the key).
#[derive(Debug, Default)]
pub struct Topology {
    /// Domain id per slot; [`Topology::NONE`] where the cluster lacks the key.
    pub domain_of_slot: Vec<u32>,
    /// Domain names by id.
    pub domains: Vec<String>,
}

impl Topology {
    pub const NONE: u32 = u32::MAX;
}

/// One score item (`<resource>/<item>`) for every cluster slot.
#[derive(Debug, Default)]
pub struct ScoreColumn {
    /// Per slot: `None` without a score object.
    pub by_slot: Vec<Option<ScoreCell>>,
}

/// What a clusterset's membership resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetMembers {
    /// Slots of the member clusters, in name order.
    Members(Arc<Vec<usize>>),
    /// The set's selector cannot be evaluated (an unknown selector type or a bad selector).
    Invalid(String),
}

/// Every object the scheduler reads.
#[derive(Default)]
pub struct Snapshot {
    /// Clusters in a slab: slots are stable, so indexes and per-pass arrays use them.
    slots: Vec<Option<ClusterInfo>>,
    free: Vec<usize>,
    /// name -> slot, in name order
    clusters: BTreeMap<Name, usize>,
    /// exclusive clusterset label value -> members (name -> slot)
    by_set_label: HashMap<String, BTreeMap<Name, usize>>,
    sets: BTreeMap<String, Arc<ManagedClusterSet>>,
    /// namespace -> binding names
    bindings: BTreeMap<String, BTreeSet<String>>,
    /// cluster namespace -> score name -> score
    scores: HashMap<String, BTreeMap<String, Arc<AddOnPlacementScore>>>,
    /// cluster namespace -> score name -> when the controller observed its current version
    score_observed: HashMap<String, BTreeMap<String, Timestamp>>,
    max_score_validity: MaxScoreValidity,
    /// The limits of one pass (CEL budget, list items).
    limits: super::limits::Limits,
    /// namespace -> name -> decision
    decisions: BTreeMap<String, BTreeMap<String, Arc<PlacementDecision>>>,
    /// (namespace, placement label) -> decision names
    decisions_by_placement: HashMap<(String, String), BTreeSet<String>>,
    /// cluster name -> number of decision entries naming it, across all namespaces (Balance)
    decision_counts: HashMap<String, u32>,
    /// count -> number of cluster names with that count (for the maximum, excluding one placement)
    count_histogram: BTreeMap<u32, u32>,
    /// Interned score and score-item names.
    names: HashMap<String, u32>,
    /// Membership of sets, computed on first use, cleared when clusters or sets change.
    membership: Mutex<HashMap<String, SetMembers>>,
    /// Topology keys, computed on first use, cleared when clusters change.
    topologies: Mutex<HashMap<(String, bool), Arc<Topology>>>,
    /// Score items, computed on first use, cleared when clusters or scores change.
    columns: Mutex<HashMap<(String, String), Arc<ScoreColumn>>>,
}

impl Snapshot {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn upsert_cluster(&mut self, cluster: Arc<ManagedCluster>) {
        let mut info = ClusterInfo::new(cluster);
        self.remove_cluster(&info.name);
        info.scores = self.score_entries(&info.name);
        info.decisions = self.decision_counts.get(&*info.name).copied().unwrap_or(0);
        let slot = self.free.pop().unwrap_or(self.slots.len());
        info.slot = slot;
        if let Some(set) = info.labels().get(label::CLUSTERSET) {
            self.by_set_label
                .entry(set.clone())
                .or_default()
                .insert(info.name.clone(), slot);
        }
        self.clusters.insert(info.name.clone(), slot);
        if slot == self.slots.len() {
            self.slots.push(Some(info));
        } else {
            self.slots[slot] = Some(info);
        }
        self.invalidate_membership();
    }

    pub fn remove_cluster(&mut self, name: &str) {
        let Some(slot) = self.clusters.remove(name) else {
            return;
        };
        if let Some(old) = self.slots.get_mut(slot).and_then(Option::take) {
            if let Some(set) = old.labels().get(label::CLUSTERSET)
                && let Some(members) = self.by_set_label.get_mut(set)
            {
                members.remove(name);
            }
            self.free.push(slot);
        }
        self.invalidate_membership();
    }

    pub fn upsert_set(&mut self, set: Arc<ManagedClusterSet>) {
        let name = set.metadata.name.clone().unwrap_or_default();
        self.sets.insert(name, set);
        self.invalidate_membership();
    }

    pub fn remove_set(&mut self, name: &str) {
        self.sets.remove(name);
        self.invalidate_membership();
    }

    pub fn upsert_binding(&mut self, binding: &ManagedClusterSetBinding) {
        let ns = binding.metadata.namespace.clone().unwrap_or_default();
        let name = binding.metadata.name.clone().unwrap_or_default();
        self.bindings.entry(ns).or_default().insert(name);
    }

    pub fn remove_binding(&mut self, namespace: &str, name: &str) {
        if let Some(b) = self.bindings.get_mut(namespace) {
            b.remove(name);
        }
    }

    /// A score whose observation time is unknown (a file): the validity bound counts from
    /// the scheduling time, see [`Snapshot::upsert_score_observed`].
    pub fn upsert_score(&mut self, score: Arc<AddOnPlacementScore>) {
        self.upsert_score_at(score, None);
    }

    /// A score as the controller observed it at `observed_at` (this version of the object):
    /// its validity ends at most [`Snapshot::max_score_validity`] later.
    pub fn upsert_score_observed(
        &mut self,
        score: Arc<AddOnPlacementScore>,
        observed_at: Timestamp,
    ) {
        self.upsert_score_at(score, Some(observed_at));
    }

    fn upsert_score_at(&mut self, score: Arc<AddOnPlacementScore>, observed_at: Option<Timestamp>) {
        let ns = score.metadata.namespace.clone().unwrap_or_default();
        let name = score.metadata.name.clone().unwrap_or_default();
        let observed = self.score_observed.entry(ns.clone()).or_default();
        match observed_at {
            Some(at) => observed.insert(name.clone(), at),
            None => observed.remove(&name),
        };
        self.scores
            .entry(ns.clone())
            .or_default()
            .insert(name, score);
        self.mirror_scores(&ns);
        self.invalidate_columns();
    }

    /// When the current version of a score was observed (`None`: unknown).
    pub fn score_observed_at(&self, cluster: &str, name: &str) -> Option<Timestamp> {
        self.score_observed.get(cluster)?.get(name).copied()
    }

    /// See [`MaxScoreValidity`]; the default is [`DEFAULT_MAX_SCORE_VALIDITY`].
    pub fn set_max_score_validity(&mut self, bound: MaxScoreValidity) {
        self.max_score_validity = bound;
    }

    pub fn max_score_validity(&self) -> MaxScoreValidity {
        self.max_score_validity
    }

    /// See [`super::limits::Limits`]; the default is `Limits::default()`.
    pub fn set_limits(&mut self, limits: super::limits::Limits) {
        self.limits = limits;
    }

    pub fn limits(&self) -> super::limits::Limits {
        self.limits
    }

    pub fn remove_score(&mut self, namespace: &str, name: &str) {
        if let Some(s) = self.scores.get_mut(namespace) {
            s.remove(name);
        }
        if let Some(s) = self.score_observed.get_mut(namespace) {
            s.remove(name);
        }
        self.mirror_scores(namespace);
        self.invalidate_columns();
    }

    fn mirror_scores(&mut self, cluster: &str) {
        let entries = self.score_entries(cluster);
        if let Some(info) = self
            .clusters
            .get(cluster)
            .and_then(|&i| self.slots[i].as_mut())
        {
            info.scores = entries;
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.names.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.insert(name.to_owned(), id);
        id
    }

    /// The interned id of a score or score-item name; `None` if no score uses it.
    pub fn name_id(&self, name: &str) -> Option<u32> {
        self.names.get(name).copied()
    }

    fn score_entries(&mut self, cluster: &str) -> Vec<ScoreEntry> {
        let objects: Vec<Arc<AddOnPlacementScore>> = self
            .scores
            .get(cluster)
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        let observed = self
            .score_observed
            .get(cluster)
            .cloned()
            .unwrap_or_default();
        objects
            .into_iter()
            .map(|object| {
                let name = object.metadata.name.as_deref().unwrap_or_default();
                let observed_at = observed.get(name).copied();
                let resource = self.intern(name);
                let status = object.status.clone().unwrap_or_default();
                let items = status
                    .scores
                    .iter()
                    .map(|i| (self.intern(&i.name), i.value))
                    .collect();
                ScoreEntry {
                    resource,
                    items,
                    valid_until: status.valid_until.map(|t| t.0),
                    observed_at,
                    object,
                }
            })
            .collect()
    }

    pub fn upsert_decision(&mut self, decision: Arc<PlacementDecision>) {
        let ns = decision.metadata.namespace.clone().unwrap_or_default();
        let name = decision.metadata.name.clone().unwrap_or_default();
        self.remove_decision(&ns, &name);
        self.count(&decision, true);
        if let Some(p) = placement_label(&decision) {
            self.decisions_by_placement
                .entry((ns.clone(), p.to_owned()))
                .or_default()
                .insert(name.clone());
        }
        self.decisions.entry(ns).or_default().insert(name, decision);
    }

    pub fn remove_decision(&mut self, namespace: &str, name: &str) {
        let Some(old) = self
            .decisions
            .get_mut(namespace)
            .and_then(|d| d.remove(name))
        else {
            return;
        };
        self.count(&old, false);
        if let Some(p) = placement_label(&old) {
            let key = (namespace.to_owned(), p.to_owned());
            if let Some(names) = self.decisions_by_placement.get_mut(&key) {
                names.remove(name);
                if names.is_empty() {
                    self.decisions_by_placement.remove(&key);
                }
            }
        }
    }

    fn count(&mut self, decision: &PlacementDecision, add: bool) {
        for d in decision_entries(decision) {
            let c = self
                .decision_counts
                .entry(d.cluster_name.clone())
                .or_insert(0);
            if *c > 0 {
                dec_histogram(&mut self.count_histogram, *c);
            }
            *c = if add { *c + 1 } else { c.saturating_sub(1) };
            let now = *c;
            if now > 0 {
                *self.count_histogram.entry(now).or_insert(0) += 1;
            } else {
                self.decision_counts.remove(&d.cluster_name);
            }
            if let Some(info) = self
                .clusters
                .get(d.cluster_name.as_str())
                .and_then(|&i| self.slots[i].as_mut())
            {
                info.decisions = now;
            }
        }
    }

    fn invalidate_membership(&mut self) {
        if let Ok(m) = self.membership.get_mut() {
            m.clear();
        }
        if let Ok(t) = self.topologies.get_mut() {
            t.clear();
        }
        self.invalidate_columns();
    }

    fn invalidate_columns(&mut self) {
        if let Ok(c) = self.columns.get_mut() {
            c.clear();
        }
    }

    /// Drops every derived cache (benchmarks use it to measure a cold pass).
    pub fn clear_caches(&mut self) {
        self.invalidate_membership();
    }

    /// The domains of a topology key over all clusters.
    pub fn topology(&self, key: &str, claim: bool) -> Arc<Topology> {
        let cache_key = (key.to_owned(), claim);
        if let Ok(cache) = self.topologies.lock()
            && let Some(t) = cache.get(&cache_key)
        {
            return t.clone();
        }
        let mut t = Topology {
            domain_of_slot: vec![Topology::NONE; self.slots.len()],
            domains: Vec::new(),
        };
        let mut ids: HashMap<&str, u32> = HashMap::new();
        for c in self.clusters() {
            if let Some(v) = c.topology_value(key, claim) {
                let next = u32::try_from(t.domains.len()).unwrap_or(Topology::NONE);
                let id = *ids.entry(v).or_insert(next);
                if id == next {
                    t.domains.push(v.to_owned());
                }
                t.domain_of_slot[c.slot] = id;
            }
        }
        let t = Arc::new(t);
        if let Ok(mut cache) = self.topologies.lock() {
            cache.insert(cache_key, t.clone());
        }
        t
    }

    /// One score item of every cluster.
    pub fn score_column(&self, resource: &str, item: &str) -> Arc<ScoreColumn> {
        let cache_key = (resource.to_owned(), item.to_owned());
        if let Ok(cache) = self.columns.lock()
            && let Some(c) = cache.get(&cache_key)
        {
            return c.clone();
        }
        let mut col = ScoreColumn {
            by_slot: vec![None; self.slots.len()],
        };
        if let Some(r) = self.name_id(resource) {
            let item = self.name_id(item);
            for c in self.clusters() {
                if let Some(e) = c.score_entry(r) {
                    let value = item.and_then(|id| {
                        e.items
                            .iter()
                            .rev()
                            .find(|(n, _)| *n == id)
                            .map(|(_, v)| *v)
                    });
                    col.by_slot[c.slot] = Some(ScoreCell {
                        value,
                        valid_until: e.valid_until,
                        observed_at: e.observed_at,
                    });
                }
            }
        }
        let col = Arc::new(col);
        if let Ok(mut cache) = self.columns.lock() {
            cache.insert(cache_key, col.clone());
        }
        col
    }

    pub fn cluster(&self, name: &str) -> Option<&ClusterInfo> {
        self.clusters.get(name).and_then(|&i| self.slot(i))
    }

    /// The cluster in a slot (see [`ClusterInfo::slot`]).
    pub fn slot(&self, slot: usize) -> Option<&ClusterInfo> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    /// The number of slots: every [`ClusterInfo::slot`] is below it.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// All clusters in name order.
    pub fn clusters(&self) -> impl Iterator<Item = &ClusterInfo> {
        self.clusters.values().filter_map(|&i| self.slot(i))
    }

    pub fn cluster_count(&self) -> usize {
        self.clusters.len()
    }

    pub fn set(&self, name: &str) -> Option<&ManagedClusterSet> {
        self.sets.get(name).map(|s| &**s)
    }

    /// Binding names in a namespace, sorted.
    pub fn bindings(&self, namespace: &str) -> impl Iterator<Item = &str> {
        self.bindings
            .get(namespace)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    pub fn score(&self, cluster: &str, name: &str) -> Option<&AddOnPlacementScore> {
        self.scores.get(cluster)?.get(name).map(|s| &**s)
    }

    /// The PlacementDecisions carrying `placement=<name>` in a namespace, by name.
    pub fn decisions_of(&self, namespace: &str, placement: &str) -> Vec<&PlacementDecision> {
        let Some(names) = self
            .decisions_by_placement
            .get(&(namespace.to_owned(), placement.to_owned()))
        else {
            return Vec::new();
        };
        let in_ns = self.decisions.get(namespace);
        names
            .iter()
            .filter_map(|n| in_ns.and_then(|d| d.get(n)).map(|d| &**d))
            .collect()
    }

    /// Names of all ManagedClusterSets.
    pub fn set_names(&self) -> Vec<String> {
        self.sets.keys().cloned().collect()
    }

    /// `(namespace, name)` of all bindings.
    pub fn binding_keys(&self) -> Vec<(String, String)> {
        self.bindings
            .iter()
            .flat_map(|(ns, names)| names.iter().map(move |n| (ns.clone(), n.clone())))
            .collect()
    }

    /// `(namespace, name)` of all AddOnPlacementScores.
    pub fn score_keys(&self) -> Vec<(String, String)> {
        self.scores
            .iter()
            .flat_map(|(ns, names)| names.keys().map(move |n| (ns.clone(), n.clone())))
            .collect()
    }

    /// `(namespace, name)` of all PlacementDecisions.
    pub fn decision_keys(&self) -> Vec<(String, String)> {
        self.decisions
            .iter()
            .flat_map(|(ns, names)| names.keys().map(move |n| (ns.clone(), n.clone())))
            .collect()
    }

    /// Object counts by kind (for metrics).
    pub fn counts(&self) -> [(&'static str, usize); 5] {
        [
            ("ManagedCluster", self.clusters.len()),
            ("ManagedClusterSet", self.sets.len()),
            (
                "ManagedClusterSetBinding",
                self.bindings.values().map(BTreeSet::len).sum(),
            ),
            (
                "AddOnPlacementScore",
                self.scores.values().map(BTreeMap::len).sum(),
            ),
            (
                "PlacementDecision",
                self.decisions.values().map(BTreeMap::len).sum(),
            ),
        ]
    }

    /// One PlacementDecision.
    pub fn decision(&self, namespace: &str, name: &str) -> Option<Arc<PlacementDecision>> {
        self.decisions.get(namespace)?.get(name).cloned()
    }

    /// Decision entries naming `cluster` across every namespace.
    pub fn decision_count(&self, cluster: &str) -> u32 {
        self.decision_counts.get(cluster).copied().unwrap_or(0)
    }

    /// The largest per-cluster decision count after taking away `own` (cluster -> entries of
    /// one placement), without walking every cluster.
    pub fn max_decision_count_excluding(&self, own: &HashMap<&str, u32>) -> u32 {
        let mut best = 0;
        // Clusters this placement touches: their counts drop by its share.
        let mut touched_at: HashMap<u32, u32> = HashMap::new();
        for (cluster, n) in own {
            let global = self.decision_count(cluster);
            best = best.max(global.saturating_sub(*n));
            if global > 0 {
                *touched_at.entry(global).or_insert(0) += 1;
            }
        }
        // The highest count held by some cluster this placement does not touch.
        for (count, clusters) in self.count_histogram.iter().rev() {
            if *count <= best {
                break;
            }
            if *clusters > touched_at.get(count).copied().unwrap_or(0) {
                best = *count;
                break;
            }
        }
        best
    }

    /// The clustersets whose selector matches a cluster object (it need not be in the
    /// snapshot: the controller asks about the old and the new version of a changed cluster).
    /// A set with an unreadable selector counts as containing it, so nothing is missed.
    pub fn sets_containing(&self, cluster: &ManagedCluster) -> Vec<&str> {
        let labels = cluster.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        self.sets
            .iter()
            .filter(|(name, set)| {
                let sel = &set.spec.cluster_selector;
                match sel.selector_type.as_str() {
                    "" | selector_type::EXCLUSIVE_CLUSTERSET_LABEL => {
                        labels.get(label::CLUSTERSET) == Some(*name)
                    }
                    selector_type::LABEL_SELECTOR => match &sel.label_selector {
                        None => false,
                        Some(ls) => {
                            Selector::from_label_selector(ls).is_ok_and(|s| s.matches(labels))
                                || Selector::from_label_selector(ls).is_err()
                        }
                    },
                    _ => true,
                }
            })
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The namespaces with a binding named `set`.
    pub fn namespaces_binding(&self, set: &str) -> Vec<&str> {
        self.bindings
            .iter()
            .filter(|(_, names)| names.contains(set))
            .map(|(ns, _)| ns.as_str())
            .collect()
    }

    /// The members of a clusterset (slots, in name order), or why they cannot be known.
    pub fn members(&self, set_name: &str) -> SetMembers {
        let Some(set) = self.sets.get(set_name) else {
            return SetMembers::Members(Arc::default());
        };
        if let Ok(cache) = self.membership.lock()
            && let Some(m) = cache.get(set_name)
        {
            return m.clone();
        }
        let selector = &set.spec.cluster_selector;
        let members = match selector.selector_type.as_str() {
            "" | selector_type::EXCLUSIVE_CLUSTERSET_LABEL => SetMembers::Members(Arc::new(
                self.by_set_label
                    .get(set_name)
                    .map(|m| m.values().copied().collect())
                    .unwrap_or_default(),
            )),
            selector_type::LABEL_SELECTOR => match &selector.label_selector {
                // A nil selector matches nothing; `{}` matches every cluster.
                None => SetMembers::Members(Arc::default()),
                Some(ls) => match Selector::from_label_selector(ls) {
                    Ok(sel) => SetMembers::Members(Arc::new(
                        self.clusters()
                            .filter(|c| sel.matches(c.labels()))
                            .map(|c| c.slot)
                            .collect(),
                    )),
                    Err(e) => SetMembers::Invalid(e.to_string()),
                },
            },
            other => SetMembers::Invalid(format!("unsupported SelectorType {other}")),
        };
        if let Ok(mut cache) = self.membership.lock() {
            cache.insert(set_name.to_owned(), members.clone());
        }
        members
    }
}

fn dec_histogram(h: &mut BTreeMap<u32, u32>, count: u32) {
    if let Some(n) = h.get_mut(&count) {
        *n -= 1;
        if *n == 0 {
            h.remove(&count);
        }
    }
}

fn placement_label(d: &PlacementDecision) -> Option<&str> {
    d.metadata
        .labels
        .as_ref()?
        .get(label::PLACEMENT)
        .map(String::as_str)
}

/// The entries of a decision's status (none when it has no status).
pub fn decision_entries(d: &PlacementDecision) -> impl Iterator<Item = &ocm_api::ClusterDecision> {
    d.status
        .as_ref()
        .map(|s: &PlacementDecisionStatus| s.decisions.as_slice())
        .unwrap_or_default()
        .iter()
}

impl ScoreSource for Snapshot {
    fn scores(
        &self,
        cluster: &str,
        resource_name: &str,
    ) -> Option<Vec<ocm_api::AddOnPlacementScoreItem>> {
        self.score(cluster, resource_name).map(|s| {
            s.status
                .as_ref()
                .map(|st| st.scores.clone())
                .unwrap_or_default()
        })
    }
}
