//! The hub scorer against a real Thanos (built by tests/thanos/build.sh): per cluster a
//! Prometheus with `external_labels {cluster, replica}` scraping kube-state-metrics series that
//! carry no `cluster` label, its sidecar, and Thanos Query over the sidecars with
//! `--query.replica-label=replica`; cluster 1 is an HA pair. Scores are what the data says, the
//! pair is deduplicated, and a dead store (c3's sidecar and c4's Prometheus, 40 s, at once)
//! never blinds the fleet: every other cluster keeps being renewed, each missing one is
//! reported and not zeroed, and it recovers once its store is back.
//!
//! Both of Query's endpoint modes are checked in the one outage window: each mode has its own
//! Query over the same stores and its own scorer writing a score object of its own name, so
//! every check reads what that mode's scorer wrote from what that mode's Query answered. One
//! window instead of one per mode and fault keeps this binary's run short.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::scores::{
    Process, builtin_definition, condition, create_cluster, metric, score_named, scores_of,
    valid_until,
};
use kube::Client;
use ocm_api::AddOnPlacementScore;
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::{RESOURCE_USAGE_SCORE, names};
use testenv::eventually;
use testenv::prometheus::Exporter;
use testenv::thanos::{EndpointMode, Query, Store};

const DEADLINE: Duration = Duration::from_secs(90);
/// How long each store stays dead: four score lifetimes, so that a cluster the scorer failed
/// to renew would show it.
const OUTAGE: Duration = Duration::from_secs(40);
/// The scorer's period and score lifetime in this test: short, so that a renewal (or its
/// absence) shows within seconds, with room for a loaded machine.
const REFRESH: &str = "2s";
const TTL: &str = "10s";
const GI: f64 = 1024.0 * 1024.0 * 1024.0;

/// One cluster as its kube-state-metrics reports it: nodes (cpu, memory GiB) and one pod's
/// requests on the first node. No `cluster` label: the cluster's Prometheus adds it.
struct Cluster {
    name: String,
    nodes: Vec<(f64, f64)>,
    pod: (f64, f64),
}

impl Cluster {
    fn exposition(&self) -> String {
        let mut out = String::new();
        for (i, (cpu, mem)) in self.nodes.iter().enumerate() {
            let n = format!("n{i}");
            out += &format!(
                "kube_node_status_allocatable{{node=\"{n}\",resource=\"cpu\",unit=\"core\"}} {cpu}\n"
            );
            out += &format!(
                "kube_node_status_allocatable{{node=\"{n}\",resource=\"memory\",unit=\"byte\"}} {}\n",
                mem * GI
            );
            out += &format!("kube_node_spec_unschedulable{{node=\"{n}\"}} 0\n");
            out += &format!(
                "kube_node_status_condition{{node=\"{n}\",condition=\"Ready\",status=\"true\"}} 1\n"
            );
        }
        for (resource, unit, v) in [
            ("cpu", "core", self.pod.0),
            ("memory", "byte", self.pod.1 * GI),
        ] {
            out += &format!(
                "kube_pod_container_resource_requests{{namespace=\"apps\",pod=\"p\",container=\"main\",node=\"n0\",resource=\"{resource}\",unit=\"{unit}\"}} {v}\n"
            );
        }
        out
    }

    /// The agent's formula with the test's ranges (0..32 cores, 0..128 GiB).
    fn expected(&self) -> BTreeMap<String, i32> {
        let cpu = Normaliser::new(0.0, 32.0).expect("range");
        let mem = Normaliser::new(0.0, 128.0 * GI).expect("range");
        let free: Vec<(f64, f64)> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, (c, m))| {
                let (pc, pm) = if i == 0 { self.pod } else { (0.0, 0.0) };
                (c - pc, (m - pm) * GI)
            })
            .collect();
        let cc: f64 = free.iter().map(|f| f.0).sum();
        let cn = free.iter().map(|f| f.0).fold(f64::MIN, f64::max);
        let mc: f64 = free.iter().map(|f| f.1).sum();
        let mn = free.iter().map(|f| f.1).fold(f64::MIN, f64::max);
        [
            (names::CPU_CLUSTER, cpu.normalise(cc)),
            (names::CPU, cpu.normalise(cc)),
            (names::CPU_NODE, cpu.normalise(cn)),
            (names::MEM_CLUSTER, mem.normalise(mc)),
            (names::MEM, mem.normalise(mc)),
            (names::MEM_NODE, mem.normalise(mn)),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect()
    }

    /// The name's last part (`c1`), for timelines.
    fn short(&self) -> &str {
        self.name.rsplit('-').next().unwrap_or_default()
    }
}

/// The value of `count(<selector>)` from Query, with `dedup` as given.
async fn count(query: SocketAddr, selector: &str, dedup: bool) -> Option<f64> {
    let q: String = format!("count({selector})")
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let (status, body) = testenv::http::get(
        query,
        &format!("/api/v1/query?query={q}&dedup={dedup}&partial_response=false"),
    )
    .await
    .ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    if status != 200 {
        return None;
    }
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Which store goes away.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Sidecar,
    Prometheus,
}

/// A single-Prometheus cluster whose store suffers `fault`.
struct Victim {
    cluster: usize,
    fault: Fault,
    store: Store,
}

impl Victim {
    fn kill(&mut self) {
        match self.fault {
            Fault::Sidecar => self.store.stop_sidecar(),
            Fault::Prometheus => self.store.stop_prometheus(),
        }
    }

    /// Starts what was killed again; when it was ready.
    async fn revive(&mut self) -> (jiff::Timestamp, Instant) {
        match self.fault {
            Fault::Sidecar => self
                .store
                .start_sidecar_again()
                .await
                .expect("sidecar back"),
            Fault::Prometheus => self
                .store
                .start_prometheus_again()
                .await
                .expect("prometheus back"),
        }
        (jiff::Timestamp::now(), Instant::now())
    }
}

/// One endpoint mode under test: its Query over every store and its scorer, which writes
/// score objects named `score_name` (the modes' scorers never write the same object).
struct Mode {
    mode: EndpointMode,
    score_name: String,
    query: Query,
    port: u16,
    _scorer: Process,
}

impl Mode {
    async fn start(
        client: &Client,
        mode: EndpointMode,
        score_name: &str,
        endpoints: &[SocketAddr],
        kubeconfig: &Path,
        dir: &Path,
    ) -> Mode {
        let query = Query::start(endpoints, mode).await.expect("query");
        let port = testenv::free_port();
        // The chart's built-in definition, refreshed every REFRESH (the flag's default).
        let definition = builtin_definition(
            client,
            score_name,
            score_name,
            REFRESH,
            "1m",
            "20s",
            Some(("32", "128Gi")),
        )
        .await;
        let scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=false",
                &format!("--refresh-period={REFRESH}"),
                &format!("--score-ttl={TTL}"),
                "--debounce=200ms",
                "--prometheus-timeout=3s",
                "--prometheus-attempts=1",
            ])
            .args(&definition)
            .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", query.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join(format!("scorer-{mode:?}.log"))).expect("log"),
            ))
            .spawn()
            .expect("scorer");
        Mode {
            mode,
            score_name: score_name.to_owned(),
            query,
            port,
            _scorer: Process(scorer),
        }
    }

    /// This mode's score object for `cluster`.
    async fn score(&self, client: &Client, cluster: &str) -> Option<AddOnPlacementScore> {
        score_named(client, cluster, &self.score_name).await
    }

    /// Every cluster's scores are what its data says, through this mode's Query, and the HA
    /// pair (`clusters[0]`) is deduplicated.
    async fn converges(&self, client: &Client, clusters: &[Cluster]) {
        let mode = self.mode;
        for c in clusters {
            let want = c.expected();
            eventually(
                &format!("{mode:?}: the scores of {}", c.name),
                DEADLINE,
                || async {
                    self.score(client, &c.name).await.filter(|s| {
                        scores_of(s) == want && condition(s).is_some_and(|(s, _)| s == "True")
                    })
                },
            )
            .await;
        }
        // The HA pair: two copies of each series, one after dedup.
        let pair = format!(
            "kube_node_status_allocatable{{cluster=\"{}\",resource=\"cpu\"}}",
            clusters[0].name
        );
        let addr = self.query.addr();
        let deduped = eventually(
            &format!("{mode:?}: the pair's series through Query"),
            DEADLINE,
            || async {
                let raw = count(addr, &pair, false).await?;
                let one = count(addr, &pair, true).await?;
                (raw == 4.0).then_some(one)
            },
        )
        .await;
        assert_eq!(deduped, 2.0, "{mode:?}: dedup collapses the HA pair");
    }

    /// Watches the outage that started at `down` / `t0` until [`OUTAGE`] has passed: the
    /// victims' scores are kept and reported missing, every other cluster keeps being renewed.
    /// `kept` holds each victim's scores from before the outage. Returns the renewal timeline.
    async fn rides_out(
        &self,
        client: &Client,
        clusters: &[Cluster],
        victims: &[(usize, Fault)],
        kept: &BTreeMap<usize, BTreeMap<String, i32>>,
        down: jiff::Timestamp,
        t0: Instant,
    ) -> Vec<String> {
        let mode = self.mode;
        let fault_of = |i: usize| victims.iter().find(|v| v.0 == i).map(|v| v.1);
        let mut timeline: Vec<String> = Vec::new();
        let mut last: BTreeMap<usize, Option<jiff::Timestamp>> = BTreeMap::new();
        let mut reported: BTreeMap<usize, bool> = victims.iter().map(|v| (v.0, false)).collect();
        while t0.elapsed() < OUTAGE {
            let now = jiff::Timestamp::now();
            for (i, c) in clusters.iter().enumerate() {
                let Some(s) = self.score(client, &c.name).await else {
                    continue;
                };
                let vu = valid_until(&s);
                if last.get(&i) != Some(&vu) {
                    timeline.push(format!(
                        "  +{:>5.1}s {}: validUntil {} ({:?})",
                        t0.elapsed().as_secs_f64(),
                        c.short(),
                        vu.map(|v| v.to_string()).unwrap_or_default(),
                        condition(&s).map(|c| c.1).unwrap_or_default()
                    ));
                    last.insert(i, vu);
                }
                if let Some(fault) = fault_of(i) {
                    // Reported missing, and its scores never zeroed or changed.
                    assert_eq!(
                        Some(&scores_of(&s)),
                        kept.get(&i),
                        "{mode:?}/{fault:?}: the missing cluster's scores are kept"
                    );
                    let no_metrics =
                        condition(&s).is_some_and(|(st, r)| st == "False" && r == "NoMetrics");
                    if let Some(r) = reported.get_mut(&i) {
                        *r |= no_metrics;
                    }
                } else {
                    // Never lapses: renewed within its lifetime all along.
                    assert!(
                        vu.is_some_and(|v| v > now),
                        "{mode:?}/{victims:?}: {} was not renewed during the outage; timeline:\n{}",
                        c.name,
                        timeline.join("\n")
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let end = jiff::Timestamp::now();
        for (i, c) in clusters.iter().enumerate() {
            if fault_of(i).is_some() {
                continue;
            }
            let s = self.score(client, &c.name).await.expect("score");
            assert!(
                valid_until(&s).is_some_and(|v| v > end),
                "{mode:?}/{victims:?}: {} renewed at the end of the outage",
                c.name
            );
            assert_eq!(scores_of(&s), c.expected(), "{}", c.name);
        }
        for &(i, fault) in victims {
            assert!(
                reported.get(&i).copied().unwrap_or_default(),
                "{mode:?}/{fault:?}: the missing cluster {} reported NoMetrics; timeline:\n{}",
                clusters[i].name,
                timeline.join("\n")
            );
        }
        // Every victim is stale at once (each fault alone made one).
        let stale = metric(self.port, "scorer_stale_clusters").await;
        assert!(
            stale >= victims.len() as f64,
            "{mode:?}: {stale} stale clusters with {victims:?}"
        );
        for &(i, fault) in victims {
            let s = self.score(client, &clusters[i].name).await.expect("score");
            let victim_until = valid_until(&s);
            assert!(
                victim_until.is_some_and(|v| v < down + jiff::SignedDuration::from_secs(12)),
                "{mode:?}/{fault:?}: the missing cluster's score is not renewed: {victim_until:?}"
            );
        }
        timeline
    }

    /// The victim `cluster`, whose store was back at `back`, is renewed again.
    async fn recovers(&self, client: &Client, cluster: &str, fault: Fault, back: jiff::Timestamp) {
        let mode = self.mode;
        eventually(
            &format!("{mode:?}/{fault:?}: the victim renewed"),
            DEADLINE,
            || async {
                let s = self.score(client, cluster).await?;
                (valid_until(&s)? > back && condition(&s).is_some_and(|(s, _)| s == "True"))
                    .then_some(())
            },
        )
        .await;
    }
}

#[tokio::test]
async fn one_dead_store_never_blinds_the_fleet() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "thanos").await.expect("ns");
    let clusters = vec![
        Cluster {
            name: format!("{prefix}-c1"),
            nodes: vec![(16.0, 64.0), (8.0, 32.0)],
            pod: (4.0, 8.0),
        },
        Cluster {
            name: format!("{prefix}-c2"),
            nodes: vec![(8.0, 32.0)],
            pod: (6.0, 30.0),
        },
        Cluster {
            name: format!("{prefix}-c3"),
            nodes: vec![(32.0, 128.0)],
            pod: (2.0, 2.0),
        },
        Cluster {
            name: format!("{prefix}-c4"),
            nodes: vec![(12.0, 48.0), (4.0, 16.0)],
            pod: (1.0, 4.0),
        },
    ];
    for c in &clusters {
        create_cluster(&client, &c.name, None).await;
    }
    let mut exporters = Vec::new();
    for c in &clusters {
        let e = Exporter::start().await.expect("exporter");
        e.set(c.exposition());
        exporters.push(e);
    }
    let start_store = |c: usize, replica: &'static str| {
        let (name, target) = (clusters[c].name.clone(), exporters[c].addr());
        async move {
            Store::start(&name, replica, target, Duration::from_secs(1))
                .await
                .unwrap_or_else(|e| panic!("store {name}/{replica}: {e}"))
        }
    };
    // c1 an HA pair (both replicas scrape the same cluster), c2, c3 and c4 one Prometheus
    // each; c3 loses its sidecar and c4 its Prometheus.
    let started = Instant::now();
    let mut healthy = Vec::new();
    for (c, replica) in [(0, "a"), (0, "b"), (1, "a")] {
        healthy.push(start_store(c, replica).await);
    }
    let mut victims = Vec::new();
    for (c, fault) in [(2, Fault::Sidecar), (3, Fault::Prometheus)] {
        victims.push(Victim {
            cluster: c,
            fault,
            store: start_store(c, "a").await,
        });
    }
    let endpoints: Vec<SocketAddr> = healthy
        .iter()
        .chain(victims.iter().map(|v| &v.store))
        .map(Store::grpc_addr)
        .collect();
    eprintln!(
        "thanos stack: five Prometheus + sidecars ready after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!("thanos-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    let strict_score = format!("{RESOURCE_USAGE_SCORE}-strict");
    let modes = [
        Mode::start(
            &client,
            EndpointMode::Endpoint,
            RESOURCE_USAGE_SCORE,
            &endpoints,
            &kubeconfig,
            &dir,
        )
        .await,
        Mode::start(
            &client,
            EndpointMode::Strict,
            &strict_score,
            &endpoints,
            &kubeconfig,
            &dir,
        )
        .await,
    ];
    let [endpoint, strict] = &modes;
    tokio::join!(
        endpoint.converges(&client, &clusters),
        strict.converges(&client, &clusters)
    );

    // The victims' scores before the outage, per mode.
    let faults: Vec<(usize, Fault)> = victims.iter().map(|v| (v.cluster, v.fault)).collect();
    let mut kept: Vec<BTreeMap<usize, BTreeMap<String, i32>>> = Vec::new();
    for m in &modes {
        let mut per_victim = BTreeMap::new();
        for &(i, _) in &faults {
            let before = m
                .score(&client, &clusters[i].name)
                .await
                .expect("victim score");
            per_victim.insert(i, scores_of(&before));
        }
        kept.push(per_victim);
    }

    let down = jiff::Timestamp::now();
    let t0 = Instant::now();
    for v in &mut victims {
        v.kill();
    }
    let (endpoint_timeline, strict_timeline) = tokio::join!(
        endpoint.rides_out(&client, &clusters, &faults, &kept[0], down, t0),
        strict.rides_out(&client, &clusters, &faults, &kept[1], down, t0)
    );
    let warnings = (
        metric(endpoint.port, "scorer_query_warnings_total").await,
        metric(strict.port, "scorer_query_warnings_total").await,
    );

    // The stores come back: each victim is renewed again, in both modes.
    let [sidecar_victim, prometheus_victim] = victims.as_mut_slice() else {
        unreachable!("two victims");
    };
    let recovered = |v: &Victim, (back, t1): (jiff::Timestamp, Instant)| {
        let (name, fault) = (clusters[v.cluster].name.clone(), v.fault);
        let (client, endpoint, strict) = (&client, endpoint, strict);
        async move {
            tokio::join!(
                endpoint.recovers(client, &name, fault, back),
                strict.recovers(client, &name, fault, back)
            );
            format!("{fault:?} {:.1}s", t1.elapsed().as_secs_f64())
        }
    };
    let (sidecar_back, prometheus_back) =
        tokio::join!(sidecar_victim.revive(), prometheus_victim.revive());
    let renewed_after = tokio::join!(
        recovered(sidecar_victim, sidecar_back),
        recovered(prometheus_victim, prometheus_back)
    );
    for (m, timeline) in [(endpoint, endpoint_timeline), (strict, strict_timeline)] {
        eprintln!(
            "{:?} / dead sidecar (c3) and Prometheus (c4) for {}s: renewal timeline (c1 HA pair, c2, c3 and c4 the victims):\n{}",
            m.mode,
            OUTAGE.as_secs(),
            timeline.join("\n")
        );
    }
    eprintln!(
        "warnings counted (Endpoint, Strict): {warnings:?}; both modes renewed each victim this long after its store was back: {renewed_after:?}"
    );
    let rss: u64 = healthy
        .iter()
        .chain(victims.iter().map(|v| &v.store))
        .flat_map(Store::pids)
        .chain(modes.iter().filter_map(|m| m.query.pid()))
        .map(|p| testenv::procfs::status_bytes(p, "VmRSS"))
        .sum();
    eprintln!(
        "the stack's resident memory (5 Prometheus, 5 sidecars, 2 Query): {} MiB",
        rss >> 20
    );
    let _ = std::fs::remove_dir_all(&dir);
}
