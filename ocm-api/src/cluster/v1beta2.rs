//! `cluster.open-cluster-management.io/v1beta2`: ManagedClusterSet and ManagedClusterSetBinding
//! (upstream `cluster/v1beta2/types_managedclusterset*.go`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::null_as_default;
use crate::schema;

/// A group of ManagedClusters. Membership comes from `spec.clusterSelector`: the exclusive
/// clusterset label, or a label selector.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSet",
    plural = "managedclustersets",
    shortname = "mclset",
    shortname = "mclsets",
    status = "ManagedClusterSetStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Empty","type":"string","jsonPath":".status.conditions[?(@.type==\"ClusterSetEmpty\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSetSpec {
    #[serde(deserialize_with = "null_as_default")]
    pub cluster_selector: ManagedClusterSelector,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub managed_namespaces: Vec<ManagedNamespaceConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSelector {
    /// One of [`crate::wellknown::selector_type`]; empty means the exclusive label.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(
        required,
        extend("default" = "ExclusiveClusterSetLabel", "enum" = ["ExclusiveClusterSetLabel", "LabelSelector"])
    )]
    pub selector_type: String,
    /// Only for `LabelSelector`: `None` matches no cluster, an empty selector matches all.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub label_selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedNamespaceConfig {
    #[schemars(required, length(max = 63), regex(pattern = schema::DNS_LABEL_PATTERN))]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSetStatus {
    #[serde(deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,
}

/// Makes a ManagedClusterSet usable by Placements in the binding's namespace. Upstream's
/// webhook requires `metadata.name == spec.clusterSet`; the scheduler reads only the name.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSetBinding",
    plural = "managedclustersetbindings",
    namespaced,
    shortname = "mclsetbinding",
    shortname = "mclsetbindings",
    status = "ManagedClusterSetBindingStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSetBindingSpec {
    /// Go writes "" when unset; the CRD refuses "" (minLength 1), so leaving it out is the
    /// same object and keeps a bogus `default: ""` out of our schema.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(min = 1))]
    pub cluster_set: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSetBindingStatus {
    #[serde(deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,
}
