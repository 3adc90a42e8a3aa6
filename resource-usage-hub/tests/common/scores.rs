//! What the scorer's tests (against Prometheus and against Thanos) set up and read back.

use std::collections::BTreeMap;
use std::process::Child;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client};
use ocm_api::wellknown::label::CLUSTERSET;
use ocm_api::wellknown::score::RESOURCE_USAGE_SCORE;
use ocm_api::{AddOnPlacementScore, ManagedCluster};
use serde_json::json;

/// An accepted ManagedCluster named `name` with its namespace, in clusterset `set` if given.
pub async fn create_cluster(client: &Client, name: &str, set: Option<&str>) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let mut labels = serde_json::Map::new();
    if let Some(set) = set {
        labels.insert(CLUSTERSET.to_owned(), json!(set));
    }
    let c: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": name, "labels": labels},
        "spec": {"hubAcceptsClient": true}
    }))
    .expect("cluster");
    Api::<ManagedCluster>::all(client.clone())
        .create(&PostParams::default(), &c)
        .await
        .expect("cluster");
}

/// A child process killed and reaped on drop.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn scores_of(s: &AddOnPlacementScore) -> BTreeMap<String, i32> {
    s.status
        .iter()
        .flat_map(|st| &st.scores)
        .map(|i| (i.name.clone(), i.value))
        .collect()
}

pub fn condition(s: &AddOnPlacementScore) -> Option<(String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "AddOnPlacementScoreUpdated")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

pub fn valid_until(s: &AddOnPlacementScore) -> Option<jiff::Timestamp> {
    s.status.as_ref()?.valid_until.as_ref().map(|t| t.0)
}

pub async fn score(client: &Client, cluster: &str) -> Option<AddOnPlacementScore> {
    score_named(client, cluster, RESOURCE_USAGE_SCORE).await
}

/// `cluster`'s score object named `name` (a scorer's `--score-name`).
pub async fn score_named(
    client: &Client,
    cluster: &str,
    name: &str,
) -> Option<AddOnPlacementScore> {
    Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

pub async fn metric(port: u16, name: &str) -> f64 {
    let Ok((_, body)) = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics").await else {
        return 0.0;
    };
    testenv::scrape::total(&body, name)
}

/// Creates the chart's built-in resource-usage definition for one test: named `name` and
/// labelled `test=<name>`, refreshed every `refresh` (freshness step 1s), filling `score_name`,
/// with `Some((cpu, memory))` maxima for Range (else MinMax). Returns the scorer flags that
/// select it alone.
pub async fn builtin_definition(
    client: &Client,
    name: &str,
    score_name: &str,
    refresh: &str,
    window: &str,
    max_data_age: &str,
    range: Option<(&str, &str)>,
) -> Vec<String> {
    let def = testenv::scoring::builtin(&testenv::scoring::Builtin {
        name: name.to_owned(),
        score_name: score_name.to_owned(),
        refresh_period: refresh.to_owned(),
        window: window.to_owned(),
        step: "1s".into(),
        max_data_age: max_data_age.to_owned(),
        range: range.map(|(c, m)| (c.to_owned(), m.to_owned())),
        labels: vec![("test".into(), name.to_owned())],
    })
    .expect("the built-in definition");
    testenv::scoring::apply(client, &def)
        .await
        .expect("apply the definition");
    vec![
        format!("--definition-selector=test={name}"),
        format!("--definition-min-period={refresh}"),
    ]
}
