//! The install progression's condition, from the rollout's statuses.

use super::*;

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
