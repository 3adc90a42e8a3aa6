//! A local fleet on one machine: a real hub control plane (testenv's etcd and kube-apiserver
//! with the upstream OCM CRDs) whose apiserver also plays every managed cluster (each cluster's
//! synthetic nodes carry its name in a label, and its agent counts only those), the placement
//! scheduler, the add-on manager and one resource-usage agent per cluster as local processes.
//! What the `fleet --simulated` binary runs, and what the end-to-end tests drive (cheap: a few
//! MB per cluster, so the outage and Thanos drills run three clusters).
//!
//! [`Fleet::start_real`] instead gives each cluster its own apiserver and upstream OCM's real
//! klusterlet (`testenv::ocm_agents`): registration, the ManifestWork and the add-on's
//! certificate all go through the real agents. What the `fleet` binary runs by default.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use ocm_api::{AddOnPlacementScore, ManagedCluster, PlacementDecision};
use serde_json::{Value, json};
use testenv::ControlPlane;
use testenv::ocm_agents::{OcmCluster, OcmHub};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The label that says which cluster a synthetic node belongs to.
pub const CLUSTER_LABEL: &str = "fleet.ocm-placement.io/cluster";
/// The namespace of the fleet's Placements (bound to the cluster set `fleet`).
pub const PLACEMENTS: &str = "fleet";

/// What to start.
#[derive(Clone, Debug)]
pub struct Options {
    /// Cluster name and its CPU cores (spread over two nodes of equal size).
    pub clusters: Vec<(String, u32)>,
    /// The agents' refresh period (they also react to pod changes after `debounce`).
    pub refresh: Duration,
    pub debounce: Duration,
    /// Where the three binaries are (`placement-scheduler`, `resource-usage-hub`,
    /// `resource-usage-agent`).
    pub bin_dir: PathBuf,
    /// Where the processes' logs go.
    pub log_dir: PathBuf,
    /// Run the scheduler and the manager with leader election (their Leases in
    /// [`LEASE_NAMESPACE`]), as the chart does.
    pub leader_elect: bool,
}

/// Where the scheduler's and the manager's Leases are (the flags' default).
pub const LEASE_NAMESPACE: &str = "open-cluster-management-hub";

/// The running fleet; everything stops when it is dropped.
pub struct Fleet {
    pub cp: ControlPlane,
    pub client: Client,
    pub clusters: Vec<String>,
    children: Vec<(String, Child)>,
    dir: PathBuf,
    /// Upstream's agents and each cluster's own control plane ([`Fleet::start_real`]).
    real: Option<Real>,
}

/// The managed-cluster side of [`Fleet::start_real`].
struct Real {
    /// Declared first: dropped (killed) before the clusters they talk to.
    clusters: Vec<OcmCluster>,
    #[allow(dead_code)] // held for its processes
    ocm: OcmHub,
}

/// How long the real agents may take for one step (registration, the add-on's certificate).
const REAL_STEP: Duration = Duration::from_secs(300);

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes from `cmd` what `cargo test` or `cargo run` set for this process: it describes this
/// package, and passed on to a nested `cargo build` it changes build-script inputs (ring's), so
/// every run would rebuild them.
pub fn clean_cargo_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|p| key.starts_with(p))
        {
            cmd.env_remove(key.as_ref());
        }
    }
}

/// The directory of the binaries next to the running executable (a test's `target/<profile>`),
/// building them with cargo when one is missing.
pub fn binaries(build: bool) -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().ok_or("no executable directory")?.to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    let names = [
        "placement-scheduler",
        "resource-usage-hub",
        "resource-usage-agent",
    ];
    if build || names.iter().any(|n| !dir.join(n).exists()) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.arg("build");
        clean_cargo_env(&mut cmd);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        for (pkg, bin) in [
            ("placement-scheduler", "placement-scheduler"),
            ("resource-usage-hub", "resource-usage-hub"),
            ("resource-usage-agent", "resource-usage-agent"),
        ] {
            cmd.args(["-p", pkg, "--bin", bin]);
        }
        let status = cmd.status()?;
        if !status.success() {
            return Err("building the fleet's binaries failed".into());
        }
    }
    Ok(dir)
}

impl Fleet {
    pub async fn start(opts: &Options) -> Result<Fleet, Error> {
        let mut fleet = Self::start_without_agents(opts).await?;
        fleet.spawn_agents(opts).await?;
        Ok(fleet)
    }

    /// The fleet through upstream OCM's own agents: each cluster has its own apiserver and a
    /// real klusterlet that registers it with the hub; the add-on manager ships the agent
    /// through a ManifestWork that the real work agent applies; the agent runs with the hub
    /// credentials the real registration agent obtained (`<addon>-hub-kubeconfig`), as the
    /// kubelet would run it. The add-on installs on every cluster (Placement `all`). About
    /// 400 MB per cluster; OCM's binaries are built on first use (several minutes, once).
    pub async fn start_real(opts: &Options) -> Result<Fleet, Error> {
        let mut fleet = Self::start_hub(opts, true).await?;
        fleet
            .placement("all", json!({"clusterSets": ["fleet"]}))
            .await?;
        fleet.install_addon("all").await?;
        fleet.spawn_real_agents(opts).await?;
        Ok(fleet)
    }

    /// The hub, the clusters, the scheduler and the add-on manager, but no agent: for a hub
    /// scorer to write the scores instead ([`crate::thanos`]).
    pub async fn start_without_agents(opts: &Options) -> Result<Fleet, Error> {
        Self::start_hub(opts, false).await
    }

    /// The hub, the clusters (simulated on the hub, or `real`), the scheduler and the manager.
    async fn start_hub(opts: &Options, real: bool) -> Result<Fleet, Error> {
        let cp = ControlPlane::start(testenv::Options::default().with_upstream_crds()).await?;
        let client = cp.client()?;
        let dir = std::env::temp_dir().join(format!("ocm-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(&opts.log_dir)?;
        let kubeconfig = dir.join("kubeconfig");
        cp.write_kubeconfig(&kubeconfig)?;
        let mut fleet = Fleet {
            cp,
            client: client.clone(),
            clusters: opts.clusters.iter().map(|(c, _)| c.clone()).collect(),
            children: Vec::new(),
            dir,
            real: None,
        };

        // The cluster set, its binding and the Placements' namespace.
        create(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLACEMENTS}}),
        )
        .await?;
        create(&client, json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": "fleet"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}})).await?;
        create(&client, json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "fleet", "namespace": PLACEMENTS}, "spec": {"clusterSet": "fleet"}})).await?;
        if real {
            eprintln!("starting upstream OCM's hub components (built on first use)...");
            let ocm = OcmHub::start(&fleet.cp).await?;
            // The agent's hub ClusterRole, installed by the chart and bound per cluster by the
            // manager: the agents write with their own certificates here, not as the admin.
            let role = include_str!("../../../charts/ocm-placement/files/agent-hub-rbac.yaml")
                .replace("{{ADDON}}", ocm_api::wellknown::score::RESOURCE_USAGE_ADDON);
            testenv::apply_yaml(&client, &role, PLACEMENTS).await?;
            let mut clusters = Vec::new();
            for (cluster, cores) in &opts.clusters {
                eprintln!("starting cluster {cluster}: its own apiserver and a klusterlet");
                let c = OcmCluster::start(
                    &fleet.cp,
                    &ocm,
                    cluster,
                    json!({"cluster.open-cluster-management.io/clusterset": "fleet"}),
                )
                .await?;
                let spoke = c.cp.client()?;
                crate::agents::add_nodes(&spoke, cluster, *cores).await?;
                create(&spoke, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("load-{cluster}")}})).await?;
                clusters.push(c);
            }
            fleet.real = Some(Real { clusters, ocm });
        } else {
            for (cluster, cores) in &opts.clusters {
                fleet.register(cluster, *cores).await?;
            }
        }

        if opts.leader_elect {
            create(&client, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}})).await?;
        }
        let k = kubeconfig.display().to_string();
        let elect = format!("--leader-elect={}", opts.leader_elect);
        let bin = |n: &str| opts.bin_dir.join(n);
        fleet.spawn(
            "scheduler",
            &bin("placement-scheduler"),
            &[
                "controller",
                &elect,
                "--debug-bind-address=",
                "--metrics-bind-address=127.0.0.1:0",
                &format!("--kubeconfig={k}"),
            ],
            &opts.log_dir,
        )?;
        fleet.spawn(
            "manager",
            &bin("resource-usage-hub"),
            &[
                "manager",
                &elect,
                "--agent-image=quay.io/ocm-placement/resource-usage-agent:local",
                "--metrics-bind-address=127.0.0.1:0",
                &format!("--kubeconfig={k}"),
            ],
            &opts.log_dir,
        )?;
        Ok(fleet)
    }

    /// One resource-usage agent per cluster.
    async fn spawn_agents(&mut self, opts: &Options) -> Result<(), Error> {
        let client = self.client.clone();
        let kubeconfig = self.dir.join("kubeconfig");
        let k = kubeconfig.display().to_string();
        let bin = |n: &str| opts.bin_dir.join(n);
        let fleet = self;
        // One range for every agent, so that scores compare across clusters: the biggest
        // cluster's cores.
        let biggest = opts
            .clusters
            .iter()
            .map(|(_, c)| *c)
            .max()
            .unwrap_or(1)
            .max(1);
        for (cluster, _) in &opts.clusters {
            let agents = format!("agents-{cluster}");
            create(
                &client,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": agents}}),
            )
            .await?;
            fleet.spawn(
                &format!("agent-{cluster}"),
                &bin("resource-usage-agent"),
                &[
                    "run",
                    &format!("--hub-kubeconfig={k}"),
                    &format!("--kubeconfig={k}"),
                    &format!("--cluster-name={cluster}"),
                    &format!("--addon-namespace={agents}"),
                    &format!("--node-selector={CLUSTER_LABEL}={cluster}"),
                    &format!("--cpu-range=0:{biggest}"),
                    &format!("--refresh-period={}ms", opts.refresh.as_millis()),
                    &format!("--debounce={}ms", opts.debounce.as_millis()),
                    "--metrics-bind-address=127.0.0.1:0",
                ],
                &opts.log_dir,
            )?;
        }
        Ok(())
    }

    /// Per real cluster: once the work agent has applied the agent's Deployment, plays the
    /// kubelet (rolled-out status), and once the registration agent has its hub credentials,
    /// runs the agent with them, as the Deployment's service account on the cluster.
    async fn spawn_real_agents(&mut self, opts: &Options) -> Result<(), Error> {
        let addon = ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;
        let ns = crate::agents::INSTALL_NAMESPACE;
        let name = crate::agents::agent_name(addon);
        let biggest = opts
            .clusters
            .iter()
            .map(|(_, c)| *c)
            .max()
            .unwrap_or(1)
            .max(1);
        let mut agents = Vec::new();
        for c in self
            .real
            .as_ref()
            .map(|r| r.clusters.as_slice())
            .unwrap_or_default()
        {
            let spoke = c.cp.client()?;
            let deployments = Api::<Deployment>::namespaced(spoke.clone(), ns);
            let deployment = poll(&format!("the agent's Deployment on {}", c.name), || async {
                c.check()?;
                Ok(deployments.get_opt(&name).await?)
            })
            .await?;
            crate::agents::roll_out(&spoke, &deployment).await?;
            let dir = self.dir.join(format!("hub-kubeconfig-{}", c.name));
            let hub_kubeconfig = poll(
                &format!("the add-on's hub credentials on {}", c.name),
                || crate::agents::hub_kubeconfig(&spoke, addon, ns, &dir),
            )
            .await?;
            let spoke_kubeconfig = self.dir.join(format!("spoke-{}.kubeconfig", c.name));
            std::fs::write(
                &spoke_kubeconfig,
                c.cp.kubeconfig_as_service_account(ns, &name),
            )?;
            eprintln!(
                "cluster {}: the add-on's certificate issued; starting its agent",
                c.name
            );
            agents.push((c.name.clone(), hub_kubeconfig, spoke_kubeconfig));
        }
        for (cluster, hub_kubeconfig, spoke_kubeconfig) in agents {
            self.spawn(
                &format!("agent-{cluster}"),
                &opts.bin_dir.join("resource-usage-agent"),
                &[
                    "run",
                    &format!("--hub-kubeconfig={}", hub_kubeconfig.display()),
                    &format!("--kubeconfig={}", spoke_kubeconfig.display()),
                    &format!("--cluster-name={cluster}"),
                    &format!("--addon-namespace={ns}"),
                    &format!("--cpu-range=0:{biggest}"),
                    &format!("--refresh-period={}ms", opts.refresh.as_millis()),
                    &format!("--debounce={}ms", opts.debounce.as_millis()),
                    "--metrics-bind-address=127.0.0.1:0",
                ],
                &opts.log_dir,
            )?;
        }
        Ok(())
    }

    /// The client of the apiserver where `cluster`'s nodes and pods are: its own when real,
    /// else the hub's.
    fn cluster_client(&self, cluster: &str) -> Result<Client, Error> {
        match self
            .real
            .as_ref()
            .and_then(|r| r.clusters.iter().find(|c| c.name == cluster))
        {
            Some(c) => Ok(c.cp.client()?),
            None => Ok(self.client.clone()),
        }
    }

    /// Creates the chart's built-in resource-usage ScoreDefinition filled with `def`
    /// (`testenv::scoring::builtin`), labelled `test=<its name>`, and returns the scorer flags
    /// that evaluate it alone (`--definition-selector`) at its refresh period
    /// (`--definition-min-period`): what a test passes to [`Fleet::start_scorer`].
    pub async fn builtin_definition(
        &self,
        mut def: testenv::scoring::Builtin,
    ) -> Result<Vec<String>, Error> {
        def.labels = vec![("test".into(), def.name.clone())];
        testenv::scoring::apply(&self.client, &testenv::scoring::builtin(&def)?).await?;
        Ok(vec![
            format!("--definition-selector=test={}", def.name),
            format!("--definition-min-period={}", def.refresh_period),
        ])
    }

    /// Starts the metrics-backed hub scorer (`resource-usage-hub scorer`) against
    /// `prometheus_url`, with leader election as [`Options::leader_elect`] says, and `args`
    /// (among them the flags of [`Fleet::builtin_definition`]).
    pub fn start_scorer(
        &mut self,
        opts: &Options,
        prometheus_url: &str,
        args: &[&str],
    ) -> Result<(), Error> {
        let kubeconfig = format!("--hub-kubeconfig={}", self.dir.join("kubeconfig").display());
        let url = format!("--prometheus-url={prometheus_url}");
        let elect = format!("--leader-elect={}", opts.leader_elect);
        let mut all = vec![
            "scorer",
            &elect,
            &kubeconfig,
            &url,
            "--metrics-bind-address=127.0.0.1:0",
        ];
        all.extend_from_slice(args);
        self.spawn(
            "scorer",
            &opts.bin_dir.join("resource-usage-hub"),
            &all,
            &opts.log_dir,
        )
    }

    /// A ManagedCluster, its namespace, and its two synthetic nodes.
    async fn register(&self, cluster: &str, cores: u32) -> Result<(), Error> {
        let c = &self.client;
        create(
            c,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster}}),
        )
        .await?;
        create(c, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("load-{cluster}")}})).await?;
        create(c, json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": cluster, "labels": {"cluster.open-cluster-management.io/clusterset": "fleet"}},
            "spec": {"hubAcceptsClient": true}})).await?;
        crate::agents::add_nodes(c, cluster, cores).await
    }

    fn spawn(&mut self, name: &str, bin: &Path, args: &[&str], logs: &Path) -> Result<(), Error> {
        let log = std::fs::File::create(logs.join(format!("{name}.log")))?;
        // The child dies with us even on SIGKILL, where setpriv is installed.
        let setpriv = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("setpriv"))
                .find(|p| p.is_file())
        });
        let mut cmd = match setpriv {
            Some(s) => {
                let mut c = Command::new(s);
                c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(args)
            .env_remove("KUBECONFIG")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// Fails when a process has exited.
    pub fn check(&mut self) -> Result<(), Error> {
        if let Some(real) = &self.real {
            for c in &real.clusters {
                c.check()?;
            }
        }
        for (name, c) in &mut self.children {
            if let Some(s) = c.try_wait()? {
                return Err(format!("{name} exited: {s}").into());
            }
        }
        Ok(())
    }

    /// Creates a Placement in the fleet's namespace.
    pub async fn placement(&self, name: &str, spec: Value) -> Result<(), Error> {
        create(
            &self.client,
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": name, "namespace": PLACEMENTS}, "spec": spec}),
        )
        .await
    }

    /// The add-on's ClusterManagementAddOn (`lifecycle: self`, so our manager installs it),
    /// installing through the fleet namespace's Placement `placement`.
    pub async fn install_addon(&self, placement: &str) -> Result<(), Error> {
        let addon = ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;
        testenv::apply(
            &self.client,
            &json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ClusterManagementAddOn",
                "metadata": {"name": addon, "annotations": {"addon.open-cluster-management.io/lifecycle": "self"}},
                "spec": {"addOnMeta": {"displayName": addon},
                         "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"}],
                         "installStrategy": {"type": "Placements", "placements": [{"namespace": PLACEMENTS, "name": placement}]}}}),
            PLACEMENTS,
        )
        .await?;
        Ok(())
    }

    /// The clusters a Placement's decisions name, sorted.
    pub async fn decisions(&self, placement: &str) -> Result<Vec<String>, Error> {
        let api = Api::<PlacementDecision>::namespaced(self.client.clone(), PLACEMENTS);
        let lp = ListParams::default().labels(&format!(
            "cluster.open-cluster-management.io/placement={placement}"
        ));
        let mut out: Vec<String> = api
            .list(&lp)
            .await?
            .items
            .iter()
            .flat_map(|d| d.status.iter().flat_map(|s| s.decisions.iter()))
            .map(|d| d.cluster_name.clone())
            .collect();
        out.sort();
        Ok(out)
    }

    /// A cluster's `cpuAvailable`, when it has one.
    pub async fn cpu_score(&self, cluster: &str) -> Option<i32> {
        let s = Api::<AddOnPlacementScore>::namespaced(self.client.clone(), cluster)
            .get_opt("resource-usage-score")
            .await
            .ok()??;
        s.status?
            .scores
            .iter()
            .find(|i| i.name == "cpuAvailable")
            .map(|i| i.value)
    }

    /// A burst of `pods` pods requesting `millicores` each on `cluster`'s nodes.
    pub async fn load(&self, cluster: &str, pods: usize, millicores: u32) -> Result<(), Error> {
        let api = Api::<Pod>::namespaced(self.cluster_client(cluster)?, &format!("load-{cluster}"));
        let existing = api.list(&ListParams::default()).await?.items.len();
        for i in 0..pods {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("load-{}", existing + i)},
                "spec": {"nodeName": format!("{cluster}-n{}", i % 2),
                         "containers": [{"name": "work", "image": "example.invalid/load",
                                         "resources": {"requests": {"cpu": format!("{millicores}m")}}}]}
            }))?;
            api.create(&PostParams::default(), &pod).await?;
        }
        Ok(())
    }

    /// Removes the load of `cluster`.
    pub async fn unload(&self, cluster: &str) -> Result<(), Error> {
        let api = Api::<Pod>::namespaced(self.cluster_client(cluster)?, &format!("load-{cluster}"));
        for p in api.list(&ListParams::default()).await?.items {
            api.delete(&p.name_any(), &DeleteParams::default().grace_period(0))
                .await?;
        }
        Ok(())
    }

    /// Puts a NoSelect taint on `cluster` (what the hub does to an unavailable cluster).
    pub async fn taint(&self, cluster: &str) -> Result<(), Error> {
        let now = jiff::Timestamp::now().to_string();
        Api::<ManagedCluster>::all(self.client.clone())
            .patch(
                cluster,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": [{
                    "key": "cluster.open-cluster-management.io/unavailable",
                    "effect": "NoSelect", "timeAdded": now}]}})),
            )
            .await?;
        Ok(())
    }
}

/// Polls `f` every 500 ms until it yields a value, for at most [`REAL_STEP`].
async fn poll<T, F, Fut>(what: &str, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, Error>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if start.elapsed() > REAL_STEP {
            return Err(format!("timed out after {REAL_STEP:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates (applies) one object.
async fn create(client: &Client, obj: Value) -> Result<(), Error> {
    testenv::apply(client, &obj, PLACEMENTS).await?;
    Ok(())
}
