//! `scoring.ocm-placement.io/v1alpha1`: ScoreDefinition.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::null::null_as_default;

/// How to fill one `AddOnPlacementScore` (`scoreName`, the `resourceName` placements refer to)
/// from metrics: per score item a PromQL expression that yields at most one series per
/// cluster, and how its values become scores in [-100, 100]. Cluster-scoped: a definition is
/// the fleet's, written by whoever may decide what placements rank by.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "scoring.ocm-placement.io",
    version = "v1alpha1",
    kind = "ScoreDefinition",
    plural = "scoredefinitions",
    shortname = "scoredef",
    status = "ScoreDefinitionStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Score","type":"string","jsonPath":".spec.scoreName"}"#,
    printcolumn = r#"{"name":"Evaluator","type":"string","jsonPath":".spec.evaluator"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Evaluated","type":"string","jsonPath":".status.conditions[?(@.type==\"Evaluated\")].reason"}"#,
    printcolumn = r#"{"name":"Clusters","type":"integer","jsonPath":".status.scoredClusters"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "an agent sees one cluster: its definitions normalise by Range only",
    "rule": "self.evaluator != 'Agent' || self.scores.all(s, s.normalise.type == 'Range')"
}]))]
pub struct ScoreDefinitionSpec {
    /// The AddOnPlacementScore this definition fills in every cluster's namespace (a
    /// placement's `scoreCoordinate.addOn.resourceName`). One definition per name.
    #[schemars(
        required,
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub score_name: String,
    /// `Hub`: the hub scorer, against the fleet's query API (Thanos Query), by the hub's
    /// trusted cluster label. `Agent`: each cluster's resource-usage agent, against that
    /// cluster's own Prometheus (the add-on manager ships the definition to it).
    #[serde(default)]
    pub evaluator: Evaluator,
    /// How often the queries run (default `60s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub refresh_period: Option<String>,
    /// How long written scores stay valid (`validUntil`; default three refresh periods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub valid_for: Option<String>,
    /// A cluster whose newest sample is older than `maxAge` gets no scores from this
    /// definition (they expire, never zeroed). Without it every cluster that answers is fresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<Freshness>,
    /// The score items, each one number in the AddOnPlacementScore.
    #[serde(deserialize_with = "null_as_default")]
    #[schemars(
        required,
        length(min = 1, max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub scores: Vec<ScoreRule>,
    /// Limits of this definition's queries, within the evaluator's own caps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

/// Who evaluates a definition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Evaluator {
    #[default]
    Hub,
    Agent,
}

/// When a cluster's data counts as fresh.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Freshness {
    /// PromQL: per cluster, the Unix time (seconds) of its newest sample.
    #[schemars(required, length(min = 1, max = 4096))]
    pub expression: String,
    /// Older data withholds the cluster's scores.
    #[schemars(required, regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub max_age: String,
}

/// One score item: its name in the AddOnPlacementScore (a placement's `scoreName`), its
/// query, its normalisation, and what a cluster the query has no series for gets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScoreRule {
    #[schemars(
        required,
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z][A-Za-z0-9_.-]*$")
    )]
    pub name: String,
    /// PromQL yielding at most one series per cluster, by the cluster label (write it
    /// `{{LABEL}}`: the evaluator fills in its trusted label). Two series for one cluster
    /// that disagree withhold that cluster's scores.
    #[schemars(required, length(min = 1, max = 4096))]
    pub expression: String,
    #[schemars(required)]
    pub normalise: Normalisation,
    /// What a cluster the expression has no series for gets: absent, no item (as the
    /// resource-usage agent does for a resource a cluster lacks); or this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -100, max = 100))]
    pub missing_value: Option<i32>,
}

/// How values become scores.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "message": "Range needs min and max",
        "rule": "self.type != 'Range' || (has(self.min) && has(self.max))"
    },
    {
        "message": "min and max belong to Range only",
        "rule": "self.type == 'Range' || (!has(self.min) && !has(self.max))"
    },
    {
        "message": "min must be less than max",
        "rule": "!has(self.min) || !has(self.max) || quantity(self.min).isLessThan(quantity(self.max))"
    }
]))]
pub struct Normalisation {
    /// `Range`: linear between `min` (-100) and `max` (100), in the metric's own units,
    /// clamped (sdk-go's ScoreNormalizer). `MinMax`: relative to the clusters that answered,
    /// the worst -100 and the best 100. `Rank`: by position among them, evenly spaced, ties
    /// sharing a score.
    #[serde(rename = "type")]
    #[schemars(required)]
    pub type_: NormaliseType,
    /// For `Range`: a quantity (`0`, `0.25`, `80Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend("x-kubernetes-validations" = [{"message": "min must be a quantity", "rule": "isQuantity(self)"}])
    )]
    pub min: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend("x-kubernetes-validations" = [{"message": "max must be a quantity", "rule": "isQuantity(self)"}])
    )]
    pub max: Option<String>,
    /// Which way is better (latency: `LowerIsBetter`).
    #[serde(default)]
    pub direction: Direction,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NormaliseType {
    #[default]
    Range,
    MinMax,
    Rank,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Direction {
    #[default]
    HigherIsBetter,
    LowerIsBetter,
}

/// Per-definition limits; the evaluator's flags cap them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Per query, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub query_timeout: Option<String>,
    /// The most series one query may answer; more fails the definition (`LimitExceeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_series: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ScoreDefinitionStatus {
    /// The generation the conditions describe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Evaluated`, `SeriesConsistent` (see `ocm_api::scoring::condition`).
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When the queries last ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_evaluation_time: Option<Time>,
    /// How many clusters the last evaluation wrote scores for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scored_clusters: Option<i32>,
}

/// The pattern every duration field has: a Go-style duration (`90s`, `5m`, `1h30m`).
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";
