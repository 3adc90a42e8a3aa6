//! The controller's metrics (prometheus-client), registered under the `placement_` prefix.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin_type: String,
    pub plugin_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub verb: String,
    pub resource: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// `cache`: which per-key map (a closed set of names fixed in the code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub cache: &'static str,
}

pub struct Metrics {
    pub scheduling_duration: Histogram,
    pub plugin_duration: Family<PluginLabels, Histogram>,
    pub schedules: Family<ResultLabels, Counter>,
    pub queue_depth: Gauge,
    pub api_writes: Family<WriteLabels, Counter>,
    pub store_objects: Family<KindLabels, Gauge>,
    pub watch_errors: Family<KindLabels, Counter>,
    /// Entries in per-key maps that must shrink when their objects go (leak detection).
    pub cache_entries: Family<CacheLabels, Gauge>,
}

fn seconds_histogram() -> Histogram {
    // 1 µs .. 1000 s, as upstream's ExponentialBuckets(1e-6, 10, 10).
    Histogram::new(exponential_buckets(1e-6, 10.0, 10))
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            scheduling_duration: seconds_histogram(),
            plugin_duration: Family::new_with_constructor(seconds_histogram),
            schedules: Family::default(),
            queue_depth: Gauge::default(),
            api_writes: Family::default(),
            store_objects: Family::default(),
            watch_errors: Family::default(),
            cache_entries: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("placement");
        r.register(
            "scheduling_duration_seconds",
            "Time to schedule one placement (the core, no writes)",
            m.scheduling_duration.clone(),
        );
        r.register(
            "plugin_duration_seconds",
            "Time spent in each step of scheduling one placement",
            m.plugin_duration.clone(),
        );
        r.register(
            "schedules",
            "Placements scheduled, by result (success, warning, misconfigured, error, write_error)",
            m.schedules.clone(),
        );
        r.register(
            "queue_depth",
            "Placements waiting to be scheduled",
            m.queue_depth.clone(),
        );
        r.register(
            "api_writes",
            "Writes to the hub by verb, resource and result",
            m.api_writes.clone(),
        );
        r.register(
            "store_objects",
            "Objects in the controller's stores, by kind",
            m.store_objects.clone(),
        );
        r.register(
            "watch_errors",
            "Errors from the watches, by kind",
            m.watch_errors.clone(),
        );
        r.register(
            "cache_entries",
            "Entries in the controller's per-placement maps, by map",
            m.cache_entries.clone(),
        );
        m
    }

    pub fn api_write(&self, verb: &str, resource: &str, result: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                verb: verb.into(),
                resource: resource.into(),
                result: result.into(),
            })
            .inc();
    }

    pub fn plugin(&self, plugin_type: &str, plugin_name: &str, took: Duration) {
        self.plugin_duration
            .get_or_create(&PluginLabels {
                plugin_type: plugin_type.into(),
                plugin_name: plugin_name.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn store(&self, kind: &str, n: usize) {
        self.store_objects
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
