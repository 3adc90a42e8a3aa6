//! Affinity and anti-affinity spread (use case 4 of upstream's spread-policy proposal,
//! open-cluster-management-io/enhancements `enhancements/sig-architecture/70-spread-policy`):
//! prefer clusters in some topologies over others. Upstream's CRD has no field for it, so it is
//! carried in the Placement annotation [`ANNOTATION`] as a JSON list:
//!
//! ```json
//! [{"topologyKey": "provider", "topologyKeyType": "Label", "weight": 3,
//!   "topologyWeights": [{"weight": 20, "operator": "In", "values": ["aws"]},
//!                       {"weight": 10, "operator": "NotIn", "values": ["alibaba"]}]}]
//! ```
//!
//! Each term is one prioritizer named `TopologyAffinity/<topologyKey>` with `weight` (in
//! [-10, 10], default 1). A cluster's raw score is the sum of the `topologyWeights[].weight`
//! whose requirement its topology value meets (label-selector operators: `NotIn` and
//! `DoesNotExist` match a cluster without the key); raw scores are min-max normalised to
//! [-100, 100] over the candidates (all 0 when equal). A negative topology weight expresses
//! anti-affinity.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use ocm_api::selector::Selector;
use ocm_api::wellknown::{limits, topology_key_type};
use serde::Deserialize;

use super::normalise;
use crate::snapshot::ClusterInfo;
use crate::status::Status;

/// The Placement annotation that carries affinity spread terms.
pub const ANNOTATION: &str = "scheduling.ocm-placement.io/topology-affinity";
pub const PLUGIN: &str = "TopologyAffinity";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TermSpec {
    topology_key: String,
    #[serde(default)]
    topology_key_type: String,
    #[serde(default = "one")]
    weight: i32,
    topology_weights: Vec<TopologyWeightSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TopologyWeightSpec {
    weight: i32,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

fn one() -> i32 {
    1
}

/// One validated affinity term.
#[derive(Debug, Clone)]
pub(crate) struct Term {
    pub topology_key: String,
    pub claim: bool,
    pub weight: i32,
    weights: Vec<(i64, Selector)>,
}

impl Term {
    pub(crate) fn name(&self) -> String {
        format!("{PLUGIN}/{}", self.topology_key)
    }
}

/// Reads the annotation; absent means no terms. Bad content makes the Placement misconfigured.
pub(crate) fn parse(annotation: Option<&str>) -> Result<Vec<Term>, Status> {
    let Some(text) = annotation else {
        return Ok(Vec::new());
    };
    let bad = |m: String| Status::misconfigured(PLUGIN, format!("annotation {ANNOTATION}: {m}"));
    let specs: Vec<TermSpec> = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let mut terms = Vec::with_capacity(specs.len());
    for (i, s) in specs.into_iter().enumerate() {
        let at = |m: String| bad(format!("term {i}: {m}"));
        if s.topology_key.is_empty() {
            return Err(at("topologyKey is required".into()));
        }
        let claim = match s.topology_key_type.as_str() {
            "" | topology_key_type::LABEL => false,
            topology_key_type::CLAIM => true,
            other => {
                return Err(at(format!(
                    "topologyKeyType must be Label or Claim, not {other:?}"
                )));
            }
        };
        if !(limits::MIN_WEIGHT..=limits::MAX_WEIGHT).contains(&s.weight) {
            return Err(at(format!("weight {} is out of range [-10, 10]", s.weight)));
        }
        if s.topology_weights.is_empty() {
            return Err(at("topologyWeights must not be empty".into()));
        }
        let mut weights = Vec::with_capacity(s.topology_weights.len());
        for w in s.topology_weights {
            let req = LabelSelectorRequirement {
                key: s.topology_key.clone(),
                operator: w.operator,
                values: Some(w.values),
            };
            let sel = Selector::from_requirements(std::slice::from_ref(&req))
                .map_err(|e| at(e.to_string()))?;
            weights.push((i64::from(w.weight), sel));
        }
        terms.push(Term {
            topology_key: s.topology_key,
            claim,
            weight: s.weight,
            weights,
        });
    }
    Ok(terms)
}

struct One<'a>(&'a str, Option<&'a str>);

impl ocm_api::selector::Labels for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if key == self.0 { self.1 } else { None }
    }
}

pub(crate) fn score(term: &Term, clusters: &[&ClusterInfo]) -> Vec<Option<i64>> {
    let raw: Vec<i64> = clusters
        .iter()
        .map(|c| {
            let v = One(
                &term.topology_key,
                c.topology_value(&term.topology_key, term.claim),
            );
            term.weights
                .iter()
                .filter(|(_, sel)| sel.matches(&v))
                .map(|(w, _)| w)
                .sum()
        })
        .collect();
    let (min, max) = raw
        .iter()
        .fold((i64::MAX, i64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    raw.into_iter()
        .map(|v| {
            Some(if max == min {
                0
            } else {
                normalise(v as f64, min as f64, max as f64)
            })
        })
        .collect()
}
