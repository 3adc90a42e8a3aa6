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

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use backon::{ConstantBuilder, Retryable};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use thiserror::Error;
use tokio::sync::watch;
use tokio::time::Instant;

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
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,
    /// How long the leader keeps leading without a successful renew.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often the leader renews and a standby tries to take over.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
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

/// A duration flag: `15s`, `1m30s`, `500ms`, ISO 8601 (`PT15S`), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let signed = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            return Duration::try_from_secs_f64(secs)
                .map_err(|_| format!("{s:?} is too long a duration"));
        }
        Ok(_) => return Err(format!("{s:?} is not a duration")),
        Err(_) => s
            .parse::<jiff::SignedDuration>()
            .map_err(|e| format!("{s:?} is not a duration (like 15s, 1m, 500ms): {e}"))?,
    };
    Duration::try_from(signed).map_err(|_| format!("{s:?} is negative"))
}

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
    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX)
    }
}

/// client-go's jitter factor: a standby retries after 1 to 1.2 retry periods.
const JITTER: f64 = 1.2;

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

/// What an elector publishes to its [`Leadership`]s.
#[derive(Clone, Copy, Debug, PartialEq)]
struct State {
    /// When the last successful acquire or renew was *sent*, while this replica holds the Lease.
    renewed: Option<Instant>,
    /// Another holder (or nobody: released, deleted) was seen in the Lease after this replica
    /// led: someone else may have written meanwhile, so this replica must not lead again.
    deposed: bool,
}

impl State {
    /// Until when this replica may believe it leads.
    fn leading_until(&self, renew_deadline: Duration) -> Option<Instant> {
        self.renewed.map(|r| r + renew_deadline)
    }
}

/// Whether this replica leads. Clones are cheap and all see the same elector.
#[derive(Clone, Debug)]
pub struct Leadership {
    mode: Mode,
}

#[derive(Clone, Debug)]
enum Mode {
    Always,
    Elected {
        rx: watch::Receiver<State>,
        renew_deadline: Duration,
    },
}

impl Leadership {
    /// Leads, always: for a single replica (`--leader-elect=false`) and for tests.
    pub fn always() -> Self {
        Self { mode: Mode::Always }
    }

    /// True while the last successful renew started less than the renew deadline ago. Turns
    /// false on its own when renewing stops, whatever became of the election task.
    pub fn is_leader(&self) -> bool {
        match &self.mode {
            Mode::Always => true,
            Mode::Elected { rx, renew_deadline } => rx
                .borrow()
                .leading_until(*renew_deadline)
                .is_some_and(|until| Instant::now() < until),
        }
    }

    /// Resolves once this replica leads (at once if it does). Never resolves after the elector
    /// has stopped without leading.
    pub async fn wait_leader(&mut self) {
        loop {
            if self.is_leader() {
                return;
            }
            let Mode::Elected { rx, .. } = &mut self.mode else {
                return;
            };
            if rx.changed().await.is_err() {
                // The elector is gone: nobody will renew any more.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once this replica does not lead (at once if it does not): when it loses the
    /// Lease, when it releases it, or when the renew deadline passes without a renew, also if
    /// the election task is stuck or gone. Never resolves with [`Leadership::always`].
    ///
    /// Every poll first checks the deadline on the clock itself, so that in a `biased` select
    /// it wins over work polled after it even when the timer has not fired yet (a process
    /// resumed after being stopped past its deadline runs its tasks before its timers).
    pub async fn lost(&mut self) {
        let now = self.clone();
        let ended = self.ended();
        let mut ended = std::pin::pin!(ended);
        std::future::poll_fn(|cx| {
            if now.is_leader() {
                ended.as_mut().poll(cx)
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await
    }

    /// [`Self::lost`] as the elector's news and the timer tell it.
    async fn ended(&mut self) {
        let Mode::Elected { rx, renew_deadline } = &mut self.mode else {
            return std::future::pending().await;
        };
        loop {
            let Some(until) = rx.borrow_and_update().leading_until(*renew_deadline) else {
                return;
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    tokio::time::sleep_until(until).await;
                    return;
                },
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }
}

impl Leadership {
    /// Resolves once this replica has led and another holder has been seen in the Lease since,
    /// or once the elector is gone: what a binary waits on to exit. Never resolves with
    /// [`Leadership::always`].
    ///
    /// A leader that only missed its renew deadline (the apiserver down or unreachable) is not
    /// deposed: it stops writing ([`Self::is_leader`] turns false) and keeps its stores, and
    /// leads again when it renews the Lease unchanged. That is safe because a renew is
    /// preconditioned on the `resourceVersion` read with our identity as holder, and any other
    /// replica must write its own identity into the Lease to lead; exiting instead would only
    /// throw the stores away and hand the Lease to a fresh process a lease duration later.
    pub async fn deposed(&mut self) {
        let Mode::Elected { rx, .. } = &mut self.mode else {
            return std::future::pending().await;
        };
        loop {
            if rx.borrow_and_update().deposed {
                return;
            }
            if rx.changed().await.is_err() {
                // The elector is gone: nobody will renew any more.
                return;
            }
        }
    }

    /// A tower layer for a hub client that refuses every request that could change something
    /// (any method but `GET`, `HEAD` and `OPTIONS`) while this replica does not lead. The check
    /// runs as the request is handed to the connection, after any wait in a rate limiter
    /// layered outside it (its wait is in `poll_ready`), so a write planned while leading and
    /// held up until after the lease ran out is not sent. Each retry is a new request and is
    /// checked again. A refused request fails with [`NotLeader`] (see [`is_not_leader`]).
    ///
    /// The elector's own client must not carry it (it could never take the Lease), nor a client
    /// whose `POST`s write nothing a standby may not send (TokenReviews, SubjectAccessReviews).
    pub fn write_gate(&self) -> WriteGateLayer {
        WriteGateLayer {
            leadership: self.clone(),
        }
    }
}

/// A request refused by [`Leadership::write_gate`]: this replica does not lead.
#[derive(Debug, Error)]
#[error("not the leader: {method} {path} not sent")]
pub struct NotLeader {
    pub method: String,
    pub path: String,
}

/// Whether a client error is a [`NotLeader`] refusal (never worth a retry).
pub fn is_not_leader(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Service(inner) if inner.is::<NotLeader>())
}

/// See [`Leadership::write_gate`].
#[derive(Clone, Debug)]
pub struct WriteGateLayer {
    leadership: Leadership,
}

impl<S> tower::Layer<S> for WriteGateLayer {
    type Service = WriteGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteGate {
            inner,
            leadership: self.leadership.clone(),
        }
    }
}

/// The service [`WriteGateLayer`] makes.
#[derive(Clone, Debug)]
pub struct WriteGate<S> {
    inner: S,
    leadership: Leadership,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for WriteGate<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: From<NotLeader> + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let reads = matches!(
            *req.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        if reads || self.leadership.is_leader() {
            return Box::pin(self.inner.call(req));
        }
        let refused = NotLeader {
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
        };
        tracing::warn!(method = %refused.method, path = %refused.path, "not the leader: write refused");
        Box::pin(std::future::ready(Err(refused.into())))
    }
}

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
    /// [`default_identity`]). Fails when the timings break client-go's rules.
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

    fn ts(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).unwrap()
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
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("PT2S"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("NaN").is_err());
        assert!(parse_duration("").is_err());
    }

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

    #[tokio::test(start_paused = true)]
    async fn leadership_ends_at_the_renew_deadline_without_the_elector() {
        let (tx, rx) = watch::channel(State {
            renewed: None,
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        assert!(!l.is_leader());
        let start = Instant::now();
        tx.send_replace(State {
            renewed: Some(start),
            deposed: false,
        });
        l.wait_leader().await;
        assert!(l.is_leader());
        // The elector vanishes without a word (its task aborted): leadership still ends on time.
        drop(tx);
        l.lost().await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(!l.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn lost_follows_renewals_and_step_down() {
        let start = Instant::now();
        let (tx, rx) = watch::channel(State {
            renewed: Some(start),
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        let renewer = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                tx.send_replace(State {
                    renewed: Some(Instant::now()),
                    deposed: false,
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send_replace(State {
                renewed: None,
                deposed: false,
            });
            tx
        });
        l.lost().await;
        // Three renewals two seconds apart, then a step-down one second later.
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        drop(renewer.await.unwrap());
    }

    /// Missing the renew deadline (the apiserver down) ends leadership but does not depose:
    /// only another holder seen in the Lease, or the elector gone, does.
    #[tokio::test(start_paused = true)]
    async fn deposed_only_by_another_holder_or_a_gone_elector() {
        let (tx, rx) = watch::channel(State {
            renewed: Some(Instant::now()),
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        l.lost().await;
        assert!(!l.is_leader());
        let mut waiting = l.clone();
        let early = tokio::time::timeout(Duration::from_secs(60), waiting.deposed()).await;
        assert!(early.is_err(), "deposed by a missed renew deadline");
        tx.send_replace(State {
            renewed: Some(Instant::now()),
            deposed: false,
        });
        assert!(l.is_leader(), "leads again after renewing the same Lease");
        tx.send_replace(State {
            renewed: None,
            deposed: true,
        });
        l.deposed().await;
        let mut gone = l.clone();
        drop(tx);
        gone.deposed().await;
    }

    /// A process stopped (SIGSTOP) past its renew deadline runs its tasks before its timer
    /// driver notices: `lost()` must see the deadline on the clock, not wait for the timer.
    #[tokio::test]
    async fn lost_sees_the_deadline_before_the_timer_fires() {
        let (_tx, rx) = watch::channel(State {
            renewed: Some(Instant::now()),
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_millis(50),
            },
        };
        let mut lost = std::pin::pin!(l.lost());
        assert!(futures::poll!(lost.as_mut()).is_pending());
        // Blocks the runtime's only thread, as a stopped process is: no timer is processed.
        std::thread::sleep(Duration::from_millis(100));
        assert!(futures::poll!(lost.as_mut()).is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn always_leads() {
        let mut l = Leadership::always();
        assert!(l.is_leader());
        l.wait_leader().await;
        let lost = tokio::time::timeout(Duration::from_secs(3600), l.lost()).await;
        assert!(lost.is_err());
    }

    #[test]
    fn identities_are_unique() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
