//! How far a pass's selection is from changing: what a later change of one cluster's
//! AddOnPlacementScore is judged against, so that a change which cannot move the decisions
//! costs no pass. Sans IO; the controller keeps one [`Margin`] per placement from its last
//! pass and drops it when anything else may have moved (see its `state` module).
//!
//! A score change alters only the changed cluster's AddOn terms: the other prioritizers read
//! other objects (Balance the decisions, Steady this placement's own, the resource ones the
//! clusters' status), and an AddOn score is used as written, not normalised over the
//! candidates. So its new total is its old total plus `Σ weight × (new − old)`, and top-N
//! selection keeps its clusters unless
//! - a selected cluster's new total is no longer above the best total outside the selection,
//!   or
//! - a cluster outside it now reaches the lowest selected total (its new total is at most
//!   the best "total less AddOn part" outside the selection plus its new AddOn part).
//!
//! Ties count as a move. A judged change updates the margin as the pass would see it
//! (exactly for a selected cluster, as an upper bound for one outside), so a run of small
//! changes cannot add up unseen. A selected cluster's new total is still news where the
//! decisions carry scores (`decisions[].score`, or `sortBy: Score`): at once, or when the
//! `scoreRateLimit` window that holds it back ends.
//!
//! No margin (every score change is a pass, as before) when the selection reads scores in
//! another way: spread constraints, stability controls, a CEL predicate (it may call
//! `scores()`), a pass that kept the current decisions or ended in anything but Success, or
//! a score the pass read that had expired. A change judged on a value that is not a plain one
//! (missing object or item, a repeated item, out of range, expired, or counting for less long
//! than the old one) is a pass too.

use std::collections::HashSet;

use jiff::Timestamp;
use ocm_api::cluster::v1alpha1::AddOnPlacementScore;
use ocm_api::wellknown::{limits, sort_by};

use crate::decisions::Decided;
use crate::pass::Pass;
use crate::prioritize::{self, Kind, addon};
use crate::scheduler::Scheduled;
use crate::snapshot::{MaxScoreValidity, Name, ScoreFields};
use crate::stability;
use crate::status::{Code, Status};

/// The most selected clusters a margin keeps (their names and totals): a placement that
/// selects more is scheduled at every change of a score it reads, as before, rather than keep
/// a copy of its decisions (10,000 placements of every cluster of 1,000 would hold 10 million).
const MAX_SELECTED: usize = 256;

/// One AddOn prioritizer: the object and item it reads, and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    resource: String,
    item: String,
    weight: i64,
}

/// When a selected cluster's new total must be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// The decisions carry no score and are not ordered by one.
    Never,
    /// At the next pass.
    Now,
    /// Not before the `scoreRateLimit` window ends (at once after it).
    After(Timestamp),
}

/// What a pass leaves for judging score changes without a pass (see the module's
/// documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Margin {
    terms: Vec<Term>,
    /// The selected clusters and their totals, as updated by the changes judged since.
    selected: Vec<(Name, i64)>,
    /// An upper bound of the best total among the feasible clusters not selected.
    best_out: Option<i64>,
    /// The best total less its AddOn part among the feasible clusters not selected.
    best_out_rest: Option<i64>,
    shown: Shown,
}

/// What a score change asks of a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its decisions may move: schedule it.
    Pass,
    /// Only the scores its decisions show move, and not before this instant.
    PassAt(Timestamp),
    /// Nothing it writes can change.
    Nothing,
}

/// The margin of a pass, when score changes can be judged against it.
pub(crate) fn of(
    pass: &Pass<'_>,
    scheduled: &Scheduled<'_>,
    decided: &Decided,
    status: &Status,
) -> Option<Margin> {
    let spec = pass.spec;
    let cel = spec.predicates.iter().any(|p| {
        !p.required_cluster_selector
            .cel_selector
            .cel_expressions
            .is_empty()
    });
    if status.code != Code::Success
        || decided.keep_current
        || cel
        || !spec.spread_policy.spread_constraints.is_empty()
        || pass.annotation(stability::ANNOTATION).is_some()
        || !scheduled.held.is_empty()
    {
        return None;
    }
    let weighted = prioritize::from_policy(&spec.prioritizer_policy).ok()?;
    // The policy's prioritizers come first in the pass's results, in this order.
    let mut addon_part = vec![0i64; scheduled.filtered.len()];
    let mut terms = Vec::new();
    for (w, result) in weighted.iter().zip(&scheduled.prioritizers) {
        let Kind::AddOn(coord) = &w.kind else {
            continue;
        };
        let weight = i64::from(w.weight);
        terms.push(Term {
            resource: coord.resource_name.clone(),
            item: coord.score_name.clone(),
            weight,
        });
        for (part, s) in addon_part.iter_mut().zip(&result.scores) {
            *part += weight * s.unwrap_or(0);
        }
    }
    if terms.is_empty() {
        return None;
    }
    if scheduled.selected.len() > MAX_SELECTED {
        return None;
    }
    let chosen: HashSet<usize> = scheduled.selected.iter().map(|c| c.slot).collect();
    let mut selected = Vec::with_capacity(chosen.len());
    let (mut best_out, mut best_out_rest) = (None::<i64>, None::<i64>);
    for (i, c) in scheduled.filtered.iter().enumerate() {
        let total = scheduled.totals[i];
        if chosen.contains(&c.slot) {
            selected.push((c.name.clone(), total));
        } else {
            best_out = Some(best_out.map_or(total, |b| b.max(total)));
            let rest = total - addon_part[i];
            best_out_rest = Some(best_out_rest.map_or(rest, |b| b.max(rest)));
        }
    }
    let by_score = spec.sort_by == sort_by::SCORE;
    let shown = match pass.snapshot.score_fields() {
        ScoreFields::Stored => decided
            .window
            .last_score_update
            .as_ref()
            .and_then(|t| {
                t.0.checked_add(crate::visibility::rate_limit(&spec.score_rate_limit))
                    .ok()
            })
            .map_or(Shown::Now, Shown::After),
        ScoreFields::Absent if by_score => Shown::Now,
        ScoreFields::Absent => Shown::Never,
    };
    Some(Margin {
        terms,
        selected,
        best_out,
        best_out_rest,
        shown,
    })
}

impl Margin {
    /// Judges the change of `cluster`'s AddOnPlacementScore `resource` from `old` to `new`
    /// at `now`, and updates the margin as a pass would see it after the change.
    pub fn judge(
        &mut self,
        cluster: &str,
        resource: &str,
        old: Option<&AddOnPlacementScore>,
        new: Option<&AddOnPlacementScore>,
        bound: MaxScoreValidity,
        now: Timestamp,
    ) -> Verdict {
        let (mut delta, mut part) = (0i64, 0i64);
        for t in self.terms.iter().filter(|t| t.resource == resource) {
            let (Some(before), Some(after)) = (
                plain(old, &t.item, bound, now),
                plain(new, &t.item, bound, now),
            ) else {
                return Verdict::Pass;
            };
            // A new version that stops counting earlier needs the pass's timer for it.
            if after
                .until
                .is_some_and(|a| before.until.is_none_or(|b| a < b))
            {
                return Verdict::Pass;
            }
            delta += t.weight * (after.value - before.value);
            part += t.weight * after.value;
        }
        if delta == 0 {
            return Verdict::Nothing;
        }
        if let Some(i) = self.selected.iter().position(|(n, _)| &**n == cluster) {
            let total = self.selected[i].1 + delta;
            if self.best_out.is_some_and(|b| total <= b) {
                return Verdict::Pass;
            }
            self.selected[i].1 = total;
            return match self.shown {
                Shown::Never => Verdict::Nothing,
                Shown::Now => Verdict::Pass,
                Shown::After(end) if now < end => Verdict::PassAt(end),
                Shown::After(_) => Verdict::Pass,
            };
        }
        // Not selected: not feasible (no score makes it so), or feasible with a total of at
        // most the best rest plus its new AddOn part.
        let Some(rest) = self.best_out_rest else {
            return Verdict::Nothing;
        };
        let total = rest + part;
        let lowest = self.selected.iter().map(|(_, t)| *t).min();
        if lowest.is_some_and(|l| total >= l) {
            return Verdict::Pass;
        }
        self.best_out = Some(self.best_out.map_or(total, |b| b.max(total)));
        Verdict::Nothing
    }
}

/// A score item's value as the AddOn prioritizer reads it, when it is a plain one.
struct Plain {
    value: i64,
    /// When it stops counting (`None`: never).
    until: Option<Timestamp>,
}

/// The value of item `item` of `score` at `now`; `None` when it is not plain: no object, a
/// repeated item, a value out of range, or expired. A missing item is 0, as the pass reads it.
fn plain(
    score: Option<&AddOnPlacementScore>,
    item: &str,
    bound: MaxScoreValidity,
    now: Timestamp,
) -> Option<Plain> {
    let score = score?;
    let status = score.status.as_ref()?;
    let mut items = status.scores.iter().filter(|s| s.name == item);
    let value = match (items.next(), items.next()) {
        (None, _) => 0,
        (Some(s), None) => i64::from(s.value),
        (Some(_), Some(_)) => return None,
    };
    if !(limits::MIN_CLUSTER_SCORE..=limits::MAX_CLUSTER_SCORE).contains(&value) {
        return None;
    }
    let valid_until = status.valid_until.as_ref().map(|t| t.0);
    let until = addon::counts_until(valid_until, addon::written_at(&score.metadata), bound, now);
    if until.is_some_and(|u| now > u) {
        return None;
    }
    Some(Plain { value, until })
}
