//! Which placements an event can affect, sans IO: an index of what each Placement reads, and
//! the fan-out rules (upstream's are its event handlers, open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/enqueue.go`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use ocm_api::Placement;

use placement_core::prioritize::{self, Kind};

use super::candidates::{Cluster, Sieve};
use placement_core::snapshot::{Name, Snapshot, decision_entries};

/// A placement's `(namespace, name)`. Shared, not copied: a placement's key is held by the
/// store, the trigger index, the queue and its timers (at 10,000 placements, copies of the
/// two strings were several megabytes).
pub(crate) type Key = (Arc<str>, Arc<str>);

pub(crate) fn key(namespace: &str, name: &str) -> Key {
    (Arc::from(namespace), Arc::from(name))
}

/// What one Placement depends on, beyond its namespace's bindings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Reads {
    /// AddOnPlacementScore names, from AddOn prioritizers and CEL `scores("...")`, sorted and
    /// without repeats (a slice, not a set: one per placement, usually of one name).
    resources: Box<[String]>,
    /// A CEL `scores(...)` call whose argument is not a literal: any score may matter.
    any_resource: bool,
    /// Balance with a non-zero weight: other placements' decisions matter.
    balance: bool,
    /// `spec.clusterSets` (empty: every bound set).
    cluster_sets: Vec<String>,
    /// Which clusters its predicates may let through (see [`super::candidates`]).
    sieve: Sieve,
}

fn reads(p: &Placement) -> Reads {
    let mut r = Reads {
        cluster_sets: p.spec.cluster_sets.clone(),
        sieve: Sieve::of(&p.spec.predicates),
        ..Reads::default()
    };
    let mut resources = BTreeSet::new();
    // A misconfigured policy reads nothing; it is rescheduled when it changes.
    for w in prioritize::from_policy(&p.spec.prioritizer_policy).unwrap_or_default() {
        match w.kind {
            Kind::Balance => r.balance = true,
            Kind::AddOn(a) => {
                resources.insert(a.resource_name);
            }
            _ => {}
        }
    }
    for pred in &p.spec.predicates {
        for expr in &pred.required_cluster_selector.cel_selector.cel_expressions {
            match score_names(expr) {
                Some(names) => resources.extend(names),
                None => r.any_resource = true,
            }
        }
    }
    r.resources = resources.into_iter().collect();
    r
}

/// The literal names passed to `scores(...)` in a CEL expression; `None` when some call's
/// argument is not a plain string literal.
pub(crate) fn score_names(expr: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("scores(") {
        rest = rest[i + "scores(".len()..].trim_start();
        let quote = rest.chars().next()?;
        if quote != '"' && quote != '\'' {
            return None;
        }
        let body = &rest[1..];
        let end = body.find(quote)?;
        let name = &body[..end];
        if name.contains('\\') {
            return None;
        }
        out.push(name.to_owned());
        rest = &body[end + 1..];
    }
    Some(out)
}

/// The index of every Placement's reads.
#[derive(Debug, Default)]
pub(crate) struct Index {
    reads: BTreeMap<Key, Reads>,
    by_resource: HashMap<String, BTreeSet<Key>>,
    any_resource: BTreeSet<Key>,
    balance: BTreeSet<Key>,
    by_namespace: BTreeMap<Arc<str>, BTreeSet<Key>>,
}

impl Index {
    /// Indexes `p` under `key` (the store's own, so that the index shares it).
    pub(crate) fn upsert(&mut self, key: &Key, p: &Placement) {
        self.remove(key);
        let r = reads(p);
        for res in &r.resources {
            self.by_resource
                .entry(res.clone())
                .or_default()
                .insert(key.clone());
        }
        if r.any_resource {
            self.any_resource.insert(key.clone());
        }
        if r.balance {
            self.balance.insert(key.clone());
        }
        self.by_namespace
            .entry(key.0.clone())
            .or_default()
            .insert(key.clone());
        self.reads.insert(key.clone(), r);
    }

    pub(crate) fn remove(&mut self, key: &Key) {
        let Some(r) = self.reads.remove(key) else {
            return;
        };
        // Empty sets go too: resource and namespace names come from tenants, and a map that
        // kept them would only grow.
        for res in &r.resources {
            if let Some(keys) = self.by_resource.get_mut(res) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_resource.remove(res);
                }
            }
        }
        self.any_resource.remove(key);
        self.balance.remove(key);
        if let Some(keys) = self.by_namespace.get_mut(&key.0) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_namespace.remove(&key.0);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.reads.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Placements that read the AddOnPlacementScore named `resource`.
    #[cfg(test)]
    pub(crate) fn for_score<'a>(&'a self, resource: &str) -> impl Iterator<Item = &'a Key> + 'a {
        self.by_resource
            .get(resource)
            .into_iter()
            .flatten()
            .chain(self.any_resource.iter())
    }

    /// Whether the placement reads the AddOnPlacementScore named `resource`.
    pub(crate) fn reads_score(&self, key: &Key, resource: &str) -> bool {
        self.reads.get(key).is_some_and(|r| {
            r.any_resource
                || r.resources
                    .binary_search_by(|n| n.as_str().cmp(resource))
                    .is_ok()
        })
    }

    /// Whether the placement's predicates may let `cluster` through (see
    /// [`super::candidates`]); a placement not indexed: yes.
    pub(crate) fn may_choose(&self, key: &Key, cluster: &Cluster<'_>) -> bool {
        self.reads
            .get(key)
            .is_none_or(|r| r.sieve.may_pass(cluster))
    }

    /// Placements that use Balance (other placements' decisions change their scores).
    pub(crate) fn balance_users(&self) -> impl Iterator<Item = &Key> {
        self.balance.iter()
    }

    /// Whether the placement uses Balance.
    pub(crate) fn uses_balance(&self, key: &Key) -> bool {
        self.balance.contains(key)
    }

    /// Placements in `namespace`.
    pub(crate) fn in_namespace<'a>(
        &'a self,
        namespace: &str,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.by_namespace.get(namespace).into_iter().flatten()
    }

    /// Placements in `namespace` that may use clusterset `set` (through a binding there).
    pub(crate) fn using_set<'a>(
        &'a self,
        namespace: &str,
        set: &'a str,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.in_namespace(namespace).filter(move |k| {
            self.reads.get(*k).is_some_and(|r| {
                r.cluster_sets.is_empty() || r.cluster_sets.iter().any(|s| s == set)
            })
        })
    }
}

/// A set of cluster slots ([`ClusterInfo::slot`]), one bit each: what a Balance user's pass
/// could choose from, kept small (125 bytes per placement at 1,000 clusters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlotSet(Vec<u64>);

impl SlotSet {
    pub(crate) fn insert(&mut self, slot: usize) {
        let (word, bit) = (slot / 64, slot % 64);
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << bit;
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }
}

/// What the Balance prioritizer reads for one placement, as a fingerprint: the largest count
/// of decision entries on any cluster and the count on each cluster it could choose, both
/// without the placement's own entries (its own moves do not change its Balance input).
/// Equal fingerprints give equal Balance scores, so a Balance user whose fingerprint is
/// unchanged need not be rescheduled for Balance.
pub(crate) fn balance_input(
    snapshot: &Snapshot,
    namespace: &str,
    placement: &str,
    candidates: &SlotSet,
) -> u64 {
    let mut own: HashMap<&str, u32> = HashMap::new();
    for d in snapshot.decisions_of(namespace, placement) {
        for e in decision_entries(d) {
            *own.entry(e.cluster_name.as_str()).or_insert(0) += 1;
        }
    }
    let mut h = DefaultHasher::new();
    snapshot.max_decision_count_excluding(&own).hash(&mut h);
    for slot in candidates.iter() {
        let Some(c) = snapshot.slot(slot) else {
            continue;
        };
        let mine = own.get(&*c.name).copied().unwrap_or(0);
        (slot, &*c.name, c.decisions.saturating_sub(mine)).hash(&mut h);
    }
    h.finish()
}

/// The slots of `names` in `snapshot` (names it does not hold are left out).
pub(crate) fn slots_of<'a>(
    snapshot: &Snapshot,
    names: impl IntoIterator<Item = &'a Name>,
) -> SlotSet {
    let mut out = SlotSet::default();
    for n in names {
        if let Some(c) = snapshot.cluster(n) {
            out.insert(c.slot);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upsert(idx: &mut Index, p: &Placement) {
        let (ns, name) = crate::controller::listing::key_of(p);
        idx.upsert(&key(ns, name), p);
    }

    fn placement(ns: &str, name: &str, spec: serde_json::Value) -> Placement {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn score_names_from_cel() {
        assert_eq!(
            score_names(r#"managedCluster.scores("a").all(s, s.value > 1)"#),
            Some(vec!["a".into()])
        );
        assert_eq!(
            score_names(
                r#"managedCluster.scores('a').size() > 0 && managedCluster.scores( "b" ).size() > 0"#
            ),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            score_names("managedCluster.metadata.name == 'x'"),
            Some(vec![])
        );
        assert_eq!(
            score_names("managedCluster.scores(managedCluster.metadata.name)"),
            None
        );
    }

    #[test]
    fn removed_placements_leave_no_empty_sets() {
        let mut idx = Index::default();
        for i in 0..1000 {
            upsert(
                &mut idx,
                &placement(
                    &format!("ns{i}"),
                    "p",
                    json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": format!("r{i}"), "scoreName": "s"}}}]}}),
                ),
            );
        }
        assert_eq!(
            (idx.by_resource.len(), idx.by_namespace.len()),
            (1000, 1000)
        );
        for i in 0..1000 {
            idx.remove(&key(&format!("ns{i}"), "p"));
        }
        assert!(idx.is_empty());
        assert_eq!((idx.by_resource.len(), idx.by_namespace.len()), (0, 0));
    }

    #[test]
    fn index_fans_out() {
        let mut idx = Index::default();
        upsert(
            &mut idx,
            &placement(
                "a",
                "addon",
                json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}}]}}),
            ),
        );
        upsert(
            &mut idx,
            &placement(
                "a",
                "cel",
                json!({"clusterSets": ["x"], "predicates": [{"requiredClusterSelector": {"celSelector": {"celExpressions": ["managedCluster.scores(\"q\").size() > 0"]}}}]}),
            ),
        );
        upsert(&mut idx, &placement("b", "default", json!({})));
        let keys = |it: Vec<&Key>| {
            it.into_iter()
                .map(|k| format!("{}/{}", k.0, k.1))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(idx.for_score("r").collect()), ["a/addon"]);
        assert_eq!(keys(idx.for_score("q").collect()), ["a/cel"]);
        assert_eq!(keys(idx.balance_users().collect()), ["a/cel", "b/default"]);
        assert_eq!(
            keys(idx.using_set("a", "x").collect()),
            ["a/addon", "a/cel"]
        );
        assert_eq!(keys(idx.using_set("a", "y").collect()), ["a/addon"]);
        idx.remove(&("a".into(), "cel".into()));
        assert_eq!(keys(idx.for_score("q").collect()), Vec::<String>::new());
        assert_eq!(idx.len(), 2);
    }

    fn snapshot_with(decisions: &[(&str, &str, &[&str])]) -> Snapshot {
        let mut s = Snapshot::new();
        for c in ["c0", "c1", "c2", "c3"] {
            s.upsert_cluster(std::sync::Arc::new(
                serde_json::from_value(json!({"metadata": {"name": c}, "spec": {}})).unwrap(),
            ));
        }
        for (ns, p, clusters) in decisions {
            let entries: Vec<_> = clusters
                .iter()
                .map(|c| json!({"clusterName": c, "reason": ""}))
                .collect();
            s.upsert_decision(std::sync::Arc::new(
                serde_json::from_value(json!({"metadata": {"name": format!("{p}-decision-1"),
                    "namespace": ns, "labels": {ocm_api::wellknown::label::PLACEMENT: p}},
                    "status": {"decisions": entries}}))
                .unwrap(),
            ));
        }
        s
    }

    #[test]
    fn slot_sets_hold_what_was_inserted() {
        let mut s = SlotSet::default();
        for i in [0, 3, 63, 64, 200] {
            s.insert(i);
        }
        s.insert(3);
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 3, 63, 64, 200]);
        assert_eq!(SlotSet::default().iter().count(), 0);
    }

    #[test]
    fn balance_input_changes_only_with_what_balance_reads() {
        let snap = snapshot_with;
        let all = |s: &Snapshot| {
            let names: Vec<Name> = ["c0", "c1", "c2"].iter().map(|n| Name::from(*n)).collect();
            slots_of(s, &names)
        };
        let input = |s: &Snapshot| balance_input(s, "ns", "p", &all(s));
        let base = snap(&[("ns", "p", &["c0"]), ("ns", "q", &["c1", "c2"])]);
        let cases: [(&str, Snapshot, bool); 6] = [
            (
                "the same decisions",
                snap(&[("ns", "p", &["c0"]), ("ns", "q", &["c1", "c2"])]),
                false,
            ),
            (
                "its own decision moved",
                snap(&[("ns", "p", &["c1"]), ("ns", "q", &["c1", "c2"])]),
                false,
            ),
            (
                "its own decision gone",
                snap(&[("ns", "q", &["c1", "c2"])]),
                false,
            ),
            (
                "another moved among its candidates",
                snap(&[("ns", "p", &["c0"]), ("ns", "q", &["c0", "c2"])]),
                true,
            ),
            // c3 is not a candidate, but the largest count (the scale) changed.
            (
                "the largest count elsewhere changed",
                snap(&[
                    ("ns", "p", &["c0"]),
                    ("ns", "q", &["c1", "c2"]),
                    ("x", "r", &["c3"]),
                    ("x", "s", &["c3"]),
                ]),
                true,
            ),
            (
                "another placement with the same name elsewhere",
                snap(&[
                    ("ns", "p", &["c0"]),
                    ("other", "p", &["c0"]),
                    ("ns", "q", &["c1", "c2"]),
                ]),
                true,
            ),
        ];
        for (what, s, changed) in cases {
            assert_eq!(input(&s) != input(&base), changed, "{what}");
        }
        // A count on a cluster it cannot choose, below the largest, is not its input.
        let candidates = slots_of(&base, &[Name::from("c0")]);
        let with_c3 = snap(&[
            ("ns", "p", &["c0"]),
            ("ns", "q", &["c1", "c2"]),
            ("x", "r", &["c3"]),
        ]);
        assert_eq!(
            balance_input(&base, "ns", "p", &candidates),
            balance_input(&with_c3, "ns", "p", &candidates)
        );
    }
}
