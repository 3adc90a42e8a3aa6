//! AddOn (upstream `plugins/addon`): the value of score item `scoreName` in the
//! AddOnPlacementScore `<cluster>/<resourceName>`; 0 when the object or the item is missing
//! or the scores expired (`now > validUntil`). Expired ones make a Warning.

use jiff::Timestamp;
use ocm_api::cluster::v1beta1::AddOnScore;
use ocm_api::wellknown::limits;

use crate::core::snapshot::{ClusterInfo, Snapshot};

pub struct AddOnScores {
    pub scores: Vec<Option<i64>>,
    /// `<cluster>/<resourceName>` of the expired objects, in cluster order.
    pub expired: Vec<String>,
    /// Clusters whose value lay outside [-100, 100] and was clamped.
    pub clamped: Vec<String>,
    /// The earliest future `validUntil` among the scores used (a reschedule is due then).
    pub next_expiry: Option<Timestamp>,
}

pub fn score(
    coord: &AddOnScore,
    clusters: &[&ClusterInfo],
    snapshot: &Snapshot,
    now: Timestamp,
) -> AddOnScores {
    let mut out = AddOnScores {
        scores: Vec::with_capacity(clusters.len()),
        expired: Vec::new(),
        clamped: Vec::new(),
        next_expiry: None,
    };
    let column = snapshot.score_column(&coord.resource_name, &coord.score_name);
    for c in clusters {
        let mut value = 0;
        if let Some(Some((item, valid_until))) = column.by_slot.get(c.slot) {
            if valid_until.is_some_and(|until| now > until) {
                out.expired
                    .push(format!("{}/{}", c.name, coord.resource_name));
            } else {
                // Expiry is strict (`now > validUntil`): look again a second later.
                if let Some(until) =
                    valid_until.and_then(|u| u.checked_add(jiff::SignedDuration::from_secs(1)).ok())
                {
                    out.next_expiry =
                        Some(out.next_expiry.map_or(until, |n: Timestamp| n.min(until)));
                }
                if let Some(v) = item {
                    value = i64::from(*v);
                    // The CRD bounds values; input that bypassed it (files) is clamped, not trusted.
                    if !(limits::MIN_CLUSTER_SCORE..=limits::MAX_CLUSTER_SCORE).contains(&value) {
                        out.clamped.push(c.name.to_string());
                        value = value.clamp(limits::MIN_CLUSTER_SCORE, limits::MAX_CLUSTER_SCORE);
                    }
                }
            }
        }
        out.scores.push(Some(value));
    }
    out
}
