//! The controller against a real apiserver with the upstream CRDs: upstream's integration
//! scenarios (open-cluster-management-io/ocm test/integration/placement), the stories of
//! OCM's extensible-scheduling enhancement, spread and groups end to end.
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use ocm_api::{ManagedCluster, PlacementDecision};
use serde_json::json;

const SATISFIED: &str = "PlacementSatisfied";
const MISCONFIGURED: &str = "PlacementMisconfigured";

/// What a pass costs and what it may not stall: CEL, pacing, writes per change.
mod cost;
/// Over time: restarts, bursts, regrouping, events, deleted placements.
mod lifecycle;
/// Upstream's integration scenarios and the extensible-scheduling enhancement's stories.
mod scenarios;
/// The stability controls on the live hub.
mod stability;
