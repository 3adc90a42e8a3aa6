//! The score-provider framework: the library a score provider (ours or a third party's) builds
//! on to publish `AddOnPlacementScore`s that OCM placements rate clusters by.
//!
//! A provider implements [`ScoreProvider`]: compute the current scores of the clusters it
//! rates, and (optionally) a stream of changes that make a recompute due. The framework does
//! the rest, once for every provider:
//! - [`hub::HubClient`]: the hub client from a kubeconfig, rebuilt when the kubeconfig or its
//!   certificate files change (OCM rotates add-on certificates in place);
//! - [`writer::ScoreWriter`]: the `AddOnPlacementScore` per cluster: create then patch the
//!   status in the same pass, `validUntil`, the `AddOnPlacementScoreUpdated` condition, writes
//!   only on change or renewal, optional hysteresis;
//! - [`runner::Runner`]: the refresh loop with debounced changes, back-off with jitter while
//!   the hub fails, metrics, `/healthz`, and the add-on health [`lease`];
//! - [`cli`]: the shared flags and a `serve` that is a provider binary's whole `main`;
//! - normalisers: [`ocm_api::score`] (absolute bounds, fleet-relative).
//!
//! Built on it: the resource-usage agent (crate `resource-usage-agent`: free CPU, memory, GPUs,
//! TPUs from the managed cluster's nodes and pods, or from the host), the hub's Thanos scorer
//! (crate `resource-usage-hub`), and `examples/latency_provider.rs` beside this crate, a
//! third-party provider in a few dozen lines.

pub mod cli;
pub mod definition;
pub mod hub;
pub mod lease;
pub mod metrics;
pub mod prom;
pub mod provider;
pub mod runner;
pub mod writer;

pub use cli::{ProviderArgs, serve};
pub use hub::HubClient;
pub use provider::{Change, Computed, Outcome, ProviderError, ScoreError, ScoreProvider, Scores};
pub use runner::{Runner, Settings};
pub use writer::{ScoreWriter, WriteSettings};
