//! `simulate`: schedule every Placement found in YAML files, with no cluster at all, and
//! explain the result (decisions, per-prioritizer scores, why clusters were dropped), or print
//! the PlacementDecisions and Placement status the controller would write.

pub mod input;
pub mod report;

use jiff::Timestamp;

use crate::core::snapshot::MaxScoreValidity;
use crate::core::{self, Outcome};
pub use input::{InputError, Objects, Source};

/// One Placement's result (or why it was skipped).
pub struct Simulated {
    pub placement: ocm_api::Placement,
    pub outcome: Option<Outcome>,
}

/// Schedules every Placement of `objects` (optionally only `only`, as `ns/name`) at `now`.
/// Placements are scheduled independently against the same input.
///
/// `max_score_validity` is the controller's bound on `validUntil`. Files carry no time at
/// which the scheduler observed a score, so the bound counts from `now`: it never ends a
/// score at the simulated instant, and a `validUntil` beyond it is noted in the report.
pub fn run(
    objects: &Objects,
    now: Timestamp,
    only: &[String],
    max_score_validity: MaxScoreValidity,
) -> Vec<Simulated> {
    let mut snapshot = objects.snapshot();
    snapshot.set_max_score_validity(max_score_validity);
    objects
        .placements
        .iter()
        .filter(|((ns, name), _)| {
            only.is_empty() || only.iter().any(|o| *o == format!("{ns}/{name}"))
        })
        .map(|(_, (p, _))| Simulated {
            placement: p.clone(),
            outcome: (!core::is_disabled(p)).then(|| core::schedule(&snapshot, p, now)),
        })
        .collect()
}
