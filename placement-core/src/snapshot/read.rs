//! Reading the snapshot: clusters, sets, bindings, scores and decisions, and the derived
//! views a pass asks for (topologies, score columns, set members), computed once and cached.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use ocm_api::selector::Selector;
use ocm_api::wellknown::{label, selector_type};
use ocm_api::{AddOnPlacementScore, ManagedCluster, ManagedClusterSet, PlacementDecision};

use super::{ClusterInfo, NO_LABELS, ScoreCell, ScoreColumn, SetMembers, Snapshot, Topology};

impl Snapshot {
    /// The domains of a topology key over all clusters.
    pub(crate) fn topology(&self, key: &str, claim: bool) -> Arc<Topology> {
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
    pub(crate) fn score_column(&self, resource: &str, item: &str) -> Arc<ScoreColumn> {
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
                        written_at: e.written_at,
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
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// All clusters in name order.
    pub fn clusters(&self) -> impl Iterator<Item = &ClusterInfo> {
        self.clusters.values().filter_map(|&i| self.slot(i))
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
            ("AddOnPlacementScore", self.score_count),
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
    pub(crate) fn members(&self, set_name: &str) -> SetMembers {
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
