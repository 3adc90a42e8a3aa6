//! The TaintToleration filter (upstream `plugins/tainttoleration`): a cluster stays only if
//! every taint on it is tolerated.
//!
//! - `PreferNoSelect` is always tolerated and costs nothing (upstream has no penalty either).
//! - `NoSelectIfNew` is tolerated for clusters already in this placement's decisions.
//! - Otherwise a toleration must match (effect and key empty or equal; `Equal` compares the
//!   value, `Exists` does not) and, with `tolerationSeconds`, `now < timeAdded + seconds`.
//!   A missing `timeAdded` is Go's zero time, so any timer has already run out.

use jiff::{SignedDuration, Timestamp};
use ocm_api::Taint;
use ocm_api::cluster::v1beta1::Toleration;
use ocm_api::wellknown::{taint_effect, toleration_operator};

use super::DropReason;
use crate::status::Status;

pub const NAME: &str = "TaintToleration";

/// Checks the tolerations as upstream does before filtering.
pub(crate) fn validate(tolerations: &[Toleration]) -> Result<(), Status> {
    for t in tolerations {
        let exists = t.operator == toleration_operator::EXISTS;
        if t.key.is_empty() && !exists {
            return Err(Status::misconfigured(
                NAME,
                "If the key is empty, operator must be Exists.",
            ));
        }
        if exists && !t.value.is_empty() {
            return Err(Status::misconfigured(
                NAME,
                "If the operator is Exists, the value should be empty.",
            ));
        }
    }
    Ok(())
}

/// How a taint fares against the tolerations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Tolerated; `Some(t)` when only until `t` (the first matching toleration's expiry).
    Tolerated(Option<Timestamp>),
    NotTolerated {
        expired: bool,
    },
}

pub(crate) fn judge(
    taint: &Taint,
    tolerations: &[Toleration],
    in_decision: bool,
    now: Timestamp,
) -> Verdict {
    if taint.effect == taint_effect::PREFER_NO_SELECT {
        return Verdict::Tolerated(None);
    }
    if taint.effect == taint_effect::NO_SELECT_IF_NEW && in_decision {
        return Verdict::Tolerated(None);
    }
    let mut expired = false;
    for t in tolerations {
        if !(t.effect.is_empty() || t.effect == taint.effect) {
            continue;
        }
        if !(t.key.is_empty() || t.key == taint.key) {
            continue;
        }
        let value_ok = match t.operator.as_str() {
            toleration_operator::EXISTS => true,
            // "" is Equal; any other operator never matches (validated away above).
            "" | toleration_operator::EQUAL => t.value == taint.value,
            _ => false,
        };
        if !value_ok {
            continue;
        }
        match t.toleration_seconds {
            None => return Verdict::Tolerated(None),
            Some(seconds) => match expiry(taint, seconds) {
                Some(until) if now < until => return Verdict::Tolerated(Some(until)),
                None => return Verdict::Tolerated(None),
                Some(_) => expired = true,
            },
        }
    }
    Verdict::NotTolerated { expired }
}

/// `timeAdded + seconds`; `Some(Timestamp::MIN)` when there is no timeAdded (Go's zero time
/// is far in the past), `None` when the sum is beyond any representable time (never expires).
fn expiry(taint: &Taint, seconds: i64) -> Option<Timestamp> {
    let Some(added) = &taint.time_added else {
        return Some(Timestamp::MIN);
    };
    match added.0.checked_add(SignedDuration::from_secs(seconds)) {
        Ok(t) => Some(t),
        Err(_) if seconds < 0 => Some(Timestamp::MIN),
        Err(_) => None,
    }
}

/// `None` when every taint is tolerated, else the first one that is not.
pub(crate) fn check(
    taints: &[Taint],
    tolerations: &[Toleration],
    in_decision: bool,
    now: Timestamp,
) -> Option<DropReason> {
    taints
        .iter()
        .find_map(|taint| match judge(taint, tolerations, in_decision, now) {
            Verdict::Tolerated(_) => None,
            Verdict::NotTolerated { expired } => Some(DropReason::Taint {
                key: taint.key.clone(),
                value: taint.value.clone(),
                effect: taint.effect.clone(),
                expired,
            }),
        })
}

/// The earliest time a currently tolerated taint on a decided cluster stops being tolerated.
/// A cluster with a taint that is not tolerated at all is leaving anyway: its timers do not
/// count (as upstream's `isClusterTolerated`).
pub(crate) fn requeue_at<'a>(
    decided_taints: impl Iterator<Item = &'a [Taint]>,
    tolerations: &[Toleration],
    now: Timestamp,
) -> Option<Timestamp> {
    decided_taints
        .filter_map(|taints| {
            let mut earliest: Option<Timestamp> = None;
            for t in taints {
                match judge(t, tolerations, true, now) {
                    Verdict::Tolerated(Some(until)) => {
                        earliest = Some(earliest.map_or(until, |e| e.min(until)));
                    }
                    Verdict::Tolerated(None) => {}
                    Verdict::NotTolerated { .. } => return None,
                }
            }
            earliest
        })
        .min()
}
