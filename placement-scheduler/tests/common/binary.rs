//! The `placement-scheduler controller` binary as a test runs it: started against the shared
//! control plane, waited for until at rest, and the hub's write counters around it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use testenv::process::ChildProcess;
use testenv::scrape;

use super::{DEADLINE, Hub};

/// The controller binary as the control plane's admin (the kubeconfig in `dir`), for `hub`'s
/// namespace, with `extra` flags; its log is `dir/scheduler-<n>.log`. Returns the process and
/// its metrics address.
pub fn start(hub: &Hub, dir: &Path, n: u32, extra: &[&str]) -> (ChildProcess, SocketAddr) {
    let metrics: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .expect("a loopback address");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_placement-scheduler"));
    cmd.args([
        "controller",
        "--leader-elect=false",
        "--debug-bind-address",
        "",
    ])
    .arg("--kubeconfig")
    .arg(dir.join("kubeconfig"))
    .args(["--metrics-bind-address", &metrics.to_string()])
    .args(["--namespaces", &hub.ns])
    .args(extra);
    let child = ChildProcess::start(
        "the scheduler",
        cmd,
        &dir.join(format!("scheduler-{n}.log")),
    )
    .expect("starting the scheduler");
    (child, metrics)
}

/// What the binary's metrics say once it is at rest.
#[derive(Debug, Clone, PartialEq)]
pub struct AtRest {
    /// Passes made (`placement_schedules_total`).
    pub passes: f64,
    /// Successful writes by "verb resource" (`placement_api_writes_total`).
    pub writes: BTreeMap<String, f64>,
}

/// Waits until the binary is ready and at rest: it has made more than `after` passes, its
/// queue holds nothing ready, deferred or processing, and two readings a second apart show no
/// new pass or write.
pub async fn at_rest(metrics: SocketAddr, after: f64) -> AtRest {
    let read = || async move {
        let text = scrape::get(metrics).await.ok()?;
        let samples = scrape::parse(&text);
        let passes = scrape::sum(&samples, "placement_schedules_total", |_| true);
        let busy = scrape::sum(&samples, "placement_queue_depth", |l| {
            l.get("state").is_some_and(|s| s != "waiting")
        });
        let mut writes = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == "placement_api_writes_total")
        {
            if s.labels.get("result").map(String::as_str) == Some("success") {
                let key = format!(
                    "{} {}",
                    s.labels.get("verb").cloned().unwrap_or_default(),
                    s.labels.get("resource").cloned().unwrap_or_default()
                );
                *writes.entry(key).or_insert(0.0) += s.value;
            }
        }
        Some((AtRest { passes, writes }, busy))
    };
    let deadline = Instant::now() + DEADLINE * 3;
    let mut last: Option<AtRest> = None;
    loop {
        let ready = testenv::http::get(metrics, "/readyz").await.ok();
        if let (Some((200, _)), Some((now, busy))) = (ready, read().await) {
            if now.passes > after && busy == 0.0 && last.as_ref() == Some(&now) {
                return now;
            }
            last = Some(now);
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler was not ready and at rest within {:?}",
            DEADLINE * 3
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The apiserver's write requests on the objects a scheduler writes, by (verb, resource).
pub async fn hub_writes(hub: &Hub) -> BTreeMap<(String, String), f64> {
    let samples = scrape::apiserver(&hub.client)
        .await
        .expect("the apiserver's metrics");
    let mut writes = scrape::requests_by_verb(&samples, |_, resource| {
        matches!(resource, "placementdecisions" | "placements" | "events")
    });
    writes.retain(|(verb, _), _| matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"));
    writes
}

/// Starts the binary again (`n`, `extra` as [`start`]) and asserts that, once at rest, it has
/// written nothing: its own write counters, and the apiserver's since `before` (what
/// [`hub_writes`] read before the earlier process ended).
pub async fn restart_writes_nothing(
    hub: &Hub,
    dir: &Path,
    n: u32,
    extra: &[&str],
    before: &BTreeMap<(String, String), f64>,
) -> (ChildProcess, SocketAddr) {
    let (child, metrics) = start(hub, dir, n, extra);
    let written = at_rest(metrics, 0.0).await.writes;
    assert!(
        written.values().all(|n| *n == 0.0),
        "the restarted scheduler wrote {written:?}"
    );
    let after = hub_writes(hub).await;
    assert_eq!(
        scrape::delta(&after, before),
        BTreeMap::new(),
        "writes by verb on the hub across the restart"
    );
    (child, metrics)
}
