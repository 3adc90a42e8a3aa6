//! [`App`]: the steps a controller binary takes before its controllers run, in this order:
//! logging and the stop signal ([`App::start`]), the hub connection ([`App::connect`]), the
//! binary's metrics ([`App::registry`]), the metrics and health server ([`App::serve`]), the
//! wait for the hub ([`Running::wait_for_hub`]), then leader election and the work
//! ([`Running`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use futures::FutureExt;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use super::{AppError, Shutdown};
use crate::client::follow::KubeconfigClient;
use crate::client::{self, ClientArgs, ClientError, RateLimiter};
use crate::leader::{LeaderArgs, Leadership};
use crate::leader_gauge::LeaderGauge;
use crate::logging::{self, LogArgs};
use crate::metrics::{Health, ServeArgs, serve_metrics};

/// A binary being started: its stop signal, its metrics registry (still open for
/// registrations) and its health.
pub struct App {
    user_agent: String,
    shutdown: Shutdown,
    registry: Registry,
    health: Health,
    /// Register `leader_election_master_status` at [`App::serve`].
    leader_gauge: bool,
}

impl App {
    /// Sets up logging as `log` says, then [`App::new`].
    pub fn start(log: &LogArgs, user_agent: impl Into<String>) -> Result<Self, AppError> {
        logging::init(log)?;
        Ok(Self::new(user_agent))
    }

    /// For a caller that has set up logging itself. Installs the SIGTERM and SIGINT handlers
    /// now, so that a signal during start-up is not lost; call it inside a tokio runtime.
    /// `user_agent` (`name/version`) names every client [`App::connect`] makes.
    pub fn new(user_agent: impl Into<String>) -> Self {
        Self {
            user_agent: user_agent.into(),
            shutdown: crate::signal().boxed().shared(),
            registry: Registry::default(),
            health: Health::new(),
            leader_gauge: true,
        }
    }

    /// Ends on `shutdown` instead of the signals: for tests.
    #[cfg(test)]
    pub(super) fn with_shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Serves `registry` (with metrics the caller registered already) instead of an empty one.
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// Serves `health` on `/healthz` and `/readyz`: for work that keeps its own.
    pub fn with_health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    /// For a binary without leader election: no `leader_election_master_status` on /metrics.
    pub fn without_leader_election(mut self) -> Self {
        self.leader_gauge = false;
        self
    }

    /// Where the binary registers its metrics, until [`App::serve`].
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn health(&self) -> Health {
        self.health.clone()
    }

    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    pub fn user_agent(&self) -> &str {
        &self.user_agent
    }

    /// Loads the kube configuration `args` name and makes their rate limiter, whose metrics
    /// go on this binary's registry.
    pub async fn connect(&mut self, args: &ClientArgs) -> Result<Hub, AppError> {
        let config = client::load_config(args.kubeconfig.as_deref()).await?;
        let limiter = args.rate_limiter()?;
        if let Some(l) = &limiter {
            l.register(&mut self.registry);
        }
        Ok(Hub {
            config,
            args: args.clone(),
            limiter,
            user_agent: self.user_agent.clone(),
        })
    }

    /// The hub client of an agent whose hub credentials are a kubeconfig file that is rotated
    /// in place (OCM's `<addon>-hub-kubeconfig` secret): read from `path`, sending this
    /// binary's user agent, without a client-side rate limit (an agent writes a few objects a
    /// minute), rebuilt by [`KubeconfigClient::reload_if_changed`]. Wait for it as for
    /// [`App::connect`]'s: `running.wait_for_hub(&hub.client(), &hub.server())`.
    pub async fn follow_kubeconfig(
        &self,
        path: impl Into<PathBuf>,
    ) -> Result<KubeconfigClient, AppError> {
        Ok(KubeconfigClient::load(path, &self.user_agent).await?)
    }

    /// Binds `--metrics-bind-address` and serves `/metrics`, `/healthz` and `/readyz` until the
    /// stop signal; registrations end here (with the leader gauge's).
    pub async fn serve(self, args: &ServeArgs) -> Result<Running, AppError> {
        self.serve_optional(Some(args)).await
    }

    /// [`App::serve`], or with `None` no port at all: registrations end, and the registry and
    /// health are served by whatever other port the binary serves them on
    /// ([`Running::registry`], [`Running::health`]).
    pub async fn serve_optional(self, args: Option<&ServeArgs>) -> Result<Running, AppError> {
        let listener = match args {
            Some(args) => Some(args.bind().await?),
            None => None,
        };
        let metrics_address = listener.as_ref().and_then(|l| l.local_addr().ok());
        let mut registry = self.registry;
        let leader_gauge = self
            .leader_gauge
            .then(|| LeaderGauge::register(&mut registry));
        let registry = Arc::new(registry);
        let server = listener.map(|listener| {
            tokio::spawn(serve_metrics(
                listener,
                registry.clone(),
                self.health.clone(),
                self.shutdown.clone(),
            ))
        });
        Ok(Running {
            shutdown: self.shutdown,
            registry,
            health: self.health,
            leader_gauge,
            metrics_address,
            server,
        })
    }
}

/// The hub as the client flags name it: the configuration and the controllers' rate limiter,
/// from which each client gets the limits its use needs.
pub struct Hub {
    config: kube::Config,
    args: ClientArgs,
    limiter: Option<RateLimiter>,
    user_agent: String,
}

impl Hub {
    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// The apiserver's URL, as the configuration names it.
    pub fn server(&self) -> String {
        self.config.cluster_url.to_string()
    }

    /// The controllers' rate limiter (`None` with `--client-qps=0`).
    pub fn limiter(&self) -> Option<&RateLimiter> {
        self.limiter.as_ref()
    }

    /// A client outside any rate limit: the elector's (a busy leader's renewals never queue
    /// behind its own writes, as in client-go's controllers) and one-off reads at start.
    pub fn unlimited(&self) -> Result<kube::Client, ClientError> {
        client::client_with(self.config.clone(), None, &self.user_agent)
    }

    /// A client with a rate limiter of its own (the same flags): its callers never spend the
    /// controllers' budget.
    pub fn limited_apart(&self) -> Result<kube::Client, ClientError> {
        let limiter = self.args.rate_limiter()?;
        client::client_with(self.config.clone(), limiter.as_ref(), &self.user_agent)
    }

    /// The controllers' client: rate limited, and refusing every write while `leadership`
    /// does not lead.
    pub fn writer(&self, leadership: &Leadership) -> Result<kube::Client, ClientError> {
        client::leader_client(
            self.config.clone(),
            self.limiter.as_ref(),
            &self.user_agent,
            leadership,
        )
    }
}

/// A binary whose metrics and health are served: what its controllers need from the runtime.
pub struct Running {
    pub(super) shutdown: Shutdown,
    registry: Arc<Registry>,
    pub(super) health: Health,
    pub(super) leader_gauge: Option<LeaderGauge>,
    metrics_address: Option<SocketAddr>,
    /// The metrics server, when it was asked for.
    server: Option<JoinHandle<()>>,
}

impl Running {
    /// The registry being served, for another port that serves it too.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.clone()
    }

    pub fn health(&self) -> Health {
        self.health.clone()
    }

    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Whether the stop signal has come.
    pub fn is_stopping(&self) -> bool {
        self.shutdown.peek().is_some()
    }

    /// Where `/metrics` is served (the bound port when the flag said port 0); `None` when
    /// [`App::serve_optional`] was not given a port.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_address
    }

    /// Starts the election `args` ask for on the Lease `lease`, with an elector client outside
    /// the rate limit; the Lease is released at the stop signal. The leader gauge follows it.
    pub fn elect(&self, args: &LeaderArgs, hub: &Hub, lease: &str) -> Result<Leadership, AppError> {
        let leadership = args.start(hub.unlimited()?, lease, self.shutdown.clone())?;
        self.follow(lease, &leadership);
        Ok(leadership)
    }

    pub(super) fn follow(&self, lease: &str, leadership: &Leadership) {
        if let Some(g) = &self.leader_gauge {
            g.follow(lease, leadership.clone());
        }
    }

    /// Runs `work` until it ends, or fails once this replica is deposed (see
    /// [`crate::run_until_deposed`]); a Lease released at the stop signal is a hand-over.
    pub async fn run_until_deposed(
        &self,
        work: impl Future<Output = ()>,
        leadership: Leadership,
    ) -> Result<(), AppError> {
        crate::run_until_deposed(work, leadership, || self.is_stopping()).await?;
        Ok(())
    }

    /// Waits for the metrics server to stop (it does at the stop signal); at once without one.
    pub async fn server_stopped(self) {
        if let Some(server) = self.server {
            let _ = server.await;
        }
    }
}
