//! `scorer_*` metrics. A definition's name is a label value: the set is bounded by
//! `--max-definitions` (a definition past the cap is not evaluated and has no series), and a
//! definition's series are removed when it stops being evaluated. Every other label is a
//! `&'static str` from a closed set; clusters are counted, never named (conditions and logs
//! name them).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DefinitionLabels {
    pub definition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub definition: String,
    /// `score_provider::definition::Failure::metric_reason`.
    pub reason: &'static str,
}

/// `reason` is one of `Dropped`'s names.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    pub reason: &'static str,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Clone, Default)]
pub struct ScorerMetrics {
    pub definitions: Gauge,
    pub query_errors: Family<FailureLabels, Counter>,
    pub query_seconds: Family<DefinitionLabels, FloatGauge>,
    pub scored: Family<DefinitionLabels, Gauge>,
    pub missing: Family<DefinitionLabels, Gauge>,
    pub skipped: Family<DefinitionLabels, Gauge>,
    pub conflicting: Family<DefinitionLabels, Gauge>,
    pub partial: Family<DefinitionLabels, Gauge>,
    pub query_warnings: Family<DefinitionLabels, Counter>,
    pub dropped_series: Family<DroppedLabels, Counter>,
}

impl ScorerMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let r = registry.sub_registry_with_prefix("scorer");
        r.register(
            "definitions",
            "ScoreDefinitions this scorer evaluates",
            self.definitions.clone(),
        );
        r.register(
            "query_errors",
            "Failed evaluations by definition and reason (setup, transport, timeout, status, query, decode, too_large, too_many_series)",
            self.query_errors.clone(),
        );
        r.register(
            "query_seconds",
            "Duration of the last evaluation's queries by definition",
            self.query_seconds.clone(),
        );
        r.register(
            "rated_clusters",
            "Clusters the last evaluation gave scores, by definition",
            self.scored.clone(),
        );
        r.register(
            "stale_clusters",
            "Clusters whose metrics are missing or older than the definition's freshness limit, by definition",
            self.missing.clone(),
        );
        r.register(
            "skipped_clusters",
            "Clusters whose score object another provider writes, by definition",
            self.skipped.clone(),
        );
        r.register(
            "conflicting_clusters",
            "Clusters whose scores the last evaluation withheld because series under their name disagree, by definition",
            self.conflicting.clone(),
        );
        r.register(
            "partial_clusters",
            "Clusters the last evaluation counted as missing because a partial answer's warning names their store, by definition",
            self.partial.clone(),
        );
        r.register(
            "query_warnings",
            "Warnings of partial query answers (a store that failed) by definition",
            self.query_warnings.clone(),
        );
        r.register(
            "dropped_series",
            "Answer series not used, by reason (unlabelled, unknown_cluster, bad_value)",
            self.dropped_series.clone(),
        );
    }

    /// Removes a definition's series (it is no longer evaluated).
    pub fn forget(&self, definition: &str) {
        let l = DefinitionLabels {
            definition: definition.to_owned(),
        };
        for f in [
            &self.scored,
            &self.missing,
            &self.skipped,
            &self.conflicting,
            &self.partial,
        ] {
            f.remove(&l);
        }
        self.query_seconds.remove(&l);
        self.query_warnings.remove(&l);
        for reason in score_provider::definition::failure_reasons() {
            self.query_errors.remove(&FailureLabels {
                definition: definition.to_owned(),
                reason,
            });
        }
    }
}
