//! What every binary of the project needs once, so that the scheduler, the hub controller and
//! the agent behave alike on a cluster: the same flags and environment variables, the same
//! client behaviour towards the apiserver, the same probes and logs.
//!
//! - [`app`]: the one startup path every binary takes, composed of the parts below;
//! - [`client`](mod@client): one way to reach the hub, rate limited, so that no binary floods the apiserver;
//! - [`leader`]: several replicas for availability, one writer for correctness;
//! - [`metrics`]: what Prometheus scrapes and the kubelet probes, on one port;
//! - [`logging`]: text for people, JSON for collectors, `RUST_LOG` filters;
//! - [`shutdown`]: SIGTERM starts the hand-over (the Lease release) instead of killing;
//! - [`http`], [`tls`]: the small server under the metrics and debug endpoints, with the
//!   same connection limits ([`HttpLimits`]) on every port;
//! - [`watch`]: how every watch retries, so that all come back within seconds of an outage.
//!
//! ```no_run
//! use std::sync::Arc;
//! use clap::Parser;
//! use futures::FutureExt;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)] client: ocm_runtime::ClientArgs,
//!     #[command(flatten)] leader: ocm_runtime::LeaderArgs,
//!     #[command(flatten)] serve: ocm_runtime::ServeArgs,
//!     #[command(flatten)] log: ocm_runtime::LogArgs,
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cli = Cli::parse();
//! ocm_runtime::logging::init(&cli.log)?;
//! let shutdown = ocm_runtime::signal().shared();
//! let client = ocm_runtime::client(&cli.client, "placement-scheduler/0.1.0").await?;
//! let health = ocm_runtime::Health::new();
//! let registry = Arc::new(prometheus_client::registry::Registry::default());
//! let listener = cli.serve.bind().await?;
//! tokio::spawn(ocm_runtime::serve_metrics(listener, registry, health.clone(), shutdown.clone()));
//! // The elector gets a client of its own, so renewals never queue behind the writes.
//! let leadership = cli.leader.start(client.clone(), "placement-scheduler", shutdown.clone())?;
//! health.set_ready(true); // a standby is ready too: it is doing its job, waiting
//! let writes = ocm_runtime::client::leader_client(
//!     ocm_runtime::client::load_config(cli.client.kubeconfig.as_deref()).await?,
//!     None,
//!     "placement-scheduler/0.1.0",
//!     &leadership,
//! )?; // refuses every write while this replica does not lead
//! let mut waiting = leadership.clone();
//! waiting.wait_leader().await;
//! let work = async move { let _ = writes; /* the controllers */ };
//! // Exits with an error once deposed (the process restarts as a standby).
//! ocm_runtime::run_until_deposed(work, leadership, || shutdown.peek().is_some()).await?;
//! # Ok(()) }
//! ```

pub mod app;
pub mod client;
pub mod http;
pub mod leader;
pub mod leader_gauge;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod shutdown;
pub mod tls;
pub mod watch;

pub use client::{ClientArgs, ClientError, RateLimiter, client};
pub use http::{HttpLimits, Listener};
pub use leader::{
    LeaderArgs, LeaderElector, LeaderError, LeaderTimings, Leadership, run_until_deposed,
};
pub use logging::{LogArgs, LogError, LogFormat};
pub use metrics::{Health, ServeArgs, ServeError, WatchSync, serve_metrics};
pub use shutdown::signal;
