//! What every definition's evaluation shares: one watch each of the ManagedClusters (which
//! clusters are rated), the AddOnPlacementScores (who keeps each score object) and the
//! ScoreDefinitions, however many definitions run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use ocm_api::scoring::ScoreDefinition;
use ocm_api::{AddOnPlacementScore, ManagedCluster};
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;

/// The shared stores and their change signals. Dropping it stops the watches.
pub struct Fleet {
    clusters: Store<ManagedCluster>,
    scores: Store<AddOnPlacementScore>,
    definitions: Store<ScoreDefinition>,
    /// A change of the set of rated clusters (each definition's runner subscribes).
    rated: broadcast::Sender<()>,
    /// A change of any definition.
    pub definitions_changed: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Fleet {
    /// Starts the watches through `hub`. Every definition is watched, whatever this scorer
    /// evaluates: a score object is an orphan only when no definition at all fills it.
    pub fn start(hub: Client) -> Self {
        let (clusters, clusters_w) = reflector::store::<ManagedCluster>();
        let (scores, scores_w) = reflector::store::<AddOnPlacementScore>();
        let (definitions, definitions_w) = reflector::store::<ScoreDefinition>();
        let (rated_tx, _) = broadcast::channel(16);
        let definitions_changed = Arc::new(Notify::new());

        // Metrics change once per push; a cluster's status updates are no reason to query.
        // Only a change of the set of rated clusters is.
        let tx = rated_tx.clone();
        let cluster_watch = reflector::reflector(
            clusters_w,
            watcher::watcher(Api::<ManagedCluster>::all(hub.clone()), Default::default()),
        )
        .backoff(ocm_runtime::watch::backoff());
        let mut rated_set: BTreeSet<String> = BTreeSet::new();
        let clusters_task = tokio::spawn(cluster_watch.for_each(move |r| {
            let changed = match r {
                Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                    let name = c.name_any();
                    if rateable(&c) {
                        rated_set.insert(name)
                    } else {
                        rated_set.remove(&name)
                    }
                }
                Ok(watcher::Event::Delete(c)) => rated_set.remove(&c.name_any()),
                Ok(watcher::Event::InitDone) => true,
                Ok(watcher::Event::Init) => false,
                Err(e) => {
                    tracing::warn!(error = %e, "ManagedCluster watch failed; retrying");
                    false
                }
            };
            if changed {
                // No receiver (no definition running yet) is fine.
                let _ = tx.send(());
            }
            futures::future::ready(())
        }));

        // Score writes (ours included) are no reason to query again: they drive the store.
        let scores_task = tokio::spawn(
            reflector::reflector(
                scores_w,
                watcher::watcher(
                    Api::<AddOnPlacementScore>::all(hub.clone()),
                    Default::default(),
                ),
            )
            .backoff(ocm_runtime::watch::backoff())
            .for_each(|r| {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "AddOnPlacementScore watch failed; retrying");
                }
                futures::future::ready(())
            }),
        );

        let notify = definitions_changed.clone();
        // What admission reads of each definition: a status write (ours, every evaluation)
        // is no reason to look at them all again.
        let mut seen: BTreeMap<String, DefinitionKey> = BTreeMap::new();
        let definitions_task = tokio::spawn(
            reflector::reflector(
                definitions_w,
                watcher::watcher(Api::<ScoreDefinition>::all(hub), Default::default()),
            )
            .backoff(ocm_runtime::watch::backoff())
            .for_each(move |r| {
                let changed = match r {
                    Ok(watcher::Event::Init) => false,
                    Ok(watcher::Event::InitDone) => true,
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                        let key = DefinitionKey::of(&d);
                        seen.insert(d.name_any(), key.clone()) != Some(key)
                    }
                    Ok(watcher::Event::Delete(d)) => {
                        seen.remove(&d.name_any());
                        true
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "ScoreDefinition watch failed; retrying");
                        false
                    }
                };
                if changed {
                    notify.notify_one();
                }
                futures::future::ready(())
            }),
        );
        Self {
            clusters,
            scores,
            definitions,
            rated: rated_tx,
            definitions_changed,
            tasks: vec![clusters_task, scores_task, definitions_task],
        }
    }

    /// Every store has listed once (an empty list is a list too). Before the score objects
    /// are listed, an agent's would look free to take.
    pub fn listed(&self) -> bool {
        listed(&self.clusters) && listed(&self.scores)
    }

    pub fn definitions_listed(&self) -> bool {
        listed(&self.definitions)
    }

    pub fn definitions(&self) -> Vec<Arc<ScoreDefinition>> {
        self.definitions.state()
    }

    pub fn definition(&self, name: &str) -> Option<Arc<ScoreDefinition>> {
        self.definitions.get(&ObjectRef::new(name))
    }

    /// A receiver of rated-set changes.
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.rated.subscribe()
    }

    /// The clusters rated, in order: accepted by the hub (they have their namespace) and not
    /// going.
    pub fn rated(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .clusters
            .state()
            .iter()
            .filter(|c| rateable(c))
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Whether another provider keeps `cluster`'s score object `score_name`: its `managed-by`
    /// label (the framework's writers set it) or a field manager of its status is not
    /// `manager`, and its scores are live (`validUntil` ahead; a new object without one for 10
    /// minutes). An abandoned object (an uninstalled agent's) is taken over.
    pub fn foreign(
        &self,
        score_name: &str,
        cluster: &str,
        manager: &str,
        now: jiff::Timestamp,
    ) -> bool {
        let key = ObjectRef::new(score_name).within(cluster);
        let Some(score) = self.scores.get(&key) else {
            return false;
        };
        let label = score.labels().get("app.kubernetes.io/managed-by");
        let label_foreign = label.is_some_and(|m| m != manager);
        let field_foreign = score.managed_fields().iter().any(|f| {
            f.subresource.as_deref() == Some("status")
                && f.manager.as_deref().is_some_and(|m| m != manager)
        });
        let live = match score.status.as_ref().and_then(|s| s.valid_until.as_ref()) {
            Some(t) => t.0 > now,
            None => score
                .metadata
                .creation_timestamp
                .as_ref()
                .is_none_or(|t| now.duration_since(t.0) < jiff::SignedDuration::from_mins(10)),
        };
        (label_foreign || field_foreign) && live
    }

    /// The score objects `manager` wrote whose name is not in `filled`: (namespace, name,
    /// uid).
    pub fn written_by_except(
        &self,
        filled: &BTreeSet<String>,
        manager: &str,
    ) -> Vec<(String, String, Option<String>)> {
        self.scores
            .state()
            .iter()
            .filter(|s| {
                s.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| !filled.contains(n))
            })
            .filter(|s| {
                s.labels()
                    .get("app.kubernetes.io/managed-by")
                    .map(String::as_str)
                    == Some(manager)
            })
            .filter_map(|s| {
                Some((
                    s.metadata.namespace.clone()?,
                    s.metadata.name.clone()?,
                    s.metadata.uid.clone(),
                ))
            })
            .collect()
    }
}

/// What admission and the runners depend on: a change of anything else (the status) is none.
#[derive(Clone, Debug, PartialEq)]
struct DefinitionKey {
    uid: Option<String>,
    generation: Option<i64>,
    labels: BTreeMap<String, String>,
    deleting: bool,
}

impl DefinitionKey {
    fn of(d: &ScoreDefinition) -> Self {
        Self {
            uid: d.metadata.uid.clone(),
            generation: d.metadata.generation,
            labels: d.labels().clone(),
            deleting: d.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The store has listed once.
fn listed<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// A cluster the scorer rates: accepted by the hub (it has its namespace) and not going.
fn rateable(c: &ManagedCluster) -> bool {
    c.metadata.deletion_timestamp.is_none() && c.spec.hub_accepts_client
}
