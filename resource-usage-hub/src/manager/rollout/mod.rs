//! The progressive rollout decision (sans-IO): which clusters of a Placement may move to the
//! add-on's current rendering now, following the placement's decision groups and the
//! ClusterManagementAddOn's `installStrategy.placements[].rolloutStrategy`.
//!
//! This reproduces OCM sdk-go's rollout handler (`pkg/apis/cluster/v1alpha1/rollout.go`,
//! `GetRolloutCluster` with `progressivePerCluster` / `progressivePerGroup`) together with the
//! decision-group view of its `PlacementDecisionClustersTracker`
//! (`pkg/apis/cluster/v1beta1/placement.go`), and the install-progression condition of ocm's
//! `cma_progressing_reconciler.go`. Upstream reads a clock; here time is the `now` argument, so
//! every function is pure and deterministic.
//!
//! Upstream quirks kept on purpose:
//! - Mandatory decision groups go first with no failure tolerated; if that pass has anything to
//!   roll out or anything timed out, the rest waits. So a failed or timed-out mandatory group
//!   stops everything.
//! - `maxFailures` / `maxConcurrency` percentages are `ceil(p / 100 * total)`; a result `<= 0`
//!   or `> total` falls back to the default (`maxConcurrency`: all clusters, `maxFailures`: 0).
//! - A Succeeded cluster stays in `to_rollout` until `minSuccessTime` after its last transition;
//!   `recheck_after` is the minimum over the positive recheck times of `to_rollout`.
//! - In ProgressivePerGroup a group is done when `to_rollout.len() <= failures so far`; Failed
//!   clusters within the deadline are still in `to_rollout`.
//! - `progressDeadline` must match upstream's `^(([0-9])+[h|m|s])|None$` and then parse as a Go
//!   duration (`1h30m` passes, `0` and `1.5h` do not).
//!
//! Deliberate differences from upstream:
//! - The mandatory pass looks at the mandatory groups' clusters only. Upstream computes its
//!   timeouts over every current cluster, so one timed-out cluster in a later group would stop
//!   the rollout for good (the mandatory pass always has "something timed out").
//! - Every group in [`Groups`] takes part. Upstream's tracker only looks at group indices
//!   `0..n` (`n` = number of distinct indices) and, for an index carried by several names, at one
//!   name picked by map order, silently treating the other clusters as removed. The placement
//!   controller always writes indices `0..n` with one name each, where both agree. Likewise a
//!   mandatory `groupIndex` selects every group with that index.
//! - A PlacementDecision without a parsable decision-group-index label is group 0 (upstream's
//!   tracker refuses the whole placement).
//! - Ties are broken deterministically: groups are ordered by (index, name) (upstream: by index,
//!   unstable sort); a cluster in several groups belongs to the lowest one (upstream: map order);
//!   statuses with equal cluster names keep their input order (upstream: unstable sort).
//! - [`Strategy::parse`] validates every field up front; upstream parses `maxConcurrency` only
//!   once the mandatory groups are done.
//! - `minSuccessTime` `""` is 0 (the CRD default; Go's `metav1.Duration` rejects `""`), and a
//!   negative one is 0 (`std::time::Duration` is unsigned; it only mattered for a last
//!   transition time in the future).
//! - Percentages use Rust's float syntax: Go's hexadecimal floats (`0x1p-2%`) are rejected.
//! - A recheck time past jiff's range (year 9999) counts as never reached, without a recheck.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ocm_api::addon::v1alpha1::{MandatoryDecisionGroup, RolloutConfig, RolloutStrategy};
use ocm_api::cluster::v1beta1::PlacementDecision;
use ocm_api::wellknown::{addon_condition, label};

/// Go's `maxTimeDuration` (`math.MaxInt64` nanoseconds): upstream's "no deadline / no soak".
const GO_MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

mod decide;
mod groups;
mod progress;
mod strategy;
#[cfg(test)]
mod tests;

pub use decide::rollout;
use groups::Subset;
pub use groups::{GroupKey, Groups};
pub use progress::Progress;
pub use strategy::{GroupSelector, Limits, RolloutError, Strategy, Threshold};

/// A cluster's rollout status (upstream `RolloutStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The current rendering is not applied yet.
    ToApply,
    /// Applied, not yet reported successful.
    Progressing,
    Succeeded,
    Failed,
    /// Progressing or Failed for longer than `progressDeadline`.
    TimeOut,
    /// Leave this cluster alone.
    Skip,
}

/// One cluster's status (upstream `ClusterRolloutStatus`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterStatus {
    pub cluster: String,
    /// Passed through as given for existing statuses; set for clusters [`rollout`] adds.
    pub group: Option<GroupKey>,
    pub status: Status,
    /// Start of the deadline (Progressing, Failed) or of the soak time (Succeeded).
    pub last_transition: Option<Timestamp>,
    /// When the deadline or soak time ends; set by [`rollout`].
    pub recheck_at: Option<Timestamp>,
}

/// What [`rollout`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolloutResult {
    /// Clusters to move to (or keep on) the current rendering now.
    pub to_rollout: Vec<ClusterStatus>,
    /// Clusters past their deadline, with status TimeOut.
    pub timed_out: Vec<ClusterStatus>,
    /// Existing statuses whose cluster is no longer selected.
    pub removed: Vec<ClusterStatus>,
    /// The rollout stopped because too many clusters failed.
    pub max_failure_breach: bool,
    /// When to look again (timeouts, minSuccessTime).
    pub recheck_after: Option<Duration>,
}
