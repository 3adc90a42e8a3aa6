//! client-go's three timings and their rules.

use std::time::Duration;

use super::LeaderError;

/// client-go's three timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderTimings {
    /// How long a standby waits after the Lease last changed before taking it.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renew; must be shorter than the
    /// lease duration, which is what keeps two replicas from leading at once.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby retries.
    pub retry_period: Duration,
}

impl Default for LeaderTimings {
    /// client-go's and controller-runtime's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderTimings {
    /// client-go's rules: lease duration > renew deadline > 1.2 × retry period > 0. The lease
    /// duration is written to the Lease in whole seconds, so it must be at least 1 s.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let t = self;
        let bad = |m: String| Err(LeaderError::Timings(m));
        if t.retry_period.is_zero() {
            return bad("the retry period must be positive".into());
        }
        if t.lease_duration < Duration::from_secs(1) {
            return bad(format!(
                "the lease duration ({:?}) must be at least 1s",
                t.lease_duration
            ));
        }
        if t.lease_duration <= t.renew_deadline {
            return bad(format!(
                "the lease duration ({:?}) must be longer than the renew deadline ({:?})",
                t.lease_duration, t.renew_deadline
            ));
        }
        if t.renew_deadline <= t.retry_period.mul_f64(JITTER) {
            return bad(format!(
                "the renew deadline ({:?}) must be longer than {JITTER} × the retry period ({:?})",
                t.renew_deadline, t.retry_period
            ));
        }
        Ok(())
    }

    /// The lease duration as written into `spec.leaseDurationSeconds` (rounded up).
    pub(super) fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX)
    }
}

/// client-go's jitter factor: a standby retries after 1 to 1.2 retry periods.
pub(super) const JITTER: f64 = 1.2;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn timings_follow_client_go_rules() {
        assert!(LeaderTimings::default().validate().is_ok());
        let t = |l, r, p| LeaderTimings {
            lease_duration: Duration::from_millis(l),
            renew_deadline: Duration::from_millis(r),
            retry_period: Duration::from_millis(p),
        };
        assert!(t(3000, 2000, 500).validate().is_ok());
        for (bad, why) in [
            (t(2000, 2000, 500), "longer than the renew deadline"),
            (t(3000, 1200, 1000), "1.2 × the retry period"),
            (t(3000, 2000, 0), "retry period must be positive"),
            (t(900, 500, 100), "at least 1s"),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        assert_eq!(t(1500, 1000, 100).lease_seconds(), 2);
    }
}
