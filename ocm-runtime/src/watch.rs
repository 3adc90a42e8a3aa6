//! The retry policy of every watch (scheduler, manager, scorer, agent).
//!
//! kube's default is client-go's reflector backoff: 800 ms doubling to 30 s, plus up to as much
//! again in jitter, reset after 2 minutes without an error. After an apiserver outage of a
//! minute that means up to a minute before a watch tries again, and as long once more when that
//! first try is answered 410 Gone (its `resourceVersion` was compacted) before it relists: work
//! resumed more than a minute after the apiserver was back. Capping each wait at
//! [`MAX_WAIT`] keeps the same shape (and the jitter that spreads reconnects) while a
//! returning apiserver sees every watch again within seconds; a watch retrying every few
//! seconds costs it nothing.

use std::time::Duration;

use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;

/// The longest wait between two attempts of a watch, jitter included.
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// The first wait (client-go's).
const FIRST_WAIT: Duration = Duration::from_millis(800);
/// Quiet time after which the waits start again from [`FIRST_WAIT`] (client-go's).
const RESET_AFTER: Duration = Duration::from_secs(120);

/// The backoff for one watch stream (`.backoff(ocm_runtime::watch::backoff())` instead of
/// `.default_backoff()`).
pub fn backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    // The jitter adds up to the current wait again: half the cap before jitter.
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(FIRST_WAIT.min(MAX_WAIT / 2))
        .with_max_delay(MAX_WAIT / 2)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(builder), RESET_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_then_stay_under_the_cap() {
        let waits: Vec<Duration> = backoff().take(20).collect();
        assert!(
            waits[0] >= FIRST_WAIT && waits[0] < FIRST_WAIT * 2,
            "{waits:?}"
        );
        assert!(waits.iter().all(|w| *w <= MAX_WAIT), "{waits:?}");
        assert!(waits[19] >= MAX_WAIT / 2, "{waits:?}");
    }
}
