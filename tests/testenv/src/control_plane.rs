//! Starting, using and stopping one etcd + kube-apiserver pair.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;

use crate::pki::{ClientCa, ClientCertificate};
use crate::process::{self, ManagedChild, Shutdown};
use crate::{Error, crds, paths, pki};

/// How long etcd and kube-apiserver may take to become ready (kube-apiserver bootstraps its
/// RBAC roles before `/readyz` passes; on a loaded 2-core machine that takes a while).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Attempts with fresh ports when a port picked as free was taken before the process bound it.
const START_ATTEMPTS: usize = 3;
/// How long a killed apiserver's port may take to refuse connections (the kernel closes the
/// listener as the process exits, so this is a bound, not an expected wait).
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What to install after start.
#[derive(Clone, Debug, Default)]
pub struct Options {
    upstream_crds: bool,
    crds: Vec<CustomResourceDefinition>,
}

impl Options {
    /// Install the upstream OCM CRDs (the pinned `open-cluster-management.io/api` module's) and
    /// this project's own (the chart's `crds/`: ScoreDefinition), what a hub with it has.
    pub fn with_upstream_crds(mut self) -> Self {
        self.upstream_crds = true;
        self
    }

    /// Install these CRDs.
    pub fn with_crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }
}

/// A running control plane. Dropping it kills both processes and removes its directory.
pub struct ControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    etcd: ManagedChild,
    /// Behind a lock because tests stop and restart it (hub outages).
    apiserver: Mutex<ApiServer>,
    /// Kept so that a restart uses exactly the first start's flags.
    apiserver_cmd: ApiServerCommand,
    port: u16,
    /// etcd's client port (its JSON gateway answers there too).
    etcd_port: u16,
    server: String,
    ca_file: PathBuf,
    admin_token: String,
    client_ca: ClientCa,
}

struct ApiServer {
    child: ManagedChild,
    /// Set at shutdown, so that a racing restart cannot leave a process behind.
    shut_down: bool,
}

struct ApiServerCommand {
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
}

impl ApiServerCommand {
    fn spawn(&self) -> Result<ManagedChild, Error> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.args);
        ManagedChild::spawn("kube-apiserver", cmd, &self.log)
            .map_err(Error::io(format!("start {}", self.bin.display())))
    }
}

/// A poisoned lock only means a panic elsewhere; the child handle inside is still valid.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shutdown for Inner {
    fn shutdown(&self) {
        // The apiserver first, so that it does not log etcd connection errors while dying.
        {
            let mut apiserver = lock(&self.apiserver);
            apiserver.shut_down = true;
            apiserver.child.kill();
        }
        self.etcd.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.inner.shutdown();
    }
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver, waits until the apiserver is ready, and installs the
    /// CRDs `options` asks for, waiting until each is `Established` and served.
    pub async fn start(options: Options) -> Result<Self, Error> {
        let etcd_bin = existing(paths::etcd(), "etcd")?;
        let apiserver_bin = existing(paths::kube_apiserver(), "kube-apiserver")?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(&etcd_bin, &apiserver_bin).await {
                Ok(cp) => {
                    cp.install(&options).await?;
                    return Ok(cp);
                }
                // A port race shows up as an early exit mentioning the address.
                Err(e @ Error::ProcessExited { .. })
                    if e.to_string().contains("address already in use") =>
                {
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::NotReady {
            what: "control plane".into(),
            seconds: 0,
            detail: String::new(),
        }))
    }

    async fn start_once(etcd_bin: &Path, apiserver_bin: &Path) -> Result<Self, Error> {
        let dir = paths::instance_dir("ocm-testenv")?;
        let result = Self::start_in(&dir, etcd_bin, apiserver_bin).await;
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    async fn start_in(dir: &Path, etcd_bin: &Path, apiserver_bin: &Path) -> Result<Self, Error> {
        let [client_port, peer_port, secure_port] = free_ports()?;
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let etcd_log = dir.join("etcd.log");
        let mut etcd_cmd = Command::new(etcd_bin);
        etcd_cmd.args([
            format!("--name=testenv-{client_port}"),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=testenv-{client_port}=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ]);
        let etcd = ManagedChild::spawn("etcd", etcd_cmd, &etcd_log)
            .map_err(Error::io(format!("start {}", etcd_bin.display())))?;
        wait_for(&etcd, &etcd_log, "etcd", || etcd_healthy(client_port)).await?;

        let admin_token = pki::random_token()?;
        let token_file = dir.join("tokens.csv");
        std::fs::write(
            &token_file,
            format!("{admin_token},testenv-admin,testenv-admin,\"system:masters\"\n"),
        )
        .map_err(Error::io("write the token file"))?;
        let (sa_key, sa_pub) = (dir.join("sa.key"), dir.join("sa.pub"));
        pki::write_service_account_keys(&sa_key, &sa_pub)?;
        let client_ca = ClientCa::generate()?;
        let client_ca_file = dir.join("client-ca.crt");
        std::fs::write(&client_ca_file, client_ca.cert_pem())
            .map_err(Error::io("write the client CA"))?;
        let cert_dir = dir.join("certs");
        let server = format!("https://127.0.0.1:{secure_port}");
        let args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--cert-dir={}", cert_dir.display()),
            format!("--secure-port={secure_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            // No controller-manager creates default service accounts.
            "--disable-admission-plugins=ServiceAccount".into(),
            "--authorization-mode=RBAC".into(),
            format!("--token-auth-file={}", token_file.display()),
            format!("--client-ca-file={}", client_ca_file.display()),
            format!("--service-account-issuer={server}/"),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            format!("--api-audiences={server}/"),
            "--v=1".into(),
        ];
        let apiserver_cmd = ApiServerCommand {
            bin: apiserver_bin.to_path_buf(),
            args,
            log: dir.join("kube-apiserver.log"),
        };
        let apiserver = apiserver_cmd.spawn()?;

        let ca_file = cert_dir.join("apiserver.crt");
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            etcd,
            apiserver: Mutex::new(ApiServer {
                child: apiserver,
                shut_down: false,
            }),
            apiserver_cmd,
            port: secure_port,
            etcd_port: client_port,
            server,
            ca_file,
            admin_token,
            client_ca,
        });
        let as_shutdown: Arc<dyn Shutdown> = inner.clone();
        process::register_for_exit(&as_shutdown);
        let cp = ControlPlane { inner };
        cp.wait_ready().await?;
        Ok(cp)
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let log = &self.inner.apiserver_cmd.log;
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::new();
        loop {
            if let Some(status) = self.inner.etcd.exited() {
                return Err(exited(
                    self.inner.etcd.name(),
                    status,
                    &self.inner.dir.join("etcd.log"),
                ));
            }
            let apiserver_exit = lock(&self.inner.apiserver).child.exited();
            if let Some(status) = apiserver_exit {
                return Err(exited("kube-apiserver", status, log));
            }
            // The serving certificate appears a moment after the process starts.
            if self.inner.ca_file.exists() {
                match self.readyz().await {
                    Ok(()) => return Ok(()),
                    Err(e) => last = e,
                }
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: "kube-apiserver".into(),
                    seconds: READY_TIMEOUT.as_secs(),
                    detail: format!(" (last answer: {last}); log: {}", log.display()),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn readyz(&self) -> Result<(), String> {
        let client = self.client().map_err(|e| e.to_string())?;
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        client
            .request_text(req)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn install(&self, options: &Options) -> Result<(), Error> {
        let mut all = Vec::new();
        if options.upstream_crds {
            all.extend(crds::upstream_crds()?);
            all.extend(crds::crds_from_dir(&paths::project_crds_dir())?);
        }
        all.extend(options.crds.iter().cloned());
        if !all.is_empty() {
            crds::install_crds(&self.client()?, all).await?;
        }
        Ok(())
    }

    /// The apiserver's URL.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The PID of etcd and of the current (or last) kube-apiserver.
    pub fn pids(&self) -> [u32; 2] {
        [
            self.inner.etcd.pid(),
            lock(&self.inner.apiserver).child.pid(),
        ]
    }

    /// Kills kube-apiserver (SIGKILL, like a crash; etcd keeps running) and returns once it has
    /// exited and its port refuses connections: a hub outage for the code under test.
    /// Idempotent.
    pub fn stop_apiserver(&self) -> Result<(), Error> {
        // `kill` also reaps the process, so its listening socket is closed or closing.
        lock(&self.inner.apiserver).child.kill();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.inner.port));
        let deadline = Instant::now() + STOP_TIMEOUT;
        while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: format!("port {} to close after stopping kube-apiserver", addr),
                    seconds: STOP_TIMEOUT.as_secs(),
                    detail: " (is another process listening on it?)".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Starts kube-apiserver again after [`Self::stop_apiserver`] with the first start's flags:
    /// same port, same serving certificate (so existing kubeconfigs and clients stay valid),
    /// same etcd (so the data is still there). Waits for `/readyz` like the first start.
    ///
    /// A no-op (apart from the readiness wait) while it is running; an error after
    /// [`Self::shutdown`].
    pub async fn start_apiserver(&self) -> Result<(), Error> {
        {
            let mut apiserver = lock(&self.inner.apiserver);
            if apiserver.shut_down {
                return Err(Error::Invalid(
                    "cannot start kube-apiserver: the control plane was shut down".into(),
                ));
            }
            if !apiserver.child.running() {
                // Replacing the old handle reaps it if it exited on its own.
                apiserver.child = self.inner.apiserver_cmd.spawn()?;
            }
        }
        self.wait_ready().await
    }

    /// Compacts etcd's history up to its current revision (what kube-apiserver does every
    /// five minutes), so that a watch resuming from an older `resourceVersion` gets 410 Gone
    /// and must list again. Returns the revision compacted to.
    pub async fn compact_etcd(&self) -> Result<i64, Error> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.inner.etcd_port));
        let etcd = |path: &'static str, body: String| async move {
            let (status, text) = crate::http::post_json(addr, path, &body)
                .await
                .map_err(Error::Invalid)?;
            if status != 200 {
                return Err(Error::Invalid(format!("etcd {path}: {status} {text}")));
            }
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| Error::Parse {
                file: format!("etcd {path}"),
                message: e.to_string(),
            })
        };
        // A range over one key only to read the current revision from the header.
        let status = etcd("/v3/kv/range", r#"{"key":"AA==","limit":1}"#.to_owned()).await?;
        let revision = status["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse::<i64>().ok())
            .ok_or_else(|| Error::Invalid(format!("etcd: no revision in {status}")))?;
        etcd(
            "/v3/kv/compaction",
            format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )
        .await?;
        Ok(revision)
    }

    /// A second kube-apiserver on the same etcd, with the same flags but its own port and
    /// serving certificate: a way to write while the first one is stopped (a hub outage as
    /// the code under test sees it, while the data keeps changing). Killed when dropped.
    pub async fn second_apiserver(&self) -> Result<SecondApiServer, Error> {
        let port = crate::free_port();
        let cert_dir = self.inner.dir.join(format!("certs-{port}"));
        let first = &self.inner.apiserver_cmd;
        let args = first
            .args
            .iter()
            .map(|a| {
                if a.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else if a.starts_with("--cert-dir=") {
                    format!("--cert-dir={}", cert_dir.display())
                } else {
                    a.clone()
                }
            })
            .collect();
        let cmd = ApiServerCommand {
            bin: first.bin.clone(),
            args,
            log: self.inner.dir.join(format!("kube-apiserver-{port}.log")),
        };
        let second = SecondApiServer {
            child: cmd.spawn()?,
            server: format!("https://127.0.0.1:{port}"),
            ca_file: cert_dir.join("apiserver.crt"),
            admin_token: self.inner.admin_token.clone(),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = second.child.exited() {
                return Err(exited("kube-apiserver", status, &cmd.log));
            }
            if second.ca_file.exists() {
                let ready = match second.client() {
                    Ok(c) => c
                        .request_text(
                            http::Request::get("/readyz")
                                .body(Vec::new())
                                .map_err(|e| Error::Invalid(e.to_string()))?,
                        )
                        .await
                        .is_ok(),
                    Err(_) => false,
                };
                if ready {
                    return Ok(second);
                }
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: "the second kube-apiserver".into(),
                    seconds: READY_TIMEOUT.as_secs(),
                    detail: format!("; log: {}", cmd.log.display()),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The directory holding the data, certificates and logs; removed at shutdown.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// A kubeconfig for the admin (group `system:masters`), or for `user` with `groups` through
    /// impersonation, so that the apiserver authorizes every request as that identity.
    pub fn kubeconfig(&self, identity: Option<(&str, &[&str])>) -> String {
        self.kubeconfig_at(&self.inner.server, identity)
    }

    /// The apiserver's loopback address (what [`Self::server`] names).
    pub fn address(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.inner.port))
    }

    /// [`Self::kubeconfig`] naming `server` (`https://127.0.0.1:<port>`, where a
    /// [`crate::forward::Forwarder`] will relay to this apiserver) instead of the apiserver's
    /// own address: the serving certificate holds for any port of 127.0.0.1.
    pub fn kubeconfig_at(&self, server: &str, identity: Option<(&str, &[&str])>) -> String {
        let impersonation = match identity {
            Some((user, groups)) => {
                let groups: Vec<String> = groups.iter().map(|g| format!("{g:?}")).collect();
                format!("    as: {user:?}\n    as-groups: [{}]\n", groups.join(", "))
            }
            None => String::new(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority: {ca:?}\nusers:\n- name: testenv\n  user:\n    token: {token}\n{impersonation}contexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: testenv\n    namespace: default\ncurrent-context: testenv\n",
            ca = self.inner.ca_file.display().to_string(),
            token = self.inner.admin_token,
        )
    }

    /// Writes [`Self::kubeconfig`] for the admin to `path`, for processes under test.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        std::fs::write(path, self.kubeconfig(None))
            .map_err(Error::io(format!("write {}", path.display())))
    }

    /// The CA that signed the apiserver's serving certificate (self-signed by kube-apiserver),
    /// PEM: what a client must trust to reach [`Self::server`].
    pub fn ca_pem(&self) -> Result<String, Error> {
        std::fs::read_to_string(&self.inner.ca_file)
            .map_err(Error::io(format!("read {}", self.inner.ca_file.display())))
    }

    /// A client certificate the apiserver accepts as `user` (CN) in `groups` (one O each),
    /// signed by the control plane's client CA: the identity an OCM agent gets once its CSR is
    /// approved. Valid from a minute ago (clock skew) for `valid_for`.
    pub fn client_certificate(
        &self,
        user: &str,
        groups: &[&str],
        valid_for: Duration,
    ) -> Result<ClientCertificate, Error> {
        self.inner.client_ca.issue(user, groups, valid_for)
    }

    /// Writes the client CA's certificate and private key (PEM) to `cert` and `key` (the key
    /// mode 0600): for a signer whose certificates this apiserver accepts (kube-controller-manager
    /// signing CSRs for `kubernetes.io/kube-apiserver-client`).
    pub fn write_client_ca(&self, cert: &Path, key: &Path) -> Result<(), Error> {
        write_atomic(cert, self.inner.client_ca.cert_pem(), 0o644)?;
        write_atomic(key, &self.inner.client_ca.key_pem(), 0o600)
    }

    /// Writes `dir/tls.key`, `dir/tls.crt` and `dir/kubeconfig` as a mounted
    /// `<addon>-hub-kubeconfig` secret has them: the kubeconfig names the certificate and key by
    /// relative paths and embeds the serving CA. Returns the kubeconfig's path.
    ///
    /// Each file is replaced atomically (temp file + rename), key before certificate, so a
    /// process watching them never reads half a file; the set as a whole is not swapped at once.
    pub fn write_cert_kubeconfig(
        &self,
        dir: &Path,
        cert: &ClientCertificate,
    ) -> Result<PathBuf, Error> {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: testenv\n  user:\n    client-certificate: tls.crt\n    client-key: tls.key\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: testenv\n    namespace: default\ncurrent-context: testenv\n",
            server = self.inner.server,
            ca = pki::base64(self.ca_pem()?.as_bytes()),
        );
        write_atomic(&dir.join("tls.key"), &cert.key_pem, 0o600)?;
        write_atomic(&dir.join("tls.crt"), &cert.cert_pem, 0o644)?;
        let path = dir.join("kubeconfig");
        write_atomic(&path, &kubeconfig, 0o600)?;
        Ok(path)
    }

    /// The client config of the admin, or of an impersonated identity (what
    /// [`Self::kubeconfig`] says, built directly).
    pub fn config(&self, identity: Option<(&str, &[&str])>) -> Result<kube::Config, Error> {
        let url = self.inner.server.parse().map_err(|e| Error::Parse {
            file: "server URL".into(),
            message: format!("{e}"),
        })?;
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.root_cert_file = Some(self.inner.ca_file.clone());
        config.auth_info.token = Some(self.inner.admin_token.clone().into());
        if let Some((user, groups)) = identity {
            config.auth_info.impersonate = Some(user.to_string());
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| g.to_string()).collect());
        }
        Ok(config)
    }

    /// An admin client. Build it inside the test that uses it (a client is bound to the tokio
    /// runtime it was built on).
    pub fn client(&self) -> Result<Client, Error> {
        Ok(Client::try_from(self.config(None)?)?)
    }

    /// A client that acts as `user` in `groups` (plus `system:authenticated`): real RBAC decides
    /// what it may do.
    pub fn client_as(&self, user: &str, groups: &[&str]) -> Result<Client, Error> {
        Ok(Client::try_from(self.config(Some((user, groups)))?)?)
    }

    /// A kubeconfig that is the service account `sa` of `ns` (its user and groups, as
    /// kube-apiserver authenticates it), for a binary to run as it under real RBAC.
    pub fn kubeconfig_as_service_account(&self, ns: &str, sa: &str) -> String {
        let (user, groups) = service_account(ns, sa);
        let g: Vec<&str> = groups.iter().map(String::as_str).collect();
        self.kubeconfig(Some((&user, &g)))
    }

    /// A client that is the service account `sa` of `ns`.
    pub fn client_as_service_account(&self, ns: &str, sa: &str) -> Result<Client, Error> {
        let (user, groups) = service_account(ns, sa);
        let g: Vec<&str> = groups.iter().map(String::as_str).collect();
        self.client_as(&user, &g)
    }

    /// Installs more CRDs and waits until they are served.
    pub async fn install_crds(&self, crds: Vec<CustomResourceDefinition>) -> Result<(), Error> {
        crds::install_crds(&self.client()?, crds).await
    }

    /// Kills both processes and removes the directory; idempotent. Dropping does the same.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

/// A second kube-apiserver on the control plane's etcd (see [`ControlPlane::second_apiserver`]).
pub struct SecondApiServer {
    child: ManagedChild,
    server: String,
    ca_file: PathBuf,
    admin_token: String,
}

impl SecondApiServer {
    /// An admin client of this apiserver.
    pub fn client(&self) -> Result<Client, Error> {
        let url = self.server.parse().map_err(|e| Error::Parse {
            file: "server URL".into(),
            message: format!("{e}"),
        })?;
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.root_cert_file = Some(self.ca_file.clone());
        config.auth_info.token = Some(self.admin_token.clone().into());
        Ok(Client::try_from(config)?)
    }

    /// Kills it; dropping does the same.
    pub fn stop(&self) {
        self.child.kill();
    }
}

/// Writes `contents` to a temporary name in the same directory, then renames it over `path`:
/// readers see the old file or the new one, never a partial one.
fn write_atomic(path: &Path, contents: &str, mode: u32) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(
        ".{file_name}.tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(Error::io(format!("write {}", path.display())))
}

fn existing(path: PathBuf, what: &'static str) -> Result<PathBuf, Error> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingBinary { what, path })
    }
}

fn exited(process: &'static str, status: String, log: &Path) -> Error {
    crate::process::exited(process, status, log)
}

async fn wait_for(
    child: &ManagedChild,
    log: &Path,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.exited() {
            return Err(exited(child.name(), status, log));
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NotReady {
                what: what.into(),
                seconds: READY_TIMEOUT.as_secs(),
                detail: format!("; log: {}", log.display()),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// etcd's `/health` over plain HTTP on loopback.
fn etcd_healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

/// Three distinct free loopback ports. They are free when picked; the start retries if one is
/// taken before the process binds it.
fn free_ports() -> Result<[u16; 3], Error> {
    crate::ports::free_n::<3>()
}

/// The user and groups kube-apiserver gives the service account `sa` of `ns`.
pub fn service_account(ns: &str, sa: &str) -> (String, [String; 2]) {
    (
        format!("system:serviceaccount:{ns}:{sa}"),
        [
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{ns}"),
        ],
    )
}
