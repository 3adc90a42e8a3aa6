//! The controller's in-memory view of the hub: the scheduling snapshot, the Placements, and
//! the index of what each Placement reads. Watches write it; workers read it.
//!
//! Workers never schedule under the lock: they take the current snapshot (an `Arc`) and
//! release the lock; a watch that changes the snapshot while a pass still holds it changes a
//! copy (see [`CowSnapshot`]), which the next pass takes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::listing::key_of;
use super::margins::{Margins, ScoreChange};
use super::slim;
use super::triggers::{self, Index, Key};
use placement_core::prioritize::addon::renewal_changes_nothing;
use placement_core::snapshot::decision_entries;
use placement_core::{CappedScore, HeldMove, Snapshot};

/// The controller's snapshot, copy on write: reading goes through `Deref`; changing it
/// (`DerefMut`) first copies it if a pass still holds the current one ([`CowSnapshot::share`]).
/// The copy is cheap (see [`Snapshot`]) and happens once per pass that overlaps changes.
#[derive(Default)]
pub struct CowSnapshot(Arc<Snapshot>);

impl CowSnapshot {
    /// The current snapshot, to schedule from after the lock is released.
    pub(crate) fn share(&self) -> Arc<Snapshot> {
        self.0.clone()
    }
}

impl Deref for CowSnapshot {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.0
    }
}

impl DerefMut for CowSnapshot {
    fn deref_mut(&mut self) -> &mut Snapshot {
        Arc::make_mut(&mut self.0)
    }
}

/// When the process (its state) started.
#[derive(Debug, Clone, Copy)]
struct Started(jiff::Timestamp);

impl Default for Started {
    fn default() -> Self {
        Self(jiff::Timestamp::now())
    }
}

#[derive(Default)]
pub struct State {
    pub snapshot: CowSnapshot,
    pub(crate) placements: BTreeMap<Key, Arc<Placement>>,
    pub(crate) index: Index,
    /// A fingerprint of the scores the validity bound ended that each placement was last
    /// warned about (`ScoreValidityCapped`): the event goes out when that set changes, not at
    /// every pass.
    /// Not the list itself: it names every filtered cluster, so 10,000 placements over 1,000
    /// clusters kept 10 million entries (about 1.5 GB).
    validity_warned: HashMap<Key, u64>,
    /// A fingerprint of the moves each placement's stability controls last held (see
    /// [`State::held_changed`]); placements with the controls only.
    held_said: HashMap<Key, u64>,
    /// When this process started: what a placement's first pass may be news about.
    started: Started,
    /// Each placement's margin from its last written pass: the score changes it need not be
    /// scheduled for.
    pub(crate) margins: Margins,
    /// Our PlacementDecision writes in flight: their watch events often arrive before the
    /// write returns (and the writer puts the object into the store). Such an echo is not a
    /// user's edit and must not schedule the placement again: that pass would only see other
    /// placements' moves (Balance) and chase them, as upstream's controller does after each
    /// of its own writes. Anything else (a user's edit) still schedules it.
    own_writes: HashMap<(String, String), OwnWrite>,
}

/// What one of our PlacementDecision writes leaves on the object, as its watch event shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OwnWrite {
    /// Labels it sets (the object may carry others).
    pub(crate) labels: Option<BTreeMap<String, String>>,
    /// The decision lists the object may show meanwhile (a create shows none, then its
    /// status); empty: any.
    pub(crate) entries: Vec<Vec<ocm_api::ClusterDecision>>,
    /// It deletes the object.
    pub(crate) delete: bool,
}

/// What a change to the stores moved, for its caller to act on.
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use = "the placements to schedule again, and whether a Balance wave is due"]
pub(crate) struct Changed {
    /// The placements to schedule again.
    pub(crate) requeue: BTreeSet<Key>,
    /// Some placement's decisions moved, so the placements using Balance have new input:
    /// they are rescheduled later, all at once (see `Options::balance_delay`). A flag, not
    /// their keys: with 10,000 Balance users, copying them on every decision event was the
    /// controller's main cost.
    pub(crate) balance: bool,
    /// Placements deleted from the store: the queue and the sweeps forget them too.
    pub(crate) deleted: Vec<Key>,
    /// Placements to schedule at a given time: a score change moved only the scores their
    /// decisions show, which wait for the end of the `scoreRateLimit` window.
    pub(crate) later: Vec<(Key, jiff::Timestamp)>,
    /// Placements a score change woke that it cannot move (see [`Margins`]).
    pub(crate) spared: usize,
}

impl Changed {
    /// Only placements to schedule again.
    pub(crate) fn requeue(requeue: BTreeSet<Key>) -> Self {
        Self {
            requeue,
            ..Self::default()
        }
    }

    /// Both changes (a list that ends deletes several objects).
    pub(crate) fn and(mut self, other: Changed) -> Self {
        self.requeue.extend(other.requeue);
        self.balance |= other.balance;
        self.deleted.extend(other.deleted);
        self.later.extend(other.later);
        self.spared += other.spared;
        self
    }
}

impl OwnWrite {
    /// Whether `d` is what this write (or a step of it) leaves.
    fn shows(&self, d: &PlacementDecision) -> bool {
        let labels = self.labels.as_ref().is_none_or(|want| {
            let have = d.metadata.labels.as_ref();
            want.iter()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
        });
        let entries = self.entries.is_empty()
            || self
                .entries
                .iter()
                .any(|e| decision_entries(d).eq(e.iter()));
        labels && entries && !self.delete
    }
}

/// Shared between the watches (writers) and the workers (readers). Never held across an await.
#[derive(Clone, Default)]
pub struct Shared(Arc<RwLock<State>>);

impl Shared {
    pub fn read(&self) -> RwLockReadGuard<'_, State> {
        self.0.read()
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.0.write()
    }
}

/// `resourceVersion` as a number, when it is one (etcd's revisions are). Used only to skip a
/// watch event older than what a write of ours already put in the cache.
fn revision(rv: Option<&String>) -> Option<u64> {
    rv.and_then(|v| v.parse().ok())
}

fn is_older(incoming: Option<&String>, cached: Option<&String>) -> bool {
    matches!((revision(incoming), revision(cached)), (Some(i), Some(c)) if i < c)
}

impl State {
    /// The placements an object of each kind can affect, computed before and after a change.
    /// For a cluster: the placements it is a candidate of (see [`super::candidates`]).
    pub(crate) fn affected_by_cluster(&self, cluster: &ManagedCluster) -> BTreeSet<Key> {
        self.choosing(cluster, None)
    }

    /// The placements `cluster` is a candidate of, and that read the score `resource` when
    /// one is named.
    fn choosing(&self, cluster: &ManagedCluster, resource: Option<&str>) -> BTreeSet<Key> {
        let mut out = BTreeSet::new();
        let view = super::candidates::Cluster::of(cluster);
        for set in self.snapshot.sets_containing(cluster) {
            for ns in self.snapshot.namespaces_binding(set) {
                out.extend(
                    self.index
                        .using_set(ns, set)
                        .filter(|k| resource.is_none_or(|r| self.index.reads_score(k, r)))
                        .filter(|k| self.index.may_choose(k, &view))
                        .cloned(),
                );
            }
        }
        out
    }

    /// For a score written in `cluster`'s namespace: the placements that read it and that
    /// cluster is a candidate of. A score with no cluster of its namespace's name is read by
    /// no pass.
    fn affected_by_score(&self, cluster: &str, resource: &str) -> BTreeSet<Key> {
        let Some(c) = self.snapshot.cluster(cluster) else {
            return BTreeSet::new();
        };
        let object = c.object.clone();
        self.choosing(&object, Some(resource))
    }

    pub(crate) fn affected_by_set(&self, set: &str) -> BTreeSet<Key> {
        let mut out = BTreeSet::new();
        for ns in self.snapshot.namespaces_binding(set) {
            out.extend(self.index.using_set(ns, set).cloned());
        }
        out
    }

    /// Applies a ManagedCluster; returns the placements to reschedule.
    pub(crate) fn apply_cluster(&mut self, c: ManagedCluster) -> BTreeSet<Key> {
        let name = c.metadata.name.clone().unwrap_or_default();
        let old = self.snapshot.cluster(&name).map(|i| i.object.clone());
        if let Some(old) = &old
            && same_content(&old.metadata, &c.metadata)
            && old.spec == c.spec
            && old.status == c.status
        {
            return BTreeSet::new();
        }
        let mut out = old
            .map(|o| self.affected_by_cluster(&o))
            .unwrap_or_default();
        out.extend(self.affected_by_cluster(&c));
        self.snapshot.upsert_cluster(Arc::new(c));
        out
    }

    pub(crate) fn delete_cluster(&mut self, name: &str) -> BTreeSet<Key> {
        let out = self
            .snapshot
            .cluster(name)
            .map(|i| self.affected_by_cluster(&i.object.clone()))
            .unwrap_or_default();
        self.snapshot.remove_cluster(name);
        out
    }

    pub(crate) fn apply_set(&mut self, s: ManagedClusterSet) -> BTreeSet<Key> {
        let s = slim::set(s);
        let name = s.metadata.name.clone().unwrap_or_default();
        if self
            .snapshot
            .set(&name)
            .is_some_and(|old| old.spec == s.spec)
        {
            return BTreeSet::new();
        }
        self.snapshot.upsert_set(Arc::new(s));
        self.affected_by_set(&name)
    }

    pub(crate) fn delete_set(&mut self, name: &str) -> BTreeSet<Key> {
        let out = self.affected_by_set(name);
        self.snapshot.remove_set(name);
        out
    }

    pub(crate) fn apply_binding(&mut self, b: &ManagedClusterSetBinding) -> BTreeSet<Key> {
        let ns = b.metadata.namespace.clone().unwrap_or_default();
        let name = b.metadata.name.clone().unwrap_or_default();
        if self.snapshot.bindings(&ns).any(|n| n == name) {
            return BTreeSet::new();
        }
        self.snapshot.upsert_binding(b);
        self.index.using_set(&ns, &name).cloned().collect()
    }

    pub(crate) fn delete_binding(&mut self, ns: &str, name: &str) -> BTreeSet<Key> {
        self.snapshot.remove_binding(ns, name);
        self.index.using_set(ns, name).cloned().collect()
    }

    /// Applies an AddOnPlacementScore. A renewal that changes no item and counts no shorter
    /// (an agent's refresh) schedules nothing: see [`renewal_changes_nothing`]. A change
    /// schedules the placements it may affect, unless their margins say it cannot move them.
    pub(crate) fn apply_score(&mut self, s: AddOnPlacementScore) -> Changed {
        let s = Arc::new(slim::score(s));
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        let name = s.metadata.name.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        let old = self.snapshot.score(&ns, &name);
        if old.is_some_and(|old| old.status == s.status) {
            return Changed::default();
        }
        let bound = self.snapshot.max_score_validity();
        // The old version is kept only for a change (renewals are most events).
        let old = (!renewal_changes_nothing(old, Some(&s), bound, now)).then(|| old.cloned());
        self.snapshot.upsert_score(s.clone());
        let Some(old) = old else {
            return Changed::default();
        };
        self.score_changed(&ns, &name, old.as_ref(), Some(&s), now)
    }

    pub(crate) fn delete_score(&mut self, ns: &str, name: &str) -> Changed {
        let old = self.snapshot.score(ns, name).cloned();
        self.snapshot.remove_score(ns, name);
        self.score_changed(ns, name, old.as_ref(), None, jiff::Timestamp::now())
    }

    /// The placements a change of score `resource` in `cluster`'s namespace wakes, as their
    /// margins judge it.
    fn score_changed(
        &mut self,
        cluster: &str,
        resource: &str,
        old: Option<&AddOnPlacementScore>,
        new: Option<&AddOnPlacementScore>,
        now: jiff::Timestamp,
    ) -> Changed {
        let affected = self.affected_by_score(cluster, resource);
        let change = ScoreChange {
            cluster,
            resource,
            old,
            new,
            bound: self.snapshot.max_score_validity(),
            now,
        };
        let judged = self.margins.judge(affected, &change);
        Changed {
            requeue: judged.now.into_iter().collect(),
            later: judged.later,
            spared: judged.spared,
            ..Changed::default()
        }
    }

    /// Our write of `ns/name` is in flight (see `own_writes`), until [`State::own_write_done`].
    pub(crate) fn own_write(&mut self, ns: &str, name: &str, write: OwnWrite) {
        self.own_writes
            .insert((ns.to_owned(), name.to_owned()), write);
    }

    pub(crate) fn own_write_done(&mut self, ns: &str, name: &str) {
        self.own_writes.remove(&(ns.to_owned(), name.to_owned()));
    }

    /// Applies a PlacementDecision. Its own placement is rescheduled (a user edit is
    /// overwritten), unless this is the echo of our own write; when the clusters it holds
    /// changed, a Balance wave is due ([`Changed::balance`]).
    pub(crate) fn apply_decision(&mut self, d: PlacementDecision) -> Changed {
        let d = slim::decision(d);
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let echo = self
            .own_writes
            .get(&(ns.clone(), name.clone()))
            .is_some_and(|w| w.shows(&d));
        let old = self.snapshot.decision(&ns, &name);
        if let Some(old) = &old
            && (is_older(
                d.metadata.resource_version.as_ref(),
                old.metadata.resource_version.as_ref(),
            ) || (old.metadata.labels == d.metadata.labels
                && old.metadata.annotations == d.metadata.annotations
                && old.status == d.status))
        {
            return Changed::default();
        }
        let members = |d: &PlacementDecision| {
            decision_entries(d)
                .map(|e| e.cluster_name.clone())
                .collect::<BTreeSet<_>>()
        };
        let moved = old.as_ref().is_none_or(|o| members(o) != members(&d));
        let mut requeue = BTreeSet::new();
        for x in old.iter().map(|o| &**o).chain(std::iter::once(&d)) {
            if let Some(p) = placement_label(x) {
                requeue.insert(self.key(&ns, p));
            }
        }
        self.snapshot.upsert_decision(Arc::new(d));
        if echo {
            requeue.clear();
        }
        Changed {
            requeue,
            balance: moved,
            ..Changed::default()
        }
    }

    /// Deletes a PlacementDecision: as [`State::apply_decision`], a Balance wave is due when
    /// it held clusters.
    pub(crate) fn delete_decision(&mut self, ns: &str, name: &str) -> Changed {
        let mut out = Changed::default();
        let echo = self
            .own_writes
            .get(&(ns.to_owned(), name.to_owned()))
            .is_some_and(|w| w.delete);
        if let Some(old) = self.snapshot.decision(ns, name) {
            if let Some(p) = placement_label(&old).filter(|_| !echo) {
                out.requeue.insert(self.key(ns, p));
            }
            out.balance = decision_entries(&old).next().is_some();
        }
        self.snapshot.remove_decision(ns, name);
        out
    }

    /// The key of `namespace/name`, shared with the store's when it holds the placement.
    pub(crate) fn key(&self, namespace: &str, name: &str) -> Key {
        self.shared(triggers::key(namespace, name))
    }

    /// `k`, or the equal key the store holds (one allocation per placement, not one per
    /// event).
    fn shared(&self, k: Key) -> Key {
        self.placements
            .get_key_value(&k)
            .map_or(k, |(stored, _)| stored.clone())
    }

    pub(crate) fn apply_placement(&mut self, p: Placement) -> BTreeSet<Key> {
        let p = slim::placement(p);
        let (ns, name) = key_of(&p);
        let key = self.key(ns, name);
        if let Some(old) = self.placements.get(&key) {
            if is_older(
                p.metadata.resource_version.as_ref(),
                old.metadata.resource_version.as_ref(),
            ) {
                return BTreeSet::new();
            }
            // Our own status write comes back as an event: nothing to do if only status moved.
            if old.spec == p.spec
                && old.metadata.annotations == p.metadata.annotations
                && old.metadata.deletion_timestamp == p.metadata.deletion_timestamp
                && old.metadata.uid == p.metadata.uid
            {
                self.placements.insert(key, Arc::new(p));
                return BTreeSet::new();
            }
        }
        self.index.upsert(&key, &p);
        self.margins.forget(&key);
        self.placements.insert(key.clone(), Arc::new(p));
        BTreeSet::from([key])
    }

    /// Whether `capped` (a pass's capped scores) differs from what the placement was last
    /// warned about, remembering it; an empty list is never news and forgets the last one.
    ///
    /// A placement's first list in this process is news only when the bound ended one of its
    /// scores after the process started: a restarted scheduler (or a new leader) does not
    /// repeat what the one before it said, so a hub at rest sees no write from a restart.
    pub(crate) fn capped_changed(&mut self, key: &Key, capped: &[CappedScore]) -> bool {
        if capped.is_empty() {
            self.validity_warned.remove(key);
            return false;
        }
        let print = fingerprint(capped.iter().map(|c| (&c.cluster, &c.resource)));
        match self.validity_warned.insert(key.clone(), print) {
            Some(before) => before != print,
            None => capped.iter().any(|c| c.until >= self.started.0),
        }
    }

    /// Whether the moves the placement's stability controls held changed since its last
    /// pass, and how many it holds then (`None`: no news). A placement's first pass in this
    /// process is no news: its holds were said by the scheduler before this one (a restart
    /// writes nothing to a hub at rest).
    pub(crate) fn held_changed(
        &mut self,
        key: &Key,
        has_controls: bool,
        held: &[HeldMove],
    ) -> Option<usize> {
        if !has_controls {
            self.held_said.remove(key);
            return None;
        }
        let print = fingerprint(held.iter().map(|h| (&h.incoming, &h.outgoing)));
        let before = self.held_said.insert(key.clone(), print)?;
        (before != print && !held.is_empty()).then_some(held.len())
    }

    /// Placements with a remembered `ScoreValidityCapped` warning.
    #[cfg(test)]
    pub(crate) fn warned_count(&self) -> usize {
        self.validity_warned.len()
    }

    pub(crate) fn delete_placement(&mut self, key: &Key) {
        self.index.remove(key);
        self.margins.forget(key);
        self.validity_warned.remove(key);
        self.held_said.remove(key);
        self.placements.remove(key);
    }
}

/// A 64-bit digest of a list of pairs (SipHash with fixed keys: the same list gives the same
/// digest for the life of the process; a collision would only skip one event). For capped
/// scores the pairs are which scores (not their bounds: a renewed score moves its bound, and
/// that is not news); for held moves, which cluster would replace which.
fn fingerprint<A: Hash, B: Hash>(pairs: impl ExactSizeIterator<Item = (A, B)>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    pairs.len().hash(&mut h);
    for (a, b) in pairs {
        a.hash(&mut h);
        b.hash(&mut h);
    }
    h.finish()
}

fn placement_label(d: &PlacementDecision) -> Option<&str> {
    d.metadata
        .labels
        .as_ref()?
        .get(ocm_api::wellknown::label::PLACEMENT)
        .map(String::as_str)
}

/// Labels, annotations and deletion: the metadata a scheduling decision can depend on.
fn same_content(
    a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    b: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    a.labels == b.labels
        && a.annotations == b.annotations
        && a.deletion_timestamp == b.deletion_timestamp
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn decision(labels: serde_json::Value, clusters: &[&str]) -> PlacementDecision {
        let entries: Vec<_> = clusters
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "PlacementDecision",
            "metadata": {
                "name": "p-decision-1", "namespace": "ns", "labels": labels,
                "resourceVersion": "42", "uid": "u-1", "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "cluster.open-cluster-management.io/v1beta1",
                    "kind": "Placement", "name": "p", "uid": "u-p", "controller": true,
                    "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "placement-scheduler", "operation": "Update",
                    "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                    "fieldsType": "FieldsV1", "subresource": "status",
                    "fieldsV1": {"f:status": {"f:decisions": {}}}}],
            },
            "status": {"decisions": entries},
        }))
        .expect("a valid PlacementDecision")
    }

    /// The watch event of our own write, arriving before the write returns, does not
    /// schedule the placement again; a user's edit meanwhile still does.
    #[test]
    fn the_echo_of_our_own_write_schedules_nothing() {
        let key: Key = ("ns".into(), "p".into());
        let mut st = State::default();
        let with = |rv: &str, clusters: &[&str]| {
            let mut d = decision(
                json!({"cluster.open-cluster-management.io/placement": "p"}),
                clusters,
            );
            d.metadata.resource_version = Some(rv.to_owned());
            d
        };
        assert_eq!(
            st.apply_decision(with("1", &["a"])).requeue,
            BTreeSet::from([key.clone()])
        );

        let ours = with("2", &["b"]);
        let planned = ours.status.clone().map(|s| s.decisions).unwrap_or_default();
        st.own_write(
            "ns",
            "p-decision-1",
            OwnWrite {
                entries: vec![planned.clone()],
                ..OwnWrite::default()
            },
        );
        assert_eq!(
            st.apply_decision(ours).requeue,
            BTreeSet::new(),
            "the echo of our write"
        );
        // A user's edit while our write is in flight is not ours.
        assert_eq!(
            st.apply_decision(with("3", &["x"])).requeue,
            BTreeSet::from([key.clone()])
        );
        st.own_write_done("ns", "p-decision-1");
        assert_eq!(
            st.apply_decision(with("4", &["b"])).requeue,
            BTreeSet::from([key.clone()]),
            "after the write, a change is news"
        );

        st.own_write(
            "ns",
            "p-decision-1",
            OwnWrite {
                delete: true,
                ..OwnWrite::default()
            },
        );
        assert_eq!(
            st.delete_decision("ns", "p-decision-1").requeue,
            BTreeSet::new(),
            "the echo of our delete"
        );
        st.own_write_done("ns", "p-decision-1");
        assert!(st.snapshot.decision("ns", "p-decision-1").is_none());
    }

    fn labels() -> serde_json::Value {
        json!({
            ocm_api::wellknown::label::PLACEMENT: "p",
            ocm_api::wellknown::label::DECISION_GROUP_INDEX: "0",
        })
    }

    #[test]
    fn a_stored_decision_keeps_what_the_core_and_the_writer_read() {
        let mut st = State::default();
        let d = decision(labels(), &["a", "b"]);
        let _ = st.apply_decision(d.clone());
        let kept = st.snapshot.decision("ns", "p-decision-1").expect("stored");
        // The writer's preconditions and the core's input, as received.
        assert_eq!(kept.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(kept.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(kept.metadata.labels, d.metadata.labels);
        assert_eq!(kept.status, d.status);
        assert_eq!(st.snapshot.decisions_of("ns", "p").len(), 1);
        assert_eq!(st.snapshot.decision_count("b"), 1);
        // Nothing reads the rest.
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(kept.metadata.owner_references, None);
        assert_eq!(kept.metadata.creation_timestamp, None);
        // The same object again (a relist, our own write read back) is no news.
        assert!(st.apply_decision(d).requeue.is_empty());
    }

    #[test]
    fn a_stored_placement_has_no_managed_fields() {
        let mut st = State::default();
        let p: Placement = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7", "uid": "u-p",
                "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"numberOfClusters": 1},
        }))
        .expect("a valid Placement");
        assert_eq!(st.apply_placement(p.clone()).len(), 1);
        let key: Key = ("ns".into(), "p".into());
        let kept = st.placements.get(&key).expect("stored");
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(kept.spec, p.spec);
        assert_eq!(kept.metadata.annotations, p.metadata.annotations);
        assert_eq!(kept.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(kept.metadata.uid.as_deref(), Some("u-p"));
    }

    fn capped(clusters: &[&str], until: i64) -> Vec<CappedScore> {
        clusters
            .iter()
            .map(|c| CappedScore {
                cluster: (*c).to_owned(),
                resource: "demo".into(),
                valid_until: None,
                until: Timestamp::from_second(until).expect("a valid time"),
            })
            .collect()
    }

    #[test]
    fn a_capped_score_warning_is_news_once_per_change() {
        let mut st = State {
            started: Started(Timestamp::from_second(0).expect("a valid time")),
            ..State::default()
        };
        let k: Key = ("ns".into(), "p".into());
        assert!(!st.capped_changed(&k, &[]));
        assert!(st.capped_changed(&k, &capped(&["a", "b"], 600)));
        assert!(!st.capped_changed(&k, &capped(&["a", "b"], 600)));
        // Another set of clusters: news again.
        assert!(st.capped_changed(&k, &capped(&["a"], 600)));
        // The same scores rewritten (a provider that renews a far-future validUntil moves
        // the bound at every write): not news, or each renewal would warn every placement.
        assert!(!st.capped_changed(&k, &capped(&["a"], 601)));
        assert!(!st.capped_changed(&k, &capped(&["a"], 900)));
        // Nothing capped any more: forgotten, so the same list later is news.
        assert!(!st.capped_changed(&k, &[]));
        assert_eq!(st.warned_count(), 0);
        assert!(st.capped_changed(&k, &capped(&["a"], 901)));
        // A deleted placement leaves nothing behind.
        st.delete_placement(&k);
        assert_eq!(st.warned_count(), 0);
    }

    #[test]
    fn a_restart_repeats_no_warning_about_scores_ended_before_it() {
        let mut st = State {
            started: Started(Timestamp::from_second(1000).expect("a valid time")),
            ..State::default()
        };
        let k: Key = ("ns".into(), "p".into());
        // Ended before this process started: the scheduler before it said so.
        assert!(!st.capped_changed(&k, &capped(&["a"], 900)));
        assert!(!st.capped_changed(&k, &capped(&["a"], 900)));
        // A change after that is news.
        assert!(st.capped_changed(&k, &capped(&["a", "b"], 1100)));
        // Another placement whose score the bound ended after the start: news at once.
        let k2: Key = ("ns".into(), "q".into());
        assert!(st.capped_changed(&k2, &capped(&["a"], 1000)));
    }

    #[test]
    fn held_moves_are_news_when_they_change_but_not_on_a_first_pass() {
        let mut st = State::default();
        let k: Key = ("ns".into(), "p".into());
        let held = |pairs: &[(&str, &str)]| -> Vec<HeldMove> {
            pairs
                .iter()
                .map(|(i, o)| HeldMove {
                    incoming: (*i).into(),
                    outgoing: (*o).into(),
                    reason: "gain 1 < minScoreGain 30".into(),
                })
                .collect()
        };
        // The first pass after a start: what it holds was said before.
        assert_eq!(st.held_changed(&k, true, &held(&[("c", "a")])), None);
        assert_eq!(st.held_changed(&k, true, &held(&[("c", "a")])), None);
        assert_eq!(st.held_changed(&k, true, &held(&[("d", "a")])), Some(1));
        // Nothing held, then the same hold again: news.
        assert_eq!(st.held_changed(&k, true, &[]), None);
        assert_eq!(st.held_changed(&k, true, &held(&[("d", "a")])), Some(1));
        // Controls removed: forgotten.
        assert_eq!(st.held_changed(&k, false, &[]), None);
        assert_eq!(st.held_changed(&k, true, &held(&[("d", "a")])), None);
        st.delete_placement(&k);
        assert!(st.held_said.is_empty());
    }
}
