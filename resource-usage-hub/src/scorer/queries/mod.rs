//! The PromQL the scorer runs, one query per metric for the whole fleet (over
//! kube-state-metrics v2's `kube_node_status_allocatable` and
//! `kube_pod_container_resource_requests`), and the arithmetic that turns their answers into
//! free amounts per cluster (sans IO).
//!
//! Templates name the series label that carries the ManagedCluster's name as `{{LABEL}}` and
//! the lookback as `{{WINDOW}}`: ACM's metrics collector remote-writes every 5 minutes by
//! default, so each selector is wrapped in `last_over_time(...[window])` (default 10m) and a
//! cluster is not missed between pushes.
//!
//! Identity: the cluster label is only as trustworthy as whoever sets it. When the spoke's own
//! Prometheus sets it, one spoke can publish series under another cluster's name. The queries
//! never pick one of several disagreeing claims (no `max` over series that differ): two series
//! for the same (cluster, node) or the same pod's container with different values reach us as
//! distinct answers (`count_values`) or as a `scorer_conflict` marker, and [`assemble`] withholds
//! that cluster's scores.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use thiserror::Error;

use score_provider::prom::Sample;

/// The label `count_values` writes each distinct value into: a series that carries it claims
/// that value (its sample value is how many series made the claim).
pub const VALUE_LABEL: &str = "scorer_value";
/// The label of a query's conflict part: a series that carries it says that series under this
/// cluster's name disagree (its value says `node_state`, `pod_requests` or `pod_phase`).
/// Conflict parts test `stddev by (key) > 0`: exactly 0 when every series of a key holds the
/// same value (Prometheus' running update adds nothing then), and as cheap as one more
/// aggregation (`count_values` over every container cost about twice as much, measured).
pub const CONFLICT_LABEL: &str = "scorer_conflict";

/// Allocatable of schedulable, Ready nodes, by cluster and node (KSM v2 series, all in ACM's
/// default allow-list). `count_values`, not `max` or `sum`: replicated series (an HA pair, two
/// KSMs, Thanos without dedup) make one claim, and series that disagree make two, which
/// [`assemble`] sees as a conflict instead of picking one. A node counts only when every
/// series agrees it is schedulable and Ready; the second part marks nodes whose
/// schedulability or readiness series disagree.
const ALLOCATABLE: &str = r#"count_values by ({{LABEL}}, node) ("scorer_value",
  last_over_time(kube_node_status_allocatable{resource="{{RESOURCE}}"}[{{WINDOW}}])
    and on ({{LABEL}}, node) (max by ({{LABEL}}, node) (last_over_time(kube_node_spec_unschedulable[{{WINDOW}}])) == 0)
    and on ({{LABEL}}, node) (min by ({{LABEL}}, node) (last_over_time(kube_node_status_condition{condition="Ready",status="true"}[{{WINDOW}}])) == 1)
)
or label_replace(
  stddev by ({{LABEL}}, node) (last_over_time(kube_node_spec_unschedulable[{{WINDOW}}])) > 0
  or stddev by ({{LABEL}}, node) (last_over_time(kube_node_status_condition{condition="Ready",status="true"}[{{WINDOW}}])) > 0,
  "scorer_conflict", "node_state", "", "")"#;

/// Requests by cluster and node. ACM does not forward `kube_pod_status_phase` by default, so
/// the default counts every pod KSM still reports (completed pods until they are deleted);
/// [`Queries::active_pods_only`] adds the phase filter when that series is forwarded. The
/// inner `max` only ever merges replicas that agree: the second part marks every node with a
/// container whose series disagree, and that withholds the cluster.
const REQUESTS: &str = r#"sum by ({{LABEL}}, node) (max by ({{LABEL}}, namespace, pod, container, node) (
  last_over_time(kube_pod_container_resource_requests{resource="{{RESOURCE}}"}[{{WINDOW}}]){{ACTIVE}}
))
or label_replace(
  count by ({{LABEL}}, node) (stddev by ({{LABEL}}, namespace, pod, container, node) (
    last_over_time(kube_pod_container_resource_requests{resource="{{RESOURCE}}"}[{{WINDOW}}])) > 0),
  "scorer_conflict", "pod_requests", "", ""){{ACTIVE_CONFLICT}}"#;

const ACTIVE_FILTER: &str = r#"
    and on ({{LABEL}}, namespace, pod) (min by ({{LABEL}}, namespace, pod) (last_over_time(kube_pod_status_phase{phase=~"Pending|Running"}[{{WINDOW}}])) == 1)"#;

const ACTIVE_CONFLICT: &str = r#"
or label_replace(
  count by ({{LABEL}}) (stddev by ({{LABEL}}, namespace, pod, phase) (
    last_over_time(kube_pod_status_phase{phase=~"Pending|Running"}[{{WINDOW}}])) > 0),
  "scorer_conflict", "pod_phase", "", "")"#;

/// The newest sample time (Unix seconds) per cluster: a subquery, since `timestamp()` of a
/// range function gives the evaluation time, not the sample's. `max` is right here: it is
/// no claim about the cluster, only how recent its data is.
const FRESHNESS: &str = r#"max by ({{LABEL}}) (
  max_over_time(timestamp(kube_node_status_allocatable{resource="cpu"})[{{WINDOW}}:{{STEP}}])
)"#;

/// A setting the queries cannot be built from.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum QueriesError {
    #[error(
        "--cluster-label {0:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not reserved)"
    )]
    Label(String),
}

/// What the scorer queries. Every query is a setting; the defaults work on the series ACM
/// observability forwards by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queries {
    /// The series label holding the ManagedCluster's name.
    pub label: String,
    /// The lookback of every selector (PromQL duration).
    pub window: String,
    /// The resolution of the freshness subquery (`{{STEP}}`): a new cluster shows up within
    /// one step.
    pub step: String,
    /// Requests of Pending and Running pods only (needs `kube_pod_status_phase`).
    pub active_pods_only: bool,
    /// By (label, node), in cores.
    pub cpu_allocatable: Option<String>,
    pub cpu_requests: Option<String>,
    /// By (label, node), in bytes.
    pub memory_allocatable: Option<String>,
    pub memory_requests: Option<String>,
    /// By label, Unix seconds of the newest sample.
    pub freshness: Option<String>,
    /// Optional usage-based headroom by label, as a fraction in [0, 1] (e.g.
    /// `1 - avg by (cluster) (instance:node_cpu_utilisation:rate1m)`).
    pub cpu_headroom: Option<String>,
    pub memory_headroom: Option<String>,
}

impl Default for Queries {
    fn default() -> Self {
        Self {
            label: "cluster".into(),
            window: "10m".into(),
            step: "1m".into(),
            active_pods_only: false,
            cpu_allocatable: None,
            cpu_requests: None,
            memory_allocatable: None,
            memory_requests: None,
            freshness: None,
            cpu_headroom: None,
            memory_headroom: None,
        }
    }
}

/// One query to run: what it measures and its PromQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub metric: Metric,
    pub promql: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    CpuAllocatable,
    CpuRequests,
    MemoryAllocatable,
    MemoryRequests,
    Freshness,
    CpuHeadroom,
    MemoryHeadroom,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::CpuAllocatable => "cpu_allocatable",
            Metric::CpuRequests => "cpu_requests",
            Metric::MemoryAllocatable => "memory_allocatable",
            Metric::MemoryRequests => "memory_requests",
            Metric::Freshness => "freshness",
            Metric::CpuHeadroom => "cpu_headroom",
            Metric::MemoryHeadroom => "memory_headroom",
        }
    }

    /// Answers by (cluster, node); the others are by cluster.
    fn by_node(self) -> bool {
        matches!(
            self,
            Metric::CpuAllocatable
                | Metric::CpuRequests
                | Metric::MemoryAllocatable
                | Metric::MemoryRequests
        )
    }
}

impl Queries {
    /// The cluster label must be a plain label name: it is pasted into every query, and the
    /// labels the queries write (`node`, [`VALUE_LABEL`], [`CONFLICT_LABEL`]) would shadow it.
    pub fn check(&self) -> Result<(), QueriesError> {
        let l = self.label.as_str();
        let plain = l
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain || l.starts_with("__") || [VALUE_LABEL, CONFLICT_LABEL, "node"].contains(&l) {
            return Err(QueriesError::Label(self.label.clone()));
        }
        Ok(())
    }

    /// The queries, with the label and window filled in.
    pub fn build(&self) -> Vec<Query> {
        let (active, active_conflict) = if self.active_pods_only {
            (ACTIVE_FILTER, ACTIVE_CONFLICT)
        } else {
            ("", "")
        };
        let fill = |t: &str, resource: &str| {
            t.replace("{{ACTIVE}}", active)
                .replace("{{ACTIVE_CONFLICT}}", active_conflict)
                .replace("{{RESOURCE}}", resource)
                .replace("{{LABEL}}", &self.label)
                .replace("{{WINDOW}}", &self.window)
                .replace("{{STEP}}", &self.step)
        };
        let or = |custom: &Option<String>, default: &str, resource: &str| {
            fill(custom.as_deref().unwrap_or(default), resource)
        };
        let mut out = vec![
            Query {
                metric: Metric::CpuAllocatable,
                promql: or(&self.cpu_allocatable, ALLOCATABLE, "cpu"),
            },
            Query {
                metric: Metric::CpuRequests,
                promql: or(&self.cpu_requests, REQUESTS, "cpu"),
            },
            Query {
                metric: Metric::MemoryAllocatable,
                promql: or(&self.memory_allocatable, ALLOCATABLE, "memory"),
            },
            Query {
                metric: Metric::MemoryRequests,
                promql: or(&self.memory_requests, REQUESTS, "memory"),
            },
            Query {
                metric: Metric::Freshness,
                promql: or(&self.freshness, FRESHNESS, "cpu"),
            },
        ];
        if let Some(q) = &self.cpu_headroom {
            out.push(Query {
                metric: Metric::CpuHeadroom,
                promql: fill(q, "cpu"),
            });
        }
        if let Some(q) = &self.memory_headroom {
            out.push(Query {
                metric: Metric::MemoryHeadroom,
                promql: fill(q, "memory"),
            });
        }
        out
    }
}

/// What the queries say about one cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterData {
    /// Free CPU (cores) over the counted nodes, and the freest node's.
    pub cpu: Option<(f64, f64)>,
    /// Free memory (bytes), the same way.
    pub memory: Option<(f64, f64)>,
    /// Unix seconds of the newest sample.
    pub newest: Option<f64>,
    pub cpu_headroom: Option<f64>,
    pub memory_headroom: Option<f64>,
}

/// Why a series was not used. A closed set: it labels a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dropped {
    /// No (or an empty) cluster label.
    Unlabelled,
    /// Its cluster is no accepted ManagedCluster: nobody the hub knows is speaking.
    UnknownCluster,
    /// NaN, ±Inf, or a claimed value that is no number.
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

/// Series under one cluster's name that disagree: the first found for that cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub metric: Metric,
    /// The node they disagree on, when the answer says (at most [`NODE_SHOWN`] characters:
    /// it comes from a series anyone under this name may have published).
    pub node: Option<String>,
    pub what: Disagreement,
}

/// At most this much of a node name from a series is repeated in a condition or a log line.
pub const NODE_SHOWN: usize = 63;

#[derive(Clone, Debug, PartialEq)]
pub enum Disagreement {
    /// The distinct values claimed (at most [`VALUES_SHOWN`] kept).
    Values(Vec<f64>),
    /// A query's conflict part: which series disagree (a closed set; unknown kinds are
    /// `other`).
    Marked(&'static str),
}

const VALUES_SHOWN: usize = 3;

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = match &self.node {
            Some(n) if !n.is_empty() => format!(" of node {n:?}"),
            _ => String::new(),
        };
        match &self.what {
            Disagreement::Values(v) => {
                let shown: Vec<String> = v.iter().map(f64::to_string).collect();
                write!(
                    f,
                    "series under this cluster's name claim different values for {}{at} ({})",
                    self.metric.name(),
                    shown.join(", ")
                )?;
            }
            Disagreement::Marked(kind) => write!(
                f,
                "series under this cluster's name disagree on {kind}{at} (query {})",
                self.metric.name()
            )?,
        }
        write!(f, "; no scores until they agree")
    }
}

/// What [`assemble`] makes of the answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assembled {
    /// Per known cluster without a conflict.
    pub clusters: BTreeMap<String, ClusterData>,
    /// Known clusters withheld, and why.
    pub conflicts: BTreeMap<String, Conflict>,
    /// Series not used, by why.
    pub dropped: BTreeMap<Dropped, u64>,
}

/// Per-cluster data from the answers (`label` names the cluster label), for the clusters
/// `known` accepts; other series are dropped and counted.
///
/// Every series is a claim about its cluster: several claims for the same (cluster, node)
/// (by-node answers) or the same cluster (by-cluster answers) that agree are one, claims that
/// disagree, or a series marked by a query's conflict part, withhold the cluster's scores for
/// this round (never one of them picked). A node counts when it has allocatable (the query
/// keeps schedulable, Ready nodes only); its free amount is its allocatable minus the
/// requests on it; pods bound to no counted node do not count (as the agent).
pub fn assemble(
    label: &str,
    answers: &BTreeMap<Metric, Vec<Sample>>,
    known: impl Fn(&str) -> bool,
) -> Assembled {
    let mut out = Assembled::default();
    let mut values: BTreeMap<Metric, BTreeMap<(String, String), f64>> = BTreeMap::new();
    for (&metric, samples) in answers {
        let claims = claims(label, metric, samples, &known, &mut out);
        values.insert(metric, claims);
    }
    let conflicts = &out.conflicts;
    let get = |m: Metric| -> BTreeMap<(String, String), f64> {
        values
            .get(&m)
            .into_iter()
            .flatten()
            .filter(|((c, _), _)| !conflicts.contains_key(c))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let free = |alloc: Metric, req: Metric| -> BTreeMap<String, (f64, f64)> {
        let requests = get(req);
        let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for ((cluster, node), a) in get(alloc) {
            let f = a - requests
                .get(&(cluster.clone(), node))
                .copied()
                .unwrap_or(0.0);
            let e = out.entry(cluster).or_insert((0.0, f64::NEG_INFINITY));
            e.0 += f;
            e.1 = e.1.max(f);
        }
        out
    };
    let by_cluster = |m: Metric| get(m).into_iter().map(|((c, _), v)| (c, v));
    let mut data: BTreeMap<String, ClusterData> = BTreeMap::new();
    for (c, v) in free(Metric::CpuAllocatable, Metric::CpuRequests) {
        data.entry(c).or_default().cpu = Some(v);
    }
    for (c, v) in free(Metric::MemoryAllocatable, Metric::MemoryRequests) {
        data.entry(c).or_default().memory = Some(v);
    }
    for (c, v) in by_cluster(Metric::Freshness) {
        data.entry(c).or_default().newest = Some(v);
    }
    for (c, v) in by_cluster(Metric::CpuHeadroom) {
        data.entry(c).or_default().cpu_headroom = Some(v);
    }
    for (c, v) in by_cluster(Metric::MemoryHeadroom) {
        data.entry(c).or_default().memory_headroom = Some(v);
    }
    out.clusters = data;
    out
}

/// One answer's claims by (cluster, node) (node "" for by-cluster answers); records drops and
/// conflicts in `out`.
fn claims(
    label: &str,
    metric: Metric,
    samples: &[Sample],
    known: &impl Fn(&str) -> bool,
    out: &mut Assembled,
) -> BTreeMap<(String, String), f64> {
    let mut drop = |why: Dropped| *out.dropped.entry(why).or_insert(0) += 1;
    // Distinct values by bit pattern (after -0 is made 0): equal claims are one.
    let mut seen: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
    let mut marked: Vec<(String, Conflict)> = Vec::new();
    for s in samples {
        let Some(cluster) = s.labels.get(label).filter(|c| !c.is_empty()) else {
            drop(Dropped::Unlabelled);
            continue;
        };
        if !known(cluster) {
            drop(Dropped::UnknownCluster);
            continue;
        }
        if let Some(kind) = s.labels.get(CONFLICT_LABEL) {
            marked.push((cluster.clone(), marked_conflict(metric, s, kind)));
            continue;
        }
        let value = match s.labels.get(VALUE_LABEL) {
            Some(v) => v.parse::<f64>().unwrap_or(f64::NAN),
            None => s.value,
        };
        if !value.is_finite() {
            drop(Dropped::BadValue);
            continue;
        }
        let node = if metric.by_node() {
            s.labels.get("node").cloned().unwrap_or_default()
        } else {
            String::new()
        };
        seen.entry((cluster.clone(), node))
            .or_default()
            .insert((value + 0.0).to_bits());
    }
    for (cluster, conflict) in marked {
        out.conflicts.entry(cluster).or_insert(conflict);
    }
    settle(metric, seen, out)
}

/// A series the query marked as a conflict (`kind`: which; a closed set).
fn marked_conflict(metric: Metric, s: &Sample, kind: &str) -> Conflict {
    let kind = match kind {
        "node_state" => "node_state",
        "pod_requests" => "pod_requests",
        "pod_phase" => "pod_phase",
        _ => "other",
    };
    Conflict {
        metric,
        node: s.labels.get("node").map(|n| shown(n)),
        what: Disagreement::Marked(kind),
    }
}

/// One value per (cluster, node) when every claim agrees; a cluster whose claims disagree
/// gets a conflict (its first, if it has one already) and no value.
fn settle(
    metric: Metric,
    seen: BTreeMap<(String, String), BTreeSet<u64>>,
    out: &mut Assembled,
) -> BTreeMap<(String, String), f64> {
    let mut claims = BTreeMap::new();
    for ((cluster, node), bits) in seen {
        let mut distinct = bits.into_iter().map(f64::from_bits);
        match (distinct.next(), distinct.len()) {
            (Some(v), 0) => {
                claims.insert((cluster, node), v);
            }
            (first, _) => {
                let node = metric.by_node().then(|| shown(&node));
                out.conflicts.entry(cluster).or_insert(Conflict {
                    metric,
                    node,
                    what: Disagreement::Values(
                        first
                            .into_iter()
                            .chain(distinct)
                            .take(VALUES_SHOWN)
                            .collect(),
                    ),
                });
            }
        }
    }
    claims
}

/// The first [`NODE_SHOWN`] characters.
fn shown(s: &str) -> String {
    s.chars().take(NODE_SHOWN).collect()
}

#[cfg(test)]
mod tests;
