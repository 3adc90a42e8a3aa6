//! What a score provider implements: compute the scores now, and say what makes a recompute
//! due. Everything else (hub client, writes, refresh loop, metrics, health) is the
//! framework's.

use std::collections::BTreeMap;
use std::future::Future;

use futures::stream::BoxStream;
use ocm_api::score::Normaliser;
use ocm_api::wellknown::limits::{MAX_CLUSTER_SCORE, MIN_CLUSTER_SCORE};
use thiserror::Error;

/// A score provider. The framework calls [`ScoreProvider::compute`] every refresh period and
/// soon after each item of [`ScoreProvider::changes`] (debounced), then writes what changed.
pub trait ScoreProvider: Send + 'static {
    /// The scores of every cluster this provider rates, now: one cluster for an agent on a
    /// managed cluster, many for a provider on the hub. A cluster left out is not written
    /// (its last scores expire at their `validUntil`).
    fn compute(&mut self) -> impl Future<Output = Result<Computed, ProviderError>> + Send;

    /// Changes that make a recompute due besides the period. Polling this stream is also what
    /// drives any watches the provider keeps, so the framework polls it all the time. The
    /// default: none, the period alone.
    fn changes(&mut self) -> BoxStream<'static, Change> {
        Box::pin(futures::stream::pending())
    }
}

/// Something changed that can move the scores; `what` is for logs and metrics ("pod",
/// "node", ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub what: &'static str,
}

/// Why a provider could not compute.
#[derive(Debug, Error)]
pub enum ProviderError {
    /// Not ready yet (e.g. the first list of a watch has not arrived); the framework waits for
    /// the next change or period without writing and without counting a failure.
    #[error("not ready: {0}")]
    NotReady(String),
    /// The source failed; the framework logs it, counts it and leaves the hub as it is.
    #[error("{0}")]
    Source(String),
    #[error(transparent)]
    Score(#[from] ScoreError),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScoreError {
    #[error("score {name:?} = {value} is outside [-100, 100]")]
    OutOfRange { name: String, value: i64 },
    #[error("a score needs a name")]
    EmptyName,
}

/// One cluster's scores: names to values in [-100, 100], checked on insert.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scores(BTreeMap<String, i32>);

impl Scores {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces `name`; refuses a value outside [-100, 100].
    pub fn insert(&mut self, name: impl Into<String>, value: i64) -> Result<(), ScoreError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ScoreError::EmptyName);
        }
        if !(MIN_CLUSTER_SCORE..=MAX_CLUSTER_SCORE).contains(&value) {
            return Err(ScoreError::OutOfRange { name, value });
        }
        // In range, so it fits.
        self.0.insert(name, value as i32);
        Ok(())
    }

    /// Adds `name` with `value` mapped through `normaliser`.
    pub fn insert_normalised(
        &mut self,
        name: impl Into<String>,
        value: f64,
        normaliser: &Normaliser,
    ) -> Result<(), ScoreError> {
        self.insert(name, i64::from(normaliser.normalise(value)))
    }

    pub fn get(&self, name: &str) -> Option<i32> {
        self.0.get(name).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, i32)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `self` differs from `other` by enough to write: another set of names, or some
    /// value that moved by `hysteresis` points or more (0: any move).
    pub fn moved_from(&self, other: &Scores, hysteresis: u32) -> bool {
        self.0.len() != other.0.len()
            || self
                .0
                .iter()
                .zip(other.0.iter())
                .any(|((n1, v1), (n2, v2))| {
                    n1 != n2 || (v1 != v2 && (v1 - v2).unsigned_abs() >= hysteresis)
                })
    }
}

impl<'a> FromIterator<(&'a str, i32)> for Scores {
    /// For tests and literals; values are clamped to [-100, 100], empty names dropped.
    fn from_iter<I: IntoIterator<Item = (&'a str, i32)>>(iter: I) -> Self {
        Scores(
            iter.into_iter()
                .filter(|(n, _)| !n.is_empty())
                .map(|(n, v)| {
                    (
                        n.to_owned(),
                        v.clamp(MIN_CLUSTER_SCORE as i32, MAX_CLUSTER_SCORE as i32),
                    )
                })
                .collect(),
        )
    }
}

/// What a provider says of one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Current scores.
    Scores(Scores),
    /// No current scores (e.g. no fresh metrics for it). The framework sets the condition
    /// `AddOnPlacementScoreUpdated=False` with this reason and message and leaves the last
    /// scores to expire at their `validUntil`.
    Unavailable { reason: String, message: String },
}

/// The outcome for each cluster (namespace on the hub) a provider rates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Computed(BTreeMap<String, Outcome>);

impl Computed {
    pub fn new() -> Self {
        Self::default()
    }

    /// One cluster's scores: what an agent on a managed cluster returns.
    pub fn single(cluster: impl Into<String>, scores: Scores) -> Self {
        let mut c = Self::new();
        c.insert(cluster, Outcome::Scores(scores));
        c
    }

    pub fn insert(&mut self, cluster: impl Into<String>, outcome: Outcome) {
        self.0.insert(cluster.into(), outcome);
    }

    pub fn get(&self, cluster: &str) -> Option<&Outcome> {
        self.0.get(cluster)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Outcome)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_checks_the_range() {
        let mut s = Scores::new();
        assert!(s.insert("cpu", 100).is_ok());
        assert!(s.insert("cpu", -100).is_ok());
        assert_eq!(
            s.insert("cpu", 101),
            Err(ScoreError::OutOfRange {
                name: "cpu".into(),
                value: 101
            })
        );
        assert_eq!(s.insert("", 0), Err(ScoreError::EmptyName));
        assert_eq!(s.get("cpu"), Some(-100));
    }

    #[test]
    fn hysteresis_ignores_small_moves_only() {
        let a: Scores = [("cpu", 10), ("mem", 20)].into_iter().collect();
        let b: Scores = [("cpu", 14), ("mem", 20)].into_iter().collect();
        let c: Scores = [("cpu", 10)].into_iter().collect();
        let d: Scores = [("cpu", 10), ("gpu", 20)].into_iter().collect();
        assert!(!a.moved_from(&a, 0));
        assert!(b.moved_from(&a, 0));
        assert!(b.moved_from(&a, 4));
        assert!(!b.moved_from(&a, 5));
        assert!(c.moved_from(&a, 100), "a score that went away is a change");
        assert!(d.moved_from(&a, 100), "another name is a change");
    }
}
