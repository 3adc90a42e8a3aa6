//! The `kube` source: watches of the managed cluster's Nodes and bound, non-terminal Pods
//! feeding a [`UsageIndex`]. Only the compact per-pod data stays in memory, never the Pod
//! objects (30,000 pods would otherwise take hundreds of MB).

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use ocm_api::score::resource_usage::{Free, Resource};

use super::index::{NodeFilter, Totals, UsageIndex};
use super::slim::{SlimNode, SlimPod};
use score_provider::provider::{Change, ProviderError};

/// Objects per list page (kube's default is 500: about 7 MB of pod JSON at once).
const LIST_PAGE_SIZE: u32 = 100;

/// Pods that hold resources on a node: bound, and neither Succeeded nor Failed (the server
/// filters, so terminal pods are never sent; a pod turning terminal arrives as a deletion).
pub const POD_FIELD_SELECTOR: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// Nodes and pods of the managed cluster, indexed.
#[derive(Clone)]
pub struct KubeSource {
    client: kube::Client,
    node_selector: Option<String>,
    state: Arc<Mutex<State>>,
}

struct State {
    index: UsageIndex,
    nodes_listed: bool,
    /// How many malformed-allocatable warnings the index held when last logged.
    warned: usize,
    pods_listed: bool,
}

impl KubeSource {
    /// `node_selector` (a label selector) limits the nodes watched; `filter` says which of
    /// them count (and applies the same selector again, so both agree).
    pub fn new(client: kube::Client, node_selector: Option<String>, filter: NodeFilter) -> Self {
        Self {
            client,
            node_selector,
            state: Arc::new(Mutex::new(State {
                index: UsageIndex::new(filter),
                nodes_listed: false,
                warned: 0,
                pods_listed: false,
            })),
        }
    }

    /// Each event is applied under the lock as a whole. A lock without poisoning: a panic
    /// there would be a bug in the index, and its state is still the best we have.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The watches as one stream of changes. Polling it keeps the index current.
    pub fn changes(&self) -> BoxStream<'static, Change> {
        // Small pages: a list page is decoded at once, and its peak stays as allocator residue.
        let mut config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
        if let Some(s) = &self.node_selector {
            config = config.labels(s);
        }
        let nodes = watcher::watcher(Api::<SlimNode>::all(self.client.clone()), config)
            .backoff(ocm_runtime::watch::backoff())
            .filter_map({
                let me = self.clone();
                move |event| std::future::ready(me.on_node(event))
            });
        let pods = watcher::watcher(
            Api::<SlimPod>::all(self.client.clone()),
            watcher::Config::default()
                .fields(POD_FIELD_SELECTOR)
                .page_size(LIST_PAGE_SIZE),
        )
        .backoff(ocm_runtime::watch::backoff())
        .filter_map({
            let me = self.clone();
            move |event| std::future::ready(me.on_pod(event))
        });
        Box::pin(futures::stream::select(nodes, pods))
    }

    fn on_node(&self, event: Result<Event<SlimNode>, watcher::Error>) -> Option<Change> {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "node watch failed; retrying");
                return None;
            }
        };
        let mut s = self.lock();
        match event {
            Event::Apply(node) => s.index.apply_node(&node),
            Event::Delete(node) => s.index.delete_node(node.name()),
            // A (re)list: what it does not show is gone at its end.
            Event::Init => {
                s.index.begin_node_relist();
                return None;
            }
            Event::InitApply(node) => {
                s.index.apply_node(&node);
                return None;
            }
            Event::InitDone => {
                s.index.end_node_relist();
                s.nodes_listed = true;
            }
        }
        // A node whose allocatable does not parse counts as not having that resource; say so
        // once, when the set of such nodes changes (node events are rare).
        let warnings = s.index.warnings().count();
        if warnings != s.warned {
            for w in s.index.warnings() {
                tracing::warn!("{w}");
            }
            s.warned = warnings;
        }
        Some(Change { what: "node" })
    }

    fn on_pod(&self, event: Result<Event<SlimPod>, watcher::Error>) -> Option<Change> {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "pod watch failed; retrying");
                return None;
            }
        };
        let mut s = self.lock();
        let apply = |s: &mut State, pod: SlimPod| {
            if let Err(e) = s.index.apply_pod(&pod) {
                // The apiserver validated these quantities, so this is unexpected; the pod
                // counts as requesting nothing rather than stopping the agent.
                tracing::warn!(error = %e, "cannot read a pod's requests; not counting it");
            }
        };
        match event {
            Event::Apply(pod) => apply(&mut s, pod),
            Event::Delete(pod) => {
                let (namespace, name) = pod.key();
                s.index.delete_pod(namespace, name);
            }
            Event::Init => {
                s.index.begin_pod_relist();
                return None;
            }
            Event::InitApply(pod) => {
                apply(&mut s, pod);
                return None;
            }
            Event::InitDone => {
                s.index.end_pod_relist();
                s.pods_listed = true;
            }
        }
        Some(Change { what: "pod" })
    }

    /// What is free now; not ready until nodes and pods were listed once.
    pub fn free(&self) -> Result<Free, ProviderError> {
        let s = self.lock();
        if !(s.nodes_listed && s.pods_listed) {
            return Err(ProviderError::NotReady(
                "waiting for the first list of nodes and pods".into(),
            ));
        }
        let totals = s.index.totals();
        tracing::debug!(
            nodes_counted = totals.nodes_counted,
            nodes_excluded = totals.nodes_excluded,
            pods_counted = totals.pods_counted,
            nodes_known = s.index.node_count(),
            pods_known = s.index.pod_count(),
            "usage index"
        );
        Ok(free_from(&totals))
    }
}

/// Totals in natural units: CPU millicores to cores; bytes and devices as they are.
pub fn free_from(totals: &Totals) -> Free {
    let mut free = Free::default();
    for resource in Resource::ALL {
        let t = totals.get(resource);
        if !t.present {
            continue;
        }
        let unit = match resource {
            Resource::Cpu => 1000.0,
            _ => 1.0,
        };
        free.set(
            resource,
            t.cluster_free as f64 / unit,
            t.node_free.map(|v| v as f64 / unit),
        );
    }
    free
}
