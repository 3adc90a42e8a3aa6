//! The resource-usage agent, a score provider on the [`score_provider`] framework.
//!
//! [`usage`] computes a managed cluster's free CPU, memory, GPUs and TPUs (from its nodes and
//! pods, or from the host) as scores. The binary (`src/main.rs`) wires it to the framework's
//! runner. The agent's own add-on manifests belong to the hub's add-on manager, which ships
//! them (`resource_usage_hub::manager::manifests`).

pub mod usage;
