//! Keeping the snapshot up to date: the watches' upserts and removals, and the indexes and
//! caches each one touches.

use std::sync::Arc;

use ocm_api::wellknown::label;
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding,
    PlacementDecision,
};

use super::{
    Cache, ClusterInfo, MaxScoreValidity, Name, ScoreEntry, ScoreFields, Snapshot, dec_histogram,
    decision_entries, placement_label,
};

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

    /// A score as the hub holds it. Its validity bound counts from when the hub last accepted
    /// a write of it ([`crate::prioritize::addon::written_at`]), a time the object carries.
    pub fn upsert_score(&mut self, score: Arc<AddOnPlacementScore>) {
        let ns: Name = score
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default()
            .into();
        let name = score.metadata.name.clone().unwrap_or_default();
        if Arc::make_mut(self.scores.get_or_default(ns.clone()))
            .insert(name, score)
            .is_none()
        {
            self.score_count += 1;
        }
        self.mirror_scores(&ns);
        self.invalidate_columns();
    }

    /// See [`MaxScoreValidity`]; the default is ten minutes (`DEFAULT_MAX_SCORE_VALIDITY`).
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

    /// See [`ScoreFields`]; the default is [`ScoreFields::Stored`].
    pub fn set_score_fields(&mut self, fields: ScoreFields) {
        self.score_fields = fields;
    }

    pub(crate) fn score_fields(&self) -> ScoreFields {
        self.score_fields
    }

    /// See [`crate::limits::Limits`]; the default is `Limits::default()`.
    pub fn set_limits(&mut self, limits: crate::limits::Limits) {
        self.limits = limits;
    }

    pub fn limits(&self) -> crate::limits::Limits {
        self.limits
    }

    pub fn remove_score(&mut self, namespace: &str, name: &str) {
        if self.score(namespace, name).is_none() {
            return;
        }
        if let Some(s) = self.scores.get_mut(namespace)
            && Arc::make_mut(s).remove(name).is_some()
        {
            self.score_count -= 1;
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
    pub(crate) fn name_id(&self, name: &str) -> Option<u32> {
        self.names.get(name).copied()
    }

    fn score_entries(&mut self, cluster: &str) -> Vec<ScoreEntry> {
        let objects: Vec<Arc<AddOnPlacementScore>> = self
            .scores
            .get(cluster)
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        objects
            .into_iter()
            .map(|object| {
                let name = object.metadata.name.as_deref().unwrap_or_default();
                let written_at = crate::prioritize::addon::written_at(&object.metadata);
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
                    written_at,
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
}
