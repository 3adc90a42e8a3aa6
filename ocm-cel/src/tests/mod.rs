//! The evaluator's tests: what expressions mean ([`evaluation`]), the libraries
//! ([`libraries`]) and the cost budget ([`budget`]). Shared helpers below.

mod budget;
mod evaluation;
mod libraries;

use super::*;
use std::collections::HashMap;

/// A cluster with labels, claims, a Kubernetes version and allocatable resources.
pub(super) fn test_cluster() -> ManagedCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedCluster",
        "metadata": {
            "name": "cluster1",
            "labels": {"version": "1.2", "env": "prod", "cloud": "aws"},
            "annotations": {"config": "{\"zones\": [\"a\", \"b\"], \"gpu\": true}"}
        },
        "spec": {"hubAcceptsClient": true},
        "status": {
            "clusterClaims": [
                {"name": "region", "value": "us-east"},
                {"name": "platform", "value": "AWS"}
            ],
            "version": {"kubernetes": "v1.30.2"},
            "allocatable": {"cpu": "8", "memory": "32Gi"}
        }
    }))
    .unwrap()
}

/// AddOnPlacementScores by `(cluster, name)`.
pub(super) struct Scores(HashMap<(String, String), Vec<AddOnPlacementScoreItem>>);

impl ScoreSource for Scores {
    fn scores(&self, cluster: &str, name: &str) -> Option<Vec<AddOnPlacementScoreItem>> {
        self.0.get(&(cluster.to_owned(), name.to_owned())).cloned()
    }
}

pub(super) fn scores(items: &[(&str, i32)]) -> Scores {
    let items = items
        .iter()
        .map(|(name, value)| AddOnPlacementScoreItem {
            name: (*name).into(),
            value: *value,
        })
        .collect();
    Scores(HashMap::from([(("cluster1".into(), "demo".into()), items)]))
}

pub(super) fn compile(expressions: &[&str]) -> Result<CelSelector, String> {
    CelSelector::compile(
        &expressions
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>(),
    )
    .map_err(|e| match e {
        CompileError::Invalid(m) | CompileError::Transient(m) => m,
    })
}

pub(super) fn eval_with(expressions: &[&str], source: &dyn ScoreSource) -> bool {
    let selector = compile(expressions).unwrap_or_else(|e| panic!("{expressions:?}: {e}"));
    selector.matches(&CelCluster::new(&test_cluster()), source)
}

pub(super) fn eval(expression: &str) -> bool {
    eval_with(&[expression], &scores(&[]))
}

/// The units one evaluation of `expression` charges.
pub(super) fn cost(expression: &str) -> u64 {
    let selector = compile(&[expression]).unwrap();
    let cluster = CelCluster::new(&test_cluster());
    let activation = Activation {
        cluster: &cluster,
        scores: &scores(&[]),
        meter: Meter::new(u64::MAX),
        deadline: &(),
    };
    let runtime = RUNTIME.as_ref().unwrap();
    runtime.evaluate(&selector.programs[0], &activation);
    activation.meter.used()
}

pub(super) fn assert_all(cases: &[(&str, bool)]) {
    for (expression, expected) in cases {
        assert_eq!(eval(expression), *expected, "{expression}");
    }
}
