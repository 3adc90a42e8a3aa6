//! What bounds one Placement's pass, so that no single Placement holds a worker, or the hub,
//! for long:
//!
//! - a CEL budget for the whole pass, over all clusters: cost units (the same units as
//!   upstream's per-expression limit and per-cluster budget, see [`ocm_cel`]) and wall
//!   time. The core reads no clock: the caller passes a [`Deadline`], looked at every
//!   `DEADLINE_EVERY` clusters or `DEADLINE_EVERY_UNITS` units, and inside an evaluation
//!   every [`ocm_cel::DEADLINE_EVERY_UNITS`] units (so one cluster's expression cannot run
//!   past it);
//! - the number of list items in the spec. Upstream's CRD bounds only `spreadConstraints`
//!   (`maxItems: 8`, relied on for objects from the API server, and checked here too for
//!   `simulate` files and debug what-ifs, which no CRD validates); every other list is
//!   unbounded, and the predicate filter's work per cluster grows with their total.
//!
//! A Placement past a limit is not scheduled: its decisions are kept (emptying them would make
//! the add-on manager uninstall its agents) and `PlacementSatisfied=False` names the limit.

use std::time::Duration;

use ocm_api::PlacementSpec;
use ocm_api::wellknown::limits::MAX_SPREAD_CONSTRAINTS;

use super::status::{Code, Limit, Status};
use ocm_cel::RUNTIME_COST_BUDGET;

/// The default CEL cost budget of one pass: ten clusters' full per-cluster budgets, or 10,000
/// units per cluster (a 100 x 100 comprehension) on a 10,000-cluster fleet; a simple
/// comparison costs 5. Measured at 2 to 3 million units per second (release build, shared
/// machine), so the time budget usually trips first; the cost budget does not depend on
/// the machine's load (and `simulate` reproduces it).
pub const DEFAULT_CEL_COST_BUDGET: u64 = 10 * RUNTIME_COST_BUDGET;
/// The default CEL time budget of one pass.
pub(crate) const DEFAULT_CEL_TIME_BUDGET: Duration = Duration::from_secs(5);
/// The default number of list items a spec may hold in all.
pub const DEFAULT_MAX_LIST_ITEMS: usize = 1000;
/// Clusters evaluated between two looks at the deadline (cheap selectors)...
pub(crate) const DEADLINE_EVERY: usize = 16;
/// ...or units spent (expensive ones: a cluster may spend up to upstream's 10,000,000).
pub(crate) const DEADLINE_EVERY_UNITS: u64 = ocm_cel::PER_CALL_LIMIT;

/// The scheduler's limits on one pass (set once, from flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CEL cost units one pass may spend over all clusters.
    pub cel_cost: u64,
    /// Wall time one pass may spend evaluating CEL selectors (the caller's [`Deadline`]; the
    /// core only names it in messages).
    pub cel_time: Duration,
    /// List items the spec may hold in all (every list, nested ones included).
    pub list_items: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            cel_cost: DEFAULT_CEL_COST_BUDGET,
            cel_time: DEFAULT_CEL_TIME_BUDGET,
            list_items: DEFAULT_MAX_LIST_ITEMS,
        }
    }
}

/// When a pass must give up. The core never reads a clock; the caller's deadline does (`()`
/// for none, or a closure: `&|| Instant::now() >= until`). It is also looked at inside a CEL
/// evaluation, every [`ocm_cel::DEADLINE_EVERY_UNITS`] units.
pub use ocm_cel::Deadline;

/// The message of a pass stopped by its CEL budget after `done` of `total` clusters.
pub(crate) fn cel_budget_exceeded(
    limits: &Limits,
    out_of_time: bool,
    done: usize,
    total: usize,
) -> Status {
    let budget = if out_of_time {
        format!("time budget ({:?})", limits.cel_time)
    } else {
        format!("cost budget ({} units)", limits.cel_cost)
    };
    Status::new(
        Code::Exceeded(Limit::CelBudget),
        super::filter::predicate::NAME,
        format!(
            "celSelector evaluation used up the placement's CEL {budget} after {done} of {total} clusters; not scheduled, the current decisions are kept"
        ),
    )
}

/// One list of the spec and its length.
struct List {
    path: String,
    len: usize,
}

/// Every list of `spec`, by its path.
fn lists(spec: &PlacementSpec) -> Vec<List> {
    let mut out = Vec::new();
    let mut add = |path: String, len: usize| out.push(List { path, len });
    add("spec.clusterSets".into(), spec.cluster_sets.len());
    add("spec.predicates".into(), spec.predicates.len());
    for (i, p) in spec.predicates.iter().enumerate() {
        let s = &p.required_cluster_selector;
        let at = format!("spec.predicates[{i}].requiredClusterSelector");
        selector_lists(
            &mut add,
            &at,
            &s.label_selector,
            &s.claim_selector.match_expressions,
        );
        add(
            format!("{at}.celSelector.celExpressions"),
            s.cel_selector.cel_expressions.len(),
        );
    }
    add(
        "spec.prioritizerPolicy.configurations".into(),
        spec.prioritizer_policy.configurations.len(),
    );
    add(
        "spec.spreadPolicy.spreadConstraints".into(),
        spec.spread_policy.spread_constraints.len(),
    );
    add("spec.tolerations".into(), spec.tolerations.len());
    let groups = &spec.decision_strategy.group_strategy.decision_groups;
    add(
        "spec.decisionStrategy.groupStrategy.decisionGroups".into(),
        groups.len(),
    );
    for (i, g) in groups.iter().enumerate() {
        let s = &g.group_cluster_selector;
        let at =
            format!("spec.decisionStrategy.groupStrategy.decisionGroups[{i}].groupClusterSelector");
        selector_lists(
            &mut add,
            &at,
            &s.label_selector,
            &s.claim_selector.match_expressions,
        );
    }
    out
}

fn selector_lists(
    add: &mut impl FnMut(String, usize),
    at: &str,
    labels: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    claims: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement],
) {
    add(
        format!("{at}.labelSelector.matchLabels"),
        labels.match_labels.as_ref().map_or(0, |m| m.len()),
    );
    let expressions = labels.match_expressions.as_deref().unwrap_or_default();
    for (kind, exprs) in [("labelSelector", expressions), ("claimSelector", claims)] {
        add(format!("{at}.{kind}.matchExpressions"), exprs.len());
        for (j, e) in exprs.iter().enumerate() {
            add(
                format!("{at}.{kind}.matchExpressions[{j}].values"),
                e.values.as_ref().map_or(0, Vec::len),
            );
        }
    }
}

/// `Err` when the spec holds more list items than `limits` allows (or more spread constraints
/// than the API does): the message names the largest list, its size and the limit.
pub(crate) fn check_lists(spec: &PlacementSpec, limits: &Limits) -> Result<(), Status> {
    let exceeded = |m: String| Status::new(Code::Exceeded(Limit::ListItems), "", m);
    let spread = spec.spread_policy.spread_constraints.len();
    if spread > MAX_SPREAD_CONSTRAINTS {
        return Err(exceeded(format!(
            "spec.spreadPolicy.spreadConstraints has {spread} items, more than the API's limit of {MAX_SPREAD_CONSTRAINTS}; not scheduled, the current decisions are kept"
        )));
    }
    let all = lists(spec);
    let total: usize = all.iter().map(|l| l.len).sum();
    if total <= limits.list_items {
        return Ok(());
    }
    // The first of the largest lists: the one to look at.
    let largest = all
        .iter()
        .fold(None::<&List>, |best, l| match best {
            Some(b) if b.len >= l.len => Some(b),
            _ => Some(l),
        })
        .map(|l| format!("; the largest is {} with {}", l.path, l.len))
        .unwrap_or_default();
    Err(exceeded(format!(
        "the spec's lists hold {total} items, more than the scheduler's limit of {}{largest}; not scheduled, the current decisions are kept",
        limits.list_items
    )))
}
