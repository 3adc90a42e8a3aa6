//! Scale harness for the resource-usage agent: a real control plane (testenv's etcd and
//! kube-apiserver with the upstream OCM CRDs) acting as both hub and managed cluster, a fleet of
//! nodes and bound pods of realistic size, and the release `resource-usage-agent run` as a
//! child process. It measures what the issue targets (steady RSS under 50 MB, one recompute
//! under 50 ms with 1,000 nodes and 30,000 pods) and prints a markdown report; the targets are
//! reported, not asserted.
//!
//! ```sh
//! cargo build --release -p resource-usage-agent --bin resource-usage-agent --example agent_scale
//! target/release/examples/agent_scale --no-build                       # 1,000 nodes, 30,000 pods
//! target/release/examples/agent_scale --no-build --nodes 50 --pods 1000 --steady 15s
//! ```
//!
//! Phases: create the nodes (create, write status, clear the admission's not-ready taint) and
//! the pods (bound through `spec.nodeName`, spread round-robin over the nodes and over
//! `--namespaces` namespaces); start the agent and time until its AddOnPlacementScore holds the
//! scores the harness expects from what it created (initial list + index build + first write);
//! then a steady window in which a background task creates and deletes `--churn` pods a second
//! (so that recomputes come from the debounce as well as from the refresh period) while the
//! agent's VmRSS is sampled every second; finally, with the churn stopped, the scores must
//! again match the harness's expectation.
//!
//! CPU time comes from `/proc/<pid>/stat`, memory from `/proc/<pid>/status`, the recompute
//! cost from the agent's `score_provider_compute_duration_seconds` histogram. Everything is
//! stopped at the end, on error and on Ctrl-C; the agent also gets `PR_SET_PDEATHSIG` through
//! `setpriv` when installed.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ocm_api::AddOnPlacementScore;
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::{RESOURCE_USAGE_SCORE, names};
use serde_json::{Value, json};
use testenv::procfs;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

const CLUSTER: &str = "scale-cluster";
const CHURN_NS: &str = "scale-churn";
/// Per node: 32 cores and 128 GiB allocatable.
const NODE_CPU_M: i64 = 32_000;
const NODE_MEM: i64 = 128 << 30;
const MI: i64 = 1 << 20;
const CHANGES: &str = "score_provider_changes_total";

/// Scale harness for the resource-usage agent on a real apiserver.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    #[arg(long, default_value_t = 30_000)]
    pods: usize,
    /// Namespaces the pods are spread over.
    #[arg(long, default_value_t = 30)]
    namespaces: usize,
    /// The steady window: churn running, RSS sampled every second.
    #[arg(long, default_value = "60s", value_parser = ocm_runtime::leader::parse_duration)]
    steady: Duration,
    /// Pods created (and as many deleted) per second during the steady window.
    #[arg(long, default_value_t = 20.0)]
    churn: f64,
    /// The agent's --refresh-period.
    #[arg(long, default_value = "10s", value_parser = ocm_runtime::leader::parse_duration)]
    refresh_period: Duration,
    /// The agent's --debounce.
    #[arg(long, default_value = "1s", value_parser = ocm_runtime::leader::parse_duration)]
    debounce: Duration,
    /// Harness requests in flight at once while creating the fleet.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up waiting for the first (and the final) scores after this long.
    #[arg(long, default_value = "10m", value_parser = ocm_runtime::leader::parse_duration)]
    timeout: Duration,
    /// More arguments for `resource-usage-agent run` (repeatable), e.g. `--agent-arg=--hysteresis=5`.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Environment for the agent, `KEY=VALUE` (repeatable; it gets nothing else), e.g.
    /// `--agent-env GLIBC_TUNABLES=glibc.malloc.trim_threshold=0`.
    #[arg(long = "agent-env")]
    agent_env: Vec<String>,
    /// Do not run `cargo build` for the agent binary first.
    #[arg(long)]
    no_build: bool,
    /// At the end, attach gdb to the agent to read glibc's `malloc_stats()` (heap in use vs
    /// held) and call `malloc_trim(0)`: tells live memory from memory the allocator keeps.
    #[arg(long)]
    heap_probe: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The agent child's parent-death signal is tied to the forking thread: this one.
    rt.block_on(async {
        tokio::select! {
            r = run(&args) => match r {
                Ok(report) => {
                    println!("{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: stopping the agent, kube-apiserver and etcd");
                ExitCode::from(130)
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The fleet: what the harness creates and what it expects the agent to compute

/// A container's requests: millicores and MiB.
type Req = (&'static str, i64, i64);

/// A pod shape: regular containers, then init containers (`true`: a native sidecar).
struct Profile {
    app: &'static str,
    containers: [Req; 2],
    init: &'static [(Req, bool)],
}

const PROFILES: [Profile; 4] = [
    Profile {
        app: "web",
        containers: [("web", 250, 512), ("envoy", 100, 128)],
        init: &[],
    },
    Profile {
        app: "worker",
        containers: [("worker", 500, 1024), ("log-shipper", 50, 64)],
        init: &[(("migrate", 1000, 256), false)],
    },
    Profile {
        app: "api",
        containers: [("api", 1000, 2048), ("metrics", 20, 32)],
        init: &[(("proxy", 100, 128), true), (("wait-db", 50, 32), false)],
    },
    Profile {
        app: "cron",
        containers: [("cron", 100, 128), ("config-reloader", 10, 16)],
        init: &[],
    },
];

impl Profile {
    /// Effective requests (millicores, bytes), by the scheduler's rule written out again
    /// here (not the agent's code): Σ containers and sidecars vs. the init-time peak.
    fn effective(&self) -> (i64, i64) {
        let mut sum = self
            .containers
            .iter()
            .fold((0, 0), |a, c| (a.0 + c.1, a.1 + c.2));
        let (mut sidecars, mut peak) = ((0, 0), (0, 0));
        for ((_, cpu, mem), sidecar) in self.init {
            let demand = if *sidecar {
                sum = (sum.0 + cpu, sum.1 + mem);
                sidecars = (sidecars.0 + cpu, sidecars.1 + mem);
                sidecars
            } else {
                (sidecars.0 + cpu, sidecars.1 + mem)
            };
            peak = (peak.0.max(demand.0), peak.1.max(demand.1));
        }
        (sum.0.max(peak.0), (sum.1.max(peak.1)) * MI)
    }
}

/// A cheap, deterministic scramble (splitmix64) for the profile of pod `i`.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn profile_of(i: usize) -> usize {
    (mix(i as u64) % PROFILES.len() as u64) as usize
}

fn node_name(n: usize) -> String {
    format!(
        "ip-10-{}-{}-{}.eu-west-1.compute.internal",
        n / 65536,
        (n / 256) % 256,
        n % 256
    )
}

/// The requests bound to each node, and the scores they should give.
struct Expected {
    per_node: Vec<(i64, i64)>,
    /// The cluster-scope bounds (cores, bytes) given to the agent.
    bounds: [(f64, f64); 2],
}

impl Expected {
    fn add(&mut self, node: usize, profile: usize, sign: i64) {
        let (cpu, mem) = PROFILES[profile].effective();
        let n = &mut self.per_node[node];
        *n = (n.0 + sign * cpu, n.1 + sign * mem);
    }

    /// Free at cluster scope (millicores, bytes) and on the freest node.
    fn free(&self) -> [i64; 4] {
        let n = self.per_node.iter();
        [
            n.clone().map(|p| NODE_CPU_M - p.0).sum(),
            n.clone().map(|p| NODE_MEM - p.1).sum(),
            n.clone().map(|p| NODE_CPU_M - p.0).max().unwrap_or(0),
            n.map(|p| NODE_MEM - p.1).max().unwrap_or(0),
        ]
    }

    /// The agent's range flags. The cluster scopes are centred on what is free now, ±10 cores
    /// and ±10 GiB, so that a point is 0.1 core or 0.1 GiB: a single pod more or less than
    /// the harness created moves the score (every pod asks for at least 110m and 144Mi).
    fn range_args(&mut self) -> Vec<String> {
        let [cpu, mem, ..] = self.free();
        let (cpu_lo, mem_lo) = (cpu / 1000 - 10, mem - (10 << 30));
        self.bounds = [
            (cpu_lo as f64, (cpu_lo + 20) as f64),
            (mem_lo as f64, (mem_lo + (20 << 30)) as f64),
        ];
        vec![
            format!("--cpu-range={cpu_lo}:{}", cpu_lo + 20),
            format!("--memory-range={mem_lo}:{}", mem_lo + (20 << 30)),
            format!("--node-cpu-range=0:{}", NODE_CPU_M / 1000),
            format!("--node-memory-range=0:{NODE_MEM}"),
        ]
    }

    /// The scores the agent should publish, normalised as it does (same `Normaliser`).
    fn scores(&self) -> Result<BTreeMap<String, i32>> {
        let [cpu, mem, cpu_node, mem_node] = self.free().map(|v| v as f64);
        let norm = |(lo, hi): (f64, f64), v: f64| -> Result<i32> {
            Ok(Normaliser::new(lo, hi)?.normalise(v))
        };
        let cores = NODE_CPU_M as f64 / 1000.0;
        Ok(BTreeMap::from([
            (
                names::CPU_CLUSTER.into(),
                norm(self.bounds[0], cpu / 1000.0)?,
            ),
            (
                names::CPU_NODE.into(),
                norm((0.0, cores), cpu_node / 1000.0)?,
            ),
            (names::MEM_CLUSTER.into(), norm(self.bounds[1], mem)?),
            (
                names::MEM_NODE.into(),
                norm((0.0, NODE_MEM as f64), mem_node)?,
            ),
        ]))
    }
}

fn node_body(n: usize) -> Value {
    let name = node_name(n);
    let zone = ["a", "b", "c"][n % 3];
    let images: Vec<Value> = (0..25)
        .map(|k| {
            json!({
                "names": [
                    format!("registry.example.com/platform/image-{k}@sha256:{:064x}", mix(k) as u128 * 31),
                    format!("registry.example.com/platform/image-{k}:v1.{k}.0"),
                ],
                "sizeBytes": 10_000_000 + k * 7_340_033,
            })
        })
        .collect();
    let condition = |t: &str, s: &str, reason: &str| {
        json!({ "type": t, "status": s, "reason": reason, "message": format!("kubelet reports {reason}"),
                "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z" })
    };
    let resources = json!({ "cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "95551679124" });
    json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.8xlarge", "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": format!("eu-west-1{zone}"), "node-role.kubernetes.io/worker": "",
                "nodepool.example.com/name": format!("general-{}", n % 4),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": { "providerID": format!("aws:///eu-west-1{zone}/i-{:017x}", mix(n as u64) >> 4) },
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "addresses": [{ "type": "InternalIP", "address": format!("10.{}.{}.{}", n / 65536, (n / 256) % 256, n % 256) },
                          { "type": "Hostname", "address": name }],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
            "nodeInfo": { "machineID": format!("{:032x}", mix(n as u64)), "systemUUID": format!("{:032x}", mix(n as u64 + 1)),
                          "bootID": format!("{:032x}", mix(n as u64 + 2)), "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                          "osImage": "Amazon Linux 2023", "containerRuntimeVersion": "containerd://1.7.22",
                          "kubeletVersion": "v1.34.1", "kubeProxyVersion": "v1.34.1", "operatingSystem": "linux", "architecture": "amd64" },
            "images": images,
        },
    })
}

fn container_body(c: &Req, app: &str, env: bool) -> Value {
    let (name, cpu, mem) = *c;
    let mut v = json!({
        "name": name,
        "image": format!("registry.example.com/team-{app}/{name}:v2.{}.{}@sha256:{:016x}{:016x}", cpu % 17, mem % 13, mix(cpu as u64), mix(mem as u64)),
        "imagePullPolicy": "IfNotPresent",
        "args": [format!("--config=/etc/{name}/config.yaml"), "--log-format=json", format!("--port={}", 8000 + cpu % 1000)],
        "ports": [{ "name": "http", "containerPort": 8080, "protocol": "TCP" }, { "name": "metrics", "containerPort": 9090, "protocol": "TCP" }],
        "resources": {
            "requests": { "cpu": format!("{cpu}m"), "memory": format!("{mem}Mi") },
            "limits": { "cpu": format!("{}m", cpu * 2), "memory": format!("{mem}Mi") },
        },
        "volumeMounts": [
            { "name": "config", "mountPath": format!("/etc/{name}"), "readOnly": true },
            { "name": "tmp", "mountPath": "/tmp" },
            { "name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true },
        ],
        "securityContext": { "runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
                             "readOnlyRootFilesystem": true, "capabilities": { "drop": ["ALL"] } },
    });
    if env {
        let field = |p: &str| json!({ "fieldRef": { "apiVersion": "v1", "fieldPath": p } });
        v["env"] = json!([
            { "name": "POD_NAME", "valueFrom": field("metadata.name") },
            { "name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace") },
            { "name": "NODE_NAME", "valueFrom": field("spec.nodeName") },
            { "name": "POD_IP", "valueFrom": field("status.podIP") },
            { "name": "GOMAXPROCS", "valueFrom": { "resourceFieldRef": { "containerName": name, "resource": "limits.cpu", "divisor": "1" } } },
            { "name": "LOG_LEVEL", "value": "info" },
            { "name": "DATABASE_URL", "value": format!("postgres://{app}@{app}-db.{app}.svc.cluster.local:5432/{app}?sslmode=verify-full") },
            { "name": "REDIS_ADDR", "value": "redis-master.cache.svc.cluster.local:6379" },
            { "name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability.svc.cluster.local:4317" },
            { "name": "OTEL_SERVICE_NAME", "value": app },
            { "name": "FEATURE_FLAGS", "value": "new-checkout=true,async-billing=false,cache-v2=true" },
            { "name": "API_TOKEN", "valueFrom": { "secretKeyRef": { "name": format!("{app}-secrets"), "key": "api-token" } } },
        ]);
        v["livenessProbe"] = json!({ "httpGet": { "path": "/healthz", "port": "http", "scheme": "HTTP" },
                                      "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3 });
        v["readinessProbe"] = json!({ "httpGet": { "path": "/readyz", "port": "http", "scheme": "HTTP" },
                                       "periodSeconds": 5, "timeoutSeconds": 1, "failureThreshold": 3 });
    }
    v
}

fn pod_body(name: &str, ns: &str, node: &str, profile: usize) -> Value {
    let p = &PROFILES[profile];
    let hash = format!("{:010x}", mix(profile as u64 + ns.len() as u64) >> 24);
    let containers: Vec<Value> = p
        .containers
        .iter()
        .enumerate()
        .map(|(k, c)| container_body(c, p.app, k == 0))
        .collect();
    let init: Vec<Value> = p
        .init
        .iter()
        .map(|(c, sidecar)| {
            let mut v = container_body(c, p.app, false);
            if *sidecar {
                v["restartPolicy"] = json!("Always");
            }
            v
        })
        .collect();
    json!({
        "metadata": {
            "name": name, "namespace": ns,
            "labels": {
                "app.kubernetes.io/name": p.app, "app.kubernetes.io/instance": format!("{}-{ns}", p.app),
                "app.kubernetes.io/version": "2.14.3", "app.kubernetes.io/component": "backend",
                "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": format!("{}-2.14.3", p.app), "pod-template-hash": hash,
                "team": format!("team-{}", p.app), "security.istio.io/tlsMode": "istio",
            },
            "annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": "9090", "prometheus.io/path": "/metrics",
                "kubectl.kubernetes.io/default-container": p.containers[0].0,
                "checksum/config": format!("{:016x}{:016x}{:016x}{:016x}", mix(1), mix(2), mix(3), mix(profile as u64)),
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
            },
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{}-{hash}", p.app),
                                  "uid": format!("6f1c2d3e-{:04x}-4a5b-8c9d-{:012x}", profile, mix(ns.len() as u64) >> 16),
                                  "controller": true, "blockOwnerDeletion": true }],
        },
        "spec": {
            "nodeName": node,
            "containers": containers,
            "initContainers": init,
            "volumes": [
                { "name": "config", "configMap": { "name": format!("{}-config", p.app), "defaultMode": 420 } },
                { "name": "tmp", "emptyDir": { "sizeLimit": "1Gi" } },
                { "name": "kube-api-access", "projected": { "defaultMode": 420, "sources": [
                    { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
                    { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                    { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } },
                ] } },
            ],
            "serviceAccountName": p.app,
            "securityContext": { "fsGroup": 65532, "seccompProfile": { "type": "RuntimeDefault" } },
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
                { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
            ],
            "topologySpreadConstraints": [{ "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                                            "labelSelector": { "matchLabels": { "app.kubernetes.io/name": p.app } } }],
        },
    })
}

// ---------------------------------------------------------------------------------------------
// The run

async fn run(args: &Args) -> Result<String> {
    if args.nodes == 0 || args.namespaces == 0 {
        return Err("--nodes and --namespaces must be at least 1".into());
    }
    let bin = agent_binary(args.no_build)?;
    let work = std::env::temp_dir().join(format!("agent-scale-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    eprintln!("work dir (kubeconfig, agent log): {}", work.display());
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let t = Instant::now();
    let cp = testenv::ControlPlane::start(testenv::Options::default().with_upstream_crds()).await?;
    let cp_time = t.elapsed();
    let kubeconfig = work.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig)?;
    let client = cp.client()?;
    let [etcd_pid, apiserver_pid] = cp.pids();

    let namespaces: Vec<String> = (0..args.namespaces)
        .map(|k| format!("shop-{k:02}"))
        .collect();
    for ns in namespaces
        .iter()
        .map(String::as_str)
        .chain([CLUSTER, CHURN_NS])
    {
        let body: Namespace = serde_json::from_value(json!({ "metadata": { "name": ns } }))?;
        let (api, pp) = (Api::<Namespace>::all(client.clone()), PostParams::default());
        retry(|| api.create(&pp, &body)).await?;
    }

    eprintln!("creating {} nodes", args.nodes);
    let t = Instant::now();
    let nodes_api = Api::<Node>::all(client.clone());
    let mut results = futures::stream::iter(0..args.nodes)
        .map(|n| create_node(&nodes_api, n))
        .buffer_unordered(args.concurrency);
    while let Some(r) = results.next().await {
        r?;
    }
    drop(results);
    let node_time = t.elapsed();

    eprintln!(
        "creating {} pods in {} namespaces",
        args.pods, args.namespaces
    );
    let t = Instant::now();
    let mut expected = Expected {
        per_node: vec![(0, 0); args.nodes],
        bounds: [(0.0, 1.0); 2],
    };
    let done = AtomicU64::new(0);
    let mut results = futures::stream::iter(0..args.pods)
        .map(|i| {
            let (client, ns, done) = (client.clone(), &namespaces[i % args.namespaces], &done);
            async move {
                let profile = profile_of(i);
                let name = format!("{}-{:06}", PROFILES[profile].app, i);
                let body = pod_body(&name, ns, &node_name(i % args.nodes), profile);
                create_pod(&client, ns, body).await?;
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if d % 5000 == 0 {
                    eprintln!("  {d} pods ({:.0}/s)", d as f64 / t.elapsed().as_secs_f64());
                }
                Ok::<_, BoxError>(i)
            }
        })
        .buffer_unordered(args.concurrency);
    while let Some(r) = results.next().await {
        let i = r?;
        expected.add(i % args.nodes, profile_of(i), 1);
    }
    drop(results);
    let pod_time = t.elapsed();
    let pod_size = sample_size(Api::<Pod>::namespaced(client.clone(), &namespaces[0])).await;
    let node_size = sample_size(nodes_api).await;
    let apiserver_rss_fleet = procfs::status_bytes(apiserver_pid, "VmRSS");

    // The agent, and the first scores.
    let ranges = expected.range_args();
    let want = expected.scores()?;
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut agent_args = vec![
        "run".to_string(),
        format!("--hub-kubeconfig={}", kubeconfig.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cluster-name={CLUSTER}"),
        "--addon-namespace=default".into(),
        "--health-lease=false".into(),
        format!("--metrics-bind-address={metrics}"),
        format!("--refresh-period={}", args.refresh_period.as_secs_f64()),
        format!("--debounce={}", args.debounce.as_secs_f64()),
        "--log-level=info".into(),
    ];
    agent_args.extend(ranges.iter().cloned());
    agent_args.extend(args.agent_args.iter().cloned());
    eprintln!("starting the agent; waiting for scores {want:?}");
    let mut agent = Agent::start(
        &bin,
        &agent_args,
        &args.agent_env,
        work.join("agent.log"),
        metrics,
    )?;
    let t = Instant::now();
    let scores_api = Api::<AddOnPlacementScore>::namespaced(client.clone(), CLUSTER);
    let first = wait_scores(&scores_api, &mut agent, &want, args.timeout).await?;
    let (first_time, first_cpu) = (t.elapsed(), procfs::cpu_time(agent.pid));
    let hwm_first = procfs::status_bytes(agent.pid, "VmHWM");
    let rss_first = procfs::status_bytes(agent.pid, "VmRSS");

    // Steady window with churn.
    eprintln!(
        "steady window: {:?} with {} pods/s churn",
        args.steady, args.churn
    );
    let m0 = agent.metrics().await?;
    let (cpu0, api_cpu0, etcd_cpu0, busy0) = (
        procfs::cpu_time(agent.pid),
        procfs::cpu_time(apiserver_pid),
        procfs::cpu_time(etcd_pid),
        procfs::machine_busy(),
    );
    let churn = Churn::start(client.clone(), args.churn, args.nodes);
    let window = Instant::now();
    let mut rss = Vec::new();
    let mut api_rss = Vec::new();
    while window.elapsed() < args.steady {
        tokio::time::sleep(Duration::from_secs(1)).await;
        agent.check_alive()?;
        rss.push(procfs::status_bytes(agent.pid, "VmRSS"));
        api_rss.push(procfs::status_bytes(apiserver_pid, "VmRSS"));
    }
    let wall = window.elapsed();
    let (cpu1, api_cpu1, etcd_cpu1, busy1) = (
        procfs::cpu_time(agent.pid),
        procfs::cpu_time(apiserver_pid),
        procfs::cpu_time(etcd_pid),
        procfs::machine_busy(),
    );
    let m1 = agent.metrics().await?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid)).unwrap_or_default();
    let churned = churn.stop().await;

    // Churn over and its pods deleted: the scores must match again (counting any pod whose
    // deletion failed).
    for (node, profile) in churned.live.values() {
        expected.add(*node, *profile, 1);
    }
    // Past the debounce, so that the last recompute saw every change.
    tokio::time::sleep(args.debounce + Duration::from_secs(2)).await;
    let want_final = expected.scores()?;
    let last = wait_scores(&scores_api, &mut agent, &want_final, args.timeout).await?;
    let hwm = procfs::status_bytes(agent.pid, "VmHWM");
    let m_end = agent.metrics().await?;
    let probe = if args.heap_probe {
        let (held, used) = heap_probe(agent.pid, &agent.log)?;
        let rss = procfs::status_bytes(agent.pid, "VmRSS");
        let anon = procfs::status_bytes(agent.pid, "RssAnon");
        Some(format!(
            "{} / {} ; {} / {}",
            mb(used),
            mb(held),
            mb(rss),
            mb(anon)
        ))
    } else {
        None
    };
    drop(agent);

    // The report.
    let delta = |name: &str, labels: &str| metric(&m1, name, labels) - metric(&m0, name, labels);
    let computes = delta("score_provider_computes_total", "result=\"ok\"");
    let c_sum = delta("score_provider_compute_duration_seconds_sum", "");
    let c_count = delta("score_provider_compute_duration_seconds_count", "");
    let hist: Vec<(f64, f64)> = (buckets(&m1).into_iter().zip(buckets(&m0)))
        .map(|((le, a), (_, b))| (le, a - b))
        .collect();
    let quantile = |q: f64| {
        let hit = hist
            .iter()
            .find(|(_, c)| c_count > 0.0 && *c >= q * c_count);
        hit.map_or("-".into(), |(le, _)| format!("≤ {}", ms_f(*le)))
    };
    let writes: Vec<String> = [
        "created",
        "updated",
        "unchanged",
        "refused",
        "hub_unavailable",
    ]
    .iter()
    .map(|r| {
        (
            r,
            delta("score_provider_writes_total", &format!("result=\"{r}\"")),
        )
    })
    .filter(|(_, v)| *v > 0.0)
    .map(|(r, v)| format!("{v:.0} {r}"))
    .collect();
    let all_count = metric(&m_end, "score_provider_compute_duration_seconds_count", "");
    let all_sum = metric(&m_end, "score_provider_compute_duration_seconds_sum", "");
    let mut sorted = rss.clone();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    let max = sorted.last().copied().unwrap_or(0);
    let secs = wall.as_secs_f64();
    let (agent_cpu, api_cpu, etcd_cpu) = (cpu1 - cpu0, api_cpu1 - api_cpu0, etcd_cpu1 - etcd_cpu0);
    let others = (busy1 - busy0).saturating_sub(agent_cpu + api_cpu + etcd_cpu);
    let verdict = |ok: bool| if ok { "✅" } else { "❌" };
    let field = |text: &str, key: &str| procfs::field_bytes(text, key).map_or("-".into(), mb);
    let profiles: Vec<String> = (PROFILES.iter().map(|p| (p.app, p.effective())))
        .map(|(app, (c, m))| format!("{app} {c}m/{}Mi", m / MI))
        .collect();
    let probe = probe.map_or(String::new(), |p| {
        format!("| glibc heap in use / held (`malloc_stats`); VmRSS / RssAnon after `malloc_trim(0)` | {p} | |\n")
    });
    let c_mean = mean(c_sum, c_count);
    Ok(format!(
        "## resource-usage agent: {nodes} nodes, {pods} pods

Machine: {cores} cores, load average before the run `{load}`; etcd and kube-apiserver (testenv) on the same machine. Agent `{bin}` with `--refresh-period={refresh:?} --debounce={debounce:?}`, extra arguments {extra:?}, environment {env:?}. Steady window {steady:?}.

| measure | value | target |
|---|---|---|
| time to first scores (spawn → initial list of nodes and pods → index → score object written, read back and matching); agent CPU in that time | {first_t}; {first_cpu} | |
| VmRSS, steady window (median / max of {n} samples) | {rss_med} / {rss_max} | < 50 MB {rss_ok} |
| VmRSS right after the first scores | {rss_first} | |
| VmHWM (peak RSS): after the first scores / whole run | {hwm_first} / {hwm} | |
| RssAnon / RssFile at the end of the window | {anon} / {file} | |
{probe}| one recompute, steady window: mean (`_sum / _count`) | {c_mean} over {c_count:.0} | < 50 ms {c_ok} |
| one recompute, steady window: p50 / p99 / max (histogram bucket upper bounds) | {p50} / {p99} / {pmax} | |
| one recompute over the agent's life: mean | {all_mean} over {all_count:.0} | |
| recomputes (ok) / writes, steady window | {computes:.0} ({compute_rate:.2}/s) / {writes} | |
| pod / node changes the agent saw, steady window | {pod_changes:.0} / {node_changes:.0} | |
| agent CPU, steady window | {agent_cpu} ({agent_pct:.2}% of one core) | |
| churn, steady window | {created} created, {deleted} deleted, {failed} failed ({churn_rate:.1}/s) | |
| CPU in the steady window: kube-apiserver / etcd / everything else (this harness, other builds) | {api_cpu} / {etcd_cpu} / {others} (of {secs:.0} s × {cores} cores) | |
| kube-apiserver VmRSS: after creating the fleet / max in the window | {api_fleet} / {api_max} | |
| churn stopped and its {cleaned} remaining pods deleted; debounce + 2 s later, scores match the harness's expectation | yes ({live} churn pods could not be deleted) | |

Setup: control plane {cp_t}; {nodes} nodes in {node_t} ({node_rate:.0}/s, 3 requests each); {pods} pods in {pod_t} ({pod_rate:.0}/s), concurrency {conc}. Objects as served (JSON incl. managedFields): pod ≈ {pod_kb} ({pod_mf} of it managedFields), node ≈ {node_kb} ({node_mf}). Pod profiles (effective requests): {profiles}. The cluster-scope ranges given to the agent are centred on the free amounts the harness expects (`{ranges}`): one point is 0.1 core or 0.1 GiB, so a single pod more or less than created would show; node scope is 0 to one node's allocatable.

First scores: {first}.  
Final scores: {last}.
",
        nodes = args.nodes,
        pods = args.pods,
        cores = std::thread::available_parallelism().map_or(0, |n| n.get()),
        load = load_before.trim(),
        bin = bin.display(),
        refresh = args.refresh_period,
        debounce = args.debounce,
        extra = args.agent_args,
        env = args.agent_env,
        steady = args.steady,
        first_t = secs_f(first_time),
        first_cpu = secs_f(first_cpu),
        n = rss.len(),
        rss_med = mb(median),
        rss_max = mb(max),
        rss_ok = verdict(max < 50_000_000),
        rss_first = mb(rss_first),
        hwm_first = mb(hwm_first),
        hwm = mb(hwm),
        anon = field(&status, "RssAnon"),
        file = field(&status, "RssFile"),
        c_mean = ms_f(c_mean),
        c_ok = verdict(c_count > 0.0 && c_mean < 0.05),
        p50 = quantile(0.5),
        p99 = quantile(0.99),
        pmax = quantile(1.0),
        all_mean = ms_f(mean(all_sum, all_count)),
        compute_rate = computes / secs,
        writes = if writes.is_empty() { "none".into() } else { writes.join(", ") },
        pod_changes = delta(CHANGES, "what=\"pod\""),
        node_changes = delta(CHANGES, "what=\"node\""),
        agent_pct = 100.0 * agent_cpu.as_secs_f64() / secs,
        agent_cpu = secs_f(agent_cpu),
        created = churned.created,
        deleted = churned.deleted,
        failed = churned.failed,
        churn_rate = churned.created as f64 / secs,
        api_cpu = secs_f(api_cpu),
        etcd_cpu = secs_f(etcd_cpu),
        others = secs_f(others),
        api_fleet = mb(apiserver_rss_fleet),
        api_max = mb(api_rss.iter().copied().max().unwrap_or(0)),
        live = churned.live.len(),
        cleaned = churned.cleaned,
        ranges = ranges.join(" "),
        cp_t = secs_f(cp_time),
        node_t = secs_f(node_time),
        node_rate = args.nodes as f64 / node_time.as_secs_f64(),
        pod_t = secs_f(pod_time),
        pod_rate = args.pods as f64 / pod_time.as_secs_f64(),
        conc = args.concurrency,
        pod_kb = kb(pod_size.0),
        pod_mf = kb(pod_size.1),
        node_kb = kb(node_size.0),
        node_mf = kb(node_size.1),
        profiles = profiles.join(", "),
        first = fmt_scores(&first),
        last = fmt_scores(&last),
    ))
}

fn mean(sum: f64, count: f64) -> f64 {
    if count > 0.0 { sum / count } else { 0.0 }
}

async fn create_node(api: &Api<Node>, n: usize) -> Result<()> {
    let body = node_body(n);
    let node: Node = serde_json::from_value(body.clone())?;
    let name = node_name(n);
    let (pp, patch) = (PostParams::default(), PatchParams::default());
    retry(|| api.create(&pp, &node)).await?;
    let status = Patch::Merge(json!({ "status": body["status"] }));
    retry(|| api.patch_status(&name, &patch, &status)).await?;
    // Admission taints every new node not-ready; the node lifecycle controller (absent here)
    // would remove it once the kubelet reports Ready.
    let taints = Patch::Merge(json!({ "spec": { "taints": [] } }));
    retry(|| api.patch(&name, &patch, &taints)).await?;
    Ok(())
}

async fn create_pod(client: &Client, ns: &str, body: Value) -> Result<()> {
    let pod: Pod = serde_json::from_value(body)?;
    let (api, pp) = (
        Api::<Pod>::namespaced(client.clone(), ns),
        PostParams::default(),
    );
    retry(|| api.create(&pp, &pod)).await?;
    Ok(())
}

/// The JSON size of the first object `api` lists, as the apiserver serves it, and the size
/// of its managedFields.
async fn sample_size<K>(api: Api<K>) -> (usize, usize)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Ok(list) = api.list(&kube::api::ListParams::default().limit(1)).await else {
        return (0, 0);
    };
    let Some(o) = list.items.first() else {
        return (0, 0);
    };
    let len = |v: serde_json::Result<Vec<u8>>| v.map_or(0, |v| v.len());
    (
        len(serde_json::to_vec(o)),
        len(serde_json::to_vec(&o.meta().managed_fields)),
    )
}

/// Polls the score object until its cpu/mem items equal `want`; errors if the agent exits or
/// `limit` passes (with what it saw last).
async fn wait_scores(
    api: &Api<AddOnPlacementScore>,
    agent: &mut Agent,
    want: &BTreeMap<String, i32>,
    limit: Duration,
) -> Result<BTreeMap<String, i32>> {
    let start = Instant::now();
    let mut seen = BTreeMap::new();
    loop {
        agent.check_alive()?;
        if let Ok(Some(s)) = api.get_opt(RESOURCE_USAGE_SCORE).await {
            seen = s
                .status
                .map(|st| st.scores.into_iter().map(|i| (i.name, i.value)).collect())
                .unwrap_or_default();
            if want.iter().all(|(k, v)| seen.get(k) == Some(v)) {
                return Ok(seen);
            }
        }
        if start.elapsed() > limit {
            return Err(format!("no matching scores within {limit:?}: want {want:?}, last seen {seen:?}; agent log {}", agent.log.display()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn fmt_scores(s: &BTreeMap<String, i32>) -> String {
    s.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Churn: bound pods created and deleted at a steady rate

struct Churn {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Churned>,
}

#[derive(Default)]
struct Churned {
    created: u64,
    deleted: u64,
    failed: u64,
    /// Deleted after the window.
    cleaned: u64,
    /// The churn pods that exist: name → (node, profile).
    live: BTreeMap<String, (usize, usize)>,
}

/// Deletes a bound pod at once (no kubelet here to finish a graceful deletion).
async fn delete_pod(api: &Api<Pod>, name: &str) -> bool {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    retry(|| api.delete(name, &dp)).await.is_ok()
}

impl Churn {
    /// About `rate` creates and (once 100 churn pods exist) as many deletes a second.
    fn start(client: Client, rate: f64, nodes: usize) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let state = Arc::new(Mutex::new(Churned::default()));
            let api = Api::<Pod>::namespaced(client.clone(), CHURN_NS);
            let permits = Arc::new(tokio::sync::Semaphore::new(16));
            let mut queue = VecDeque::new();
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seq = 0usize;
            while !flag.load(Ordering::Relaxed) {
                tick.tick().await;
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                seq += 1;
                let (name, node, profile) = (
                    format!("churn-{seq:06}"),
                    (seq * 7919) % nodes,
                    profile_of(seq),
                );
                let victim = (queue.len() >= 100).then(|| queue.pop_front()).flatten();
                queue.push_back(name.clone());
                let (api, client, state) = (api.clone(), client.clone(), state.clone());
                tokio::spawn(async move {
                    let body = pod_body(&name, CHURN_NS, &node_name(node), profile);
                    let created = create_pod(&client, CHURN_NS, body).await.is_ok();
                    let deleted = match victim {
                        Some(v) => Some((delete_pod(&api, &v).await, v)),
                        None => None,
                    };
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    if created {
                        s.created += 1;
                        s.live.insert(name, (node, profile));
                    } else {
                        s.failed += 1;
                    }
                    if let Some((ok, v)) = deleted {
                        if ok {
                            s.deleted += 1;
                            s.live.remove(&v);
                        } else {
                            s.failed += 1;
                        }
                    }
                    drop(permit);
                });
            }
            // Wait for the requests in flight, then delete what is left: back to the fleet the
            // first scores were checked against.
            let _ = permits.acquire_many(16).await;
            let mut s = std::mem::take(&mut *state.lock().unwrap_or_else(|e| e.into_inner()));
            let left: Vec<String> = s.live.keys().cloned().collect();
            let mut gone = futures::stream::iter(left)
                .map(|name| async { (delete_pod(&api, &name).await, name) })
                .buffer_unordered(16);
            while let Some((ok, name)) = gone.next().await {
                if ok {
                    s.live.remove(&name);
                    s.cleaned += 1;
                }
            }
            drop(gone);
            s
        });
        Churn { stop, task }
    }

    async fn stop(self) -> Churned {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// The agent process

/// `target/<profile>/resource-usage-agent` next to this example, built first (in the same
/// profile) unless told not to.
fn agent_binary(no_build: bool) -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = (exe.parent().and_then(Path::parent))
        .ok_or_else(|| format!("unexpected executable path {}", exe.display()))?;
    let profile = dir.file_name().map_or("".into(), |s| s.to_string_lossy());
    if profile != "release" {
        eprintln!(
            "warning: this is a {profile:?} build, so is the agent it measures: use --release"
        );
    }
    if !no_build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let profile = if profile == "debug" {
            "dev".into()
        } else {
            profile
        };
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-p",
            "resource-usage-agent",
            "--bin",
            "resource-usage-agent",
        ])
        .args(["--profile", &profile])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
        eprintln!("building the agent: {cmd:?}");
        let status = (cmd.status())
            .map_err(|e| format!("cannot run cargo (pass --no-build to skip): {e}"))?;
        if !status.success() {
            return Err(format!("cargo build of resource-usage-agent failed ({status})").into());
        }
    }
    let bin = dir.join("resource-usage-agent");
    if !bin.is_file() {
        return Err(format!("{} is missing: build it first", bin.display()).into());
    }
    Ok(bin)
}

/// The agent as a child process; killed and reaped on drop.
struct Agent {
    child: Child,
    pid: u32,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start(
        bin: &Path,
        args: &[String],
        env: &[String],
        log: PathBuf,
        metrics: SocketAddr,
    ) -> Result<Agent> {
        let setpriv = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("setpriv"))
                .find(|p| p.is_file())
        });
        let mut cmd = match setpriv {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        // Only what we pass: no KUBECONFIG, CLUSTER_NAME, ... from the caller's shell.
        cmd.env_clear();
        for kv in env {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--agent-env {kv:?}: not KEY=VALUE"))?;
            cmd.env(k, v);
        }
        let out =
            std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        // With setpriv the pid is setpriv's, which execs the agent: the same process.
        Ok(Agent {
            pid: child.id(),
            child,
            metrics,
            log,
        })
    }

    fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                Err(format!(
                    "the agent exited ({status}); last lines of {}:\n{tail}",
                    self.log.display()
                )
                .into())
            }
            Err(e) => Err(format!("cannot check the agent: {e}").into()),
        }
    }

    /// `/metrics` as text.
    async fn metrics(&self) -> Result<String> {
        match testenv::http::get(self.metrics, "/metrics").await? {
            (200, body) => Ok(body),
            (status, _) => Err(format!("agent /metrics answered {status}").into()),
        }
    }
}

/// glibc's totals for the agent's heap (held from the system, in use), from `malloc_stats()`
/// called through gdb (it prints to the agent's stderr, i.e. its log); then `malloc_trim(0)`.
fn heap_probe(pid: u32, log: &Path) -> Result<(u64, u64)> {
    let skip = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
    let out = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-nx"])
        .args([
            "-ex",
            "call (void)malloc_stats()",
            "-ex",
            "call (int)malloc_trim(0)",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("--heap-probe needs gdb: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("gdb failed ({}): {err}", out.status).into());
    }
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let total = text
        .get(skip..)
        .and_then(|t| t.split("Total (incl. mmap):").nth(1))
        .ok_or("no malloc_stats() output in the agent's log (not glibc?)")?;
    let value = |key: &str| -> Option<u64> {
        let line = total.lines().find(|l| l.trim_start().starts_with(key))?;
        line.split('=').nth(1)?.trim().parse().ok()
    };
    match (value("system bytes"), value("in use bytes")) {
        (Some(held), Some(used)) => Ok((held, used)),
        _ => Err("cannot read malloc_stats() totals".into()),
    }
}

fn free_port() -> Result<u16> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("pick a free port: {e}"))?;
    Ok(l.local_addr()?.port())
}

/// Retries an API call on throttling, server errors and connection failures.
async fn retry<T, F, Fut>(mut f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(50);
    let mut attempt = 0;
    loop {
        match f().await {
            Err(kube::Error::Api(s)) if attempt < 8 && (s.code == 429 || s.code >= 500) => {}
            Err(kube::Error::HyperError(_) | kube::Error::Service(_)) if attempt < 8 => {}
            other => return other,
        }
        attempt += 1;
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus text

/// The value of series `name` whose labels contain `labels` (`""`: the unlabelled series).
fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, ls) = series.split_once('{').unwrap_or((series, ""));
            (n == name && ls.contains(labels)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// The compute histogram's cumulative buckets: (upper bound, count).
fn buckets(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("score_provider_compute_duration_seconds_bucket{le=\"")?;
            let (le, rest) = rest.split_once('"')?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.rsplit_once(' ')?.1.parse().ok()?))
        })
        .collect()
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn kb(bytes: usize) -> String {
    format!("{:.1} KB", bytes as f64 / 1e3)
}

fn secs_f(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ms_f(secs: f64) -> String {
    if secs.is_infinite() {
        "+Inf".into()
    } else {
        format!("{:.3} ms", secs * 1e3)
    }
}
