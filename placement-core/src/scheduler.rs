//! Upstream's scheduler `Schedule` (open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/schedule.go`): filter the eligible clusters,
//! prioritize the ones left, select. Ours adds the spread constraints (a filter for
//! `DoNotSchedule` and a selection one cluster at a time), topology affinity (one more
//! prioritizer per term) and the stability controls (selection that holds back replacements).

use std::sync::Arc;

use jiff::Timestamp;
use ocm_api::PlacementSpec;

use crate::filter::{self, FilterResult};
use crate::limits::Deadline;
use crate::pass::{Pass, earliest};
use crate::prioritize::addon::CappedScore;
use crate::prioritize::{self, Weighted, affinity};
use crate::select::{self, Constraint, SpreadReport};
use crate::snapshot::{ClusterInfo, Name, Topology};
use crate::stability::{self, HeldMove};
use crate::status::Status;
use crate::{Laps, PrioritizerResult, names};

/// What the filter, prioritize and select steps produced.
#[derive(Default)]
pub(crate) struct Scheduled<'a> {
    /// Each filter in order, with what it dropped and why.
    pub(crate) filters: Vec<FilterResult>,
    /// The clusters that passed every filter, in name order.
    pub(crate) filtered: Vec<&'a ClusterInfo>,
    pub(crate) prioritizers: Vec<PrioritizerResult>,
    /// `Σ weight × score`, aligned with `filtered`.
    pub(crate) totals: Vec<i64>,
    /// The chosen clusters as indices into `filtered`, in selection order.
    picked: Vec<usize>,
    /// The chosen clusters, in selection order.
    pub(crate) selected: Vec<&'a ClusterInfo>,
    /// `numberOfClusters − selected`, or the feasible clusters a `DoNotSchedule` constraint
    /// refused when every feasible cluster is wanted.
    pub(crate) unscheduled: i32,
    pub(crate) spread: Option<SpreadReport>,
    pub(crate) notes: Vec<String>,
    pub(crate) validity_capped: Vec<CappedScore>,
    /// When the pass must run again on time alone (toleration and score expiries, held moves).
    pub(crate) requeue_at: Option<Timestamp>,
    pub(crate) held: Vec<HeldMove>,
    /// The stability state to write (see [`stability::Selection::state`]).
    pub(crate) stability_state: Option<stability::State>,
}

impl<'a> Scheduled<'a> {
    /// The totals of the selected clusters, by name: what their decisions carry.
    pub(crate) fn selected_totals(&self) -> std::collections::HashMap<&'a str, i64> {
        self.picked
            .iter()
            .map(|&i| (&*self.filtered[i].name, self.totals[i]))
            .collect()
    }

    /// Why spread selection stopped before it had all it wanted, when it did.
    pub(crate) fn stopped(&self) -> Option<&str> {
        self.spread.as_ref().and_then(|r| r.stopped.as_deref())
    }
}

/// Schedules the `candidates` unless `status` already stopped the pass, and leaves the final
/// status of these steps in `status`. A step that fails selects nothing; what the steps before
/// it found stays in the result.
pub(crate) fn schedule<'a>(
    pass: &Pass<'a>,
    candidates: Vec<&'a ClusterInfo>,
    status: &mut Status,
    laps: &mut dyn Laps,
    deadline: &dyn Deadline,
) -> Scheduled<'a> {
    let mut s = Scheduled::default();
    if !status.is_error() {
        match run(pass, candidates, &mut s, laps, deadline) {
            Ok(st) => *status = st,
            Err(st) => {
                *status = st;
                s.picked.clear();
                s.held.clear();
                s.stability_state = None;
            }
        }
    }
    s.selected = s.picked.iter().map(|&i| s.filtered[i]).collect();
    if !status.keeps_decisions() {
        s.requeue_at = earliest(s.requeue_at, selected_toleration_timers(pass, &s.selected));
    }
    s.unscheduled = unscheduled(pass.spec, status, &s);
    s
}

/// Filter, prioritize, select. `Ok` holds the status to report (Success, or the Warning of
/// a prioritizer); `Err` stops the pass.
fn run<'a>(
    pass: &Pass<'a>,
    candidates: Vec<&'a ClusterInfo>,
    out: &mut Scheduled<'a>,
    laps: &mut dyn Laps,
    deadline: &dyn Deadline,
) -> Result<Status, Status> {
    names::check(&pass.name)?;
    let wanted = number_of_clusters(pass.spec)?;
    let kept = filter_clusters(pass, candidates, out, laps, deadline)?;
    let config = Config::read(pass)?;
    out.filtered = config.spread_filter(kept, out, laps);
    out.requeue_at = decided_toleration_timers(pass);
    let in_decision: Vec<bool> = out.filtered.iter().map(|c| pass.own.of(c) > 0).collect();
    let warning = prioritize_clusters(pass, &config, &in_decision, out, laps);
    select_clusters(pass, &config, wanted, &in_decision, out, laps);
    Ok(warning)
}

/// `spec.numberOfClusters` as a count (`None`: every feasible cluster).
fn number_of_clusters(spec: &PlacementSpec) -> Result<Option<usize>, Status> {
    spec.number_of_clusters
        .map(|n| {
            usize::try_from(n).map_err(|_| {
                Status::misconfigured("", format!("numberOfClusters must not be negative: {n}"))
            })
        })
        .transpose()
}

/// Upstream's filters, in its order: Predicate, then TaintToleration.
fn filter_clusters<'a>(
    pass: &Pass<'a>,
    candidates: Vec<&'a ClusterInfo>,
    out: &mut Scheduled<'a>,
    laps: &mut dyn Laps,
    deadline: &dyn Deadline,
) -> Result<Vec<&'a ClusterInfo>, Status> {
    let kept = predicate_filter(pass, candidates, out, laps, deadline)?;
    taint_filter(pass, kept, out, laps)
}

/// Like upstream, a filter with no clusters to look at validates nothing.
fn predicate_filter<'a>(
    pass: &Pass<'a>,
    candidates: Vec<&'a ClusterInfo>,
    out: &mut Scheduled<'a>,
    laps: &mut dyn Laps,
    deadline: &dyn Deadline,
) -> Result<Vec<&'a ClusterInfo>, Status> {
    let spec = pass.spec;
    let (kept, result) = if candidates.is_empty() || spec.predicates.is_empty() {
        filter::apply(filter::predicate::NAME, candidates, |_| None)
    } else {
        // The CEL cache's share is the Placement's own namespace ("" without one).
        let namespace = pass.placement.metadata.namespace.as_deref();
        let predicates = filter::predicate::Predicates::compile(
            namespace.unwrap_or_default(),
            &spec.predicates,
        )?;
        predicates.filter(candidates, pass.snapshot, deadline)?
    };
    out.filters.push(result);
    laps.lap("filter", filter::predicate::NAME);
    Ok(kept)
}

fn taint_filter<'a>(
    pass: &Pass<'a>,
    kept: Vec<&'a ClusterInfo>,
    out: &mut Scheduled<'a>,
    laps: &mut dyn Laps,
) -> Result<Vec<&'a ClusterInfo>, Status> {
    let tolerations = &pass.spec.tolerations;
    if !kept.is_empty() {
        filter::taint::validate(tolerations)?;
    }
    let (kept, result) = filter::apply(filter::taint::NAME, kept, |c| {
        filter::taint::check(c.taints(), tolerations, pass.own.of(c) > 0, pass.now)
    });
    out.filters.push(result);
    laps.lap("filter", filter::taint::NAME);
    Ok(kept)
}

/// The toleration timers of the clusters this placement's decisions hold now.
fn decided_toleration_timers(pass: &Pass<'_>) -> Option<Timestamp> {
    filter::taint::requeue_at(
        pass.own
            .by_name
            .keys()
            .filter_map(|c| pass.snapshot.cluster(c))
            .map(ClusterInfo::taints),
        &pass.spec.tolerations,
        pass.now,
    )
}

/// The toleration timers of the clusters decided after this pass too. Upstream reads only the
/// decisions from before the pass, and finds a newly chosen cluster's timer on the pass its
/// own write's watch event starts; the controller here does not schedule on the echo of its
/// own writes, so the timer must come from this pass.
fn selected_toleration_timers(pass: &Pass<'_>, selected: &[&ClusterInfo]) -> Option<Timestamp> {
    filter::taint::requeue_at(
        selected.iter().map(|c| c.taints()),
        &pass.spec.tolerations,
        pass.now,
    )
}

/// What the placement configures beyond the filters, checked in this order: upstream's
/// prioritizer policy, then our stability controls, spread constraints and topology affinity.
struct Config {
    prioritizers: Vec<Weighted>,
    stability: Option<stability::Policy>,
    constraints: Vec<Constraint>,
    /// The topology of each constraint, aligned with `constraints`.
    topologies: Vec<Arc<Topology>>,
    affinity: Vec<affinity::Term>,
}

impl Config {
    fn read(pass: &Pass<'_>) -> Result<Self, Status> {
        let prioritizers = prioritize::from_policy(&pass.spec.prioritizer_policy)?;
        let stability = stability::parse(pass.annotation(stability::ANNOTATION))?;
        let constraints = select::constraints(&pass.spec.spread_policy.spread_constraints)?;
        let affinity = affinity::parse(pass.annotation(affinity::ANNOTATION))?;
        let topologies = constraints
            .iter()
            .map(|c| pass.snapshot.topology(&c.topology_key, c.claim))
            .collect();
        Ok(Config {
            prioritizers,
            stability,
            constraints,
            topologies,
            affinity,
        })
    }

    /// Drops the clusters a `DoNotSchedule` constraint can never place (no topology value),
    /// as a filter of its own (none without such a constraint).
    fn spread_filter<'a>(
        &self,
        kept: Vec<&'a ClusterInfo>,
        out: &mut Scheduled<'a>,
        laps: &mut dyn Laps,
    ) -> Vec<&'a ClusterInfo> {
        if !self.constraints.iter().any(|c| c.hard) {
            return kept;
        }
        let (kept, result) = filter::apply(select::PLUGIN, kept, |c| {
            select::missing_key(&self.constraints, &self.topologies, c)
        });
        out.filters.push(result);
        laps.lap("filter", select::PLUGIN);
        kept
    }

    /// The policy's prioritizers, then one per affinity term; weight 0 disables one.
    fn weighted(&self) -> impl Iterator<Item = Weighted> + '_ {
        let affinity = self.affinity.iter().enumerate().map(|(i, t)| Weighted {
            name: t.name(),
            kind: prioritize::Kind::Affinity(i),
            weight: t.weight,
        });
        self.prioritizers
            .iter()
            .cloned()
            .chain(affinity)
            .filter(|w| w.weight != 0)
    }

    /// Up to `n` of `candidates` ranked by `keys`: the top N, or with spread constraints one
    /// cluster at a time ([`select::spread`]).
    fn select(
        &self,
        candidates: &[&ClusterInfo],
        totals: &[i64],
        keys: &[i64],
        scale: i64,
        n: usize,
    ) -> (Vec<usize>, Option<SpreadReport>) {
        if self.constraints.is_empty() {
            return (select::top_n(keys, n), None);
        }
        let ranking = select::Ranking {
            totals,
            keys,
            scale,
        };
        let (picked, report) =
            select::spread(&self.constraints, &self.topologies, candidates, ranking, n);
        (picked, Some(report))
    }
}

/// Each prioritizer scores the filtered clusters; the totals are `Σ weight × score`. Returns
/// the Warning of the last prioritizer that raised one (Success without).
fn prioritize_clusters(
    pass: &Pass<'_>,
    config: &Config,
    in_decision: &[bool],
    out: &mut Scheduled<'_>,
    laps: &mut dyn Laps,
) -> Status {
    let filtered = &out.filtered;
    let candidates = prioritize::Candidates {
        snapshot: pass.snapshot,
        own: &pass.own,
        clusters: filtered,
        in_decision,
        affinity: &config.affinity,
        now: pass.now,
    };
    let mut warning = Status::success();
    let mut totals = vec![0i64; filtered.len()];
    let mut results = Vec::with_capacity(config.prioritizers.len() + config.affinity.len());
    for w in config.weighted() {
        let scored = prioritize::score(&w, &candidates);
        for (t, s) in totals.iter_mut().zip(&scored.scores) {
            if let Some(s) = s {
                *t += i64::from(w.weight) * s;
            }
        }
        if let Some(st) = scored.warning {
            warning = st;
        }
        out.notes.extend(scored.notes);
        out.validity_capped.extend(scored.capped);
        out.requeue_at = earliest(out.requeue_at, scored.requeue_at);
        laps.lap("prioritizer", &w.name);
        results.push(PrioritizerResult {
            name: w.name,
            weight: w.weight,
            scores: scored.scores,
        });
    }
    out.prioritizers = results;
    out.totals = totals;
    warning
}

/// Upstream's `selectClusters` (the best `numberOfClusters` by total, then name), with spread
/// constraints and the stability controls when the placement asks for them.
fn select_clusters(
    pass: &Pass<'_>,
    config: &Config,
    wanted: Option<usize>,
    in_decision: &[bool],
    out: &mut Scheduled<'_>,
    laps: &mut dyn Laps,
) {
    let filtered = &out.filtered;
    let totals = &out.totals;
    let n = wanted.unwrap_or(filtered.len()).min(filtered.len());
    let mut select = |keys: &[i64], scale: i64| config.select(filtered, totals, keys, scale, n);
    let (picked, spread) = match &config.stability {
        None => select(totals, 1),
        Some(policy) => {
            let names: Vec<&Name> = filtered.iter().map(|c| &c.name).collect();
            let state = stability::State::read(&pass.existing);
            let s = stability::select(
                policy,
                &state,
                &names,
                in_decision,
                totals,
                pass.now,
                &mut select,
            );
            out.held = s.held;
            out.stability_state = s.state;
            out.requeue_at = earliest(out.requeue_at, s.requeue_at);
            (s.picked, s.spread)
        }
    };
    out.picked = picked;
    out.spread = spread;
    let selector = if config.constraints.is_empty() {
        "TopN"
    } else {
        select::PLUGIN
    };
    laps.lap("selector", selector);
}

/// Upstream's `NumOfUnscheduled`: `numberOfClusters − selected`. Without numberOfClusters every
/// feasible cluster is wanted: the ones a DoNotSchedule constraint refused are unscheduled (and
/// the condition says why).
fn unscheduled(spec: &PlacementSpec, status: &Status, s: &Scheduled<'_>) -> i32 {
    let stopped_early = s.stopped().is_some();
    match spec.number_of_clusters {
        Some(n) if n >= 0 && !status.is_error() => {
            n.saturating_sub(i32::try_from(s.selected.len()).unwrap_or(i32::MAX))
        }
        None if stopped_early && !status.is_error() => {
            i32::try_from(s.filtered.len() - s.selected.len()).unwrap_or(i32::MAX)
        }
        _ => 0,
    }
}
