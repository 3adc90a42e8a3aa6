//! Balance (upstream `plugins/balance`): prefer clusters other placements use less. Counts
//! decision entries of every PlacementDecision in every namespace except this placement's
//! own, then `score = 2 * int64(100 * (0.5 - count/maxCount))`; 100 without any count.

use std::collections::HashMap;

use crate::snapshot::{ClusterInfo, Snapshot};

pub(crate) fn score(
    snapshot: &Snapshot,
    own: &HashMap<&str, u32>,
    own_by_slot: &[u32],
    clusters: &[&ClusterInfo],
) -> Vec<Option<i64>> {
    let max = snapshot.max_decision_count_excluding(own);
    clusters
        .iter()
        .map(|c| {
            // The mirrored count equals `snapshot.decision_count(name)`, without a lookup.
            let count = c
                .decisions
                .saturating_sub(own_by_slot.get(c.slot).copied().unwrap_or(0));
            if count == 0 || max == 0 {
                return Some(100);
            }
            let usage = f64::from(count) / f64::from(max);
            Some(2 * ((100.0 * (0.5 - usage)) as i64))
        })
        .collect()
}
