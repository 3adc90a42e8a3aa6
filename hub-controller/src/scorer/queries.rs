//! The PromQL the scorer runs, one query per metric for the whole fleet (score-addon.md §5.3),
//! and the arithmetic that turns their answers into free amounts per cluster (sans IO).
//!
//! Templates name the series label that carries the ManagedCluster's name as `{{LABEL}}` and
//! the lookback as `{{WINDOW}}`: ACM's metrics collector remote-writes every 5 minutes by
//! default, so each selector is wrapped in `last_over_time(...[window])` (default 10m) and a
//! cluster is not missed between pushes.

use std::collections::BTreeMap;

use super::prom::Sample;

/// Allocatable of schedulable, Ready nodes, by cluster and node (KSM v2 series, all in ACM's
/// default allow-list). `max`, not `sum`: replicated series (an HA pair, two KSMs, Thanos
/// without dedup) must not double a node.
const ALLOCATABLE: &str = r#"max by ({{LABEL}}, node) (
  last_over_time(kube_node_status_allocatable{resource="{{RESOURCE}}"}[{{WINDOW}}])
    and on ({{LABEL}}, node) (last_over_time(kube_node_spec_unschedulable[{{WINDOW}}]) == 0)
    and on ({{LABEL}}, node) (last_over_time(kube_node_status_condition{condition="Ready",status="true"}[{{WINDOW}}]) == 1)
)"#;

/// Requests by cluster and node. ACM does not forward `kube_pod_status_phase` by default, so
/// the default counts every pod KSM still reports (completed pods until they are deleted);
/// [`Queries::active_pods_only`] adds the phase filter when that series is forwarded.
const REQUESTS: &str = r#"sum by ({{LABEL}}, node) (max by ({{LABEL}}, namespace, pod, container, node) (
  last_over_time(kube_pod_container_resource_requests{resource="{{RESOURCE}}"}[{{WINDOW}}]){{ACTIVE}}
))"#;

const ACTIVE_FILTER: &str = r#"
    and on ({{LABEL}}, namespace, pod) (last_over_time(kube_pod_status_phase{phase=~"Pending|Running"}[{{WINDOW}}]) == 1)"#;

/// The newest sample time (Unix seconds) per cluster: a subquery, since `timestamp()` of a
/// range function gives the evaluation time, not the sample's.
const FRESHNESS: &str = r#"max by ({{LABEL}}) (
  max_over_time(timestamp(kube_node_status_allocatable{resource="cpu"})[{{WINDOW}}:{{STEP}}])
)"#;

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
}

impl Queries {
    /// The queries, with the label and window filled in.
    pub fn build(&self) -> Vec<Query> {
        let active = if self.active_pods_only {
            ACTIVE_FILTER
        } else {
            ""
        };
        let fill = |t: &str, resource: &str| {
            t.replace("{{ACTIVE}}", active)
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

/// Per-cluster data from the answers (`label` names the cluster label). A node counts when
/// it has allocatable (the query keeps schedulable, Ready nodes only); its free amount is its
/// allocatable minus the requests on it; pods bound to no counted node do not count (as the
/// agent). Samples without the cluster label, or with a non-finite value, are ignored.
pub fn assemble(
    label: &str,
    answers: &BTreeMap<Metric, Vec<Sample>>,
) -> BTreeMap<String, ClusterData> {
    let by_node = |m: Metric| -> BTreeMap<(String, String), f64> {
        let mut out = BTreeMap::new();
        for s in answers.get(&m).into_iter().flatten() {
            let (Some(c), true) = (s.labels.get(label), s.value.is_finite()) else {
                continue;
            };
            let node = s.labels.get("node").cloned().unwrap_or_default();
            *out.entry((c.clone(), node)).or_insert(0.0) += s.value;
        }
        out
    };
    let by_cluster = |m: Metric| -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in answers.get(&m).into_iter().flatten() {
            if let (Some(c), true) = (s.labels.get(label), s.value.is_finite()) {
                out.insert(c.clone(), s.value);
            }
        }
        out
    };
    let free = |alloc: Metric, req: Metric| -> BTreeMap<String, (f64, f64)> {
        let requests = by_node(req);
        let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for ((cluster, node), a) in by_node(alloc) {
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
    let mut out: BTreeMap<String, ClusterData> = BTreeMap::new();
    for (c, v) in free(Metric::CpuAllocatable, Metric::CpuRequests) {
        out.entry(c).or_default().cpu = Some(v);
    }
    for (c, v) in free(Metric::MemoryAllocatable, Metric::MemoryRequests) {
        out.entry(c).or_default().memory = Some(v);
    }
    for (c, v) in by_cluster(Metric::Freshness) {
        out.entry(c).or_default().newest = Some(v);
    }
    for (c, v) in by_cluster(Metric::CpuHeadroom) {
        out.entry(c).or_default().cpu_headroom = Some(v);
    }
    for (c, v) in by_cluster(Metric::MemoryHeadroom) {
        out.entry(c).or_default().memory_headroom = Some(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            value,
        }
    }

    #[test]
    fn templates_are_filled() {
        let q = Queries {
            label: "cluster_name".into(),
            window: "15m".into(),
            active_pods_only: true,
            cpu_headroom: Some("1 - avg by ({{LABEL}}) (x[{{WINDOW}}])".into()),
            ..Queries::default()
        };
        let built = q.build();
        assert_eq!(built.len(), 6);
        for b in &built {
            assert!(!b.promql.contains("{{"), "{}", b.promql);
        }
        assert!(built[0].promql.contains(r#"resource="cpu""#));
        assert!(built[0].promql.contains("max by (cluster_name, node)"));
        assert!(built[1].promql.contains(
            "sum by (cluster_name, node) (max by (cluster_name, namespace, pod, container, node)"
        ));
        assert!(built[2].promql.contains(r#"resource="memory""#));
        assert!(built[1].promql.contains("kube_pod_status_phase"));
        assert!(
            !Queries::default().build()[1]
                .promql
                .contains("kube_pod_status_phase")
        );
        assert_eq!(built[5].promql, "1 - avg by (cluster_name) (x[15m])");
    }

    #[test]
    fn free_is_allocatable_minus_requests_per_counted_node() {
        let answers = BTreeMap::from([
            (
                Metric::CpuAllocatable,
                vec![
                    s(&[("cluster", "a"), ("node", "n1")], 8.0),
                    s(&[("cluster", "a"), ("node", "n2")], 4.0),
                    s(&[("cluster", "b"), ("node", "m1")], 2.0),
                    s(&[("node", "orphan")], 100.0),
                    s(&[("cluster", "c"), ("node", "x")], f64::NAN),
                ],
            ),
            (
                Metric::CpuRequests,
                vec![
                    s(&[("cluster", "a"), ("node", "n1")], 7.5),
                    s(&[("cluster", "a"), ("node", "n2")], 1.0),
                    // Pending (no node) and on a cordoned node (not counted): not subtracted.
                    s(&[("cluster", "a"), ("node", "")], 50.0),
                    s(&[("cluster", "a"), ("node", "cordoned")], 50.0),
                    s(&[("cluster", "b"), ("node", "m1")], 3.0),
                ],
            ),
            (
                Metric::Freshness,
                vec![
                    s(&[("cluster", "a")], 1000.0),
                    s(&[("cluster", "d")], 900.0),
                ],
            ),
        ]);
        let got = assemble("cluster", &answers);
        assert_eq!(got["a"].cpu, Some((3.5, 3.0)));
        assert_eq!(got["b"].cpu, Some((-1.0, -1.0)), "overcommitted");
        assert_eq!(got["a"].memory, None);
        assert_eq!(got["a"].newest, Some(1000.0));
        assert_eq!(got["d"].cpu, None);
        assert!(!got.contains_key("c"), "NaN is no data");
    }
}
