//! The framework's Prometheus metrics (prefix `score_provider_`).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

// Labels are `&'static str`: values written in code (the results below, a provider's
// `Change::what`), never read from a cluster, a score or the hub, so each family has a fixed
// number of series. A label from input goes through `ocm_runtime::metrics::ClosedLabel`.

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhatLabel {
    pub what: &'static str,
}

/// `cache`: which per-object map (names fixed in the code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabel {
    pub cache: &'static str,
}

/// Clones share the series.
#[derive(Clone)]
pub struct Metrics {
    /// Recomputes by result: `ok`, `not_ready`, `error`.
    pub computes: Family<ResultLabel, Counter>,
    pub compute_seconds: Histogram,
    /// Per-cluster writes by result: `created`, `updated`, `unchanged`, `refused`,
    /// `hub_unavailable`.
    pub writes: Family<ResultLabel, Counter>,
    /// Changes reported by the provider, by what changed.
    pub changes: Family<WhatLabel, Counter>,
    /// Hub clients rebuilt because the credentials changed.
    pub hub_reloads: Counter,
    /// Health Lease renewals by result: `ok`, `error`, `skipped` (unhealthy).
    pub lease_renewals: Family<ResultLabel, Counter>,
    /// Unix time of the last pass that wrote every cluster it had to.
    pub last_success: Gauge,
    /// 1 while writes wait for the hub (backing off), else 0.
    pub hub_backoff: Gauge,
    /// The hub's clock minus the local one, as the hub's last response showed (scores are
    /// timed by the hub's clock).
    pub hub_clock_offset: Gauge<f64, AtomicU64>,
    /// Entries in per-cluster maps (`writer_known`): they follow the clusters scored.
    pub cache_entries: Family<CacheLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            computes: Family::default(),
            // 100 µs to ~1.6 s (15 doublings).
            compute_seconds: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(1e-4, 2.0, 15),
            ),
            writes: Family::default(),
            changes: Family::default(),
            hub_reloads: Counter::default(),
            lease_renewals: Family::default(),
            last_success: Gauge::default(),
            hub_backoff: Gauge::default(),
            hub_clock_offset: Gauge::default(),
            cache_entries: Family::default(),
        }
    }
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("score_provider");
        r.register(
            "computes",
            "Score recomputes by result",
            self.computes.clone(),
        );
        r.register_with_unit(
            "compute_duration",
            "Time one recompute took",
            Unit::Seconds,
            self.compute_seconds.clone(),
        );
        r.register(
            "writes",
            "AddOnPlacementScore writes per cluster by result",
            self.writes.clone(),
        );
        r.register(
            "changes",
            "Changes that made a recompute due, by what changed",
            self.changes.clone(),
        );
        r.register(
            "hub_client_reloads",
            "Hub clients rebuilt after the hub kubeconfig or its files changed",
            self.hub_reloads.clone(),
        );
        r.register(
            "lease_renewals",
            "Health Lease renewals by result",
            self.lease_renewals.clone(),
        );
        r.register(
            "last_success_timestamp_seconds",
            "Unix time of the last pass that wrote every cluster it had to",
            self.last_success.clone(),
        );
        r.register(
            "hub_backoff",
            "1 while writes wait for the hub to come back",
            self.hub_backoff.clone(),
        );
        r.register_with_unit(
            "hub_clock_offset",
            "The hub's clock minus the local wall clock at the hub's last response (from the Date headers)",
            Unit::Seconds,
            self.hub_clock_offset.clone(),
        );
        r.register(
            "cache_entries",
            "Entries in the framework's per-cluster maps, by map",
            self.cache_entries.clone(),
        );
    }
}
