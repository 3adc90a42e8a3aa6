//! Which placements a change on one cluster can affect: those for which the cluster is a
//! candidate, before or after the change. Sans IO.
//!
//! A cluster is a candidate of a placement when it is a member of a clusterset bound in the
//! placement's namespace and allowed by its `spec.clusterSets`, and some predicate's label
//! and claim selectors match it. This is a superset of what a pass can choose: CEL
//! selectors, taints and terminating clusters are left out of it (they may only drop a
//! candidate, never add one), and a predicate whose selectors do not parse lets every
//! cluster through. A score, label or claim change on a cluster that is a candidate of no
//! placement wakes none (upstream wakes, for a score, every placement reading that score in a
//! namespace bound to one of the cluster's sets).
//!
//! How it stays correct as the other inputs change (nothing here is cached across events;
//! each event is judged against the stores at that instant):
//! - a cluster's own change (labels, claims, deletion): the placements for which its old
//!   object or its new one is a candidate (see `State::apply_cluster`);
//! - a clusterset or a binding change: every placement that may use the set in the bound
//!   namespace, whatever its predicates (`State::apply_set`, `State::apply_binding`);
//! - a placement change: that placement, whose predicates this module then reads anew.

use std::collections::BTreeMap;

use ocm_api::ManagedCluster;
use ocm_api::cluster::v1beta1::ClusterPredicate;
use ocm_api::selector::Selector;

/// What a placement's predicates say about a cluster without CEL: each predicate's label and
/// claim selectors. The predicates are ORed; within one, the selectors are ANDed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sieve(Option<Vec<(Selector, Selector)>>);

impl Sieve {
    /// The sieve of `predicates`; none, or one that does not parse: every cluster passes.
    pub(crate) fn of(predicates: &[ClusterPredicate]) -> Self {
        if predicates.is_empty() {
            return Self(None);
        }
        let compiled: Option<Vec<_>> = predicates
            .iter()
            .map(|p| {
                let s = &p.required_cluster_selector;
                let labels = Selector::from_label_selector(&s.label_selector).ok()?;
                let claims =
                    Selector::from_requirements(&s.claim_selector.match_expressions).ok()?;
                Some((labels, claims))
            })
            .collect();
        Self(compiled)
    }

    /// Whether `cluster` may pass the predicates (false only when every predicate's label or
    /// claim selector refuses it).
    pub(crate) fn may_pass(&self, cluster: &Cluster<'_>) -> bool {
        let Some(predicates) = &self.0 else {
            return true;
        };
        predicates
            .iter()
            .any(|(l, c)| l.matches(cluster.labels) && c.matches(&cluster.claims))
    }
}

/// What a sieve reads of a cluster, read once per event (not once per placement).
pub(crate) struct Cluster<'a> {
    labels: &'a BTreeMap<String, String>,
    claims: BTreeMap<String, String>,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl<'a> Cluster<'a> {
    pub(crate) fn of(cluster: &'a ManagedCluster) -> Self {
        Self {
            labels: cluster.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
            claims: cluster
                .status
                .iter()
                .flat_map(|s| &s.cluster_claims)
                .map(|c| (c.name.clone(), c.value.clone()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The rules, as a table: which placements a score write on a cluster wakes, and which
    //! placements a cluster change wakes, before and after.

    use std::collections::BTreeSet;

    use ocm_api::{
        AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    };
    use serde_json::{Value, json};

    use crate::controller::state::State;

    fn cluster(name: &str, labels: Value, claims: &[(&str, &str)]) -> ManagedCluster {
        let claims: Vec<_> = claims
            .iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
            "spec": {}, "status": {"clusterClaims": claims}}))
        .expect("a valid ManagedCluster")
    }

    fn exclusive(set: &str) -> Value {
        json!({"cluster.open-cluster-management.io/clusterset": set})
    }

    fn addon(resource: &str) -> Value {
        json!({"mode": "Exact", "configurations": [{"scoreCoordinate": {"type": "AddOn",
            "addOn": {"resourceName": resource, "scoreName": "s"}}}]})
    }

    fn score(cluster: &str, name: &str, value: i32) -> AddOnPlacementScore {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": cluster},
            "status": {"scores": [{"name": "s", "value": value}]}}))
        .expect("a valid AddOnPlacementScore")
    }

    /// Two tenants: `ta` binds set `a` (clusters a1, a2 with region east/west, a2 with a
    /// claim), `tb` binds set `b` (b1); `shared` binds both, and a label-selector set `gpu`
    /// bound in `tg` holds clusters labelled `gpu=yes`.
    fn hub() -> State {
        let mut st = State::default();
        let set = |name: &str, spec: Value| -> ManagedClusterSet {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
                .expect("a valid set")
        };
        let exclusive_set =
            json!({"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}});
        let _ = st.apply_set(set("a", exclusive_set.clone()));
        let _ = st.apply_set(set("b", exclusive_set));
        let _ = st.apply_set(set(
            "gpu",
            json!({"clusterSelector": {"selectorType": "LabelSelector",
                "labelSelector": {"matchLabels": {"gpu": "yes"}}}}),
        ));
        for (ns, set) in [
            ("ta", "a"),
            ("tb", "b"),
            ("shared", "a"),
            ("shared", "b"),
            ("tg", "gpu"),
        ] {
            let b: ManagedClusterSetBinding = serde_json::from_value(json!({
                "metadata": {"name": set, "namespace": ns}, "spec": {"clusterSet": set}}))
            .expect("a valid binding");
            let _ = st.apply_binding(&b);
        }
        let mut east = exclusive("a");
        east["region"] = json!("east");
        let mut west = exclusive("a");
        west["region"] = json!("west");
        let _ = st.apply_cluster(cluster("a1", east, &[]));
        let _ = st.apply_cluster(cluster("a2", west, &[("tier", "gold")]));
        let _ = st.apply_cluster(cluster("b1", exclusive("b"), &[]));
        let placements = [
            ("ta", "all", json!({"prioritizerPolicy": addon("r")})),
            (
                "ta",
                "east",
                json!({"prioritizerPolicy": addon("r"), "predicates": [
                {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"region": "east"}}}}]}),
            ),
            (
                "ta",
                "gold",
                json!({"prioritizerPolicy": addon("r"), "predicates": [
                {"requiredClusterSelector": {"claimSelector": {"matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["gold"]}]}}}]}),
            ),
            // ORed predicates: either region.
            (
                "ta",
                "either",
                json!({"prioritizerPolicy": addon("r"), "predicates": [
                {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"region": "east"}}}},
                {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"region": "west"}}}}]}),
            ),
            // CEL is not judged: it may match.
            (
                "ta",
                "cel",
                json!({"prioritizerPolicy": addon("r"), "predicates": [
                {"requiredClusterSelector": {"celSelector": {"celExpressions": ["false"]}}}]}),
            ),
            (
                "ta",
                "other-score",
                json!({"prioritizerPolicy": addon("q")}),
            ),
            ("tb", "all", json!({"prioritizerPolicy": addon("r")})),
            (
                "shared",
                "only-b",
                json!({"clusterSets": ["b"], "prioritizerPolicy": addon("r")}),
            ),
            ("shared", "both", json!({"prioritizerPolicy": addon("r")})),
            ("tg", "all", json!({"prioritizerPolicy": addon("r")})),
        ];
        for (ns, name, spec) in placements {
            let p: Placement = serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}),
            )
            .expect("a valid Placement");
            let _ = st.apply_placement(p);
        }
        // The first score of each cluster: what follows are changes of value.
        for c in ["a1", "a2", "b1", "g1"] {
            let _ = st.apply_score(score(c, "r", 0)).requeue;
        }
        st
    }

    fn names(keys: BTreeSet<crate::controller::triggers::Key>) -> Vec<String> {
        keys.into_iter()
            .map(|k| format!("{}/{}", k.0, k.1))
            .collect()
    }

    #[test]
    fn a_score_change_wakes_the_placements_that_may_choose_its_cluster() {
        let cases: [(&str, &str, &[&str]); 5] = [
            (
                "a1",
                "east, in set a: not tb's, not the west-only or gold-only ones",
                &["shared/both", "ta/all", "ta/cel", "ta/east", "ta/either"],
            ),
            (
                "a2",
                "west, claim tier=gold",
                &["shared/both", "ta/all", "ta/cel", "ta/either", "ta/gold"],
            ),
            (
                "b1",
                "set b only",
                &["shared/both", "shared/only-b", "tb/all"],
            ),
            // No such cluster: a candidate of nothing (upstream wakes nothing either).
            ("g1", "no cluster of that name", &[]),
            ("nowhere", "no cluster, first write", &[]),
        ];
        for (c, what, want) in cases {
            let mut st = hub();
            let woken = st.apply_score(score(c, "r", 50)).requeue;
            assert_eq!(names(woken), *want, "{c}: {what}");
        }
        // Another score name wakes only its readers.
        let mut st = hub();
        let _ = st.apply_score(score("a1", "q", 0)).requeue;
        assert_eq!(
            names(st.apply_score(score("a1", "q", 9)).requeue),
            ["ta/other-score"]
        );
        assert_eq!(
            names(st.delete_score("a1", "r").requeue),
            ["shared/both", "ta/all", "ta/cel", "ta/east", "ta/either"]
        );
    }

    #[test]
    fn a_cluster_change_wakes_the_placements_it_enters_or_leaves() {
        let mut west = exclusive("a");
        west["region"] = json!("west");
        let mut gpu_b = exclusive("b");
        gpu_b["gpu"] = json!("yes");
        let cases: [(&str, ManagedCluster, &[&str]); 4] = [
            // A cluster change wakes every placement it is a candidate of, whatever score it
            // reads. east -> west: leaves `east`.
            (
                "a1 moves region",
                cluster("a1", west, &[]),
                &[
                    "shared/both",
                    "ta/all",
                    "ta/cel",
                    "ta/east",
                    "ta/either",
                    "ta/other-score",
                ],
            ),
            // a2 loses its claim: `gold` must hear of it.
            (
                "a2 loses its claim",
                cluster(
                    "a2",
                    json!({"cluster.open-cluster-management.io/clusterset": "a", "region": "west"}),
                    &[],
                ),
                &[
                    "shared/both",
                    "ta/all",
                    "ta/cel",
                    "ta/either",
                    "ta/gold",
                    "ta/other-score",
                ],
            ),
            // b1 joins the gpu set: tg's placement too (the new object), and b's (the old).
            (
                "b1 joins gpu",
                cluster("b1", gpu_b, &[]),
                &["shared/both", "shared/only-b", "tb/all", "tg/all"],
            ),
            // a1 moves from set a to set b: both sides.
            (
                "a1 moves set",
                cluster("a1", exclusive("b"), &[]),
                &[
                    "shared/both",
                    "shared/only-b",
                    "ta/all",
                    "ta/cel",
                    "ta/east",
                    "ta/either",
                    "ta/other-score",
                    "tb/all",
                ],
            ),
        ];
        for (what, new, want) in cases {
            let mut st = hub();
            assert_eq!(names(st.apply_cluster(new)), *want, "{what}");
        }
        let mut st = hub();
        assert_eq!(
            names(st.delete_cluster("b1")),
            ["shared/both", "shared/only-b", "tb/all"]
        );
    }

    #[test]
    fn sets_and_bindings_wake_every_placement_that_may_use_them() {
        let mut st = hub();
        let b: ManagedClusterSetBinding = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "tb"}, "spec": {"clusterSet": "a"}}))
        .expect("a valid binding");
        // tb now binds a: its placement may choose a's clusters, and a score there wakes it.
        assert_eq!(names(st.apply_binding(&b)), ["tb/all"]);
        assert!(names(st.apply_score(score("a1", "r", 7)).requeue).contains(&"tb/all".to_owned()));
        assert_eq!(names(st.delete_binding("tb", "a")), ["tb/all"]);
        assert!(!names(st.apply_score(score("a1", "r", 8)).requeue).contains(&"tb/all".to_owned()));
        // A set's deletion wakes all its users, predicates or not.
        assert_eq!(
            names(st.delete_set("a")),
            [
                "shared/both",
                "ta/all",
                "ta/cel",
                "ta/east",
                "ta/either",
                "ta/gold",
                "ta/other-score"
            ]
        );
    }

    #[test]
    fn a_placement_edit_changes_what_wakes_it() {
        let mut st = hub();
        let p: Placement = serde_json::from_value(json!({"metadata": {"name": "east", "namespace": "ta"},
            "spec": {"prioritizerPolicy": addon("r"), "predicates": [
                {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"region": "west"}}}}]}}))
        .expect("a valid Placement");
        assert_eq!(names(st.apply_placement(p)), ["ta/east"]);
        assert!(
            !names(st.apply_score(score("a1", "r", 3)).requeue).contains(&"ta/east".to_owned())
        );
        assert!(names(st.apply_score(score("a2", "r", 3)).requeue).contains(&"ta/east".to_owned()));
    }

    #[test]
    fn a_sieve_that_does_not_parse_lets_everything_through() {
        let p: Placement = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "n"},
            "spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchExpressions": [
                {"key": "k", "operator": "Bogus", "values": ["v"]}]}}}]}}))
        .expect("a valid Placement");
        let sieve = super::Sieve::of(&p.spec.predicates);
        assert!(sieve.may_pass(&super::Cluster::of(&cluster("x", json!({}), &[]))));
    }
}
