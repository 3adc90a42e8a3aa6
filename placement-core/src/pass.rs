//! What every step of one scheduling pass shares: its inputs, and this placement's current
//! PlacementDecisions in the shapes the steps read them.

use std::collections::HashMap;

use jiff::Timestamp;
use ocm_api::{Placement, PlacementDecision, PlacementSpec, PlacementStatus};

use crate::snapshot::{ClusterInfo, Snapshot, decision_entries};

/// The inputs of one pass, read once.
pub(crate) struct Pass<'a> {
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) placement: &'a Placement,
    pub(crate) spec: &'a PlacementSpec,
    /// `default` for a Placement without one (a file or a what-if never met an apiserver).
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) now: Timestamp,
    /// This placement's PlacementDecisions on the hub.
    pub(crate) existing: Vec<&'a PlacementDecision>,
    pub(crate) own: Own<'a>,
    /// The Placement's status before this pass (empty when it has none).
    pub(crate) previous: PlacementStatus,
}

impl<'a> Pass<'a> {
    pub(crate) fn new(snapshot: &'a Snapshot, placement: &'a Placement, now: Timestamp) -> Self {
        let namespace = placement
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = placement.metadata.name.clone().unwrap_or_default();
        let existing = snapshot.decisions_of(&namespace, &name);
        let own = Own::new(snapshot, &existing);
        Pass {
            snapshot,
            placement,
            spec: &placement.spec,
            namespace,
            name,
            now,
            existing,
            own,
            previous: placement.status.clone().unwrap_or_default(),
        }
    }

    /// The value of one of the Placement's annotations.
    pub(crate) fn annotation(&self, key: &str) -> Option<&'a str> {
        self.placement
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }
}

/// This placement's current decision entries per cluster, by name and by snapshot slot: what
/// Steady, Balance and `NoSelectIfNew` ask about a cluster.
pub(crate) struct Own<'a> {
    pub(crate) by_name: HashMap<&'a str, u32>,
    /// Empty when the placement has no entries (no slab-sized array for a new placement).
    pub(crate) by_slot: Vec<u32>,
}

impl<'a> Own<'a> {
    fn new(snapshot: &Snapshot, existing: &[&'a PlacementDecision]) -> Self {
        let mut by_name: HashMap<&str, u32> = HashMap::new();
        for d in existing {
            for e in decision_entries(d) {
                *by_name.entry(e.cluster_name.as_str()).or_insert(0) += 1;
            }
        }
        let slots = if by_name.is_empty() {
            0
        } else {
            snapshot.slot_count()
        };
        let mut by_slot = vec![0u32; slots];
        for (c, n) in &by_name {
            if let Some(info) = snapshot.cluster(c) {
                by_slot[info.slot] = *n;
            }
        }
        Own { by_name, by_slot }
    }

    /// How many of this placement's entries name `c`.
    pub(crate) fn of(&self, c: &ClusterInfo) -> u32 {
        self.by_slot.get(c.slot).copied().unwrap_or(0)
    }
}

/// The earlier of two optional times (either one when the other is `None`).
pub(crate) fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
