//! `agent_definition*` metrics: the shipped ScoreDefinitions and their evaluations. Every label
//! is a closed set (never a definition's or score's name).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What became of a shipped definition: `running`, `invalid`, `refused`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

/// An evaluation's result: `evaluated` (the queries answered), `no_prometheus`, or the query failure's reason
/// (`score_provider::definition::Failure::metric_reason`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Default)]
pub struct DefinitionMetrics {
    pub definitions: Family<StateLabel, Gauge>,
    pub file_errors: Counter,
    pub evaluations: Family<ResultLabel, Counter>,
}

impl DefinitionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("agent");
        r.register(
            "definitions",
            "Shipped ScoreDefinitions by state (running, invalid, refused)",
            self.definitions.clone(),
        );
        r.register(
            "definitions_file_errors",
            "Reads of the definitions file that failed (the last good set stays)",
            self.file_errors.clone(),
        );
        r.register(
            "definition_evaluations",
            "Evaluations of shipped ScoreDefinitions by result",
            self.evaluations.clone(),
        );
    }

    pub(crate) fn evaluated(&self, result: &'static str) {
        self.evaluations
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}
