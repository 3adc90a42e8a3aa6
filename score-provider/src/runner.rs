//! The refresh loop: recompute every period and soon after changes (debounced), write what
//! changed, back off with jitter while the hub fails (computing all the same, so that the
//! first write after an outage carries current values), follow rotated hub credentials, and
//! keep the health Lease and `/healthz` honest.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use futures::stream::BoxStream;
use ocm_runtime::{Health, Leadership};
use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::hub::HubClient;
use crate::lease::{self, LeaseSettings};
use crate::metrics::{CacheLabel, Metrics, ResultLabel, WhatLabel};
use crate::provider::{Change, ProviderError, ScoreProvider};
use crate::writer::{ScoreWriter, WriteError, WriteSettings, Written};

/// How the loop runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub write: WriteSettings,
    /// A change waits this long before the recompute, so that bursts coalesce (and a change
    /// is reflected within about this long).
    pub debounce: Duration,
    /// How often the hub kubeconfig and its files are checked for rotation.
    pub hub_check_interval: Duration,
    /// Clusters written at once (hub-side providers rate many).
    pub write_concurrency: usize,
    /// The longest wait between attempts while the hub fails (the first is 1 s, then doubling,
    /// with jitter).
    pub backoff_max: Duration,
    /// A pass's writes that take longer count as a hub failure (a connection that hangs in a
    /// network partition would otherwise stall the loop until TCP gives up).
    pub write_timeout: Duration,
}

impl Settings {
    /// Defaults around `write`: debounce 2 s, credentials checked every 10 s, 16 writes at
    /// once, back-off up to 30 s, writes given up after 30 s.
    pub fn new(write: WriteSettings) -> Self {
        Self {
            write,
            debounce: Duration::from_secs(2),
            hub_check_interval: Duration::from_secs(10),
            write_concurrency: 16,
            backoff_max: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Times the health watchdog reads.
#[derive(Default)]
struct Progress {
    /// The last loop pass (alive).
    pass: Option<Instant>,
    /// The last successful recompute (healthy source).
    computed: Option<Instant>,
}

/// A provider with everything around it.
pub struct Runner<P> {
    provider: P,
    hub: HubClient,
    settings: Settings,
    lease: Option<(kube::Client, LeaseSettings)>,
    metrics: Metrics,
    health: Health,
    progress: Arc<Mutex<Progress>>,
    /// Writes happen only while this leads (a hub-side provider with several replicas).
    leadership: Leadership,
    /// Whether the last pass led: a pass that leads again after not leading re-reads and
    /// renews every object (another replica may have written them meanwhile, and validity
    /// ran down while nobody wrote).
    led: bool,
}

impl<P: ScoreProvider> Runner<P> {
    pub fn new(provider: P, hub: HubClient, settings: Settings) -> Self {
        Self {
            provider,
            hub,
            settings,
            lease: None,
            metrics: Metrics::default(),
            health: Health::new(),
            progress: Arc::default(),
            leadership: Leadership::always(),
            led: true,
        }
    }

    /// Write only while `leadership` leads: a pass does not start its writes otherwise, and
    /// its writes are dropped, mid-flight, the moment leadership ends.
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// Also renew the add-on health Lease through `client` (the managed cluster's).
    pub fn with_lease(mut self, client: kube::Client, settings: LeaseSettings) -> Self {
        self.lease = Some((client, settings));
        self
    }

    /// Count into `metrics` (shared by several runners: a hub scorer runs one per definition
    /// and registers one set).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Alive while the loop turns; ready once a pass wrote everything it had to, and again
    /// after the hub comes back.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Runs until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let watchdog = tokio::spawn(watchdog(
            self.progress.clone(),
            self.health.clone(),
            self.metrics.clone(),
            self.lease.take(),
            self.settings.write.manager.clone(),
            self.settings.write.period,
        ));
        let mut shutdown = pin!(shutdown);
        let mut changes: BoxStream<'static, Change> = self.provider.changes();
        let mut writer = ScoreWriter::new(self.settings.write.clone());
        let mut timers = Timers::new(&self.settings);
        let mut hub_check = tokio::time::interval(self.settings.hub_check_interval);
        hub_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = timers.next_wake();
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                change = changes.next() => match change {
                    Some(c) => {
                        self.metrics.changes.get_or_create(&WhatLabel { what: c.what }).inc();
                        timers.changed(Instant::now());
                    }
                    None => {
                        tracing::warn!("the provider's change stream ended; refreshing on the period only");
                        changes = Box::pin(futures::stream::pending());
                    }
                },
                _ = hub_check.tick() => {
                    if self.reload_hub().await {
                        timers.credentials_changed(Instant::now());
                    }
                }
                () = tokio::time::sleep_until(wake) => {
                    self.pass(&mut writer, &mut timers).await;
                }
            }
        }
        watchdog.abort();
    }

    /// Rebuilds the hub client if its kubeconfig changed; whether it did.
    async fn reload_hub(&self) -> bool {
        match self.hub.reload_if_changed().await {
            Ok(true) => {
                self.metrics.hub_reloads.inc();
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(error = %e, "hub credentials changed but cannot be loaded yet; keeping the current client");
                false
            }
        }
    }

    async fn pass(&mut self, writer: &mut ScoreWriter, timers: &mut Timers) {
        let now = Instant::now();
        let Some(due) = timers.take_due(now) else {
            return;
        };
        self.lock_progress().pass = Some(now);
        let started = std::time::Instant::now();
        let computed = self.provider.compute().await;
        self.metrics
            .compute_seconds
            .observe(started.elapsed().as_secs_f64());
        let computed = match computed {
            Ok(c) => {
                self.count_compute("ok");
                self.lock_progress().computed = Some(Instant::now());
                c
            }
            Err(ProviderError::NotReady(why)) => {
                self.count_compute("not_ready");
                tracing::debug!(why, "provider not ready");
                timers.retry_later(Instant::now());
                return;
            }
            Err(e) => {
                self.count_compute("error");
                tracing::warn!(error = %e, "cannot compute the scores; the hub keeps the last ones until they expire");
                timers.retry_later(Instant::now());
                return;
            }
        };
        if timers.backing_off(now) {
            tracing::debug!(?due, "computed; the write waits for the hub");
            return;
        }
        if !self.leadership.is_leader() {
            tracing::debug!("not the leader: nothing written");
            self.led = false;
            return;
        }
        if !std::mem::replace(&mut self.led, true) {
            writer.forget();
        }
        let client = self.hub.client();
        let clock = self.hub.clock().clone();
        let writes = writer.write_all(&client, &computed, &clock, self.settings.write_concurrency);
        let mut lost = self.leadership.clone();
        let written = tokio::select! {
            // First, so that no write is sent once leadership has ended.
            biased;
            () = lost.lost() => {
                tracing::warn!("lost the leadership: this pass's writes are dropped");
                return;
            }
            r = tokio::time::timeout(self.settings.write_timeout, writes) => r,
        };
        if let Some(offset) = clock.offset() {
            self.metrics.hub_clock_offset.set(offset.as_secs_f64());
        }
        let results = match written {
            Ok(results) => results,
            Err(_) => {
                // What the writer knew of the unfinished clusters is gone: it reads them again
                // (the finished ones' is kept).
                let e = format!("writes took more than {:?}", self.settings.write_timeout);
                let delay = timers.hub_failed(Instant::now(), false);
                self.metrics.hub_backoff.set(1);
                self.health.set_not_ready(format!("hub unavailable: {e}"));
                tracing::warn!(error = %e, retry_in = ?delay, "hub unavailable; computing on, writing when it is back");
                return;
            }
        };
        self.count_known(writer);
        let mut hub_error: Option<WriteError> = None;
        let mut refused = 0usize;
        // The first refusal, for /readyz (a missing CRD, a missing namespace, RBAC).
        let mut first_refusal: Option<String> = None;
        for (cluster, result) in results {
            let label = match &result {
                Ok(Written::Created) => "created",
                Ok(Written::Updated) => "updated",
                Ok(Written::Unchanged) => "unchanged",
                Err(WriteError::Refused(_)) => "refused",
                Err(WriteError::Hub(_)) => "hub_unavailable",
            };
            self.metrics
                .writes
                .get_or_create(&ResultLabel { result: label })
                .inc();
            match result {
                Ok(Written::Unchanged) => {}
                Ok(w) => tracing::debug!(cluster, written = ?w, "scores written"),
                Err(e @ WriteError::Refused(_)) => {
                    refused += 1;
                    if first_refusal.is_none() {
                        first_refusal = Some(format!("{cluster}: {e}"));
                    }
                    tracing::warn!(cluster, error = %e, "cannot write this cluster's scores; trying again at the next refresh");
                }
                Err(e @ WriteError::Hub(_)) => hub_error = Some(e),
            }
        }
        match hub_error {
            Some(e) => {
                // A refused credential may just have been rotated: look before waiting.
                let reloaded = e.is_unauthorized() && self.reload_hub().await;
                let delay = timers.hub_failed(Instant::now(), reloaded);
                self.metrics.hub_backoff.set(1);
                self.health.set_not_ready(format!("hub unavailable: {e}"));
                tracing::warn!(error = %e, retry_in = ?delay, "hub unavailable; computing on, writing when it is back");
            }
            None => {
                if timers.hub_recovered() {
                    // Someone may have changed or deleted the objects meanwhile.
                    writer.forget();
                    self.count_known(writer);
                    tracing::info!("hub writes succeed again");
                }
                self.metrics.hub_backoff.set(0);
                if refused == 0 {
                    self.metrics
                        .last_success
                        .set(jiff::Timestamp::now().as_second());
                    self.health.set_ready(true);
                } else {
                    self.health.set_not_ready(format!(
                        "the hub refused the writes of {refused} cluster(s) of AddOnPlacementScores \
                         (addonplacementscores.cluster.open-cluster-management.io), first {}",
                        first_refusal.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
    }

    fn count_known(&self, writer: &ScoreWriter) {
        self.metrics
            .cache_entries
            .get_or_create(&CacheLabel {
                cache: "writer_known",
            })
            .set(i64::try_from(writer.known_len()).unwrap_or(i64::MAX));
    }

    fn count_compute(&self, result: &'static str) {
        self.metrics
            .computes
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    fn lock_progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock()
    }
}

/// When the next pass is due, and why.
struct Timers {
    period: Duration,
    debounce: Duration,
    next_refresh: Instant,
    debounced: Option<Instant>,
    retry: Option<Instant>,
    backoff_max: Duration,
    backoff: Option<backon::ExponentialBackoff>,
}

/// What made a pass due (for logs).
#[derive(Debug, Clone, Copy)]
struct Due {
    periodic: bool,
    changed: bool,
    retry: bool,
}

impl Timers {
    fn new(settings: &Settings) -> Self {
        Self {
            period: settings.write.period,
            debounce: settings.debounce,
            // The first pass right away.
            next_refresh: Instant::now(),
            debounced: None,
            retry: None,
            backoff_max: settings.backoff_max,
            backoff: None,
        }
    }

    fn next_wake(&self) -> Instant {
        [Some(self.next_refresh), self.debounced, self.retry]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.next_refresh)
    }

    /// A change starts the debounce window unless one is open: changes in it coalesce.
    fn changed(&mut self, now: Instant) {
        self.debounced.get_or_insert(now + self.debounce);
    }

    /// New credentials: a write waiting for the hub may try again at once.
    fn credentials_changed(&mut self, now: Instant) {
        if self.retry.is_some() {
            self.retry = Some(now);
        }
    }

    fn take_due(&mut self, now: Instant) -> Option<Due> {
        let due = Due {
            periodic: self.next_refresh <= now,
            changed: self.debounced.is_some_and(|d| d <= now),
            retry: self.retry.is_some_and(|r| r <= now),
        };
        if due.periodic {
            self.next_refresh = now + self.period;
        }
        if due.changed {
            self.debounced = None;
        }
        (due.periodic || due.changed || due.retry).then_some(due)
    }

    fn backing_off(&self, now: Instant) -> bool {
        self.retry.is_some_and(|r| r > now)
    }

    /// The hub failed: the next write waits (1 s, doubling, jittered, at most
    /// `backoff_max`), or not at all when the credentials were just replaced.
    fn hub_failed(&mut self, now: Instant, reloaded: bool) -> Duration {
        let max = self.backoff_max;
        let backoff = self.backoff.get_or_insert_with(|| {
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_secs(1).min(max))
                .with_max_delay(max)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build()
        });
        let delay = if reloaded {
            Duration::ZERO
        } else {
            backoff.next().unwrap_or(max)
        };
        self.retry = Some(now + delay);
        delay
    }

    /// A retry came due but nothing was written (the compute failed): try again after the
    /// next back-off step, not at once (the loop would spin on a past deadline).
    fn retry_later(&mut self, now: Instant) {
        if self.retry.is_some_and(|r| r <= now) {
            self.hub_failed(now, false);
        }
    }

    /// The hub answered; whether it had been failing.
    fn hub_recovered(&mut self) -> bool {
        self.backoff = None;
        self.retry.take().is_some()
    }
}

/// Every few seconds: `/healthz` fails when the loop has stopped turning; the health Lease is
/// renewed (once per its period) only while the provider computes successfully.
async fn watchdog(
    progress: Arc<Mutex<Progress>>,
    health: Health,
    metrics: Metrics,
    lease: Option<(kube::Client, LeaseSettings)>,
    manager: String,
    period: Duration,
) {
    let check = Duration::from_secs(5).min(period);
    // A pass is due every period; allow two to be missed before calling the loop stuck, and
    // three periods without a successful compute before the Lease lapses.
    let stuck_after = period * 2 + Duration::from_secs(30);
    let stale_after = period * 3;
    let mut last_renewal: Option<Instant> = None;
    let mut tick = tokio::time::interval(check);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    loop {
        tick.tick().await;
        let now = Instant::now();
        let (pass, computed) = {
            let p = progress.lock();
            (p.pass, p.computed)
        };
        if now - pass.unwrap_or(started) > stuck_after {
            health.set_unhealthy("the refresh loop has not run for more than two periods");
        } else {
            health.set_healthy(true);
        }
        let Some((client, settings)) = &lease else {
            continue;
        };
        if last_renewal.is_some_and(|t| now - t < settings.period) {
            continue;
        }
        let fresh = computed.is_some_and(|c| now - c <= stale_after);
        if !fresh {
            if computed.is_some() || now - started > stale_after {
                metrics
                    .lease_renewals
                    .get_or_create(&ResultLabel { result: "skipped" })
                    .inc();
                tracing::warn!(
                    "no successful recompute for three periods: not renewing the health Lease"
                );
                last_renewal = Some(now);
            }
            continue;
        }
        let result = match lease::renew(client, settings, &manager, jiff::Timestamp::now()).await {
            Ok(()) => {
                last_renewal = Some(now);
                "ok"
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %settings.name, namespace = %settings.namespace, "cannot renew the health Lease");
                "error"
            }
        };
        metrics
            .lease_renewals
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timers() -> Timers {
        Timers::new(&Settings::new(WriteSettings {
            score_name: "s".into(),
            ttl: Duration::from_secs(180),
            period: Duration::from_secs(60),
            renew_every: Duration::from_secs(60),
            hysteresis: 0,
            manager: "t".into(),
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_then_debounced_changes_coalesce() {
        let mut t = timers();
        let t0 = Instant::now();
        assert!(
            t.take_due(t0).is_some_and(|d| d.periodic),
            "first pass at once"
        );
        assert!(t.take_due(t0).is_none());
        t.changed(t0 + Duration::from_secs(1));
        t.changed(t0 + Duration::from_secs(2));
        assert_eq!(t.next_wake(), t0 + Duration::from_secs(3));
        let due = t
            .take_due(t0 + Duration::from_secs(3))
            .expect("debounced pass");
        assert!(due.changed && !due.periodic);
        assert_eq!(t.next_wake(), t0 + Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_grows_and_resets() {
        let mut t = timers();
        let t0 = Instant::now();
        let d1 = t.hub_failed(t0, false);
        let d2 = t.hub_failed(t0 + d1, false);
        assert!(d1 >= Duration::from_secs(1) && d1 <= Duration::from_secs(2));
        assert!(d2 >= Duration::from_secs(2), "{d2:?}");
        assert!(t.backing_off(t0));
        // New credentials: retry at once.
        t.credentials_changed(t0);
        assert!(!t.backing_off(t0));
        assert!(t.hub_recovered());
        assert!(!t.hub_recovered());
        let d = t.hub_failed(t0, false);
        assert!(d <= Duration::from_secs(2), "backoff starts over: {d:?}");
        for _ in 0..20 {
            assert!(t.hub_failed(t0, false) <= Duration::from_secs(60));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_due_retry_without_a_write_is_pushed_back() {
        let mut t = timers();
        let t0 = Instant::now();
        let _ = t.take_due(t0);
        let d = t.hub_failed(t0, false);
        let due = t0 + d;
        assert!(t.take_due(due).is_some_and(|d| d.retry));
        // The compute failed: the retry must not stay in the past.
        t.retry_later(due);
        assert!(t.next_wake() > due, "the loop would spin");
        assert!(t.backing_off(due));
    }
}
