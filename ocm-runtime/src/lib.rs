//! What every binary of the project needs once, so that the scheduler, the hub controller and
//! the agent behave alike on a cluster: the same flags and environment variables, the same
//! client behaviour towards the apiserver, the same probes and logs.
//!
//! - [`app`]: the one startup path every binary takes, composed of the parts below;
//! - [`client`](mod@client): one way to reach the hub, rate limited, so that no binary floods the apiserver,
//!   or following a mounted kubeconfig through certificate rotations ([`client::follow`]);
//! - [`leader`]: several replicas for availability, one writer for correctness; one
//!   [`Leadership`] type that every controller asks (`Leadership::always()` without election);
//! - [`write`](mod@write): what the apiserver's error answers mean, and writes preconditioned on the
//!   object they were computed from;
//! - [`events`]: Kubernetes Events, with repeats folded into series;
//! - [`flags`]: flag values every binary reads alike (durations);
//! - [`metrics`]: what Prometheus scrapes and the kubelet probes, on one port;
//! - [`logging`]: text for people, JSON for collectors, `RUST_LOG` filters;
//! - [`shutdown`]: SIGTERM starts the hand-over (the Lease release) instead of killing;
//! - [`http`], [`tls`]: the small server under the metrics and debug endpoints, with the
//!   same connection limits ([`HttpLimits`]) on every port;
//! - [`watch`]: how every watch retries, so that all come back within seconds of an outage.
//!
//! A binary starts through [`app`] (see its example), which puts the parts above together in
//! one order.

pub mod app;
pub mod client;
pub mod events;
pub mod flags;
pub mod http;
pub mod leader;
pub mod leader_gauge;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod shutdown;
pub mod tls;
pub mod watch;
pub mod write;

pub use client::{ClientArgs, ClientError, RateLimiter, client};
pub use http::{HttpLimits, Listener};
pub use leader::{
    LeaderArgs, LeaderElector, LeaderError, LeaderTimings, Leadership, run_until_deposed,
};
pub use logging::{LogArgs, LogError, LogFormat};
pub use metrics::{Health, ServeArgs, ServeError, WatchSync, serve_metrics};
pub use shutdown::signal;
