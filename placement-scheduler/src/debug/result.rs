//! The endpoint's answer: upstream's `DebugResult` shape, built from one scheduling outcome.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ocm_api::Placement;
use placement_core::Outcome;
use serde::{Deserialize, Serialize};

/// The 200 answer (and, with only `error` set, every other one): upstream's `DebugResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DebugResult {
    /// The scheduled Placement: metadata name, namespace, labels and annotations, and spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    #[serde(
        rename = "filteredPipelineResults",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub filter_results: Vec<FilterStep>,
    #[serde(
        rename = "prioritizeResults",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub prioritize_results: Vec<PrioritizeStep>,
    #[serde(
        rename = "aggregatedScores",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub aggregated_scores: Vec<ClusterScore>,
    /// Ours, not upstream's: replacements the Placement's stability controls held back, each
    /// as `<incoming> would replace <outgoing>: <reason>`.
    #[serde(rename = "heldMoves", default, skip_serializing_if = "Vec::is_empty")]
    pub held_moves: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The clusters left after the filters so far, named by the filters joined with `,`
/// (`Predicate`, `Predicate,TaintToleration`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterStep {
    pub name: String,
    #[serde(rename = "filteredClusters", default)]
    pub filtered_clusters: Vec<String>,
}

/// One prioritizer's weight and its score per cluster (before weighting).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrioritizeStep {
    pub name: String,
    pub weight: i32,
    #[serde(default)]
    pub scores: BTreeMap<String, i64>,
}

/// A cluster's total: `Σ weight × score`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterScore {
    #[serde(rename = "clusterName")]
    pub cluster_name: String,
    pub score: i64,
}

/// Upstream's result shape from one scheduling outcome (see the module documentation for the
/// orders and quirks).
pub fn debug_result(placement: &Placement, outcome: &Outcome) -> DebugResult {
    let totals = totals(outcome);
    DebugResult {
        placement: Some(bare(placement)),
        filter_results: filter_steps(outcome, totals.as_ref()),
        prioritize_results: prioritize_steps(outcome),
        aggregated_scores: aggregated_scores(outcome, totals.is_some()),
        held_moves: outcome.held.iter().map(ToString::to_string).collect(),
        error: String::new(),
    }
}

/// Totals by cluster, when the core got as far as scoring.
fn totals(outcome: &Outcome) -> Option<HashMap<&str, i64>> {
    (outcome.totals.len() == outcome.filtered.len()).then(|| {
        outcome
            .filtered
            .iter()
            .map(|n| &**n)
            .zip(outcome.totals.iter().copied())
            .collect()
    })
}

/// Each filter's kept clusters: the previous ones minus what it dropped, named by the
/// filters so far.
fn filter_steps(outcome: &Outcome, totals: Option<&HashMap<&str, i64>>) -> Vec<FilterStep> {
    let mut kept: Vec<&str> = outcome.available.iter().map(|n| &**n).collect();
    let mut names: Vec<&str> = Vec::with_capacity(outcome.filters.len());
    let mut steps = Vec::with_capacity(outcome.filters.len());
    for (i, f) in outcome.filters.iter().enumerate() {
        let dropped: HashSet<&str> = f.dropped.iter().map(|(n, _)| &**n).collect();
        kept.retain(|c| !dropped.contains(c));
        names.push(f.name);
        let mut list: Vec<String> = kept.iter().map(|c| (*c).to_owned()).collect();
        // Upstream's quirk: the final sort works in place on the last filter's slice.
        if i + 1 == outcome.filters.len()
            && let Some(totals) = totals
        {
            list.sort_by(|a, b| {
                let (ta, tb) = (totals.get(a.as_str()), totals.get(b.as_str()));
                tb.cmp(&ta).then_with(|| a.cmp(b))
            });
        }
        steps.push(FilterStep {
            name: names.join(","),
            filtered_clusters: list,
        });
    }
    steps
}

/// Each prioritizer's scores of the filtered clusters it scored.
fn prioritize_steps(outcome: &Outcome) -> Vec<PrioritizeStep> {
    outcome
        .prioritizers
        .iter()
        .map(|p| PrioritizeStep {
            name: p.name.clone(),
            weight: p.weight,
            scores: outcome
                .filtered
                .iter()
                .zip(&p.scores)
                .filter_map(|(c, s)| s.map(|s| (c.to_string(), s)))
                .collect(),
        })
        .collect()
}

/// The totals, highest first (then by name); none when the core did not score.
fn aggregated_scores(outcome: &Outcome, scored: bool) -> Vec<ClusterScore> {
    if !scored {
        return Vec::new();
    }
    let mut scores: Vec<ClusterScore> = outcome
        .filtered
        .iter()
        .zip(&outcome.totals)
        .map(|(c, t)| ClusterScore {
            cluster_name: c.to_string(),
            score: *t,
        })
        .collect();
    scores.sort_by(|a, b| {
        b.score
            .cmp(&a.score)
            .then_with(|| a.cluster_name.cmp(&b.cluster_name))
    });
    scores
}

/// The placement as upstream's result shows it: name, namespace, labels, annotations, spec.
fn bare(placement: &Placement) -> Placement {
    Placement {
        metadata: ObjectMeta {
            name: placement.metadata.name.clone(),
            namespace: placement.metadata.namespace.clone(),
            labels: placement.metadata.labels.clone(),
            annotations: placement.metadata.annotations.clone(),
            ..Default::default()
        },
        spec: placement.spec.clone(),
        status: None,
    }
}
