//! A hub for controller tests: the shared real control plane, one namespace, clusterset and
//! set of cluster names per test, and a controller scheduling only that namespace.
#![allow(dead_code)]

pub mod binary;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use ocm_runtime::Leadership;
use placement_scheduler::controller::{self, Handle, Options};
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `f` until it returns `Some`, or panics with `what` after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    testenv::eventually(what, DEADLINE, f).await
}

/// A running controller; stops when dropped.
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub handle: Handle,
}

impl Running {
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub fn start_controller(client: &Client, ns: &str, leadership: Option<Leadership>) -> Running {
    let options = Options {
        namespaces: vec![ns.to_owned()],
        workers: 4,
        leadership: leadership.unwrap_or_else(Leadership::always),
        ..Options::default()
    };
    start_controller_with(client, options).0
}

/// One test's slice of the hub.
pub struct Hub {
    pub client: Client,
    pub ns: String,
    /// The exclusive clusterset of this test (bound in `ns`).
    pub set: String,
    pub controller: Option<Running>,
}

impl Hub {
    /// A namespace, a clusterset bound to it, and a controller for the namespace.
    pub async fn new(prefix: &str) -> Hub {
        let cp = testenv::shared().await;
        let client = cp.client().expect("client");
        let ns = testenv::namespace(&client, prefix)
            .await
            .expect("namespace");
        let set = ns.clone();
        let hub = Hub {
            client: client.clone(),
            ns: ns.clone(),
            set: set.clone(),
            controller: None,
        };
        hub.create_set(
            &set,
            json!({"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}),
        )
        .await;
        hub.bind(&set).await;
        Hub {
            controller: Some(start_controller(&client, &ns, None)),
            ..hub
        }
    }

    /// A hub without a controller yet.
    pub async fn without_controller(prefix: &str) -> Hub {
        let mut hub = Hub::new(prefix).await;
        if let Some(c) = hub.controller.take() {
            c.stop().await;
        }
        hub
    }

    pub fn cluster_name(&self, n: &str) -> String {
        format!("{}-{n}", self.ns)
    }

    pub async fn create_set(&self, name: &str, spec: Value) {
        let api: Api<ManagedClusterSet> = Api::all(self.client.clone());
        let set: ManagedClusterSet =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        api.create(&PostParams::default(), &set).await.unwrap();
    }

    pub async fn delete_set(&self, name: &str) {
        let api: Api<ManagedClusterSet> = Api::all(self.client.clone());
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }

    pub async fn bind(&self, set: &str) {
        let api: Api<ManagedClusterSetBinding> = Api::namespaced(self.client.clone(), &self.ns);
        let b: ManagedClusterSetBinding =
            serde_json::from_value(json!({"metadata": {"name": set}, "spec": {"clusterSet": set}}))
                .unwrap();
        api.create(&PostParams::default(), &b).await.unwrap();
    }

    pub async fn unbind(&self, set: &str) {
        let api: Api<ManagedClusterSetBinding> = Api::namespaced(self.client.clone(), &self.ns);
        api.delete(set, &DeleteParams::default()).await.unwrap();
    }

    /// Creates clusters `<ns>-<n>` in this test's set, with labels; returns their full names.
    pub async fn clusters(&self, names: &[&str], labels: Value) -> Vec<String> {
        let mut out = Vec::new();
        for n in names {
            out.push(self.cluster(n, labels.clone(), Value::Null).await);
        }
        out
    }

    /// Creates (or replaces the labels, spec and status of) cluster `<ns>-<n>`.
    pub async fn cluster(&self, n: &str, labels: Value, status: Value) -> String {
        let name = self.cluster_name(n);
        let mut all_labels: BTreeMap<String, Value> =
            serde_json::from_value(if labels.is_null() { json!({}) } else { labels }).unwrap();
        all_labels
            .entry("cluster.open-cluster-management.io/clusterset".into())
            .or_insert(json!(self.set));
        let api: Api<ManagedCluster> = Api::all(self.client.clone());
        let obj = json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": all_labels}, "spec": {"hubAcceptsClient": true}});
        api.patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
        if !status.is_null() {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .unwrap();
        }
        name
    }

    pub async fn patch_cluster(&self, name: &str, patch: Value) {
        let api: Api<ManagedCluster> = Api::all(self.client.clone());
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn delete_cluster(&self, name: &str) {
        let api: Api<ManagedCluster> = Api::all(self.client.clone());
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }

    /// Writes AddOnPlacementScore `<cluster>/<resource>` (namespace = cluster name).
    pub async fn score(
        &self,
        cluster: &str,
        resource: &str,
        items: &[(&str, i32)],
        valid_until: Option<&str>,
    ) {
        let ns_api: Api<Namespace> = Api::all(self.client.clone());
        let _ = ns_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": cluster}})).unwrap(),
            )
            .await;
        let api: Api<AddOnPlacementScore> = Api::namespaced(self.client.clone(), cluster);
        let obj = json!({"apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore", "metadata": {"name": resource, "namespace": cluster}});
        api.patch(
            resource,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
        let scores: Vec<Value> = items
            .iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect();
        let mut status = json!({"scores": scores});
        if let Some(t) = valid_until {
            status["validUntil"] = json!(t);
        }
        api.patch_status(
            resource,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
    }

    pub async fn placement(&self, name: &str, spec: Value) {
        let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.ns);
        let p: Placement =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        api.create(&PostParams::default(), &p).await.unwrap();
    }

    pub async fn patch_placement(&self, name: &str, patch: Value) {
        let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.ns);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn get_placement(&self, name: &str) -> Placement {
        let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.ns);
        api.get(name).await.unwrap()
    }

    pub async fn decisions(&self, placement: &str) -> Vec<PlacementDecision> {
        let api: Api<PlacementDecision> = Api::namespaced(self.client.clone(), &self.ns);
        let lp = ListParams::default().labels(&format!(
            "cluster.open-cluster-management.io/placement={placement}"
        ));
        let mut items = api.list(&lp).await.unwrap().items;
        items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        items
    }

    /// The clusters in a placement's decisions (short names, sorted).
    pub async fn chosen(&self, placement: &str) -> Vec<String> {
        let prefix = format!("{}-", self.ns);
        let mut v: Vec<String> = self
            .decisions(placement)
            .await
            .iter()
            .flat_map(|d| {
                d.status
                    .iter()
                    .flat_map(|s| s.decisions.iter().map(|e| e.cluster_name.clone()))
            })
            .map(|n| n.strip_prefix(&prefix).map(str::to_owned).unwrap_or(n))
            .collect();
        v.sort();
        v
    }

    /// Waits until the placement's decisions hold exactly `want` (short names).
    pub async fn expect(&self, placement: &str, want: &[&str]) {
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        let mut last = Vec::new();
        let start = Instant::now();
        loop {
            let got = self.chosen(placement).await;
            if got == want {
                return;
            }
            if start.elapsed() > DEADLINE {
                panic!("placement {placement}: want {want:?}, have {got:?} (was {last:?})");
            }
            last = got;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the placement's decisions hold `n` clusters.
    pub async fn expect_count(&self, placement: &str, n: usize) {
        eventually(&format!("{placement} to hold {n} clusters"), || async {
            (self.chosen(placement).await.len() == n).then_some(())
        })
        .await;
    }

    /// Waits for a condition (type, status, reason).
    pub async fn expect_condition(
        &self,
        placement: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> String {
        eventually(
            &format!("{placement} {type_}={status}/{reason}"),
            || async {
                let p = self.get_placement(placement).await;
                p.status?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == type_ && c.status == status && c.reason == reason)
                    .map(|c| c.message.clone())
            },
        )
        .await
    }
}

/// A service account bound to exactly the chart's scheduler RBAC.
pub struct SchedulerAccount {
    /// A kubeconfig file that authenticates as it (user and groups), for a binary to run as it.
    pub kubeconfig: std::path::PathBuf,
    /// A client that is it, for what it may not do.
    pub client: Client,
}

/// The chart's scheduler RBAC (`charts/ocm-placement/files/scheduler-rbac.yaml`) for the service
/// account `sa` of the hub's namespace, applied, and that account's kubeconfig (written in
/// `dir`) and client.
pub async fn as_scheduler_account(hub: &Hub, sa: &str, dir: &std::path::Path) -> SchedulerAccount {
    let rbac = include_str!("../../../charts/ocm-placement/files/scheduler-rbac.yaml")
        .replace("{{NAMESPACE}}", &hub.ns)
        .replace("{{SUBJECT}}", sa)
        // Cluster-scoped names per test: tests running at once must not rebind each other's.
        .replace(
            "open-cluster-management:placement-scheduler",
            &format!("open-cluster-management:placement-scheduler:{}", hub.ns),
        );
    testenv::apply_yaml(&hub.client, &rbac, &hub.ns)
        .await
        .expect("the scheduler's RBAC");
    let kubeconfig = dir.join("kubeconfig");
    let cp = testenv::shared().await;
    std::fs::write(&kubeconfig, cp.kubeconfig_as_service_account(&hub.ns, sa)).expect("kubeconfig");
    let client = cp
        .client_as_service_account(&hub.ns, sa)
        .expect("a client as the account");
    SchedulerAccount { kubeconfig, client }
}

/// A controller with `options` (its `namespaces` are the caller's), and the registry of its
/// metrics (see [`metric_sum`]).
pub fn start_controller_with(
    client: &Client,
    options: Options,
) -> (Running, prometheus_client::registry::Registry) {
    let mut registry = prometheus_client::registry::Registry::default();
    let handle = Handle::new(&mut registry);
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(controller::run(
        client.clone(),
        handle.clone(),
        options,
        async {
            let _ = rx.await;
        },
    ));
    let running = Running {
        stop: Some(tx),
        task: Some(task),
        handle,
    };
    (running, registry)
}

/// The sum of every sample of the metric named `name` (as exposed, e.g.
/// `scheduling_duration_seconds_count`) in `registry`.
pub fn metric_sum(registry: &prometheus_client::registry::Registry, name: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encode the metrics");
    text.lines()
        .filter(|l| {
            l.split(['{', ' ']).next().is_some_and(|n| {
                n == name || n.strip_suffix(name).is_some_and(|p| p.ends_with('_'))
            })
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The controller's successful writes by (verb, resource), read from its own counters (one
/// per API call). Every label the writer and the event recorder use is listed here.
pub fn writes(handle: &Handle) -> BTreeMap<(&'static str, &'static str), u64> {
    use placement_scheduler::controller::metrics::WriteLabels;
    const CALLS: [(&str, &str); 7] = [
        ("create", "placementdecisions"),
        ("patch", "placementdecisions"),
        ("patch", "placementdecisions/status"),
        ("delete", "placementdecisions"),
        ("patch", "placements/status"),
        ("create", "events"),
        ("patch", "events"),
    ];
    let mut out = BTreeMap::new();
    for (verb, resource) in CALLS {
        let n = handle
            .metrics
            .api_writes
            .get_or_create(&WriteLabels {
                verb: verb.into(),
                resource: resource.into(),
                result: "success".into(),
            })
            .get();
        if n > 0 {
            out.insert((verb, resource), n);
        }
    }
    out
}

/// Scheduling passes the controller completed, whatever their result.
pub fn passes(handle: &Handle) -> u64 {
    use placement_scheduler::controller::metrics::ResultLabels;
    [
        "success",
        "warning",
        "misconfigured",
        "error",
        "limit_exceeded",
        "transient",
        "write_error",
    ]
    .into_iter()
    .map(|r| {
        handle
            .metrics
            .schedules
            .get_or_create(&ResultLabels { result: r.into() })
            .get()
    })
    .sum()
}

/// Waits until the controller is at rest: no pass and no write over two polls a second
/// apart (placements waiting for a requeue time still count in `placement_queue_depth`).
/// Returns the writes then.
pub async fn quiet(handle: &Handle) -> BTreeMap<(&'static str, &'static str), u64> {
    let mut last = None;
    eventually("the controller to come to rest", || {
        let now = (passes(handle), writes(handle));
        let previous = last.replace(now.clone());
        async move {
            if previous.as_ref() != Some(&now) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                return None;
            }
            Some(now.1)
        }
    })
    .await
}
