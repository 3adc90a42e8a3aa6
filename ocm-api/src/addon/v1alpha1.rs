//! `addon.open-cluster-management.io/v1alpha1` (the storage version): ClusterManagementAddOn,
//! ManagedClusterAddOn and AddOnDeploymentConfig (upstream `addon/v1alpha1/
//! types_clustermanagementaddon.go`, `types_managedclusteraddon.go`,
//! `types_addondeploymentconfig.go`; schema from the `v1alpha1` entry of the multi-version CRDs
//! in `addon/v1beta1`).
//!
//! Go's embedded (`json:",inline"`) structs are `#[serde(flatten)]` fields here, so each shared
//! piece (group/resource, namespace/name, placement reference) is defined once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::{null_as_default, null_as_fn};
use crate::schema;

/// The namespace add-on agents go to on a managed cluster unless configured otherwise.
const DEFAULT_AGENT_INSTALL_NAMESPACE: &str = "open-cluster-management-agent-addon";

/// Pattern of a rollout's `maxFailures` / `maxConcurrency`: a count or a percentage. Set with
/// `extend`: schemars' `regex` only applies to schemas typed `string`, which IntOrString's is not.
const COUNT_OR_PERCENT_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";

// ---------------------------------------------------------------------------------------------
// ClusterManagementAddOn
// ---------------------------------------------------------------------------------------------

/// The hub-wide registration of an add-on. Cluster-scoped; its name is the name every
/// ManagedClusterAddOn of this add-on carries.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ClusterManagementAddOn",
    plural = "clustermanagementaddons",
    shortname = "cma",
    shortname = "cmas",
    status = "ClusterManagementAddOnStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"DISPLAY NAME","type":"string","jsonPath":".spec.addOnMeta.displayName"}"#,
    printcolumn = r#"{"name":"CRD NAME","type":"string","jsonPath":".spec.addOnConfiguration.crdName"}"#
)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterManagementAddOnSpec {
    #[serde(
        skip_serializing_if = "AddOnMeta::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub add_on_meta: AddOnMeta,
    /// Deprecated upstream in favour of `supportedConfigs`.
    #[serde(
        skip_serializing_if = "ConfigCoordinates::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub add_on_configuration: ConfigCoordinates,
    /// Deprecated upstream (replaced by `defaultConfigs` in v1beta1). Empty: the add-on takes no
    /// configuration.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group", "resource"]))]
    pub supported_configs: Vec<ConfigMeta>,
    /// Which clusters get a ManagedClusterAddOn automatically.
    #[serde(
        skip_serializing_if = "InstallStrategy::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = {"type": "Manual"}))]
    pub install_strategy: InstallStrategy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct AddOnMeta {
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub display_name: String,
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub description: String,
}

impl AddOnMeta {
    fn is_empty(&self) -> bool {
        self.display_name.is_empty() && self.description.is_empty()
    }
}

/// Deprecated upstream: where the add-on's configuration CRD and CR are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigCoordinates {
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub crd_name: String,
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub cr_name: String,
    #[serde(
        skip_serializing_if = "schema::is_zero_i64",
        deserialize_with = "null_as_default"
    )]
    pub last_observed_generation: i64,
}

impl ConfigCoordinates {
    fn is_empty(&self) -> bool {
        self.crd_name.is_empty() && self.cr_name.is_empty() && self.last_observed_generation == 0
    }
}

/// A configuration type the add-on supports, with an optional default configuration object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigMeta {
    #[serde(flatten)]
    pub config_group_resource: ConfigGroupResource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_config: Option<ConfigReferent>,
}

/// The group and resource of an add-on configuration type; the group is `""` for the core group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigGroupResource {
    #[schemars(extend("default" = ""))]
    #[serde(default, deserialize_with = "null_as_default")]
    pub group: String,
    #[schemars(required, length(min = 1))]
    pub resource: String,
}

/// The namespace and name of an add-on configuration object; no namespace means cluster-scoped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReferent {
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub namespace: String,
    #[schemars(required, length(min = 1))]
    pub name: String,
}

/// A configuration object and the hash of its spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigSpecHash {
    #[serde(flatten)]
    pub config_referent: ConfigReferent,
    #[serde(deserialize_with = "null_as_default")]
    pub spec_hash: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct InstallStrategy {
    /// One of `Manual`, `Placements`. A missing type is `Manual`, as the CRD defaults it (the
    /// addon manager also reads `""` as `Manual`). Always written, as in Go.
    #[serde(
        rename = "type",
        default = "default_install_strategy_type",
        deserialize_with = "null_as_default_install_strategy_type"
    )]
    #[schemars(extend("default" = "Manual", "enum" = ["Manual", "Placements"]))]
    pub type_: String,
    /// For `Placements`: when a cluster is selected by several, the later entry wins.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace", "name"]))]
    pub placements: Vec<PlacementStrategy>,
}

fn default_install_strategy_type() -> String {
    "Manual".to_owned()
}

null_as_fn!(fn null_as_default_install_strategy_type() -> String = default_install_strategy_type);

impl Default for InstallStrategy {
    fn default() -> Self {
        Self {
            type_: default_install_strategy_type(),
            placements: Vec::new(),
        }
    }
}

impl InstallStrategy {
    /// Only an explicitly blanked strategy; the default (`Manual`) is written out.
    fn is_empty(&self) -> bool {
        self.type_.is_empty() && self.placements.is_empty()
    }
}

/// A Placement, by namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRef {
    #[schemars(required, length(min = 1))]
    pub namespace: String,
    #[schemars(required, length(min = 1))]
    pub name: String,
}

/// Install the add-on on the clusters a Placement selects, with these configs and rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlacementStrategy {
    #[serde(flatten)]
    pub placement_ref: PlacementRef,
    /// Initial configs of the ManagedClusterAddOns; users may override them there.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub configs: Vec<AddOnConfig>,
    /// How configuration changes roll out (only for the configs set here).
    #[serde(
        skip_serializing_if = "RolloutStrategy::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = {"type": "All"}))]
    pub rollout_strategy: RolloutStrategy,
}

/// How a workload (here: add-on configuration) rolls out over the selected clusters. Upstream
/// this is `cluster.open-cluster-management.io/v1alpha1` `RolloutStrategy`; the add-on API is
/// its only user in this crate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RolloutStrategy {
    /// One of `All`, `Progressive`, `ProgressivePerGroup`. A missing type is `All`, as the CRD
    /// defaults it: upstream's rollout handler rejects `""`.
    #[serde(
        rename = "type",
        default = "default_rollout_type",
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default_rollout_type"
    )]
    #[schemars(extend("default" = "All", "enum" = ["All", "Progressive", "ProgressivePerGroup"]))]
    pub type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<RolloutAll>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progressive: Option<RolloutProgressive>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progressive_per_group: Option<RolloutProgressivePerGroup>,
}

fn default_rollout_type() -> String {
    "All".to_owned()
}

null_as_fn!(fn null_as_default_rollout_type() -> String = default_rollout_type);

impl Default for RolloutStrategy {
    fn default() -> Self {
        Self {
            type_: default_rollout_type(),
            all: None,
            progressive: None,
            progressive_per_group: None,
        }
    }
}

impl RolloutStrategy {
    /// Only an explicitly blanked strategy; the default (`All`) is written out.
    fn is_empty(&self) -> bool {
        self.type_.is_empty()
            && self.all.is_none()
            && self.progressive.is_none()
            && self.progressive_per_group.is_none()
    }
}

/// Timing and failure tolerance shared by all rollout types.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RolloutConfig {
    /// Soak time after each step, a Go duration (`90m`); empty means the CRD default `0`. Never
    /// written empty: Go cannot parse `""` as a duration.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "0"))]
    pub min_success_time: String,
    /// `None` (the CRD default; empty means the same) waits forever, else a duration (`2h`).
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "None"), regex(pattern = r"^(([0-9])+[h|m|s])|None$"))]
    pub progress_deadline: String,
    /// A count or a percentage of the step's clusters; `None` means 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0, "pattern" = COUNT_OR_PERCENT_PATTERN))]
    pub max_failures: Option<IntOrString>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct MandatoryDecisionGroup {
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub group_name: String,
    /// Go's `omitempty` drops index 0; use `groupName` to name the first group.
    #[serde(
        skip_serializing_if = "schema::is_zero_i32",
        deserialize_with = "null_as_default"
    )]
    pub group_index: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RolloutAll {
    #[serde(flatten)]
    pub rollout_config: RolloutConfig,
}

/// Decision group by decision group. Upstream embeds a `MandatoryDecisionGroups` struct holding
/// only the list; the list is a direct field here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RolloutProgressivePerGroup {
    #[serde(flatten)]
    pub rollout_config: RolloutConfig,
    /// Rolled out first, and must all succeed before the rest proceed.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub mandatory_decision_groups: Vec<MandatoryDecisionGroup>,
}

/// Cluster by cluster, at most `maxConcurrency` at a time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RolloutProgressive {
    #[serde(flatten)]
    pub rollout_config: RolloutConfig,
    /// Rolled out first, and must all succeed before the rest proceed.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub mandatory_decision_groups: Vec<MandatoryDecisionGroup>,
    /// A count or a percentage of the selected clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = COUNT_OR_PERCENT_PATTERN))]
    pub max_concurrency: Option<IntOrString>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterManagementAddOnStatus {
    /// JSON key `defaultconfigReferences` (lower-case `c`, as upstream spells it).
    #[serde(
        rename = "defaultconfigReferences",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub default_config_references: Vec<DefaultConfigReference>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub install_progressions: Vec<InstallProgression>,
}

/// Per-placement progress of the install strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct InstallProgression {
    #[serde(flatten)]
    pub placement_ref: PlacementRef,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub config_references: Vec<InstallConfigReference>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A default configuration and its desired spec hash. The pointer fields have no `omitempty`
/// upstream, so `None` is written as `null`, as Go does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DefaultConfigReference {
    #[serde(flatten)]
    pub config_group_resource: ConfigGroupResource,
    pub desired_config: Option<ConfigSpecHash>,
}

/// A placement's configuration and its rollout state (`None` is written as `null`, as in Go).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct InstallConfigReference {
    #[serde(flatten)]
    pub config_group_resource: ConfigGroupResource,
    pub desired_config: Option<ConfigSpecHash>,
    /// For canary rollouts, the last config applied successfully to the canary placement;
    /// otherwise the same as `lastAppliedConfig`.
    pub last_known_good_config: Option<ConfigSpecHash>,
    /// Set once every ManagedClusterAddOn of the placement has applied the config.
    pub last_applied_config: Option<ConfigSpecHash>,
}

// ---------------------------------------------------------------------------------------------
// ManagedClusterAddOn
// ---------------------------------------------------------------------------------------------

/// An add-on enabled on one cluster, in that cluster's namespace on the hub; its name is the
/// ClusterManagementAddOn's. The agent and the addon manager report its state in the status.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedClusterAddOn",
    plural = "managedclusteraddons",
    namespaced,
    shortname = "mca",
    shortname = "mcas",
    status = "ManagedClusterAddOnStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].status"}"#,
    printcolumn = r#"{"name":"Progressing","type":"string","jsonPath":".status.conditions[?(@.type==\"Progressing\")].status"}"#
)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterAddOnSpec {
    /// Deprecated upstream (use AddOnDeploymentConfig); empty means
    /// `open-cluster-management-agent-addon`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(
        extend("default" = "open-cluster-management-agent-addon"),
        length(max = 63),
        regex(pattern = schema::DNS_LABEL_PATTERN)
    )]
    pub install_namespace: String,
    /// Configs for this cluster; they override the ClusterManagementAddOn's.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub configs: Vec<AddOnConfig>,
}

/// A configuration object of a given type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct AddOnConfig {
    #[serde(flatten)]
    pub config_group_resource: ConfigGroupResource,
    #[serde(flatten)]
    pub config_referent: ConfigReferent,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterAddOnStatus {
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
    pub related_objects: Vec<ObjectReference>,
    /// Mirrors the ClusterManagementAddOn's.
    #[serde(
        skip_serializing_if = "AddOnMeta::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub add_on_meta: AddOnMeta,
    /// Deprecated upstream (use `configReferences`).
    #[serde(
        skip_serializing_if = "ConfigCoordinates::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub add_on_configuration: ConfigCoordinates,
    /// Config types this cluster's spec may override; empty means none.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group", "resource"]))]
    pub supported_configs: Vec<ConfigGroupResource>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub config_references: Vec<ConfigReference>,
    /// Namespace on the managed cluster for the registration secret and the lease.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub namespace: String,
    /// One CSR (and client certificate) per entry; set by the add-on's hub controller.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub registrations: Vec<RegistrationConfig>,
    #[serde(
        skip_serializing_if = "HealthCheck::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub health_check: HealthCheck,
    /// `csr` or `token`: how the agent authenticates its kube-apiserver client.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("enum" = ["csr", "token"]))]
    pub kube_client_driver: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// `""` for the core group.
    #[schemars(required)]
    pub group: String,
    #[schemars(required)]
    pub resource: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub namespace: String,
    #[schemars(required)]
    pub name: String,
}

/// The configuration in effect for this cluster's add-on. The pointer fields have no
/// `omitempty` upstream, so `None` is written as `null`, as Go does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigReference {
    #[serde(flatten)]
    pub config_group_resource: ConfigGroupResource,
    /// Deprecated upstream (use `desiredConfig`).
    #[serde(flatten)]
    pub config_referent: ConfigReferent,
    #[serde(deserialize_with = "null_as_default")]
    pub last_observed_generation: i64,
    pub desired_config: Option<ConfigSpecHash>,
    /// Set once the add-on's ManifestWork with this config has been applied.
    pub last_applied_config: Option<ConfigSpecHash>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HealthCheck {
    /// `Lease` or `Customized`; empty means `Lease` (only `Customized` turns the lease check
    /// off upstream).
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "Lease", "enum" = ["Lease", "Customized"]))]
    pub mode: String,
}

impl HealthCheck {
    fn is_empty(&self) -> bool {
        self.mode.is_empty()
    }
}

/// How the add-on agent registers to the hub: the klusterlet creates a CSR with this signer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrationConfig {
    #[schemars(
        required,
        length(min = 5, max = 571),
        regex(pattern = r"^([a-z0-9][a-z0-9-]*[a-z0-9]\.)+[a-z]+\/[a-z0-9-\.]+$")
    )]
    pub signer_name: String,
    /// Empty: the agent gets upstream's default subject for the cluster and add-on.
    #[serde(
        default,
        skip_serializing_if = "Subject::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub subject: Subject,
}

/// The user the add-on agent's certificate is issued for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Subject {
    #[serde(deserialize_with = "null_as_default")]
    pub user: String,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub groups: Vec<String>,
    /// JSON key `organizationUnit` (Go field `OrganizationUnits`).
    #[serde(
        rename = "organizationUnit",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub organization_units: Vec<String>,
}

impl Subject {
    fn is_empty(&self) -> bool {
        self.user.is_empty() && self.groups.is_empty() && self.organization_units.is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// AddOnDeploymentConfig
// ---------------------------------------------------------------------------------------------

/// Customizes how an add-on's agents are deployed (variables, node placement, image mirrors,
/// proxy, namespace, resources). Referenced from add-on configs; it has no status.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "AddOnDeploymentConfig",
    plural = "addondeploymentconfigs",
    namespaced,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase", default)]
pub struct AddOnDeploymentConfigSpec {
    /// Name-value pairs the add-on uses to render its deployment.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub customized_variables: Vec<CustomizedVariable>,
    /// `None`: unspecified; `Some` of an empty placement: all nodes, no tolerations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_placement: Option<NodePlacement>,
    /// Image registry overrides for the agent's images.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub registries: Vec<ImageMirror>,
    #[serde(
        skip_serializing_if = "ProxyConfig::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub proxy_config: ProxyConfig,
    /// A missing namespace is `open-cluster-management-agent-addon`, as the CRD defaults it;
    /// an explicit `""` tells template add-ons to use their template's namespace. Always
    /// written: Go's `omitempty` drops that `""`, which the apiserver then defaults (we do not
    /// copy that).
    #[serde(
        default = "default_agent_install_namespace",
        deserialize_with = "null_as_default_agent_install_namespace"
    )]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    )]
    pub agent_install_namespace: String,
    /// Per-container resources; the last matching entry wins.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["containerID"]))]
    pub resource_requirements: Vec<ContainerResourceRequirements>,
}

fn default_agent_install_namespace() -> String {
    DEFAULT_AGENT_INSTALL_NAMESPACE.to_owned()
}

null_as_fn!(
    fn null_as_default_agent_install_namespace() -> String
        = default_agent_install_namespace
);

impl Default for AddOnDeploymentConfigSpec {
    fn default() -> Self {
        Self {
            customized_variables: Vec::new(),
            node_placement: None,
            registries: Vec::new(),
            proxy_config: ProxyConfig::default(),
            agent_install_namespace: default_agent_install_namespace(),
            resource_requirements: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResourceRequirements {
    /// `{resource type}:{resource name}:{container name}`, each part possibly `*`.
    /// JSON key `containerID`.
    #[serde(rename = "containerID")]
    #[schemars(
        required,
        regex(
            pattern = r"^(deployments|daemonsets|statefulsets|replicasets|jobs|cronjobs|pods|\*):.+:.+$"
        )
    )]
    pub container_id: String,
    #[schemars(required)]
    pub resources: ResourceRequirements,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomizedVariable {
    #[schemars(
        required,
        length(max = 255),
        regex(pattern = r"^[a-zA-Z_][_a-zA-Z0-9]*$")
    )]
    pub name: String,
    #[schemars(length(max = 1024))]
    #[serde(default, deserialize_with = "null_as_default")]
    pub value: String,
}

/// Node scheduling for the add-on agent's pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct NodePlacement {
    /// Empty matches every node.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub node_selector: BTreeMap<String, String>,
    /// Empty tolerates nothing.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub tolerations: Vec<Toleration>,
}

/// Rewrites image references starting with `source` (every image when empty) to `mirror`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMirror {
    /// Ignored when empty.
    #[schemars(required)]
    pub mirror: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub source: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyConfig {
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub http_proxy: String,
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub https_proxy: String,
    /// PEM bundle to verify an HTTPS proxy, as base64 text, as Go's `[]byte` is on the wire
    /// (kept encoded: lossless).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub ca_bundle: Option<String>,
    /// Comma-separated hosts, CIDRs and IPs that bypass the proxy.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub no_proxy: String,
}

impl ProxyConfig {
    fn is_empty(&self) -> bool {
        self.http_proxy.is_empty()
            && self.https_proxy.is_empty()
            && self.ca_bundle.is_none()
            && self.no_proxy.is_empty()
    }
}
