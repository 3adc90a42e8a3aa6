//! `cluster.open-cluster-management.io/v1alpha1`: AddOnPlacementScore
//! (upstream `cluster/v1alpha1/types_addonplacementscore.go`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::null_as_default;

/// Scores a provider publishes for one cluster, in that cluster's namespace on the hub. The
/// object's name is the `resourceName` that placements refer to. It has no spec.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "cluster.open-cluster-management.io",
    version = "v1alpha1",
    kind = "AddOnPlacementScore",
    plural = "addonplacementscores",
    namespaced,
    no_spec,
    status = "AddOnPlacementScoreStatus",
    derive = "Default",
    derive = "PartialEq"
)]
pub struct AddOnPlacementScoreFields {}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct AddOnPlacementScoreStatus {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub scores: Vec<AddOnPlacementScoreItem>,
    /// `None` means the scores never expire.
    pub valid_until: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnPlacementScoreItem {
    #[schemars(required)]
    pub name: String,
    #[schemars(required, range(min = -100, max = 100))]
    pub value: i32,
}
