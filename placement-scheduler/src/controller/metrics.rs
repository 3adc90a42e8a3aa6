//! The controller's metrics (prometheus-client), registered under the `placement_` prefix.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use ocm_api::wellknown::{builtin_prioritizer as builtin, score_coordinate_type};
use ocm_runtime::metrics::ClosedLabel;
use placement_core::{filter, prioritize, select};

/// `plugin_type`: what the core's `Laps` says.
pub(crate) const PLUGIN_TYPES: ClosedLabel =
    ClosedLabel::new(&["eligible", "filter", "prioritizer", "selector", "bind"]);

/// `plugin_name`: the core's steps. A prioritizer's name carries tenant input after a `/`
/// (`AddOn/<resourceName>/<scoreName>`, `TopologyAffinity/<topologyKey>`): only the part
/// before it is a label, so a Placement cannot make series.
pub(crate) const PLUGIN_NAMES: ClosedLabel = ClosedLabel::new(&[
    "ClusterSets",
    filter::predicate::NAME,
    filter::taint::NAME,
    select::PLUGIN,
    "TopN",
    builtin::BALANCE,
    builtin::STEADY,
    builtin::RESOURCE_ALLOCATABLE_CPU,
    builtin::RESOURCE_ALLOCATABLE_MEMORY,
    score_coordinate_type::ADD_ON,
    prioritize::affinity::PLUGIN,
    "PlacementDecisions",
]);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PluginLabels {
    pub(crate) plugin_type: String,
    pub(crate) plugin_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub verb: String,
    pub resource: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    pub(crate) kind: String,
}

/// `verdict` of `placement_score_change_verdicts`: `pass` (scheduled now), `later` (at the end
/// of its `scoreRateLimit` window: only the scores its decisions show moved), `none` (the
/// change cannot move what it writes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: &'static str,
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

/// `state` of `placement_queue_depth`: `ready` (waits for a worker), `deferred` (an event's
/// pass held back by the debounce or the burst spacing), `waiting` (a requeue at a future
/// time: a score's or toleration's expiry, a backoff), `processing` (being scheduled).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub state: &'static str,
}

pub struct Metrics {
    pub(crate) scheduling_duration: Histogram,
    pub(crate) plugin_duration: Family<PluginLabels, Histogram>,
    pub schedules: Family<ResultLabels, Counter>,
    /// Set by the queue on every change (see [`QueueLabels`]).
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub api_writes: Family<WriteLabels, Counter>,
    pub(crate) store_objects: Family<KindLabels, Gauge>,
    pub(crate) watch_errors: Family<KindLabels, Counter>,
    /// Entries in per-key maps that must shrink when their objects go (leak detection).
    pub cache_entries: Family<CacheLabels, Gauge>,
    /// Events not published because the recorder's queue was full.
    pub(crate) events_dropped: Counter,
    /// Moves the placements' stability controls held back, counted when a hold begins.
    pub moves_held: Counter,
    /// Placements a score change woke, by what their margins judged.
    pub score_change_verdicts: Family<VerdictLabels, Counter>,
}

fn seconds_histogram() -> Histogram {
    // 1 µs .. 1000 s, as upstream's ExponentialBuckets(1e-6, 10, 10).
    Histogram::new(exponential_buckets(1e-6, 10.0, 10))
}

impl Metrics {
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let m = Self {
            scheduling_duration: seconds_histogram(),
            plugin_duration: Family::new_with_constructor(seconds_histogram),
            schedules: Family::default(),
            queue_depth: Family::default(),
            api_writes: Family::default(),
            store_objects: Family::default(),
            watch_errors: Family::default(),
            cache_entries: Family::default(),
            events_dropped: Counter::default(),
            moves_held: Counter::default(),
            score_change_verdicts: Family::default(),
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
            "Placements scheduled, by result (success, warning, misconfigured, limit_exceeded, error, transient, write_error)",
            m.schedules.clone(),
        );
        r.register(
            "queue_depth",
            "Placements in the work queue by state: ready (waits for a worker), deferred (held back by the debounce or the burst spacing), waiting (a requeue at a future time: an expiry, a backoff), processing. Settled: ready, deferred and processing 0. ready + deferred + waiting is what the unlabelled gauge counted before",
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
        r.register(
            "stability_moves_held",
            "Moves that scores alone asked for and a Placement's stability controls held back, counted when a hold begins or changes (the DecisionHeld event)",
            m.moves_held.clone(),
        );
        r.register(
            "score_change_verdicts",
            "Placements a score change woke (a cluster that may be their candidate, a score they read), by verdict: pass (scheduled now), later (scheduled when the scoreRateLimit window ends: only the scores their decisions show moved), none (the change cannot move their decisions)",
            m.score_change_verdicts.clone(),
        );
        r.register(
            "events_dropped",
            "Events not published because the event recorder's queue was full",
            m.events_dropped.clone(),
        );
        m
    }

    /// Counts what one score change asked of the placements it woke.
    pub(crate) fn score_change(&self, pass: usize, later: usize, none: usize) {
        for (verdict, n) in [("pass", pass), ("later", later), ("none", none)] {
            if n > 0 {
                self.score_change_verdicts
                    .get_or_create(&VerdictLabels { verdict })
                    .inc_by(n as u64);
            }
        }
    }

    /// Every argument is one of the writer's constants, never a value read from an object.
    pub(crate) fn api_write(
        &self,
        verb: &'static str,
        resource: &'static str,
        result: &'static str,
    ) {
        self.api_writes
            .get_or_create(&WriteLabels {
                verb: verb.into(),
                resource: resource.into(),
                result: result.into(),
            })
            .inc();
    }

    /// `plugin_name` as the core names it; see [`PLUGIN_NAMES`].
    pub(crate) fn plugin(&self, plugin_type: &str, plugin_name: &str, took: Duration) {
        let plugin = plugin_name.split('/').next().unwrap_or_default();
        self.plugin_duration
            .get_or_create(&PluginLabels {
                plugin_type: PLUGIN_TYPES.label(plugin_type).into(),
                plugin_name: PLUGIN_NAMES.label(plugin).into(),
            })
            .observe(took.as_secs_f64());
    }

    /// `kind` is a kind we watch, never a value read from an object.
    pub(crate) fn store(&self, kind: &'static str, n: usize) {
        self.store_objects
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use placement_core::{Laps, Snapshot, schedule_with};
    use serde_json::json;
    use std::sync::Arc;

    /// What the controller's stopwatch does with each lap (no clock needed here).
    struct Forward<'a>(&'a Metrics);

    impl Laps for Forward<'_> {
        fn lap(&mut self, step_type: &'static str, step: &str) {
            self.0.plugin(step_type, step, Duration::from_micros(1));
        }
    }

    fn series(registry: &Registry, family: &str) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .map(str::to_owned)
            .collect()
    }

    /// 1,000 tenants' Placements, each with an AddOn prioritizer and a topology affinity of
    /// names of its own, scheduled by the core: the plugin metric has a fixed number of series
    /// however many names the tenants choose.
    #[test]
    fn tenant_names_make_no_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        let mut snapshot = Snapshot::new();
        snapshot.upsert_set(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "set"},
                "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}))
            .unwrap(),
        ));
        snapshot.upsert_binding(
            &serde_json::from_value(
                json!({"metadata": {"name": "set", "namespace": "ns"}, "spec": {"clusterSet": "set"}}),
            )
            .unwrap(),
        );
        snapshot.upsert_cluster(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "a",
                "labels": {"cluster.open-cluster-management.io/clusterset": "set"}}, "spec": {}}))
            .unwrap(),
        ));
        let now = jiff::Timestamp::now();
        for i in 0..1000 {
            let placement: ocm_api::Placement = serde_json::from_value(json!({
                "metadata": {"name": format!("p{i}"), "namespace": "ns",
                    "annotations": {prioritize::affinity::ANNOTATION: json!([{
                        "topologyKey": format!("zone-{i}"),
                        "topologyWeights": [{"weight": 1, "operator": "Exists"}]}]).to_string()}},
                "spec": {"prioritizerPolicy": {"mode": "Exact", "configurations": [
                    {"scoreCoordinate": {"type": "AddOn",
                        "addOn": {"resourceName": format!("tenant-{i}"), "scoreName": format!("score-{i}")}},
                     "weight": 1}]}}
            }))
            .unwrap();
            let outcome = schedule_with(&snapshot, &placement, now, &mut Forward(&metrics), &());
            assert_eq!(outcome.selected.len(), 1, "{:?}", outcome.status);
        }
        let lines = series(&registry, "placement_plugin_duration_seconds_count");
        // eligible, predicate, taint, AddOn, TopologyAffinity, TopN, bind: seven steps.
        assert!(
            lines.len() <= PLUGIN_TYPES.bound() * PLUGIN_NAMES.bound(),
            "{} series: {:?}",
            lines.len(),
            &lines[..lines.len().min(5)]
        );
        assert_eq!(lines.len(), 7, "{lines:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("plugin_name=\"AddOn\"") && l.ends_with(" 1000")),
            "{lines:#?}"
        );
        assert!(lines.iter().all(|l| !l.contains("tenant-")), "{lines:#?}");
    }
}
