//! The snapshot the core schedules from: every object the scheduler reads, indexed once.
//!
//! The controller keeps one `Snapshot` up to date from its watches (`upsert_*`/`remove_*`),
//! `simulate` fills one from files; both hand it to [`crate::schedule`]. The indexes are
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
use ocm_api::wellknown::label;
use ocm_api::{AddOnPlacementScore, ManagedCluster, ManagedClusterSet, PlacementDecision};

use cow::{Chunked, ShardedMap};
use ocm_cel::{CelCluster, ScoreSource};

/// The copy-on-write containers behind the large indexes.
mod cow;
/// Reads, and the views derived on first use (topologies, score columns, set members).
mod read;
/// The watches' upserts and removals, and the indexes and caches each one touches.
mod update;

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

    pub(crate) fn labels(&self) -> &BTreeMap<String, String> {
        self.object.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
    }

    pub(crate) fn taints(&self) -> &[ocm_api::Taint] {
        &self.object.spec.taints
    }

    /// The score object with interned name `resource`.
    pub(crate) fn score_entry(&self, resource: u32) -> Option<&ScoreEntry> {
        self.scores.iter().find(|s| s.resource == resource)
    }

    /// The cluster as CEL sees it, converted on first use.
    pub(crate) fn cel(&self) -> &CelCluster {
        self.cel.get_or_init(|| CelCluster::new(&self.object))
    }

    /// The value of a topology key (a label or a claim).
    pub(crate) fn topology_value(&self, key: &str, claim: bool) -> Option<&str> {
        if claim {
            self.claims.get(key).map(String::as_str)
        } else {
            self.labels().get(key).map(String::as_str)
        }
    }
}

/// One AddOnPlacementScore of a cluster, pre-digested.
#[derive(Clone)]
pub(crate) struct ScoreEntry {
    /// Interned `metadata.name` (see [`Snapshot::name_id`]).
    pub resource: u32,
    /// Interned item names and their values, in the object's order.
    pub items: Vec<(u32, i32)>,
    pub valid_until: Option<jiff::Timestamp>,
    /// When the hub last accepted a write of this object (see
    /// [`crate::prioritize::addon::written_at`]; `None`: the object does not say, a file).
    pub written_at: Option<Timestamp>,
}

/// The default of [`Snapshot::max_score_validity`].
pub(crate) const DEFAULT_MAX_SCORE_VALIDITY: SignedDuration = SignedDuration::from_mins(10);

/// How far beyond its last write a `validUntil` may reach (`None`: as far as it says,
/// upstream's behaviour).
///
/// `validUntil` is written by the score's provider, often a managed cluster whose clock the hub
/// does not control: a provider whose clock runs ahead writes a `validUntil` that lies far in
/// the hub's future, and its score would keep counting long after the provider stopped. The
/// bound ends a score that sets `validUntil` at most this long after the hub last accepted a
/// write of it (the apiserver's `managedFields` time, see
/// [`crate::prioritize::addon::written_at`]). An unset `validUntil` is upstream's "never
/// expires" (a static score an administrator writes once) and is left alone. The rule reads
/// only the object and the time, so a restarted scheduler decides as the old one did.
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

/// Whether the hub's CRDs have the score fields OCM 1.3 added: `decisions[].score` and the
/// Placement's `status.lastScoreUpdateTime`. OCM 1.2's do not, and its apiserver drops what
/// would be written there; a core that wrote them anyway would find them missing on every pass
/// and write them again (and a restart would rewrite every decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScoreFields {
    /// Written and compared (OCM 1.3, and every file `simulate` reads).
    #[default]
    Stored,
    /// Left out: every decision's score is 0 (omitted), `lastScoreUpdateTime` is kept as the
    /// hub holds it, and `scoreRateLimit` holds nothing back.
    Absent,
}

/// One cluster's cell of a [`ScoreColumn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScoreCell {
    /// The item's value (the last one with the name), `None` if absent.
    pub value: Option<i32>,
    /// The object's `validUntil`, as written.
    pub valid_until: Option<Timestamp>,
    /// See [`ScoreEntry::written_at`].
    pub written_at: Option<Timestamp>,
}

/// A topology key's value for every cluster slot, as small integers (computed once per
/// snapshot state, shared by every placement that spreads over the key).
#[derive(Debug, Default)]
pub(crate) struct Topology {
    /// Domain id per slot; [`Topology::NONE`] where the cluster lacks the key.
    pub domain_of_slot: Vec<u32>,
    /// Domain names by id.
    pub domains: Vec<String>,
}

impl Topology {
    pub(crate) const NONE: u32 = u32::MAX;
}

/// One score item (`<resource>/<item>`) for every cluster slot.
#[derive(Debug, Default)]
pub(crate) struct ScoreColumn {
    /// Per slot: `None` without a score object.
    pub by_slot: Vec<Option<ScoreCell>>,
}

/// What a clusterset's membership resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetMembers {
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
/// entry per cluster, score or placement are sharded or chunked (see `cow`), so that the copy
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
    /// How many scores `scores` holds (its size gauge is read after every watch event).
    score_count: usize,
    max_score_validity: MaxScoreValidity,
    score_fields: ScoreFields,
    /// The limits of one pass (CEL budget, list items).
    limits: crate::limits::Limits,
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

#[cfg(test)]
mod tests;
