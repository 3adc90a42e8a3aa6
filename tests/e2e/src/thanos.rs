//! The fleet in the Thanos mode (`fleet --thanos`): no agents; per cluster a kube-state-metrics
//! stand-in (an exporter rendering the cluster's synthetic nodes and load pods, with no
//! `cluster` label), a Prometheus with `external_labels {cluster, replica}` scraping it and its
//! Thanos sidecar; Thanos Query over the sidecars on the hub; and the hub scorer writing every
//! cluster's score from Query.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use testenv::prometheus::Exporter;
use testenv::thanos::{EndpointMode, Query, Store};
use tokio::task::JoinHandle;

use crate::fleet::{CLUSTER_LABEL, Error, Fleet, Options};

/// How often the stand-ins re-read the apiserver, and Prometheus scrapes them.
const SCRAPE: Duration = Duration::from_secs(2);

/// The running Thanos side; stops with its drop.
pub struct ThanosMode {
    pub query: Query,
    pub stores: Vec<Store>,
    feeder: JoinHandle<()>,
}

impl Drop for ThanosMode {
    fn drop(&mut self) {
        // The feeder holds the exporters: they stop with it.
        self.feeder.abort();
    }
}

/// Starts the Thanos side for `fleet`'s clusters and the scorer against its Query.
pub async fn start(fleet: &mut Fleet, opts: &Options) -> Result<ThanosMode, Error> {
    let mut exporters = Vec::new();
    let mut stores = Vec::new();
    for cluster in &fleet.clusters {
        let e = Exporter::start().await?;
        e.set(exposition(&fleet.client, cluster).await?);
        stores.push(Store::start(cluster, "a", e.addr(), SCRAPE).await?);
        exporters.push(e);
    }
    let endpoints: Vec<_> = stores.iter().map(Store::grpc_addr).collect();
    let query = Query::start(&endpoints, EndpointMode::Endpoint).await?;
    let client = fleet.client.clone();
    let clusters = fleet.clusters.clone();
    let feeder = tokio::spawn(async move {
        loop {
            tokio::time::sleep(SCRAPE).await;
            for (c, e) in clusters.iter().zip(&exporters) {
                // A failed read keeps the last text: the next round tries again.
                if let Ok(text) = exposition(&client, c).await {
                    e.set(text);
                }
            }
        }
    });
    let biggest = opts
        .clusters
        .iter()
        .map(|(_, c)| *c)
        .max()
        .unwrap_or(1)
        .max(1);
    // The chart's built-in definition, refreshed as the agents would be.
    let refresh = format!("{}ms", opts.refresh.as_millis());
    let definition = fleet
        .builtin_definition(testenv::scoring::Builtin {
            name: "fleet-thanos".into(),
            score_name: ocm_api::wellknown::score::RESOURCE_USAGE_SCORE.into(),
            refresh_period: refresh.clone(),
            // Short: a removed pod's requests count until they leave the window.
            window: "30s".into(),
            step: "2s".into(),
            max_data_age: "20s".into(),
            range: Some((biggest.to_string(), "512Gi".into())),
            labels: Vec::new(),
        })
        .await?;
    let mut args = vec![
        format!("--refresh-period={refresh}"),
        format!("--debounce={}ms", opts.debounce.as_millis()),
    ];
    args.extend(definition);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.start_scorer(opts, &query.url(), &args)?;
    Ok(ThanosMode {
        query,
        stores,
        feeder,
    })
}

/// kube-state-metrics' series for `cluster`'s synthetic nodes and its load pods, without a
/// `cluster` label (its Prometheus adds it as an external label).
async fn exposition(client: &Client, cluster: &str) -> Result<String, Error> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={cluster}")))
        .await?;
    let pods = Api::<Pod>::namespaced(client.clone(), &format!("load-{cluster}"))
        .list(&ListParams::default())
        .await?;
    let mut out = String::new();
    for n in &nodes.items {
        let name = n.name_any();
        let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for (resource, unit) in [("cpu", "core"), ("memory", "byte")] {
            let v = alloc
                .and_then(|a| a.get(resource))
                .and_then(|q| ocm_api::quantity::parse(&q.0).ok())
                .unwrap_or(0.0);
            out += &format!(
                "kube_node_status_allocatable{{node=\"{name}\",resource=\"{resource}\",unit=\"{unit}\"}} {v}\n"
            );
        }
        out += &format!("kube_node_spec_unschedulable{{node=\"{name}\"}} 0\n");
        out += &format!(
            "kube_node_status_condition{{node=\"{name}\",condition=\"Ready\",status=\"true\"}} 1\n"
        );
    }
    for p in &pods.items {
        let Some(spec) = &p.spec else { continue };
        let node = spec.node_name.clone().unwrap_or_default();
        for c in &spec.containers {
            let cpu = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("cpu"))
                .and_then(|q| ocm_api::quantity::parse(&q.0).ok())
                .unwrap_or(0.0);
            out += &format!(
                "kube_pod_container_resource_requests{{namespace=\"load-{cluster}\",pod=\"{}\",container=\"{}\",node=\"{node}\",resource=\"cpu\",unit=\"core\"}} {cpu}\n",
                p.name_any(),
                c.name
            );
        }
    }
    Ok(out)
}
