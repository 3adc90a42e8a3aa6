//! What every binary of the project needs once, so that the scheduler, the hub controller and
//! the agent behave alike on a cluster: the same flags and environment variables, the same
//! client behaviour towards the apiserver, the same probes and logs.
//!
//! ```no_run
//! # use clap::Parser;
//! # use std::sync::Arc;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)] client: ocm_runtime::ClientArgs,
//!     #[command(flatten)] leader: ocm_runtime::LeaderArgs,
//!     #[command(flatten)] serve: ocm_runtime::ServeArgs,
//!     #[command(flatten)] log: ocm_runtime::LogArgs,
//! }
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cli = Cli::parse();
//! ocm_runtime::logging::init(&cli.log)?;
//! let client = ocm_runtime::client(&cli.client, "placement-scheduler/0.1.0").await?;
//! let health = ocm_runtime::Health::new();
//! let registry = Arc::new(prometheus_client::registry::Registry::default());
//! let server = ocm_runtime::serve_metrics(cli.serve.bind().await?, registry, health.clone(), std::future::pending());
//! let (leadership, elector) = match cli.leader.elector(client.clone(), "placement-scheduler")? {
//!     Some(e) => (e.leadership(), Some(e)),
//!     None => (ocm_runtime::Leadership::always(), None),
//! };
//! # let _ = (server, leadership, elector); Ok(()) }
//! ```

/// The hub client: configuration sources, user agent, client-side QPS and burst.
pub mod client;
/// A small hyper server with optional TLS, under the metrics server and the debug endpoint.
pub mod http;
/// One active replica among several, on a Lease, with a hand-over on shutdown.
pub mod leader;
/// Text or JSON logs with `RUST_LOG` filters, to stderr.
pub mod logging;
/// `/metrics`, `/healthz`, `/readyz`.
pub mod metrics;
/// SIGTERM and Ctrl-C.
pub mod shutdown;
/// Server TLS from PEM files.
pub mod tls;

pub use client::{ClientArgs, ClientError, RateLimiter, client};
pub use leader::{LeaderArgs, LeaderElector, LeaderError, LeaderTimings, Leadership};
pub use logging::{LogArgs, LogError, LogFormat};
pub use metrics::{Health, ServeArgs, ServeError, serve_metrics};
pub use shutdown::signal;
