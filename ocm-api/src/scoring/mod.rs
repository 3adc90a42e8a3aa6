//! `scoring.ocm-placement.io`: this project's own API (no upstream counterpart). A
//! `ScoreDefinition` says how to fill an `AddOnPlacementScore` from metrics, in PromQL and
//! YAML: the hub scorer evaluates it against the fleet's query API, or each cluster's agent
//! against its own Prometheus.

pub mod shipped;
pub mod v1alpha1;

pub use shipped::ShippedDefinition;
pub use v1alpha1::{
    Direction, Evaluator, Freshness, Limits, Normalisation, NormaliseType, ScoreDefinition,
    ScoreDefinitionSpec, ScoreDefinitionStatus, ScoreRule,
};

/// The API group.
pub const GROUP: &str = "scoring.ocm-placement.io";

/// Condition types and reasons of a ScoreDefinition's status.
pub mod condition {
    /// Whether the definition is valid and this evaluator takes it.
    pub const ACCEPTED: &str = "Accepted";
    /// Whether the last evaluation ran its queries and scored clusters.
    pub const EVALUATED: &str = "Evaluated";
    /// Whether series under one cluster's name agreed in the last evaluation.
    pub const SERIES_CONSISTENT: &str = "SeriesConsistent";

    /// `Accepted`: valid and evaluated.
    pub const VALID: &str = "Valid";
    /// `Accepted` False: a field cannot be used (the message names it).
    pub const INVALID: &str = "Invalid";
    /// `Accepted` False: an older definition fills the same AddOnPlacementScore.
    pub const SCORE_NAME_TAKEN: &str = "ScoreNameTaken";
    /// `Accepted` False: past the scorer's `--max-definitions`.
    pub const TOO_MANY_DEFINITIONS: &str = "TooManyDefinitions";
    /// `Accepted` True: the agents evaluate it (the add-on manager ships it to them).
    pub const EVALUATED_BY_AGENTS: &str = "EvaluatedByAgents";

    /// `Evaluated` True.
    pub const SCORED: &str = "Scored";
    /// `Evaluated` False: a query failed (its error in the message).
    pub const QUERY_FAILED: &str = "QueryFailed";
    /// `Evaluated` False: an answer was over a limit (series, bytes, time).
    pub const LIMIT_EXCEEDED: &str = "LimitExceeded";
    /// `Evaluated` False: the queries answered, but with no series for any known cluster.
    pub const NO_SERIES: &str = "NoSeries";

    /// `SeriesConsistent` True.
    pub const CONSISTENT: &str = "Consistent";
    /// `SeriesConsistent` False: some clusters' series disagree; their scores are withheld.
    pub const CONFLICTING_SERIES: &str = "ConflictingSeries";
}
