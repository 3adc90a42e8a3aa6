//! The sans-IO scheduling core: a [`Snapshot`] and one Placement in, an [`Outcome`] out. No
//! clock, no network, no Kubernetes client: the controller, `simulate` and the debug endpoint
//! all call [`schedule`] and read the same outcome.
//!
//! [`schedule_with`] takes the steps of upstream's `syncPlacement` and scheduler `Schedule`
//! (open-cluster-management-io/ocm `pkg/placement/controllers/scheduling/`
//! `scheduling_controller.go` and `schedule.go`), one module each: the eligible clusters
//! (valid bindings, eligible cluster sets, available clusters: `eligible`), filter,
//! prioritize and select (`scheduler`), the decision groups and PlacementDecisions and the
//! writes that bind them (`decisions`), and the Placement status with its conditions
//! (`status`). Where we go further than upstream (spread, stable groups, ordered writes,
//! score visibility, stability controls) the module says so.

mod decisions;
mod eligible;
pub mod filter;
mod groups;
pub mod limits;
pub mod margin;
mod names;
mod pass;
pub mod plan;
pub mod prioritize;
mod scheduler;
pub mod select;
pub mod snapshot;
pub mod stability;
mod status;
mod visibility;

use jiff::Timestamp;
use ocm_api::wellknown::annotation;
use ocm_api::{Placement, PlacementDecision, PlacementStatus};

pub use filter::{DropReason, FilterResult};
pub use groups::{Group, Slice};
pub use limits::{Deadline, Limits};
pub use margin::{Margin, Verdict};
pub use plan::{Event, EventType, PlannedWrite, Write};
pub use prioritize::addon::CappedScore;
pub use select::SpreadReport;
pub use snapshot::{ClusterInfo, Name, ScoreFields, Snapshot};
pub use stability::HeldMove;
pub use status::{Code, Limit, Status};

use decisions::Decided;
use eligible::Eligible;
use pass::{Pass, earliest};
use scheduler::Scheduled;

/// One prioritizer's scores, aligned with [`Outcome::filtered`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrioritizerResult {
    pub name: String,
    pub weight: i32,
    pub scores: Vec<Option<i64>>,
}

/// Everything one scheduling pass found and decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub namespace: String,
    pub name: String,
    /// Bindings in the namespace whose clusterset exists, sorted.
    pub bindings: Vec<String>,
    /// The bound sets the placement may use (intersected with `spec.clusterSets`), sorted.
    pub cluster_sets: Vec<String>,
    /// Members of those sets, by name, without terminating clusters.
    pub available: Vec<Name>,
    /// Members dropped because they are being deleted.
    pub terminating: Vec<Name>,
    /// Each filter in order, with what it dropped and why.
    pub filters: Vec<FilterResult>,
    /// The clusters that passed every filter, by name.
    pub filtered: Vec<Name>,
    pub prioritizers: Vec<PrioritizerResult>,
    /// `Σ weight × score` per cluster, aligned with `filtered`.
    pub totals: Vec<i64>,
    /// The chosen clusters, in selection order (best first).
    pub selected: Vec<Name>,
    /// Replacements the placement's stability controls held back ([`stability`]), each
    /// with its reason; empty without them.
    pub held: Vec<HeldMove>,
    pub spread: Option<SpreadReport>,
    /// `numberOfClusters − selected` (0 without numberOfClusters).
    pub unscheduled: i32,
    pub status: Status,
    /// Things the user should know that are not a status (clamped score values, ...).
    pub notes: Vec<String>,
    /// Scores a prioritizer used that the validity bound (see [`snapshot::MaxScoreValidity`])
    /// has ended while their `validUntil` still lay ahead (or was unset), sorted, once per
    /// cluster and score object: where this pass differs from upstream's. The controller
    /// warns about them in the Placement's events. Scores that are capped but still count
    /// are only noted: the bound has changed nothing yet, so it is not news (and a fleet
    /// whose providers claim long validity, as upstream's benchmark does, would otherwise
    /// cost every new placement a Warning).
    pub validity_capped: Vec<CappedScore>,
    pub groups: Vec<Group>,
    /// The PlacementDecisions that should exist once the writes are done.
    pub decisions: Vec<PlacementDecision>,
    /// The writes that get there, in order, each with its events.
    pub writes: Vec<PlannedWrite>,
    /// The Placement status to write (when it differs from the current one).
    pub placement_status: PlacementStatus,
    /// When this placement must be scheduled again even if nothing changes.
    pub requeue_at: Option<Timestamp>,
    /// What a later score change can be judged against without a pass ([`margin`]); `None`:
    /// every change of a score it reads needs one.
    pub margin: Option<Margin>,
}

impl Outcome {
    /// The events of all planned writes, in order.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.writes.iter().flat_map(|w| w.events.iter())
    }
}

/// `true` when the Placement asks to be left alone (`experimental-scheduling-disable`).
pub fn is_disabled(placement: &Placement) -> bool {
    placement
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation::PLACEMENT_DISABLE))
        .is_some_and(|v| v == "true")
}

/// Observes the steps of one scheduling pass: the controller times them for its metrics.
/// The core only says when a step ends; it never reads a clock itself.
pub trait Laps {
    /// `step_type` is `eligible`, `filter`, `prioritizer`, `selector` or `bind`.
    fn lap(&mut self, step_type: &'static str, step: &str);
}

impl Laps for () {
    fn lap(&mut self, _: &'static str, _: &str) {
        // Nobody times the steps.
    }
}

/// Schedules one Placement against a snapshot at time `now`, with no deadline.
pub fn schedule(snapshot: &Snapshot, placement: &Placement, now: Timestamp) -> Outcome {
    schedule_with(snapshot, placement, now, &mut (), &())
}

/// [`schedule`], reporting the end of each step to `laps`, within the pass's `deadline`
/// (the CEL time budget, [`Limits::cel_time`] from when the caller started the pass).
pub fn schedule_with(
    snapshot: &Snapshot,
    placement: &Placement,
    now: Timestamp,
    laps: &mut dyn Laps,
    deadline: &dyn Deadline,
) -> Outcome {
    let pass = Pass::new(snapshot, placement, now);
    // A spec too large to look at is not looked at.
    let mut status = limits::check_lists(pass.spec, &snapshot.limits())
        .err()
        .unwrap_or_else(Status::success);
    let (eligible, candidates) = eligible::clusters(&pass, &mut status);
    laps.lap("eligible", "ClusterSets");
    let scheduled = scheduler::schedule(&pass, candidates, &mut status, laps, deadline);
    let decided = decisions::generate(&pass, &scheduled, &mut status);
    let writes = decided.bind(&pass, &scheduled, &status);
    let placement_status = placement_status(&pass, &eligible, &scheduled, &decided, &status);
    let margin = margin::of(&pass, &scheduled, &decided, &status);
    laps.lap("bind", "PlacementDecisions");
    outcome(
        pass,
        eligible,
        scheduled,
        Decisions {
            decided,
            writes,
            placement_status,
            margin,
        },
        status,
    )
}

/// The Placement status this pass writes, from what each step found.
fn placement_status(
    pass: &Pass<'_>,
    eligible: &Eligible,
    scheduled: &Scheduled<'_>,
    decided: &Decided,
    status: &Status,
) -> PlacementStatus {
    let counts = status::Counts {
        cluster_sets_in_spec: &pass.spec.cluster_sets,
        eligible_cluster_sets: &eligible.cluster_sets,
        bindings: eligible.bindings.len(),
        available: eligible.available.len(),
        selected: scheduled.selected.len(),
        unscheduled: scheduled.unscheduled,
        stopped: scheduled.stopped(),
    };
    let groups = (!decided.keep_current).then_some(decided.groups.as_slice());
    let last_score_update = decided.window.last_score_update.clone();
    status::placement_status(
        &pass.previous,
        status,
        &counts,
        groups,
        last_score_update,
        pass.now,
    )
}

/// What the last steps produced: the decisions, the writes and status that bind them, and the
/// margin left for later score changes.
struct Decisions {
    decided: Decided,
    writes: Vec<PlannedWrite>,
    placement_status: PlacementStatus,
    margin: Option<Margin>,
}

/// Gathers what the steps found into the [`Outcome`].
fn outcome(
    pass: Pass<'_>,
    eligible: Eligible,
    scheduled: Scheduled<'_>,
    last: Decisions,
    status: Status,
) -> Outcome {
    let Decisions {
        decided,
        writes,
        placement_status,
        margin,
    } = last;
    let names = |cs: &[&ClusterInfo]| -> Vec<Name> { cs.iter().map(|c| c.name.clone()).collect() };
    // A Transient failure writes nothing: the controller retries with backoff, not on a timer.
    let requeue_at = earliest(scheduled.requeue_at, decided.window.held_until)
        .filter(|_| status.code != Code::Transient);
    let mut validity_capped = scheduled.validity_capped;
    validity_capped.sort_unstable();
    validity_capped.dedup();
    Outcome {
        namespace: pass.namespace,
        name: pass.name,
        bindings: eligible.bindings,
        cluster_sets: eligible.cluster_sets,
        available: eligible.available,
        terminating: eligible.terminating,
        filters: scheduled.filters,
        filtered: names(&scheduled.filtered),
        prioritizers: scheduled.prioritizers,
        totals: scheduled.totals,
        selected: names(&scheduled.selected),
        held: if decided.keep_current {
            Vec::new()
        } else {
            scheduled.held
        },
        spread: scheduled.spread,
        unscheduled: scheduled.unscheduled,
        status,
        notes: scheduled.notes,
        validity_capped,
        groups: decided.groups,
        decisions: decided.decisions,
        writes,
        placement_status,
        requeue_at,
        margin,
    }
}

#[cfg(test)]
mod tests;
