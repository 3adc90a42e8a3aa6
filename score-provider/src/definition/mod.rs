//! ScoreDefinitions (`scoring.ocm-placement.io/v1alpha1`): scores from PromQL, configured
//! without code. [`compile`] checks a definition and builds its queries; [`run_queries`] runs
//! them against a Prometheus-compatible query API within the definition's limits;
//! [`evaluate`] (sans IO) turns the answers into each cluster's outcome. The hub scorer runs
//! them for the fleet by its trusted cluster label, a cluster's agent for itself against its
//! own Prometheus; both write through the framework's runner, with the same validity rules as
//! every provider.

mod compile;
mod evaluate;

use std::time::Duration;

pub use compile::{Caps, Compiled, Invalid, LABEL_PLACEHOLDER, Norm, Rule, compile};
pub use evaluate::{
    CONFLICT_LABEL, Dropped, Evaluation, Input, Owner, REASON_CONFLICT, REASON_NO_METRICS,
    REASON_STALE, evaluate, normalise, shown,
};
use ocm_api::scoring::condition;
use thiserror::Error;

use crate::prom::{PromClient, PromError, Sample};

/// Why a definition's queries gave nothing to evaluate: the definition fails alone, its last
/// scores stay until they expire.
#[derive(Debug, Error)]
pub enum Failure {
    #[error("the query of {what} failed: {error}")]
    Query { what: String, error: PromError },
    #[error(
        "the query of {what} answered {series} series, over the limit of {limit} (limits.maxSeries or the evaluator's --definition-max-series)"
    )]
    TooManySeries {
        what: String,
        series: usize,
        limit: usize,
    },
    #[error(
        "the queries took longer than {0:?} (limits.queryTimeout or the evaluator's --definition-query-timeout)"
    )]
    Timeout(Duration),
}

/// The [`Failure::metric_reason`] of an answer over its series limit; the others are the query
/// client's ([`crate::prom::FAILURE_REASONS`]).
pub const TOO_MANY_SERIES: &str = "too_many_series";

/// Every [`Failure::metric_reason`].
pub fn failure_reasons() -> impl Iterator<Item = &'static str> {
    crate::prom::FAILURE_REASONS
        .values()
        .iter()
        .copied()
        .chain([TOO_MANY_SERIES])
}

impl Failure {
    /// The `Evaluated` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::Query {
                error: PromError::TooLarge { .. },
                ..
            }
            | Failure::TooManySeries { .. }
            | Failure::Timeout(_) => condition::LIMIT_EXCEEDED,
            Failure::Query { .. } => condition::QUERY_FAILED,
        }
    }

    /// A closed set, for metric labels: `query`, `too_large`, `too_many_series`, `timeout`
    /// and the query client's transport reasons.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Failure::Query { error, .. } => error.reason(),
            Failure::TooManySeries { .. } => TOO_MANY_SERIES,
            Failure::Timeout(_) => "timeout",
        }
    }
}

/// What the queries answered: samples by query index, and every warning of a partial answer.
#[derive(Debug, Default)]
pub struct Answers {
    pub samples: Vec<Vec<Sample>>,
    pub warnings: Vec<String>,
}

/// Runs `def`'s queries at once, all within its timeout; an answer over its series limit, or
/// any failure, fails the evaluation (a definition is whole or not at all: half its score
/// items would rank clusters by the other half).
pub async fn run_queries(client: &PromClient, def: &Compiled) -> Result<Answers, Failure> {
    let runs = def.queries.iter().map(|q| client.query(q));
    let answers = tokio::time::timeout(def.timeout, futures::future::join_all(runs))
        .await
        .map_err(|_| Failure::Timeout(def.timeout))?;
    let mut out = Answers::default();
    for (i, answer) in answers.into_iter().enumerate() {
        let what = || what(def, i);
        let answer = answer.map_err(|error| Failure::Query {
            what: what(),
            error,
        })?;
        if answer.samples.len() > def.max_series {
            return Err(Failure::TooManySeries {
                what: what(),
                series: answer.samples.len(),
                limit: def.max_series,
            });
        }
        out.samples.push(answer.samples);
        out.warnings.extend(answer.warnings);
    }
    Ok(out)
}

/// The score names (or `freshness`) a query feeds, for messages.
fn what(def: &Compiled, query: usize) -> String {
    let mut names: Vec<&str> = def
        .rules
        .iter()
        .filter(|r| r.query == query)
        .map(|r| r.name.as_str())
        .collect();
    if def.freshness.is_some_and(|(q, _)| q == query) {
        names.push("freshness");
    }
    names.join(", ")
}

#[cfg(test)]
mod tests;
