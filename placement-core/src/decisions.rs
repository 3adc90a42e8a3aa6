//! From the selected clusters to the PlacementDecisions that should exist and the writes that
//! get there: upstream's `generatePlacementDecisionsAndStatus`, `generateDecision` and `bind`
//! (open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/scheduling_controller.go`). Ours keeps groups stable
//! ([`crate::groups`]), holds score-only changes within `scoreRateLimit`
//! ([`crate::visibility`]), carries the stability state, and orders the writes so that no
//! kept cluster vanishes ([`crate::plan`]).

use std::collections::HashMap;

use ocm_api::wellknown::sort_by;
use ocm_api::{ClusterDecision, PlacementDecision};

use crate::groups::{self, Group};
use crate::pass::Pass;
use crate::plan::{self, PlannedWrite};
use crate::scheduler::Scheduled;
use crate::snapshot::{ClusterInfo, ScoreFields};
use crate::stability;
use crate::status::{Code, Status};
use crate::visibility::{self, Window};

/// The decisions one pass arrives at.
pub(crate) struct Decided {
    /// The current decisions stay as they are: the inputs could not be read (Error), a limit
    /// stopped the pass, or it failed for a reason that may pass (see
    /// [`Status::keeps_decisions`]).
    pub(crate) keep_current: bool,
    pub(crate) groups: Vec<Group>,
    /// The PlacementDecisions that should exist once the writes are done.
    pub(crate) decisions: Vec<PlacementDecision>,
    pub(crate) window: Window,
}

/// The groups and PlacementDecisions for what the pass selected. A group strategy that is
/// wrong makes `status` Misconfigured.
pub(crate) fn generate(pass: &Pass<'_>, scheduled: &Scheduled<'_>, status: &mut Status) -> Decided {
    let last_score_update = pass.previous.last_score_update_time.clone();
    if status.keeps_decisions() {
        return Decided {
            keep_current: true,
            groups: Vec::new(),
            decisions: pass.existing.iter().map(|d| (*d).clone()).collect(),
            window: Window::kept(last_score_update),
        };
    }
    let groups = decision_groups(pass, &scheduled.selected, status);
    let totals = scheduled.selected_totals();
    let by_score = pass.spec.sort_by == sort_by::SCORE;
    let mut decisions = decision_objects(pass, &groups, &totals, by_score);
    let scores_stored = pass.snapshot.score_fields() == ScoreFields::Stored;
    if !scores_stored {
        omit_scores(&mut decisions);
    }
    carry_stability_state(pass, scheduled.stability_state.as_ref(), &mut decisions);
    // Score visibility: inside a `scoreRateLimit` window score-only changes are held; the
    // window's start and the ScoreUpdate event come once a window.
    let window = if scores_stored {
        visibility::apply(
            &pass.existing,
            &mut decisions,
            &totals,
            &pass.spec.score_rate_limit,
            last_score_update,
            by_score,
            pass.now,
        )
    } else {
        Window::unscored(last_score_update)
    };
    Decided {
        keep_current: false,
        groups,
        decisions,
        window,
    }
}

/// Upstream's `generateDecisionGroups`, kept stable across passes ([`groups::build`]).
fn decision_groups(pass: &Pass<'_>, selected: &[&ClusterInfo], status: &mut Status) -> Vec<Group> {
    let strategy = &pass.spec.decision_strategy.group_strategy;
    let (groups, problem) = groups::build(&pass.name, strategy, selected, &pass.existing);
    if let Some(st) = problem {
        *status = st;
    }
    groups
}

/// Upstream's `generateDecision` for every group: one object per slice, its entries carrying
/// the clusters' totals (by score, then name, with `sortBy: Score`; else by name).
fn decision_objects(
    pass: &Pass<'_>,
    groups: &[Group],
    totals: &HashMap<&str, i64>,
    by_score: bool,
) -> Vec<PlacementDecision> {
    groups
        .iter()
        .flat_map(|g| {
            let labels = plan::labels(&pass.name, g);
            g.slices.iter().map(move |sl| {
                let mut entries: Vec<ClusterDecision> = sl
                    .clusters
                    .iter()
                    .map(|c| ClusterDecision {
                        cluster_name: c.to_string(),
                        reason: String::new(),
                        score: totals.get(&**c).copied().unwrap_or(0),
                    })
                    .collect();
                if by_score {
                    entries.sort_by(|a, b| {
                        b.score
                            .cmp(&a.score)
                            .then_with(|| a.cluster_name.cmp(&b.cluster_name))
                    });
                }
                let (placement, namespace) = (pass.placement, &pass.namespace);
                plan::desired_object(placement, namespace, &sl.name, labels.clone(), entries)
            })
        })
        .collect()
}

/// A hub without the score fields drops them: leave them out (after `sortBy: Score` used
/// them), so that a pass that changes no decision writes nothing.
fn omit_scores(decisions: &mut [PlacementDecision]) {
    for e in decisions
        .iter_mut()
        .filter_map(|d| d.status.as_mut())
        .flat_map(|st| st.decisions.iter_mut())
    {
        e.score = 0;
    }
}

/// The stability state goes onto the first object: a new one with the move that changed it,
/// else the one the hub holds (unchanged: nothing to write).
fn carry_stability_state(
    pass: &Pass<'_>,
    new_state: Option<&stability::State>,
    decisions: &mut [PlacementDecision],
) {
    let text = match new_state {
        Some(state) => Some(state.to_annotation()),
        None => stability::raw(&pass.existing).map(str::to_owned),
    };
    if let (Some(text), Some(first)) = (text, decisions.first_mut()) {
        first
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(stability::STATE_ANNOTATION.to_owned(), text);
    }
}

impl Decided {
    /// Upstream's `bind`: the writes from this placement's objects on the hub to
    /// [`Decided::decisions`], each with its events (none when the current ones are kept).
    pub(crate) fn bind(
        &self,
        pass: &Pass<'_>,
        scheduled: &Scheduled<'_>,
        status: &Status,
    ) -> Vec<PlannedWrite> {
        if self.keep_current {
            return Vec::new();
        }
        let warning = (status.code == Code::Warning)
            .then_some((status.message.as_str(), status.plugin.as_str()));
        let totals = scheduled
            .filtered
            .iter()
            .map(|c| &*c.name)
            .zip(scheduled.totals.iter().copied());
        let ctx = plan::EventContext {
            placement: &pass.name,
            namespace: &pass.namespace,
            warning,
            score_note: plan::score_note(totals).filter(|_| self.window.say_scores),
        };
        plan::writes(
            pass.placement,
            &pass.namespace,
            &pass.existing,
            &self.decisions,
            &ctx,
        )
    }
}
