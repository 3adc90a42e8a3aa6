//! `explain NAMESPACE/NAME`: `simulate` against a live hub. Reads the Placement and what it
//! depends on with plain gets and lists (no watch, no write), builds the same input `simulate`
//! reads from files, schedules it with the same code, and adds how the live PlacementDecisions
//! and status differ from what it computes now.

pub mod diff;

use kube::api::ListParams;
use kube::{Api, Client, Resource};
use ocm_api::scoring::ScoreDefinition;
use ocm_api::wellknown::label;
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::simulate::Objects;
pub use diff::LiveDiff;

#[derive(Debug, Error)]
pub enum ExplainError {
    #[error("expected NAMESPACE/NAME, got {0:?}")]
    BadKey(String),
    #[error("Placement {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error(
        "forbidden: this identity may not {verb} {resource} {scope} ({message}); explain needs get on placements and list on managedclusters, managedclustersets, managedclustersetbindings, placementdecisions and addonplacementscores"
    )]
    Forbidden {
        verb: &'static str,
        resource: String,
        scope: String,
        message: String,
    },
    #[error("cannot {verb} {resource} {scope}: {source}")]
    Api {
        verb: &'static str,
        resource: String,
        scope: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// `namespace/name`, split.
pub fn parse_key(key: &str) -> Result<(String, String), ExplainError> {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(ExplainError::BadKey(key.to_owned())),
    }
}

/// What one request was, for its error.
struct Call {
    verb: &'static str,
    resource: String,
    scope: String,
}

impl Call {
    fn new<K: Resource<DynamicType = ()>>(verb: &'static str, namespace: Option<&str>) -> Self {
        Self {
            verb,
            resource: format!("{}.{}", K::plural(&()), K::group(&())),
            scope: match namespace {
                Some(ns) => format!("in namespace {ns}"),
                None => "at cluster scope".into(),
            },
        }
    }

    fn fail(self, source: kube::Error) -> ExplainError {
        match source {
            kube::Error::Api(s) if s.code == 403 => ExplainError::Forbidden {
                verb: self.verb,
                resource: self.resource,
                scope: self.scope,
                message: s.message,
            },
            source => ExplainError::Api {
                verb: self.verb,
                resource: self.resource,
                scope: self.scope,
                source: Box::new(source),
            },
        }
    }
}

async fn list<K>(
    api: Api<K>,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<Vec<K>, ExplainError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.list(params)
        .await
        .map(|l| l.items)
        .map_err(|e| Call::new::<K>("list", namespace).fail(e))
}

/// The Placement and everything scheduling it reads, from the hub: the placement, every
/// ManagedCluster and ManagedClusterSet, the bindings in its namespace, its PlacementDecisions,
/// and the AddOnPlacementScores its prioritizers name (only those).
pub async fn read_hub(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Objects, ExplainError> {
    let placements: Api<Placement> = Api::namespaced(client.clone(), namespace);
    let placement = placements
        .get_opt(name)
        .await
        .map_err(|e| Call::new::<Placement>("get", Some(namespace)).fail(e))?
        .ok_or_else(|| ExplainError::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })?;
    let all = ListParams::default();
    let mut objects = Objects::default();
    for c in list(Api::<ManagedCluster>::all(client.clone()), None, &all).await? {
        objects
            .clusters
            .insert(c.metadata.name.clone().unwrap_or_default(), c);
    }
    for s in list(Api::<ManagedClusterSet>::all(client.clone()), None, &all).await? {
        objects
            .sets
            .insert(s.metadata.name.clone().unwrap_or_default(), s);
    }
    let bindings = Api::<ManagedClusterSetBinding>::namespaced(client.clone(), namespace);
    for b in list(bindings, Some(namespace), &all).await? {
        let key = (
            namespace.to_owned(),
            b.metadata.name.clone().unwrap_or_default(),
        );
        objects.bindings.insert(key, b);
    }
    let decisions = Api::<PlacementDecision>::namespaced(client.clone(), namespace);
    let mine = ListParams::default().labels(&format!("{}={name}", label::PLACEMENT));
    for d in list(decisions, Some(namespace), &mine).await? {
        let key = (
            namespace.to_owned(),
            d.metadata.name.clone().unwrap_or_default(),
        );
        objects.decisions.insert(key, d);
    }
    for resource in crate::simulate::score_resources(&placement) {
        let named = ListParams::default().fields(&format!("metadata.name={resource}"));
        let scores = Api::<AddOnPlacementScore>::all(client.clone());
        for s in list(scores, None, &named).await? {
            let key = (
                s.metadata.namespace.clone().unwrap_or_default(),
                s.metadata.name.clone().unwrap_or_default(),
            );
            objects.scores.insert(key, s);
        }
    }
    // Where the scores come from: documentation only, so a hub without the CRD, or an
    // identity that may not list them, still gets its explanation.
    let definitions = Api::<ScoreDefinition>::all(client.clone());
    match definitions.list(&all).await {
        Ok(list) => {
            for d in list.items {
                objects
                    .definitions
                    .insert(d.metadata.name.clone().unwrap_or_default(), d);
            }
        }
        Err(e) => tracing::debug!(error = %e, "ScoreDefinitions not listed; score sources unknown"),
    }
    objects.placements.insert(
        (namespace.to_owned(), name.to_owned()),
        (placement, "the hub".to_owned()),
    );
    Ok(objects)
}

/// The live decisions and status of `placement` in `objects` against the computed `outcome`.
pub fn live_diff(
    objects: &Objects,
    placement: &Placement,
    outcome: &placement_core::Outcome,
) -> LiveDiff {
    let live: Vec<PlacementDecision> = objects.decisions.values().cloned().collect();
    diff::diff(
        &live,
        placement.status.as_ref(),
        &outcome.decisions,
        &outcome.placement_status,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(parse_key("ns/p").ok(), Some(("ns".into(), "p".into())));
        for bad in ["p", "/p", "ns/", "a/b/c"] {
            assert!(
                parse_key(bad).is_err_and(|e| e.to_string().contains("NAMESPACE/NAME")),
                "{bad}"
            );
        }
    }
}
