//! The hub client, built from a kubeconfig file and rebuilt when that file or the files it
//! names change: OCM's registration agent rotates the add-on's client certificate in the
//! mounted `<addon>-hub-kubeconfig` secret before it expires, and the agent must go on with
//! the new one without a restart.
//!
//! The client also keeps the hub's time ([`HubClock`]): `validUntil` is read against the hub's
//! clock, so a spoke whose own clock is off must not write it from that clock.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use jiff::{SignedDuration, Timestamp};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use ocm_runtime::client::ClientError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum HubError {
    #[error("cannot read the hub kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot read {path}, named by the hub kubeconfig: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot build the hub client from {path}: {source}")]
    Client {
        path: String,
        #[source]
        source: ClientError,
    },
}

/// A hub client that follows its kubeconfig. Clones share it.
#[derive(Clone)]
pub struct HubClient {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    user_agent: String,
    current: RwLock<Loaded>,
    /// Shared by every client built from the kubeconfig: a rotation changes the credentials,
    /// not the hub.
    clock: HubClock,
}

struct Loaded {
    client: kube::Client,
    /// The apiserver's URL (empty for a [`HubClient::fixed`] client).
    server: String,
    fingerprint: u64,
    /// Rebuilds so far.
    generation: u64,
}

impl HubClient {
    /// Reads `path` (relative certificate, key and token paths are resolved against its
    /// folder, as kubectl does) and builds the client.
    pub async fn load(path: impl Into<PathBuf>, user_agent: &str) -> Result<Self, HubError> {
        let path = path.into();
        let clock = HubClock::from_responses();
        let (client, server, fingerprint) = build(&path, user_agent, &clock).await?;
        tracing::info!(kubeconfig = %path.display(), "hub client ready");
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                user_agent: user_agent.to_owned(),
                current: RwLock::new(Loaded {
                    client,
                    server,
                    fingerprint,
                    generation: 0,
                }),
                clock,
            }),
        })
    }

    /// A client from a ready configuration (no file to follow): for providers that run with
    /// the hub's own in-cluster identity. Their clock is the hub's.
    pub fn fixed(client: kube::Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: PathBuf::new(),
                user_agent: String::new(),
                current: RwLock::new(Loaded {
                    client,
                    server: String::new(),
                    fingerprint: 0,
                    generation: 0,
                }),
                clock: HubClock::local(),
            }),
        }
    }

    /// The current client.
    pub fn client(&self) -> kube::Client {
        self.read(|l| l.client.clone())
    }

    /// The hub apiserver's URL the kubeconfig names (empty for a [`HubClient::fixed`] client).
    pub fn server(&self) -> String {
        self.read(|l| l.server.clone())
    }

    /// The hub's time as this client last saw it.
    pub fn clock(&self) -> &HubClock {
        &self.inner.clock
    }

    fn read<T>(&self, f: impl FnOnce(&Loaded) -> T) -> T {
        // A poisoned lock still holds a whole client: the writer only swaps complete values.
        let guard = self.inner.current.read().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    }

    /// Rebuilds the client when the kubeconfig or a file it names changed; `Ok(true)` when it
    /// did. A file caught mid-rotation (unreadable, or a certificate without its key) is an
    /// error and the old client stays: the next check tries again.
    pub async fn reload_if_changed(&self) -> Result<bool, HubError> {
        if self.inner.path.as_os_str().is_empty() {
            return Ok(false);
        }
        let fingerprint = fingerprint(&self.inner.path)?;
        if fingerprint == self.read(|l| l.fingerprint) {
            return Ok(false);
        }
        let (client, server, fingerprint) =
            build(&self.inner.path, &self.inner.user_agent, &self.inner.clock).await?;
        let mut guard = self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner());
        guard.client = client;
        guard.server = server;
        guard.fingerprint = fingerprint;
        guard.generation += 1;
        tracing::info!(
            kubeconfig = %self.inner.path.display(),
            generation = guard.generation,
            "hub credentials changed: new hub client"
        );
        Ok(true)
    }
}

async fn build(
    path: &Path,
    user_agent: &str,
    clock: &HubClock,
) -> Result<(kube::Client, String, u64), HubError> {
    // The fingerprint first: if the files change while we build, the next check sees it.
    let fingerprint = fingerprint(path)?;
    let named = |source| HubError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(named)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(named)?;
    let server = config.cluster_url.to_string();
    let client =
        client_with_clock(config, user_agent, clock).map_err(|source| HubError::Client {
            path: path.display().to_string(),
            source,
        })?;
    Ok((client, server, fingerprint))
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

/// A hash of the kubeconfig and of every file it names (certificate authority, client
/// certificate and key, token file), so that a rotation of any of them is seen.
fn fingerprint(path: &Path) -> Result<u64, HubError> {
    let mut hasher = std::hash::DefaultHasher::new();
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| HubError::File {
            path: p.display().to_string(),
            source,
        })
    };
    read(path)?.hash(&mut hasher);
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| HubError::Kubeconfig {
        path: path.display().to_string(),
        source,
    })?;
    let mut files: Vec<&str> = Vec::new();
    for cluster in kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
    {
        files.extend(cluster.certificate_authority.as_deref());
    }
    for auth in kubeconfig
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
    {
        files.extend(auth.client_certificate.as_deref());
        files.extend(auth.client_key.as_deref());
        files.extend(auth.token_file.as_deref());
    }
    for file in files {
        read(Path::new(file))?.hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// The hub's time: the local clock plus the offset the `Date` header of the hub's last response
/// showed. Clones share it.
///
/// Why the `Date` header: every response carries it (so no request and no permission is
/// added), the hub's apiserver sets it from its own clock, and the agent's writes come back
/// with it. Its resolution is one second, as is `validUntil`'s.
#[derive(Clone)]
pub struct HubClock {
    inner: Arc<ClockState>,
}

struct ClockState {
    /// Hub time minus local time, in milliseconds ([`NO_SAMPLE`] until the first response).
    offset_ms: AtomicI64,
    /// The offset last logged, so that the log says when it moves, not at every response.
    logged_ms: AtomicI64,
    /// The local clock is the hub's (a provider running on the hub).
    local: bool,
    /// Said once that a response came without a usable `Date`.
    warned: AtomicBool,
}

const NO_SAMPLE: i64 = i64::MIN;
/// Moves of the offset smaller than this are jitter of the header's one-second resolution.
const LOG_STEP_MS: i64 = 1_000;

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
                offset_ms: AtomicI64::new(if local { 0 } else { NO_SAMPLE }),
                logged_ms: AtomicI64::new(0),
                local,
                warned: AtomicBool::new(false),
            }),
        }
    }

    /// Hub time minus local time; `None` before the hub has answered.
    pub fn offset(&self) -> Option<SignedDuration> {
        match self.inner.offset_ms.load(Ordering::Relaxed) {
            NO_SAMPLE => None,
            ms => Some(SignedDuration::from_millis(ms)),
        }
    }

    /// Whether the time is known to be the hub's (a response was seen, or the clock is local).
    pub fn synced(&self) -> bool {
        self.offset().is_some()
    }

    /// The hub's time now (the local time until the hub has answered).
    pub fn now(&self) -> Timestamp {
        let local = Timestamp::now();
        self.offset()
            .and_then(|o| local.checked_add(o).ok())
            .unwrap_or(local)
    }

    /// A response sent at local time `sent`, received at `received`, said `Date: date`.
    /// The hub stamped it somewhere between `date` and `date + 1 s` (the header drops the
    /// fraction) while the local clock was somewhere between `sent` and `received`: the
    /// middles of both are the estimate.
    pub fn observe(&self, date: Timestamp, sent: Timestamp, received: Timestamp) {
        if self.inner.local {
            return;
        }
        let hub_ms = date.as_millisecond().saturating_add(500);
        let local_ms = sent.as_millisecond() / 2 + received.as_millisecond() / 2;
        let offset = hub_ms.saturating_sub(local_ms);
        let previous = self.inner.offset_ms.swap(offset, Ordering::Relaxed);
        let logged = self.inner.logged_ms.load(Ordering::Relaxed);
        if previous == NO_SAMPLE || offset.abs_diff(logged) > LOG_STEP_MS.unsigned_abs() {
            self.inner.logged_ms.store(offset, Ordering::Relaxed);
            let offset_seconds = offset as f64 / 1000.0;
            if offset.unsigned_abs() > LOG_STEP_MS.unsigned_abs() {
                tracing::warn!(
                    offset_seconds,
                    "the local clock differs from the hub's; scores are timed by the hub's"
                );
            } else {
                tracing::info!(offset_seconds, "hub clock offset");
            }
        }
    }

    fn observe_header(&self, value: Option<&http::HeaderValue>, sent: Timestamp) {
        let received = Timestamp::now();
        let date = value
            .and_then(|v| v.to_str().ok())
            .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
            .map(|z| z.timestamp());
        match date {
            Some(date) => self.observe(date, sent, received),
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
        let sent = Timestamp::now();
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
    use super::*;

    fn at_ms(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("timestamp")
    }

    #[test]
    fn the_offset_is_the_hub_minus_the_local_time() {
        let clock = HubClock::from_responses();
        assert!(!clock.synced());
        // The local clock is 10 minutes behind: the hub said 600 s later than we sent.
        clock.observe(at_ms(600_000), at_ms(0), at_ms(200));
        // 600.5 s (the middle of the header's second) minus the middle of the round trip.
        assert_eq!(clock.offset(), Some(SignedDuration::from_millis(600_400)));
        let ahead = clock.now().duration_since(Timestamp::now());
        assert!(
            (SignedDuration::from_secs(599)..=SignedDuration::from_secs(601)).contains(&ahead),
            "{ahead:?}"
        );
        // 10 minutes ahead: negative.
        clock.observe(at_ms(0), at_ms(600_000), at_ms(600_000));
        assert_eq!(clock.offset(), Some(SignedDuration::from_millis(-599_500)));
    }

    #[test]
    fn a_local_clock_ignores_responses() {
        let clock = HubClock::local();
        assert_eq!(clock.offset(), Some(SignedDuration::ZERO));
        clock.observe(at_ms(600_000), at_ms(0), at_ms(0));
        assert_eq!(clock.offset(), Some(SignedDuration::ZERO));
    }

    #[test]
    fn an_http_date_is_read_and_a_bad_one_keeps_the_offset() {
        let clock = HubClock::from_responses();
        let date = http::HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT");
        clock.observe_header(Some(&date), Timestamp::now());
        let offset = clock.offset().expect("a sample");
        assert!(offset < SignedDuration::from_hours(-24 * 365), "{offset:?}");
        let bad = http::HeaderValue::from_static("yesterday");
        clock.observe_header(Some(&bad), Timestamp::now());
        clock.observe_header(None, Timestamp::now());
        assert_eq!(clock.offset(), Some(offset));
    }
}
