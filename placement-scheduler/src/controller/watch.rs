//! One way to watch: each kind the controller watches is a [`Store`] of the [`State`] (what an
//! object, a deletion and the end of a list change there, and what that moved), and
//! [`watch`] runs any of them from the hub. The model is kubert's `IndexNamespacedResource`
//! (`apply`, `delete`, `reset`).
//!
//! The initial list and every relist are applied object by object as they arrive (see
//! [`listing`](super::listing)); the objects a list did not return are deleted when it ends.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;

use super::listing::{Change, Lister, ObjectKey, gone, key_of};
use super::metrics::{KindLabels, Metrics};
use super::state::{Changed, State};
use super::triggers::key;
use super::{Ctx, sweep};

/// How objects of kind `K` are kept in the state.
pub(super) trait Store<K> {
    /// The kind, as logs, metrics and `/readyz` name it.
    const KIND: &'static str;

    /// An object was added or changed.
    fn apply(&mut self, object: K) -> Changed;

    /// The object `namespace/name` was deleted.
    fn delete(&mut self, namespace: &str, name: &str) -> Changed;

    /// The keys of the objects held.
    fn stored(&self) -> Vec<ObjectKey>;

    /// A list ended: the objects it did not return were deleted while the watch was down.
    fn relisted(&mut self, listed: &HashSet<ObjectKey>) -> Changed {
        gone(self.stored(), listed)
            .iter()
            .fold(Changed::default(), |changed, (namespace, name)| {
                changed.and(self.delete(namespace, name))
            })
    }
}

impl Store<ManagedCluster> for State {
    const KIND: &'static str = "ManagedCluster";

    fn apply(&mut self, c: ManagedCluster) -> Changed {
        Changed::requeue(self.apply_cluster(c))
    }

    fn delete(&mut self, _: &str, name: &str) -> Changed {
        Changed::requeue(self.delete_cluster(name))
    }

    fn stored(&self) -> Vec<ObjectKey> {
        let names = self.snapshot.clusters().map(|c| c.name.to_string());
        names.map(|n| (String::new(), n)).collect()
    }
}

impl Store<ManagedClusterSet> for State {
    const KIND: &'static str = "ManagedClusterSet";

    fn apply(&mut self, s: ManagedClusterSet) -> Changed {
        Changed::requeue(self.apply_set(s))
    }

    fn delete(&mut self, _: &str, name: &str) -> Changed {
        Changed::requeue(self.delete_set(name))
    }

    fn stored(&self) -> Vec<ObjectKey> {
        let names = self.snapshot.set_names().into_iter();
        names.map(|n| (String::new(), n)).collect()
    }
}

impl Store<ManagedClusterSetBinding> for State {
    const KIND: &'static str = "ManagedClusterSetBinding";

    fn apply(&mut self, b: ManagedClusterSetBinding) -> Changed {
        Changed::requeue(self.apply_binding(&b))
    }

    fn delete(&mut self, namespace: &str, name: &str) -> Changed {
        Changed::requeue(self.delete_binding(namespace, name))
    }

    fn stored(&self) -> Vec<ObjectKey> {
        self.snapshot.binding_keys()
    }
}

impl Store<AddOnPlacementScore> for State {
    const KIND: &'static str = "AddOnPlacementScore";

    fn apply(&mut self, s: AddOnPlacementScore) -> Changed {
        self.apply_score(s)
    }

    fn delete(&mut self, namespace: &str, name: &str) -> Changed {
        self.delete_score(namespace, name)
    }

    fn stored(&self) -> Vec<ObjectKey> {
        self.snapshot.score_keys()
    }
}

impl Store<PlacementDecision> for State {
    const KIND: &'static str = "PlacementDecision";

    fn apply(&mut self, d: PlacementDecision) -> Changed {
        self.apply_decision(d)
    }

    fn delete(&mut self, namespace: &str, name: &str) -> Changed {
        self.delete_decision(namespace, name)
    }

    fn stored(&self) -> Vec<ObjectKey> {
        self.snapshot.decision_keys()
    }
}

impl Store<Placement> for State {
    const KIND: &'static str = "Placement";

    fn apply(&mut self, p: Placement) -> Changed {
        Changed::requeue(self.apply_placement(p))
    }

    fn delete(&mut self, namespace: &str, name: &str) -> Changed {
        let k = key(namespace, name);
        self.delete_placement(&k);
        Changed {
            deleted: vec![k],
            ..Changed::default()
        }
    }

    fn stored(&self) -> Vec<ObjectKey> {
        let keys = self.placements.keys();
        keys.map(|(ns, name)| (ns.to_string(), name.to_string()))
            .collect()
    }
}

/// Spawns the watch of every object of kind `K` (see [`watch`]).
pub(super) fn spawn<K>(tasks: &mut JoinSet<()>, client: &Client, ctx: &Arc<Ctx>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    State: Store<K>,
{
    tasks.spawn(watch(Api::<K>::all(client.clone()), ctx.clone()));
}

/// Runs the watch of kind `K` into the state, and queues what each change moved.
async fn watch<K>(api: Api<K>, ctx: Arc<Ctx>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    State: Store<K>,
{
    let kind = <State as Store<K>>::KIND;
    ctx.handle.sync.started(kind, api.resource_url());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .backoff(ocm_runtime::watch::backoff())
        .boxed();
    let mut lister = Lister::default();
    let mut synced = false;
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(event) => lister.step(event),
            Err(e) => {
                failed(&ctx, kind, &e);
                None
            }
        };
        let Some(change) = change else {
            continue;
        };
        let relist = change.ends_list();
        let changed = apply(&ctx, change, lister.listing());
        if kind == <State as Store<AddOnPlacementScore>>::KIND {
            ctx.handle.metrics.score_change(
                changed.requeue.iter().filter(|k| ctx.in_scope(k)).count(),
                changed.later.len(),
                changed.spared,
            );
        }
        ctx.enqueue(changed.requeue);
        ctx.enqueue_later(changed.later);
        if changed.balance {
            sweep::balance_changed(&ctx);
        }
        if relist {
            if !synced {
                synced = true;
                ctx.handle.sync.synced(kind);
                tracing::info!(kind, "watch synced");
            }
            // A relist may have missed deletions and updates alike: reschedule everything.
            ctx.enqueue_all();
        }
    }
}

/// The watcher retries with backoff; says so once per error.
fn failed(ctx: &Ctx, kind: &'static str, e: &watcher::Error) {
    tracing::warn!(kind, error = %e, "watch failed; retrying");
    ctx.handle.sync.failed(kind, e);
    ctx.handle
        .metrics
        .watch_errors
        .get_or_create(&KindLabels { kind: kind.into() })
        .inc();
}

/// Applies one change to the state, under its lock: the deleted placements leave the queue
/// and the sweeps with it.
fn apply<K>(ctx: &Ctx, change: Change<K>, listing: bool) -> Changed
where
    K: Resource,
    State: Store<K>,
{
    let mut st = ctx.handle.state.write();
    let changed = match change {
        Change::Apply(o) => Store::<K>::apply(&mut *st, o),
        Change::Delete(o) => {
            let (namespace, name) = key_of(&o);
            Store::<K>::delete(&mut *st, namespace, name)
        }
        Change::Listed(listed) => Store::<K>::relisted(&mut *st, &listed),
    };
    for key in &changed.deleted {
        ctx.forget(key);
    }
    // Counted once a list ends, not at each of its objects.
    if !listing {
        count(&ctx.handle.metrics, &st);
    }
    changed
}

/// The store sizes, by kind.
fn count(metrics: &Metrics, st: &State) {
    for (kind, n) in st.snapshot.counts() {
        metrics.store(kind, n);
    }
    metrics.store("Placement", st.placements.len());
    metrics
        .cache_entries
        .get_or_create(&super::metrics::CacheLabels { cache: "margins" })
        .set(i64::try_from(st.margins.len()).unwrap_or(i64::MAX));
}
