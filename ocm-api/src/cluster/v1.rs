//! `cluster.open-cluster-management.io/v1`: ManagedCluster (upstream `cluster/v1/types.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::null_as_default;
use crate::schema;

/// A cluster registered with the hub. Cluster-scoped; its name is also the name of the hub
/// namespace that holds the cluster's AddOnPlacementScores and ManifestWorks.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "cluster.open-cluster-management.io",
    version = "v1",
    kind = "ManagedCluster",
    plural = "managedclusters",
    shortname = "mcl",
    shortname = "mcls",
    status = "ManagedClusterStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Hub Accepted","type":"boolean","jsonPath":".spec.hubAcceptsClient"}"#,
    printcolumn = r#"{"name":"Managed Cluster URLs","type":"string","jsonPath":".spec.managedClusterClientConfigs[*].url"}"#,
    printcolumn = r#"{"name":"Joined","type":"string","jsonPath":".status.conditions[?(@.type==\"ManagedClusterJoined\")].status"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"ManagedClusterConditionAvailable\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSpec {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub managed_cluster_client_configs: Vec<ClientConfig>,
    #[serde(deserialize_with = "null_as_default")]
    pub hub_accepts_client: bool,
    /// A missing value is 60, as the CRD defaults it.
    #[serde(
        default = "schema::default_lease_duration_seconds",
        deserialize_with = "schema::null_as_default_lease_duration_seconds"
    )]
    pub lease_duration_seconds: i32,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub taints: Vec<Taint>,
}

impl Default for ManagedClusterSpec {
    fn default() -> Self {
        Self {
            managed_cluster_client_configs: Vec::new(),
            hub_accepts_client: false,
            lease_duration_seconds: schema::default_lease_duration_seconds(),
            taints: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    #[schemars(required)]
    pub url: String,
    /// PEM bundle as base64 text, as Go's `[]byte` is on the wire (kept encoded: lossless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub ca_bundle: Option<String>,
}

/// A taint on a ManagedCluster. `timeAdded` is owned by the hub's webhook: set on create and
/// whenever the value or effect changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    #[schemars(required, length(max = 316), regex(pattern = schema::QUALIFIED_NAME_PATTERN))]
    pub key: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(max = 1024))]
    pub value: String,
    /// One of [`crate::wellknown::taint_effect`].
    #[schemars(required, extend("enum" = ["NoSelect", "PreferNoSelect", "NoSelectIfNew"]))]
    pub effect: String,
    #[schemars(extend("nullable" = true))]
    pub time_added: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterStatus {
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub capacity: BTreeMap<String, Quantity>,
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub allocatable: BTreeMap<String, Quantity>,
    #[serde(
        skip_serializing_if = "ManagedClusterVersion::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub version: ManagedClusterVersion,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub cluster_claims: Vec<ManagedClusterClaim>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["clusterSet", "name"]))]
    pub managed_namespaces: Vec<ClusterSetManagedNamespaceConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterVersion {
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub kubernetes: String,
}

impl ManagedClusterVersion {
    fn is_empty(&self) -> bool {
        self.kubernetes.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterClaim {
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(min = 1, max = 1024))]
    pub value: String,
}

/// A namespace a ManagedClusterSet asks its member clusters to manage, with its status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetManagedNamespaceConfig {
    #[schemars(required, length(max = 63), regex(pattern = schema::DNS_LABEL_PATTERN))]
    pub name: String,
    #[schemars(required)]
    pub cluster_set: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
