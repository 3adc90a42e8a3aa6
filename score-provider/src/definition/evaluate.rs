//! One evaluation of a compiled definition, sans IO: the queries' answers, the clusters rated
//! and the time in; each cluster's outcome and what the definition's status says out.
//!
//! Every series is a claim about the cluster its label names. Claims for one cluster that
//! agree are one (replicas, an HA pair without dedup); claims that disagree, or a series that
//! carries [`CONFLICT_LABEL`] (an expression's own conflict part), withhold that cluster's
//! scores from this definition for the round: one of them is never picked. Series for a
//! name the hub does not know are dropped and counted, never looked at.

use std::collections::{BTreeMap, BTreeSet};

use ocm_api::score::{Normaliser, fleet_relative};
use ocm_api::scoring::Direction;

use super::compile::{Compiled, Norm};
use crate::prom::Sample;
use crate::provider::{Computed, Outcome, ProviderError, Scores};

/// A series carrying this label says that series under its cluster's name disagree (its
/// value names what: `node_state`, `pod_requests`, ...): an expression's conflict part adds
/// it, e.g. `label_replace(stddev by (cluster, node) (x) > 0, "scorer_conflict", "x", "", "")`.
pub const CONFLICT_LABEL: &str = "scorer_conflict";

/// The condition reason of a cluster whose series disagree.
pub const REASON_CONFLICT: &str = "ConflictingSeries";
/// The condition reason of a cluster without usable series (none, or a partial answer's
/// warning names its store).
pub const REASON_NO_METRICS: &str = "NoMetrics";
/// The condition reason of a cluster whose newest sample is older than the freshness limit.
pub const REASON_STALE: &str = "MetricsStale";

/// At most this much of a name or label value from a series is repeated in a message.
pub const SHOWN: usize = 63;
/// At most this many distinct values of a conflict are shown.
const VALUES_SHOWN: usize = 3;

/// Why a series was not used. A closed set: it labels a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dropped {
    /// No (or an empty) cluster label.
    Unlabelled,
    /// Its cluster is no accepted ManagedCluster: nobody the hub knows is speaking.
    UnknownCluster,
    /// NaN or ±Inf.
    BadValue,
}

impl Dropped {
    pub fn name(self) -> &'static str {
        match self {
            Dropped::Unlabelled => "unlabelled",
            Dropped::UnknownCluster => "unknown_cluster",
            Dropped::BadValue => "bad_value",
        }
    }
}

/// Whose series an answer holds.
#[derive(Clone, Copy, Debug)]
pub enum Owner<'a> {
    /// On the hub: the cluster each series' trusted label names.
    Label(&'a str),
    /// On an agent: every series is this cluster's (its own Prometheus).
    Own(&'a str),
}

/// What one evaluation needs besides the definition.
#[derive(Debug)]
pub struct Input<'a> {
    pub owner: Owner<'a>,
    /// The samples of each query, by [`Compiled::queries`] index (all succeeded).
    pub answers: &'a [Vec<Sample>],
    /// The clusters rated, in order.
    pub clusters: &'a [String],
    /// Clusters a partial answer's warnings name, with the warning: they count as missing.
    pub partial: &'a BTreeMap<String, String>,
    /// Unix seconds.
    pub now: f64,
}

/// What came of it.
#[derive(Debug, Default, PartialEq)]
pub struct Evaluation {
    pub computed: Computed,
    /// Clusters given scores.
    pub scored: usize,
    /// Clusters withheld because their series disagree, with why (the first found).
    pub conflicts: BTreeMap<String, String>,
    /// Clusters without (fresh) data.
    pub missing: usize,
    /// Series not used, by why.
    pub dropped: BTreeMap<Dropped, u64>,
}

/// Evaluates `def` over `input`.
pub fn evaluate(def: &Compiled, input: &Input<'_>) -> Result<Evaluation, ProviderError> {
    let mut out = Evaluation::default();
    let known: BTreeSet<&str> = input.clusters.iter().map(String::as_str).collect();
    let fresh_query = def.freshness.map(|(q, _)| q);
    // Per query: the one value each cluster's series agree on.
    let mut values: Vec<BTreeMap<String, f64>> = Vec::with_capacity(def.queries.len());
    for (i, samples) in input.answers.iter().enumerate() {
        let what = super::what(def, i);
        values.push(claims(
            input.owner,
            &known,
            samples,
            fresh_query == Some(i),
            &what,
            &mut out,
        ));
    }
    // The fresh clusters, each with its value per rule.
    let mut fresh: Vec<(&str, Vec<Option<f64>>)> = Vec::new();
    for name in input.clusters {
        let unavailable = |reason: &str, message: String| Outcome::Unavailable {
            reason: reason.to_owned(),
            message,
        };
        if let Some(why) = out.conflicts.get(name) {
            let o = unavailable(REASON_CONFLICT, why.clone());
            out.computed.insert(name.clone(), o);
            continue;
        }
        if let Some(warning) = input.partial.get(name) {
            out.missing += 1;
            let o = unavailable(
                REASON_NO_METRICS,
                format!("the query API answered without this cluster's store: {warning}"),
            );
            out.computed.insert(name.clone(), o);
            continue;
        }
        if let Some((q, max_age)) = def.freshness {
            let limit = max_age.as_secs_f64();
            let stale = match values.get(q).and_then(|v| v.get(name)) {
                None => Some((
                    REASON_NO_METRICS,
                    "no sample time for this cluster".to_owned(),
                )),
                Some(t) if input.now - t > limit => Some((
                    REASON_STALE,
                    format!(
                        "the newest sample is {:.0}s old (limit {limit:.0}s)",
                        input.now - t
                    ),
                )),
                Some(_) => None,
            };
            if let Some((reason, message)) = stale {
                out.missing += 1;
                out.computed
                    .insert(name.clone(), unavailable(reason, message));
                continue;
            }
        }
        let row = def
            .rules
            .iter()
            .map(|r| values.get(r.query).and_then(|v| v.get(name)).copied())
            .collect();
        fresh.push((name, row));
    }
    // Each rule's scores over the fresh clusters.
    let mut columns: Vec<Vec<Option<i32>>> = Vec::with_capacity(def.rules.len());
    for (j, rule) in def.rules.iter().enumerate() {
        let column: Vec<Option<f64>> = fresh.iter().map(|(_, row)| row[j]).collect();
        columns.push(normalise(rule.norm, &column));
    }
    for (i, (name, _)) in fresh.iter().enumerate() {
        let mut scores = Scores::new();
        for (j, rule) in def.rules.iter().enumerate() {
            if let Some(v) = columns[j][i].or(rule.missing) {
                scores.insert(rule.name.clone(), i64::from(v))?;
            }
        }
        if scores.is_empty() {
            out.missing += 1;
            out.computed.insert(
                *name,
                Outcome::Unavailable {
                    reason: REASON_NO_METRICS.to_owned(),
                    message: "no series for this cluster".to_owned(),
                },
            );
        } else {
            out.scored += 1;
            out.computed.insert(*name, Outcome::Scores(scores));
        }
    }
    Ok(out)
}

/// One answer's value per cluster. Equal claims are one; disagreeing claims, or a series
/// marked with [`CONFLICT_LABEL`], record a conflict. The freshness answer is no claim about
/// the cluster, only how recent its data is: its largest value counts.
fn claims(
    owner: Owner<'_>,
    known: &BTreeSet<&str>,
    samples: &[Sample],
    freshness: bool,
    what: &str,
    out: &mut Evaluation,
) -> BTreeMap<String, f64> {
    let mut seen: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for s in samples {
        let cluster = match owner {
            Owner::Label(label) => match s.labels.get(label).filter(|c| !c.is_empty()) {
                Some(c) => c.as_str(),
                None => {
                    *out.dropped.entry(Dropped::Unlabelled).or_insert(0) += 1;
                    continue;
                }
            },
            Owner::Own(own) => own,
        };
        if !known.contains(cluster) {
            *out.dropped.entry(Dropped::UnknownCluster).or_insert(0) += 1;
            continue;
        }
        if let Some(kind) = s.labels.get(CONFLICT_LABEL) {
            out.conflicts
                .entry(cluster.to_owned())
                .or_insert_with(|| marked(owner, s, kind, what));
            continue;
        }
        if !s.value.is_finite() {
            *out.dropped.entry(Dropped::BadValue).or_insert(0) += 1;
            continue;
        }
        // -0 and 0 are one claim.
        seen.entry(cluster.to_owned())
            .or_default()
            .insert((s.value + 0.0).to_bits());
    }
    let mut values = BTreeMap::new();
    for (cluster, bits) in seen {
        let distinct: Vec<f64> = bits.into_iter().map(f64::from_bits).collect();
        match distinct.as_slice() {
            [v] => {
                values.insert(cluster, *v);
            }
            many if freshness => {
                values.insert(cluster, many.iter().copied().fold(f64::MIN, f64::max));
            }
            many => {
                let shown: Vec<String> =
                    many.iter().take(VALUES_SHOWN).map(f64::to_string).collect();
                out.conflicts.entry(cluster).or_insert_with(|| {
                    format!(
                        "series under this cluster's name claim different values for {what} ({}); no scores until they agree",
                        shown.join(", ")
                    )
                });
            }
        }
    }
    values
}

/// The message of a series an expression's conflict part marked: what disagrees, and where
/// (the marker's other labels, e.g. the node; at most three, each cut to [`SHOWN`]: anyone
/// publishing under this name chose them).
fn marked(owner: Owner<'_>, s: &Sample, kind: &str, what: &str) -> String {
    let skip = |k: &str| k == CONFLICT_LABEL || matches!(owner, Owner::Label(l) if l == k);
    let at: Vec<String> = s
        .labels
        .iter()
        .filter(|(k, _)| !skip(k))
        .take(3)
        .map(|(k, v)| format!("{}={:?}", shown(k), shown(v)))
        .collect();
    let at = if at.is_empty() {
        String::new()
    } else {
        format!(" at {}", at.join(", "))
    };
    format!(
        "series under this cluster's name disagree on {:?}{at} (query of {what}); no scores until they agree",
        shown(kind)
    )
}

/// One rule's column of values as scores (`None` stays `None`).
pub fn normalise(norm: Norm, column: &[Option<f64>]) -> Vec<Option<i32>> {
    let signed = |d: Direction, v: f64| match d {
        Direction::HigherIsBetter => v,
        Direction::LowerIsBetter => -v,
    };
    match norm {
        Norm::Range(n, d) => {
            // Lower is better: the bounds mirrored, so `min` scores 100 and `max` -100.
            let n = match d {
                Direction::HigherIsBetter => n,
                Direction::LowerIsBetter => Normaliser::new(-n.max(), -n.min()).unwrap_or(n),
            };
            column
                .iter()
                .map(|v| v.map(|v| n.normalise(signed(d, v))))
                .collect()
        }
        Norm::MinMax(d) => fleet_relative(
            &column
                .iter()
                .map(|v| v.map(|v| signed(d, v)))
                .collect::<Vec<_>>(),
        ),
        Norm::Rank(d) => {
            let mut distinct: Vec<f64> = column.iter().flatten().map(|v| signed(d, *v)).collect();
            distinct.sort_by(|a, b| b.total_cmp(a));
            distinct.dedup();
            let last = distinct.len().saturating_sub(1);
            column
                .iter()
                .map(|v| {
                    let v = signed(d, (*v)?);
                    let pos = distinct.iter().position(|x| *x == v)?;
                    Some(if last == 0 {
                        100
                    } else {
                        (100.0 - 200.0 * pos as f64 / last as f64).round() as i32
                    })
                })
                .collect()
        }
    }
}

/// The first [`SHOWN`] characters.
pub fn shown(s: &str) -> String {
    s.chars().take(SHOWN).collect()
}
