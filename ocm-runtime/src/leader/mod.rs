//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's `leaderelection`
//! does it, so that of several replicas exactly one writes, and the Lease interoperates with Go
//! components and `kubectl`:
//!
//! - a candidate takes the Lease when it is free (no holder, or released) or when it has not
//!   changed for its `leaseDurationSeconds`, measured on the candidate's own clock from when it
//!   last saw a change, so clock skew between replicas does not matter;
//! - every write carries the `resourceVersion` that was read, so two candidates cannot both win;
//! - the leader renews every retry period. [`Leadership::is_leader`] is true only while the last
//!   successful renew *started* less than the renew deadline ago: a leader cut off from the
//!   apiserver stops believing it leads before any other replica can see the Lease expire
//!   (renew deadline < lease duration), even when its election task is stuck or gone;
//! - on shutdown the leader first stops leading, then releases the Lease, so a standby takes over
//!   at its next retry instead of after the lease duration.

mod elector;
mod leadership;
mod timings;
mod write_gate;

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use thiserror::Error;

pub use elector::LeaderElector;
pub use leadership::Leadership;
pub use timings::LeaderTimings;
pub use write_gate::{NotLeader, WriteGate, WriteGateLayer, is_not_leader};

/// Flags for leader election.
#[derive(clap::Args, Clone, Debug)]
pub struct LeaderArgs {
    /// Elect a leader among the replicas before doing any work; `--leader-elect=false` for a
    /// single replica (it then always leads).
    #[arg(
        long,
        env = "LEADER_ELECT",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub leader_elect: bool,
    /// The namespace of the Lease.
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "open-cluster-management-hub"
    )]
    pub leader_election_namespace: String,
    /// How long a standby waits, after the Lease last changed, before it takes the Lease
    /// (`15s`, `1m`, `1500ms`; a bare number is seconds).
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = crate::flags::parse_duration)]
    pub leader_election_lease_duration: Duration,
    /// How long the leader keeps leading without a successful renew.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = crate::flags::parse_duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often the leader renews and a standby tries to take over.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = crate::flags::parse_duration)]
    pub leader_election_retry_period: Duration,
}

impl LeaderArgs {
    pub fn timings(&self) -> LeaderTimings {
        LeaderTimings {
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
        }
    }

    /// The elector these flags ask for, with [`default_identity`]; `None` with
    /// `--leader-elect=false` (use [`Leadership::always`] then).
    pub fn elector(
        &self,
        client: kube::Client,
        lease_name: &str,
    ) -> Result<Option<LeaderElector>, LeaderError> {
        if !self.leader_elect {
            tracing::info!("leader election off: this replica always leads");
            return Ok(None);
        }
        LeaderElector::new(
            client,
            &self.leader_election_namespace,
            lease_name,
            default_identity(),
            self.timings(),
        )
        .map(Some)
    }

    /// Starts the election these flags ask for on `elector_client` and returns its leadership
    /// ([`Leadership::always`] with `--leader-elect=false`). Give the elector a client of its
    /// own, outside any rate limit, so that a busy leader's renewals never queue behind its own
    /// writes (client-go's controllers do the same); the Lease is released when `shutdown`
    /// resolves.
    pub fn start(
        &self,
        elector_client: kube::Client,
        lease_name: &str,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Leadership, LeaderError> {
        Ok(match self.elector(elector_client, lease_name)? {
            Some(elector) => {
                let leadership = elector.leadership();
                tracing::info!(identity = elector.identity(), "leader election on");
                tokio::spawn(elector.run(shutdown));
                leadership
            }
            None => Leadership::always(),
        })
    }
}

/// Runs `work` until it ends, or until this replica is deposed: then it fails with
/// [`LeaderError::Deposed`] and the caller exits, dropping its tasks with it (client-go's
/// `OnStoppedLeading`); it comes back as a standby with fresh stores when restarted. A Lease
/// released because the process is stopping (`stopping()` is true) is a hand-over, not a loss:
/// `work` is then awaited to its end.
pub async fn run_until_deposed(
    work: impl Future<Output = ()>,
    mut leadership: Leadership,
    stopping: impl Fn() -> bool,
) -> Result<(), LeaderError> {
    tokio::pin!(work);
    tokio::select! {
        () = &mut work => Ok(()),
        () = leadership.deposed() => {
            if stopping() {
                work.await;
                return Ok(());
            }
            tracing::error!("lost the leader lease: exiting");
            Err(LeaderError::Deposed)
        }
    }
}

#[derive(Debug, Error)]
pub enum LeaderError {
    #[error("invalid leader election timings: {0}")]
    Timings(String),
    #[error("the leader election identity must not be empty")]
    Identity,
    #[error("lost the leader lease")]
    Deposed,
}

/// `<hostname>_<random>`, like client-go's `hostname_uuid`: in a pod the hostname is the pod's
/// name, and the suffix keeps a restarted process from mistaking the old holder for itself.
pub fn default_identity() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    format!("{host}_{:016x}", random_u64())
}

fn random_u64() -> u64 {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// A number in [0, 1) for jitter; it need not be good randomness.
fn unit_random() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        leader: LeaderArgs,
    }

    #[test]
    fn flags() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert!(cli.leader.leader_elect);
        assert_eq!(cli.leader.timings(), LeaderTimings::default());
        let cli = Cli::try_parse_from([
            "x",
            "--leader-elect=false",
            "--leader-election-namespace=ns",
            "--leader-election-lease-duration=30",
            "--leader-election-renew-deadline=20s",
            "--leader-election-retry-period=1500ms",
        ])
        .unwrap();
        assert!(!cli.leader.leader_elect);
        assert_eq!(cli.leader.leader_election_namespace, "ns");
        assert_eq!(
            cli.leader.timings(),
            LeaderTimings {
                lease_duration: Duration::from_secs(30),
                renew_deadline: Duration::from_secs(20),
                retry_period: Duration::from_millis(1500),
            }
        );
        let cli = Cli::try_parse_from(["x", "--leader-elect"]).unwrap();
        assert!(cli.leader.leader_elect);
        assert!(Cli::try_parse_from(["x", "--leader-election-retry-period=soon"]).is_err());
    }

    #[test]
    fn identities_are_unique() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
