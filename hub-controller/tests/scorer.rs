//! The hub scorer against a real Prometheus (Debian's, installed by tests/prometheus/build.sh)
//! scraping kube-state-metrics series the test serves for a small fleet, and a real apiserver
//! with the upstream CRDs as the hub: scores equal what the same data says, stale data expires,
//! a Prometheus outage is reported and recovered from, and the placement core selects by them;
//! a spoke's series under another cluster's name never become that cluster's scores.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::scores::{Process, condition, create_cluster, metric, score, scores_of, valid_until};
use kube::Client;
use kube::api::{Api, PostParams};
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::{RESOURCE_USAGE_SCORE, names};
use ocm_api::{AddOnPlacementScore, ManagedCluster};
use serde_json::json;
use testenv::eventually;
use testenv::prometheus::{Exporter, Prometheus, Target};

const DEADLINE: Duration = Duration::from_secs(90);
const GI: f64 = 1024.0 * 1024.0 * 1024.0;

/// A node of the fleet as kube-state-metrics reports it.
struct Node {
    name: &'static str,
    cpu: f64,
    memory_gi: f64,
    schedulable: bool,
    ready: bool,
}

/// A pod's requests on a node ("" = pending, unbound).
struct Pod {
    name: &'static str,
    node: &'static str,
    cpu: f64,
    memory_gi: f64,
}

struct Cluster {
    name: String,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
}

impl Cluster {
    /// Free (cluster, freest node) over schedulable, Ready nodes, as the agent counts.
    fn free(&self, cpu: bool) -> (f64, f64) {
        let mut total = 0.0;
        let mut best = f64::NEG_INFINITY;
        for n in self.nodes.iter().filter(|n| n.schedulable && n.ready) {
            let alloc = if cpu { n.cpu } else { n.memory_gi * GI };
            let used: f64 = self
                .pods
                .iter()
                .filter(|p| p.node == n.name)
                .map(|p| if cpu { p.cpu } else { p.memory_gi * GI })
                .sum();
            total += alloc - used;
            best = best.max(alloc - used);
        }
        (total, best)
    }

    fn exposition(&self) -> String {
        let c = &self.name;
        let mut out = String::new();
        for n in &self.nodes {
            let node = format!("{c}-{}", n.name);
            out += &format!(
                "kube_node_status_allocatable{{cluster=\"{c}\",node=\"{node}\",resource=\"cpu\",unit=\"core\"}} {}\n",
                n.cpu
            );
            out += &format!(
                "kube_node_status_allocatable{{cluster=\"{c}\",node=\"{node}\",resource=\"memory\",unit=\"byte\"}} {}\n",
                n.memory_gi * GI
            );
            out += &format!(
                "kube_node_spec_unschedulable{{cluster=\"{c}\",node=\"{node}\"}} {}\n",
                u8::from(!n.schedulable)
            );
            for (status, v) in [("true", n.ready), ("false", !n.ready)] {
                out += &format!(
                    "kube_node_status_condition{{cluster=\"{c}\",node=\"{node}\",condition=\"Ready\",status=\"{status}\"}} {}\n",
                    u8::from(v)
                );
            }
        }
        for p in &self.pods {
            let node = if p.node.is_empty() {
                String::new()
            } else {
                format!("{c}-{}", p.node)
            };
            for (resource, unit, v) in
                [("cpu", "core", p.cpu), ("memory", "byte", p.memory_gi * GI)]
            {
                out += &format!(
                    "kube_pod_container_resource_requests{{cluster=\"{c}\",namespace=\"apps\",pod=\"{}\",container=\"main\",node=\"{node}\",resource=\"{resource}\",unit=\"{unit}\"}} {v}\n",
                    p.name
                );
            }
        }
        out
    }
}

fn node(name: &'static str, cpu: f64, memory_gi: f64) -> Node {
    Node {
        name,
        cpu,
        memory_gi,
        schedulable: true,
        ready: true,
    }
}

fn pod(name: &'static str, node: &'static str, cpu: f64, memory_gi: f64) -> Pod {
    Pod {
        name,
        node,
        cpu,
        memory_gi,
    }
}

fn fleet(prefix: &str) -> Vec<Cluster> {
    vec![
        Cluster {
            name: format!("{prefix}-a"),
            nodes: vec![
                node("n1", 16.0, 64.0),
                node("n2", 16.0, 64.0),
                // Not counted: cordoned, and not Ready.
                Node {
                    schedulable: false,
                    ..node("cordoned", 64.0, 256.0)
                },
                Node {
                    ready: false,
                    ..node("down", 64.0, 256.0)
                },
            ],
            pods: vec![
                pod("p1", "n1", 4.0, 8.0),
                pod("p2", "n2", 10.0, 40.0),
                pod("p3", "cordoned", 1.0, 1.0),
                pod("pending", "", 2.0, 2.0),
            ],
        },
        Cluster {
            name: format!("{prefix}-b"),
            nodes: vec![node("n1", 8.0, 32.0)],
            // Overcommitted CPU: 10 requested of 8.
            pods: vec![pod("p1", "n1", 10.0, 30.0)],
        },
        Cluster {
            name: format!("{prefix}-c"),
            nodes: vec![node("n1", 32.0, 128.0)],
            pods: vec![],
        },
    ]
}

/// The scores the agent's formula gives for `c` with the test's ranges (0..32 cores,
/// 0..128 GiB).
fn expected(c: &Cluster) -> BTreeMap<String, i32> {
    let cpu = Normaliser::new(0.0, 32.0).expect("range");
    let mem = Normaliser::new(0.0, 128.0 * GI).expect("range");
    let (cc, cn) = c.free(true);
    let (mc, mn) = c.free(false);
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

/// Which clusters a placement preferring free CPU selects, by the scheduling core.
fn select(clusters: &[&str], scores: &[AddOnPlacementScore], n: i32) -> Vec<String> {
    use placement_core::{Snapshot, schedule};
    let mut snap = Snapshot::new();
    for c in clusters {
        let mc: ManagedCluster = serde_json::from_value(json!({
            "metadata": {"name": c, "labels": {"cluster.open-cluster-management.io/clusterset": "fleet"}},
            "spec": {"hubAcceptsClient": true}
        }))
        .expect("cluster");
        snap.upsert_cluster(Arc::new(mc));
    }
    let set: ocm_api::ManagedClusterSet = serde_json::from_value(json!({
        "metadata": {"name": "fleet"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
    }))
    .expect("set");
    snap.upsert_set(Arc::new(set));
    let binding: ocm_api::ManagedClusterSetBinding = serde_json::from_value(json!({
        "metadata": {"name": "fleet", "namespace": "p"}, "spec": {"clusterSet": "fleet"}
    }))
    .expect("binding");
    snap.upsert_binding(&binding);
    for s in scores {
        snap.upsert_score(Arc::new(s.clone()));
    }
    let placement: ocm_api::Placement = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "p"},
        "spec": {"numberOfClusters": n, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": RESOURCE_USAGE_SCORE, "scoreName": "cpuAvailable"}}, "weight": 1}
        ]}}
    }))
    .expect("placement");
    let outcome = schedule(&snap, &placement, jiff::Timestamp::now());
    let mut selected: Vec<String> = outcome.selected.iter().map(|n| n.to_string()).collect();
    selected.sort();
    selected
}

#[tokio::test]
async fn scores_from_fleet_metrics_expire_when_stale_and_survive_an_outage() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer").await.expect("ns");
    let clusters = fleet(&prefix);
    for c in &clusters {
        create_cluster(&client, &c.name, Some("fleet")).await;
    }
    // A cluster with no metrics at all.
    let silent = format!("{prefix}-silent");
    create_cluster(&client, &silent, Some("fleet")).await;
    // A cluster whose score the agent writes: the scorer leaves it alone.
    let agents = format!("{prefix}-agents");
    create_cluster(&client, &agents, Some("fleet")).await;
    let theirs: AddOnPlacementScore = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
        "metadata": {"name": RESOURCE_USAGE_SCORE, "namespace": agents,
                     "labels": {"app.kubernetes.io/managed-by": "resource-usage-agent"}}
    }))
    .expect("score");
    let agent_api = Api::<AddOnPlacementScore>::namespaced(client.clone(), &agents);
    agent_api
        .create(&PostParams::default(), &theirs)
        .await
        .expect("the agent's score");
    let agent_version = agent_api
        .get(RESOURCE_USAGE_SCORE)
        .await
        .expect("score")
        .metadata
        .resource_version;

    let exporter = Exporter::start().await.expect("exporter");
    let agents_cluster = Cluster {
        name: agents.clone(),
        nodes: vec![node("n1", 4.0, 4.0)],
        pods: vec![],
    };
    let all: String = clusters
        .iter()
        .chain([&agents_cluster])
        .map(Cluster::exposition)
        .collect();
    exporter.set(all);
    let mut prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");

    let dir = std::env::temp_dir().join(format!("scorer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let port = testenv::free_port();
    let scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "scorer",
            "--leader-elect=false",
            "--refresh-period=1s",
            "--debounce=200ms",
            "--window=1m",
            "--freshness-step=1s",
            "--max-data-age=8s",
            "--cpu-range=0:32",
            "--memory-range=0:128Gi",
            "--prometheus-timeout=2s",
            "--prometheus-attempts=1",
        ])
        .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
        .arg(format!("--prometheus-url={}", prom.url()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("scorer");
    let _scorer = Process(scorer);

    // Every cluster's scores are what its data says; the silent one is reported unavailable.
    for c in &clusters {
        let want = expected(c);
        eventually(&format!("the scores of {}", c.name), DEADLINE, || async {
            score(&client, &c.name)
                .await
                .filter(|s| scores_of(s) == want)
        })
        .await;
    }
    let s = eventually("the silent cluster reported", DEADLINE, || async {
        score(&client, &silent)
            .await
            .filter(|s| condition(s).is_some())
    })
    .await;
    assert_eq!(condition(&s), Some(("False".into(), "NoMetrics".into())));
    assert!(scores_of(&s).is_empty());

    // The agent's object was not touched, and the scorer says it skipped one cluster.
    eventually("the skip counted", DEADLINE, || async {
        (metric(port, "scorer_skipped_clusters").await == 1.0).then_some(())
    })
    .await;
    assert_eq!(
        agent_api
            .get(RESOURCE_USAGE_SCORE)
            .await
            .expect("score")
            .metadata
            .resource_version,
        agent_version
    );

    // The placement core ranks by them: the two with most free CPU.
    let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let mut current = Vec::new();
    for c in &clusters {
        current.push(score(&client, &c.name).await.expect("score"));
    }
    let picked = select(&names, &current, 2);
    assert_eq!(picked, [clusters[0].name.clone(), clusters[2].name.clone()]);

    // Cluster b's data stops: after --max-data-age it is no longer renewed and expires.
    let without_b: String = [&clusters[0], &clusters[2]]
        .iter()
        .map(|c| c.exposition())
        .collect();
    exporter.set(without_b);
    let stale = eventually("b reported stale", DEADLINE, || async {
        score(&client, &clusters[1].name)
            .await
            .filter(|s| condition(s).is_some_and(|(_, r)| r == "MetricsStale"))
    })
    .await;
    let frozen = valid_until(&stale).expect("validUntil");
    eventually(
        "b's scores to expire while a's are renewed",
        DEADLINE,
        || async {
            let a = score(&client, &clusters[0].name).await?;
            let b = score(&client, &clusters[1].name).await?;
            let now = jiff::Timestamp::now();
            (valid_until(&b) == Some(frozen) && frozen < now && valid_until(&a)? > now)
                .then_some(())
        },
    )
    .await;

    // Prometheus goes away: the scorer keeps running, says so, and recovers when it is back.
    prom.stop();
    eventually("query errors counted", DEADLINE, || async {
        (metric(port, "scorer_query_errors_total").await > 0.0).then_some(())
    })
    .await;
    assert!(
        metric(port, "score_provider_computes_total").await > 0.0,
        "the loop runs on"
    );
    let stopped_at = jiff::Timestamp::now();
    prom.start_again().await.expect("prometheus back");
    eventually("scores renewed after the outage", DEADLINE, || async {
        let a = score(&client, &clusters[0].name).await?;
        (valid_until(&a)? > stopped_at + jiff::SignedDuration::from_secs(3)
            && condition(&a).is_some_and(|(s, _)| s == "True"))
        .then_some(())
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spoke publishes series under another cluster's name. The attacker is the spoke's own
/// metrics pipeline: a scrape target of its own, serving what it likes. With the spoke-set
/// `cluster` label (the default), a forged series that disagrees with the victim's withholds
/// the victim's scores (condition, metric) instead of replacing them, and nobody else's; a
/// series for a cluster the hub does not know creates nothing. With a label the hub sets from
/// who sends (here Prometheus' per-target label, as Thanos Receive's tenant label), the forged
/// series do not touch the victim at all.
#[tokio::test]
async fn a_forged_series_for_another_cluster_changes_nothing() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer-forge")
        .await
        .expect("ns");
    let victim = Cluster {
        name: format!("{prefix}-victim"),
        nodes: vec![node("n1", 16.0, 64.0)],
        pods: vec![pod("p1", "n1", 4.0, 8.0)],
    };
    let attacker = Cluster {
        name: format!("{prefix}-attacker"),
        nodes: vec![node("n1", 8.0, 32.0)],
        pods: vec![],
    };
    let bystander = Cluster {
        name: format!("{prefix}-other"),
        nodes: vec![node("n1", 24.0, 96.0)],
        pods: vec![pod("p1", "n1", 2.0, 2.0)],
    };
    let fleet = [&victim, &attacker, &bystander];
    for c in fleet {
        create_cluster(&client, &c.name, Some("fleet")).await;
    }
    // Each cluster pushes through its own target; Prometheus labels what it scrapes there
    // with `tenant`, which the target cannot override.
    let mut exporters = Vec::new();
    for c in fleet {
        let e = Exporter::start().await.expect("exporter");
        e.set(c.exposition());
        exporters.push(e);
    }
    let targets: Vec<Target> = fleet
        .iter()
        .zip(&exporters)
        .map(|(c, e)| Target {
            addr: e.addr(),
            labels: BTreeMap::from([("tenant".to_owned(), c.name.clone())]),
        })
        .collect();
    let prom = Prometheus::start_labelled(&targets, Duration::from_secs(1))
        .await
        .expect("prometheus");

    let dir = std::env::temp_dir().join(format!("scorer-forge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    // Two scorers side by side, each writing a score object of its own: one trusts the
    // spoke-set `cluster` label, the other the hub-set `tenant`.
    const TRUSTED: &str = "tenant-score";
    let spawn = |port: u16, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=false",
                "--refresh-period=1s",
                "--debounce=200ms",
                // Short, so that the forged series leave the window soon after they stop.
                "--window=10s",
                "--freshness-step=1s",
                "--max-data-age=8s",
                "--cpu-range=0:32",
                "--memory-range=0:128Gi",
                "--prometheus-timeout=2s",
                "--prometheus-attempts=1",
            ])
            .args(extra)
            .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", prom.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Process)
            .expect("scorer")
    };
    let port = testenv::free_port();
    let _spoke_label = spawn(port, &[]);
    let _hub_label = spawn(
        testenv::free_port(),
        &["--cluster-label=tenant", &format!("--score-name={TRUSTED}")],
    );
    let trusted = |cluster: &str| {
        let api = Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster);
        async move { api.get_opt(TRUSTED).await.ok().flatten() }
    };
    for c in fleet {
        let want = expected(c);
        eventually(&format!("the scores of {}", c.name), DEADLINE, || async {
            let s = score(&client, &c.name).await?;
            let t = trusted(&c.name).await?;
            (scores_of(&s) == want && scores_of(&t) == want).then_some(())
        })
        .await;
    }

    // The attack: the attacker's target also serves a node of the victim's, with far more
    // free capacity, trying the hub-set label too, and a cluster the hub does not know.
    let forged = Cluster {
        name: victim.name.clone(),
        nodes: vec![node("n1", 1000.0, 1000.0)],
        pods: vec![],
    };
    let forged_scores = expected(&forged);
    assert_ne!(forged_scores, expected(&victim), "the forgery shows");
    let ghost = Cluster {
        name: format!("{prefix}-ghost"),
        nodes: vec![node("n1", 64.0, 64.0)],
        pods: vec![],
    };
    let forged_text = forged.exposition().replace(
        &format!("cluster=\"{}\"", victim.name),
        &format!("cluster=\"{0}\",tenant=\"{0}\"", victim.name),
    );
    exporters[1].set(format!(
        "{}{forged_text}{}",
        attacker.exposition(),
        ghost.exposition()
    ));
    let attack = jiff::Timestamp::now();

    // Never the forged scores; the victim is reported instead, while the others are renewed.
    let not_forged = |s: &AddOnPlacementScore| {
        assert_ne!(
            scores_of(s),
            forged_scores,
            "the forged series set the victim's scores: {:?}",
            s.status
        );
    };
    let reported = eventually("the victim's conflict reported", DEADLINE, || async {
        let s = score(&client, &victim.name).await?;
        not_forged(&s);
        s.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "AddOnPlacementScoreUpdated" && c.reason == "ConflictingSeries")
            .map(|c| (c.status.clone(), c.message.clone(), s.clone()))
    })
    .await;
    let (status, message, s) = reported;
    assert_eq!(status, "False");
    assert!(
        message.contains("allocatable") && message.contains(&format!("{}-n1", victim.name)),
        "{message}"
    );
    assert_eq!(
        scores_of(&s),
        expected(&victim),
        "the last true scores stay"
    );
    let frozen = valid_until(&s).expect("validUntil");
    eventually("the conflict counted", DEADLINE, || async {
        (metric(port, "scorer_conflicting_clusters").await == 1.0).then_some(())
    })
    .await;
    eventually("the unknown cluster's series dropped", DEADLINE, || async {
        (metric(
            port,
            "scorer_dropped_series_total{reason=\"unknown_cluster\"}",
        )
        .await
            > 0.0)
            .then_some(())
    })
    .await;
    // The victim's scores are not renewed and expire, while everyone else's are, and the
    // hub-label scorer rates the victim on as before.
    eventually(
        "the victim's scores expire, the others renewed",
        DEADLINE,
        || async {
            let now = jiff::Timestamp::now();
            let v = score(&client, &victim.name).await?;
            not_forged(&v);
            if valid_until(&v) != Some(frozen) || frozen >= now {
                return None;
            }
            for c in [&attacker, &bystander] {
                let s = score(&client, &c.name).await?;
                (scores_of(&s) == expected(c) && valid_until(&s)? > now).then_some(())?;
            }
            let t = trusted(&victim.name).await?;
            (scores_of(&t) == expected(&victim)
                && valid_until(&t)? > attack + jiff::SignedDuration::from_secs(5)
                && condition(&t).is_some_and(|(s, _)| s == "True"))
            .then_some(())
        },
    )
    .await;
    assert!(
        Api::<AddOnPlacementScore>::namespaced(client.clone(), &ghost.name)
            .list(&Default::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true),
        "nothing for the unknown cluster"
    );
    assert!(
        Api::<ManagedCluster>::all(client.clone())
            .get_opt(&ghost.name)
            .await
            .expect("get")
            .is_none()
    );

    // The attack ends: once its series leave the window, the victim is rated again.
    exporters[1].set(attacker.exposition());
    eventually("the victim rated again", DEADLINE, || async {
        let s = score(&client, &victim.name).await?;
        not_forged(&s);
        (scores_of(&s) == expected(&victim)
            && valid_until(&s)? > jiff::Timestamp::now()
            && condition(&s).is_some_and(|(st, _)| st == "True"))
        .then_some(())
    })
    .await;
    assert_eq!(metric(port, "scorer_conflicting_clusters").await, 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two replicas: one rates, the other stands by (ready); the standby takes over when the
/// leader dies; a leader whose Lease is taken from it stops and exits.
#[tokio::test]
async fn one_replica_scores_and_a_lost_lease_ends_it() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer-ha").await.expect("ns");
    let cluster = Cluster {
        name: format!("{prefix}-a"),
        nodes: vec![node("n1", 16.0, 64.0)],
        pods: vec![],
    };
    create_cluster(&client, &cluster.name, Some("fleet")).await;
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(cluster.exposition());
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");
    let dir = std::env::temp_dir().join(format!("scorer-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // The replicas run as a service account bound to the chart's scorer RBAC, nothing more.
    let sa = "resource-usage-scorer";
    apply_rbac(&client, &prefix, sa).await;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig_as_service_account(&prefix, sa)).expect("kubeconfig");
    let spawn = |port: u16| {
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=true",
                "--leader-election-lease-duration=2s",
                "--leader-election-renew-deadline=1500ms",
                "--leader-election-retry-period=300ms",
                "--refresh-period=1s",
                "--debounce=200ms",
                "--window=1m",
                "--freshness-step=1s",
                "--max-data-age=30s",
            ])
            .arg(format!("--leader-election-namespace={prefix}"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", prom.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Process)
            .expect("scorer")
    };
    let ports = [testenv::free_port(), testenv::free_port()];
    let mut replicas = [Some(spawn(ports[0])), Some(spawn(ports[1]))];
    for port in ports {
        eventually("both ready (the standby too)", DEADLINE, || async {
            let (code, _) = testenv::http::get(([127, 0, 0, 1], port).into(), "/readyz")
                .await
                .ok()?;
            (code == 200).then_some(())
        })
        .await;
    }
    let leader = eventually("exactly one rates", DEADLINE, || async {
        let a = metric(ports[0], "scorer_rated_clusters").await;
        let b = metric(ports[1], "scorer_rated_clusters").await;
        ((a > 0.0) != (b > 0.0)).then_some(usize::from(b > 0.0))
    })
    .await;
    let standby = 1 - leader;
    eventually(
        "scores written with the scorer's own permission",
        DEADLINE,
        || async {
            score(&client, &cluster.name)
                .await
                .filter(|s| !scores_of(s).is_empty())
        },
    )
    .await;
    replicas[leader] = None;
    eventually("the standby takes over", DEADLINE, || async {
        (metric(ports[standby], "scorer_rated_clusters").await > 0.0).then_some(())
    })
    .await;

    // Someone else takes the Lease: the leader stops and exits with an error.
    let leases =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &prefix);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    eventually("the Lease taken", DEADLINE, || async {
        let mut lease = leases.get("resource-usage-hub-scorer").await.ok()?;
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("someone-else".into());
        spec.renew_time = Some(now.clone());
        spec.lease_duration_seconds = Some(3600);
        leases
            .replace("resource-usage-hub-scorer", &PostParams::default(), &lease)
            .await
            .ok()
    })
    .await;
    let Some(mut survivor) = replicas[standby].take() else {
        panic!("the standby is running");
    };
    let status = eventually("the old leader exits", DEADLINE, || {
        let s = survivor.0.try_wait().ok().flatten();
        async move { s }
    })
    .await;
    assert!(!status.success(), "a lost lease is an error exit: {status}");

    // What the scorer's identity may not do.
    let me = cp.client_as_service_account(&prefix, sa).expect("client");
    let refused =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(refused(
        Api::<k8s_openapi::api::core::v1::Secret>::all(me.clone())
            .list(&Default::default())
            .await
            .map(drop)
    ));
    assert!(refused(
        Api::<AddOnPlacementScore>::namespaced(me.clone(), &cluster.name)
            .delete(RESOURCE_USAGE_SCORE, &Default::default())
            .await
            .map(drop)
    ));
    assert!(refused(
        Api::<ocm_api::PlacementDecision>::all(me)
            .list(&Default::default())
            .await
            .map(drop)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The chart's scorer RBAC (`charts/ocm-placement/files/scorer-rbac.yaml`) for `sa` in `ns`.
async fn apply_rbac(client: &Client, ns: &str, sa: &str) {
    let text = include_str!("../../charts/ocm-placement/files/scorer-rbac.yaml")
        .replace("{{NAMESPACE}}", ns)
        .replace("{{SUBJECT}}", sa);
    testenv::apply_yaml(client, &text, ns)
        .await
        .expect("the scorer's RBAC");
}

/// The query API as the scorer sees it: a proxy that forwards every instant query to a real
/// Prometheus, except the ones it is armed for, which it answers with a valid-looking vector
/// of `HOSTILE_BYTES` streamed without a Content-Length (a real Prometheus cannot be made to
/// answer 300 MB cheaply). The test allocates one 1 MiB chunk, never the whole answer.
struct HostileQueryApi {
    addr: std::net::SocketAddr,
    state: Arc<HostileState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct HostileState {
    /// Queries still to answer with the oversized body.
    armed: std::sync::atomic::AtomicUsize,
    /// Oversized answers begun, and ended (finished or cut off by the client).
    begun: std::sync::atomic::AtomicUsize,
    ended: std::sync::atomic::AtomicUsize,
    /// Bytes of oversized answers the client took.
    sent: std::sync::atomic::AtomicU64,
}

const HOSTILE_BYTES: u64 = 300 << 20;

impl HostileQueryApi {
    async fn start(prometheus: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(HostileState::default());
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(Self::answer(conn, prometheus, shared.clone()));
            }
        });
        Self { addr, state, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next query gets the oversized answer.
    fn arm(&self) {
        self.state
            .armed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn answer(
        mut conn: tokio::net::TcpStream,
        prometheus: std::net::SocketAddr,
        state: Arc<HostileState>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // One request per connection (every answer closes it): head, then the form body.
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        let (head_len, body_len) = loop {
            let Ok(n) = conn.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            request.extend_from_slice(&buf[..n]);
            if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, length);
            }
        };
        while request.len() < head_len + body_len {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let form = String::from_utf8_lossy(&request[head_len..head_len + body_len]).into_owned();
        let hostile = state
            .armed
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !hostile {
            let (status, body) = testenv::http::get(prometheus, &format!("/api/v1/query?{form}"))
                .await
                .unwrap_or((502, String::new()));
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
            return;
        }
        state.begun.fetch_add(1, SeqCst);
        // Series of an unknown cluster, each with a 1 MiB node name: valid JSON throughout.
        let filler = "x".repeat(1 << 20);
        let series = format!(
            "{{\"metric\":{{\"cluster\":\"ghost\",\"node\":\"{filler}\"}},\"value\":[1,\"1\"]}},"
        );
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[";
        let mut sent = 0u64;
        let mut ok = conn.write_all(head.as_bytes()).await.is_ok();
        while ok && sent < HOSTILE_BYTES {
            ok = conn.write_all(series.as_bytes()).await.is_ok();
            if ok {
                sent += series.len() as u64;
                state.sent.fetch_add(series.len() as u64, SeqCst);
            }
        }
        if ok {
            let _ = conn
                .write_all(b"{\"metric\":{},\"value\":[1,\"1\"]}]}}")
                .await;
        }
        let _ = conn.shutdown().await;
        state.ended.fetch_add(1, SeqCst);
    }
}

impl Drop for HostileQueryApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Lines of `/metrics` of family `name` (with labels) that contain `needle`, summed.
async fn metric_with(port: u16, name: &str, needle: &str) -> f64 {
    let Ok((_, body)) = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics").await else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One 300 MB answer from the query API: the scorer reads at most its limit (8 MiB by
/// default) of it, stays alive and small, counts the query as failed `too_large` and logs it
/// with the limit and the flag; the scores it had are kept to expire, and the next round
/// scores normally.
#[tokio::test]
async fn a_300_mb_answer_fails_one_query_and_the_next_round_scores() {
    use std::sync::atomic::Ordering::SeqCst;
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer-big").await.expect("ns");
    let cluster = Cluster {
        name: format!("{prefix}-a"),
        nodes: vec![node("n1", 16.0, 64.0)],
        pods: vec![pod("p1", "n1", 4.0, 8.0)],
    };
    create_cluster(&client, &cluster.name, Some("fleet")).await;
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(cluster.exposition());
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");
    let api = HostileQueryApi::start(prom.addr()).await;

    let dir = std::env::temp_dir().join(format!("scorer-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let log = dir.join("scorer.log");
    let port = testenv::free_port();
    let scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "scorer",
            "--leader-elect=false",
            "--refresh-period=1s",
            "--debounce=200ms",
            "--window=1m",
            "--freshness-step=1s",
            "--max-data-age=30s",
            "--cpu-range=0:32",
            "--memory-range=0:128Gi",
            "--prometheus-timeout=5s",
            "--prometheus-attempts=1",
            "--log-format=json",
        ])
        .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
        .arg(format!("--prometheus-url={}", api.url()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("scorer");
    let pid = scorer.id();
    let mut scorer = Process(scorer);

    let want = expected(&cluster);
    eventually("the first scores", DEADLINE, || async {
        score(&client, &cluster.name)
            .await
            .filter(|s| scores_of(s) == want)
    })
    .await;
    let before = testenv::procfs::status_bytes(pid, "VmHWM");

    api.arm();
    eventually("the oversized answer served", DEADLINE, || async {
        (api.state.ended.load(SeqCst) == 1).then_some(())
    })
    .await;
    let hostile_over = jiff::Timestamp::now();
    // The round that got it has ended once a compute is counted after the answer ended.
    let computes = metric(port, "score_provider_computes_total").await;
    eventually(
        "the round with the oversized answer over",
        DEADLINE,
        || async { (metric(port, "score_provider_computes_total").await > computes).then_some(()) },
    )
    .await;
    let peak = testenv::procfs::status_bytes(pid, "VmHWM");
    let taken = api.state.sent.load(SeqCst);
    println!(
        "scorer VmHWM: {:.1} MiB before, {:.1} MiB after one {} MiB answer, of which it took {:.1} MiB",
        before as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        HOSTILE_BYTES >> 20,
        taken as f64 / 1048576.0
    );
    assert!(
        scorer.0.try_wait().expect("wait").is_none(),
        "the scorer is alive"
    );
    let failed = metric_with(port, "scorer_query_errors_total", "reason=\"too_large\"").await;
    assert_eq!(failed, 1.0, "one query failed as too large");
    assert!(
        peak < 100 << 20,
        "the scorer's peak RSS grew to {peak} bytes (before: {before})"
    );
    assert!(
        taken < 64 << 20,
        "the scorer took {taken} bytes of the answer"
    );
    // The scores written before were kept (to expire at their validUntil, not emptied).
    let kept = score(&client, &cluster.name).await.expect("score");
    assert_eq!(scores_of(&kept), want);

    // The next round scores normally, through the real Prometheus.
    eventually(
        "scores renewed after the oversized answer",
        DEADLINE,
        || async {
            let s = score(&client, &cluster.name).await?;
            (scores_of(&s) == want
                && valid_until(&s)? > hostile_over + jiff::SignedDuration::from_secs(5)
                && condition(&s).is_some_and(|(st, _)| st == "True"))
            .then_some(())
        },
    )
    .await;
    assert!(scorer.0.try_wait().expect("wait").is_none());
    assert_eq!(api.state.begun.load(SeqCst), 1, "one oversized answer");
    let text = std::fs::read_to_string(&log).expect("log");
    let line = text
        .lines()
        .find(|l| l.contains("over the size limit"))
        .unwrap_or_else(|| panic!("no warning in the log:\n{text}"));
    for part in [
        "\"flag\":\"--prometheus-max-response-size\"",
        "\"limit_bytes\":8388608",
        "\"query\":\"",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }
    drop(scorer);
    let _ = std::fs::remove_dir_all(&dir);
}
