//! The hub client, built the same way by every binary: where the configuration comes from,
//! the user agent the apiserver sees (and records as the field manager), and a client-side
//! token bucket so that a burst of work cannot flood the apiserver (client-go's `--kube-api-qps`
//! and `--kube-api-burst`).
//!
//! An agent whose hub credentials are a mounted kubeconfig that OCM rotates follows it with
//! [`follow::KubeconfigClient`] instead.

pub mod follow;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::{Registry, Unit};
use thiserror::Error;
use tokio::time::{Instant, Sleep};

/// Flags for the hub client.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientArgs {
    /// The kubeconfig to use (a list separated by `:` is merged, like kubectl does). Without it:
    /// the in-cluster service account, then `~/.kube/config`.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Requests per second to the apiserver, sustained (client-side token bucket). 0 or less
    /// turns client-side rate limiting off.
    #[arg(long, env = "CLIENT_QPS", default_value_t = 200.0)]
    pub client_qps: f64,
    /// Requests that may go out at once above the sustained rate (the bucket's size).
    #[arg(long, env = "CLIENT_BURST", default_value_t = 400)]
    pub client_burst: u32,
}

impl ClientArgs {
    /// The rate limiter these flags ask for; `None` when `--client-qps` is 0 or less.
    pub fn rate_limiter(&self) -> Result<Option<RateLimiter>, ClientError> {
        if self.client_qps <= 0.0 {
            return Ok(None);
        }
        RateLimiter::new(self.client_qps, self.client_burst).map(Some)
    }
}

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("cannot read the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no Kubernetes configuration: not in a cluster ({in_cluster}) and no usable default kubeconfig ({kubeconfig}); pass --kubeconfig or set KUBECONFIG"
    )]
    NoConfig {
        in_cluster: kube::config::InClusterError,
        kubeconfig: kube::config::KubeconfigError,
    },
    #[error("invalid client rate limit: {0}")]
    RateLimit(String),
    #[error("invalid user agent {0:?}")]
    UserAgent(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// The hub client for `args`, sending `user_agent` (e.g. `placement-scheduler/0.1.0`; the
/// apiserver names the field manager after the part before `/`) and rate limited as the flags
/// say. Logs the server, the QPS and the burst at info.
pub async fn client(args: &ClientArgs, user_agent: &str) -> Result<kube::Client, ClientError> {
    let config = load_config(args.kubeconfig.as_deref()).await?;
    let limiter = args.rate_limiter()?;
    client_with(config, limiter.as_ref(), user_agent)
}

/// The kube configuration from `kubeconfig` (one path, or several separated by `:`), or without
/// one from the in-cluster service account, then the default kubeconfig.
pub async fn load_config(
    kubeconfig: Option<&std::path::Path>,
) -> Result<kube::Config, ClientError> {
    let options = KubeConfigOptions::default();
    match kubeconfig {
        Some(paths) => {
            let mut merged: Option<Kubeconfig> = None;
            // Empty entries are skipped, as kubectl does.
            for path in std::env::split_paths(paths).filter(|p| !p.as_os_str().is_empty()) {
                let named = |source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                };
                let file = Kubeconfig::read_from(&path).map_err(named)?;
                merged = Some(match merged {
                    None => file,
                    Some(m) => m.merge(file).map_err(named)?,
                });
            }
            let Some(kubeconfig) = merged else {
                return Err(ClientError::Kubeconfig {
                    path: paths.display().to_string(),
                    source: kube::config::KubeconfigError::FindPath,
                });
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: paths.display().to_string(),
                    source,
                })
        }
        None => match kube::Config::incluster() {
            Ok(config) => Ok(config),
            Err(in_cluster) => {
                kube::Config::from_kubeconfig(&options)
                    .await
                    .map_err(|kubeconfig| ClientError::NoConfig {
                        in_cluster,
                        kubeconfig,
                    })
            }
        },
    }
}

/// A client for `config` with `user_agent` and, when given, `limiter` applied to every request.
/// Share one limiter between clients to give them one budget.
pub fn client_with(
    config: kube::Config,
    limiter: Option<&RateLimiter>,
    user_agent: &str,
) -> Result<kube::Client, ClientError> {
    leader_client(config, limiter, user_agent, &crate::Leadership::always())
}

/// [`client_with`], whose writes are sent only while `leadership` leads (checked per request
/// after the rate limiter's wait: [`crate::Leadership::write_gate`]).
pub fn leader_client(
    mut config: kube::Config,
    limiter: Option<&RateLimiter>,
    user_agent: &str,
    leadership: &crate::Leadership,
) -> Result<kube::Client, ClientError> {
    let agent = http::HeaderValue::from_str(user_agent)
        .map_err(|_| ClientError::UserAgent(user_agent.to_string()))?;
    config.headers.push((http::header::USER_AGENT, agent));
    let server = config.cluster_url.to_string();
    let builder = ClientBuilder::try_from(config)?.with_layer(&leadership.write_gate());
    let client = match limiter {
        Some(limiter) => {
            tracing::info!(
                %server,
                qps = limiter.qps(),
                burst = limiter.burst(),
                user_agent,
                "Kubernetes client"
            );
            builder.with_layer(&limiter.layer()).build()
        }
        None => {
            tracing::info!(%server, user_agent, "Kubernetes client, no client-side rate limit");
            builder.build()
        }
    };
    Ok(client)
}

/// A token bucket of `burst` tokens refilled at `qps` per second, like client-go's
/// (`golang.org/x/time/rate`): a request takes a token, or reserves the next one and waits for
/// it. Reservations are handed out in order, so waiting requests go out first come, first
/// served. Clones share the bucket.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    inner: Arc<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: u32,
    state: Mutex<BucketState>,
    permits: Counter,
    delayed: Counter,
    wait_seconds: Counter<f64>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens at `at`; negative when requests have reserved tokens not yet refilled.
    tokens: f64,
    at: Instant,
}

/// What a [`RateLimiter`] has done so far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimitStats {
    /// Requests let through.
    pub permits: u64,
    /// Requests that had to wait for a token.
    pub delayed: u64,
    /// The sum of the waits.
    pub waited: Duration,
}

impl RateLimiter {
    /// A full bucket. `qps` must be positive and finite, `burst` at least 1.
    pub fn new(qps: f64, burst: u32) -> Result<Self, ClientError> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(ClientError::RateLimit(format!(
                "QPS must be a positive number, not {qps}"
            )));
        }
        if burst == 0 {
            return Err(ClientError::RateLimit(
                "the burst must be at least 1: no request could ever go out".into(),
            ));
        }
        Ok(Self {
            inner: Arc::new(Bucket {
                qps,
                burst,
                state: Mutex::new(BucketState {
                    tokens: f64::from(burst),
                    at: Instant::now(),
                }),
                permits: Counter::default(),
                delayed: Counter::default(),
                wait_seconds: Counter::default(),
            }),
        })
    }

    pub fn qps(&self) -> f64 {
        self.inner.qps
    }

    pub fn burst(&self) -> u32 {
        self.inner.burst
    }

    /// The tower layer for [`ClientBuilder::with_layer`].
    pub fn layer(&self) -> RateLimitLayer {
        RateLimitLayer {
            limiter: self.clone(),
        }
    }

    pub fn stats(&self) -> RateLimitStats {
        RateLimitStats {
            permits: self.inner.permits.get(),
            delayed: self.inner.delayed.get(),
            waited: Duration::from_secs_f64(self.inner.wait_seconds.get()),
        }
    }

    /// Registers the limiter's counters (`<prefix>_permits`, `_delayed`, `_wait_seconds`;
    /// `_total` is added on encoding), so that throttling shows on the dashboards.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kube_client_rate_limiter_permits",
            "Requests let through by the client-side rate limiter",
            self.inner.permits.clone(),
        );
        registry.register(
            "kube_client_rate_limiter_delayed",
            "Requests that waited for a token of the client-side rate limiter",
            self.inner.delayed.clone(),
        );
        registry.register_with_unit(
            "kube_client_rate_limiter_wait",
            "Time requests spent waiting for the client-side rate limiter",
            Unit::Seconds,
            self.inner.wait_seconds.clone(),
        );
    }

    /// Takes a token now or reserves the next free one; returns how long to wait for it.
    fn reserve(&self) -> Duration {
        let wait = self.reserve_at(Instant::now());
        self.inner.permits.inc();
        if !wait.is_zero() {
            self.inner.delayed.inc();
            self.inner.wait_seconds.inc_by(wait.as_secs_f64());
        }
        wait
    }

    fn reserve_at(&self, now: Instant) -> Duration {
        let b = &self.inner;
        let mut s = b.state.lock();
        let elapsed = now.saturating_duration_since(s.at).as_secs_f64();
        s.tokens = (s.tokens + elapsed * b.qps).min(f64::from(b.burst));
        s.at = s.at.max(now);
        s.tokens -= 1.0;
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / b.qps)
        }
    }
}

/// Applies a [`RateLimiter`] to a service: `poll_ready` waits for a token.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
            permit: Permit::None,
        }
    }
}

/// The service [`RateLimitLayer`] makes. The wait happens in `poll_ready`, so a request is
/// counted once when it is sent: a watch takes one token however long it streams. kube's
/// client puts a buffer in front, whose single worker drives `poll_ready`, which keeps the
/// waiting requests in order.
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    limiter: RateLimiter,
    permit: Permit,
}

#[derive(Debug)]
enum Permit {
    None,
    Waiting(Pin<Box<Sleep>>),
    Granted,
}

impl<S, Req> tower::Service<Req> for RateLimit<S>
where
    S: tower::Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        loop {
            match &mut self.permit {
                Permit::None => {
                    let wait = self.limiter.reserve();
                    self.permit = if wait.is_zero() {
                        Permit::Granted
                    } else {
                        Permit::Waiting(Box::pin(tokio::time::sleep(wait)))
                    };
                }
                Permit::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    self.permit = Permit::Granted;
                }
                Permit::Granted => return self.inner.poll_ready(cx),
            }
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.permit = Permit::None;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        client: ClientArgs,
    }

    #[test]
    fn defaults_and_flags() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.client.client_qps, 200.0);
        assert_eq!(cli.client.client_burst, 400);
        let cli = Cli::try_parse_from([
            "x",
            "--client-qps=5.5",
            "--client-burst",
            "7",
            "--kubeconfig=/k",
        ])
        .unwrap();
        assert_eq!(cli.client.client_qps, 5.5);
        assert_eq!(cli.client.client_burst, 7);
        assert_eq!(cli.client.kubeconfig, Some(PathBuf::from("/k")));
    }

    #[test]
    fn zero_qps_is_off_and_bad_limits_are_refused() {
        let args = |qps, burst| ClientArgs {
            kubeconfig: None,
            client_qps: qps,
            client_burst: burst,
        };
        assert!(args(0.0, 10).rate_limiter().unwrap().is_none());
        assert!(args(-1.0, 10).rate_limiter().unwrap().is_none());
        assert!(args(f64::NAN, 10).rate_limiter().is_err());
        assert!(args(f64::INFINITY, 10).rate_limiter().is_err());
        let e = args(10.0, 0).rate_limiter().unwrap_err().to_string();
        assert!(e.contains("burst must be at least 1"), "{e}");
    }

    #[test]
    fn bucket_math() {
        let l = RateLimiter::new(10.0, 3).unwrap();
        let t0 = l.inner.state.lock().at;
        // The full bucket lets three through, then each waits one more tenth of a second.
        for _ in 0..3 {
            assert_eq!(l.reserve_at(t0), Duration::ZERO);
        }
        let w: Vec<u128> = (0..3).map(|_| l.reserve_at(t0).as_millis()).collect();
        assert_eq!(w, [100, 200, 300]);
        // After 0.5 s the four reserved tokens are paid back and one is free again.
        assert_eq!(
            l.reserve_at(t0 + Duration::from_millis(500)),
            Duration::ZERO
        );
        // An idle bucket refills to the burst, never above.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(l.reserve_at(later), Duration::ZERO);
        }
        assert!(l.reserve_at(later) > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_waits_in_poll_ready() {
        use tower::{Layer, Service};
        let l = RateLimiter::new(2.0, 1).unwrap();
        let mut svc = l.layer().layer(tower::service_fn(|x: u32| async move {
            Ok::<_, std::convert::Infallible>(x)
        }));
        let start = Instant::now();
        for i in 0..5 {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            assert_eq!(svc.call(i).await.unwrap(), i);
        }
        // One from the bucket, four at 2/s.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        let stats = l.stats();
        assert_eq!((stats.permits, stats.delayed), (5, 4));
        assert_eq!(stats.waited, Duration::from_secs(2));
    }

    #[test]
    fn counters_are_exported() {
        let l = RateLimiter::new(1.0, 1).unwrap();
        let mut registry = Registry::default();
        l.register(&mut registry);
        l.reserve();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("kube_client_rate_limiter_permits_total 1"),
            "{text}"
        );
        assert!(
            text.contains("kube_client_rate_limiter_wait_seconds_total"),
            "{text}"
        );
    }
}
