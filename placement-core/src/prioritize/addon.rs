//! AddOn (upstream `plugins/addon`): the value of score item `scoreName` in the
//! AddOnPlacementScore `<cluster>/<resourceName>`; 0 when the object or the item is missing
//! or the scores expired (`now > validUntil`). Expired ones make a Warning.
//!
//! Unlike upstream, `validUntil` is not taken as is: a score counts for at most
//! [`MaxScoreValidity`] after the scheduler observed its current version, so that a provider
//! that writes `validUntil` years ahead (or none: "never expires") cannot freeze its score.
//! A score whose validity was cut short is reported ([`CappedScore`]).

use jiff::Timestamp;
use ocm_api::cluster::v1alpha1::AddOnPlacementScoreStatus;
use ocm_api::cluster::v1beta1::AddOnScore;
use ocm_api::wellknown::limits;

use crate::snapshot::{ClusterInfo, MaxScoreValidity, ScoreCell, Snapshot};

pub struct AddOnScores {
    pub scores: Vec<Option<i64>>,
    /// `<cluster>/<resourceName>` of the expired objects, in cluster order.
    pub expired: Vec<String>,
    /// Clusters whose value lay outside [-100, 100] and was clamped.
    pub clamped: Vec<String>,
    /// Scores whose `validUntil` lay beyond the bound, in cluster order.
    pub capped: Vec<CappedScore>,
    /// The earliest future expiry among the scores used (a reschedule is due then).
    pub next_expiry: Option<Timestamp>,
}

/// A score that counts only until `until`, earlier than its `validUntil` says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CappedScore {
    pub cluster: String,
    /// The AddOnPlacementScore's name.
    pub resource: String,
    /// As written (`None`: not set, "never expires" upstream).
    pub valid_until: Option<Timestamp>,
    /// The bound: when it was observed plus [`MaxScoreValidity`].
    pub until: Timestamp,
}

impl std::fmt::Display for CappedScore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let written = self
            .valid_until
            .map_or_else(|| "unset".to_owned(), |t| t.to_string());
        write!(
            f,
            "{}/{} (validUntil {written}) counts until {}",
            self.cluster, self.resource, self.until
        )
    }
}

/// When a score stops counting, and whether that is earlier than its `validUntil`.
struct Expiry {
    /// `None`: never.
    at: Option<Timestamp>,
    capped: bool,
    /// The bound came from a real observation (not from `now`, which moves with every pass).
    observed: bool,
}

fn expiry(cell: &ScoreCell, bound: MaxScoreValidity, now: Timestamp) -> Expiry {
    let at = counts_until(cell.valid_until, cell.observed_at.unwrap_or(now), bound);
    Expiry {
        at,
        capped: at != cell.valid_until,
        observed: cell.observed_at.is_some(),
    }
}

/// When a score stops counting: its `validUntil`, or the bound after it was observed,
/// whichever is earlier (`None`: never).
fn counts_until(
    valid_until: Option<Timestamp>,
    observed_at: Timestamp,
    bound: MaxScoreValidity,
) -> Option<Timestamp> {
    let cap = bound
        .0
        .map(|b| observed_at.checked_add(b).unwrap_or(Timestamp::MAX));
    match (valid_until, cap) {
        (Some(v), Some(c)) => Some(v.min(c)),
        (v, c) => v.or(c),
    }
}

/// Whether a new version of a score, observed `now`, changes no pass's outcome before the
/// old version would have stopped counting: the same items (CEL's `scores()` reads them, the
/// AddOn prioritizer their values), the old version still counts, and the new one counts
/// at least as long. Every placement that used the old version has a timer for when it
/// stops counting ([`AddOnScores::next_expiry`]) and sees the new one then; until then its
/// passes would come out the same. So an agent that renews its unchanged score every minute
/// need not reschedule every placement that reads it. `old_observed_at`: when the old
/// version was observed (`None`, unknown: not a mere renewal).
pub fn renewal_changes_nothing(
    old: Option<&AddOnPlacementScoreStatus>,
    old_observed_at: Option<Timestamp>,
    new: Option<&AddOnPlacementScoreStatus>,
    bound: MaxScoreValidity,
    now: Timestamp,
) -> bool {
    let (Some(old), Some(observed), Some(new)) = (old, old_observed_at, new) else {
        return false;
    };
    if old.scores != new.scores {
        return false;
    }
    let old_until = counts_until(old.valid_until.as_ref().map(|t| t.0), observed, bound);
    let new_until = counts_until(new.valid_until.as_ref().map(|t| t.0), now, bound);
    let old_counts = old_until.is_none_or(|u| now <= u);
    let lasts = match (old_until, new_until) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(o), Some(n)) => n >= o,
    };
    old_counts && lasts
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
        capped: Vec::new(),
        next_expiry: None,
    };
    let bound = snapshot.max_score_validity();
    let column = snapshot.score_column(&coord.resource_name, &coord.score_name);
    for c in clusters {
        let mut value = 0;
        if let Some(Some(cell)) = column.by_slot.get(c.slot) {
            let e = expiry(cell, bound, now);
            // Without an observation time (a file) the bound counts from `now`: it never ends
            // a score at this pass, and "unset" stays upstream's "never expires".
            if e.capped && (e.observed || cell.valid_until.is_some()) {
                out.capped.push(CappedScore {
                    cluster: c.name.to_string(),
                    resource: coord.resource_name.clone(),
                    valid_until: cell.valid_until,
                    until: e.at.unwrap_or(Timestamp::MAX),
                });
            }
            if e.at.is_some_and(|until| now > until) {
                out.expired
                    .push(format!("{}/{}", c.name, coord.resource_name));
            } else {
                // Expiry is strict (`now > validUntil`): look again a second later. A bound
                // counted from `now` moves with every pass: nothing to look again for.
                if let Some(until) =
                    e.at.filter(|_| !e.capped || e.observed)
                        .and_then(|u| u.checked_add(jiff::SignedDuration::from_secs(1)).ok())
                {
                    out.next_expiry =
                        Some(out.next_expiry.map_or(until, |n: Timestamp| n.min(until)));
                }
                if let Some(v) = cell.value {
                    value = i64::from(v);
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
