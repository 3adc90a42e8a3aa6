//! One shipped ScoreDefinition as a score provider: its queries against the managed cluster's
//! own Prometheus, evaluated for this cluster alone (every series is its own), with the same
//! normalisation, limits and validity as on the hub.

use std::collections::BTreeMap;
use std::sync::Arc;

use score_provider::definition::{self, Compiled, Input, Owner};
use score_provider::prom::PromClient;
use score_provider::{Computed, Outcome, ProviderError, ScoreProvider};

use crate::definition_metrics::DefinitionMetrics;

/// The outcome's reason while the agent has no query API to ask.
pub const REASON_NO_PROMETHEUS: &str = "NoPrometheus";

/// A compiled definition for `cluster`.
pub struct DefinitionProvider {
    cluster: String,
    clusters: [String; 1],
    def: Arc<Compiled>,
    prom: Option<PromClient>,
    metrics: DefinitionMetrics,
}

impl DefinitionProvider {
    pub fn new(
        cluster: &str,
        def: Arc<Compiled>,
        prom: Option<PromClient>,
        metrics: DefinitionMetrics,
    ) -> Self {
        Self {
            cluster: cluster.to_owned(),
            clusters: [cluster.to_owned()],
            def,
            prom,
            metrics,
        }
    }

    fn unavailable(&self, reason: &str, message: String) -> Computed {
        let mut c = Computed::new();
        c.insert(
            self.cluster.clone(),
            Outcome::Unavailable {
                reason: reason.to_owned(),
                message,
            },
        );
        c
    }
}

impl ScoreProvider for DefinitionProvider {
    async fn compute(&mut self) -> Result<Computed, ProviderError> {
        let Some(prom) = &self.prom else {
            self.metrics.evaluated("no_prometheus");
            return Ok(self.unavailable(
                REASON_NO_PROMETHEUS,
                "the agent has no Prometheus to query: set PROMETHEUS_URL through the \
                 AddOnDeploymentConfig's customizedVariables"
                    .to_owned(),
            ));
        };
        let answers = match definition::run_queries(prom, &self.def).await {
            Ok(a) => a,
            Err(failure) => {
                self.metrics.evaluated(failure.metric_reason());
                tracing::warn!(score_name = %self.def.score_name, error = %failure, "a shipped definition's queries failed; its scores expire unless a later evaluation succeeds");
                return Ok(self.unavailable(failure.reason(), failure.to_string()));
            }
        };
        if !answers.warnings.is_empty() {
            tracing::debug!(score_name = %self.def.score_name, warnings = ?answers.warnings, "the query API answered with warnings");
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let evaluation = definition::evaluate(
            &self.def,
            &Input {
                owner: Owner::Own(&self.cluster),
                answers: &answers.samples,
                clusters: &self.clusters,
                partial: &BTreeMap::new(),
                now,
            },
        )?;
        self.metrics.evaluated("evaluated");
        Ok(evaluation.computed)
    }
}
