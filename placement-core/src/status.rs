//! The result code of a scheduling pass, as upstream's framework status, and the Placement
//! status a pass writes: its conditions and decision groups (upstream's `newSatisfiedCondition`,
//! `newMisconfiguredCondition` and `updateStatus`, open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/scheduling_controller.go`).

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use ocm_api::PlacementStatus;
use ocm_api::cluster::v1beta1::DecisionGroupStatus;
use ocm_api::wellknown::placement_condition as pc;

use crate::groups::Group;

/// Upstream's codes: `Success=0, Warning=1, Error=2, Misconfigured=3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    Success,
    /// Scheduled normally, but something the user should know (expired scores).
    Warning,
    /// The inputs could not be evaluated (not the Placement's fault).
    Error,
    /// The Placement itself is wrong; it selects nothing until fixed.
    Misconfigured,
    /// Ours: a limit of this scheduler stopped the pass (see [`super::limits`]). Nothing is
    /// selected and the current decisions are kept; `PlacementSatisfied` says which limit.
    Exceeded(Limit),
    /// Ours: the pass failed for a reason that may pass (the CEL compiler thread could not
    /// start). Nothing is written, decisions and status stay as they are; the controller
    /// retries with backoff. Never cached.
    Transient,
}

/// Which limit stopped a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// The Placement's CEL budget over all clusters: cost units or wall time.
    CelBudget,
    /// The number of list items in the spec.
    ListItems,
}

impl Limit {
    /// The `PlacementSatisfied` reason (and the event reason).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Limit::CelBudget => pc::reason::CEL_BUDGET_EXCEEDED,
            Limit::ListItems => pc::reason::LIST_LIMIT_EXCEEDED,
        }
    }
}

/// A code with the plugin that raised it and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    /// Empty for checks that belong to no plugin (upstream leaves it empty for weight errors).
    pub plugin: String,
    pub message: String,
}

impl Status {
    pub fn success() -> Self {
        Self {
            code: Code::Success,
            plugin: String::new(),
            message: String::new(),
        }
    }

    pub(crate) fn new(code: Code, plugin: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            plugin: plugin.into(),
            message: message.into(),
        }
    }

    pub(crate) fn misconfigured(plugin: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Code::Misconfigured, plugin, message)
    }

    /// Error, Misconfigured, Exceeded or Transient: scheduling stops and selects nothing.
    pub(crate) fn is_error(&self) -> bool {
        matches!(
            self.code,
            Code::Error | Code::Misconfigured | Code::Exceeded(_) | Code::Transient
        )
    }

    /// The current decisions stay: the inputs could not be read (Error), a limit stopped the
    /// pass (Exceeded), or a transient failure (Transient). Emptying them would make their
    /// consumers (the add-on manager) uninstall from every cluster.
    pub(crate) fn keeps_decisions(&self) -> bool {
        matches!(self.code, Code::Error | Code::Exceeded(_) | Code::Transient)
    }
}

impl fmt::Display for Status {
    /// `<plugin>:<message>`, the PlacementMisconfigured message format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.plugin, self.message)
    }
}

/// What the `PlacementSatisfied` condition is decided from: upstream's arguments to
/// `newSatisfiedCondition`, and why spread selection stopped early.
pub(crate) struct Counts<'a> {
    pub(crate) cluster_sets_in_spec: &'a [String],
    pub(crate) eligible_cluster_sets: &'a [String],
    pub(crate) bindings: usize,
    pub(crate) available: usize,
    pub(crate) selected: usize,
    pub(crate) unscheduled: i32,
    /// Why a `DoNotSchedule` constraint stopped selection, when it did.
    pub(crate) stopped: Option<&'a str>,
}

/// A condition's status, reason and message.
struct Condition {
    status: &'static str,
    reason: &'static str,
    message: String,
}

impl Condition {
    fn new(status: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Condition {
            status,
            reason,
            message: message.into(),
        }
    }

    fn set(&self, conditions: &mut Vec<meta::Condition>, type_: &str, now: Timestamp) {
        ocm_api::conditions::set(
            conditions,
            type_,
            self.status,
            self.reason,
            &self.message,
            now,
        );
    }
}

/// Upstream's `newSatisfiedCondition`, with ours first: a limit that stopped the pass names
/// itself. Unlike upstream, an Error while reading the sets (no available cluster) says the
/// error rather than that the sets are empty.
fn satisfied_condition(status: &Status, c: &Counts<'_>) -> Condition {
    if let Code::Exceeded(limit) = status.code {
        return Condition::new("False", limit.reason(), status.message.clone());
    }
    if c.bindings == 0 {
        return Condition::new(
            "False",
            pc::reason::NO_MANAGED_CLUSTER_SET_BINDINGS,
            pc::message::NO_MANAGED_CLUSTER_SET_BINDINGS,
        );
    }
    if c.eligible_cluster_sets.is_empty() {
        let message = format!(
            "None of ManagedClusterSets [{}] is bound to placement namespace",
            c.cluster_sets_in_spec.join(",")
        );
        return Condition::new("False", pc::reason::NO_INTERSECTION, message);
    }
    if c.available == 0 && status.code != Code::Error {
        let message = format!(
            "All ManagedClusterSets [{}] have no member ManagedCluster",
            c.eligible_cluster_sets.join(",")
        );
        return Condition::new("False", pc::reason::ALL_MANAGED_CLUSTER_SETS_EMPTY, message);
    }
    if status.code == Code::Error {
        let message = status.message.clone();
        return Condition::new("False", pc::reason::NOT_ALL_DECISIONS_SCHEDULED, message);
    }
    if c.selected == 0 {
        return Condition::new(
            "False",
            pc::reason::NO_MANAGED_CLUSTER_MATCHED,
            pc::message::NO_MANAGED_CLUSTER_MATCHED,
        );
    }
    if c.unscheduled == 0 {
        return Condition::new(
            "True",
            pc::reason::ALL_DECISIONS_SCHEDULED,
            pc::message::ALL_DECISIONS_SCHEDULED,
        );
    }
    let mut message = format!("{} cluster decisions unscheduled", c.unscheduled);
    if let Some(why) = c.stopped {
        message.push_str(": ");
        message.push_str(why);
    }
    Condition::new("False", pc::reason::NOT_ALL_DECISIONS_SCHEDULED, message)
}

/// Upstream's `newMisconfiguredCondition`.
fn misconfigured_condition(status: &Status) -> Condition {
    if status.code == Code::Misconfigured {
        Condition::new("True", pc::reason::MISCONFIGURED, status.to_string())
    } else {
        Condition::new(
            "False",
            pc::reason::SUCCEED_CONFIGURED,
            pc::message::CONFIGURATION_CHECK_PASS,
        )
    }
}

/// The Placement status after a pass (upstream's `updateStatus`). `groups` is `None` when the
/// pass keeps the current decisions: the groups and count stay as the hub holds them. A
/// Transient failure writes nothing: the next try decides.
pub(crate) fn placement_status(
    previous: &PlacementStatus,
    status: &Status,
    counts: &Counts<'_>,
    groups: Option<&[Group]>,
    last_score_update: Option<meta::Time>,
    now: Timestamp,
) -> PlacementStatus {
    if status.code == Code::Transient {
        return previous.clone();
    }
    let mut conditions = previous.conditions.clone();
    satisfied_condition(status, counts).set(&mut conditions, pc::SATISFIED, now);
    misconfigured_condition(status).set(&mut conditions, pc::MISCONFIGURED, now);
    let (decision_groups, number_of_selected_clusters) = match groups {
        None => (
            previous.decision_groups.clone(),
            previous.number_of_selected_clusters,
        ),
        Some(groups) => (
            decision_group_status(groups),
            i32::try_from(counts.selected).unwrap_or(i32::MAX),
        ),
    };
    PlacementStatus {
        number_of_selected_clusters,
        decision_groups,
        conditions,
        last_score_update_time: last_score_update,
    }
}

/// `status.decisionGroups`: each group's index, name, objects and cluster count.
fn decision_group_status(groups: &[Group]) -> Vec<DecisionGroupStatus> {
    groups
        .iter()
        .map(|g| DecisionGroupStatus {
            decision_group_index: i32::try_from(g.index).unwrap_or(i32::MAX),
            decision_group_name: g.name.clone(),
            decisions: g.slices.iter().map(|s| s.name.clone()).collect(),
            clusters_count: i32::try_from(g.cluster_count()).unwrap_or(i32::MAX),
        })
        .collect()
}
