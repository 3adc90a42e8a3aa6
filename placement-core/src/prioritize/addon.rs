//! AddOn (upstream `plugins/addon`): the value of score item `scoreName` in the
//! AddOnPlacementScore `<cluster>/<resourceName>`; 0 when the object or the item is missing
//! or the scores expired (`now > validUntil`). Expired ones make a Warning.
//!
//! Unlike upstream, a `validUntil` that is set is not taken as is: a score counts for at most
//! [`MaxScoreValidity`] after the hub last accepted a write of it ([`written_at`]), so that a
//! provider whose clock runs ahead cannot keep its score counting long after it stopped. A
//! score whose validity was cut short is reported ([`CappedScore`]). An unset `validUntil`
//! never expires, as upstream.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ocm_api::cluster::v1alpha1::AddOnPlacementScore;
use ocm_api::cluster::v1beta1::AddOnScore;
use ocm_api::wellknown::limits;

use super::Scored;
use crate::snapshot::{ClusterInfo, MaxScoreValidity, ScoreCell, Snapshot};
use crate::status::{Code, Status};

/// Capped scores named one by one in a pass's notes; the rest are counted.
const CAPPED_NOTES: usize = 10;

/// When the hub last accepted a write of a score: the latest `managedFields` time of a write
/// to its status (the apiserver sets it from its own clock on every write that changes a
/// field), else of any write, else the creation time; `None` when the object says none of
/// these (a file). The validity bound counts from here, so it reads only what the hub holds
/// and gives the same answer to every scheduler that reads the object, before and after a
/// restart. A writer that forges the time can at most make its score count as an unset
/// `validUntil` does, which it may write anyway.
pub fn written_at(meta: &ObjectMeta) -> Option<Timestamp> {
    let fields = meta.managed_fields.as_deref().unwrap_or_default();
    let latest = |status: bool| {
        fields
            .iter()
            .filter(|f| !status || f.subresource.as_deref() == Some("status"))
            .filter_map(|f| f.time.as_ref().map(|t| t.0))
            .max()
    };
    latest(true)
        .or_else(|| latest(false))
        .or_else(|| meta.creation_timestamp.as_ref().map(|t| t.0))
}

pub(crate) struct AddOnScores {
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
    /// The bound: when the hub last accepted a write of it plus [`MaxScoreValidity`].
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
    /// The bound came from when the score was written (not from `now`, which moves with
    /// every pass).
    known: bool,
}

fn expiry(cell: &ScoreCell, bound: MaxScoreValidity, now: Timestamp) -> Expiry {
    let at = counts_until(cell.valid_until, cell.written_at, bound, now);
    Expiry {
        at,
        capped: at != cell.valid_until,
        known: cell.written_at.is_some(),
    }
}

/// When a score stops counting: never when `validUntil` is unset (upstream); else its
/// `validUntil` or the bound after it was written, whichever is earlier. A write time in
/// the future (a clock ahead of ours, or forged) counts as `now`; an unknown one (a file)
/// too, so the bound never ends such a score at this instant.
pub(crate) fn counts_until(
    valid_until: Option<Timestamp>,
    written_at: Option<Timestamp>,
    bound: MaxScoreValidity,
    now: Timestamp,
) -> Option<Timestamp> {
    let valid_until = valid_until?;
    let written = written_at.map_or(now, |w| w.min(now));
    let cap = bound
        .0
        .map(|b| written.checked_add(b).unwrap_or(Timestamp::MAX));
    Some(cap.map_or(valid_until, |c| valid_until.min(c)))
}

/// Whether a new version of a score changes no pass's outcome before the old version would
/// have stopped counting: the same items (CEL's `scores()` reads them, the AddOn prioritizer
/// their values), the old version still counts, and the new one counts at least as long.
/// Every placement that used the old version has a timer for when it stops counting
/// (`AddOnScores::next_expiry`) and sees the new one then; until then its passes would
/// come out the same. So an agent that renews its unchanged score every minute need not
/// reschedule every placement that reads it. Both versions' ends come from the objects
/// themselves (`counts_until`), as every pass reads them.
pub fn renewal_changes_nothing(
    old: Option<&AddOnPlacementScore>,
    new: Option<&AddOnPlacementScore>,
    bound: MaxScoreValidity,
    now: Timestamp,
) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return false;
    };
    let (Some(old_status), Some(new_status)) = (old.status.as_ref(), new.status.as_ref()) else {
        return false;
    };
    if old_status.scores != new_status.scores {
        return false;
    }
    let until = |s: &AddOnPlacementScore| {
        let valid_until = s
            .status
            .as_ref()
            .and_then(|st| st.valid_until.as_ref())
            .map(|t| t.0);
        counts_until(valid_until, written_at(&s.metadata), bound, now)
    };
    let (old_until, new_until) = (until(old), until(new));
    let old_counts = old_until.is_none_or(|u| now <= u);
    let lasts = match (old_until, new_until) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(o), Some(n)) => n >= o,
    };
    old_counts && lasts
}

pub(crate) fn score(
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
            if e.capped {
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
                    e.at.filter(|_| !e.capped || e.known)
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

/// The AddOn prioritizer `name` as every prioritizer answers ([`Scored`]): expired scores make
/// a Warning, clamped and capped ones notes, and the scores the bound has ended are reported.
pub(crate) fn prioritize(
    name: &str,
    coord: &AddOnScore,
    clusters: &[&ClusterInfo],
    snapshot: &Snapshot,
    now: Timestamp,
) -> Scored {
    let r = score(coord, clusters, snapshot, now);
    let warning = (!r.expired.is_empty()).then(|| {
        Status::new(
            Code::Warning,
            name,
            format!("AddOnPlacementScores {} expired", r.expired.join(" ")),
        )
    });
    let mut notes = Vec::new();
    if !r.clamped.is_empty() {
        notes.push(format!(
            "{name}: values outside [-100, 100] clamped for {}",
            r.clamped.join(", ")
        ));
    }
    notes.extend(capped_notes(name, &r.capped, snapshot.max_score_validity()));
    Scored {
        scores: r.scores,
        warning,
        notes,
        capped: r.capped.into_iter().filter(|c| now > c.until).collect(),
        requeue_at: r.next_expiry,
    }
}

/// A note for the first few capped scores only: a provider that writes far validity for the
/// whole fleet would otherwise cost a formatted note per cluster on every pass. The outcome's
/// list of ended scores keeps them all.
fn capped_notes(name: &str, capped: &[CappedScore], bound: MaxScoreValidity) -> Vec<String> {
    if capped.is_empty() {
        return Vec::new();
    }
    let bound = bound.0.map_or_else(String::new, |b| format!("{b:#}"));
    let mut notes: Vec<String> = capped
        .iter()
        .take(CAPPED_NOTES)
        .map(|c| format!("{name}: validity capped ({bound} after it was written): {c}"))
        .collect();
    if capped.len() > CAPPED_NOTES {
        notes.push(format!(
            "{name}: validity capped ({bound} after it was written) for {} more scores",
            capped.len() - CAPPED_NOTES
        ));
    }
    notes
}
