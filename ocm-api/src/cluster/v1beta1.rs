//! `cluster.open-cluster-management.io/v1beta1`: Placement and PlacementDecision
//! (upstream `cluster/v1beta1/types_placement.go`, `types_placementdecision.go`).
//!
//! String fields that upstream types as string enums stay `String` here, as in Go: the
//! scheduler must be able to read and report any value (for example a toleration operator,
//! which the CRD does not restrict), never fail to decode the whole object. The known values
//! are constants in [`crate::wellknown`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::null_as_default;
use crate::schema;

/// Which clusters a workload may go to. The spec's fields are ANDed; an empty spec selects
/// every cluster of every clusterset bound to the namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "Placement",
    plural = "placements",
    namespaced,
    status = "PlacementStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Succeeded","type":"string","jsonPath":".status.conditions[?(@.type==\"PlacementSatisfied\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"PlacementSatisfied\")].reason"}"#,
    printcolumn = r#"{"name":"SelectedClusters","type":"integer","jsonPath":".status.numberOfSelectedClusters"}"#
)]
#[serde(rename_all = "camelCase", default)]
pub struct PlacementSpec {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub cluster_sets: Vec<String>,
    /// `None` selects every feasible cluster. No minimum in the CRD: a negative value must be
    /// reported as misconfigured, not trusted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number_of_clusters: Option<i32>,
    /// ORed.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub predicates: Vec<ClusterPredicate>,
    #[serde(deserialize_with = "null_as_default")]
    pub prioritizer_policy: PrioritizerPolicy,
    #[serde(
        skip_serializing_if = "SpreadPolicy::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub spread_policy: SpreadPolicy,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub tolerations: Vec<Toleration>,
    #[serde(
        skip_serializing_if = "DecisionStrategy::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub decision_strategy: DecisionStrategy,
    /// One of [`crate::wellknown::sort_by`]; empty means `ClusterName`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "ClusterName", "enum" = ["ClusterName", "Score"]))]
    pub sort_by: String,
    /// A duration such as `1m`; empty means the CRD default `1m`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "1m"), regex(pattern = r"^[0-9]+[hms]$"))]
    pub score_rate_limit: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterPredicate {
    #[serde(
        skip_serializing_if = "ClusterSelector::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub required_cluster_selector: ClusterSelector,
}

/// Label, claim and CEL selectors, ANDed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterSelector {
    #[serde(
        skip_serializing_if = "schema::is_empty_label_selector",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub label_selector: LabelSelector,
    #[serde(
        skip_serializing_if = "ClusterClaimSelector::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub claim_selector: ClusterClaimSelector,
    #[serde(
        skip_serializing_if = "ClusterCelSelector::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub cel_selector: ClusterCelSelector,
}

impl ClusterSelector {
    fn is_empty(&self) -> bool {
        schema::is_empty_label_selector(&self.label_selector)
            && self.claim_selector.is_empty()
            && self.cel_selector.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterCelSelector {
    /// ANDed.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub cel_expressions: Vec<String>,
}

impl ClusterCelSelector {
    fn is_empty(&self) -> bool {
        self.cel_expressions.is_empty()
    }
}

/// Matched against the map of the cluster's `status.clusterClaims`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterClaimSelector {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl ClusterClaimSelector {
    fn is_empty(&self) -> bool {
        self.match_expressions.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PrioritizerPolicy {
    /// One of [`crate::wellknown::prioritizer_mode`]; empty means `Additive`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "Additive"))]
    pub mode: String,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub configurations: Vec<PrioritizerConfig>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrioritizerConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub score_coordinate: Option<ScoreCoordinate>,
    /// In [-10, 10]; 0 disables the prioritizer, a negative weight prefers low scores. A
    /// missing weight is 1, as the CRD defaults it. Always written: Go's `omitempty` drops an
    /// explicit 0, which the apiserver then defaults to 1 (we do not copy that).
    #[serde(
        default = "schema::default_weight",
        deserialize_with = "schema::null_as_default_weight"
    )]
    #[schemars(range(min = -10, max = 10))]
    pub weight: i32,
}

impl Default for PrioritizerConfig {
    fn default() -> Self {
        Self {
            score_coordinate: None,
            weight: schema::default_weight(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ScoreCoordinate {
    /// One of [`crate::wellknown::score_coordinate_type`].
    #[serde(
        rename = "type",
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(required, extend("default" = "BuiltIn", "enum" = ["BuiltIn", "AddOn"]))]
    pub type_: String,
    /// One of [`crate::wellknown::builtin_prioritizer`] when `type` is `BuiltIn`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub built_in: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_on: Option<AddOnScore>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddOnScore {
    /// The AddOnPlacementScore's name.
    #[schemars(required)]
    pub resource_name: String,
    /// The score item's name inside it.
    #[schemars(required)]
    pub score_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct SpreadPolicy {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(max = 8))]
    pub spread_constraints: Vec<SpreadConstraintsTerm>,
}

impl SpreadPolicy {
    fn is_empty(&self) -> bool {
        self.spread_constraints.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraintsTerm {
    /// A label key or a claim name, per `topologyKeyType`. (Upstream's pattern here lacks the
    /// outer group of the taint-key pattern; it accepts the same strings. Kept verbatim.)
    #[schemars(
        required,
        length(max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
        )
    )]
    pub topology_key: String,
    /// One of [`crate::wellknown::topology_key_type`].
    #[schemars(required, extend("enum" = ["Label", "Claim"]))]
    pub topology_key_type: String,
    /// A missing maxSkew is 1, as the CRD defaults it.
    #[serde(
        default = "schema::default_max_skew",
        deserialize_with = "schema::null_as_default_max_skew"
    )]
    #[schemars(range(min = 1))]
    pub max_skew: i32,
    /// One of [`crate::wellknown::when_unsatisfiable`]; empty means `ScheduleAnyway`.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "ScheduleAnyway", "enum" = ["DoNotSchedule", "ScheduleAnyway"]))]
    pub when_unsatisfiable: String,
}

impl Default for SpreadConstraintsTerm {
    fn default() -> Self {
        Self {
            topology_key: String::new(),
            topology_key_type: String::new(),
            max_skew: schema::default_max_skew(),
            when_unsatisfiable: String::new(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Toleration {
    /// Empty matches every key (then the operator must be `Exists`).
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(max = 316), regex(pattern = schema::QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// `Equal` or `Exists`; empty means `Equal`. Not an enum in the CRD.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("default" = "Equal"))]
    pub operator: String,
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(length(max = 1024))]
    pub value: String,
    /// Empty matches every effect.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("enum" = ["NoSelect", "PreferNoSelect", "NoSelectIfNew"]))]
    pub effect: String,
    /// `None` tolerates forever; counted from the taint's `timeAdded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DecisionStrategy {
    #[serde(
        skip_serializing_if = "GroupStrategy::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub group_strategy: GroupStrategy,
}

impl DecisionStrategy {
    fn is_empty(&self) -> bool {
        self.group_strategy.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct GroupStrategy {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub decision_groups: Vec<DecisionGroup>,
    /// A count (`25`) or a percentage (`"25%"`) of the selected clusters; CRD default `"100%"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        // `regex(...)` is dropped on IntOrString by schemars; set the pattern directly.
        extend("default" = "100%", "pattern" = r"^((100|[1-9][0-9]{0,1})%|[1-9][0-9]*)$")
    )]
    pub clusters_per_decision_group: Option<IntOrString>,
}

impl GroupStrategy {
    fn is_empty(&self) -> bool {
        self.decision_groups.is_empty() && self.clusters_per_decision_group.is_none()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionGroup {
    /// The value of the decision-group-name label.
    #[schemars(
        required,
        regex(pattern = r"^[a-zA-Z0-9][-A-Za-z0-9_.]{0,61}[a-zA-Z0-9]$")
    )]
    pub group_name: String,
    #[schemars(required)]
    pub group_cluster_selector: GroupClusterSelector,
}

/// A label and claim selector (no CEL, unlike [`ClusterSelector`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct GroupClusterSelector {
    #[serde(
        skip_serializing_if = "schema::is_empty_label_selector",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub label_selector: LabelSelector,
    #[serde(
        skip_serializing_if = "ClusterClaimSelector::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub claim_selector: ClusterClaimSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlacementStatus {
    #[serde(deserialize_with = "null_as_default")]
    pub number_of_selected_clusters: i32,
    #[serde(deserialize_with = "null_as_default")]
    pub decision_groups: Vec<DecisionGroupStatus>,
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,
    /// API field; upstream does not write it yet (score visibility).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_score_update_time: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DecisionGroupStatus {
    #[serde(deserialize_with = "null_as_default")]
    pub decision_group_index: i32,
    #[serde(deserialize_with = "null_as_default")]
    pub decision_group_name: String,
    /// Names of the PlacementDecisions holding this group.
    #[serde(deserialize_with = "null_as_default")]
    pub decisions: Vec<String>,
    /// JSON key `clusterCount` (Go field `ClustersCount`).
    #[serde(rename = "clusterCount", deserialize_with = "null_as_default")]
    pub clusters_count: i32,
}

/// The scheduler's output for one Placement: up to 100 clusters per object, named
/// `<placement>-decision-<k>`. It has no spec.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "PlacementDecision",
    plural = "placementdecisions",
    namespaced,
    no_spec,
    status = "PlacementDecisionStatus",
    derive = "Default",
    derive = "PartialEq"
)]
pub struct PlacementDecisionFields {}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecisionStatus {
    // Required, but Go writes an empty list as `null`, which is read as empty (a comment, not
    // a doc comment: it would become the CRD field's description).
    #[schemars(required)]
    #[serde(deserialize_with = "null_as_default")]
    pub decisions: Vec<ClusterDecision>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    #[schemars(required)]
    pub cluster_name: String,
    /// Upstream always writes "".
    #[schemars(required)]
    pub reason: String,
    /// The total score (score visibility); omitted when zero, as Go's `omitzero`.
    #[serde(
        default,
        skip_serializing_if = "schema::is_zero_i64",
        deserialize_with = "null_as_default"
    )]
    pub score: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PlacementSpec {
        serde_json::from_value(v).expect("decodes")
    }

    #[test]
    fn crd_defaults_apply_without_an_apiserver() {
        let s = spec(json!({
            "prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"builtIn": "Steady"}}]},
            "spreadPolicy": {"spreadConstraints": [{"topologyKey": "zone", "topologyKeyType": "Label"}]}
        }));
        assert_eq!(s.prioritizer_policy.configurations[0].weight, 1);
        assert_eq!(s.spread_policy.spread_constraints[0].max_skew, 1);
        // Empty strings stand for the CRD defaults the scheduler applies (Additive, BuiltIn).
        assert_eq!(s.prioritizer_policy.mode, "");
        assert_eq!(
            s.prioritizer_policy.configurations[0]
                .score_coordinate
                .as_ref()
                .map(|c| c.type_.as_str()),
            Some("")
        );
    }

    #[test]
    fn an_explicit_zero_weight_is_kept_and_written() {
        let s = spec(json!({"prioritizerPolicy": {"configurations": [
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Balance"}, "weight": 0}]}}));
        assert_eq!(s.prioritizer_policy.configurations[0].weight, 0);
        let out = serde_json::to_value(&s).expect("encodes");
        assert_eq!(
            out["prioritizerPolicy"]["configurations"][0]["weight"],
            json!(0)
        );
    }

    #[test]
    fn unknown_enum_values_decode_so_they_can_be_reported() {
        let s = spec(json!({
            "prioritizerPolicy": {"mode": "Fancy"},
            "tolerations": [{"key": "k", "operator": "Sometimes"}],
            "sortBy": "Random"
        }));
        assert_eq!(s.prioritizer_policy.mode, "Fancy");
        assert_eq!(s.tolerations[0].operator, "Sometimes");
        assert_eq!(s.sort_by, "Random");
    }

    #[test]
    fn a_negative_number_of_clusters_decodes() {
        // The CRD has no minimum: the scheduler must see it to call it misconfigured.
        assert_eq!(
            spec(json!({"numberOfClusters": -1})).number_of_clusters,
            Some(-1)
        );
    }

    #[test]
    fn a_missing_required_field_is_a_clear_error() {
        let err = serde_json::from_value::<AddOnScore>(json!({"resourceName": "r"})).unwrap_err();
        assert!(err.to_string().contains("scoreName"), "{err}");
    }

    #[test]
    fn clusters_per_decision_group_keeps_int_or_percent() {
        for v in [json!(150), json!("25%")] {
            let s = spec(
                json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": v}}}),
            );
            let out = serde_json::to_value(&s).expect("encodes");
            assert_eq!(
                out["decisionStrategy"]["groupStrategy"]["clustersPerDecisionGroup"],
                v
            );
        }
    }
}
