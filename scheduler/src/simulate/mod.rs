//! `simulate`: schedule every Placement found in YAML files, with no cluster at all, and
//! explain the result (decisions, per-prioritizer scores, why clusters were dropped), or print
//! the PlacementDecisions and Placement status the controller would write.

pub mod input;
pub mod report;

use jiff::Timestamp;

use crate::core::{self, Outcome};
pub use input::{InputError, Objects, Source};

/// One Placement's result (or why it was skipped).
pub struct Simulated {
    pub placement: ocm_api::Placement,
    pub outcome: Option<Outcome>,
}

/// Schedules every Placement of `objects` (optionally only `only`, as `ns/name`) at `now`.
/// Placements are scheduled independently against the same input.
pub fn run(objects: &Objects, now: Timestamp, only: &[String]) -> Vec<Simulated> {
    let snapshot = objects.snapshot();
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
