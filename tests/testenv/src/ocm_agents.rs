//! Upstream OCM's own agents around a hub [`ControlPlane`]: what a real fleet runs, as local
//! processes (no container runtime, no kubelet).
//!
//! - [`OcmHub`]: on the hub, kube-controller-manager as the CSR signer (the hub's client CA, so
//!   the certificates it issues log in), OCM's registration controller (cluster CSR approval
//!   for the bootstrap identity, acceptance, the per-cluster RBAC), the add-on webhook as the
//!   conversion webhook of the multi-version add-on CRDs, and the bootstrap identity with the
//!   RBAC OCM's cluster-manager gives it.
//! - [`OcmCluster`]: per cluster its own etcd and kube-apiserver (AppliedManifestWork names
//!   would collide on a shared one), the klusterlet-side CRDs and namespace, the bootstrap
//!   kubeconfig secret, kube-controller-manager for namespace deletion and garbage collection,
//!   and one klusterlet agent (`registration-operator agent`: registration and work together).
//!
//! The binaries come from the versioned cache: `tests/control-plane/build.sh` builds
//! kube-controller-manager, `tests/ocm/build.sh registration-operator registration addon` the
//! OCM ones ([`ensure_binaries`] runs the latter on first use).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::process::ManagedChild;
use crate::{ControlPlane, Error, Options, paths, pki};

/// The namespace the klusterlet runs in on each managed cluster (upstream's default).
pub const AGENT_NAMESPACE: &str = "open-cluster-management-agent";
/// The add-ons' default install namespace, created by the klusterlet operator upstream.
pub const ADDON_NAMESPACE: &str = "open-cluster-management-agent-addon";
/// The bootstrap identity's group, bound to the bootstrap ClusterRole as OCM's cluster-manager
/// binds it (`open-cluster-management:bootstrap:managedcluster`).
pub const BOOTSTRAP_GROUP: &str = "system:bootstrappers:managedcluster";
/// The bootstrap identity's user: the only one whose cluster CSRs the hub auto-approves.
pub const BOOTSTRAP_USER: &str = "system:bootstrap:testenv";
/// How long any of these processes may take to come up on a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The add-on webhook's health-probe port, hard-coded in upstream's `webhook-server`.
const WEBHOOK_PROBE_PORT: u16 = 8000;
/// The OCM binaries this module runs.
const OCM_BINARIES: [&str; 3] = ["registration-operator", "registration", "addon"];

/// Builds the OCM binaries with `tests/ocm/build.sh` when one is missing from the cache (several
/// minutes, once; a progress line on stderr), and checks that kube-controller-manager is there.
pub fn ensure_binaries() -> Result<(), Error> {
    let kcm = paths::kube_controller_manager();
    if !kcm.is_file() {
        return Err(Error::MissingBinary {
            what: "kube-controller-manager",
            path: kcm,
        });
    }
    let missing: Vec<&str> = OCM_BINARIES
        .into_iter()
        .filter(|b| !paths::ocm_binary(b).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ocm/build.sh");
    eprintln!(
        "testenv: building upstream OCM's {} with {} (several minutes, once; cached after)",
        missing.join(", "),
        script.display()
    );
    let output = Command::new("bash")
        .arg(&script)
        .args(&missing)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(Error::io(format!("run {}", script.display())))?;
    if !output.status.success() {
        return Err(Error::CommandFailed {
            command: format!("{} {}", script.display(), missing.join(" ")),
            output,
        });
    }
    Ok(())
}

/// OCM's hub-side components beside a hub control plane. Killed when dropped.
pub struct OcmHub {
    dir: PathBuf,
    server: String,
    /// The hub's serving CA (PEM), for kubeconfigs that reach it.
    ca_pem: String,
    bootstrap: pki::ClientCertificate,
    children: Vec<ManagedChild>,
}

impl Drop for OcmHub {
    fn drop(&mut self) {
        for c in &self.children {
            c.kill();
        }
        // Kept when a test fails: the agents' logs are what explains it.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl OcmHub {
    /// Starts the signer, the add-on conversion webhook and the registration controller on
    /// `hub` (which must have the upstream CRDs), and installs the bootstrap RBAC.
    pub async fn start(hub: &ControlPlane) -> Result<Self, Error> {
        ensure_binaries()?;
        let dir = paths::instance_dir("ocm-hub")?;
        let client = hub.client()?;
        let admin = dir.join("admin.kubeconfig");
        hub.write_kubeconfig(&admin)?;
        let admin_flag = format!("--kubeconfig={}", admin.display());
        let mut out = OcmHub {
            dir: dir.clone(),
            server: hub.server().to_owned(),
            ca_pem: hub.ca_pem()?,
            bootstrap: hub.client_certificate(
                BOOTSTRAP_USER,
                &[BOOTSTRAP_GROUP],
                Duration::from_secs(24 * 3600),
            )?,
            children: Vec::new(),
        };

        // The signer: kube-apiserver-client certificates from the CA the apiserver trusts.
        let (ca_cert, ca_key) = (dir.join("client-ca.crt"), dir.join("client-ca.key"));
        hub.write_client_ca(&ca_cert, &ca_key)?;
        out.spawn(
            "kube-controller-manager",
            &paths::kube_controller_manager(),
            &[
                &admin_flag,
                "--controllers=certificatesigningrequest-signing-controller",
                &format!(
                    "--cluster-signing-kube-apiserver-client-cert-file={}",
                    ca_cert.display()
                ),
                &format!(
                    "--cluster-signing-kube-apiserver-client-key-file={}",
                    ca_key.display()
                ),
                "--leader-elect=false",
                "--secure-port=0",
            ],
            &[],
        )?;

        // The add-on conversion webhook: the CRDs' storage version is v1alpha1, and without a
        // converter a v1alpha1 read of an object written as v1beta1 (or the reverse) loses the
        // fields the versions name differently (the agent then sees no registrations).
        let serving = pki::serving_certificate()?;
        let certs = dir.join("webhook-certs");
        std::fs::create_dir_all(&certs).map_err(Error::io("create the webhook's cert dir"))?;
        write(&certs.join("tls.crt"), &serving.cert_pem)?;
        write(&certs.join("tls.key"), &serving.key_pem)?;
        // Its health probe listens on :8000, hard-coded upstream: one OcmHub at a time per
        // machine (a test and `fleet` at once wait here for each other).
        let started = Instant::now();
        while std::net::TcpListener::bind(("0.0.0.0", WEBHOOK_PROBE_PORT)).is_err() {
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::NotReady {
                    what: format!("port {WEBHOOK_PROBE_PORT} to be free"),
                    seconds: READY_TIMEOUT.as_secs(),
                    detail: " (OCM's add-on webhook binds it, hard-coded: is another OcmHub running, a test or `fleet`?)".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let port = crate::free_port();
        out.spawn(
            "addon-webhook",
            &paths::ocm_binary("addon"),
            &[
                "webhook-server",
                &format!("--port={port}"),
                &format!("--certdir={}", certs.display()),
            ],
            &[("KUBECONFIG", admin.as_os_str())],
        )?;
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            out.check()?;
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::NotReady {
                    what: "the add-on conversion webhook".into(),
                    seconds: READY_TIMEOUT.as_secs(),
                    detail: format!("; log: {}", dir.join("addon-webhook.log").display()),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        for crd in [
            "managedclusteraddons.addon.open-cluster-management.io",
            "clustermanagementaddons.addon.open-cluster-management.io",
        ] {
            crds.patch(
                crd,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"conversion": {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1", "v1beta1"],
                        "clientConfig": {
                            "url": format!("https://127.0.0.1:{port}/convert"),
                            "caBundle": pki::base64(serving.ca_pem.as_bytes()),
                        },
                    },
                }}})),
            )
            .await?;
        }

        // The bootstrap identity's permission, as OCM's cluster-manager installs it
        // (ClusterRole `open-cluster-management:bootstrap`, bound to the bootstrap group).
        crate::apply_yaml(&client, BOOTSTRAP_RBAC, "default").await?;

        // The registration controller: accepts clusters, approves their CSRs when the requester
        // is the bootstrap user, gives each cluster's agent its hub RBAC, tracks leases.
        out.spawn(
            "registration-controller",
            &paths::ocm_binary("registration"),
            &[
                "controller",
                &admin_flag,
                "--namespace=open-cluster-management-hub",
                "--disable-leader-election",
                &format!("--listen=127.0.0.1:{}", crate::free_port()),
                "--feature-gates=ManagedClusterAutoApproval=true",
                &format!("--auto-approved-csr-users={BOOTSTRAP_USER}"),
            ],
            &[],
        )?;
        Ok(out)
    }

    /// A kubeconfig for the hub as the bootstrap identity, certificates embedded: what a
    /// klusterlet's bootstrap secret holds.
    pub fn bootstrap_kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: bootstrap\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: bootstrap\n  context:\n    cluster: hub\n    user: bootstrap\ncurrent-context: bootstrap\n",
            server = self.server,
            ca = pki::base64(self.ca_pem.as_bytes()),
            cert = pki::base64(self.bootstrap.cert_pem.as_bytes()),
            key = pki::base64(self.bootstrap.key_pem.as_bytes()),
        )
    }

    /// Fails when one of the hub's OCM processes has exited.
    pub fn check(&self) -> Result<(), Error> {
        check(&self.children, &self.dir)
    }

    /// Where the processes' logs are (`<name>.log`).
    pub fn log_dir(&self) -> &Path {
        &self.dir
    }

    fn spawn(
        &mut self,
        name: &'static str,
        bin: &Path,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<(), Error> {
        self.children.push(spawn(&self.dir, name, bin, args, env)?);
        Ok(())
    }
}

/// A managed cluster: its own control plane, kube-controller-manager and klusterlet agent.
/// Killed when dropped.
pub struct OcmCluster {
    pub name: String,
    /// The cluster's own apiserver and etcd.
    pub cp: ControlPlane,
    /// The id the agent registers with (its hub user is
    /// `system:open-cluster-management:<cluster>:<agent id>`).
    pub agent_id: String,
    dir: PathBuf,
    children: Vec<ManagedChild>,
}

impl Drop for OcmCluster {
    fn drop(&mut self) {
        for c in &self.children {
            c.kill();
        }
        // Kept when a test fails: the agents' logs are what explains it.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl OcmCluster {
    /// Starts cluster `name`'s control plane and controllers, creates its ManagedCluster on the
    /// hub (accepted, with `labels`), then starts its klusterlet agent.
    pub async fn start(
        hub: &ControlPlane,
        ocm: &OcmHub,
        name: &str,
        labels: serde_json::Value,
    ) -> Result<Self, Error> {
        // Every OCM CRD: the klusterlet needs AppliedManifestWork and ClusterClaim; the others
        // are unused here and harmless.
        let cp = ControlPlane::start(Options::default().with_upstream_crds()).await?;
        let dir = paths::instance_dir(&format!("ocm-cluster-{name}"))?;
        let mut out = OcmCluster {
            name: name.to_owned(),
            cp,
            agent_id: format!("{name}-agent"),
            dir: dir.clone(),
            children: Vec::new(),
        };
        let spoke = out.cp.client()?;
        let admin = dir.join("admin.kubeconfig");
        out.cp.write_kubeconfig(&admin)?;
        let admin_flag = format!("--kubeconfig={}", admin.display());

        // Namespace deletion and garbage collection: what removes the objects of a deleted
        // ManifestWork (the work agent deletes them in the foreground).
        out.spawn(
            "kube-controller-manager",
            &paths::kube_controller_manager(),
            &[
                &admin_flag,
                "--controllers=namespace-controller,garbage-collector-controller",
                "--leader-elect=false",
                "--secure-port=0",
            ],
            &[],
        )?;

        let bootstrap = ocm.bootstrap_kubeconfig();
        let bootstrap_file = dir.join("bootstrap.kubeconfig");
        write(&bootstrap_file, &bootstrap)?;
        // The agent's namespace, and the add-ons' default one, which upstream's klusterlet
        // operator creates (no operator runs here; add-on works install into it).
        for ns in [AGENT_NAMESPACE, ADDON_NAMESPACE] {
            crate::apply(
                &spoke,
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                ns,
            )
            .await?;
        }
        crate::apply(
            &spoke,
            &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "bootstrap-hub-kubeconfig", "namespace": AGENT_NAMESPACE},
                "data": {"kubeconfig": pki::base64(bootstrap.as_bytes())}}),
            AGENT_NAMESPACE,
        )
        .await?;

        // Created (accepted) before the agent starts, as a hub operator using auto-approval
        // would: when the cluster CSR is approved and signed faster than the agent's own first
        // ManagedCluster create returns, upstream's agent cancels that create and never retries
        // it under its new identity, so the cluster would never appear.
        let mut mc = json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name}, "spec": {"hubAcceptsClient": true}});
        if labels.is_object() {
            mc["metadata"]["labels"] = labels;
        }
        crate::apply(&hub.client()?, &mc, "default").await?;

        let hub_dir = dir.join("hub-kubeconfig");
        let tmp = dir.join("tmp");
        for d in [&hub_dir, &tmp] {
            std::fs::create_dir_all(d).map_err(Error::io(format!("create {}", d.display())))?;
        }
        out.spawn(
            "klusterlet-agent",
            &paths::ocm_binary("registration-operator"),
            &[
                "agent",
                &admin_flag,
                &format!("--spoke-cluster-name={name}"),
                &format!("--agent-id={}", out.agent_id),
                &format!("--bootstrap-kubeconfig={}", bootstrap_file.display()),
                &format!("--hub-kubeconfig-dir={}", hub_dir.display()),
                "--workload-source-driver=kube",
                &format!(
                    "--workload-source-config={}",
                    hub_dir.join("kubeconfig").display()
                ),
                &format!("--namespace={AGENT_NAMESPACE}"),
                "--disable-leader-election",
                &format!("--listen=127.0.0.1:{}", crate::free_port()),
                // Status and feedback within seconds rather than upstream's 60 s.
                "--status-sync-interval=2s",
                "--feature-gates=AddonManagement=true",
            ],
            // Its own: library-go writes its serving certificate there, and two agents must not
            // share one.
            &[("TMPDIR", tmp.as_os_str())],
        )?;
        Ok(out)
    }

    /// Fails when one of the cluster's processes has exited.
    pub fn check(&self) -> Result<(), Error> {
        check(&self.children, &self.dir)
    }

    /// Where the processes' logs are (`<name>.log`).
    pub fn log_dir(&self) -> &Path {
        &self.dir
    }

    fn spawn(
        &mut self,
        name: &'static str,
        bin: &Path,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<(), Error> {
        self.children.push(spawn(&self.dir, name, bin, args, env)?);
        Ok(())
    }
}

fn spawn(
    dir: &Path,
    name: &'static str,
    bin: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<ManagedChild, Error> {
    if !bin.is_file() {
        return Err(Error::MissingBinary {
            what: name,
            path: bin.to_path_buf(),
        });
    }
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("KUBECONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    ManagedChild::spawn(name, cmd, &dir.join(format!("{name}.log")))
        .map_err(Error::io(format!("start {}", bin.display())))
}

fn check(children: &[ManagedChild], dir: &Path) -> Result<(), Error> {
    for c in children {
        if let Some(status) = c.exited() {
            let log = dir.join(format!("{}.log", c.name()));
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            return Err(Error::ProcessExited {
                process: c.name(),
                status,
                tail: lines[lines.len().saturating_sub(20)..].join("\n"),
                log,
            });
        }
    }
    Ok(())
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(Error::io(format!("write {}", path.display())))
}

/// The bootstrap identity's hub permission: what OCM's cluster-manager grants it (register a
/// ManagedCluster, ask for its certificate, join a cluster set), bound to its group.
const BOOTSTRAP_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: open-cluster-management:bootstrap
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
- apiGroups: ["certificates.k8s.io"]
  resources: ["certificatesigningrequests"]
  verbs: ["create", "get", "list", "watch"]
- apiGroups: ["cluster.open-cluster-management.io"]
  resources: ["managedclusters"]
  verbs: ["get", "create", "list", "watch"]
- apiGroups: ["cluster.open-cluster-management.io"]
  resources: ["managedclustersets/join"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: open-cluster-management:bootstrap:managedcluster
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: open-cluster-management:bootstrap
subjects:
- kind: Group
  apiGroup: rbac.authorization.k8s.io
  name: system:bootstrappers:managedcluster
"#;
