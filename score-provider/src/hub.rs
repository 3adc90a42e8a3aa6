//! The hub client, built from a kubeconfig file and rebuilt when that file or the files it
//! names change: OCM's registration agent rotates the add-on's client certificate in the
//! mounted `<addon>-hub-kubeconfig` secret before it expires, and the agent must go on with
//! the new one without a restart. The following is `ocm_runtime`'s
//! ([`KubeconfigClient`], which any binary can use); this module adds the clock.
//!
//! The client also keeps the hub's time ([`HubClock`]): `validUntil` is read against the hub's
//! clock, so a spoke whose own clock is off must not write it from that clock.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::task::{Context, Poll};

use jiff::{SignedDuration, Timestamp};
use kube::client::ClientBuilder;
use ocm_runtime::client::ClientError;
use ocm_runtime::client::follow::{FollowError, KubeconfigClient};
use parking_lot::Mutex;
use tokio::time::Instant;

/// A hub client that follows its kubeconfig ([`KubeconfigClient`]), with the hub's clock
/// read from its responses. Clones share both.
#[derive(Clone)]
pub struct HubClient {
    kubeconfig: KubeconfigClient,
    /// Shared by every client built from the kubeconfig: a rotation changes the credentials,
    /// not the hub.
    clock: HubClock,
}

impl HubClient {
    /// Reads `path` (relative certificate, key and token paths are resolved against its
    /// folder, as kubectl does) and builds the client.
    pub async fn load(path: impl Into<PathBuf>, user_agent: &str) -> Result<Self, FollowError> {
        let clock = HubClock::from_responses();
        let (layer_clock, user_agent) = (clock.clone(), user_agent.to_owned());
        let kubeconfig = KubeconfigClient::load_with(path, move |config| {
            client_with_clock(config, &user_agent, &layer_clock)
        })
        .await?;
        Ok(Self { kubeconfig, clock })
    }

    /// A client from a ready configuration (no file to follow): for providers that run with
    /// the hub's own in-cluster identity. Their clock is the hub's.
    pub fn fixed(client: kube::Client) -> Self {
        Self {
            kubeconfig: KubeconfigClient::fixed(client),
            clock: HubClock::local(),
        }
    }

    /// The current client.
    pub fn client(&self) -> kube::Client {
        self.kubeconfig.client()
    }

    /// The hub apiserver's URL the kubeconfig names (empty for a [`HubClient::fixed`] client).
    pub fn server(&self) -> String {
        self.kubeconfig.server()
    }

    /// The hub's time as this client last saw it.
    pub fn clock(&self) -> &HubClock {
        &self.clock
    }

    /// The kubeconfig followed, and the client built from it.
    pub fn kubeconfig(&self) -> &KubeconfigClient {
        &self.kubeconfig
    }

    /// Rebuilds the client when the kubeconfig or a file it names changed; `Ok(true)` when it
    /// did. A file caught mid-rotation (unreadable, or a certificate without its key) is an
    /// error and the old client stays: the next check tries again.
    pub async fn reload_if_changed(&self) -> Result<bool, FollowError> {
        self.kubeconfig.reload_if_changed().await
    }
}

/// `ocm_runtime::client::client_with` (no rate limit: one agent writes a few objects a
/// minute) with the clock's layer in the stack.
fn client_with_clock(
    mut config: kube::Config,
    user_agent: &str,
    clock: &HubClock,
) -> Result<kube::Client, ClientError> {
    let agent = http::HeaderValue::from_str(user_agent)
        .map_err(|_| ClientError::UserAgent(user_agent.to_owned()))?;
    config.headers.push((http::header::USER_AGENT, agent));
    let server = config.cluster_url.to_string();
    let client = ClientBuilder::try_from(config)?
        .with_layer(&clock.layer())
        .build();
    tracing::info!(%server, user_agent, "hub client, clock taken from its responses");
    Ok(client)
}

/// The hub's time, learnt from the `Date` header of the hub's responses and carried between
/// them by the monotonic clock. Clones share it.
///
/// Why the `Date` header: every response carries it (so no request and no permission is
/// added), the hub's apiserver sets it from its own clock, and the agent's writes come back
/// with it, so every write re-measures it. Its resolution is one second, as is `validUntil`'s.
///
/// Why the monotonic clock: the local wall clock may be stepped while the agent runs (NTP, an
/// administrator, a resumed VM), and nothing tells the process. The hub's time is kept as
/// "hub time minus monotonic time", which no step of the local wall clock moves; the wall
/// clock is read only to report how far it is from the hub's ([`HubClock::offset`]).
///
/// Each response bounds that difference: the hub stamped it somewhere between sending and
/// receiving, at a time between `Date` and `Date + 1 s` (the header drops the fraction). The
/// bounds of successive responses are intersected, so the estimate narrows below the header's
/// second; when they no longer meet (the monotonic clock drifted from the hub's, or the hub's
/// clock was stepped), the newest response's bounds replace them.
#[derive(Clone)]
pub struct HubClock {
    inner: Arc<ClockState>,
}

struct ClockState {
    /// The monotonic origin of the bounds.
    base: Instant,
    /// Hub time minus monotonic time since `base` (`None` until the first response).
    bounds: Mutex<Option<Bounds>>,
    /// The offset last logged, so that the log says when it moves, not at every response.
    logged_ms: AtomicI64,
    /// The local clock is the hub's (a provider running on the hub).
    local: bool,
    /// Said once that a response came without a usable `Date`.
    warned: AtomicBool,
}

/// Hub time minus monotonic time since [`ClockState::base`], in nanoseconds: at least `low`,
/// less than `high`; `offset` is the hub's time minus the local wall clock when last measured.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    low: i128,
    high: i128,
    offset: SignedDuration,
}

impl Bounds {
    fn middle(&self) -> i128 {
        self.low + (self.high - self.low) / 2
    }
}

/// Moves of the offset smaller than this are jitter of the header's one-second resolution.
const LOG_STEP_MS: i64 = 1_000;
const SECOND_NS: i128 = 1_000_000_000;

impl HubClock {
    /// A clock that follows the hub's responses (an agent on a managed cluster).
    pub fn from_responses() -> Self {
        Self::new(false)
    }

    /// The local clock, trusted as the hub's (a provider that runs on the hub).
    pub fn local() -> Self {
        Self::new(true)
    }

    fn new(local: bool) -> Self {
        Self {
            inner: Arc::new(ClockState {
                base: Instant::now(),
                bounds: Mutex::new(None),
                logged_ms: AtomicI64::new(0),
                local,
                warned: AtomicBool::new(false),
            }),
        }
    }

    fn bounds(&self) -> Option<Bounds> {
        *self.inner.bounds.lock()
    }

    /// Monotonic nanoseconds since the base.
    fn mono(&self, at: Instant) -> i128 {
        i128::try_from(at.saturating_duration_since(self.inner.base).as_nanos())
            .unwrap_or(i128::MAX)
    }

    fn at(&self, hub_minus_mono: i128, mono: Instant) -> Timestamp {
        let ns = hub_minus_mono.saturating_add(self.mono(mono));
        Timestamp::from_nanosecond(ns).unwrap_or(if ns < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        })
    }

    /// Hub time minus local wall time when the hub last answered; `None` before it has.
    pub fn offset(&self) -> Option<SignedDuration> {
        if self.inner.local {
            return Some(SignedDuration::ZERO);
        }
        self.bounds().map(|b| b.offset)
    }

    /// Whether the time is known to be the hub's (a response was seen, or the clock is local).
    pub fn synced(&self) -> bool {
        self.inner.local || self.bounds().is_some()
    }

    /// The hub's time now, best estimate (the local wall time until the hub has answered).
    pub fn now(&self) -> Timestamp {
        self.now_at(Instant::now())
    }

    /// [`HubClock::now`] at monotonic time `at`.
    pub fn now_at(&self, at: Instant) -> Timestamp {
        match self.bounds().filter(|_| !self.inner.local) {
            Some(b) => self.at(b.middle(), at),
            None => Timestamp::now(),
        }
    }

    /// The earliest the hub's clock can read at monotonic time `at`: a time counted from it
    /// is never later by the hub's clock than meant, whatever the header's resolution and
    /// the round trip left unknown.
    pub fn earliest_at(&self, at: Instant) -> Timestamp {
        match self.bounds().filter(|_| !self.inner.local) {
            Some(b) => self.at(b.low, at),
            None => Timestamp::now(),
        }
    }

    /// A response sent at monotonic time `sent`, received at `received` (when the local wall
    /// clock read `wall`), said `Date: date`.
    pub fn observe(&self, date: Timestamp, sent: Instant, received: Instant, wall: Timestamp) {
        if self.inner.local {
            return;
        }
        let date_ns = date.as_nanosecond();
        let low = date_ns.saturating_sub(self.mono(received));
        let high = date_ns
            .saturating_add(SECOND_NS)
            .saturating_sub(self.mono(sent));
        let (previous, offset) = {
            let mut guard = self.inner.bounds.lock();
            let previous = *guard;
            let (low, high) = match previous {
                Some(p) if p.low.max(low) < p.high.min(high) => (p.low.max(low), p.high.min(high)),
                _ => (low, high),
            };
            let mut next = Bounds {
                low,
                high,
                offset: SignedDuration::ZERO,
            };
            let hub = self.at(next.middle(), received);
            next.offset = hub.duration_since(wall);
            *guard = Some(next);
            (previous, next.offset)
        };
        let offset_ms = i64::try_from(offset.as_millis()).unwrap_or(i64::MAX);
        let logged = self.inner.logged_ms.load(Ordering::Relaxed);
        if previous.is_none() || offset_ms.abs_diff(logged) > LOG_STEP_MS.unsigned_abs() {
            self.inner.logged_ms.store(offset_ms, Ordering::Relaxed);
            let offset_seconds = offset.as_secs_f64();
            if offset_ms.unsigned_abs() > LOG_STEP_MS.unsigned_abs() {
                tracing::warn!(
                    offset_seconds,
                    "the local clock differs from the hub's; scores are timed by the hub's"
                );
            } else {
                tracing::info!(offset_seconds, "hub clock offset");
            }
        }
    }

    fn observe_header(&self, value: Option<&http::HeaderValue>, sent: Instant) {
        let received = Instant::now();
        let wall = Timestamp::now();
        let date = value
            .and_then(|v| v.to_str().ok())
            .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
            .map(|z| z.timestamp());
        match date {
            Some(date) => self.observe(date, sent, received, wall),
            None => {
                if !self.inner.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(date = ?value, "a hub response without a usable Date header; keeping the last offset");
                }
            }
        }
    }

    /// The tower layer that feeds this clock from the responses of a client.
    pub fn layer(&self) -> HubClockLayer {
        HubClockLayer {
            clock: self.clone(),
        }
    }
}

/// See [`HubClock::layer`].
#[derive(Clone)]
pub struct HubClockLayer {
    clock: HubClock,
}

impl<S> tower::Layer<S> for HubClockLayer {
    type Service = HubClockService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HubClockService {
            inner,
            clock: self.clock.clone(),
        }
    }
}

#[derive(Clone)]
pub struct HubClockService<S> {
    inner: S,
    clock: HubClock,
}

impl<S, Req, Body> tower::Service<Req> for HubClockService<S>
where
    S: tower::Service<Req, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let sent = Instant::now();
        let clock = self.clock.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            clock.observe_header(response.headers().get(http::header::DATE), sent);
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at_ms(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("timestamp")
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[tokio::test(start_paused = true)]
    async fn the_offset_is_the_hub_minus_the_local_time() {
        let clock = HubClock::from_responses();
        assert!(!clock.synced());
        let t0 = Instant::now();
        // The local clock is 10 minutes behind: the hub said 600 s while we were at 0.2 s.
        clock.observe(at_ms(600_000), t0, t0 + ms(200), at_ms(200));
        assert!(clock.synced());
        // Stamped between 600 s and 601 s, between 0 and 0.2 s after sending: the middle,
        // 600.6 s at reception, minus the wall clock then.
        assert_eq!(clock.offset(), Some(SignedDuration::from_millis(600_400)));
        assert_eq!(clock.now_at(t0 + ms(200)), at_ms(600_600));
        // At the latest, stamped as the response came back, at 600 s.
        assert_eq!(clock.earliest_at(t0 + ms(200)), at_ms(600_000));
        // 10 minutes ahead: negative (and these bounds do not meet the first ones).
        let t1 = t0 + Duration::from_secs(1);
        clock.observe(at_ms(0), t1, t1, at_ms(600_000));
        assert_eq!(clock.offset(), Some(SignedDuration::from_millis(-599_500)));
    }

    /// The local wall clock steps, the monotonic one does not: the hub's time goes on
    /// unmoved, and the next response reports the new offset.
    #[tokio::test(start_paused = true)]
    async fn a_step_of_the_wall_clock_does_not_move_the_hub_time() {
        for step_ms in [-3_600_000, 3_600_000, -120_000, 400 * 86_400_000] {
            let clock = HubClock::from_responses();
            let t0 = Instant::now();
            clock.observe(at_ms(0), t0, t0, at_ms(0));
            assert_eq!(clock.offset(), Some(SignedDuration::from_millis(500)));
            tokio::time::advance(Duration::from_secs(30)).await;
            let before = clock.now();
            assert_eq!(before, at_ms(30_500), "step {step_ms} ms");
            // The wall clock now reads 30 s + step; the hub says 30 s.
            let t = Instant::now();
            clock.observe(at_ms(30_000), t, t, at_ms(30_000 + step_ms));
            assert_eq!(
                clock.offset(),
                Some(SignedDuration::from_millis(500 - step_ms)),
                "step {step_ms} ms"
            );
            assert_eq!(clock.now(), before, "step {step_ms} ms");
            tokio::time::advance(Duration::from_secs(5)).await;
            assert_eq!(clock.now(), at_ms(35_500), "step {step_ms} ms");
        }
    }

    /// Responses stamped at different fractions of the hub's second narrow the estimate
    /// below the header's resolution; one that no longer fits (the hub's clock was stepped)
    /// starts again from its own bounds.
    #[tokio::test(start_paused = true)]
    async fn successive_responses_narrow_the_hub_time_and_a_hub_step_resets_it() {
        let clock = HubClock::from_responses();
        let t0 = Instant::now();
        // The truth: the hub's clock reads at_ms(300) at t0. Instant answers (no round trip).
        let truth =
            |t: Instant| at_ms(300 + i64::try_from(t.duration_since(t0).as_millis()).expect("ms"));
        let date =
            |t: Instant| Timestamp::from_second(truth(t).as_second()).expect("a whole second");
        for after in [0, 800, 1_500] {
            let t = t0 + ms(after);
            clock.observe(date(t), t, t, at_ms(0));
        }
        let t = t0 + ms(2_000);
        let error = clock.now_at(t).duration_since(truth(t));
        assert!(
            error.abs() <= SignedDuration::from_millis(100),
            "{error:?} off after three responses"
        );
        assert!(clock.earliest_at(t) <= truth(t));
        assert!(clock.earliest_at(t) >= truth(t) - SignedDuration::from_millis(500));
        // The hub's clock steps an hour back.
        let t = t0 + ms(3_000);
        let stepped = truth(t) - SignedDuration::from_hours(1);
        clock.observe(
            Timestamp::from_second(stepped.as_second()).expect("a whole second"),
            t,
            t,
            at_ms(0),
        );
        let error = clock.now_at(t).duration_since(stepped);
        assert!(
            error.abs() <= SignedDuration::from_secs(1),
            "{error:?} off the stepped hub clock"
        );
    }

    #[test]
    fn a_local_clock_ignores_responses() {
        let clock = HubClock::local();
        assert_eq!(clock.offset(), Some(SignedDuration::ZERO));
        clock.observe(at_ms(600_000), Instant::now(), Instant::now(), at_ms(0));
        assert_eq!(clock.offset(), Some(SignedDuration::ZERO));
        let skew = clock.now().duration_since(Timestamp::now()).abs();
        assert!(skew < SignedDuration::from_secs(1), "{skew:?}");
    }

    #[test]
    fn an_http_date_is_read_and_a_bad_one_keeps_the_offset() {
        let clock = HubClock::from_responses();
        let date = http::HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT");
        clock.observe_header(Some(&date), Instant::now());
        let offset = clock.offset().expect("a sample");
        assert!(offset < SignedDuration::from_hours(-24 * 365), "{offset:?}");
        let bad = http::HeaderValue::from_static("yesterday");
        clock.observe_header(Some(&bad), Instant::now());
        clock.observe_header(None, Instant::now());
        assert_eq!(clock.offset(), Some(offset));
    }
}
