//! The hub scorer against a real Thanos (built by tests/thanos/build.sh): per cluster a
//! Prometheus with `external_labels {cluster, replica}` scraping kube-state-metrics series that
//! carry no `cluster` label, its sidecar, and Thanos Query over the sidecars with
//! `--query.replica-label=replica`; cluster 1 is an HA pair. Scores are what the data says, the
//! pair is deduplicated, and one dead store (a sidecar, then a Prometheus, 40 s each, with
//! Query in both endpoint modes) never blinds the fleet: every other cluster keeps being
//! renewed, the missing one is reported and not zeroed, and it recovers once its store is back.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::scores::{Process, condition, create_cluster, metric, score, scores_of, valid_until};
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::names;
use testenv::eventually;
use testenv::prometheus::Exporter;
use testenv::thanos::{EndpointMode, Query, Store};

const DEADLINE: Duration = Duration::from_secs(90);
/// How long each store stays dead (the drill).
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
    // c1 an HA pair (both replicas scrape the same cluster), c2 and c3 one Prometheus each.
    let started = Instant::now();
    let mut stores = Vec::new();
    for (i, (c, replica)) in [(0, "a"), (0, "b"), (1, "a"), (2, "a")].iter().enumerate() {
        let s = Store::start(
            &clusters[*c].name,
            replica,
            exporters[*c].addr(),
            Duration::from_secs(1),
        )
        .await
        .unwrap_or_else(|e| panic!("store {i}: {e}"));
        stores.push(s);
    }
    let endpoints: Vec<SocketAddr> = stores.iter().map(Store::grpc_addr).collect();
    eprintln!(
        "thanos stack: four Prometheus + sidecars ready after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!("thanos-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    for mode in [EndpointMode::Endpoint, EndpointMode::Strict] {
        let query = Query::start(&endpoints, mode).await.expect("query");
        let port = testenv::free_port();
        let scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=false",
                &format!("--refresh-period={REFRESH}"),
                &format!("--score-ttl={TTL}"),
                "--debounce=200ms",
                "--window=1m",
                "--freshness-step=1s",
                "--max-data-age=20s",
                "--cpu-range=0:32",
                "--memory-range=0:128Gi",
                "--prometheus-timeout=3s",
                "--prometheus-attempts=1",
            ])
            .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", query.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join(format!("scorer-{mode:?}.log"))).expect("log"),
            ))
            .spawn()
            .expect("scorer");
        let _scorer = Process(scorer);

        // Every cluster's scores are what its data says, through Query.
        for c in &clusters {
            let want = c.expected();
            eventually(
                &format!("{mode:?}: the scores of {}", c.name),
                DEADLINE,
                || async {
                    score(&client, &c.name).await.filter(|s| {
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
        let deduped = eventually("the pair's series through Query", DEADLINE, || async {
            let raw = count(query.addr(), &pair, false).await?;
            let one = count(query.addr(), &pair, true).await?;
            (raw == 4.0).then_some(one)
        })
        .await;
        assert_eq!(deduped, 2.0, "{mode:?}: dedup collapses the HA pair");

        for fault in [Fault::Sidecar, Fault::Prometheus] {
            // c3's store goes away; c1 (the pair) and c2 must keep being renewed.
            let victim = &clusters[2].name;
            let before = score(&client, victim).await.expect("victim score");
            let victim_scores = scores_of(&before);
            let store = &mut stores[3];
            let down = jiff::Timestamp::now();
            let t0 = Instant::now();
            match fault {
                Fault::Sidecar => store.stop_sidecar(),
                Fault::Prometheus => store.stop_prometheus(),
            }
            let mut timeline: Vec<String> = Vec::new();
            let mut last: BTreeMap<String, Option<jiff::Timestamp>> = BTreeMap::new();
            let mut reported = false;
            while t0.elapsed() < OUTAGE {
                let now = jiff::Timestamp::now();
                for c in &clusters {
                    let Some(s) = score(&client, &c.name).await else {
                        continue;
                    };
                    let vu = valid_until(&s);
                    if last.get(&c.name) != Some(&vu) {
                        timeline.push(format!(
                            "  +{:>5.1}s {}: validUntil {} ({:?})",
                            t0.elapsed().as_secs_f64(),
                            c.name.rsplit('-').next().unwrap_or_default(),
                            vu.map(|v| v.to_string()).unwrap_or_default(),
                            condition(&s).map(|c| c.1).unwrap_or_default()
                        ));
                        last.insert(c.name.clone(), vu);
                    }
                    if &c.name == victim {
                        // Reported missing, and its scores never zeroed or changed.
                        assert_eq!(
                            scores_of(&s),
                            victim_scores,
                            "{mode:?}/{fault:?}: the missing cluster's scores are kept"
                        );
                        reported |=
                            condition(&s).is_some_and(|(st, r)| st == "False" && r == "NoMetrics");
                    } else {
                        // Never lapses: renewed within its lifetime all along.
                        assert!(
                            vu.is_some_and(|v| v > now),
                            "{mode:?}/{fault:?}: {} was not renewed during the outage; timeline:\n{}",
                            c.name,
                            timeline.join("\n")
                        );
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let end = jiff::Timestamp::now();
            for c in &clusters[..2] {
                let s = score(&client, &c.name).await.expect("score");
                assert!(
                    valid_until(&s).is_some_and(|v| v > end),
                    "{mode:?}/{fault:?}: {} renewed at the end of the outage",
                    c.name
                );
                assert_eq!(scores_of(&s), c.expected(), "{}", c.name);
            }
            assert!(
                reported,
                "{mode:?}/{fault:?}: the missing cluster reported NoMetrics; timeline:\n{}",
                timeline.join("\n")
            );
            assert!(metric(port, "scorer_stale_clusters").await >= 1.0);
            let warnings = metric(port, "scorer_query_warnings_total").await;
            let victim_until = valid_until(&score(&client, victim).await.expect("score"));
            assert!(
                victim_until.is_some_and(|v| v < down + jiff::SignedDuration::from_secs(12)),
                "{mode:?}/{fault:?}: the missing cluster's score is not renewed: {victim_until:?}"
            );

            // The store comes back: the victim is renewed again.
            let store = &mut stores[3];
            match fault {
                Fault::Sidecar => store.start_sidecar_again().await.expect("sidecar back"),
                Fault::Prometheus => store
                    .start_prometheus_again()
                    .await
                    .expect("prometheus back"),
            }
            let back = jiff::Timestamp::now();
            let t1 = Instant::now();
            eventually(
                &format!("{mode:?}/{fault:?}: the victim renewed"),
                DEADLINE,
                || async {
                    let s = score(&client, victim).await?;
                    (valid_until(&s)? > back && condition(&s).is_some_and(|(s, _)| s == "True"))
                        .then_some(())
                },
            )
            .await;
            eprintln!(
                "{mode:?} / dead {fault:?} for {}s: renewal timeline (c1 HA pair, c2, c3 the victim), warnings counted so far {warnings}, victim renewed {:.1}s after its store was back:\n{}",
                OUTAGE.as_secs(),
                t1.elapsed().as_secs_f64(),
                timeline.join("\n")
            );
        }
        let rss: u64 = stores
            .iter()
            .flat_map(Store::pids)
            .chain(query.pid())
            .map(|p| testenv::procfs::status_bytes(p, "VmRSS"))
            .sum();
        eprintln!(
            "{mode:?}: the stack's resident memory (4 Prometheus, 4 sidecars, Query): {} MiB",
            rss >> 20
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
