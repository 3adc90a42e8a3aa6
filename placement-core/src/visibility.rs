//! Score visibility (upstream's proposal in open-cluster-management-io/enhancements
//! `enhancements/sig-architecture/225-placement-score-visibility`): `decisions[].score`,
//! `sortBy` and `scoreRateLimit`. Score changes that do not change the selected set of clusters
//! are not reflected in the decisions more often than `scoreRateLimit`: inside the window each
//! cluster keeps the score last written for it (and `sortBy: Score` its order).
//!
//! `lastScoreUpdateTime` marks when the current window began: the first score write after the
//! previous window ended. A change of the selected set inside a window writes fresh scores
//! without moving it, so a placement that moves often does not also rewrite its Placement
//! status each time (score-only writes still come at most once a window). The ScoreUpdate
//! event follows the same limit: it is said outside a window only, so a placement that moves
//! many times a minute says DecisionUpdate for each move (one event series) and its scores
//! once a window, not one new Event object per move.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ocm_api::PlacementDecision;

use crate::snapshot::decision_entries;

/// What the window decides for one pass.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window {
    /// The Placement's `lastScoreUpdateTime` after this pass.
    pub last_score_update: Option<Time>,
    /// Held score changes are written when the window ends: schedule again then.
    pub held_until: Option<Timestamp>,
    /// Whether this pass's writes say the scores (ScoreUpdate).
    pub say_scores: bool,
}

impl Window {
    /// A hub without the score fields ([`crate::ScoreFields::Absent`]): no scores to hold
    /// back or to time; the ScoreUpdate event goes with every decision write, as upstream's
    /// before it wrote scores.
    pub(crate) fn unscored(last_score_update: Option<Time>) -> Self {
        Self {
            last_score_update,
            held_until: None,
            say_scores: true,
        }
    }

    /// A pass that keeps the current decisions: nothing moves.
    pub(crate) fn kept(last_score_update: Option<Time>) -> Self {
        Self {
            last_score_update,
            held_until: None,
            say_scores: true,
        }
    }
}

/// Applies the window to `desired` (the pass's decisions, with fresh scores) against what the
/// hub holds (`existing`); `totals` are the selected clusters' fresh totals.
pub(crate) fn apply(
    existing: &[&PlacementDecision],
    desired: &mut [PlacementDecision],
    totals: &HashMap<&str, i64>,
    score_rate_limit: &str,
    last_score_update: Option<Time>,
    by_score: bool,
    now: Timestamp,
) -> Window {
    let old_scores: HashMap<&str, i64> = existing
        .iter()
        .flat_map(|d| decision_entries(d))
        .map(|e| (e.cluster_name.as_str(), e.score))
        .collect();
    let same_selection =
        old_scores.len() == totals.len() && totals.keys().all(|c| old_scores.contains_key(c));
    let scores_changed = totals.iter().any(|(c, t)| old_scores.get(c) != Some(t));
    let window_end = last_score_update
        .as_ref()
        .and_then(|t| t.0.checked_add(rate_limit(score_rate_limit)).ok())
        .filter(|end| now < *end);
    let mut out = Window {
        last_score_update,
        held_until: None,
        say_scores: window_end.is_none(),
    };
    match window_end {
        Some(end) if same_selection && scores_changed => {
            keep_old_scores(desired, &old_scores, by_score);
            out.held_until = Some(end);
        }
        // Inside the window: the selection changed, so the fresh scores go out, but the
        // window keeps its start.
        Some(_) => {}
        None if scores_changed => out.last_score_update = Some(Time(now)),
        None => {}
    }
    out
}

/// Each cluster keeps the score last written for it (and `sortBy: Score` its order).
fn keep_old_scores(desired: &mut [PlacementDecision], old: &HashMap<&str, i64>, by_score: bool) {
    for d in desired {
        if let Some(st) = d.status.as_mut() {
            for e in &mut st.decisions {
                if let Some(score) = old.get(e.cluster_name.as_str()) {
                    e.score = *score;
                }
            }
            if by_score {
                st.decisions.sort_by(|a, b| {
                    b.score
                        .cmp(&a.score)
                        .then_with(|| a.cluster_name.cmp(&b.cluster_name))
                });
            }
        }
    }
}

/// `scoreRateLimit` as a duration: `<n>s`, `<n>m` or `<n>h`; anything else is the default
/// (1 minute).
pub(crate) fn rate_limit(text: &str) -> SignedDuration {
    let default = SignedDuration::from_secs(60);
    let Some(unit) = text.chars().last() else {
        return default;
    };
    let Ok(n) = text[..text.len() - unit.len_utf8()].parse::<i64>() else {
        return default;
    };
    let seconds = match unit {
        's' => Some(n),
        'm' => n.checked_mul(60),
        'h' => n.checked_mul(3600),
        _ => return default,
    };
    // Beyond what a duration holds: as good as forever.
    SignedDuration::from_secs(seconds.unwrap_or(i64::MAX).min(i64::MAX / 2))
}
