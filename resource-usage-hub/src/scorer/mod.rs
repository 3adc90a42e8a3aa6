//! `resource-usage-hub scorer`: AddOnPlacementScores from fleet metrics in a Prometheus-
//! compatible query API (a Thanos Querier), with no agent on the clusters. One more provider
//! on the score-provider framework, which writes, renews and expires the scores.

pub mod provider;
pub mod queries;
