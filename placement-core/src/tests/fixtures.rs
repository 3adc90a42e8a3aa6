//! Builders for the objects the core reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use ocm_api::cluster::v1::{ManagedClusterClaim, ManagedClusterStatus};
use ocm_api::cluster::v1alpha1::AddOnPlacementScoreFields;
use ocm_api::cluster::v1beta1::PlacementDecisionFields;
use ocm_api::wellknown::label;
use ocm_api::*;
use serde_json::json;

use crate::{Outcome, Snapshot, schedule};

pub fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().unwrap()
}

pub fn at(offset_secs: i64) -> Time {
    Time(now() + jiff::SignedDuration::from_secs(offset_secs))
}

/// A ManagedCluster builder.
#[derive(Clone)]
pub struct C(pub ManagedCluster);

pub fn cluster(name: &str) -> C {
    C(ManagedCluster {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(label::CLUSTERSET.into(), "set".into())])),
            ..Default::default()
        },
        spec: Default::default(),
        status: Some(ManagedClusterStatus::default()),
    })
}

impl C {
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_default()
            .insert(k.into(), v.into());
        self
    }
    pub fn set(self, set: &str) -> Self {
        self.label(label::CLUSTERSET, set)
    }
    pub fn no_set(mut self) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_default()
            .remove(label::CLUSTERSET);
        self
    }
    pub fn claim(mut self, k: &str, v: &str) -> Self {
        let st = self.0.status.get_or_insert_default();
        st.cluster_claims.push(ManagedClusterClaim {
            name: k.into(),
            value: v.into(),
        });
        self
    }
    pub fn resources(mut self, cpu: &str, mem: &str) -> Self {
        let st = self.0.status.get_or_insert_default();
        for (r, v) in [("cpu", cpu), ("memory", mem)] {
            st.allocatable.insert(r.into(), Quantity(v.into()));
            st.capacity.insert(r.into(), Quantity(v.into()));
        }
        self
    }
    pub fn taint(mut self, key: &str, value: &str, effect: &str, added: Option<Time>) -> Self {
        self.0.spec.taints.push(Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
            time_added: added,
        });
        self
    }
    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(at(-10));
        self
    }
}

pub fn exclusive_set(name: &str) -> ManagedClusterSet {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}})).unwrap()
}

pub fn selector_set(name: &str, selector: serde_json::Value) -> ManagedClusterSet {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"clusterSelector": {"selectorType": "LabelSelector", "labelSelector": selector}}})).unwrap()
}

pub fn binding(ns: &str, set: &str) -> ManagedClusterSetBinding {
    serde_json::from_value(
        json!({"metadata": {"name": set, "namespace": ns}, "spec": {"clusterSet": set}}),
    )
    .unwrap()
}

/// `score` as the hub holds it after a write of its status at `at` (the apiserver's
/// `managedFields` time, where the validity bound counts from).
pub fn written(mut s: AddOnPlacementScore, at: Time) -> AddOnPlacementScore {
    s.metadata.managed_fields = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
            manager: Some("agent".into()),
            operation: Some("Update".into()),
            subresource: Some("status".into()),
            time: Some(at),
            ..Default::default()
        },
    ]);
    s
}

pub fn score(
    cluster: &str,
    name: &str,
    items: &[(&str, i32)],
    valid_until: Option<Time>,
) -> AddOnPlacementScore {
    AddOnPlacementScore {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(cluster.into()),
            ..Default::default()
        },
        spec: AddOnPlacementScoreFields {},
        status: Some(AddOnPlacementScoreStatus {
            conditions: vec![],
            scores: items
                .iter()
                .map(|(n, v)| AddOnPlacementScoreItem {
                    name: (*n).into(),
                    value: *v,
                })
                .collect(),
            valid_until,
        }),
    }
}

/// A PlacementDecision of `placement` (labels as the scheduler writes them).
pub fn decision(
    ns: &str,
    placement: &str,
    k: u32,
    group: (usize, &str),
    clusters: &[&str],
) -> PlacementDecision {
    PlacementDecision {
        metadata: ObjectMeta {
            name: Some(format!("{placement}-decision-{k}")),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([
                (label::PLACEMENT.into(), placement.into()),
                (label::DECISION_GROUP_INDEX.into(), group.0.to_string()),
                (label::DECISION_GROUP_NAME.into(), group.1.into()),
            ])),
            ..Default::default()
        },
        spec: PlacementDecisionFields {},
        status: Some(ocm_api::cluster::v1beta1::PlacementDecisionStatus {
            decisions: clusters
                .iter()
                .map(|c| ClusterDecision {
                    cluster_name: (*c).into(),
                    reason: String::new(),
                    score: 0,
                })
                .collect(),
        }),
    }
}

/// A Placement in namespace `ns` from its spec as JSON.
pub fn placement(ns: &str, name: &str, spec: serde_json::Value) -> Placement {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}))
        .unwrap()
}

/// A hub: clusters in set `set`, bound to namespace `ns`.
pub struct World {
    pub snapshot: Snapshot,
}

impl World {
    pub fn new(clusters: Vec<C>) -> Self {
        let mut w = World {
            snapshot: Snapshot::new(),
        };
        w.snapshot.upsert_set(Arc::new(exclusive_set("set")));
        w.snapshot.upsert_binding(&binding("ns", "set"));
        for c in clusters {
            w.add(c);
        }
        w
    }
    pub fn add(&mut self, c: C) -> &mut Self {
        self.snapshot.upsert_cluster(Arc::new(c.0));
        self
    }
    pub fn score(&mut self, s: AddOnPlacementScore) -> &mut Self {
        self.snapshot.upsert_score(Arc::new(s));
        self
    }
    pub fn decision(&mut self, d: PlacementDecision) -> &mut Self {
        self.snapshot.upsert_decision(Arc::new(d));
        self
    }
    pub fn schedule(&self, p: &Placement) -> Outcome {
        schedule(&self.snapshot, p, now())
    }
    /// Schedules and applies the outcome's writes and status, as the controller would.
    pub fn apply(&mut self, p: &mut Placement) -> Outcome {
        let out = self.schedule(p);
        self.apply_outcome(p, &out);
        out
    }
    pub fn apply_outcome(&mut self, p: &mut Placement, out: &Outcome) {
        crate::plan::never_drops_kept(
            &self.snapshot.decisions_of(&out.namespace, &out.name),
            &out.writes,
        )
        .expect("writes keep every kept cluster");
        for d in &out.decisions {
            self.snapshot.upsert_decision(Arc::new(d.clone()));
        }
        let wanted: Vec<&str> = out
            .decisions
            .iter()
            .filter_map(|d| d.metadata.name.as_deref())
            .collect();
        let stale: Vec<String> = self
            .snapshot
            .decisions_of(&out.namespace, &out.name)
            .iter()
            .filter_map(|d| d.metadata.name.clone())
            .filter(|n| !wanted.contains(&n.as_str()))
            .collect();
        for n in stale {
            self.snapshot.remove_decision(&out.namespace, &n);
        }
        p.status = Some(out.placement_status.clone());
    }
}

pub fn names(v: &[crate::Name]) -> Vec<&str> {
    v.iter().map(|n| &**n).collect()
}

pub fn selected(o: &Outcome) -> Vec<&str> {
    names(&o.selected)
}

/// Selected, sorted by name.
pub fn chosen(o: &Outcome) -> Vec<&str> {
    let mut v = selected(o);
    v.sort();
    v
}

pub fn prioritizer(o: &Outcome, name: &str) -> Vec<Option<i64>> {
    o.prioritizers
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no prioritizer {name}"))
        .scores
        .clone()
}

pub fn condition<'a>(o: &'a Outcome, t: &str) -> (&'a str, &'a str, &'a str) {
    let c = o
        .placement_status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap();
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// `<cluster>: <reason>` for what filter `i` dropped.
pub fn dropped(o: &Outcome, i: usize) -> Vec<String> {
    o.filters[i]
        .dropped
        .iter()
        .map(|(n, r)| format!("{n}: {r}"))
        .collect()
}

/// Five clusters, `c1`..`c5`, in one set bound to `ns`.
pub fn five() -> World {
    World::new((1..=5).map(|i| cluster(&format!("c{i}"))).collect())
}

/// One summary line per planned write, in order.
pub fn writes(o: &Outcome) -> Vec<String> {
    o.writes
        .iter()
        .map(|w| crate::plan::summary(&w.write))
        .collect()
}
