//! The ScoreDefinitions evaluated by the agents (`spec.evaluator: Agent`): each compiled as an
//! agent compiles it; the valid ones rendered into the agent's ConfigMap (the file
//! `definitions.yaml`, a YAML list of `{name, generation, spec}` sorted by name), and each
//! one's `Accepted` condition. Pure: the pass calls it with the snapshot's definitions.
//!
//! Shipping through the agent's ManifestWork, not an AddOnDeploymentConfig: a definition is the
//! fleet's (cluster-scoped, written by hub admins), so what an agent is shipped is rendered
//! from the hub's own objects and no spoke-side configuration can choose it; a change rolls
//! out through the rollout like any new rendering (the agent reads the mounted file again,
//! without a restart).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use ocm_api::conditions;
use ocm_api::scoring::condition::{ACCEPTED, EVALUATED_BY_AGENTS, INVALID};
use ocm_api::scoring::{Evaluator, ScoreDefinition, ScoreDefinitionStatus, ShippedDefinition};
use score_provider::definition::{Caps, compile};

/// The label filled into `{{LABEL}}` when compiling for an agent (its series are all its own;
/// the agent compiles with the same).
const AGENT_LABEL: &str = "cluster";

/// What the Agent definitions give a pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shipping {
    /// The file's text (`[]` when none).
    pub file: String,
    /// `(definition name, status)` for each Agent definition whose status is to be written.
    pub statuses: Vec<(String, ScoreDefinitionStatus)>,
}

/// Compiles the Agent definitions among `defs`: the valid ones shipped, the status of each
/// that differs from what it says (only Agent definitions: the hub scorer owns the others).
pub fn ship(defs: &[Arc<ScoreDefinition>], now: jiff::Timestamp) -> Shipping {
    let mut agent: Vec<&ScoreDefinition> = defs
        .iter()
        .map(Arc::as_ref)
        .filter(|d| d.spec.evaluator == Evaluator::Agent && d.metadata.name.is_some())
        .collect();
    agent.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut shipped = Vec::new();
    let mut statuses = Vec::new();
    for d in agent {
        let name = d.metadata.name.clone().unwrap_or_default();
        let generation = d.metadata.generation.unwrap_or(0);
        let (status, reason, message) = match compile(&d.spec, AGENT_LABEL, &Caps::default(), true)
        {
            Ok(_) => {
                shipped.push(ShippedDefinition {
                    name: name.clone(),
                    generation,
                    spec: d.spec.clone(),
                });
                (
                        "True",
                        EVALUATED_BY_AGENTS,
                        "valid; shipped to the agents, which evaluate it against their cluster's own Prometheus".to_owned(),
                    )
            }
            Err(e) => ("False", INVALID, e.to_string()),
        };
        let current = d.status.clone().unwrap_or_default();
        let mut conds: Vec<Condition> = current
            .conditions
            .iter()
            .filter(|c| c.type_ == ACCEPTED)
            .cloned()
            .collect();
        conditions::set(&mut conds, ACCEPTED, status, reason, &message, now);
        for c in &mut conds {
            c.observed_generation = d.metadata.generation;
        }
        let desired = ScoreDefinitionStatus {
            observed_generation: d.metadata.generation,
            conditions: conds,
            last_evaluation_time: None,
            scored_clusters: None,
        };
        if desired != current {
            statuses.push((name, desired));
        }
    }
    Shipping {
        file: file_text(&shipped),
        statuses,
    }
}

/// The YAML list (`[]` when empty).
fn file_text(shipped: &[ShippedDefinition]) -> String {
    if shipped.is_empty() {
        return "[]\n".to_owned();
    }
    // Plain data (strings, numbers, lists, maps): it serialises; should it not, nothing
    // is shipped rather than half a list.
    serde_saphyr::to_string(&shipped).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot render the agents' definitions; shipping none");
        "[]\n".to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::render::{self, AgentTemplate};
    use serde_json::json;

    fn def(name: &str, generation: i64, spec: serde_json::Value) -> Arc<ScoreDefinition> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "generation": generation, "resourceVersion": "1"},
                "spec": spec,
            }))
            .expect("a definition"),
        )
    }

    fn gpu(evaluator: &str, score: &str, normalise: serde_json::Value) -> serde_json::Value {
        json!({
            "scoreName": score, "evaluator": evaluator, "refreshPeriod": "30s",
            "scores": [{"name": "gpuMemoryFree", "expression": "sum(DCGM_FI_DEV_FB_FREE) * 1048576", "normalise": normalise}],
        })
    }

    fn range() -> serde_json::Value {
        json!({"type": "Range", "min": "0", "max": "80Gi"})
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000).expect("time")
    }

    /// The ConfigMap of a rendering with `file`.
    fn configmap(file: &str) -> serde_json::Value {
        let t = AgentTemplate {
            addon_name: "ru".into(),
            image: "example.com/agent:1".into(),
            default_install_namespace: "agents".into(),
            definitions: file.to_owned(),
        };
        let r = render::render(&t, "c1", None).expect("render");
        r.spec
            .workload
            .manifests
            .iter()
            .find(|m| m.raw["kind"] == "ConfigMap")
            .expect("the ConfigMap")
            .raw
            .clone()
    }

    #[test]
    fn only_valid_agent_definitions_are_shipped_sorted_by_name() {
        // (what, definitions, the names shipped)
        type Case = (&'static str, Vec<Arc<ScoreDefinition>>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            ("none", vec![], vec![]),
            (
                "valid agent definitions, by name",
                vec![
                    def("zz", 3, gpu("Agent", "gpu-b", range())),
                    def("aa", 1, gpu("Agent", "gpu-a", range())),
                ],
                vec!["aa", "zz"],
            ),
            (
                "a hub definition is the scorer's",
                vec![
                    def("hub", 1, gpu("Hub", "gpu-h", json!({"type": "MinMax"}))),
                    def("agent", 1, gpu("Agent", "gpu-a", range())),
                ],
                vec!["agent"],
            ),
            (
                "invalid: not Range, a bad quantity, a bad duration",
                vec![
                    def("minmax", 1, gpu("Agent", "x", json!({"type": "MinMax"}))),
                    def(
                        "quantity",
                        1,
                        gpu(
                            "Agent",
                            "y",
                            json!({"type": "Range", "min": "0", "max": "lots"}),
                        ),
                    ),
                    def("ok", 1, gpu("Agent", "z", range())),
                ],
                vec!["ok"],
            ),
        ];
        for (what, defs, want) in cases {
            let s = ship(&defs, now());
            let cm = configmap(&s.file);
            assert_eq!(cm["metadata"]["name"], "ru-definitions", "{what}");
            assert_eq!(cm["metadata"]["namespace"], "agents", "{what}");
            let text = cm["data"]["definitions.yaml"].as_str().expect("the file");
            let shipped: Vec<ShippedDefinition> =
                serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
            let names: Vec<&str> = shipped.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, want, "{what}");
            for d in &shipped {
                let original = defs
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(d.name.as_str()))
                    .expect("shipped from a definition");
                assert_eq!(d.spec, original.spec, "{what}: the spec as written");
                assert_eq!(Some(d.generation), original.metadata.generation);
            }
        }
        assert_eq!(configmap("")["data"]["definitions.yaml"], "[]\n");
    }

    #[test]
    fn agent_definitions_get_accepted_once_and_hub_ones_nothing() {
        let defs = vec![
            def("ok", 2, gpu("Agent", "a", range())),
            def("bad", 1, gpu("Agent", "b", json!({"type": "Rank"}))),
            def("hub", 1, gpu("Hub", "h", range())),
        ];
        let s = ship(&defs, now());
        let by: std::collections::BTreeMap<&str, &ScoreDefinitionStatus> =
            s.statuses.iter().map(|(n, st)| (n.as_str(), st)).collect();
        assert_eq!(by.len(), 2, "the hub definition is the scorer's");
        let ok = &by["ok"];
        assert_eq!(ok.observed_generation, Some(2));
        assert_eq!(ok.conditions.len(), 1);
        let c = &ok.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (ACCEPTED, "True", EVALUATED_BY_AGENTS)
        );
        let c = &by["bad"].conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", INVALID));
        assert!(c.message.contains("Range"), "{}", c.message);

        // Written: nothing more to write, also later.
        let written: Vec<Arc<ScoreDefinition>> = defs
            .iter()
            .map(|d| {
                let mut d = d.as_ref().clone();
                if let Some((_, st)) = s
                    .statuses
                    .iter()
                    .find(|(n, _)| Some(n) == d.metadata.name.as_ref())
                {
                    d.status = Some(st.clone());
                }
                Arc::new(d)
            })
            .collect();
        let later = now() + jiff::SignedDuration::from_secs(60);
        assert!(ship(&written, later).statuses.is_empty());
        // A new generation is observed again.
        let mut newer = written[0].as_ref().clone();
        newer.metadata.generation = Some(3);
        let again = ship(&[Arc::new(newer)], later);
        assert_eq!(again.statuses.len(), 1);
        assert_eq!(again.statuses[0].1.observed_generation, Some(3));
        // A definition that was the hub's: the scorer's conditions go.
        let mut moved = def("moved", 1, gpu("Agent", "m", range())).as_ref().clone();
        moved.status = Some(ScoreDefinitionStatus {
            observed_generation: Some(1),
            conditions: vec![Condition {
                type_: "Evaluated".into(),
                status: "True".into(),
                reason: "Scored".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()),
                observed_generation: Some(1),
            }],
            last_evaluation_time: None,
            scored_clusters: Some(3),
        });
        let st = &ship(&[Arc::new(moved)], later).statuses[0].1;
        assert_eq!(st.conditions.len(), 1);
        assert_eq!(st.conditions[0].type_, ACCEPTED);
        assert_eq!(st.scored_clusters, None);
    }
}
