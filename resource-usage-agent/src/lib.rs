//! The resource-usage agent, a score provider on the [`score_provider`] framework.
//!
//! [`usage`] computes a managed cluster's free CPU, memory, GPUs and TPUs (from its nodes and
//! pods, or from the host) as scores; [`manifests`] are the agent's own add-on manifests, which
//! the hub's add-on manager renders into each cluster's ManifestWork. The binary
//! (`src/main.rs`) wires them to the framework's runner.

pub mod manifests;
pub mod usage;
