//! Leader election for work that must have stopped before the Lease is given up (the hub
//! scorer's): the Lease is released only after the work ended, so a standby never writes
//! alongside it, and the work starts only once this replica leads.

use std::future::Future;

use super::{AppError, Running};
use crate::leader::{LeaderArgs, LeaderError, Leadership};

impl Running {
    /// Waits to lead, then runs `work` (given the leadership to check before its writes) until
    /// it ends or this replica is deposed; then releases the Lease. A standby is ready: it is
    /// doing its job. The stop signal while waiting releases the Lease and returns. Deposed,
    /// it fails with [`LeaderError::Deposed`] (the process exits and comes back as a standby,
    /// as client-go's controllers do). With `--leader-elect=false`, `work` runs at once with
    /// no leadership.
    pub async fn run_elected<W, F>(
        &self,
        args: &LeaderArgs,
        elector_client: kube::Client,
        lease: &str,
        work: W,
    ) -> Result<(), AppError>
    where
        W: FnOnce(Option<Leadership>) -> F,
        F: Future<Output = ()>,
    {
        let Some(elector) = args.elector(elector_client, lease)? else {
            work(None).await;
            return Ok(());
        };
        let mut leadership = elector.leadership();
        self.follow(lease, &leadership);
        tracing::info!(identity = elector.identity(), "leader election on");
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let elector_task = tokio::spawn(elector.run(async move {
            let _ = released.await;
        }));
        self.health.set_ready(true);
        tokio::select! {
            _ = leadership.wait_leader() => {}
            _ = self.shutdown() => {
                let _ = release.send(());
                let _ = elector_task.await;
                return Ok(());
            }
        }
        let mut deposed = leadership.clone();
        // Deposed by another holder, not merely past the renew deadline (the hub down): the
        // work writes only while leading, and leads again once it renews.
        let lost_lease = tokio::select! {
            _ = work(Some(leadership)) => false,
            _ = deposed.deposed() => true,
        };
        let _ = release.send(());
        let _ = elector_task.await;
        if lost_lease {
            return Err(LeaderError::Deposed.into());
        }
        Ok(())
    }
}
