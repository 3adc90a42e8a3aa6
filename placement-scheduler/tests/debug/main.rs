//! The debug endpoint (`placement_scheduler::debug`).
//!
//! The first tests check the result shape on outcomes built by hand and by the core. The
//! others serve the endpoint on loopback (plain and TLS) in front of a real kube-apiserver:
//! callers are real ServiceAccounts with tokens from the TokenRequest API, the server
//! authenticates them with TokenReview and authorizes them with SubjectAccessReview against
//! real RBAC (Roles and RoleBindings the admin creates).

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use placement_core::{
    DropReason, FilterResult, Name, Outcome, PrioritizerResult, Snapshot, Status, schedule,
};
use placement_scheduler::debug::{
    self, DebugError, DebugResult, DebugSource, MAX_REQUEST_BODY_BYTES, REVIEW_TIMEOUT,
    ReviewError, ServeError, Transport, debug_result,
};
use rustls_pki_types::CertificateDer;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

/// The binary's endpoint: TLS by default, certificate reload, plain HTTP only on loopback.
mod binary;
/// Bounds: the review cache, the concurrency bound, a review flood against the binary.
mod bounds;
/// The endpoint in front of the real apiserver: authentication, authorization, what-if, TLS.
mod endpoint;
/// Fairness under floods, and how soon a revoked token is refused.
mod fairness;
/// The result's shape, on outcomes built by hand and by the core (no apiserver).
mod shape;

fn body(p: &Placement, o: &Outcome) -> Value {
    serde_json::to_value(debug_result(p, o)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// A fleet to schedule against

fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().unwrap()
}

/// What the controller would hand the endpoint: a snapshot, the stored Placements, a clock.
struct Fleet {
    snapshot: Snapshot,
    placements: HashMap<(String, String), Arc<Placement>>,
}

impl DebugSource for Fleet {
    fn placement(&self, namespace: &str, name: &str) -> Option<Arc<Placement>> {
        self.placements
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn schedule(&self, placement: &Placement) -> Outcome {
        schedule(&self.snapshot, placement, now())
    }
}

fn cluster(name: &str, set: bool, env: &str, cpu: &str, taint: bool) -> ManagedCluster {
    let mut labels = json!({ "env": env });
    if set {
        labels["cluster.open-cluster-management.io/clusterset"] = json!("prod-set");
    }
    let taints = if taint {
        json!([{"key": "maintenance", "effect": "NoSelect"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi"},
            "capacity": {"cpu": cpu, "memory": "8Gi"}
        }
    }))
    .unwrap()
}

fn addon_score(cluster: &str, value: i32) -> AddOnPlacementScore {
    serde_json::from_value(json!({
        "metadata": {"name": "demo", "namespace": cluster},
        "spec": {},
        "status": {"scores": [{"name": "demo", "value": value}]}
    }))
    .unwrap()
}

fn decision(ns: &str, placement: &str, clusters: &[&str]) -> PlacementDecision {
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{placement}-decision-1"), "namespace": ns,
            "labels": {
                "cluster.open-cluster-management.io/placement": placement,
                "cluster.open-cluster-management.io/decision-group-index": "0",
                "cluster.open-cluster-management.io/decision-group-name": ""
            }
        },
        "status": {"decisions": decisions}
    }))
    .unwrap()
}

/// The stored Placement `web` of namespace `ns`: prod clusters, one of them, scored by the
/// defaults (Balance, Steady) plus CPU (weight 2) and the `demo` add-on score.
fn web(ns: &str) -> Placement {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"},
                     "uid": "0b5c", "resourceVersion": "42"},
        "spec": {
            "numberOfClusters": 1,
            "predicates": [{"requiredClusterSelector": {
                "labelSelector": {"matchLabels": {"env": "prod"}}}}],
            "prioritizerPolicy": {"mode": "Additive", "configurations": [
                {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"},
                 "weight": 2},
                {"scoreCoordinate": {"type": "AddOn",
                                     "addOn": {"resourceName": "demo", "scoreName": "demo"}},
                 "weight": 1}
            ]}
        },
        "status": {"numberOfSelectedClusters": 1}
    }))
    .unwrap()
}

/// Clusters `c1`..`c4` in `prod-set` (bound to `ns`), `c5` outside it. `c3` has an untolerated
/// taint, `c4` is `env=dev`. `c1` is used by a placement elsewhere (Balance −100), `c2` is in
/// `web`'s decision already (Steady 100).
fn fleet(ns: &str) -> Fleet {
    let mut s = Snapshot::new();
    let set: ManagedClusterSet = serde_json::from_value(json!({
        "metadata": {"name": "prod-set"},
        "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}
    }))
    .unwrap();
    s.upsert_set(Arc::new(set));
    let binding: ManagedClusterSetBinding = serde_json::from_value(json!({
        "metadata": {"name": "prod-set", "namespace": ns}, "spec": {"clusterSet": "prod-set"}
    }))
    .unwrap();
    s.upsert_binding(&binding);
    for c in [
        cluster("c1", true, "prod", "10", false),
        cluster("c2", true, "prod", "20", false),
        cluster("c3", true, "prod", "30", true),
        cluster("c4", true, "dev", "40", false),
        cluster("c5", false, "prod", "50", false),
    ] {
        s.upsert_cluster(Arc::new(c));
    }
    for (c, v) in [("c1", 50), ("c2", -20), ("c4", 70), ("c5", 100)] {
        s.upsert_score(Arc::new(addon_score(c, v)));
    }
    s.upsert_decision(Arc::new(decision("elsewhere", "other", &["c1"])));
    s.upsert_decision(Arc::new(decision(ns, "web", &["c2"])));
    let web = web(ns);
    let placements = HashMap::from([((ns.to_owned(), "web".to_owned()), Arc::new(web))]);
    Fleet {
        snapshot: s,
        placements,
    }
}

/// What GET `web` must answer.
fn expected_web(ns: &str) -> Value {
    json!({
        "placement": {
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "Placement",
            "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
            "spec": serde_json::to_value(&web(ns).spec).unwrap()
        },
        "filteredPipelineResults": [
            {"name": "Predicate", "filteredClusters": ["c1", "c2", "c3"]},
            {"name": "Predicate,TaintToleration", "filteredClusters": ["c2", "c1"]}
        ],
        "prioritizeResults": [
            {"name": "Balance", "weight": 1, "scores": {"c1": -100, "c2": 100}},
            {"name": "Steady", "weight": 1, "scores": {"c1": 0, "c2": 100}},
            {"name": "ResourceAllocatableCPU", "weight": 2, "scores": {"c1": -100, "c2": 100}},
            {"name": "AddOn/demo/demo", "weight": 1, "scores": {"c1": 50, "c2": -20}}
        ],
        "aggregatedScores": [
            // 100 + 100 + 2 × 100 − 20
            {"clusterName": "c2", "score": 380},
            // −100 + 0 + 2 × −100 + 50
            {"clusterName": "c1", "score": -250}
        ]
    })
}

// ---------------------------------------------------------------------------------------------
// Serving, identities and an HTTP client

/// The endpoint on a loopback port, stopped when dropped.
struct Server {
    addr: SocketAddr,
    tls: Option<TlsConnector>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(client: Client, source: Fleet, tls: Option<Tls>) -> Server {
    let debugger = debug::Debugger::new(
        client,
        Arc::new(source),
        debug::DebugLimits::default(),
        debug::DebugMetrics::default(),
    );
    start_with(debugger, tls).await
}

async fn start_with(debugger: debug::Debugger, tls: Option<Tls>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (transport, client_tls) = match tls {
        Some(t) => (Transport::Tls(t.server), Some(t.client)),
        None => (Transport::PlainLoopback, None),
    };
    let server = debug::serve(listener, transport, debugger, async move {
        let _ = stopped.await;
    })
    .unwrap();
    tokio::spawn(server);
    Server {
        addr,
        tls: client_tls,
        stop: Some(stop),
    }
}

/// One answer, its body read as JSON.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    content_type: String,
    www_authenticate: Option<String>,
    body: Value,
}

impl Reply {
    fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }

    /// Asserts an error answer: the status, the JSON error body, a message starting so.
    fn assert_error(&self, status: StatusCode, starts_with: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.content_type, "application/json", "{self:?}");
        assert_eq!(
            self.body.as_object().map(|o| o.len()),
            Some(1),
            "only an error: {self:?}"
        );
        assert!(
            self.error().starts_with(starts_with),
            "expected an error starting {starts_with:?}, got {self:?}"
        );
    }
}

async fn exchange<IO>(io: IO, req: Request<Full<Bytes>>) -> Reply
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    let res = sender.send_request(req).await.unwrap();
    let status = res.status();
    let header_text = |name: header::HeaderName| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let content_type = header_text(header::CONTENT_TYPE).unwrap_or_default();
    let www_authenticate = header_text(header::WWW_AUTHENTICATE);
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    // A HEAD answer has no body.
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
    };
    Reply {
        status,
        content_type,
        www_authenticate,
        body,
    }
}

impl Server {
    async fn request(
        &self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.addr.to_string());
        if let Some(a) = authorization {
            req = req.header(header::AUTHORIZATION, a);
        }
        let req = req.body(Full::new(body.into())).unwrap();
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        match &self.tls {
            Some(connector) => {
                let name = rustls_pki_types::ServerName::IpAddress(self.addr.ip().into());
                let tls = connector.connect(name, tcp).await.unwrap();
                exchange(tls, req).await
            }
            None => exchange(tcp, req).await,
        }
    }

    async fn get(&self, path: &str, token: &str) -> Reply {
        self.request(
            Method::GET,
            path,
            Some(&format!("Bearer {token}")),
            Bytes::new(),
        )
        .await
    }

    async fn post(&self, token: &str, body: impl Into<Bytes>) -> Reply {
        self.request(
            Method::POST,
            "/debug/placements/",
            Some(&format!("Bearer {token}")),
            body,
        )
        .await
    }
}

/// Polls `call` until `done` holds (RBAC and token changes reach the apiserver's authorizer
/// and authenticator through its caches), at most 30 s. Returns the last reply.
async fn eventually<F, Fut>(mut call: F, done: impl Fn(&Reply) -> bool) -> Reply
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Reply>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = call().await;
        if done(&reply) || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ServiceAccount in `ns` and a token for it from the TokenRequest API.
async fn service_account(admin: &Client, ns: &str, name: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &sa).await.unwrap();
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let answer = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    let token = answer.status.unwrap().token;
    assert!(!token.is_empty());
    token
}

/// A Role allowing `verbs` on placements in `ns`, bound to ServiceAccount `sa`.
async fn grant(admin: &Client, ns: &str, sa: &str, verbs: &[&str]) {
    let name = format!("debug-{sa}");
    let role = Role {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["cluster.open-cluster-management.io".into()]),
            resources: Some(vec!["placements".into()]),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name,
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(ns.into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// The what-if Placement: every env, tolerating the taint, scored by the add-on score only.
fn what_if(ns: &str) -> Value {
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "Placement",
        "metadata": {"name": "what-if", "namespace": ns},
        "spec": {
            "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]}]}}}],
            "tolerations": [{"key": "maintenance", "operator": "Exists"}],
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn",
                                     "addOn": {"resourceName": "demo", "scoreName": "demo"}},
                 "weight": 1}
            ]}
        }
    })
}

struct Tls {
    server: Arc<rustls::ServerConfig>,
    client: TlsConnector,
}

/// The runtime's self-signed certificate for 127.0.0.1, and a client that trusts only it.
fn self_signed_tls() -> Tls {
    let generated = ocm_runtime::tls::self_signed(&["127.0.0.1".to_owned()]).unwrap();
    Tls {
        server: generated.config,
        client: trusting(&[generated.certificate]),
    }
}

fn client_config() -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
}

/// A TLS client that trusts exactly these (self-signed) certificates.
fn trusting(certificates: &[CertificateDer<'static>]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in certificates {
        roots.add(c.clone()).unwrap();
    }
    let config = client_config()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

// ---------------------------------------------------------------------------------------------
// The binary's debug endpoint: how it is served (TLS by default, certificate reload, plain
// HTTP only on loopback), as the chart's scheduler identity

/// The identity the chart gives the scheduler (`files/scheduler-rbac.yaml`), set up once for
/// this test binary (its ClusterRoleBinding has one subject): user and groups.
async fn chart_identity() -> &'static (String, Vec<String>) {
    static IDENTITY: tokio::sync::OnceCell<(String, Vec<String>)> =
        tokio::sync::OnceCell::const_new();
    IDENTITY
        .get_or_init(|| async {
            let admin = testenv::shared().await.client().unwrap();
            let ns = testenv::namespace(&admin, "debug-scheduler").await.unwrap();
            let sa = "placement-scheduler";
            let rbac = include_str!("../../../charts/ocm-placement/files/scheduler-rbac.yaml")
                .replace("{{NAMESPACE}}", &ns)
                .replace("{{SUBJECT}}", sa);
            testenv::apply_yaml(&admin, &rbac, &ns).await.unwrap();
            (
                format!("system:serviceaccount:{ns}:{sa}"),
                vec![
                    "system:serviceaccounts".to_owned(),
                    format!("system:serviceaccounts:{ns}"),
                ],
            )
        })
        .await
}

/// `placement-scheduler controller` as the chart's identity, scheduling `ns`, with these
/// debug flags (and `--leader-elect=false` unless they set it); its JSON log lines are
/// collected. Killed when dropped.
struct Process {
    child: std::process::Child,
    /// Where it serves /metrics, /healthz and /readyz.
    metrics: SocketAddr,
    log: Arc<std::sync::Mutex<Vec<String>>>,
    dir: std::path::PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn scheduler_process(ns: &str, debug_args: &[String]) -> Process {
    let cp = testenv::shared().await;
    let (user, groups) = chart_identity().await;
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let dir = std::env::temp_dir().join(format!("{ns}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig(Some((user, &groups)))).unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .unwrap();
    let leader_elect = debug_args.iter().any(|a| a.starts_with("--leader-elect="));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_placement-scheduler"))
        .args(["controller", "--log-format", "json"])
        .args((!leader_elect).then_some("--leader-elect=false"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg(format!("--metrics-bind-address={metrics}"))
        .arg(format!("--namespaces={ns}"))
        .args(debug_args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn({
        let log = log.clone();
        move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap().push(line);
            }
        }
    });
    Process {
        child,
        metrics,
        log,
        dir,
    }
}

impl Process {
    /// The first log line (as JSON) for which `pick` gives something, waiting for it.
    async fn log_line<T>(&self, what: &str, pick: impl Fn(&Value) -> Option<T>) -> T {
        testenv::eventually(what, Duration::from_secs(30), || {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find_map(|v| pick(&v));
            async move { found }
        })
        .await
    }

    /// The exit status, waiting for it; and everything the process wrote to stderr.
    async fn exit(&mut self) -> (std::process::ExitStatus, String) {
        let status = testenv::eventually("the process to exit", Duration::from_secs(30), || {
            let status = self.child.try_wait().unwrap();
            async move { status }
        })
        .await;
        // The reader thread ends at EOF, soon after the exit.
        let log = testenv::eventually("its stderr", Duration::from_secs(30), || {
            let log = Arc::strong_count(&self.log)
                .eq(&1)
                .then(|| self.log.lock().unwrap().join("\n"));
            async move { log }
        })
        .await;
        (status, log)
    }
}

/// A placement in `ns` for the binary to have in its store.
async fn stored(admin: &Client, ns: &str) {
    let p: Placement = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "Placement",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {}
    }))
    .unwrap();
    Api::<Placement>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}
