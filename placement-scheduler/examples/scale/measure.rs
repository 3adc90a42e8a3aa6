//! What the harness reads at a point in time (processes' CPU from /proc, the controller's and
//! the apiserver's counters) and what changed between two points.

use super::*;

/// Everything read at one moment.
pub(crate) struct Point {
    pub(crate) at: Instant,
    pub(crate) controller_cpu: Duration,
    pub(crate) apiserver_cpu: Duration,
    pub(crate) etcd_cpu: Duration,
    pub(crate) harness_cpu: Duration,
    /// Busy CPU time of the whole machine (all processes).
    pub(crate) machine_cpu: Duration,
    pub(crate) controller: Vec<Sample>,
    pub(crate) apiserver: Vec<Sample>,
    pub(crate) harness: BTreeMap<(String, String), f64>,
}

impl Point {
    pub(crate) async fn take(hub: &Hub, ctl: &Controller) -> Result<Point> {
        let controller = ctl.metrics().await?;
        let apiserver = hub.apiserver_metrics().await?;
        // The harness's GET /metrics is not an OCM request; nothing to subtract for it.
        let [etcd, apiserver_pid] = hub.cp.pids();
        Ok(Point {
            at: Instant::now(),
            controller_cpu: procfs::cpu_time(ctl.pid),
            apiserver_cpu: procfs::cpu_time(apiserver_pid),
            etcd_cpu: procfs::cpu_time(etcd),
            harness_cpu: procfs::cpu_time(std::process::id()),
            machine_cpu: procfs::machine_busy(),
            controller,
            apiserver,
            harness: hub.harness_requests(),
        })
    }
}

/// What happened between two points.
pub(crate) struct Window {
    pub(crate) wall: Duration,
    pub(crate) controller_cpu: Duration,
    pub(crate) apiserver_cpu: Duration,
    pub(crate) etcd_cpu: Duration,
    pub(crate) harness_cpu: Duration,
    /// CPU used by every other process on the machine (a busy neighbour skews the figures).
    pub(crate) other_cpu: Duration,
    /// Controller's own counters: writes by (VERB, resource).
    pub(crate) writes: BTreeMap<(String, String), f64>,
    pub(crate) write_failures: f64,
    /// Every request through the controller's client (its rate limiter's permits).
    pub(crate) requests: f64,
    pub(crate) passes: f64,
    pub(crate) scheduling_seconds: f64,
    /// Apiserver's requests by (VERB, resource), the harness's own subtracted.
    pub(crate) apiserver: BTreeMap<(String, String), f64>,
    /// The harness's own requests in the window.
    pub(crate) harness: BTreeMap<(String, String), f64>,
}

impl Window {
    pub(crate) fn between(a: &Point, b: &Point) -> Window {
        let c = |p: &Point, name: &str| scrape::sum(&p.controller, name, |_| true);
        let failed = |p: &Point| {
            scrape::sum(&p.controller, "placement_api_writes_total", |l| {
                l.get("result").is_some_and(|r| r != "success")
            })
        };
        let harness = scrape::delta(&b.harness, &a.harness);
        let mut apiserver = scrape::delta(
            &apiserver_requests(&b.apiserver),
            &apiserver_requests(&a.apiserver),
        );
        for (k, v) in &harness {
            if let Some(x) = apiserver.get_mut(k) {
                *x -= v;
            }
        }
        apiserver.retain(|_, v| *v != 0.0);
        Window {
            wall: b.at - a.at,
            controller_cpu: b.controller_cpu.saturating_sub(a.controller_cpu),
            apiserver_cpu: b.apiserver_cpu.saturating_sub(a.apiserver_cpu),
            etcd_cpu: b.etcd_cpu.saturating_sub(a.etcd_cpu),
            harness_cpu: b.harness_cpu.saturating_sub(a.harness_cpu),
            other_cpu: b
                .machine_cpu
                .saturating_sub(a.machine_cpu)
                .saturating_sub(b.controller_cpu.saturating_sub(a.controller_cpu))
                .saturating_sub(b.apiserver_cpu.saturating_sub(a.apiserver_cpu))
                .saturating_sub(b.etcd_cpu.saturating_sub(a.etcd_cpu))
                .saturating_sub(b.harness_cpu.saturating_sub(a.harness_cpu)),
            writes: scrape::delta(
                &controller_writes(&b.controller),
                &controller_writes(&a.controller),
            ),
            write_failures: failed(b) - failed(a),
            requests: c(b, "kube_client_rate_limiter_permits_total")
                - c(a, "kube_client_rate_limiter_permits_total"),
            // Ours or upstream's (each process exports one of them).
            passes: c(b, "placement_scheduling_duration_seconds_count")
                - c(a, "placement_scheduling_duration_seconds_count")
                + c(b, upstream::PASSES)
                - c(a, upstream::PASSES),
            scheduling_seconds: c(b, "placement_scheduling_duration_seconds_sum")
                - c(a, "placement_scheduling_duration_seconds_sum"),
            apiserver,
            harness,
        }
    }

    pub(crate) fn cpu_share(&self) -> f64 {
        pct(self.controller_cpu, self.wall)
    }

    pub(crate) fn total_writes(&self) -> f64 {
        self.writes.values().sum()
    }
}

pub(crate) fn pct(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        100.0 * part.as_secs_f64() / whole.as_secs_f64()
    }
}

/// Controller writes by (VERB, resource[/subresource]), the apiserver's spelling.
pub(crate) fn controller_writes(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == "placement_api_writes_total")
    {
        // The controller counts kube's calls (create, patch, delete); the apiserver's verbs.
        let verb = match s.labels.get("verb").map(String::as_str).unwrap_or_default() {
            "create" => "POST".to_owned(),
            other => other.to_uppercase(),
        };
        let resource = s.labels.get("resource").cloned().unwrap_or_default();
        *out.entry((verb, resource)).or_insert(0.0) += s.value;
    }
    out
}

/// Apiserver requests for the OCM and events APIs by (VERB, resource[/subresource]).
pub(crate) fn apiserver_requests(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    scrape::requests_by_verb(samples, |group, resource| {
        // Core events too: a controller on client-go's older recorder writes those.
        group == "cluster.open-cluster-management.io"
            || group == "events.k8s.io"
            || (group.is_empty() && resource == "events")
    })
}

/// Writes (POST, PUT, PATCH, DELETE) in a map by (VERB, resource).
pub(crate) fn api_writes(m: &BTreeMap<(String, String), f64>) -> f64 {
    m.iter()
        .filter(|((verb, _), _)| matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .map(|(_, v)| v)
        .sum()
}
