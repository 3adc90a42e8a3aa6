//! The decision: which clusters may take the current rendering now.

use super::*;

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
pub(super) fn mandatory_first(
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
pub(super) struct Clock {
    pub(super) now: Timestamp,
    pub(super) min_success_time: Duration,
    pub(super) deadline: Option<Duration>,
}

impl Clock {
    pub(super) fn new(limits: &Limits, now: Timestamp) -> Clock {
        Clock {
            now,
            min_success_time: limits.min_success_time,
            deadline: limits.progress_deadline,
        }
    }

    /// Upstream's `calculateRecheckTime`: `start + d`, from now without a start.
    pub(super) fn recheck_time(&self, start: Option<Timestamp>, d: Option<Duration>) -> Recheck {
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
    pub(super) fn determine(
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
    pub(super) fn recheck_after(&self, rollout: &[ClusterStatus]) -> Option<Duration> {
        rollout
            .iter()
            .filter_map(|s| s.recheck_at)
            .filter_map(|t| Duration::try_from(t.duration_since(self.now)).ok())
            .filter(|d| !d.is_zero())
            .min()
    }

    pub(super) fn result(
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
pub(super) enum Recheck {
    /// No deadline / soak (upstream's nil).
    Never,
    At(Timestamp),
    /// Past jiff's range: never reached.
    OutOfRange,
}

/// Upstream's `progressivePerCluster`: existing statuses by cluster name first, then new
/// clusters by name, until `rollout_size` or more than `max_failures` Failed/TimeOut.
pub(super) fn per_cluster(
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
pub(super) fn per_group(
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
