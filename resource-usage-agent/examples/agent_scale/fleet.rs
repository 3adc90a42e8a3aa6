//! The fleet: the nodes and pods the harness creates, and the scores it expects the agent to
//! compute from them.

use super::*;

/// A container's requests: millicores and MiB.
pub(crate) type Req = (&'static str, i64, i64);

/// A pod shape: regular containers, then init containers (`true`: a native sidecar).
pub(crate) struct Profile {
    pub(crate) app: &'static str,
    pub(crate) containers: [Req; 2],
    pub(crate) init: &'static [(Req, bool)],
}

pub(crate) const PROFILES: [Profile; 4] = [
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
    pub(crate) fn effective(&self) -> (i64, i64) {
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
pub(crate) fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(crate) fn profile_of(i: usize) -> usize {
    (mix(i as u64) % PROFILES.len() as u64) as usize
}

pub(crate) fn node_name(n: usize) -> String {
    format!(
        "ip-10-{}-{}-{}.eu-west-1.compute.internal",
        n / 65536,
        (n / 256) % 256,
        n % 256
    )
}

/// The requests bound to each node, and the scores they should give.
pub(crate) struct Expected {
    pub(crate) per_node: Vec<(i64, i64)>,
    /// The cluster-scope bounds (cores, bytes) given to the agent.
    pub(crate) bounds: [(f64, f64); 2],
}

impl Expected {
    pub(crate) fn add(&mut self, node: usize, profile: usize, sign: i64) {
        let (cpu, mem) = PROFILES[profile].effective();
        let n = &mut self.per_node[node];
        *n = (n.0 + sign * cpu, n.1 + sign * mem);
    }

    /// Free at cluster scope (millicores, bytes) and on the freest node.
    pub(crate) fn free(&self) -> [i64; 4] {
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
    pub(crate) fn range_args(&mut self) -> Vec<String> {
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
    pub(crate) fn scores(&self) -> Result<BTreeMap<String, i32>> {
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

pub(crate) fn node_body(n: usize) -> Value {
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

pub(crate) fn container_body(c: &Req, app: &str, env: bool) -> Value {
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

pub(crate) fn pod_body(name: &str, ns: &str, node: &str, profile: usize) -> Value {
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

pub(crate) async fn create_node(api: &Api<Node>, n: usize) -> Result<()> {
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

pub(crate) async fn create_pod(client: &Client, ns: &str, body: Value) -> Result<()> {
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
pub(crate) async fn sample_size<K>(api: Api<K>) -> (usize, usize)
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
