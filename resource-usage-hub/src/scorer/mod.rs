//! `resource-usage-hub scorer`: AddOnPlacementScores from ScoreDefinitions (PromQL and YAML,
//! no code), evaluated against a Prometheus-compatible query API (a Thanos Querier) for every
//! ManagedCluster, with no agent on the clusters. The built-in resource-usage scores are one
//! such definition, shipped by the chart.
//!
//! `admit` decides which definitions run and `status` what their status says (both sans IO);
//! `fleet` holds the watches every definition shares; `provider` is one definition on the
//! score-provider framework, which writes, renews and expires its scores; `supervisor` starts,
//! restarts and stops them as definitions come, change and go.

pub mod admit;
pub mod fleet;
pub mod metrics;
pub mod provider;
pub mod status;
pub mod supervisor;
