//! The snapshot the core schedules from: every object the scheduler reads, indexed once.
//!
//! The controller keeps one `Snapshot` up to date from its watches (`upsert_*`/`remove_*`),
//! `simulate` fills one from files; both hand it to [`crate::core::schedule`]. The indexes are
//! what makes one pass over thousands of placements cheap: clusters by exclusive clusterset
//! label, decisions by owning placement, decision counts per cluster (Balance) and each
//! cluster's scores beside the cluster.
//!
//! A `Snapshot` is cheap to clone: each index sits behind an `Arc` and is copied only when a
//! clone changes it (`Arc::make_mut`), clusters are shared `Arc<ClusterInfo>`s, and the lazily
//! computed caches are shared until a change invalidates them. The controller schedules from
//! an `Arc<Snapshot>` while its watches change a copy, so no lock is held during a pass.

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
use cow::{Chunked, ShardedMap};

/// A cluster's name, shared between the snapshot and outcomes without copying.
pub type Name = Arc<str>;

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// One ManagedCluster with what the scheduler derives from it, computed once.
#[derive(Clone)]
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
    /// Shared by the copies of this info (they hold the same object).
    cel: Arc<OnceLock<CelCluster>>,
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
            cel: Arc::default(),
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
#[derive(Clone)]
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

/// A lazily filled cache, shared by the clones of a snapshot until one of them changes what
/// it derives from (that clone then starts an empty one).
type Cache<K, V> = Arc<Mutex<HashMap<K, V>>>;

/// `(namespace, name)`.
type NsName = (String, String);

/// One namespace's objects by name (shared until changed).
type ByName<T> = Arc<BTreeMap<String, T>>;

/// Every object the scheduler reads.
///
/// Every index is behind an `Arc` (copied on the first change after a clone); those with an
/// entry per cluster, score or placement are sharded or chunked (see [`cow`]), so that the copy
/// a change after a clone makes is a small part of the index.
#[derive(Clone, Default)]
pub struct Snapshot {
    /// Clusters in a slab: slots are stable, so indexes and per-pass arrays use them.
    slots: Chunked<Arc<ClusterInfo>>,
    free: Arc<Vec<usize>>,
    /// name -> slot, in name order
    clusters: Arc<BTreeMap<Name, usize>>,
    /// exclusive clusterset label value -> members (name -> slot)
    by_set_label: Arc<HashMap<String, Arc<BTreeMap<Name, usize>>>>,
    sets: Arc<BTreeMap<String, Arc<ManagedClusterSet>>>,
    /// namespace -> binding names
    bindings: Arc<BTreeMap<String, BTreeSet<String>>>,
    /// cluster namespace -> score name -> score
    scores: ShardedMap<Name, ByName<Arc<AddOnPlacementScore>>>,
    /// cluster namespace -> score name -> when the controller observed its current version
    score_observed: ShardedMap<Name, ByName<Timestamp>>,
    max_score_validity: MaxScoreValidity,
    /// The limits of one pass (CEL budget, list items).
    limits: super::limits::Limits,
    /// (namespace, name) -> decision. Sharded by both: one namespace may hold 10,000
    /// decisions, and a change after a clone copies one shard, not the namespace's.
    decisions: ShardedMap<NsName, Arc<PlacementDecision>>,
    /// (namespace, placement label) -> decision names
    decisions_by_placement: ShardedMap<Arc<NsName>, Arc<BTreeSet<String>>>,
    /// cluster name -> number of decision entries naming it, across all namespaces (Balance)
    decision_counts: ShardedMap<Name, u32>,
    /// count -> number of cluster names with that count (for the maximum, excluding one placement)
    count_histogram: Arc<BTreeMap<u32, u32>>,
    /// Interned score and score-item names.
    names: Arc<HashMap<String, u32>>,
    /// Membership of sets, computed on first use, dropped when clusters or sets change.
    membership: Cache<String, SetMembers>,
    /// Topology keys, computed on first use, dropped when clusters change.
    topologies: Cache<(String, bool), Arc<Topology>>,
    /// Score items, computed on first use, dropped when clusters or scores change.
    columns: Cache<(String, String), Arc<ScoreColumn>>,
}

impl Snapshot {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn upsert_cluster(&mut self, cluster: Arc<ManagedCluster>) {
        let mut info = ClusterInfo::new(cluster);
        info.scores = self.score_entries(&info.name);
        info.decisions = self.decision_counts.get(&*info.name).copied().unwrap_or(0);
        let set = info.labels().get(label::CLUSTERSET).cloned();
        if let Some(&slot) = self.clusters.get(&info.name) {
            // An update keeps its slot and name: only the clusterset index may change.
            let old_set = self
                .slot(slot)
                .and_then(|o| o.labels().get(label::CLUSTERSET).cloned());
            if old_set != set {
                self.unindex_set_label(old_set.as_deref(), &info.name);
                self.index_set_label(set, &info.name, slot);
            }
            info.slot = slot;
            self.slots.set(slot, Some(Arc::new(info)));
            self.invalidate_membership();
            return;
        }
        let slot = Arc::make_mut(&mut self.free)
            .pop()
            .unwrap_or(self.slots.len());
        info.slot = slot;
        self.index_set_label(set, &info.name, slot);
        Arc::make_mut(&mut self.clusters).insert(info.name.clone(), slot);
        self.slots.set(slot, Some(Arc::new(info)));
        self.invalidate_membership();
    }

    fn index_set_label(&mut self, set: Option<String>, name: &Name, slot: usize) {
        if let Some(set) = set {
            let members = Arc::make_mut(&mut self.by_set_label)
                .entry(set)
                .or_default();
            Arc::make_mut(members).insert(name.clone(), slot);
        }
    }

    fn unindex_set_label(&mut self, set: Option<&str>, name: &str) {
        if let Some(set) = set
            && self.by_set_label.contains_key(set)
            && let Some(members) = Arc::make_mut(&mut self.by_set_label).get_mut(set)
        {
            Arc::make_mut(members).remove(name);
        }
    }

    pub fn remove_cluster(&mut self, name: &str) {
        if !self.clusters.contains_key(name) {
            return;
        }
        let Some(slot) = Arc::make_mut(&mut self.clusters).remove(name) else {
            return;
        };
        if let Some(old) = self.slots.take(slot) {
            self.unindex_set_label(
                old.labels().get(label::CLUSTERSET).map(String::as_str),
                name,
            );
            Arc::make_mut(&mut self.free).push(slot);
        }
        self.invalidate_membership();
    }

    /// The cluster in a slot, for a change (copied first if another snapshot shares it).
    fn slot_mut(&mut self, slot: usize) -> Option<&mut ClusterInfo> {
        self.slots.get_mut(slot).map(Arc::make_mut)
    }

    pub fn upsert_set(&mut self, set: Arc<ManagedClusterSet>) {
        let name = set.metadata.name.clone().unwrap_or_default();
        Arc::make_mut(&mut self.sets).insert(name, set);
        self.invalidate_membership();
    }

    pub fn remove_set(&mut self, name: &str) {
        Arc::make_mut(&mut self.sets).remove(name);
        self.invalidate_membership();
    }

    pub fn upsert_binding(&mut self, binding: &ManagedClusterSetBinding) {
        let ns = binding.metadata.namespace.clone().unwrap_or_default();
        let name = binding.metadata.name.clone().unwrap_or_default();
        Arc::make_mut(&mut self.bindings)
            .entry(ns)
            .or_default()
            .insert(name);
    }

    pub fn remove_binding(&mut self, namespace: &str, name: &str) {
        if self
            .bindings
            .get(namespace)
            .is_some_and(|b| b.contains(name))
            && let Some(b) = Arc::make_mut(&mut self.bindings).get_mut(namespace)
        {
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
        let ns: Name = score
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default()
            .into();
        let name = score.metadata.name.clone().unwrap_or_default();
        let observed = Arc::make_mut(self.score_observed.get_or_default(ns.clone()));
        match observed_at {
            Some(at) => observed.insert(name.clone(), at),
            None => observed.remove(&name),
        };
        Arc::make_mut(self.scores.get_or_default(ns.clone())).insert(name, score);
        self.mirror_scores(&ns);
        self.invalidate_columns();
    }

    /// When the current version of a score was observed (`None`: unknown).
    pub fn score_observed_at(&self, cluster: &str, name: &str) -> Option<Timestamp> {
        self.score_observed.get(cluster)?.get(name).copied()
    }

    /// See [`MaxScoreValidity`]; the default is [`DEFAULT_MAX_SCORE_VALIDITY`].
    pub fn set_max_score_validity(&mut self, bound: MaxScoreValidity) {
        if self.max_score_validity != bound {
            // Columns carry no bound, but keep the rule simple: a new input, fresh caches.
            self.invalidate_columns();
        }
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
        if self.score(namespace, name).is_none() {
            return;
        }
        if let Some(s) = self.scores.get_mut(namespace) {
            Arc::make_mut(s).remove(name);
        }
        if let Some(s) = self.score_observed.get_mut(namespace) {
            Arc::make_mut(s).remove(name);
        }
        self.mirror_scores(namespace);
        self.invalidate_columns();
    }

    fn mirror_scores(&mut self, cluster: &str) {
        let entries = self.score_entries(cluster);
        if let Some(&slot) = self.clusters.get(cluster)
            && let Some(info) = self.slot_mut(slot)
        {
            info.scores = entries;
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.names.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        Arc::make_mut(&mut self.names).insert(name.to_owned(), id);
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
        let observed = &*observed;
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
            let names = self
                .decisions_by_placement
                .get_or_default(Arc::new((ns.clone(), p.to_owned())));
            Arc::make_mut(names).insert(name.clone());
        }
        self.decisions.insert((ns, name), decision);
    }

    pub fn remove_decision(&mut self, namespace: &str, name: &str) {
        let Some(old) = self
            .decisions
            .remove(&(namespace.to_owned(), name.to_owned()))
        else {
            return;
        };
        self.count(&old, false);
        if let Some(p) = placement_label(&old) {
            let key = (namespace.to_owned(), p.to_owned());
            if let Some(names) = self.decisions_by_placement.get_mut(&key) {
                let names = Arc::make_mut(names);
                names.remove(name);
                if names.is_empty() {
                    self.decisions_by_placement.remove(&key);
                }
            }
        }
    }

    fn count(&mut self, decision: &PlacementDecision, add: bool) {
        for d in decision_entries(decision) {
            let name = d.cluster_name.as_str();
            let before = self.decision_count(name);
            let now = if add {
                before + 1
            } else {
                before.saturating_sub(1)
            };
            let histogram = Arc::make_mut(&mut self.count_histogram);
            if before > 0 {
                dec_histogram(histogram, before);
            }
            if now > 0 {
                *histogram.entry(now).or_insert(0) += 1;
                match self.decision_counts.get_mut(name) {
                    Some(c) => *c = now,
                    None => {
                        self.decision_counts.insert(name.into(), now);
                    }
                }
            } else {
                self.decision_counts.remove(name);
            }
            if let Some(&slot) = self.clusters.get(name)
                && let Some(info) = self.slot_mut(slot)
            {
                info.decisions = now;
            }
        }
    }

    fn invalidate_membership(&mut self) {
        self.membership = Cache::default();
        self.topologies = Cache::default();
        self.invalidate_columns();
    }

    fn invalidate_columns(&mut self) {
        self.columns = Cache::default();
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
        self.slots.get(slot).map(|c| &**c)
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
        names
            .iter()
            .filter_map(|n| {
                self.decisions
                    .get(&(namespace.to_owned(), n.clone()))
                    .map(|d| &**d)
            })
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
            .flat_map(|(ns, names)| names.keys().map(move |n| (ns.to_string(), n.clone())))
            .collect()
    }

    /// `(namespace, name)` of all PlacementDecisions.
    pub fn decision_keys(&self) -> Vec<(String, String)> {
        self.decisions.iter().map(|(k, _)| k.clone()).collect()
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
                self.scores.values().map(|s| s.len()).sum(),
            ),
            ("PlacementDecision", self.decisions.len()),
        ]
    }

    /// One PlacementDecision.
    pub fn decision(&self, namespace: &str, name: &str) -> Option<Arc<PlacementDecision>> {
        self.decisions
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
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

/// Copy-on-write containers for the snapshot's large indexes (one entry per cluster, score or
/// placement): a clone copies a few dozen pointers, and a change after a clone copies one shard
/// or chunk rather than the whole index. With 10,000 clusters a whole-index copy at every
/// watch event that overlaps a pass would have become the controller's main cost.
mod cow {
    use std::borrow::Borrow;
    use std::collections::HashMap;
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash};
    use std::sync::Arc;

    const SHARDS: usize = 64;
    const CHUNK: usize = 256;

    /// A hash map in `SHARDS` shared shards.
    #[derive(Clone)]
    pub struct ShardedMap<K, V> {
        shards: Arc<Vec<Arc<HashMap<K, V>>>>,
    }

    impl<K, V> Default for ShardedMap<K, V> {
        fn default() -> Self {
            Self {
                shards: Arc::new((0..SHARDS).map(|_| Arc::default()).collect()),
            }
        }
    }

    /// The shard of a key: a fixed hash, equal for `K` and what it borrows as (as for `HashMap`).
    fn shard<Q: Hash + ?Sized>(key: &Q) -> usize {
        let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        usize::try_from(h % SHARDS as u64).unwrap_or(0)
    }

    impl<K: Hash + Eq + Clone, V: Clone> ShardedMap<K, V> {
        fn shard_mut(&mut self, i: usize) -> &mut HashMap<K, V> {
            Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[i])
        }

        pub fn get<Q>(&self, key: &Q) -> Option<&V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            self.shards[shard(key)].get(key)
        }

        pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            let i = shard(key);
            if !self.shards[i].contains_key(key) {
                return None;
            }
            self.shard_mut(i).get_mut(key)
        }

        pub fn get_or_default(&mut self, key: K) -> &mut V
        where
            V: Default,
        {
            self.shard_mut(shard(&key)).entry(key).or_default()
        }

        pub fn insert(&mut self, key: K, value: V) -> Option<V> {
            self.shard_mut(shard(&key)).insert(key, value)
        }

        pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            let i = shard(key);
            if !self.shards[i].contains_key(key) {
                return None;
            }
            self.shard_mut(i).remove(key)
        }

        pub fn len(&self) -> usize {
            self.shards.iter().map(|s| s.len()).sum()
        }

        pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
            self.shards.iter().flat_map(|s| s.iter())
        }

        pub fn values(&self) -> impl Iterator<Item = &V> {
            self.shards.iter().flat_map(|s| s.values())
        }
    }

    /// A vector of optional entries in shared chunks of `CHUNK`.
    #[derive(Clone)]
    pub struct Chunked<T> {
        chunks: Arc<Vec<Arc<Vec<Option<T>>>>>,
        len: usize,
    }

    impl<T> Default for Chunked<T> {
        fn default() -> Self {
            Self {
                chunks: Arc::default(),
                len: 0,
            }
        }
    }

    impl<T: Clone> Chunked<T> {
        pub fn len(&self) -> usize {
            self.len
        }

        pub fn get(&self, i: usize) -> Option<&T> {
            self.chunks.get(i / CHUNK)?.get(i % CHUNK)?.as_ref()
        }

        fn cell_mut(&mut self, i: usize) -> Option<&mut Option<T>> {
            let chunk = Arc::make_mut(&mut self.chunks).get_mut(i / CHUNK)?;
            Arc::make_mut(chunk).get_mut(i % CHUNK)
        }

        pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
            self.get(i)?;
            self.cell_mut(i)?.as_mut()
        }

        /// Sets entry `i`; `i == len()` appends.
        pub fn set(&mut self, i: usize, value: Option<T>) {
            if i < self.len {
                if let Some(cell) = self.cell_mut(i) {
                    *cell = value;
                }
                return;
            }
            let chunks = Arc::make_mut(&mut self.chunks);
            if self.len.is_multiple_of(CHUNK) {
                chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
            }
            if let Some(last) = chunks.last_mut() {
                Arc::make_mut(last).push(value);
                self.len += 1;
            }
        }

        pub fn take(&mut self, i: usize) -> Option<T> {
            self.get(i)?;
            self.cell_mut(i)?.take()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cluster(name: &str, set: &str) -> Arc<ManagedCluster> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {label::CLUSTERSET: set}}, "spec": {}}),
            )
            .unwrap(),
        )
    }

    fn score(cluster: &str, value: i32) -> Arc<AddOnPlacementScore> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "demo", "namespace": cluster},
                "status": {"scores": [{"name": "demo", "value": value}]}}))
            .unwrap(),
        )
    }

    fn decision(ns: &str, placement: &str, clusters: &[&str]) -> Arc<PlacementDecision> {
        let entries: Vec<_> = clusters
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": format!("{placement}-decision-1"),
                "namespace": ns, "labels": {label::PLACEMENT: placement}},
                "status": {"decisions": entries}}),
            )
            .unwrap(),
        )
    }

    fn set(name: &str) -> Arc<ManagedClusterSet> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}))
            .unwrap(),
        )
    }

    fn members(s: &Snapshot, set: &str) -> Vec<String> {
        match s.members(set) {
            SetMembers::Members(m) => m
                .iter()
                .filter_map(|&i| s.slot(i))
                .map(|c| c.name.to_string())
                .collect(),
            SetMembers::Invalid(e) => vec![e],
        }
    }

    fn value(s: &Snapshot, cluster: &str) -> Option<i32> {
        s.score_column("demo", "demo")
            .by_slot
            .get(s.cluster(cluster)?.slot)
            .copied()
            .flatten()?
            .value
    }

    /// 600 clusters: several chunks of the slab and every shard of the maps are in use.
    fn big() -> Snapshot {
        let mut s = Snapshot::new();
        s.upsert_set(set("a"));
        s.upsert_set(set("b"));
        for i in 0..600 {
            let name = format!("c{i:03}");
            s.upsert_cluster(cluster(&name, if i % 2 == 0 { "a" } else { "b" }));
            s.upsert_score(score(&name, 1));
            s.upsert_decision(decision(
                &format!("ns{}", i % 7),
                &format!("p{i}"),
                &[&name],
            ));
        }
        s
    }

    #[test]
    fn a_change_to_a_clone_leaves_the_original_as_it_was() {
        let original = big();
        // Fill the caches before cloning: the clone shares them.
        assert_eq!(members(&original, "a").len(), 300);
        assert_eq!(value(&original, "c599"), Some(1));
        let mut copy = original.clone();

        copy.upsert_cluster(cluster("c000", "b")); // moves between sets
        copy.remove_cluster("c001");
        copy.upsert_cluster(cluster("new", "a"));
        copy.upsert_score(score("c599", 7));
        copy.remove_score("c598", "demo");
        copy.upsert_decision(decision("ns0", "p0", &["c599", "c598"]));
        copy.remove_decision("ns1", "p1-decision-1");

        // The original: nothing moved, its caches still answer for it.
        assert_eq!(members(&original, "a").len(), 300);
        assert!(members(&original, "a").contains(&"c000".to_owned()));
        assert!(original.cluster("c001").is_some());
        assert!(original.cluster("new").is_none());
        assert_eq!(value(&original, "c599"), Some(1));
        assert_eq!(value(&original, "c598"), Some(1));
        assert_eq!(original.decision_count("c599"), 1);
        assert_eq!(original.decision_count("c000"), 1);
        assert_eq!(original.decisions_of("ns1", "p1").len(), 1);
        assert_eq!(original.cluster("c599").map(|c| c.decisions), Some(1));
        assert_eq!(original.counts()[0], ("ManagedCluster", 600));

        // The copy: every change, and caches recomputed for it.
        let a = members(&copy, "a");
        assert_eq!(a.len(), 300);
        assert!(!a.contains(&"c000".to_owned()) && a.contains(&"new".to_owned()));
        assert!(members(&copy, "b").contains(&"c000".to_owned()));
        assert!(copy.cluster("c001").is_none());
        assert_eq!(value(&copy, "c599"), Some(7));
        assert_eq!(value(&copy, "c598"), None);
        assert_eq!(
            copy.score("c599", "demo")
                .and_then(|s| s.status.as_ref())
                .map(|s| s.scores[0].value),
            Some(7)
        );
        assert_eq!(copy.decision_count("c599"), 2);
        assert_eq!(copy.decision_count("c000"), 0);
        assert_eq!(copy.cluster("c599").map(|c| c.decisions), Some(2));
        assert!(copy.decisions_of("ns1", "p1").is_empty());
        assert_eq!(copy.counts()[0], ("ManagedCluster", 600));
        assert_eq!(copy.counts()[4], ("PlacementDecision", 599));
    }

    #[test]
    fn an_updated_cluster_keeps_its_slot() {
        let mut s = big();
        let slot = s.cluster("c010").map(|c| c.slot);
        s.upsert_cluster(cluster("c010", "b"));
        assert_eq!(s.cluster("c010").map(|c| c.slot), slot);
        assert!(members(&s, "b").contains(&"c010".to_owned()));
        assert!(!members(&s, "a").contains(&"c010".to_owned()));
        // Its score and decision count stay beside it.
        assert_eq!(value(&s, "c010"), Some(1));
        assert_eq!(s.cluster("c010").map(|c| c.decisions), Some(1));
        // A freed slot is reused.
        let freed = s.cluster("c020").map(|c| c.slot);
        s.remove_cluster("c020");
        s.upsert_cluster(cluster("c999", "a"));
        assert_eq!(s.cluster("c999").map(|c| c.slot), freed);
        assert_eq!(s.slot_count(), 600);
    }
}
