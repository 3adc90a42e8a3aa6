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

// ---------------------------------------------------------------------------------------------
// Decision groups
// ---------------------------------------------------------------------------------------------

/// A decision group: its index and name labels (ordered by index, then name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub index: i32,
    pub name: String,
}

impl GroupKey {
    pub fn new(index: i32, name: impl Into<String>) -> GroupKey {
        GroupKey {
            index,
            name: name.into(),
        }
    }
}

/// A placement's clusters by decision group (ordered by group index), built from its
/// PlacementDecisions (labels decision-group-index / decision-group-name; a decision without a
/// parsable index label is group 0). A group may be empty: upstream keeps the group of a
/// decision without clusters, and that matters for mandatory groups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Groups {
    groups: BTreeMap<GroupKey, BTreeSet<String>>,
}

impl Groups {
    pub fn from_decisions<'a>(
        decisions: impl IntoIterator<Item = &'a PlacementDecision>,
    ) -> Groups {
        let mut groups = Groups::default();
        for decision in decisions {
            let labels = decision.metadata.labels.as_ref();
            let label_of = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
            let name = label_of(label::DECISION_GROUP_NAME).unwrap_or_default();
            // Go's strconv.Atoi then int32(): 64-bit parse, wrapping conversion.
            let index = label_of(label::DECISION_GROUP_INDEX)
                .and_then(|v| v.parse::<i64>().ok())
                .map_or(0, |i| i as i32);
            let key = GroupKey::new(index, name);
            groups.insert_group(key.clone());
            let clusters = decision.status.iter().flat_map(|s| &s.decisions);
            for decision in clusters {
                groups.insert(key.clone(), decision.cluster_name.clone());
            }
        }
        groups
    }

    /// Adds `cluster` to group `key` (creating the group).
    pub fn insert(&mut self, key: GroupKey, cluster: impl Into<String>) {
        self.groups.entry(key).or_default().insert(cluster.into());
    }

    /// Adds group `key` without clusters (as a PlacementDecision with no decisions does).
    pub fn insert_group(&mut self, key: GroupKey) {
        self.groups.entry(key).or_default();
    }

    /// All clusters, whatever their group.
    pub fn clusters(&self) -> BTreeSet<&str> {
        self.groups.values().flatten().map(String::as_str).collect()
    }

    /// The (lowest) group `cluster` is in.
    pub fn group_of(&self, cluster: &str) -> Option<&GroupKey> {
        self.groups
            .iter()
            .find(|(_, clusters)| clusters.contains(cluster))
            .map(|(key, _)| key)
    }

    /// The number of distinct clusters.
    pub fn len(&self) -> usize {
        self.clusters().len()
    }

    /// No clusters (there may still be empty groups).
    pub fn is_empty(&self) -> bool {
        self.groups.values().all(BTreeSet::is_empty)
    }

    /// The number of groups, empty ones included.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The groups in order with their clusters.
    pub fn iter(&self) -> impl Iterator<Item = (&GroupKey, &BTreeSet<String>)> {
        self.groups.iter()
    }

    /// The groups the selectors name (upstream's `ExistingClusterGroups`), or all the others
    /// (`ExistingClusterGroupsBesides`).
    fn subset(&self, selectors: &[GroupSelector], selected: bool) -> Subset<'_> {
        let chosen = |key: &GroupKey| {
            selectors.iter().any(|s| match s {
                GroupSelector::Name(name) => key.name == *name,
                GroupSelector::Index(index) => key.index == *index,
            })
        };
        let groups = self
            .groups
            .iter()
            .filter(|(key, _)| chosen(key) == selected)
            .collect();
        Subset { groups }
    }

    fn all(&self) -> Subset<'_> {
        self.subset(&[], false)
    }
}

/// Some groups of a [`Groups`], in order.
struct Subset<'a> {
    groups: Vec<(&'a GroupKey, &'a BTreeSet<String>)>,
}

impl Subset<'_> {
    fn clusters(&self) -> BTreeSet<&str> {
        self.groups
            .iter()
            .flat_map(|(_, clusters)| clusters.iter())
            .map(String::as_str)
            .collect()
    }

    fn group_of(&self, cluster: &str) -> Option<&GroupKey> {
        self.groups
            .iter()
            .find(|(_, clusters)| clusters.contains(cluster))
            .map(|(key, _)| *key)
    }
}

// ---------------------------------------------------------------------------------------------
// Statuses and results
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Strategy
// ---------------------------------------------------------------------------------------------

/// A count or a percentage of clusters (`maxFailures`, `maxConcurrency`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    Count(i32),
    Percent(f64),
}

impl Default for Threshold {
    /// Go's zero `IntOrString`: what an unset field means.
    fn default() -> Threshold {
        Threshold::Count(0)
    }
}

impl Threshold {
    /// Upstream's `calculateRolloutSize`: the portion of `total`, or `default` when that is not
    /// in `1..=total`.
    pub fn of(self, total: usize, default: usize) -> usize {
        let length = match self {
            Threshold::Count(n) => i64::from(n),
            // Saturating float-to-int; NaN is 0, both then fall back like Go's overflow does.
            Threshold::Percent(p) => (p / 100.0 * total as f64).ceil() as i64,
        };
        match usize::try_from(length) {
            Ok(length) if length > 0 && length <= total => length,
            _ => default,
        }
    }
}

/// A mandatory decision group: by name if it has one, else by index (as upstream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupSelector {
    Name(String),
    Index(i32),
}

impl From<&MandatoryDecisionGroup> for GroupSelector {
    fn from(g: &MandatoryDecisionGroup) -> GroupSelector {
        if g.group_name.is_empty() {
            GroupSelector::Index(g.group_index)
        } else {
            GroupSelector::Name(g.group_name.clone())
        }
    }
}

/// The timing and failure tolerance of the progressive types.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// Soak time after success.
    pub min_success_time: Duration,
    /// `None`: wait forever.
    pub progress_deadline: Option<Duration>,
    pub max_failures: Threshold,
}

/// A parsed, validated strategy.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Everything at once (minSuccessTime and maxFailures are ignored, as upstream).
    All { progress_deadline: Option<Duration> },
    /// Cluster by cluster, `max_concurrency` at a time, after the mandatory groups.
    Progressive {
        limits: Limits,
        mandatory: Vec<GroupSelector>,
        max_concurrency: Threshold,
    },
    /// Group by group, after the mandatory groups.
    ProgressivePerGroup {
        limits: Limits,
        mandatory: Vec<GroupSelector>,
    },
}

/// The field names errors report, per rollout type.
struct Fields {
    min_success_time: &'static str,
    progress_deadline: &'static str,
    max_failures: &'static str,
}

const ALL_DEADLINE_FIELD: &str = "rolloutStrategy.all.progressDeadline";
const PROGRESSIVE_FIELDS: Fields = Fields {
    min_success_time: "rolloutStrategy.progressive.minSuccessTime",
    progress_deadline: "rolloutStrategy.progressive.progressDeadline",
    max_failures: "rolloutStrategy.progressive.maxFailures",
};
const PER_GROUP_FIELDS: Fields = Fields {
    min_success_time: "rolloutStrategy.progressivePerGroup.minSuccessTime",
    progress_deadline: "rolloutStrategy.progressivePerGroup.progressDeadline",
    max_failures: "rolloutStrategy.progressivePerGroup.maxFailures",
};
const MAX_CONCURRENCY_FIELD: &str = "rolloutStrategy.progressive.maxConcurrency";
const CLUSTERS_PER_GROUP_FIELD: &str =
    "placement.spec.decisionStrategy.groupStrategy.clustersPerDecisionGroup";

impl Strategy {
    pub fn parse(s: &RolloutStrategy) -> Result<Strategy, RolloutError> {
        match s.type_.as_str() {
            "All" => {
                let config = s.all.as_ref().map(|a| &a.rollout_config);
                let deadline = config.map_or("", |c| c.progress_deadline.as_str());
                Ok(Strategy::All {
                    progress_deadline: parse_timeout(deadline, ALL_DEADLINE_FIELD)?,
                })
            }
            "Progressive" => {
                let p = s.progressive.clone().unwrap_or_default();
                Ok(Strategy::Progressive {
                    limits: parse_limits(&p.rollout_config, &PROGRESSIVE_FIELDS)?,
                    mandatory: p.mandatory_decision_groups.iter().map(Into::into).collect(),
                    max_concurrency: parse_threshold(
                        p.max_concurrency.as_ref(),
                        MAX_CONCURRENCY_FIELD,
                    )?,
                })
            }
            "ProgressivePerGroup" => {
                let p = s.progressive_per_group.clone().unwrap_or_default();
                Ok(Strategy::ProgressivePerGroup {
                    limits: parse_limits(&p.rollout_config, &PER_GROUP_FIELDS)?,
                    mandatory: p.mandatory_decision_groups.iter().map(Into::into).collect(),
                })
            }
            other => Err(RolloutError::UnknownType(other.to_owned())),
        }
    }

    /// [`Strategy::parse`] with ocm's add-on manager defaulting: a Progressive strategy without
    /// `maxConcurrency` (unset, `0` or `""`) takes the placement's `clustersPerDecisionGroup`.
    pub fn parse_for_placement(
        s: &RolloutStrategy,
        clusters_per_decision_group: Option<&IntOrString>,
    ) -> Result<Strategy, RolloutError> {
        let unset = s.type_ == "Progressive"
            && s.progressive
                .as_ref()
                .and_then(|p| p.max_concurrency.as_ref())
                .is_none_or(|m| match m {
                    IntOrString::Int(n) => *n == 0,
                    IntOrString::String(v) => v.is_empty(),
                });
        if !unset {
            return Strategy::parse(s);
        }
        // Replaced before parsing, as ocm's graph does: `""` is no error then.
        let mut s = s.clone();
        if let Some(p) = s.progressive.as_mut() {
            p.max_concurrency = None;
        }
        let mut strategy = Strategy::parse(&s)?;
        if let Strategy::Progressive {
            max_concurrency, ..
        } = &mut strategy
        {
            *max_concurrency =
                parse_threshold(clusters_per_decision_group, CLUSTERS_PER_GROUP_FIELD)?;
        }
        Ok(strategy)
    }
}

/// Why a rollout strategy is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RolloutError {
    #[error("rolloutStrategy.type {0:?} is not one of All, Progressive, ProgressivePerGroup")]
    UnknownType(String),
    #[error("{field} {value:?} is not a valid duration: {reason}")]
    InvalidDuration {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("{field} {value:?} is not a count or a percentage: {reason}")]
    InvalidThreshold {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

fn parse_limits(c: &RolloutConfig, fields: &Fields) -> Result<Limits, RolloutError> {
    let min_success_time = if c.min_success_time.is_empty() {
        Duration::ZERO
    } else {
        go_duration(&c.min_success_time)
            .map_err(|reason| RolloutError::InvalidDuration {
                field: fields.min_success_time,
                value: c.min_success_time.clone(),
                reason,
            })?
            .try_into()
            .unwrap_or(Duration::ZERO)
    };
    Ok(Limits {
        min_success_time,
        progress_deadline: parse_timeout(&c.progress_deadline, fields.progress_deadline)?,
        max_failures: parse_threshold(c.max_failures.as_ref(), fields.max_failures)?,
    })
}

/// Upstream's `parseTimeout`: `None` / `""` wait forever, else the regex gate, then a Go
/// duration.
fn parse_timeout(value: &str, field: &'static str) -> Result<Option<Duration>, RolloutError> {
    if value == "None" || value.is_empty() {
        return Ok(None);
    }
    let err = |reason| RolloutError::InvalidDuration {
        field,
        value: value.to_owned(),
        reason,
    };
    if !timeout_pattern_matches(value) {
        return Err(err("want None or a duration such as 90s, 10m or 2h"));
    }
    let d = go_duration(value).map_err(err)?;
    // The regex makes it non-negative; exactly Go's max means "None" there too.
    let d = Duration::try_from(d).map_err(|_| err("negative"))?;
    Ok((d != GO_MAX_DURATION).then_some(d))
}

/// Go's `regexp.MatchString("^(([0-9])+[h|m|s])|None$", s)`: digits then one of `h|ms` at the
/// start, or `None` at the end.
fn timeout_pattern_matches(s: &str) -> bool {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let unit = s.as_bytes().get(digits);
    (digits > 0 && matches!(unit, Some(b'h' | b'm' | b's' | b'|'))) || s.ends_with("None")
}

/// Go's `time.ParseDuration`, in signed nanoseconds; `Err` carries upstream's message.
fn go_duration(orig: &str) -> Result<SignedDuration, &'static str> {
    const INVALID: &str = "invalid duration";
    const LIMIT: u64 = 1 << 63;
    let mut s = orig.as_bytes();
    let mut neg = false;
    if let Some((&c, rest)) = s.split_first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = rest;
    }
    if s == b"0" {
        return Ok(SignedDuration::ZERO);
    }
    if s.is_empty() {
        return Err(INVALID);
    }
    let mut total: u64 = 0;
    while let Some(&first) = s.first() {
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(INVALID);
        }
        // Integer part; overflow is an error.
        let int_len = s.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &s[..int_len] {
            if v > LIMIT / 10 {
                return Err(INVALID);
            }
            v = v * 10 + u64::from(c - b'0');
            if v > LIMIT {
                return Err(INVALID);
            }
        }
        s = &s[int_len..];
        // Fraction; overflow only stops accumulating precision.
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let frac_len = s.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &s[..frac_len] {
                if overflow {
                    continue;
                }
                if f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = frac_len > 0;
            s = &s[frac_len..];
        }
        if int_len == 0 && !post {
            return Err(INVALID);
        }
        let unit_len = s
            .iter()
            .take_while(|&&c| !(c == b'.' || c.is_ascii_digit()))
            .count();
        if unit_len == 0 {
            return Err("missing unit in duration");
        }
        let unit: u64 = match &s[..unit_len] {
            b"ns" => 1,
            // us, µs (U+00B5) and μs (U+03BC).
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return Err("unknown unit in duration"),
        };
        s = &s[unit_len..];
        if v > LIMIT / unit {
            return Err(INVALID);
        }
        v *= unit;
        if f > 0 {
            // Float as Go does: nanosecond-accurate for fractions of hours.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(INVALID);
            }
        }
        total += v;
        if total > LIMIT {
            return Err(INVALID);
        }
    }
    let nanos = if neg {
        // -(1 << 63) is exactly i64::MIN.
        0i64.wrapping_sub_unsigned(total)
    } else {
        i64::try_from(total).map_err(|_| INVALID)?
    };
    Ok(SignedDuration::from_nanos(nanos))
}

/// Upstream's `parseRolloutSize`: an int, or a string `<float>%`.
fn parse_threshold(
    value: Option<&IntOrString>,
    field: &'static str,
) -> Result<Threshold, RolloutError> {
    let s = match value {
        None => return Ok(Threshold::default()),
        Some(IntOrString::Int(n)) => return Ok(Threshold::Count(*n)),
        Some(IntOrString::String(s)) => s,
    };
    let err = |reason| RolloutError::InvalidThreshold {
        field,
        value: s.clone(),
        reason,
    };
    let number = s
        .strip_suffix('%')
        .ok_or_else(|| err("string is not a percentage"))?;
    go_float(number)
        .map(Threshold::Percent)
        .ok_or_else(|| err("not a number before %"))
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal syntax: out-of-range values and a signed `nan`
/// are errors there, unlike in Rust.
fn go_float(s: &str) -> Option<f64> {
    let f = s.parse::<f64>().ok()?;
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    let range_error = f.is_infinite() && !unsigned.starts_with("inf");
    let signed_nan = f.is_nan() && unsigned.len() != lower.len();
    (!range_error && !signed_nan).then_some(f)
}

// ---------------------------------------------------------------------------------------------
// The decision
// ---------------------------------------------------------------------------------------------

/// Which clusters may move to the new rendering now. `existing`: the statuses of clusters that
/// already have something (the caller marks a cluster ToApply when its work is not the current
/// rendering, else Progressing/Succeeded/Failed from its MCA's Progressing condition and its
/// lastTransitionTime); clusters of `groups` missing from `existing` are ToApply.
pub fn rollout(
    strategy: &Strategy,
    groups: &Groups,
    existing: &[ClusterStatus],
    now: Timestamp,
) -> RolloutResult {
    let all = groups.all();
    let all_clusters = all.clusters();
    let (current, removed): (Vec<_>, Vec<_>) = existing
        .iter()
        .cloned()
        .partition(|s| all_clusters.contains(s.cluster.as_str()));
    let mut result = match strategy {
        Strategy::All { progress_deadline } => {
            let n = all_clusters.len();
            let clock = Clock {
                now,
                min_success_time: Duration::ZERO,
                deadline: *progress_deadline,
            };
            per_cluster(&all, n, n, &clock, current)
        }
        Strategy::Progressive {
            limits,
            mandatory,
            max_concurrency,
        } => {
            let clock = Clock::new(limits, now);
            let max_failures = limits.max_failures.of(all_clusters.len(), 0);
            match mandatory_first(groups, mandatory, &clock, &current) {
                Some(result) => result,
                None => {
                    let rest = groups.subset(mandatory, false);
                    let n = rest.clusters().len();
                    let size = max_concurrency.of(n, n);
                    per_cluster(&rest, size, max_failures, &clock, current)
                }
            }
        }
        Strategy::ProgressivePerGroup { limits, mandatory } => {
            let clock = Clock::new(limits, now);
            match mandatory_first(groups, mandatory, &clock, &current) {
                Some(result) => result,
                None => {
                    let rest = groups.subset(mandatory, false);
                    per_group(&rest, limits.max_failures, &clock, &current)
                }
            }
        }
    };
    result.removed = removed;
    result
}

/// The mandatory groups' pass, tolerating no failure; `Some` when the rest has to wait.
fn mandatory_first(
    groups: &Groups,
    mandatory: &[GroupSelector],
    clock: &Clock,
    current: &[ClusterStatus],
) -> Option<RolloutResult> {
    let selected = groups.subset(mandatory, true);
    if selected.groups.is_empty() {
        return None;
    }
    // Only the mandatory groups' own clusters: upstream passes every current status here, so
    // one timed-out cluster in a later group would hold the mandatory pass forever.
    let members = selected.clusters();
    let own: Vec<ClusterStatus> = current
        .iter()
        .filter(|s| members.contains(s.cluster.as_str()))
        .cloned()
        .collect();
    let held = per_group(&selected, Threshold::Count(0), clock, &own);
    if held.to_rollout.is_empty() && held.timed_out.is_empty() {
        return None;
    }
    // Holding: upstream's result (with the other in-flight clusters and their rechecks).
    Some(per_group(&selected, Threshold::Count(0), clock, current))
}

/// The time-dependent part of a strategy.
struct Clock {
    now: Timestamp,
    min_success_time: Duration,
    deadline: Option<Duration>,
}

impl Clock {
    fn new(limits: &Limits, now: Timestamp) -> Clock {
        Clock {
            now,
            min_success_time: limits.min_success_time,
            deadline: limits.progress_deadline,
        }
    }

    /// Upstream's `calculateRecheckTime`: `start + d`, from now without a start.
    fn recheck_time(&self, start: Option<Timestamp>, d: Option<Duration>) -> Recheck {
        let Some(d) = d.filter(|d| *d != GO_MAX_DURATION) else {
            return Recheck::Never;
        };
        SignedDuration::try_from(d)
            .ok()
            .and_then(|d| start.unwrap_or(self.now).checked_add(d).ok())
            .map_or(Recheck::OutOfRange, Recheck::At)
    }

    /// Upstream's `determineRolloutStatus`: sorts `status` into `rollout` or `timed_out` and
    /// returns its (possibly now TimeOut) status.
    fn determine(
        &self,
        mut status: ClusterStatus,
        rollout: &mut Vec<ClusterStatus>,
        timed_out: &mut Vec<ClusterStatus>,
    ) -> Status {
        match status.status {
            Status::ToApply => rollout.push(status.clone()),
            // Still soaking: keep it in the rollout until minSuccessTime has passed.
            Status::Succeeded => {
                match self.recheck_time(status.last_transition, Some(self.min_success_time)) {
                    Recheck::Never => {}
                    Recheck::At(t) => {
                        if self.now < t {
                            status.recheck_at = Some(t);
                            rollout.push(status.clone());
                        }
                    }
                    Recheck::OutOfRange => {
                        status.recheck_at = None;
                        rollout.push(status.clone());
                    }
                }
            }
            Status::TimeOut | Status::Skip => {}
            Status::Progressing | Status::Failed => {
                match self.recheck_time(status.last_transition, self.deadline) {
                    Recheck::At(t) if self.now >= t => {
                        status.recheck_at = Some(t);
                        status.status = Status::TimeOut;
                        timed_out.push(status.clone());
                    }
                    Recheck::At(t) => {
                        status.recheck_at = Some(t);
                        rollout.push(status.clone());
                    }
                    Recheck::Never | Recheck::OutOfRange => {
                        status.recheck_at = None;
                        rollout.push(status.clone());
                    }
                }
            }
        }
        status.status
    }

    /// Upstream's `minRecheckAfter`: the nearest future recheck time of `rollout`.
    fn recheck_after(&self, rollout: &[ClusterStatus]) -> Option<Duration> {
        rollout
            .iter()
            .filter_map(|s| s.recheck_at)
            .filter_map(|t| Duration::try_from(t.duration_since(self.now)).ok())
            .filter(|d| !d.is_zero())
            .min()
    }

    fn result(
        &self,
        to_rollout: Vec<ClusterStatus>,
        timed_out: Vec<ClusterStatus>,
        max_failure_breach: bool,
    ) -> RolloutResult {
        RolloutResult {
            recheck_after: self.recheck_after(&to_rollout),
            to_rollout,
            timed_out,
            removed: Vec::new(),
            max_failure_breach,
        }
    }
}

/// A deadline or soak end.
enum Recheck {
    /// No deadline / soak (upstream's nil).
    Never,
    At(Timestamp),
    /// Past jiff's range: never reached.
    OutOfRange,
}

/// Upstream's `progressivePerCluster`: existing statuses by cluster name first, then new
/// clusters by name, until `rollout_size` or more than `max_failures` Failed/TimeOut.
fn per_cluster(
    subset: &Subset<'_>,
    rollout_size: usize,
    max_failures: usize,
    clock: &Clock,
    mut existing: Vec<ClusterStatus>,
) -> RolloutResult {
    let (mut rollout, mut timed_out) = (Vec::new(), Vec::new());
    let mut seen = BTreeSet::new();
    let mut failures = 0;
    let mut breach = false;
    existing.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    for status in existing {
        if status.cluster.is_empty() {
            continue;
        }
        seen.insert(status.cluster.clone());
        // After a breach only clusters that already have the rendering are followed.
        let status = if !breach || status.status != Status::ToApply {
            clock.determine(status, &mut rollout, &mut timed_out)
        } else {
            status.status
        };
        if matches!(status, Status::TimeOut | Status::Failed) {
            failures += 1;
            breach = failures > max_failures;
        }
        if rollout.len() >= rollout_size {
            return clock.result(rollout, timed_out, breach);
        }
    }
    if breach {
        return clock.result(rollout, timed_out, breach);
    }
    for cluster in subset.clusters() {
        if seen.contains(cluster) {
            continue;
        }
        rollout.push(ClusterStatus {
            cluster: cluster.to_owned(),
            group: subset.group_of(cluster).cloned(),
            status: Status::ToApply,
            last_transition: None,
            recheck_at: None,
        });
        if rollout.len() >= rollout_size {
            break;
        }
    }
    clock.result(rollout, timed_out, false)
}

/// Upstream's `progressivePerGroup`: every existing status is followed, then the groups in
/// order until one still has clusters to roll out or breaches `max_failures` (of its size).
fn per_group(
    subset: &Subset<'_>,
    max_failures: Threshold,
    clock: &Clock,
    existing: &[ClusterStatus],
) -> RolloutResult {
    let (mut rollout, mut timed_out) = (Vec::new(), Vec::new());
    let mut known = BTreeMap::new();
    for status in existing {
        // ToApply is reconsidered group by group below.
        if status.cluster.is_empty() || status.status == Status::ToApply {
            continue;
        }
        let s = clock.determine(status.clone(), &mut rollout, &mut timed_out);
        known.insert(status.cluster.as_str(), s);
    }
    let mut total_failures = 0;
    let mut breach = false;
    for (key, clusters) in &subset.groups {
        let max_group_failures = max_failures.of(clusters.len(), 0);
        let mut group_failures = 0;
        for cluster in *clusters {
            if let Some(status) = known.get(cluster.as_str()) {
                if matches!(status, Status::TimeOut | Status::Failed) {
                    group_failures += 1;
                    breach = group_failures > max_group_failures;
                }
                continue;
            }
            rollout.push(ClusterStatus {
                cluster: cluster.clone(),
                group: Some((*key).clone()),
                status: Status::ToApply,
                last_transition: None,
                recheck_at: None,
            });
        }
        total_failures += group_failures;
        if rollout.len() > total_failures || breach {
            return clock.result(rollout, timed_out, breach);
        }
    }
    clock.result(rollout, timed_out, breach)
}

// ---------------------------------------------------------------------------------------------
// Install progression
// ---------------------------------------------------------------------------------------------

/// Counts for a placement's install progression, and upstream's Progressing condition for
/// ClusterManagementAddOn.status.installProgressions[].conditions (ocm
/// `cma_progressing_reconciler.go` `setAddOnInstallProgressionsAndLastApplied`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Add-ons in `to_rollout`.
    pub progressing: usize,
    /// Succeeded add-ons not in `to_rollout` (soak time over).
    pub succeeded: usize,
    /// Failed add-ons not in `to_rollout` (past the deadline).
    pub failed: usize,
    /// `timed_out.len()`.
    pub timed_out: usize,
    /// Clusters the placement selects.
    pub total: usize,
    /// Selected clusters whose configuration comes from this placement.
    pub configured: usize,
}

impl Progress {
    /// ocm's graph counters over one placement: `existing` are the add-ons (statuses) of its
    /// clusters (others are ignored), `result` its rollout; every add-on is assumed to carry the
    /// placement's configuration (no per-add-on overrides).
    pub fn tally(
        groups: &Groups,
        existing: &[ClusterStatus],
        result: &RolloutResult,
        configured: usize,
    ) -> Progress {
        let selected = groups.clusters();
        let in_rollout: BTreeSet<&str> = result
            .to_rollout
            .iter()
            .map(|s| s.cluster.as_str())
            .collect();
        let mut seen = BTreeSet::new();
        let mut progress = Progress {
            timed_out: result.timed_out.len(),
            total: selected.len(),
            configured,
            ..Progress::default()
        };
        for status in existing {
            let cluster = status.cluster.as_str();
            if !selected.contains(cluster) || !seen.insert(cluster) {
                continue;
            }
            if in_rollout.contains(cluster) {
                progress.progressing += 1;
            } else if status.status == Status::Succeeded {
                progress.succeeded += 1;
            } else if status.status == Status::Failed {
                progress.failed += 1;
            }
        }
        progress
    }

    /// Done: every configured add-on succeeded (0/0 is not done: it could start the next
    /// group before anything is applied).
    pub fn completed(&self) -> bool {
        !((self.configured == 0 && self.succeeded == 0) || self.succeeded != self.configured)
    }

    /// The Progressing condition's status, reason and message.
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        let Progress {
            progressing,
            succeeded,
            failed,
            timed_out,
            total,
            configured,
        } = *self;
        if self.completed() {
            (
                "False",
                addon_condition::reason::COMPLETED,
                format!(
                    "selected clusters {total}. configured addons {succeeded}/{configured} \
                     completed with no errors, {failed} failed {timed_out} timeout."
                ),
            )
        } else {
            (
                "True",
                addon_condition::reason::PROGRESSING,
                format!(
                    "selected clusters {total}. configured addons {}/{configured} \
                     progressing..., {failed} failed {timed_out} timeout.",
                    progressing + succeeded
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use ocm_api::addon::v1alpha1::{RolloutAll, RolloutProgressive, RolloutProgressivePerGroup};
    use ocm_api::cluster::v1beta1::{
        ClusterDecision, PlacementDecisionFields, PlacementDecisionStatus,
    };

    use super::Status::{Failed, Progressing, Skip, Succeeded, TimeOut, ToApply};
    use super::*;

    /// Upstream's fakeTime, 2022-01-01T00:00:00Z: every test runs "now".
    const T0: i64 = 1_640_995_200;

    fn at(offset_secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + offset_secs).unwrap()
    }

    fn now() -> Timestamp {
        at(0)
    }

    fn k(index: i32, name: &str) -> GroupKey {
        GroupKey::new(index, name)
    }

    /// upstream's `{GroupName: "group1", GroupIndex: 0}`
    fn g1() -> Option<GroupKey> {
        Some(k(0, "group1"))
    }

    /// An unnamed group.
    fn gi(index: i32) -> Option<GroupKey> {
        Some(k(index, ""))
    }

    fn name(n: u32) -> String {
        format!("cluster{n}")
    }

    /// Groups from `(index, name, cluster numbers)`.
    fn groups(spec: &[(i32, &str, &[u32])]) -> Groups {
        let mut groups = Groups::default();
        for (index, group, clusters) in spec {
            groups.insert_group(k(*index, group));
            for n in *clusters {
                groups.insert(k(*index, group), name(*n));
            }
        }
        groups
    }

    /// ToApply without times (a new cluster, or upstream's `waiting` workload).
    fn t(n: u32, group: Option<GroupKey>) -> ClusterStatus {
        ClusterStatus {
            cluster: name(n),
            group,
            status: ToApply,
            last_transition: None,
            recheck_at: None,
        }
    }

    /// An existing status whose last transition was `ltt` seconds from now.
    fn s(n: u32, group: Option<GroupKey>, status: Status, ltt: i64) -> ClusterStatus {
        ClusterStatus {
            status,
            last_transition: Some(at(ltt)),
            ..t(n, group)
        }
    }

    /// Like [`s`], rechecked at `recheck` seconds from now.
    fn r(n: u32, group: Option<GroupKey>, status: Status, ltt: i64, recheck: i64) -> ClusterStatus {
        ClusterStatus {
            recheck_at: Some(at(recheck)),
            ..s(n, group, status, ltt)
        }
    }

    fn res(
        to_rollout: Vec<ClusterStatus>,
        timed_out: Vec<ClusterStatus>,
        removed: Vec<ClusterStatus>,
        max_failure_breach: bool,
        recheck_after_secs: Option<u64>,
    ) -> RolloutResult {
        RolloutResult {
            to_rollout,
            timed_out,
            removed,
            max_failure_breach,
            recheck_after: recheck_after_secs.map(Duration::from_secs),
        }
    }

    fn int(n: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(n))
    }

    fn pct(v: &str) -> Option<IntOrString> {
        Some(IntOrString::String(v.to_owned()))
    }

    fn cfg(deadline: &str, max_failures: Option<IntOrString>, min_success: &str) -> RolloutConfig {
        RolloutConfig {
            min_success_time: min_success.to_owned(),
            progress_deadline: deadline.to_owned(),
            max_failures,
        }
    }

    fn by_name(name: &str) -> MandatoryDecisionGroup {
        MandatoryDecisionGroup {
            group_name: name.to_owned(),
            group_index: 0,
        }
    }

    fn by_index(index: i32) -> MandatoryDecisionGroup {
        MandatoryDecisionGroup {
            group_name: String::new(),
            group_index: index,
        }
    }

    fn all(deadline: &str) -> RolloutStrategy {
        RolloutStrategy {
            type_: "All".into(),
            all: Some(RolloutAll {
                rollout_config: cfg(deadline, None, ""),
            }),
            ..RolloutStrategy::default()
        }
    }

    fn prog(
        config: RolloutConfig,
        max_concurrency: Option<IntOrString>,
        mandatory: &[MandatoryDecisionGroup],
    ) -> RolloutStrategy {
        RolloutStrategy {
            type_: "Progressive".into(),
            progressive: Some(RolloutProgressive {
                rollout_config: config,
                mandatory_decision_groups: mandatory.to_vec(),
                max_concurrency,
            }),
            ..RolloutStrategy::default()
        }
    }

    fn ppg(config: RolloutConfig, mandatory: &[MandatoryDecisionGroup]) -> RolloutStrategy {
        RolloutStrategy {
            type_: "ProgressivePerGroup".into(),
            progressive_per_group: Some(RolloutProgressivePerGroup {
                rollout_config: config,
                mandatory_decision_groups: mandatory.to_vec(),
            }),
            ..RolloutStrategy::default()
        }
    }

    struct Case {
        name: &'static str,
        strategy: RolloutStrategy,
        groups: Groups,
        existing: Vec<ClusterStatus>,
        want: RolloutResult,
    }

    fn check(cases: Vec<Case>) {
        for c in cases {
            let strategy =
                Strategy::parse(&c.strategy).unwrap_or_else(|e| panic!("{}: {e}", c.name));
            let got = rollout(&strategy, &c.groups, &c.existing, now());
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    /// group1 (index 0): 1, 2, 3; index 1: 4, 5, 6.
    fn g_3_3() -> Groups {
        groups(&[(0, "group1", &[1, 2, 3]), (1, "", &[4, 5, 6])])
    }

    /// [`g_3_3`] and index 2: 7, 8, 9.
    fn g_3_3_3() -> Groups {
        groups(&[
            (0, "group1", &[1, 2, 3]),
            (1, "", &[4, 5, 6]),
            (2, "", &[7, 8, 9]),
        ])
    }

    /// group1 (index 0): 1, 2; index 1: 3, 4, 5, 6.
    fn g_2_4() -> Groups {
        groups(&[(0, "group1", &[1, 2]), (1, "", &[3, 4, 5, 6])])
    }

    /// group1 (index 0): 1, 2; index 1: 3, 4; index 2: 5, 6.
    fn g_2_2_2() -> Groups {
        groups(&[(0, "group1", &[1, 2]), (1, "", &[3, 4]), (2, "", &[5, 6])])
    }

    /// upstream's "test rollout all with timeout 90s" workloads.
    fn all_existing() -> Vec<ClusterStatus> {
        vec![
            s(1, g1(), Succeeded, -60),
            s(2, g1(), Failed, -120),
            s(3, gi(1), Progressing, -120),
            s(4, gi(1), Failed, -60),
            s(5, gi(1), Progressing, -60),
        ]
    }

    /// Progressing, ToApply ×8 and a removed cluster10 (upstream's ToApply cases).
    fn to_apply_existing() -> Vec<ClusterStatus> {
        vec![
            s(1, g1(), Progressing, -60),
            t(2, g1()),
            t(3, g1()),
            t(4, gi(1)),
            t(5, gi(1)),
            t(6, gi(1)),
            t(7, gi(2)),
            t(8, gi(2)),
            t(9, gi(2)),
            t(10, gi(2)),
        ]
    }

    /// cluster1 Succeeded 60s ago, cluster2 Failed 120s ago, cluster3 `third`.
    fn first_group(third: Status, third_ltt: i64) -> Vec<ClusterStatus> {
        vec![
            s(1, g1(), Succeeded, -60),
            s(2, g1(), Failed, -120),
            s(3, g1(), third, third_ltt),
        ]
    }

    #[test]
    fn rollout_all() {
        check(vec![
            Case {
                name: "all, 90s, nothing applied yet",
                strategy: all("90s"),
                groups: g_2_4(),
                existing: vec![],
                want: res(
                    vec![
                        t(1, g1()),
                        t(2, g1()),
                        t(3, gi(1)),
                        t(4, gi(1)),
                        t(5, gi(1)),
                        t(6, gi(1)),
                    ],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "all, 90s: past the deadline times out, the rest keeps going",
                strategy: all("90s"),
                groups: g_2_4(),
                existing: all_existing(),
                want: res(
                    vec![
                        r(4, gi(1), Failed, -60, 30),
                        r(5, gi(1), Progressing, -60, 30),
                        t(6, gi(1)),
                    ],
                    vec![
                        r(2, g1(), TimeOut, -120, -30),
                        r(3, gi(1), TimeOut, -120, -30),
                    ],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "all, 90s, cluster7 added",
                strategy: all("90s"),
                groups: groups(&[(0, "group1", &[1, 2, 7]), (1, "", &[3, 4, 5, 6])]),
                existing: all_existing(),
                want: res(
                    vec![
                        r(4, gi(1), Failed, -60, 30),
                        r(5, gi(1), Progressing, -60, 30),
                        t(6, gi(1)),
                        t(7, g1()),
                    ],
                    vec![
                        r(2, g1(), TimeOut, -120, -30),
                        r(3, gi(1), TimeOut, -120, -30),
                    ],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "all, 90s, clusters 2 and 4 removed (in input order)",
                strategy: all("90s"),
                groups: groups(&[(0, "group1", &[1]), (1, "", &[3, 5])]),
                existing: all_existing(),
                want: res(
                    vec![r(5, gi(1), Progressing, -60, 30)],
                    vec![r(3, gi(1), TimeOut, -120, -30)],
                    vec![s(2, g1(), Failed, -120), s(4, gi(1), Failed, -60)],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "all ignores minSuccessTime and maxFailures",
                strategy: RolloutStrategy {
                    type_: "All".into(),
                    all: Some(RolloutAll {
                        rollout_config: cfg("", int(0), "1h"),
                    }),
                    ..RolloutStrategy::default()
                },
                groups: groups(&[(0, "", &[1, 2, 3])]),
                existing: vec![s(1, gi(0), Succeeded, -10), s(2, gi(0), Failed, -10)],
                want: res(
                    vec![s(2, gi(0), Failed, -10), t(3, gi(0))],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "all: Skip is left alone, a nameless status is removed",
                strategy: all(""),
                groups: groups(&[(0, "", &[1, 2])]),
                existing: vec![t(0, None), s(1, gi(0), Skip, -10)]
                    .into_iter()
                    .map(|mut s| {
                        if s.cluster == "cluster0" {
                            s.cluster = String::new();
                        }
                        s
                    })
                    .collect(),
                want: res(
                    vec![t(2, gi(0))],
                    vec![],
                    vec![ClusterStatus {
                        cluster: String::new(),
                        ..t(0, None)
                    }],
                    false,
                    None,
                ),
            },
            Case {
                name: "all, no clusters selected: everything existing is removed",
                strategy: all("None"),
                groups: groups(&[(0, "", &[])]),
                existing: vec![s(1, gi(0), Progressing, -10)],
                want: res(
                    vec![],
                    vec![],
                    vec![s(1, gi(0), Progressing, -10)],
                    false,
                    None,
                ),
            },
        ]);
    }

    #[test]
    fn rollout_progressive() {
        let c90 = || cfg("90s", None, "");
        check(vec![
            Case {
                name: "maxConcurrency 2, nothing applied yet",
                strategy: prog(c90(), int(2), &[]),
                groups: g_3_3(),
                existing: vec![],
                want: res(vec![t(1, g1()), t(2, g1())], vec![], vec![], false, None),
            },
            Case {
                name: "maxConcurrency 4 over existing ToApply, cluster10 removed",
                strategy: prog(c90(), int(4), &[]),
                groups: g_3_3_3(),
                existing: to_apply_existing(),
                want: res(
                    vec![
                        r(1, g1(), Progressing, -60, 30),
                        t(2, g1()),
                        t(3, g1()),
                        t(4, gi(1)),
                    ],
                    vec![],
                    vec![t(10, gi(2))],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "maxConcurrency unset: all clusters",
                strategy: prog(c90(), None, &[]),
                groups: g_3_3_3(),
                existing: to_apply_existing(),
                want: res(
                    vec![
                        r(1, g1(), Progressing, -60, 30),
                        t(2, g1()),
                        t(3, g1()),
                        t(4, gi(1)),
                        t(5, gi(1)),
                        t(6, gi(1)),
                        t(7, gi(2)),
                        t(8, gi(2)),
                        t(9, gi(2)),
                    ],
                    vec![],
                    vec![t(10, gi(2))],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "maxFailures unset: one timeout breaches",
                strategy: prog(c90(), int(2), &[]),
                groups: g_3_3(),
                existing: first_group(Progressing, -60),
                want: res(
                    vec![r(3, g1(), Progressing, -60, 30)],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    true,
                    Some(30),
                ),
            },
            Case {
                name: "maxFailures 100%, minSuccessTime 60s: soaking cluster1 holds a slot",
                strategy: prog(cfg("90s", pct("100%"), "1m"), int(2), &[]),
                groups: g_3_3(),
                existing: vec![
                    s(1, g1(), Succeeded, -30),
                    s(2, g1(), Failed, -120),
                    s(3, g1(), Progressing, -30),
                ],
                want: res(
                    vec![
                        r(1, g1(), Succeeded, -30, 30),
                        r(3, g1(), Progressing, -30, 60),
                    ],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "mixed soak and deadline: recheck after the nearest",
                strategy: prog(cfg("90s", pct("100%"), "60s"), int(4), &[]),
                groups: groups(&[(0, "group1", &[1, 2, 3, 4])]),
                existing: vec![
                    s(1, g1(), Succeeded, -30),
                    s(2, g1(), Progressing, -60),
                    s(3, g1(), Progressing, -30),
                    s(4, g1(), Succeeded, -120),
                ],
                want: res(
                    vec![
                        r(1, g1(), Succeeded, -30, 30),
                        r(2, g1(), Progressing, -60, 30),
                        r(3, g1(), Progressing, -30, 60),
                    ],
                    vec![],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "maxFailures 1 tolerates one timeout",
                strategy: prog(cfg("90s", int(1), ""), int(2), &[]),
                groups: g_3_3(),
                existing: first_group(Progressing, -60),
                want: res(
                    vec![r(3, g1(), Progressing, -60, 30), t(4, gi(1))],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "deadline 0s times out at once, maxFailures 3",
                strategy: prog(cfg("0s", int(3), ""), int(2), &[]),
                groups: g_3_3(),
                existing: vec![
                    s(1, g1(), Succeeded, -30),
                    s(2, g1(), Progressing, -30),
                    s(3, g1(), Progressing, -30),
                ],
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1))],
                    vec![r(2, g1(), TimeOut, -30, -30), r(3, g1(), TimeOut, -30, -30)],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "mandatory group1 with a timeout: breach",
                strategy: prog(c90(), int(3), &[by_name("group1")]),
                groups: g_3_3(),
                existing: first_group(Progressing, -60),
                want: res(
                    vec![r(3, g1(), Progressing, -60, 30)],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    true,
                    Some(30),
                ),
            },
            Case {
                name: "deadline None, maxConcurrency 50%, maxFailures 100%",
                strategy: prog(cfg("None", pct("100%"), ""), pct("50%"), &[]),
                groups: g_2_4(),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Failed, -120),
                    s(3, gi(1), Progressing, -60),
                ],
                want: res(
                    vec![
                        s(2, g1(), Failed, -120),
                        s(3, gi(1), Progressing, -60),
                        t(4, gi(1)),
                    ],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "deadline None, maxConcurrency 50%, maxFailures 0%",
                strategy: prog(cfg("None", pct("0%"), ""), pct("50%"), &[]),
                groups: g_2_4(),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Failed, -120),
                    s(3, gi(1), Progressing, -60),
                ],
                want: res(
                    vec![s(2, g1(), Failed, -120), s(3, gi(1), Progressing, -60)],
                    vec![],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "mandatory group failed: the rest waits",
                strategy: prog(c90(), int(3), &[by_name("group1")]),
                groups: g_2_2_2(),
                existing: vec![s(1, g1(), Failed, -120), s(2, g1(), Failed, -60)],
                want: res(
                    vec![r(2, g1(), Failed, -60, 30)],
                    vec![r(1, g1(), TimeOut, -120, -30)],
                    vec![],
                    true,
                    Some(30),
                ),
            },
            Case {
                name: "mandatory group succeeded: maxConcurrency over the rest",
                strategy: prog(cfg("", None, ""), int(3), &[by_name("group1")]),
                groups: g_2_2_2(),
                existing: vec![s(1, g1(), Succeeded, -60), s(2, g1(), Succeeded, -120)],
                want: res(
                    vec![t(3, gi(1)), t(4, gi(1)), t(5, gi(2))],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "cluster7 added to the succeeded mandatory group",
                strategy: prog(c90(), int(3), &[by_name("group1")]),
                groups: groups(&[
                    (0, "group1", &[1, 2, 7]),
                    (1, "", &[3, 4, 8]),
                    (2, "", &[5, 6, 9]),
                ]),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Succeeded, -60),
                    s(3, gi(1), Succeeded, -60),
                    s(4, gi(1), Progressing, -60),
                    s(5, gi(2), Progressing, -60),
                ],
                want: res(
                    vec![
                        r(4, gi(1), Progressing, -60, 30),
                        r(5, gi(2), Progressing, -60, 30),
                        t(7, g1()),
                    ],
                    vec![],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "maxFailures 100%, cluster1 removed",
                strategy: prog(cfg("90s", pct("100%"), ""), int(2), &[]),
                groups: groups(&[(0, "group1", &[2, 3]), (1, "", &[4, 5, 6])]),
                existing: first_group(Progressing, -60),
                want: res(
                    vec![r(3, g1(), Progressing, -60, 30), t(4, gi(1))],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![s(1, g1(), Succeeded, -60)],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "failed cluster2 removed from the mandatory group",
                strategy: prog(c90(), int(2), &[by_name("group1")]),
                groups: groups(&[(0, "group1", &[1, 3]), (1, "", &[4, 5, 6])]),
                existing: first_group(Succeeded, -60),
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1))],
                    vec![],
                    vec![s(2, g1(), Failed, -120)],
                    false,
                    None,
                ),
            },
            Case {
                name: "mandatory by index: the whole group at once, whatever maxConcurrency",
                strategy: prog(c90(), int(1), &[by_index(1)]),
                groups: g_3_3_3(),
                existing: vec![],
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "a mandatory group that does not exist is ignored",
                strategy: prog(c90(), int(2), &[by_name("canary")]),
                groups: g_3_3(),
                existing: vec![],
                want: res(vec![t(1, g1()), t(2, g1())], vec![], vec![], false, None),
            },
            Case {
                // Upstream gates on the in-flight cluster1 here (its mandatory pass sees every
                // cluster); an empty mandatory group has nothing to wait for.
                name: "an empty mandatory group does not gate",
                strategy: prog(cfg("", None, ""), int(3), &[by_name("canary")]),
                groups: groups(&[(0, "canary", &[]), (1, "", &[1, 2, 3])]),
                existing: vec![s(1, gi(1), Progressing, -10)],
                want: res(
                    vec![s(1, gi(1), Progressing, -10), t(2, gi(1)), t(3, gi(1))],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "maxConcurrency 33% of 3 rounds up to 1",
                strategy: prog(c90(), pct("33%"), &[]),
                groups: groups(&[(0, "", &[1, 2, 3])]),
                existing: vec![],
                want: res(vec![t(1, gi(0))], vec![], vec![], false, None),
            },
            Case {
                name: "maxConcurrency 34% of 3 rounds up to 2",
                strategy: prog(c90(), pct("34%"), &[]),
                groups: groups(&[(0, "", &[1, 2, 3])]),
                existing: vec![],
                want: res(vec![t(1, gi(0)), t(2, gi(0))], vec![], vec![], false, None),
            },
            Case {
                name: "maxConcurrency 0% falls back to all",
                strategy: prog(c90(), pct("0%"), &[]),
                groups: groups(&[(0, "", &[1, 2, 3])]),
                existing: vec![],
                want: res(
                    vec![t(1, gi(0)), t(2, gi(0)), t(3, gi(0))],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "maxFailures 20% of 6 rounds up to 2: two failures are fine",
                strategy: prog(cfg("None", pct("20%"), ""), int(3), &[]),
                groups: groups(&[(0, "", &[1, 2, 3, 4, 5, 6])]),
                existing: vec![s(1, gi(0), Failed, -10), s(2, gi(0), Failed, -10)],
                want: res(
                    vec![
                        s(1, gi(0), Failed, -10),
                        s(2, gi(0), Failed, -10),
                        t(3, gi(0)),
                    ],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "maxFailures 10% of 6 rounds up to 1: the second failure breaches",
                strategy: prog(cfg("None", pct("10%"), ""), int(3), &[]),
                groups: groups(&[(0, "", &[1, 2, 3, 4, 5, 6])]),
                existing: vec![s(1, gi(0), Failed, -10), s(2, gi(0), Failed, -10)],
                want: res(
                    vec![s(1, gi(0), Failed, -10), s(2, gi(0), Failed, -10)],
                    vec![],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "after a breach, existing ToApply clusters wait (statuses sorted by name)",
                strategy: prog(cfg("None", None, ""), int(3), &[]),
                groups: groups(&[(0, "", &[1, 2, 3])]),
                existing: vec![
                    t(3, gi(0)),
                    s(2, gi(0), Progressing, -5),
                    s(1, gi(0), Failed, -5),
                ],
                want: res(
                    vec![s(1, gi(0), Failed, -5), s(2, gi(0), Progressing, -5)],
                    vec![],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "an existing ToApply keeps its recheck time",
                strategy: prog(cfg("None", None, ""), int(1), &[]),
                groups: groups(&[(0, "", &[1, 2])]),
                existing: vec![ClusterStatus {
                    recheck_at: Some(at(45)),
                    ..t(1, gi(0))
                }],
                want: res(
                    vec![ClusterStatus {
                        recheck_at: Some(at(45)),
                        ..t(1, gi(0))
                    }],
                    vec![],
                    vec![],
                    false,
                    Some(45),
                ),
            },
        ]);
    }

    #[test]
    fn rollout_progressive_per_group() {
        let c90 = || cfg("90s", None, "");
        check(vec![
            Case {
                name: "nothing applied yet: the first group",
                strategy: ppg(c90(), &[]),
                groups: g_3_3(),
                existing: vec![],
                want: res(
                    vec![t(1, g1()), t(2, g1()), t(3, g1())],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "existing ToApply are recomputed per group",
                strategy: ppg(c90(), &[]),
                groups: g_3_3(),
                existing: vec![
                    s(1, g1(), Progressing, -60),
                    t(2, g1()),
                    t(3, g1()),
                    t(4, gi(1)),
                    t(5, gi(1)),
                    t(6, gi(1)),
                ],
                want: res(
                    vec![r(1, g1(), Progressing, -60, 30), t(2, g1()), t(3, g1())],
                    vec![],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "a timeout in the first group breaches maxFailures 0",
                strategy: ppg(c90(), &[]),
                groups: g_3_3(),
                existing: first_group(Progressing, -60),
                want: res(
                    vec![r(3, g1(), Progressing, -60, 30)],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    true,
                    Some(30),
                ),
            },
            Case {
                name: "first group done with a timeout within maxFailures 2: next group",
                strategy: ppg(cfg("90s", int(2), ""), &[]),
                groups: g_3_3_3(),
                existing: first_group(Succeeded, -60),
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "second group succeeded too: third group",
                strategy: ppg(cfg("90s", int(2), ""), &[]),
                groups: g_3_3_3(),
                existing: [
                    first_group(Succeeded, -60),
                    vec![
                        s(4, gi(1), Succeeded, -60),
                        s(5, gi(1), Succeeded, -60),
                        s(6, gi(1), Succeeded, -60),
                    ],
                ]
                .concat(),
                want: res(
                    vec![t(7, gi(2)), t(8, gi(2)), t(9, gi(2))],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "deadline None, a failure in the first group: breach",
                strategy: ppg(cfg("None", None, ""), &[]),
                groups: g_3_3_3(),
                existing: first_group(Succeeded, -60),
                want: res(vec![s(2, g1(), Failed, -120)], vec![], vec![], true, None),
            },
            Case {
                name: "deadline None, one failure within maxFailures 2: next group too",
                strategy: ppg(cfg("None", int(2), ""), &[]),
                groups: g_3_3_3(),
                existing: first_group(Succeeded, -60),
                want: res(
                    vec![
                        s(2, g1(), Failed, -120),
                        t(4, gi(1)),
                        t(5, gi(1)),
                        t(6, gi(1)),
                    ],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "deadline None, two failures over maxFailures 30% (1 of 3): breach",
                strategy: ppg(cfg("None", pct("30%"), ""), &[]),
                groups: g_3_3_3(),
                existing: first_group(Failed, -120),
                want: res(
                    vec![s(2, g1(), Failed, -120), s(3, g1(), Failed, -120)],
                    vec![],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "mandatory group timed out: stop",
                strategy: ppg(c90(), &[by_name("group1")]),
                groups: g_3_3(),
                existing: first_group(Failed, -120),
                want: res(
                    vec![],
                    vec![
                        r(2, g1(), TimeOut, -120, -30),
                        r(3, g1(), TimeOut, -120, -30),
                    ],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "mandatory group tolerates no failure, whatever maxFailures",
                strategy: ppg(cfg("90s", int(2), ""), &[by_name("group1")]),
                groups: g_3_3_3(),
                existing: first_group(Succeeded, -60),
                want: res(
                    vec![],
                    vec![r(2, g1(), TimeOut, -120, -30)],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "mandatory group succeeded: next group",
                strategy: ppg(c90(), &[by_name("group1")]),
                groups: g_3_3_3(),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Succeeded, -60),
                    s(3, g1(), Succeeded, -60),
                ],
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "minSuccessTime: a soaking cluster keeps its group going",
                strategy: ppg(cfg("90s", pct("50%"), "1m"), &[]),
                groups: groups(&[(0, "group1", &[1, 2, 3]), (1, "group2", &[4, 5])]),
                existing: vec![
                    s(1, g1(), Succeeded, -30),
                    s(2, g1(), Succeeded, -120),
                    s(3, g1(), Progressing, -30),
                ],
                want: res(
                    vec![
                        r(1, g1(), Succeeded, -30, 30),
                        r(3, g1(), Progressing, -30, 60),
                    ],
                    vec![],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "minSuccessTime without a last transition soaks from now",
                strategy: ppg(cfg("", None, "2m"), &[]),
                groups: groups(&[(0, "", &[1]), (1, "", &[2])]),
                existing: vec![ClusterStatus {
                    status: Succeeded,
                    ..t(1, gi(0))
                }],
                want: res(
                    vec![ClusterStatus {
                        status: Succeeded,
                        recheck_at: Some(at(120)),
                        ..t(1, gi(0))
                    }],
                    vec![],
                    vec![],
                    false,
                    Some(120),
                ),
            },
            Case {
                name: "cluster3 added to the first group after the rollout started",
                strategy: ppg(c90(), &[]),
                groups: g_3_3(),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Succeeded, -60),
                    s(4, gi(1), Progressing, -60),
                    s(5, gi(1), Progressing, -60),
                ],
                want: res(
                    vec![
                        r(4, gi(1), Progressing, -60, 30),
                        r(5, gi(1), Progressing, -60, 30),
                        t(3, g1()),
                    ],
                    vec![],
                    vec![],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "failed cluster2 removed after the rollout started",
                strategy: ppg(c90(), &[]),
                groups: groups(&[(0, "group1", &[1, 3]), (1, "", &[4, 5, 6])]),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Failed, -60),
                    s(3, g1(), Progressing, -60),
                ],
                want: res(
                    vec![r(3, g1(), Progressing, -60, 30)],
                    vec![],
                    vec![s(2, g1(), Failed, -60)],
                    false,
                    Some(30),
                ),
            },
            Case {
                name: "cluster2 removed while cluster3 timed out within maxFailures 2",
                strategy: ppg(cfg("90s", int(2), ""), &[]),
                groups: groups(&[(0, "group1", &[1, 3]), (1, "", &[4, 5, 6])]),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Failed, -60),
                    s(3, g1(), Progressing, -120),
                ],
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                    vec![r(3, g1(), TimeOut, -120, -30)],
                    vec![s(2, g1(), Failed, -60)],
                    false,
                    None,
                ),
            },
            Case {
                name: "failed cluster2 removed from the mandatory group",
                strategy: ppg(c90(), &[by_name("group1")]),
                groups: groups(&[
                    (0, "group1", &[1, 3]),
                    (1, "", &[4, 5, 6]),
                    (2, "", &[7, 8, 9]),
                ]),
                existing: first_group(Succeeded, -60),
                want: res(
                    vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                    vec![],
                    vec![s(2, g1(), Failed, -120)],
                    false,
                    None,
                ),
            },
            Case {
                // Upstream holds everything here; the mandatory group succeeded, so the rest
                // goes on as it would without mandatory groups (below).
                name: "a timeout outside the mandatory group does not hold the rollout",
                strategy: ppg(c90(), &[by_name("group1")]),
                groups: g_3_3_3(),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Succeeded, -60),
                    s(3, g1(), Succeeded, -60),
                    s(4, gi(1), Progressing, -120),
                ],
                want: res(
                    vec![t(5, gi(1)), t(6, gi(1))],
                    vec![r(4, gi(1), TimeOut, -120, -30)],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "the same without mandatory groups: breach in the second group",
                strategy: ppg(c90(), &[]),
                groups: g_3_3_3(),
                existing: vec![
                    s(1, g1(), Succeeded, -60),
                    s(2, g1(), Succeeded, -60),
                    s(3, g1(), Succeeded, -60),
                    s(4, gi(1), Progressing, -120),
                ],
                want: res(
                    vec![t(5, gi(1)), t(6, gi(1))],
                    vec![r(4, gi(1), TimeOut, -120, -30)],
                    vec![],
                    true,
                    None,
                ),
            },
            Case {
                name: "existing statuses keep their input order",
                strategy: ppg(cfg("None", None, ""), &[]),
                groups: groups(&[(0, "", &[1, 2, 3])]),
                existing: vec![s(3, gi(0), Progressing, -1), s(1, gi(0), Progressing, -1)],
                want: res(
                    vec![
                        s(3, gi(0), Progressing, -1),
                        s(1, gi(0), Progressing, -1),
                        t(2, gi(0)),
                    ],
                    vec![],
                    vec![],
                    false,
                    None,
                ),
            },
            Case {
                name: "all groups done",
                strategy: ppg(c90(), &[]),
                groups: groups(&[(0, "", &[1]), (1, "", &[2])]),
                existing: vec![s(1, gi(0), Succeeded, -60), s(2, gi(1), Succeeded, -60)],
                want: res(vec![], vec![], vec![], false, None),
            },
        ]);
    }

    #[test]
    fn determine_status() {
        // (name, status, last transition, minSuccessTime, deadline, rollout, timed out)
        type Row = (
            &'static str,
            Status,
            Option<i64>,
            Duration,
            Option<Duration>,
            Option<(Status, Option<i64>)>,
            Option<Option<i64>>,
        );
        let min = Duration::from_secs(60);
        let rows: Vec<Row> = vec![
            (
                "ToApply",
                ToApply,
                None,
                Duration::ZERO,
                Some(min),
                Some((ToApply, None)),
                None,
            ),
            ("Skip", Skip, None, Duration::ZERO, Some(min), None, None),
            (
                "Succeeded",
                Succeeded,
                None,
                Duration::ZERO,
                Some(min),
                None,
                None,
            ),
            (
                "Succeeded within minSuccessTime",
                Succeeded,
                None,
                min,
                None,
                Some((Succeeded, Some(60))),
                None,
            ),
            (
                "Succeeded after minSuccessTime",
                Succeeded,
                Some(-120),
                min,
                None,
                None,
                None,
            ),
            (
                "Succeeded, minSuccessTime is Go's max",
                Succeeded,
                None,
                GO_MAX_DURATION,
                None,
                None,
                None,
            ),
            (
                "TimeOut",
                TimeOut,
                None,
                Duration::ZERO,
                Some(min),
                None,
                None,
            ),
            (
                "Progressing within the deadline",
                Progressing,
                Some(-30),
                Duration::ZERO,
                Some(min),
                Some((Progressing, Some(30))),
                None,
            ),
            (
                "Failed at the deadline",
                Failed,
                Some(-60),
                Duration::ZERO,
                Some(min),
                None,
                Some(Some(0)),
            ),
            (
                "Progressing without a deadline",
                Progressing,
                Some(-3600),
                Duration::ZERO,
                None,
                Some((Progressing, None)),
                None,
            ),
            (
                "Progressing without a last transition",
                Progressing,
                None,
                Duration::ZERO,
                Some(min),
                Some((Progressing, Some(60))),
                None,
            ),
        ];
        for (name, status, ltt, min_success_time, deadline, want_rollout, want_timeout) in rows {
            let clock = Clock {
                now: now(),
                min_success_time,
                deadline,
            };
            let input = ClusterStatus {
                status,
                last_transition: ltt.map(at),
                ..t(1, None)
            };
            let (mut rollout, mut timed_out) = (Vec::new(), Vec::new());
            clock.determine(input.clone(), &mut rollout, &mut timed_out);
            let want_rollout: Vec<_> = want_rollout
                .map(|(status, recheck)| ClusterStatus {
                    status,
                    recheck_at: recheck.map(at),
                    ..input.clone()
                })
                .into_iter()
                .collect();
            let want_timeout: Vec<_> = want_timeout
                .map(|recheck| ClusterStatus {
                    status: TimeOut,
                    recheck_at: recheck.map(at),
                    ..input.clone()
                })
                .into_iter()
                .collect();
            assert_eq!((rollout, timed_out), (want_rollout, want_timeout), "{name}");
        }
    }

    #[test]
    fn recheck_after() {
        let clock = Clock {
            now: now(),
            min_success_time: Duration::ZERO,
            deadline: None,
        };
        let rechecked = |n, secs| ClusterStatus {
            recheck_at: Some(at(secs)),
            ..t(n, None)
        };
        let cases: Vec<(&str, Vec<ClusterStatus>, Option<u64>)> = vec![
            ("one in 30s", vec![rechecked(1, 30)], Some(30)),
            (
                "the minimum",
                vec![rechecked(1, 60), rechecked(2, 30), rechecked(3, 60)],
                Some(30),
            ),
            ("none set", vec![t(1, None), t(2, None)], None),
            ("no clusters", vec![], None),
            (
                "only the set ones",
                vec![t(1, None), rechecked(2, 60), t(3, None)],
                Some(60),
            ),
            (
                "past and present ones are ignored",
                vec![rechecked(1, -5), rechecked(2, 0)],
                None,
            ),
        ];
        for (name, rollout, want) in cases {
            assert_eq!(
                clock.recheck_after(&rollout),
                want.map(Duration::from_secs),
                "{name}"
            );
        }
    }

    #[test]
    fn threshold_of() {
        // upstream's TestCalculateRolloutSize (total 100, default 100) and more.
        let cases: Vec<(Threshold, usize, usize, usize)> = vec![
            (Threshold::Count(50), 100, 100, 50),
            (Threshold::Percent(30.0), 100, 100, 30),
            (Threshold::Count(0), 100, 100, 100),
            (Threshold::Count(101), 100, 100, 100),
            (Threshold::Percent(200.0), 100, 100, 100),
            (Threshold::Count(-1), 100, 7, 7),
            (Threshold::Percent(33.0), 3, 0, 1),
            (Threshold::Percent(34.0), 3, 0, 2),
            (Threshold::Percent(0.0), 3, 3, 3),
            (Threshold::Percent(-10.0), 3, 3, 3),
            (Threshold::Percent(0.1), 3, 0, 1),
            (Threshold::Percent(100.0), 0, 0, 0),
            (Threshold::Percent(f64::NAN), 3, 2, 2),
            (Threshold::Percent(f64::INFINITY), 3, 2, 2),
            (Threshold::Count(3), 3, 0, 3),
        ];
        for (threshold, total, default, want) in cases {
            assert_eq!(
                threshold.of(total, default),
                want,
                "{threshold:?} of {total}"
            );
        }
    }

    #[test]
    fn timeouts() {
        let h = |n: u64| Some(Duration::from_secs(n * 3600));
        let cases: Vec<(&str, Result<Option<Duration>, &str>)> = vec![
            ("2h", Ok(h(2))),
            ("30m", Ok(Some(Duration::from_secs(1800)))),
            ("10s", Ok(Some(Duration::from_secs(10)))),
            ("90s", Ok(Some(Duration::from_secs(90)))),
            ("1h30m", Ok(Some(Duration::from_secs(5400)))),
            ("0s", Ok(Some(Duration::ZERO))),
            ("None", Ok(None)),
            ("", Ok(None)),
            // The regex only looks at the start: Go then parses the rest.
            ("10ms", Ok(Some(Duration::from_millis(10)))),
            ("1h0.5m", Ok(Some(Duration::from_secs(3630)))),
            ("2562047h47m16.854775807s", Ok(None)),
            ("2d", Err("want None or a duration such as 90s, 10m or 2h")),
            ("0", Err("want None or a duration such as 90s, 10m or 2h")),
            (
                "2d0s",
                Err("want None or a duration such as 90s, 10m or 2h"),
            ),
            ("10g", Err("want None or a duration such as 90s, 10m or 2h")),
            (
                "1.5h",
                Err("want None or a duration such as 90s, 10m or 2h"),
            ),
            ("-1s", Err("want None or a duration such as 90s, 10m or 2h")),
            (" 1s", Err("want None or a duration such as 90s, 10m or 2h")),
            ("1h-", Err("unknown unit in duration")),
            ("1|", Err("unknown unit in duration")),
            ("xNone", Err("invalid duration")),
            ("1h2", Err("missing unit in duration")),
            ("9999999999h", Err("invalid duration")),
        ];
        for (value, want) in cases {
            let got = parse_timeout(value, "f");
            let want = want.map_err(|reason| RolloutError::InvalidDuration {
                field: "f",
                value: value.to_owned(),
                reason,
            });
            assert_eq!(got, want, "{value:?}");
        }
    }

    #[test]
    fn go_durations() {
        let cases: Vec<(&str, Result<i64, &str>)> = vec![
            ("0", Ok(0)),
            ("-0", Ok(0)),
            ("+5s", Ok(5_000_000_000)),
            ("-1m", Ok(-60_000_000_000)),
            ("1.5h", Ok(5_400_000_000_000)),
            (".5s", Ok(500_000_000)),
            ("5.s", Ok(5_000_000_000)),
            ("1h1m1s1ms1us1ns", Ok(3_661_001_001_001)),
            ("1µs", Ok(1_000)),
            ("1μs", Ok(1_000)),
            ("0.000000001s", Ok(1)),
            ("2562047h47m16.854775807s", Ok(i64::MAX)),
            ("-2562047h47m16.854775808s", Ok(i64::MIN)),
            ("2562047h47m16.854775808s", Err("invalid duration")),
            ("", Err("invalid duration")),
            ("-", Err("invalid duration")),
            (".s", Err("invalid duration")),
            ("s", Err("invalid duration")),
            ("1", Err("missing unit in duration")),
            ("1d", Err("unknown unit in duration")),
            ("1 s", Err("unknown unit in duration")),
            ("99999999999999999999ns", Err("invalid duration")),
        ];
        for (value, want) in cases {
            assert_eq!(
                go_duration(value),
                want.map(SignedDuration::from_nanos),
                "{value:?}"
            );
        }
    }

    #[test]
    fn thresholds() {
        let cases: Vec<(Option<IntOrString>, Result<Threshold, &str>)> = vec![
            (None, Ok(Threshold::Count(0))),
            (int(3), Ok(Threshold::Count(3))),
            (int(-3), Ok(Threshold::Count(-3))),
            (pct("50%"), Ok(Threshold::Percent(50.0))),
            (pct("12.5%"), Ok(Threshold::Percent(12.5))),
            (pct("1e1%"), Ok(Threshold::Percent(10.0))),
            (pct("200%"), Ok(Threshold::Percent(200.0))),
            (pct("inf%"), Ok(Threshold::Percent(f64::INFINITY))),
            (pct("5"), Err("string is not a percentage")),
            (pct(""), Err("string is not a percentage")),
            (pct("invalid"), Err("string is not a percentage")),
            (pct("%"), Err("not a number before %")),
            (pct("50%%"), Err("not a number before %")),
            (pct("a%"), Err("not a number before %")),
            (pct("1e400%"), Err("not a number before %")),
            (pct("-nan%"), Err("not a number before %")),
            (pct("0x10%"), Err("not a number before %")),
        ];
        for (value, want) in cases {
            let got = parse_threshold(value.as_ref(), "f");
            let want = want.map_err(|reason| RolloutError::InvalidThreshold {
                field: "f",
                value: match &value {
                    Some(IntOrString::String(s)) => s.clone(),
                    _ => String::new(),
                },
                reason,
            });
            assert_eq!(got, want, "{value:?}");
        }
        // NaN never equals itself: check it apart.
        let nan = parse_threshold(pct("NaN%").as_ref(), "f");
        assert!(
            matches!(nan, Ok(Threshold::Percent(p)) if p.is_nan()),
            "{nan:?}"
        );
    }

    #[test]
    fn parse_strategies() {
        let secs = |n| Some(Duration::from_secs(n));
        let limits = |min_success_secs, deadline, max_failures| Limits {
            min_success_time: Duration::from_secs(min_success_secs),
            progress_deadline: deadline,
            max_failures,
        };
        let cases: Vec<(&str, RolloutStrategy, Strategy)> = vec![
            (
                "default is All without deadline",
                RolloutStrategy::default(),
                Strategy::All {
                    progress_deadline: None,
                },
            ),
            (
                "All 90s",
                all("90s"),
                Strategy::All {
                    progress_deadline: secs(90),
                },
            ),
            (
                "All ignores invalid minSuccessTime and maxFailures like upstream",
                RolloutStrategy {
                    all: Some(RolloutAll {
                        rollout_config: cfg("1h", pct("x"), "bogus"),
                    }),
                    ..RolloutStrategy::default()
                },
                Strategy::All {
                    progress_deadline: secs(3600),
                },
            ),
            (
                "Progressive without details",
                RolloutStrategy {
                    type_: "Progressive".into(),
                    ..RolloutStrategy::default()
                },
                Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Count(0),
                },
            ),
            (
                "Progressive in full",
                prog(
                    cfg("10m", pct("25%"), "90s"),
                    int(4),
                    &[by_name("canary"), by_index(2)],
                ),
                Strategy::Progressive {
                    limits: limits(90, secs(600), Threshold::Percent(25.0)),
                    mandatory: vec![
                        GroupSelector::Name("canary".into()),
                        GroupSelector::Index(2),
                    ],
                    max_concurrency: Threshold::Count(4),
                },
            ),
            (
                "ProgressivePerGroup; a name wins over an index; a negative soak is 0",
                ppg(
                    cfg("None", int(1), "-5m"),
                    &[
                        MandatoryDecisionGroup {
                            group_name: "a".into(),
                            group_index: 3,
                        },
                        by_index(0),
                    ],
                ),
                Strategy::ProgressivePerGroup {
                    limits: limits(0, None, Threshold::Count(1)),
                    mandatory: vec![GroupSelector::Name("a".into()), GroupSelector::Index(0)],
                },
            ),
            (
                "ProgressivePerGroup ignores the progressive block",
                RolloutStrategy {
                    type_: "ProgressivePerGroup".into(),
                    progressive: Some(RolloutProgressive {
                        max_concurrency: pct("oops"),
                        ..RolloutProgressive::default()
                    }),
                    ..RolloutStrategy::default()
                },
                Strategy::ProgressivePerGroup {
                    limits: Limits::default(),
                    mandatory: vec![],
                },
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(Strategy::parse(&input), Ok(want), "{name}");
        }
    }

    #[test]
    fn parse_errors() {
        let cases: Vec<(RolloutStrategy, RolloutError, &str)> = vec![
            (
                RolloutStrategy {
                    type_: "Canary".into(),
                    ..RolloutStrategy::default()
                },
                RolloutError::UnknownType("Canary".into()),
                r#"rolloutStrategy.type "Canary" is not one of All, Progressive, ProgressivePerGroup"#,
            ),
            (
                RolloutStrategy {
                    type_: String::new(),
                    ..RolloutStrategy::default()
                },
                RolloutError::UnknownType(String::new()),
                r#"rolloutStrategy.type "" is not one of All, Progressive, ProgressivePerGroup"#,
            ),
            (
                all("2d"),
                RolloutError::InvalidDuration {
                    field: "rolloutStrategy.all.progressDeadline",
                    value: "2d".into(),
                    reason: "want None or a duration such as 90s, 10m or 2h",
                },
                r#"rolloutStrategy.all.progressDeadline "2d" is not a valid duration: want None or a duration such as 90s, 10m or 2h"#,
            ),
            (
                prog(cfg("", None, "5"), None, &[]),
                RolloutError::InvalidDuration {
                    field: "rolloutStrategy.progressive.minSuccessTime",
                    value: "5".into(),
                    reason: "missing unit in duration",
                },
                r#"rolloutStrategy.progressive.minSuccessTime "5" is not a valid duration: missing unit in duration"#,
            ),
            (
                prog(cfg("1x", None, ""), None, &[]),
                RolloutError::InvalidDuration {
                    field: "rolloutStrategy.progressive.progressDeadline",
                    value: "1x".into(),
                    reason: "want None or a duration such as 90s, 10m or 2h",
                },
                r#"rolloutStrategy.progressive.progressDeadline "1x" is not a valid duration: want None or a duration such as 90s, 10m or 2h"#,
            ),
            (
                prog(cfg("", pct("3"), ""), None, &[]),
                RolloutError::InvalidThreshold {
                    field: "rolloutStrategy.progressive.maxFailures",
                    value: "3".into(),
                    reason: "string is not a percentage",
                },
                r#"rolloutStrategy.progressive.maxFailures "3" is not a count or a percentage: string is not a percentage"#,
            ),
            (
                prog(cfg("", None, ""), pct("half%"), &[]),
                RolloutError::InvalidThreshold {
                    field: "rolloutStrategy.progressive.maxConcurrency",
                    value: "half%".into(),
                    reason: "not a number before %",
                },
                r#"rolloutStrategy.progressive.maxConcurrency "half%" is not a count or a percentage: not a number before %"#,
            ),
            (
                ppg(cfg("", None, "soon"), &[]),
                RolloutError::InvalidDuration {
                    field: "rolloutStrategy.progressivePerGroup.minSuccessTime",
                    value: "soon".into(),
                    reason: "invalid duration",
                },
                r#"rolloutStrategy.progressivePerGroup.minSuccessTime "soon" is not a valid duration: invalid duration"#,
            ),
            (
                ppg(cfg("forever", None, ""), &[]),
                RolloutError::InvalidDuration {
                    field: "rolloutStrategy.progressivePerGroup.progressDeadline",
                    value: "forever".into(),
                    reason: "want None or a duration such as 90s, 10m or 2h",
                },
                r#"rolloutStrategy.progressivePerGroup.progressDeadline "forever" is not a valid duration: want None or a duration such as 90s, 10m or 2h"#,
            ),
            (
                ppg(cfg("", pct("x%"), ""), &[]),
                RolloutError::InvalidThreshold {
                    field: "rolloutStrategy.progressivePerGroup.maxFailures",
                    value: "x%".into(),
                    reason: "not a number before %",
                },
                r#"rolloutStrategy.progressivePerGroup.maxFailures "x%" is not a count or a percentage: not a number before %"#,
            ),
        ];
        for (input, want, message) in cases {
            let got = Strategy::parse(&input);
            assert_eq!(got, Err(want), "{input:?}");
            let got = got.err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), Some(message));
        }
    }

    #[test]
    fn parse_for_placement() {
        // (name, strategy, clustersPerDecisionGroup, want)
        type Row = (
            &'static str,
            RolloutStrategy,
            Option<IntOrString>,
            Result<Strategy, RolloutError>,
        );
        let per_group_100 = pct("100%");
        let cases: Vec<Row> = vec![
            (
                "unset maxConcurrency takes clustersPerDecisionGroup",
                prog(cfg("", None, ""), None, &[]),
                pct("25%"),
                Ok(Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Percent(25.0),
                }),
            ),
            (
                "so do 0 and \"\"",
                prog(cfg("", None, ""), int(0), &[]),
                int(5),
                Ok(Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Count(5),
                }),
            ),
            (
                "\"\" too",
                prog(cfg("", None, ""), pct(""), &[]),
                per_group_100.clone(),
                Ok(Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Percent(100.0),
                }),
            ),
            (
                "a progressive strategy without its block",
                RolloutStrategy {
                    type_: "Progressive".into(),
                    ..RolloutStrategy::default()
                },
                int(2),
                Ok(Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Count(2),
                }),
            ),
            (
                "a set maxConcurrency stays",
                prog(cfg("", None, ""), int(3), &[]),
                per_group_100.clone(),
                Ok(Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Count(3),
                }),
            ),
            (
                "other types are untouched",
                all(""),
                per_group_100,
                Ok(Strategy::All {
                    progress_deadline: None,
                }),
            ),
            (
                "no placement value: all clusters",
                prog(cfg("", None, ""), None, &[]),
                None,
                Ok(Strategy::Progressive {
                    limits: Limits::default(),
                    mandatory: vec![],
                    max_concurrency: Threshold::Count(0),
                }),
            ),
            (
                "a bad placement value",
                prog(cfg("", None, ""), None, &[]),
                pct("some"),
                Err(RolloutError::InvalidThreshold {
                    field: CLUSTERS_PER_GROUP_FIELD,
                    value: "some".into(),
                    reason: "string is not a percentage",
                }),
            ),
        ];
        for (name, input, per_group, want) in cases {
            assert_eq!(
                Strategy::parse_for_placement(&input, per_group.as_ref()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn mandatory_selectors() {
        // upstream's TestDecisionGroupsToGroupKeys: a name wins over an index.
        let cases: Vec<(MandatoryDecisionGroup, GroupSelector)> = vec![
            (
                MandatoryDecisionGroup {
                    group_name: "group1".into(),
                    group_index: 1,
                },
                GroupSelector::Name("group1".into()),
            ),
            (by_name("group2"), GroupSelector::Name("group2".into())),
            (by_index(2), GroupSelector::Index(2)),
            (MandatoryDecisionGroup::default(), GroupSelector::Index(0)),
        ];
        for (input, want) in cases {
            assert_eq!(GroupSelector::from(&input), want, "{input:?}");
        }
    }

    fn decision(labels: &[(&str, &str)], clusters: Option<&[&str]>) -> PlacementDecision {
        PlacementDecision {
            metadata: ObjectMeta {
                name: Some("p-decision-1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            spec: PlacementDecisionFields {},
            status: clusters.map(|clusters| PlacementDecisionStatus {
                decisions: clusters
                    .iter()
                    .map(|c| ClusterDecision {
                        cluster_name: (*c).to_owned(),
                        reason: String::new(),
                        score: 0,
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn groups_from_decisions() {
        const INDEX: &str = label::DECISION_GROUP_INDEX;
        const NAME: &str = label::DECISION_GROUP_NAME;
        type Want = Vec<(i32, &'static str, Vec<&'static str>)>;
        let cases: Vec<(&str, Vec<PlacementDecision>, Want)> = vec![
            ("no decisions", vec![], vec![]),
            (
                "labelled as the scheduler writes them, one group over two decisions",
                vec![
                    decision(&[(INDEX, "0"), (NAME, "canary")], Some(&["c1"])),
                    decision(&[(INDEX, "1"), (NAME, "")], Some(&["c3", "c2"])),
                    decision(&[(INDEX, "1"), (NAME, "")], Some(&["c4"])),
                ],
                vec![(0, "canary", vec!["c1"]), (1, "", vec!["c2", "c3", "c4"])],
            ),
            (
                "no labels: group 0 without a name",
                vec![PlacementDecision {
                    metadata: ObjectMeta::default(),
                    ..decision(&[], Some(&["c1"]))
                }],
                vec![(0, "", vec!["c1"])],
            ),
            (
                "garbage or missing index: group 0",
                vec![
                    decision(&[(INDEX, "first"), (NAME, "a")], Some(&["c1"])),
                    decision(&[(INDEX, ""), (NAME, "a")], Some(&["c2"])),
                    decision(&[(NAME, "b")], Some(&["c3"])),
                    decision(&[(INDEX, "99999999999999999999")], Some(&["c4"])),
                ],
                vec![
                    (0, "", vec!["c4"]),
                    (0, "a", vec!["c1", "c2"]),
                    (0, "b", vec!["c3"]),
                ],
            ),
            (
                "Go's Atoi: signs and leading zeros; int32 wraps",
                vec![
                    decision(&[(INDEX, "+02")], Some(&["c1"])),
                    decision(&[(INDEX, "-1")], Some(&["c2"])),
                    decision(&[(INDEX, "4294967299")], Some(&["c3"])),
                ],
                vec![
                    (-1, "", vec!["c2"]),
                    (2, "", vec!["c1"]),
                    (3, "", vec!["c3"]),
                ],
            ),
            (
                "decisions without clusters keep their (empty) group",
                vec![
                    decision(&[(INDEX, "0"), (NAME, "canary")], None),
                    decision(&[(INDEX, "1")], Some(&[])),
                ],
                vec![(0, "canary", vec![]), (1, "", vec![])],
            ),
        ];
        for (name, decisions, want) in cases {
            let got: Vec<(i32, String, Vec<String>)> = Groups::from_decisions(&decisions)
                .iter()
                .map(|(key, clusters)| {
                    (
                        key.index,
                        key.name.clone(),
                        clusters.iter().cloned().collect(),
                    )
                })
                .collect();
            let want: Vec<(i32, String, Vec<String>)> = want
                .into_iter()
                .map(|(index, group, clusters)| {
                    (
                        index,
                        group.to_owned(),
                        clusters.into_iter().map(str::to_owned).collect(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn groups_accessors() {
        let mut groups = groups(&[(1, "", &[3, 1]), (0, "canary", &[2])]);
        groups.insert_group(k(2, "empty"));
        groups.insert(k(1, ""), "cluster2");
        assert_eq!(
            groups.clusters(),
            BTreeSet::from(["cluster1", "cluster2", "cluster3"])
        );
        assert_eq!(groups.len(), 3);
        assert!(!groups.is_empty());
        assert_eq!(groups.group_count(), 3);
        let keys: Vec<_> = groups.iter().map(|(key, _)| key.clone()).collect();
        assert_eq!(keys, vec![k(0, "canary"), k(1, ""), k(2, "empty")]);
        // cluster2 is in two groups: the lowest wins.
        let cases = [
            ("cluster1", Some(k(1, ""))),
            ("cluster2", Some(k(0, "canary"))),
            ("cluster3", Some(k(1, ""))),
            ("cluster9", None),
        ];
        for (cluster, want) in cases {
            assert_eq!(groups.group_of(cluster), want.as_ref(), "{cluster}");
        }

        let mut empty = Groups::default();
        assert!(empty.is_empty());
        assert_eq!((empty.len(), empty.group_count()), (0, 0));
        empty.insert_group(k(0, ""));
        assert!(empty.is_empty());
        assert_eq!((empty.len(), empty.group_count()), (0, 1));
    }

    #[test]
    fn groups_with_gaps_and_shared_indices_all_take_part() {
        // Upstream's tracker would drop index 5 (only 0..2 are looked at) and one of the two
        // names at index 0; here every group rolls out, in (index, name) order.
        let gaps = groups(&[(0, "a", &[1]), (0, "b", &[2]), (5, "", &[3])]);
        let got = rollout(
            &Strategy::parse(&all("")).unwrap(),
            &gaps,
            &[s(3, gi(5), Progressing, -1)],
            now(),
        );
        let want = res(
            vec![
                s(3, gi(5), Progressing, -1),
                t(1, Some(k(0, "a"))),
                t(2, Some(k(0, "b"))),
            ],
            vec![],
            vec![],
            false,
            None,
        );
        assert_eq!(got, want);
        // A mandatory index selects every group with it: cluster2's group "b" goes before
        // cluster1 although Progressive would take cluster1 first among the rest.
        let shared = groups(&[(0, "a", &[3]), (0, "b", &[2]), (5, "", &[1])]);
        let strategy = Strategy::parse(&prog(cfg("", None, ""), int(1), &[by_index(0)])).unwrap();
        let got = rollout(
            &strategy,
            &shared,
            &[s(3, Some(k(0, "a")), Succeeded, -60)],
            now(),
        );
        assert_eq!(
            got,
            res(vec![t(2, Some(k(0, "b")))], vec![], vec![], false, None)
        );
    }

    #[test]
    fn progress_condition() {
        let p = |progressing, succeeded, failed, timed_out, total, configured| Progress {
            progressing,
            succeeded,
            failed,
            timed_out,
            total,
            configured,
        };
        let cases: Vec<(Progress, bool, &str, &str, &str)> = vec![
            (
                p(0, 0, 0, 0, 0, 0),
                false,
                "True",
                "Progressing",
                "selected clusters 0. configured addons 0/0 progressing..., 0 failed 0 timeout.",
            ),
            (
                p(2, 1, 1, 1, 5, 5),
                false,
                "True",
                "Progressing",
                "selected clusters 5. configured addons 3/5 progressing..., 1 failed 1 timeout.",
            ),
            (
                p(0, 3, 0, 0, 3, 3),
                true,
                "False",
                "Completed",
                "selected clusters 3. configured addons 3/3 completed with no errors, 0 failed 0 timeout.",
            ),
            (
                p(0, 2, 1, 1, 4, 2),
                true,
                "False",
                "Completed",
                "selected clusters 4. configured addons 2/2 completed with no errors, 1 failed 1 timeout.",
            ),
            (
                p(0, 3, 0, 0, 3, 2),
                false,
                "True",
                "Progressing",
                "selected clusters 3. configured addons 3/2 progressing..., 0 failed 0 timeout.",
            ),
        ];
        for (progress, completed, status, reason, message) in cases {
            assert_eq!(progress.completed(), completed, "{progress:?}");
            assert_eq!(
                progress.condition(),
                (status, reason, message.to_owned()),
                "{progress:?}"
            );
        }
    }

    #[test]
    fn progress_tally() {
        let groups = g_3_3();
        let existing = vec![
            s(1, g1(), Succeeded, -30),
            s(2, g1(), Failed, -120),
            s(3, g1(), Progressing, -30),
            s(2, g1(), Succeeded, -120),
            s(4, gi(1), Succeeded, -120),
            s(5, gi(1), Failed, -10),
            s(7, gi(1), Failed, -10),
        ];
        let strategy = Strategy::parse(&prog(cfg("90s", pct("100%"), "1m"), int(6), &[])).unwrap();
        let result = rollout(&strategy, &groups, &existing, now());
        // In the rollout: 1 (soaking), 3 (progressing), 5 (failed in time), 6 (new, no add-on).
        // Done: 4. Past the deadline: 2 (its first status counts). Not selected: 7.
        let want = Progress {
            progressing: 3,
            succeeded: 1,
            failed: 1,
            timed_out: 1,
            total: 6,
            configured: 5,
        };
        assert_eq!(Progress::tally(&groups, &existing, &result, 5), want);
    }
}
