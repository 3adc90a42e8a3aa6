//! What the scorer's tests (against Prometheus and against Thanos) read back.

use std::collections::BTreeMap;
use std::process::Child;

use kube::{Api, Client};
use ocm_api::AddOnPlacementScore;
use ocm_api::wellknown::score::RESOURCE_USAGE_SCORE;

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
    Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
        .get_opt(RESOURCE_USAGE_SCORE)
        .await
        .ok()
        .flatten()
}

pub async fn metric(port: u16, name: &str) -> f64 {
    let Ok((_, body)) = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics").await else {
        return 0.0;
    };
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
