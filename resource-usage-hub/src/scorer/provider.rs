//! One admitted ScoreDefinition as a provider on the score-provider framework: each compute
//! runs its queries once for the whole fleet, rates every ManagedCluster from the answers,
//! and reports what it found for the definition's status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::stream::BoxStream;
use score_provider::definition::{
    self, Compiled, Dropped, Evaluation, Failure, Input, Owner, run_queries, shown,
};
use score_provider::prom::{PromClient, PromError, named_in};
use score_provider::{Change, Computed, ProviderError, ScoreProvider};
use tokio::sync::mpsc;

use super::fleet::Fleet;
use super::metrics::{DefinitionLabels, DroppedLabels, FailureLabels, ScorerMetrics};
use super::status::{Report, Summary};

/// The flag that sets the query client's answer size limit, named in the log.
pub const MAX_RESPONSE_FLAG: &str = "--prometheus-max-response-size";

/// At most this much of a warning is repeated in a condition message or a log line.
const WARNING_SHOWN: usize = 300;

/// What a definition's provider needs.
pub struct DefinitionScorer {
    /// The ScoreDefinition's name.
    pub name: String,
    pub generation: i64,
    pub def: Arc<Compiled>,
    pub client: PromClient,
    pub fleet: Arc<Fleet>,
    /// The trusted cluster label.
    pub label: String,
    /// The writes' field manager and `managed-by` label.
    pub manager: String,
    pub reports: mpsc::UnboundedSender<(String, Report)>,
    pub metrics: ScorerMetrics,
    /// The clusters withheld by the last compute: a conflict is logged when it starts and
    /// when it ends, not every period.
    pub conflicted: BTreeSet<String>,
}

impl DefinitionScorer {
    fn labels(&self) -> DefinitionLabels {
        DefinitionLabels {
            definition: self.name.clone(),
        }
    }

    fn report(&self, outcome: Result<Summary, (&'static str, String)>) {
        let report = Report {
            generation: self.generation,
            at: jiff::Timestamp::now(),
            outcome,
        };
        // The supervisor is gone only when this runner is being stopped.
        let _ = self.reports.send((self.name.clone(), report));
    }

    fn failed(&self, f: &Failure) {
        self.metrics
            .query_errors
            .get_or_create(&FailureLabels {
                definition: self.name.clone(),
                reason: f.metric_reason(),
            })
            .inc();
        if let Failure::Query {
            what,
            error: PromError::TooLarge { limit, length },
        } = f
        {
            tracing::warn!(
                definition = %self.name,
                query = %what,
                limit_bytes = limit,
                content_length = length,
                flag = MAX_RESPONSE_FLAG,
                "the query's answer is over the size limit: the query failed, the definition's scores are not renewed and expire"
            );
            return self.report(Err((f.reason(), f.to_string())));
        }
        tracing::warn!(definition = %self.name, error = %f, "the definition's queries failed; its scores are not renewed and expire");
        self.report(Err((f.reason(), f.to_string())));
    }

    /// The clusters the warnings name (each with the first warning naming it), logged: a
    /// partial answer lacks what their stores hold, so they count as missing this round.
    fn partial(&self, warnings: &[String]) -> BTreeMap<String, String> {
        let mut named = BTreeMap::new();
        let distinct: BTreeSet<&String> = warnings.iter().collect();
        for w in distinct {
            let cut = cut(w);
            let clusters = named_in(w, &self.label);
            // Names from a store's labels are whoever runs it: logged, never metric labels.
            tracing::warn!(definition = %self.name, warning = %cut, clusters = ?clusters,
                "partial answer: the query API lacks a store; the clusters it names count as missing");
            for c in clusters {
                named.entry(c).or_insert_with(|| cut.clone());
            }
        }
        named
    }

    /// Counts and logs what the evaluation dropped and withheld.
    fn account(&mut self, e: &Evaluation, skipped: usize, partial: usize) {
        let l = self.labels();
        for (why, n) in &e.dropped {
            self.metrics
                .dropped_series
                .get_or_create(&DroppedLabels { reason: why.name() })
                .inc_by(*n);
        }
        let set = |f: &prometheus_client::metrics::family::Family<
            DefinitionLabels,
            prometheus_client::metrics::gauge::Gauge,
        >,
                   v: usize| {
            f.get_or_create(&l)
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set(&self.metrics.scored, e.scored);
        set(&self.metrics.missing, e.missing);
        set(&self.metrics.skipped, skipped);
        set(&self.metrics.conflicting, e.conflicts.len());
        set(&self.metrics.partial, partial);
        for (cluster, why) in &e.conflicts {
            if !self.conflicted.contains(cluster) {
                tracing::warn!(definition = %self.name, cluster = %shown(cluster), conflict = %why, "series disagree: scores withheld");
            }
        }
        for cluster in &self.conflicted {
            if !e.conflicts.contains_key(cluster) {
                tracing::info!(definition = %self.name, %cluster, "series agree again");
            }
        }
        self.conflicted = e.conflicts.keys().cloned().collect();
    }
}

/// `w` cut to [`WARNING_SHOWN`] bytes at a character boundary.
fn cut(w: &str) -> String {
    if w.len() <= WARNING_SHOWN {
        return w.to_owned();
    }
    let mut end = WARNING_SHOWN;
    while !w.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &w[..end])
}

impl ScoreProvider for DefinitionScorer {
    async fn compute(&mut self) -> Result<Computed, ProviderError> {
        if !self.fleet.listed() {
            return Err(ProviderError::NotReady(
                "ManagedClusters and AddOnPlacementScores not listed yet".into(),
            ));
        }
        let started = Instant::now();
        let answers = run_queries(&self.client, &self.def).await;
        self.metrics
            .query_seconds
            .get_or_create(&self.labels())
            .set(started.elapsed().as_secs_f64());
        let answers = match answers {
            Ok(a) => a,
            Err(f) => {
                self.failed(&f);
                return Err(ProviderError::Source(f.to_string()));
            }
        };
        if !answers.warnings.is_empty() {
            self.metrics
                .query_warnings
                .get_or_create(&self.labels())
                .inc_by(answers.warnings.len() as u64);
        }
        let ts = jiff::Timestamp::now();
        let all = self.fleet.rated();
        let (clusters, foreign): (Vec<String>, Vec<String>) = all.into_iter().partition(|c| {
            !self
                .fleet
                .foreign(&self.def.score_name, c, &self.manager, ts)
        });
        let partial = self.partial(&answers.warnings);
        let evaluation = definition::evaluate(
            &self.def,
            &Input {
                owner: Owner::Label(&self.label),
                answers: &answers.samples,
                clusters: &clusters,
                partial: &partial,
                now: ts.as_millisecond() as f64 / 1000.0,
            },
        )?;
        let partial_count = partial.keys().filter(|c| clusters.contains(c)).count();
        self.account(&evaluation, foreign.len(), partial_count);
        self.report(Ok(Summary {
            clusters: clusters.len(),
            scored: evaluation.scored,
            missing: evaluation.missing,
            conflicts: evaluation.conflicts.clone(),
            unknown: evaluation
                .dropped
                .get(&Dropped::UnknownCluster)
                .copied()
                .unwrap_or(0),
            unlabelled: evaluation
                .dropped
                .get(&Dropped::Unlabelled)
                .copied()
                .unwrap_or(0),
        }));
        Ok(evaluation.computed)
    }

    fn changes(&mut self) -> BoxStream<'static, Change> {
        let rx = self.fleet.subscribe();
        tokio_stream_of(rx)
            .map(|_| Change {
                what: "ManagedCluster",
            })
            .boxed()
    }
}

/// A broadcast receiver as a stream (a lagged receiver still means "something changed").
fn tokio_stream_of(rx: tokio::sync::broadcast::Receiver<()>) -> BoxStream<'static, ()> {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Some(((), rx)),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    })
    .boxed()
}
