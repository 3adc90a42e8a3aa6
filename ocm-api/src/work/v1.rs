//! `work.open-cluster-management.io/v1`: ManifestWork (upstream `work/v1/types.go`).
//!
//! The manifests themselves are raw Kubernetes objects (Go `runtime.RawExtension`) and stay
//! untyped JSON; everything around them is typed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::{null_as_default, null_as_fn};

/// Pattern of the executor service account's namespace and name (a DNS subdomain).
const DNS_SUBDOMAIN_PATTERN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$";

/// Kubernetes objects the hub asks the work agent of one managed cluster to apply. It lives in
/// that cluster's namespace on the hub; the agent reports per-manifest status back.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    plural = "manifestworks",
    namespaced,
    status = "ManifestWorkStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestWorkSpec {
    #[serde(
        skip_serializing_if = "ManifestsTemplate::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub workload: ManifestsTemplate,
    /// `None` deletes every applied resource in the foreground.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<DeleteOption>,
    /// Per-manifest options (feedback, update strategy, condition rules).
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub manifest_configs: Vec<ManifestConfigOption>,
    /// `None`: the agent applies with its own identity, without a permission check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<ManifestWorkExecutor>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestsTemplate {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub manifests: Vec<Manifest>,
}

impl ManifestsTemplate {
    fn is_empty(&self) -> bool {
        self.manifests.is_empty()
    }
}

/// One Kubernetes object to apply, kept as raw JSON (Go `runtime.RawExtension`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(extend(
    "type" = "object",
    "x-kubernetes-embedded-resource" = true,
    "x-kubernetes-preserve-unknown-fields" = true
))]
pub struct Manifest {
    pub raw: serde_json::Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DeleteOption {
    /// `Foreground`, `Orphan` or `SelectivelyOrphan`. A missing policy is `Foreground`, as the
    /// CRD defaults it. Always written, as in Go.
    #[serde(
        default = "default_propagation_policy",
        deserialize_with = "null_as_default_propagation_policy"
    )]
    #[schemars(extend("default" = "Foreground", "enum" = ["Foreground", "Orphan", "SelectivelyOrphan"]))]
    pub propagation_policy: String,
    /// For `SelectivelyOrphan`: the resources to leave behind. JSON key `selectivelyOrphans`.
    #[serde(rename = "selectivelyOrphans", skip_serializing_if = "Option::is_none")]
    pub selectively_orphan: Option<SelectivelyOrphan>,
    /// Delete the work this long after it completes (see `conditionRules`); `None` keeps it,
    /// 0 deletes it at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
}

fn default_propagation_policy() -> String {
    "Foreground".to_owned()
}

null_as_fn!(fn null_as_default_propagation_policy() -> String = default_propagation_policy);

impl Default for DeleteOption {
    fn default() -> Self {
        Self {
            propagation_policy: default_propagation_policy(),
            selectively_orphan: None,
            ttl_seconds_after_finished: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct SelectivelyOrphan {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub orphaning_rules: Vec<OrphaningRule>,
}

/// A resource of this work to orphan on deletion (upstream a distinct Go type with the same
/// fields as [`ResourceIdentifier`]).
pub type OrphaningRule = ResourceIdentifier;

/// A resource of this work, by group, resource, namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIdentifier {
    /// `""` for the core group.
    #[serde(default, deserialize_with = "null_as_default")]
    pub group: String,
    #[schemars(required)]
    pub resource: String,
    #[schemars(required)]
    pub name: String,
    /// `""` for a cluster-scoped resource.
    #[serde(default, deserialize_with = "null_as_default")]
    pub namespace: String,
}

/// Options for one manifest, matched by [`ResourceIdentifier`]; options for a resource that is
/// not in the work are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigOption {
    #[schemars(required)]
    pub resource_identifier: ResourceIdentifier,
    /// Which status fields to report back in `statusFeedback`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub feedback_rules: Vec<FeedbackRule>,
    /// `None` means `Update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["condition"]))]
    pub condition_rules: Vec<ConditionRule>,
    /// `Poll` or `Watch`; empty means `Poll`.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "Poll", "enum" = ["Poll", "Watch"]))]
    pub feedback_scrape_type: String,
}

/// Sets the manifest's condition `condition` from well-known rules or CEL expressions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "Condition is required for CEL rules",
    "rule": "self.type != 'CEL' || self.condition != \"\""
}]))]
pub struct ConditionRule {
    /// The condition type to set; `Complete` stops further updates of the manifest.
    #[schemars(required)]
    pub condition: String,
    /// `WellKnownConditions` or `CEL`.
    #[serde(rename = "type")]
    #[schemars(required, extend("enum" = ["WellKnownConditions", "CEL"]))]
    pub type_: String,
    /// For `CEL`: ANDed.
    #[serde(default, deserialize_with = "null_as_default")]
    pub cel_expressions: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub message: String,
    /// CEL producing the message; overrides `message` when it yields a non-empty string.
    #[serde(default, deserialize_with = "null_as_default")]
    pub message_expression: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    /// `WellKnownStatus` or `JSONPaths`.
    #[serde(rename = "type")]
    #[schemars(required, extend("enum" = ["WellKnownStatus", "JSONPaths"]))]
    pub type_: String,
    /// For `JSONPaths`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub json_paths: Vec<JsonPath>,
}

/// A status field to report, by a kubectl-style JSONPath under `.status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPath {
    /// The name the value is reported under.
    #[schemars(required)]
    pub name: String,
    /// The resource version to read; empty means the latest.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub version: String,
    #[schemars(required)]
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateStrategy {
    /// `Update`, `CreateOnly`, `ServerSideApply` or `ReadOnly`; empty means `Update`.
    #[serde(
        rename = "type",
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(
        required,
        extend("default" = "Update", "enum" = ["Update", "CreateOnly", "ServerSideApply", "ReadOnly"])
    )]
    pub type_: String,
    /// For `ServerSideApply`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerSideApplyConfig {
    #[serde(deserialize_with = "null_as_default")]
    pub force: bool,
    /// Must start with `work-agent`; empty means `work-agent`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "work-agent"), regex(pattern = r"^work-agent"))]
    pub field_manager: String,
    /// Fields the agent leaves alone on the managed cluster.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["condition"]))]
    pub ignore_fields: Vec<IgnoreField>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct IgnoreField {
    /// `OnSpokePresent` or `OnSpokeChange`: when the fields are ignored. A missing condition is
    /// `OnSpokePresent`, as the CRD defaults it. Always written, as in Go.
    #[serde(
        default = "default_ignore_fields_condition",
        deserialize_with = "null_as_default_ignore_fields_condition"
    )]
    #[schemars(
        required,
        extend("default" = "OnSpokePresent", "enum" = ["OnSpokePresent", "OnSpokeChange"])
    )]
    pub condition: String,
    /// Kubernetes JSONPath expressions.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub json_paths: Vec<String>,
    /// RFC 6901 JSON Pointers (`/spec/replicas`).
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub json_pointers: Vec<String>,
    /// jq path expressions.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub jq_path_expressions: Vec<String>,
}

fn default_ignore_fields_condition() -> String {
    "OnSpokePresent".to_owned()
}

null_as_fn!(
    fn null_as_default_ignore_fields_condition() -> String
        = default_ignore_fields_condition
);

impl Default for IgnoreField {
    fn default() -> Self {
        Self {
            condition: default_ignore_fields_condition(),
            json_paths: Vec::new(),
            json_pointers: Vec::new(),
            jq_path_expressions: Vec::new(),
        }
    }
}

/// The identity the agent applies the manifests as (and checks permissions for).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestWorkExecutor {
    #[serde(deserialize_with = "null_as_default")]
    pub subject: ManifestWorkExecutorSubject,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkExecutorSubject {
    /// Only `ServiceAccount` upstream.
    #[serde(rename = "type")]
    #[schemars(required, extend("enum" = ["ServiceAccount"]))]
    pub type_: String,
    /// For `ServiceAccount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ManifestWorkSubjectServiceAccount>,
}

/// A service account on the managed cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSubjectServiceAccount {
    #[schemars(required, length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub namespace: String,
    #[schemars(required, length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestWorkStatus {
    /// `Applied`, `Progressing`, `Available`, `Degraded`, `Complete`, `Deleting`.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Synced from the managed cluster by the agent.
    #[serde(
        skip_serializing_if = "ManifestResourceStatus::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub resource_status: ManifestResourceStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestResourceStatus {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub manifests: Vec<ManifestCondition>,
}

impl ManifestResourceStatus {
    fn is_empty(&self) -> bool {
        self.manifests.is_empty()
    }
}

/// The state of one manifest on the managed cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    #[schemars(required)]
    pub resource_meta: ManifestResourceMeta,
    /// JSON key `statusFeedback` (Go field `StatusFeedbacks`).
    #[serde(
        rename = "statusFeedback",
        default,
        skip_serializing_if = "StatusFeedbackResult::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub status_feedbacks: StatusFeedbackResult,
    // Required, but Go writes an empty list as `null`, which is read as empty (a comment, not
    // a doc comment: it would become the CRD field's description).
    #[schemars(
        required,
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    #[serde(deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,
}

/// Identifies a manifest: its index in `spec.workload.manifests` and what it resolved to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestResourceMeta {
    #[schemars(required)]
    pub ordinal: i32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub group: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub version: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub resource: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub namespace: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct StatusFeedbackResult {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub values: Vec<FeedbackValue>,
}

impl StatusFeedbackResult {
    fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A reported status field, under the name its feedback rule gave it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackValue {
    #[schemars(required)]
    pub name: String,
    /// JSON key `fieldValue` (Go field `Value`).
    #[serde(rename = "fieldValue")]
    #[schemars(required)]
    pub value: FieldValue,
}

/// A scalar status value, or a list/object as a JSON string; `type` says which field is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    /// `Integer`, `String`, `Boolean` or `JsonRaw`.
    #[serde(rename = "type")]
    #[schemars(required, extend("enum" = ["Integer", "String", "Boolean", "JsonRaw"]))]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    /// A list or object, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub json_raw: Option<String>,
}
