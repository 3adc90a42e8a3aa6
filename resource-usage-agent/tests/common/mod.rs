//! A managed cluster and a hub for agent tests, on real apiservers: per test, a cluster
//! namespace on the hub and an agent namespace on the managed cluster, the shipped RBAC
//! manifests applied for the agent's two identities, kubeconfigs that act as those identities,
//! nodes labelled for this test only (the agent's `--node-selector` keeps tests apart), and the
//! agent binary as a child process.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use ocm_api::{AddOnPlacementScore, AddOnPlacementScoreStatus};
use serde_json::{Value, json};
use testenv::ControlPlane;

pub const DEADLINE: Duration = Duration::from_secs(60);

pub use testenv::eventually;

/// The agent's identities and files for one test.
pub struct Setup {
    /// The cluster's name: its namespace on the hub.
    pub cluster: String,
    /// The agent's namespace on the managed cluster.
    pub agent_ns: String,
    /// The add-on's name (unique per test: it names cluster-scoped RBAC objects).
    pub addon: String,
    /// The label value this test's nodes carry under `test.ocm-placement.io/fleet`.
    pub fleet: String,
    pub dir: PathBuf,
    pub hub_kubeconfig: PathBuf,
    pub managed_kubeconfig: PathBuf,
}

pub const FLEET_LABEL: &str = "test.ocm-placement.io/fleet";

/// `(file, template)` of the agent's managed-cluster RBAC in `addon-manifests/agent/`, in the
/// order the add-on manager's work applies them; the hub crate embeds the same files.
const AGENT_RBAC: [(&str, &str); 5] = [
    (
        "serviceaccount.yaml",
        include_str!("../../../addon-manifests/agent/serviceaccount.yaml"),
    ),
    (
        "clusterrole.yaml",
        include_str!("../../../addon-manifests/agent/clusterrole.yaml"),
    ),
    (
        "clusterrolebinding.yaml",
        include_str!("../../../addon-manifests/agent/clusterrolebinding.yaml"),
    ),
    (
        "role.yaml",
        include_str!("../../../addon-manifests/agent/role.yaml"),
    ),
    (
        "rolebinding.yaml",
        include_str!("../../../addon-manifests/agent/rolebinding.yaml"),
    ),
];

impl Setup {
    /// The agent's hub user and groups (OCM's registration subject for this add-on).
    pub fn hub_identity(&self) -> (String, Vec<String>) {
        let (c, a) = (&self.cluster, &self.addon);
        (
            format!("system:open-cluster-management:cluster:{c}:addon:{a}:agent:{a}-agent"),
            vec![
                format!("system:open-cluster-management:cluster:{c}:addon:{a}"),
                format!("system:open-cluster-management:addon:{a}"),
            ],
        )
    }

    /// The agent's service account on the managed cluster.
    pub fn managed_identity(&self) -> (String, Vec<String>) {
        (
            format!(
                "system:serviceaccount:{}:{}-agent",
                self.agent_ns, self.addon
            ),
            vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", self.agent_ns),
            ],
        )
    }

    /// The agent's managed-cluster RBAC as the add-on manager ships it, with this setup's
    /// names. (No kubelet runs the agent's Deployment; the tests run the binary as a process.)
    fn managed_rbac(&self) -> Vec<Value> {
        AGENT_RBAC
            .iter()
            .map(|(file, template)| {
                let text = template
                    .replace("{{ADDON_NAME}}", &self.addon)
                    .replace("{{INSTALL_NAMESPACE}}", &self.agent_ns);
                assert!(!text.contains("{{"), "{file}: a placeholder left");
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
            })
            .collect()
    }

    /// Namespaces and the shipped RBAC on `hub` and `managed` (may be the same control
    /// plane), and kubeconfigs acting as the agent's identities.
    pub async fn new(hub: &ControlPlane, managed: &ControlPlane, prefix: &str) -> Setup {
        let hub_admin = hub.client().expect("hub admin");
        let managed_admin = managed.client().expect("managed admin");
        let cluster = testenv::namespace(&hub_admin, prefix)
            .await
            .expect("cluster namespace");
        let agent_ns = testenv::namespace(&managed_admin, &format!("{prefix}-agent"))
            .await
            .expect("agent namespace");
        let dir = std::env::temp_dir().join(format!("agent-test-{}-{cluster}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("test dir");
        let setup = Setup {
            addon: format!("ru-{cluster}"),
            fleet: cluster.clone(),
            hub_kubeconfig: dir.join("hub.kubeconfig"),
            managed_kubeconfig: dir.join("managed.kubeconfig"),
            cluster,
            agent_ns,
            dir,
        };
        // The hub permission: the chart's agent ClusterRole, bound in the cluster namespace as
        // the add-on manager binds it.
        let role = include_str!("../../../charts/ocm-placement/files/agent-hub-rbac.yaml")
            .replace("{{ADDON}}", &setup.addon);
        testenv::apply_yaml(&hub_admin, &role, &setup.cluster)
            .await
            .expect("the agent's hub ClusterRole");
        let (user, groups) = setup.hub_identity();
        let name = format!("open-cluster-management:{}:agent", setup.addon);
        let cluster_role = format!("open-cluster-management:{}:agent-hub", setup.addon);
        apply(
            &hub_admin,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": setup.cluster},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user},
                             {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": groups[0]}]}),
        )
        .await;
        for obj in setup.managed_rbac() {
            apply(&managed_admin, obj).await;
        }
        let (user, groups) = setup.hub_identity();
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        std::fs::write(
            &setup.hub_kubeconfig,
            hub.kubeconfig(Some((&user, &groups))),
        )
        .expect("hub kubeconfig");
        let (user, groups) = setup.managed_identity();
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        std::fs::write(
            &setup.managed_kubeconfig,
            managed.kubeconfig(Some((&user, &groups))),
        )
        .expect("managed kubeconfig");
        setup
    }

    /// The agent's `run` arguments for this setup, quick timings, on a free metrics port.
    pub fn run_args(&self, metrics_port: u16) -> Vec<String> {
        vec![
            "run".into(),
            format!("--hub-kubeconfig={}", self.hub_kubeconfig.display()),
            format!("--kubeconfig={}", self.managed_kubeconfig.display()),
            format!("--cluster-name={}", self.cluster),
            format!("--addon-namespace={}", self.agent_ns),
            format!("--addon-name={}", self.addon),
            format!("--node-selector={FLEET_LABEL}={}", self.fleet),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            "--refresh-period=2s".into(),
            "--score-ttl=6s".into(),
            "--debounce=300ms".into(),
            "--hub-kubeconfig-check-interval=500ms".into(),
            "--log-level=info,score_provider=debug,resource_usage_agent=debug".into(),
        ]
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates `obj` (one of the kinds the manifests hold).
pub async fn apply(client: &Client, obj: Value) {
    async fn create<K>(client: &Client, obj: Value)
    where
        K: Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let o: K = serde_json::from_value(obj).expect("a valid object");
        Api::<K>::all(client.clone())
            .create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    async fn create_ns<K>(client: &Client, obj: Value)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .expect("a namespace")
            .to_owned();
        let o: K = serde_json::from_value(obj).expect("a valid object");
        Api::<K>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    match obj["kind"].as_str() {
        Some("ServiceAccount") => create_ns::<ServiceAccount>(client, obj).await,
        Some("ClusterRole") => create::<ClusterRole>(client, obj).await,
        Some("ClusterRoleBinding") => create::<ClusterRoleBinding>(client, obj).await,
        Some("Role") => create_ns::<Role>(client, obj).await,
        Some("RoleBinding") => create_ns::<RoleBinding>(client, obj).await,
        other => panic!("no test support for kind {other:?}"),
    }
}

/// A free port on the loopback interface (free a moment ago).
pub use testenv::free_port;

/// The agent binary as a child process, killed when dropped.
pub struct Agent {
    child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
}

impl Agent {
    pub fn spawn(args: &[String], log: &Path, metrics_port: u16) -> Agent {
        Self::spawn_with_env(args, &[], log, metrics_port)
    }

    /// [`Agent::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
        metrics_port: u16,
    ) -> Agent {
        let out = std::fs::File::create(log).expect("agent log");
        let err = out.try_clone().expect("agent log");
        let child = Command::new(env!("CARGO_BIN_EXE_resource-usage-agent"))
            .args(args)
            .envs(env.iter().copied())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start the agent");
        Agent {
            child,
            log: log.to_path_buf(),
            metrics_port,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it (SIGKILL: nothing gets a chance to clean up, like a node failure).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> Option<String> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.metrics_port));
        match testenv::http::get(addr, "/metrics").await {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    }

    /// The value of the metric line starting with `series` (name and labels), if present.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.metrics().await?;
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l[series.len()..].trim().parse().ok())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
        // A failing test shows what the agent said.
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- last lines of the agent's log ---\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// A node of this test's fleet with `allocatable` (resource name to quantity).
pub fn node(setup: &Setup, name: &str, allocatable: &[(&str, &str)], unschedulable: bool) -> Node {
    let alloc: BTreeMap<&str, &str> = allocatable.iter().copied().collect();
    serde_json::from_value(json!({
        "metadata": { "name": format!("{}-{name}", setup.fleet), "labels": { FLEET_LABEL: setup.fleet } },
        "spec": { "unschedulable": unschedulable },
        "status": { "allocatable": alloc, "capacity": alloc },
    }))
    .expect("a node")
}

/// The full name of this test's node `name`.
pub fn node_name(setup: &Setup, name: &str) -> String {
    format!("{}-{name}", setup.fleet)
}

/// Creates `node`, then plays kubelet and node lifecycle controller: writes its status (a
/// create drops it) and removes the `node.kubernetes.io/not-ready` taint that admission
/// puts on every new node (the agent leaves such nodes out until they are ready).
pub async fn create_node(client: &Client, node: &Node) {
    let api = Api::<Node>::all(client.clone());
    let created = api
        .create(&PostParams::default(), node)
        .await
        .expect("create node");
    let name = created.metadata.name.clone().expect("a name");
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": node.status })),
    )
    .await
    .expect("node status");
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "taints": taints } })),
    )
    .await
    .expect("node taints");
}

/// A container spec with these requests.
/// A container spec with these requests (extended resources such as GPUs get the same
/// limits: Kubernetes requires them equal).
pub fn container(name: &str, requests: &[(&str, &str)]) -> Value {
    let r: BTreeMap<&str, &str> = requests.iter().copied().collect();
    let limits: BTreeMap<&str, &str> = requests
        .iter()
        .copied()
        .filter(|(k, _)| k.contains('/'))
        .collect();
    json!({ "name": name, "image": "example.invalid/x", "resources": { "requests": r, "limits": limits } })
}

/// A pod bound to `node` (no scheduler here: `spec.nodeName` set at creation).
pub fn pod(name: &str, node: Option<&str>, spec_extra: Value) -> Pod {
    let mut spec = json!({ "containers": [] });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).expect("a pod")
}

pub async fn create_pod(client: &Client, ns: &str, pod: &Pod) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), pod)
        .await
        .expect("create pod");
}

pub async fn set_pod_phase(client: &Client, ns: &str, name: &str, phase: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": phase } })),
        )
        .await
        .expect("pod status");
}

/// The status of `cluster`'s score object `name` on the hub.
pub async fn score_status(
    client: &Client,
    cluster: &str,
    name: &str,
) -> Option<AddOnPlacementScoreStatus> {
    Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|o| o.status)
}

/// The scores of a status as a map.
pub fn scores_of(status: &AddOnPlacementScoreStatus) -> BTreeMap<String, i32> {
    status
        .scores
        .iter()
        .map(|i| (i.name.clone(), i.value))
        .collect()
}

/// The libfaketime preload library: `$OCM_LIBFAKETIME`, else the one `tests/faketime/build.sh`
/// recorded in `<cache root>/faketime/current`.
pub fn libfaketime() -> PathBuf {
    if let Some(p) = std::env::var_os("OCM_LIBFAKETIME") {
        return PathBuf::from(p);
    }
    let control_plane = testenv::paths::cache_root();
    let current = control_plane
        .parent()
        .unwrap_or(&control_plane)
        .join("faketime")
        .join("current");
    let text = std::fs::read_to_string(&current).unwrap_or_else(|e| {
        panic!(
            "no libfaketime ({}: {e}); run tests/faketime/build.sh (tests/run.sh does)",
            current.display()
        )
    });
    let path = PathBuf::from(text.trim_end());
    assert!(
        path.is_file(),
        "{} names {}, which is no file; run tests/faketime/build.sh",
        current.display(),
        path.display()
    );
    path
}
