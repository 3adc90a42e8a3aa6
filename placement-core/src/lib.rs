//! The sans-IO scheduling core: a [`Snapshot`] and one Placement in, an [`Outcome`] out. No
//! clock, no network, no Kubernetes client: the controller, `simulate` and the debug endpoint
//! all call [`schedule`] and read the same outcome.
//!
//! The pipeline follows upstream's `syncPlacement` (see `shared/reference/ocm-placement.md`
//! §3): eligible clusters (bindings by name, clusterset membership, not terminating), filters
//! (Predicate, TaintToleration), prioritizers with weights, selection, decision groups,
//! PlacementDecisions and the Placement status. Where we go further than upstream (spread,
//! stable groups, ordered writes, score visibility) the module says so.

pub mod filter;
pub mod groups;
pub mod limits;
pub mod names;
pub mod plan;
pub mod prioritize;
pub mod select;
pub mod snapshot;
pub mod stability;
pub mod status;
pub mod visibility;

use std::collections::HashMap;

use jiff::Timestamp;
use ocm_api::cluster::v1beta1::DecisionGroupStatus;
use ocm_api::wellknown::{annotation, placement_condition as pc, sort_by};
use ocm_api::{ClusterDecision, Placement, PlacementDecision, PlacementStatus};

pub use filter::{DropReason, FilterResult};
pub use groups::Group;
pub use limits::{Deadline, Limits};
pub use plan::{Event, EventType, PlannedWrite, Write};
pub use prioritize::addon::CappedScore;
pub use select::SpreadReport;
pub use snapshot::{ClusterInfo, Name, ScoreFields, SetMembers, Snapshot};
pub use stability::HeldMove;
pub use status::{Code, Limit, Status};
pub use visibility::rate_limit;

use prioritize::Kind;
use snapshot::decision_entries;

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
    fn lap(&mut self, _: &'static str, _: &str) {}
}

/// This placement's current decision entries, by cluster name and by snapshot slot.
struct Own<'a> {
    by_name: &'a HashMap<&'a str, u32>,
    by_slot: &'a [u32],
}

impl Own<'_> {
    fn of(&self, c: &ClusterInfo) -> u32 {
        self.by_slot.get(c.slot).copied().unwrap_or(0)
    }
}

/// What the filter/prioritize/select part produced.
#[derive(Default)]
struct Scheduled<'a> {
    filters: Vec<FilterResult>,
    filtered: Vec<&'a ClusterInfo>,
    prioritizers: Vec<PrioritizerResult>,
    totals: Vec<i64>,
    selected: Vec<usize>,
    spread: Option<SpreadReport>,
    notes: Vec<String>,
    validity_capped: Vec<CappedScore>,
    requeue_at: Option<Timestamp>,
    held: Vec<HeldMove>,
    /// The stability state to write (see [`stability::Selection::state`]).
    stability_state: Option<stability::State>,
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Filters, prioritizers and selection. `Err` stops scheduling (nothing is selected);
/// the partial results gathered so far stay in `out`.
#[allow(clippy::too_many_arguments)]
fn run<'a>(
    snapshot: &'a Snapshot,
    placement: &Placement,
    candidates: Vec<&'a ClusterInfo>,
    own: &Own<'_>,
    stability_state: &stability::State,
    now: Timestamp,
    out: &mut Scheduled<'a>,
    laps: &mut dyn Laps,
    deadline: &dyn Deadline,
) -> Result<Status, Status> {
    names::check(placement.metadata.name.as_deref().unwrap_or_default())?;
    let spec = &placement.spec;
    let wanted = match spec.number_of_clusters {
        None => None,
        Some(n) => Some(usize::try_from(n).map_err(|_| {
            Status::misconfigured("", format!("numberOfClusters must not be negative: {n}"))
        })?),
    };
    // Filters. Like upstream, a filter with no clusters to look at validates nothing.
    let (kept, result) = if candidates.is_empty() || spec.predicates.is_empty() {
        filter::apply(filter::predicate::NAME, candidates, |_| None)
    } else {
        let namespace = placement.metadata.namespace.as_deref().unwrap_or_default();
        let predicates = filter::predicate::Predicates::compile(namespace, &spec.predicates)?;
        predicate_filter(&predicates, candidates, snapshot, deadline)?
    };
    out.filters.push(result);
    laps.lap("filter", filter::predicate::NAME);
    let tolerations = &spec.tolerations;
    if !kept.is_empty() {
        filter::taint::validate(tolerations)?;
    }
    let (kept, result) = filter::apply(filter::taint::NAME, kept, |c| {
        filter::taint::check(c.taints(), tolerations, own.of(c) > 0, now)
    });
    out.filters.push(result);
    laps.lap("filter", filter::taint::NAME);

    let weighted = prioritize::from_policy(&spec.prioritizer_policy)?;
    let stability = stability::parse(annotation_of(placement, stability::ANNOTATION))?;
    let constraints = select::constraints(&spec.spread_policy.spread_constraints)?;
    let affinity =
        prioritize::affinity::parse(annotation_of(placement, prioritize::affinity::ANNOTATION))?;
    let topologies: Vec<std::sync::Arc<snapshot::Topology>> = constraints
        .iter()
        .map(|c| snapshot.topology(&c.topology_key, c.claim))
        .collect();
    let kept = if constraints.iter().any(|c| c.hard) {
        let (kept, result) = filter::apply(select::PLUGIN, kept, |c| {
            select::missing_key(&constraints, &topologies, c)
        });
        out.filters.push(result);
        laps.lap("filter", select::PLUGIN);
        kept
    } else {
        kept
    };
    out.filtered = kept;
    let filtered = &out.filtered;

    // The toleration timers of the clusters decided now.
    out.requeue_at = filter::taint::requeue_at(
        own.by_name
            .keys()
            .filter_map(|c| snapshot.cluster(c))
            .map(ClusterInfo::taints),
        tolerations,
        now,
    );

    // Prioritizers.
    let mut warning = Status::success();
    let in_decision: Vec<bool> = filtered.iter().map(|c| own.of(c) > 0).collect();
    let mut totals = vec![0i64; filtered.len()];
    let mut results = Vec::with_capacity(weighted.len() + affinity.len());
    let affinity_weighted = affinity
        .iter()
        .enumerate()
        .map(|(i, t)| prioritize::Weighted {
            name: t.name(),
            kind: Kind::Affinity(i),
            weight: t.weight,
        });
    for w in weighted.into_iter().chain(affinity_weighted) {
        if w.weight == 0 {
            continue;
        }
        let scores = match &w.kind {
            Kind::Balance => {
                prioritize::balance::score(snapshot, own.by_name, own.by_slot, filtered)
            }
            Kind::Steady => prioritize::steady::score(&in_decision),
            Kind::ResourceCpu => prioritize::resource::score(filtered.iter().map(|c| c.cpu)),
            Kind::ResourceMemory => prioritize::resource::score(filtered.iter().map(|c| c.memory)),
            Kind::Affinity(i) => prioritize::affinity::score(&affinity[*i], filtered),
            Kind::AddOn(coord) => {
                let r = prioritize::addon::score(coord, filtered, snapshot, now);
                if !r.expired.is_empty() {
                    warning = Status::new(
                        Code::Warning,
                        w.name.clone(),
                        format!("AddOnPlacementScores {} expired", r.expired.join(" ")),
                    );
                }
                if !r.clamped.is_empty() {
                    out.notes.push(format!(
                        "{}: values outside [-100, 100] clamped for {}",
                        w.name,
                        r.clamped.join(", ")
                    ));
                }
                // A note for the first few capped scores only: a provider that writes far
                // validity for the whole fleet would otherwise cost a formatted note per
                // cluster on every pass. The list itself (sorted once, below) keeps them all.
                let capped = r.capped.len();
                if capped > 0 {
                    let bound = snapshot
                        .max_score_validity()
                        .0
                        .map_or_else(String::new, |b| format!("{b:#}"));
                    for c in r.capped.iter().take(CAPPED_NOTES) {
                        out.notes.push(format!(
                            "{}: validity capped ({bound} after it was written): {c}",
                            w.name
                        ));
                    }
                    if capped > CAPPED_NOTES {
                        out.notes.push(format!(
                            "{}: validity capped ({bound} after it was written) for {} more scores",
                            w.name,
                            capped - CAPPED_NOTES
                        ));
                    }
                }
                out.validity_capped
                    .extend(r.capped.into_iter().filter(|c| now > c.until));
                out.requeue_at = earliest(out.requeue_at, r.next_expiry);
                r.scores
            }
        };
        for (t, s) in totals.iter_mut().zip(&scores) {
            if let Some(s) = s {
                *t += i64::from(w.weight) * s;
            }
        }
        laps.lap("prioritizer", &w.name);
        results.push(PrioritizerResult {
            name: w.name,
            weight: w.weight,
            scores,
        });
    }
    out.prioritizers = results;

    // Selection.
    let n = wanted.unwrap_or(filtered.len()).min(filtered.len());
    let mut select = |keys: &[i64], scale: i64| {
        if constraints.is_empty() {
            (select::top_n(keys, n), None)
        } else {
            let (picked, report) = select::spread(
                &constraints,
                &topologies,
                filtered,
                select::Ranking {
                    totals: &totals,
                    keys,
                    scale,
                },
                n,
            );
            (picked, Some(report))
        }
    };
    let (picked, spread) = match &stability {
        None => select(&totals, 1),
        Some(policy) => {
            let names: Vec<&Name> = filtered.iter().map(|c| &c.name).collect();
            let s = stability::select(
                policy,
                stability_state,
                &names,
                &in_decision,
                &totals,
                now,
                &mut select,
            );
            out.held = s.held;
            out.stability_state = s.state;
            out.requeue_at = earliest(out.requeue_at, s.requeue_at);
            (s.picked, s.spread)
        }
    };
    out.selected = picked;
    out.spread = spread;
    laps.lap(
        "selector",
        if constraints.is_empty() {
            "TopN"
        } else {
            select::PLUGIN
        },
    );
    out.totals = totals;
    Ok(warning)
}

fn annotation_of<'p>(placement: &'p Placement, key: &str) -> Option<&'p str> {
    placement
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The Predicate filter within the pass's CEL budget ([`limits`]): the cost pool is shared by
/// every cluster; the deadline is looked at every [`limits::DEADLINE_EVERY`] clusters, after
/// any cluster that took [`limits::DEADLINE_EVERY_UNITS`] or more since the last look, and
/// inside evaluations (every [`ocm_cel::DEADLINE_EVERY_UNITS`] units).
fn predicate_filter<'a>(
    predicates: &filter::predicate::Predicates,
    candidates: Vec<&'a ClusterInfo>,
    snapshot: &Snapshot,
    deadline: &dyn Deadline,
) -> Result<(Vec<&'a ClusterInfo>, FilterResult), Status> {
    let limits = snapshot.limits();
    let cel = predicates.has_cel();
    let mut pool = if cel { limits.cel_cost } else { u64::MAX };
    let total = candidates.len();
    let mut kept = Vec::with_capacity(total);
    let mut dropped = Vec::new();
    let mut pool_at_look = pool;
    for (i, c) in candidates.into_iter().enumerate() {
        let due = i % limits::DEADLINE_EVERY == 0
            || pool_at_look.saturating_sub(pool) >= limits::DEADLINE_EVERY_UNITS;
        if cel && due {
            if deadline.passed() {
                return Err(limits::cel_budget_exceeded(&limits, true, i, total));
            }
            pool_at_look = pool;
        }
        match predicates.check(c, snapshot, &mut pool, deadline) {
            Ok(None) => kept.push(c),
            Ok(Some(why)) => dropped.push((c.name.clone(), why)),
            Err(exhausted) => {
                let out_of_time = exhausted == ocm_cel::PoolExhausted::Time;
                return Err(limits::cel_budget_exceeded(&limits, out_of_time, i, total));
            }
        }
    }
    let result = FilterResult {
        name: filter::predicate::NAME,
        dropped,
    };
    Ok((kept, result))
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
    let namespace = placement
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = placement.metadata.name.clone().unwrap_or_default();
    let spec = &placement.spec;
    let existing = snapshot.decisions_of(&namespace, &name);
    let mut own: HashMap<&str, u32> = HashMap::new();
    for d in &existing {
        for e in decision_entries(d) {
            *own.entry(e.cluster_name.as_str()).or_insert(0) += 1;
        }
    }

    // This placement's decision entries per cluster slot (for Steady, Balance, NoSelectIfNew).
    let mut own_by_slot = vec![
        0u32;
        if own.is_empty() {
            0
        } else {
            snapshot.slot_count()
        }
    ];
    for (c, n) in &own {
        if let Some(info) = snapshot.cluster(c) {
            own_by_slot[info.slot] = *n;
        }
    }

    // A spec too large to look at is not looked at.
    let mut status = match limits::check_lists(spec, &snapshot.limits()) {
        Ok(()) => Status::success(),
        Err(st) => st,
    };

    // Eligible clusters.
    let bindings: Vec<String> = snapshot
        .bindings(&namespace)
        .filter(|b| snapshot.set(b).is_some())
        .map(str::to_owned)
        .collect();
    let cluster_sets: Vec<String> = if status.is_error() {
        Vec::new()
    } else if spec.cluster_sets.is_empty() {
        bindings.clone()
    } else {
        bindings
            .iter()
            .filter(|b| spec.cluster_sets.contains(b))
            .cloned()
            .collect()
    };
    let mut parts: Vec<std::sync::Arc<Vec<usize>>> = Vec::new();
    for set in &cluster_sets {
        match snapshot.members(set) {
            SetMembers::Members(m) => parts.push(m),
            SetMembers::Invalid(e) => {
                status = Status::new(
                    Code::Error,
                    "",
                    format!("failed to get clusters from ClusterSet {set}: {e}"),
                );
                break;
            }
        }
    }
    // The union in name order (each part already is).
    let members: Vec<usize> = match parts.as_slice() {
        [] => Vec::new(),
        [one] => one.to_vec(),
        many => {
            let mut all: Vec<usize> = many.iter().flat_map(|p| p.iter().copied()).collect();
            all.sort_unstable();
            all.dedup();
            all.sort_by(|a, b| {
                let name = |i: &usize| snapshot.slot(*i).map(|c| &c.name);
                name(a).cmp(&name(b))
            });
            all
        }
    };
    let mut terminating = Vec::new();
    let mut candidates = Vec::with_capacity(members.len());
    for c in members.iter().filter_map(|&i| snapshot.slot(i)) {
        if c.terminating {
            terminating.push(c.name.clone());
        } else {
            candidates.push(c);
        }
    }
    let available: Vec<Name> = candidates.iter().map(|c| c.name.clone()).collect();
    laps.lap("eligible", "ClusterSets");

    let stability_state = stability::State::read(&existing);
    let mut s = Scheduled::default();
    if !status.is_error() {
        match run(
            snapshot,
            placement,
            candidates,
            &Own {
                by_name: &own,
                by_slot: &own_by_slot,
            },
            &stability_state,
            now,
            &mut s,
            laps,
            deadline,
        ) {
            Ok(st) => status = st,
            Err(st) => {
                status = st;
                s.selected.clear();
                s.held.clear();
                s.stability_state = None;
            }
        }
    }
    let selected: Vec<&ClusterInfo> = s.selected.iter().map(|&i| s.filtered[i]).collect();
    // The toleration timers of the clusters decided after this pass too. Upstream reads
    // only the decisions from before the pass, and finds a newly chosen cluster's timer on
    // the pass its own write's watch event starts; the controller here does not schedule
    // on the echo of its own writes, so the timer must come from this pass.
    if !status.keeps_decisions() {
        s.requeue_at = earliest(
            s.requeue_at,
            filter::taint::requeue_at(selected.iter().map(|c| c.taints()), &spec.tolerations, now),
        );
    }
    let stopped_early = s.spread.as_ref().is_some_and(|r| r.stopped.is_some());
    let unscheduled = match spec.number_of_clusters {
        Some(n) if n >= 0 && !status.is_error() => {
            n.saturating_sub(i32::try_from(selected.len()).unwrap_or(i32::MAX))
        }
        // Without numberOfClusters every feasible cluster is wanted: the ones a DoNotSchedule
        // constraint refused are unscheduled (and the condition says why).
        None if stopped_early && !status.is_error() => {
            i32::try_from(s.filtered.len() - selected.len()).unwrap_or(i32::MAX)
        }
        _ => 0,
    };
    let filtered: Vec<Name> = s.filtered.iter().map(|c| c.name.clone()).collect();
    // Totals of the selected clusters (what their decisions carry).
    let total_of: HashMap<&str, i64> = s
        .selected
        .iter()
        .map(|&i| (&*s.filtered[i].name, s.totals[i]))
        .collect();

    // Groups and objects. An Error (inputs we could not read), a limit or a transient failure
    // keeps the current decisions.
    let keep_current = status.keeps_decisions();
    let groups = if keep_current {
        Vec::new()
    } else {
        let (groups, problem) = groups::build(
            &name,
            &spec.decision_strategy.group_strategy,
            &selected,
            &existing,
        );
        if let Some(st) = problem {
            status = st;
        }
        groups
    };
    let by_score = spec.sort_by == sort_by::SCORE;
    let mut decisions: Vec<PlacementDecision> = groups
        .iter()
        .flat_map(|g| {
            let labels = plan::labels(&name, g);
            let total_of = &total_of;
            let namespace = &namespace;
            g.slices.iter().map(move |sl| {
                let mut entries: Vec<ClusterDecision> = sl
                    .clusters
                    .iter()
                    .map(|c| ClusterDecision {
                        cluster_name: c.to_string(),
                        reason: String::new(),
                        score: total_of.get(&**c).copied().unwrap_or(0),
                    })
                    .collect();
                if by_score {
                    entries.sort_by(|a, b| {
                        b.score
                            .cmp(&a.score)
                            .then_with(|| a.cluster_name.cmp(&b.cluster_name))
                    });
                }
                plan::desired_object(placement, namespace, &sl.name, labels.clone(), entries)
            })
        })
        .collect();

    // A hub without the score fields drops them: leave them out (after `sortBy: Score` used
    // them), so that a pass that changes no decision writes nothing.
    let scores_stored = snapshot.score_fields() == ScoreFields::Stored;
    if !scores_stored {
        for e in decisions
            .iter_mut()
            .filter_map(|d| d.status.as_mut())
            .flat_map(|st| st.decisions.iter_mut())
        {
            e.score = 0;
        }
    }

    // The stability state goes onto the first object: a new one with the move that changed
    // it, else the one the hub holds (unchanged: nothing to write).
    let state_text = match &s.stability_state {
        Some(state) => Some(state.to_annotation()),
        None => stability::raw(&existing).map(str::to_owned),
    };
    if let (Some(text), Some(first)) = (state_text, decisions.first_mut()) {
        first
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(stability::STATE_ANNOTATION.to_owned(), text);
    }

    // Score visibility (see `visibility`): inside a `scoreRateLimit` window score-only
    // changes are held; the window's start and the ScoreUpdate event come once a window.
    let previous_status = placement.status.clone().unwrap_or_default();
    let window = if keep_current {
        decisions = existing.iter().map(|d| (*d).clone()).collect();
        visibility::Window::kept(previous_status.last_score_update_time.clone())
    } else if !scores_stored {
        visibility::Window::unscored(previous_status.last_score_update_time.clone())
    } else {
        visibility::apply(
            &existing,
            &mut decisions,
            &total_of,
            &spec.score_rate_limit,
            previous_status.last_score_update_time.clone(),
            by_score,
            now,
        )
    };
    let say_scores = window.say_scores;
    let last_score_update = window.last_score_update;
    let mut requeue_at = earliest(s.requeue_at, window.held_until);

    let warning =
        (status.code == Code::Warning).then_some((status.message.as_str(), status.plugin.as_str()));
    let ctx = plan::EventContext {
        placement: &name,
        namespace: &namespace,
        warning,
        score_note: plan::score_note(filtered.iter().map(|n| &**n).zip(s.totals.iter().copied()))
            .filter(|_| say_scores),
    };
    let writes = if keep_current {
        Vec::new()
    } else {
        plan::writes(placement, &namespace, &existing, &decisions, &ctx)
    };

    // Placement status.
    let mut conditions = previous_status.conditions.clone();
    let stopped = s.spread.as_ref().and_then(|r| r.stopped.clone());
    let (sat, reason, message) = if let Code::Exceeded(limit) = status.code {
        ("False", limit.reason(), status.message.clone())
    } else if bindings.is_empty() {
        (
            "False",
            pc::reason::NO_MANAGED_CLUSTER_SET_BINDINGS,
            pc::message::NO_MANAGED_CLUSTER_SET_BINDINGS.to_owned(),
        )
    } else if cluster_sets.is_empty() {
        (
            "False",
            pc::reason::NO_INTERSECTION,
            format!(
                "None of ManagedClusterSets [{}] is bound to placement namespace",
                spec.cluster_sets.join(",")
            ),
        )
    } else if available.is_empty() && status.code != Code::Error {
        (
            "False",
            pc::reason::ALL_MANAGED_CLUSTER_SETS_EMPTY,
            format!(
                "All ManagedClusterSets [{}] have no member ManagedCluster",
                cluster_sets.join(",")
            ),
        )
    } else if status.code == Code::Error {
        (
            "False",
            pc::reason::NOT_ALL_DECISIONS_SCHEDULED,
            status.message.clone(),
        )
    } else if selected.is_empty() {
        (
            "False",
            pc::reason::NO_MANAGED_CLUSTER_MATCHED,
            pc::message::NO_MANAGED_CLUSTER_MATCHED.to_owned(),
        )
    } else if unscheduled == 0 {
        (
            "True",
            pc::reason::ALL_DECISIONS_SCHEDULED,
            pc::message::ALL_DECISIONS_SCHEDULED.to_owned(),
        )
    } else {
        let mut m = format!("{unscheduled} cluster decisions unscheduled");
        if let Some(why) = &stopped {
            m.push_str(": ");
            m.push_str(why);
        }
        ("False", pc::reason::NOT_ALL_DECISIONS_SCHEDULED, m)
    };
    ocm_api::conditions::set(&mut conditions, pc::SATISFIED, sat, reason, &message, now);
    if status.code == Code::Misconfigured {
        ocm_api::conditions::set(
            &mut conditions,
            pc::MISCONFIGURED,
            "True",
            pc::reason::MISCONFIGURED,
            &status.to_string(),
            now,
        );
    } else {
        ocm_api::conditions::set(
            &mut conditions,
            pc::MISCONFIGURED,
            "False",
            pc::reason::SUCCEED_CONFIGURED,
            pc::message::CONFIGURATION_CHECK_PASS,
            now,
        );
    }
    let decision_groups = if keep_current {
        previous_status.decision_groups.clone()
    } else {
        groups
            .iter()
            .map(|g| DecisionGroupStatus {
                decision_group_index: i32::try_from(g.index).unwrap_or(i32::MAX),
                decision_group_name: g.name.clone(),
                decisions: g.slices.iter().map(|s| s.name.clone()).collect(),
                clusters_count: i32::try_from(g.cluster_count()).unwrap_or(i32::MAX),
            })
            .collect()
    };
    let number_of_selected_clusters = if keep_current {
        previous_status.number_of_selected_clusters
    } else {
        i32::try_from(selected.len()).unwrap_or(i32::MAX)
    };
    let placement_status = if status.code == Code::Transient {
        // Nothing is written: the next try decides.
        previous_status.clone()
    } else {
        PlacementStatus {
            number_of_selected_clusters,
            decision_groups,
            conditions,
            last_score_update_time: last_score_update,
        }
    };
    if status.code == Code::Transient {
        requeue_at = None;
    }

    laps.lap("bind", "PlacementDecisions");
    Outcome {
        namespace,
        name,
        bindings,
        cluster_sets,
        available,
        terminating,
        filters: s.filters,
        filtered,
        prioritizers: s.prioritizers,
        totals: s.totals,
        selected: selected.iter().map(|c| c.name.clone()).collect(),
        held: if keep_current { Vec::new() } else { s.held },
        spread: s.spread,
        unscheduled,
        status,
        notes: s.notes,
        validity_capped: {
            let mut capped = s.validity_capped;
            capped.sort_unstable();
            capped.dedup();
            capped
        },
        groups,
        decisions,
        writes,
        placement_status,
        requeue_at,
    }
}

/// `scoreRateLimit` (`^[0-9]+[hms]$`, default `1m`) as a duration; anything unreadable is
/// the default.
/// Capped scores named one by one in a pass's notes; the rest are counted.
const CAPPED_NOTES: usize = 10;

#[cfg(test)]
mod tests;
