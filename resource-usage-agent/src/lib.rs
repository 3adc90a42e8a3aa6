//! The resource-usage agent, a score provider on the [`score_provider`] framework.
//!
//! [`usage`] computes a managed cluster's free CPU, memory, GPUs and TPUs (from its nodes and
//! pods, or from the host) as scores. The binary (`src/main.rs`) wires it to the framework's
//! runner. The agent's own add-on manifests belong to the hub's add-on manager, which ships
//! them (`resource_usage_hub::manager::manifests`).
//!
//! The agent also evaluates the ScoreDefinitions the add-on manager ships to it (`spec.evaluator:
//! Agent`): [`shipped_definitions`] reads the mounted file, [`definition_runners`] runs one
//! framework runner per definition with a [`definition_provider`] querying the cluster's own
//! Prometheus ([`local_prometheus`]), counted in [`definition_metrics`].

pub mod definition_metrics;
pub mod definition_provider;
pub mod definition_runners;
pub mod local_prometheus;
pub mod shipped_definitions;
pub mod usage;
