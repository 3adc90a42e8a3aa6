//! Which ScoreDefinitions the hub scorer evaluates (sans IO): the valid `Hub` ones, oldest
//! first, one per score name, at most `--max-definitions`. A definition that loses says why in
//! its `Accepted` condition; one that wins keeps winning while it exists (order is by
//! creation, so a newer definition never displaces a running one).

use std::collections::{BTreeMap, BTreeSet};

use ocm_api::scoring::{Evaluator, ScoreDefinition, condition};
use score_provider::definition::{Caps, Compiled, compile};

/// What the scorer makes of one definition.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// Evaluated by this scorer.
    Admitted(Box<Compiled>),
    /// Not evaluated; `reason` is the `Accepted` condition's.
    Refused {
        reason: &'static str,
        message: String,
    },
    /// The agents' (the add-on manager ships it and writes its status).
    Agents,
}

/// The scorer's settings that admission depends on.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The trusted cluster label, filled into every expression.
    pub label: String,
    pub caps: Caps,
    pub max_definitions: usize,
}

/// Decides every definition in `defs` (by name).
pub fn admit(defs: &[&ScoreDefinition], policy: &Policy) -> BTreeMap<String, Admission> {
    let mut ordered: Vec<&ScoreDefinition> = defs
        .iter()
        .copied()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .collect();
    // Oldest first; the name breaks ties (creation times have a resolution of a second).
    ordered.sort_by(|a, b| {
        let t = |d: &ScoreDefinition| d.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(a).cmp(&t(b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut out = BTreeMap::new();
    // Score name -> the definition that fills it.
    let mut taken: BTreeMap<&str, &str> = BTreeMap::new();
    let mut admitted: BTreeSet<&str> = BTreeSet::new();
    for d in ordered {
        let Some(name) = d.metadata.name.as_deref() else {
            continue;
        };
        let agent = d.spec.evaluator == Evaluator::Agent;
        let compiled = compile(&d.spec, &policy.label, &policy.caps, agent);
        let admission = match compiled {
            Err(e) if agent => {
                // The manager reports it; the name stays free for nobody.
                tracing::debug!(definition = name, error = %e, "invalid agent definition");
                Admission::Agents
            }
            Err(e) => Admission::Refused {
                reason: condition::INVALID,
                message: e.to_string(),
            },
            Ok(c) => match taken.get(d.spec.score_name.as_str()) {
                Some(owner) => Admission::Refused {
                    reason: condition::SCORE_NAME_TAKEN,
                    message: format!(
                        "the older ScoreDefinition {owner:?} fills the AddOnPlacementScore {:?}",
                        d.spec.score_name
                    ),
                },
                None if agent => {
                    taken.insert(&d.spec.score_name, name);
                    Admission::Agents
                }
                None if admitted.len() >= policy.max_definitions => Admission::Refused {
                    reason: condition::TOO_MANY_DEFINITIONS,
                    message: format!(
                        "the scorer evaluates at most {} definitions (--max-definitions); older ones come first",
                        policy.max_definitions
                    ),
                },
                None => {
                    taken.insert(&d.spec.score_name, name);
                    admitted.insert(name);
                    Admission::Admitted(Box::new(c))
                }
            },
        };
        out.insert(name.to_owned(), admission);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str, created: i64, score: &str, evaluator: &str, expr: &str) -> ScoreDefinition {
        // An agent sees one cluster: Range only.
        let normalise = if evaluator == "Agent" {
            serde_json::json!({"type": "Range", "min": "0", "max": "1"})
        } else {
            serde_json::json!({"type": "MinMax"})
        };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scoring.ocm-placement.io/v1alpha1",
            "kind": "ScoreDefinition",
            "metadata": {"name": name, "creationTimestamp": jiff::Timestamp::from_second(created).expect("time").to_string()},
            "spec": {"scoreName": score, "evaluator": evaluator, "scores": [
                {"name": "s", "expression": expr, "normalise": normalise}
            ]}
        }))
        .expect("definition")
    }

    fn policy(max: usize) -> Policy {
        Policy {
            label: "tenant".into(),
            caps: Caps::default(),
            max_definitions: max,
        }
    }

    fn reason(a: &Admission) -> &'static str {
        match a {
            Admission::Admitted(_) => "admitted",
            Admission::Refused { reason, .. } => reason,
            Admission::Agents => "agents",
        }
    }

    #[test]
    fn oldest_first_one_per_score_name_and_a_cap() {
        let defs = [
            def("newer", 20, "gpu", "Hub", "x"),
            def("older", 10, "gpu", "Hub", "sum by ({{LABEL}}) (x)"),
            def("b", 30, "b", "Hub", "x"),
            def("a", 30, "a", "Hub", "x"),
            def("agent", 5, "lat", "Agent", "x"),
            def("hub-lat", 40, "lat", "Hub", "x"),
            def("empty", 1, "e", "Hub", " "),
        ];
        let refs: Vec<&ScoreDefinition> = defs.iter().collect();
        let got = admit(&refs, &policy(2));
        let reasons: BTreeMap<&str, &str> =
            got.iter().map(|(k, v)| (k.as_str(), reason(v))).collect();
        assert_eq!(
            reasons,
            BTreeMap::from([
                ("older", "admitted"),
                ("newer", condition::SCORE_NAME_TAKEN),
                // Same second: by name; the cap of two is reached at b.
                ("a", "admitted"),
                ("b", condition::TOO_MANY_DEFINITIONS),
                ("agent", "agents"),
                ("hub-lat", condition::SCORE_NAME_TAKEN),
                ("empty", condition::INVALID),
            ])
        );
        let Some(Admission::Admitted(c)) = got.get("older") else {
            panic!("older");
        };
        assert_eq!(
            c.queries,
            ["sum by (tenant) (x)"],
            "the trusted label filled in"
        );
        // A refused definition takes no name: when the older one goes, the newer one wins.
        let refs: Vec<&ScoreDefinition> = defs
            .iter()
            .filter(|d| d.metadata.name.as_deref() != Some("older"))
            .collect();
        assert_eq!(reason(&admit(&refs, &policy(2))["newer"]), "admitted");
    }
}
