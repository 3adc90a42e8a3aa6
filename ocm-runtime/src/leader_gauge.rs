//! `leader_election_master_status{name}`: 1 while this replica leads the Lease `name`, else 0.
//! client-go's gauge of the same name and meaning, so that alerts written for Go controllers
//! ("no replica leads") work on ours; the chart's PrometheusRule uses it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::leader::Leadership;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    /// The Lease's name: a flag or a constant, never read from an object.
    name: String,
}

/// Clones share the series.
#[derive(Clone, Debug, Default)]
pub struct LeaderGauge(Family<LeaseLabel, Gauge>);

impl LeaderGauge {
    /// Registers the gauge (before the registry is shared with the metrics server).
    pub fn register(registry: &mut Registry) -> Self {
        let g = Self::default();
        registry.register(
            "leader_election_master_status",
            "1 while this replica leads the Lease `name`, else 0 (a standby, or a leader past its renew deadline)",
            g.0.clone(),
        );
        g
    }

    /// Follows `leadership` for the Lease `name` until the process ends (a task on the current
    /// runtime): 0 until it leads, 1 while it does. Needs no clock of its own: `lost` resolves
    /// at the renew deadline too.
    pub fn follow(&self, name: &str, mut leadership: Leadership) {
        let g = self
            .0
            .get_or_create(&LeaseLabel {
                name: name.to_owned(),
            })
            .clone();
        g.set(0);
        tokio::spawn(async move {
            loop {
                leadership.wait_leader().await;
                g.set(1);
                leadership.lost().await;
                g.set(0);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_replica_that_always_leads_reports_1() {
        let mut registry = Registry::default();
        let g = LeaderGauge::register(&mut registry);
        g.follow("placement-scheduler", Leadership::always());
        let mut text = String::new();
        for _ in 0..100 {
            tokio::task::yield_now().await;
            text.clear();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
            if text.contains("leader_election_master_status{name=\"placement-scheduler\"} 1") {
                return;
            }
        }
        panic!("gauge not 1: {text}");
    }
}
