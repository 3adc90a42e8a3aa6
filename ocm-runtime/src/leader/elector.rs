//! [`LeaderElector`]: campaigns for, renews and releases one Lease, as client-go does.

use std::future::Future;
use std::time::Duration;

use backon::{ConstantBuilder, Retryable};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

use super::leadership::{Mode, State};
use super::timings::JITTER;
use super::{LeaderError, LeaderTimings, Leadership, unit_random};

/// Campaigns for, holds and releases one Lease. Take [`Self::leadership`] handles first, then
/// drive the election with [`Self::run`].
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timings: LeaderTimings,
    state: watch::Sender<State>,
    /// The Lease spec last read or written, and when it was first seen like that.
    observed: Option<(LeaseSpec, Instant)>,
    /// This replica has held the Lease: from then on, only a renew of that same holding makes
    /// it lead again (see [`Leadership::deposed`]).
    led: bool,
}

/// What one acquire-or-renew attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease (acquired or renewed).
    Holding,
    /// Another holder's Lease is still valid.
    HeldByOther(String),
    /// Someone wrote the Lease between our read and our write; try again.
    Conflict,
}

impl LeaderElector {
    /// An elector for the Lease `namespace/lease_name`, as `identity` (unique per process; see
    /// [`default_identity`](super::default_identity)). Fails when the timings break client-go's rules.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        lease_name: &str,
        identity: impl Into<String>,
        timings: LeaderTimings,
    ) -> Result<Self, LeaderError> {
        timings.validate()?;
        let identity = identity.into();
        if identity.is_empty() {
            return Err(LeaderError::Identity);
        }
        let (state, _) = watch::channel(State {
            renewed: None,
            deposed: false,
        });
        Ok(Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: lease_name.into(),
            identity,
            timings,
            state,
            observed: None,
            led: false,
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A handle that says whether this elector leads.
    pub fn leadership(&self) -> Leadership {
        Leadership {
            mode: Mode::Elected {
                rx: self.state.subscribe(),
                renew_deadline: self.timings.renew_deadline,
            },
        }
    }

    /// Campaigns, then renews, until `shutdown` completes; then releases the Lease if this
    /// replica holds it. Errors (the apiserver unreachable, RBAC) are logged and retried; the
    /// leader steps down when it has not renewed within the renew deadline, and campaigns again.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tracing::info!(
            lease = %format!("{}/{}", self.namespace, self.name),
            identity = %self.identity,
            "leader election: campaigning"
        );
        tokio::pin!(shutdown);
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = &mut shutdown => break,
                a = tokio::time::timeout(self.timings.renew_deadline, self.try_acquire_or_renew()) => a,
            };
            match attempt {
                Ok(Ok(Attempt::Holding)) => self.renewed(started),
                Ok(Ok(Attempt::HeldByOther(holder))) => self.not_holding(&holder),
                Ok(Ok(Attempt::Conflict)) => {
                    tracing::debug!(lease = %self.name, "leader election: the Lease changed under us");
                    self.check_deadline();
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, error = %e, "leader election: cannot read or write the Lease");
                    self.check_deadline();
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "leader election: the apiserver did not answer within the renew deadline");
                    self.check_deadline();
                }
            }
            let wait = if self.leading() {
                self.timings.retry_period
            } else {
                self.timings
                    .retry_period
                    .mul_f64(1.0 + (JITTER - 1.0) * unit_random())
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        self.release().await;
    }

    fn leading(&self) -> bool {
        self.state.borrow().renewed.is_some()
    }

    fn renewed(&mut self, started: Instant) {
        if !self.leading() {
            tracing::info!(
                lease = %format!("{}/{}", self.namespace, self.name),
                identity = %self.identity,
                "leader election: became the leader"
            );
        }
        self.led = true;
        self.state.send_replace(State {
            renewed: Some(started),
            deposed: false,
        });
    }

    fn not_holding(&mut self, holder: &str) {
        if self.led {
            tracing::warn!(lease = %self.name, %holder, "leader election: lost the Lease to another holder");
            self.state.send_replace(State {
                renewed: None,
                deposed: true,
            });
        } else {
            tracing::debug!(lease = %self.name, %holder, "leader election: the Lease is held");
        }
    }

    /// Steps down when the last successful renew is older than the renew deadline.
    fn check_deadline(&mut self) {
        let until = self
            .state
            .borrow()
            .leading_until(self.timings.renew_deadline);
        if until.is_some_and(|u| Instant::now() >= u) {
            tracing::warn!(lease = %self.name, "leader election: no renew within the renew deadline, stepping down");
            self.step_down();
        }
    }

    fn step_down(&mut self) {
        self.state.send_modify(|s| s.renewed = None);
    }

    /// Notes `spec` as seen now unless it is what was seen before (client-go's observed time).
    fn observe(&mut self, spec: &LeaseSpec) {
        if self.observed.as_ref().is_none_or(|(seen, _)| seen != spec) {
            self.observed = Some((spec.clone(), Instant::now()));
        }
    }

    /// Whether the observed holder's lease has run out on our clock.
    fn observed_expired(&self) -> bool {
        let Some((spec, seen)) = &self.observed else {
            return false;
        };
        let seconds = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(self.timings.lease_duration.as_secs());
        Instant::now() >= *seen + Duration::from_secs(seconds)
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            if self.led {
                // Deleted since we held it: we cannot know who held it meanwhile.
                return Ok(Attempt::HeldByOther(String::new()));
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(claim(
                    None,
                    &self.identity,
                    jiff::Timestamp::now(),
                    self.timings.lease_seconds(),
                )),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created.spec.unwrap_or_default());
                    Ok(Attempt::Holding)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.take().unwrap_or_default();
        self.observe(&spec);
        let holder = holder(&spec);
        if self.led && holder != self.identity {
            // Taken (or released by whoever took it) since we held it.
            return Ok(Attempt::HeldByOther(holder.to_string()));
        }
        if !holder.is_empty() && holder != self.identity && !self.observed_expired() {
            return Ok(Attempt::HeldByOther(holder.to_string()));
        }
        lease.spec = Some(claim(
            Some(&spec),
            &self.identity,
            jiff::Timestamp::now(),
            self.timings.lease_seconds(),
        ));
        // `metadata.resourceVersion` is the one read: a write in between makes this a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written.spec.unwrap_or_default());
                Ok(Attempt::Holding)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Stops leading, then gives the Lease up if we hold it, so a standby need not wait for it to
    /// expire. A failed release only costs the standby the lease duration.
    async fn release(&mut self) {
        let held = self.leading()
            || self
                .observed
                .as_ref()
                .is_some_and(|(spec, _)| holder(spec) == self.identity);
        // Leadership ends before the Lease is given up, never after.
        self.step_down();
        if !held {
            return;
        }
        let release = || async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let spec = lease.spec.take().unwrap_or_default();
            if holder(&spec) != self.identity {
                return Ok(false);
            }
            lease.spec = Some(released(spec, jiff::Timestamp::now()));
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .map(|_| true)
        };
        let result = tokio::time::timeout(
            self.timings.renew_deadline,
            release
                .retry(
                    ConstantBuilder::default()
                        .with_delay(self.timings.retry_period / 4)
                        .with_max_times(3),
                )
                .when(|e: &kube::Error| matches!(e, kube::Error::Api(s) if s.is_conflict())),
        )
        .await;
        match result {
            Ok(Ok(true)) => {
                tracing::info!(lease = %self.name, "leader election: released the Lease")
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.name, error = %e, "leader election: cannot release the Lease; a standby takes over when it expires")
            }
            Err(_) => {
                tracing::warn!(lease = %self.name, "leader election: releasing the Lease timed out; a standby takes over when it expires")
            }
        }
    }
}

fn holder(spec: &LeaseSpec) -> &str {
    spec.holder_identity.as_deref().unwrap_or("")
}

/// The spec that makes `me` the holder, from the current one (client-go's record rules): a
/// renew keeps the acquire time and the transition count; a takeover sets the acquire time and
/// counts one more transition; a new Lease starts at 0 transitions.
fn claim(
    current: Option<&LeaseSpec>,
    me: &str,
    now: jiff::Timestamp,
    lease_seconds: i32,
) -> LeaseSpec {
    let now = MicroTime(now);
    let Some(current) = current else {
        return LeaseSpec {
            holder_identity: Some(me.into()),
            lease_duration_seconds: Some(lease_seconds),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        };
    };
    let renew = holder(current) == me;
    LeaseSpec {
        holder_identity: Some(me.into()),
        lease_duration_seconds: Some(lease_seconds),
        acquire_time: if renew {
            current.acquire_time.clone().or(Some(now.clone()))
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_transitions: Some(current.lease_transitions.unwrap_or(0) + if renew { 0 } else { 1 }),
        ..current.clone()
    }
}

/// The released spec, as client-go writes it: no holder, a one-second lease.
fn released(current: LeaseSpec, now: jiff::Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ts(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn claim_new_renew_takeover() {
        let created = claim(None, "a", ts(100), 15);
        assert_eq!(created.holder_identity.as_deref(), Some("a"));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.lease_duration_seconds, Some(15));

        let renewed = claim(Some(&created), "a", ts(102), 15);
        assert_eq!(renewed.acquire_time, created.acquire_time);
        assert_eq!(renewed.renew_time, Some(MicroTime(ts(102))));
        assert_eq!(renewed.lease_transitions, Some(0));

        let taken = claim(Some(&renewed), "b", ts(120), 15);
        assert_eq!(taken.holder_identity.as_deref(), Some("b"));
        assert_eq!(taken.acquire_time, Some(MicroTime(ts(120))));
        assert_eq!(taken.lease_transitions, Some(1));

        let free = released(taken.clone(), ts(121));
        assert_eq!(holder(&free), "");
        assert_eq!(free.lease_duration_seconds, Some(1));
        assert_eq!(free.lease_transitions, Some(1));
        let after_release = claim(Some(&free), "a", ts(122), 15);
        assert_eq!(after_release.lease_transitions, Some(2));
        assert_eq!(after_release.lease_duration_seconds, Some(15));
    }
}
