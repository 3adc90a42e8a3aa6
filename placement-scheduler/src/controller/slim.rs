//! What the controller keeps of each object it watches: the fields something reads, not the
//! object as the apiserver sends it.
//!
//! `managedFields` is often the largest part of an object on the wire (one entry per field
//! manager, each a tree of every field it owns); only a score's last write time is read. A
//! PlacementDecision is kept as its name, labels, `resourceVersion` and `uid` (the writer's
//! preconditions) and its status; at 10,000 placements the decisions and Placements are most
//! of the controller's memory.
//!
//! ManagedClusters are kept whole: a `celSelector` sees the whole object (`managedCluster`),
//! and there is one per cluster, not per placement.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};
use ocm_api::{AddOnPlacementScore, ManagedClusterSet, Placement, PlacementDecision};
use placement_core::prioritize::addon::written_at;

/// Drops `managedFields` (server-side apply bookkeeping).
fn strip(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
}

/// A Placement without `managedFields`: the core reads its spec, the writer its status,
/// `resourceVersion`, `uid` and name; the disable annotation and deletion are read too.
pub(crate) fn placement(mut p: Placement) -> Placement {
    strip(&mut p.metadata);
    p
}

/// A PlacementDecision as the snapshot keeps it: namespace, name, labels (the placement and
/// group labels), our stability state annotation, `resourceVersion` and `uid` (the writer's
/// preconditions) and the status.
pub(crate) fn decision(mut d: PlacementDecision) -> PlacementDecision {
    let m = std::mem::take(&mut d.metadata);
    let annotations = m.annotations.and_then(|mut a| {
        let state = a.remove(placement_core::stability::STATE_ANNOTATION)?;
        Some(
            [(
                placement_core::stability::STATE_ANNOTATION.to_owned(),
                state,
            )]
            .into_iter()
            .collect(),
        )
    });
    d.metadata = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: m.labels,
        annotations,
        resource_version: m.resource_version,
        uid: m.uid,
        ..ObjectMeta::default()
    };
    if let Some(s) = &mut d.status {
        // A list decoded from JSON grew by doubling: up to twice the entries' size.
        s.decisions.shrink_to_fit();
    }
    d
}

/// An AddOnPlacementScore whose `managedFields` are reduced to the one time the core reads:
/// when the hub last accepted a write of its status ([`written_at`], where the validity
/// bound counts from).
pub(crate) fn score(mut s: AddOnPlacementScore) -> AddOnPlacementScore {
    let written = written_at(&s.metadata);
    s.metadata.managed_fields = written.map(|t| {
        vec![ManagedFieldsEntry {
            subresource: Some("status".to_owned()),
            time: Some(Time(t)),
            ..ManagedFieldsEntry::default()
        }]
    });
    s
}

/// A ManagedClusterSet without `managedFields`.
pub(crate) fn set(mut s: ManagedClusterSet) -> ManagedClusterSet {
    strip(&mut s.metadata);
    s
}
