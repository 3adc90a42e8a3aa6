//! A ScoreDefinition's spec checked and turned into what an evaluation runs: durations and
//! quantities parsed, the trusted cluster label filled into every expression, identical
//! expressions run once, limits capped by the evaluator's flags.

use std::time::Duration;

use ocm_api::score::Normaliser;
use ocm_api::scoring::{Direction, NormaliseType, ScoreDefinitionSpec};
use thiserror::Error;

/// The placeholder of the cluster label in expressions.
pub const LABEL_PLACEHOLDER: &str = "{{LABEL}}";

/// The evaluator's own caps: a definition may ask for less, never more.
#[derive(Clone, Debug, PartialEq)]
pub struct Caps {
    /// The most series one query may answer.
    pub max_series: usize,
    /// The longest a definition's queries may take, retries included.
    pub query_timeout: Duration,
    /// The shortest refresh period taken (a definition asking for 1 s is run this often).
    pub min_period: Duration,
    /// The refresh period of a definition that names none.
    pub default_period: Duration,
    /// The validity of a definition that names none (`None`: three refresh periods).
    pub default_valid_for: Option<Duration>,
}

impl Default for Caps {
    /// 10,000 series (a fleet of that many clusters), 30 s, at most every 10 s, every 60 s
    /// unless said, valid for three periods.
    fn default() -> Self {
        Self {
            max_series: 10_000,
            query_timeout: Duration::from_secs(30),
            min_period: Duration::from_secs(10),
            default_period: Duration::from_secs(60),
            default_valid_for: None,
        }
    }
}

/// A field a definition cannot be run with; the message names it.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Invalid {
    #[error("{field}: {value:?} is not a duration ({reason})")]
    Duration {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {value:?} is not a quantity")]
    Quantity { field: String, value: String },
    #[error("scores[{rule}].normalise: Range needs min < max ({reason})")]
    Range { rule: String, reason: String },
    #[error("scores[{rule}].normalise: min and max belong to Range only")]
    NotRange { rule: String },
    #[error("scores: {0:?} appears twice")]
    DuplicateName(String),
    #[error("scores: at least one score is needed")]
    NoScores,
    #[error("validFor ({valid_for:?}) must be at least refreshPeriod ({period:?})")]
    ValidFor {
        valid_for: Duration,
        period: Duration,
    },
    #[error("{field}: the expression is empty")]
    EmptyExpression { field: String },
    #[error("an agent sees one cluster: scores[{rule}] must normalise by Range")]
    AgentNeedsRange { rule: String },
}

/// How one rule's values become scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    /// Between fixed bounds (sdk-go's ScoreNormalizer).
    Range(Normaliser, Direction),
    /// The worst answering cluster -100, the best 100.
    MinMax(Direction),
    /// By position among the answering clusters.
    Rank(Direction),
}

/// One score item.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: String,
    /// Index into [`Compiled::queries`].
    pub query: usize,
    pub norm: Norm,
    pub missing: Option<i32>,
}

/// A definition ready to evaluate.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    pub score_name: String,
    pub period: Duration,
    pub valid_for: Duration,
    pub timeout: Duration,
    pub max_series: usize,
    /// Distinct expressions, the label filled in.
    pub queries: Vec<String>,
    /// The freshness query's index and the largest age allowed.
    pub freshness: Option<(usize, Duration)>,
    pub rules: Vec<Rule>,
}

/// Checks `spec` and builds what an evaluation runs; `label` is the evaluator's trusted
/// cluster label (filled in for [`LABEL_PLACEHOLDER`]); `agent` is true for a cluster's
/// agent, which sees one cluster and so only normalises by Range.
pub fn compile(
    spec: &ScoreDefinitionSpec,
    label: &str,
    caps: &Caps,
    agent: bool,
) -> Result<Compiled, Invalid> {
    if spec.scores.is_empty() {
        return Err(Invalid::NoScores);
    }
    let period = match &spec.refresh_period {
        Some(p) => duration("refreshPeriod", p)?,
        None => caps.default_period,
    }
    .max(caps.min_period);
    let valid_for = match &spec.valid_for {
        Some(v) => duration("validFor", v)?,
        None => caps
            .default_valid_for
            .filter(|v| *v >= period)
            .unwrap_or(period * 3),
    };
    if valid_for < period {
        return Err(Invalid::ValidFor { valid_for, period });
    }
    let limits = spec.limits.clone().unwrap_or_default();
    let timeout = match &limits.query_timeout {
        Some(t) => duration("limits.queryTimeout", t)?.min(caps.query_timeout),
        None => caps.query_timeout,
    };
    let max_series = limits
        .max_series
        .and_then(|m| usize::try_from(m).ok())
        .filter(|m| *m > 0)
        .map_or(caps.max_series, |m| m.min(caps.max_series));

    let mut queries: Vec<String> = Vec::new();
    let mut index = |expr: &str, field: &str| -> Result<usize, Invalid> {
        let filled = expr.trim().replace(LABEL_PLACEHOLDER, label);
        if filled.is_empty() {
            return Err(Invalid::EmptyExpression {
                field: field.to_owned(),
            });
        }
        Ok(match queries.iter().position(|q| *q == filled) {
            Some(i) => i,
            None => {
                queries.push(filled);
                queries.len() - 1
            }
        })
    };
    let mut rules = Vec::with_capacity(spec.scores.len());
    for r in &spec.scores {
        if rules.iter().any(|x: &Rule| x.name == r.name) {
            return Err(Invalid::DuplicateName(r.name.clone()));
        }
        let norm = norm(&r.name, &r.normalise)?;
        if agent && !matches!(norm, Norm::Range(..)) {
            return Err(Invalid::AgentNeedsRange {
                rule: r.name.clone(),
            });
        }
        let query = index(&r.expression, &format!("scores[{}].expression", r.name))?;
        rules.push(Rule {
            name: r.name.clone(),
            query,
            norm,
            missing: r.missing_value.map(|v| v.clamp(-100, 100)),
        });
    }
    let freshness = match &spec.freshness {
        Some(f) => Some((
            index(&f.expression, "freshness.expression")?,
            duration("freshness.maxAge", &f.max_age)?,
        )),
        None => None,
    };
    Ok(Compiled {
        score_name: spec.score_name.clone(),
        period,
        valid_for,
        timeout,
        max_series,
        queries,
        freshness,
        rules,
    })
}

fn duration(field: &str, value: &str) -> Result<Duration, Invalid> {
    ocm_runtime::flags::parse_duration(value).map_err(|e| Invalid::Duration {
        field: field.to_owned(),
        value: value.to_owned(),
        reason: e.to_string(),
    })
}

fn quantity(field: String, value: &str) -> Result<f64, Invalid> {
    ocm_api::quantity::parse(value.trim())
        .ok()
        .filter(|v| v.is_finite())
        .ok_or(Invalid::Quantity {
            field,
            value: value.to_owned(),
        })
}

fn norm(rule: &str, n: &ocm_api::scoring::Normalisation) -> Result<Norm, Invalid> {
    match n.type_ {
        NormaliseType::Range => {
            let (Some(min), Some(max)) = (&n.min, &n.max) else {
                return Err(Invalid::Range {
                    rule: rule.to_owned(),
                    reason: "min and max are both needed".into(),
                });
            };
            let min = quantity(format!("scores[{rule}].normalise.min"), min)?;
            let max = quantity(format!("scores[{rule}].normalise.max"), max)?;
            let normaliser = Normaliser::new(min, max).map_err(|e| Invalid::Range {
                rule: rule.to_owned(),
                reason: e.to_string(),
            })?;
            Ok(Norm::Range(normaliser, n.direction))
        }
        _ if n.min.is_some() || n.max.is_some() => Err(Invalid::NotRange {
            rule: rule.to_owned(),
        }),
        NormaliseType::MinMax => Ok(Norm::MinMax(n.direction)),
        NormaliseType::Rank => Ok(Norm::Rank(n.direction)),
    }
}
