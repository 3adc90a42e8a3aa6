//! The arithmetic behind the resource-usage provider, free of I/O: what a pod requests
//! ([`requests`]) and what the cluster's nodes have left ([`index`]); the scores' formula
//! is `ocm_api::score::resource_usage`, which the hub scorer shares.
//!
//! "Usage" here is what upstream's agent means by it: the sum of the resource *requests* of the
//! pods bound to a node, the quantity the kube-scheduler packs against, not measured
//! consumption. The watchers feed Node and Pod events into a [`index::UsageIndex`], which keeps
//! per-node sums up to date so that scoring reads [`index::Totals`] in O(nodes).

pub mod host;
pub mod index;
pub mod kube;
pub mod provider;
pub mod requests;
pub mod slim;
