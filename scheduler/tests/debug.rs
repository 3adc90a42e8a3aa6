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

// ---------------------------------------------------------------------------------------------
// The result shape

fn names(ns: &[&str]) -> Vec<Name> {
    ns.iter().map(|n| Name::from(*n)).collect()
}

fn stored_placement() -> Placement {
    serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "Placement",
        "metadata": {
            "name": "web", "namespace": "team",
            "labels": {"app": "web"}, "annotations": {"note": "x"},
            "uid": "1234", "resourceVersion": "7", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["f"], "managedFields": [{"manager": "kubectl"}]
        },
        "spec": {"numberOfClusters": 2, "clusterSets": ["s"]},
        "status": {"numberOfSelectedClusters": 2, "conditions": []}
    }))
    .unwrap()
}

type Prioritizer<'a> = (&'a str, i32, Vec<Option<i64>>);

/// An outcome with just what the debug view reads.
fn outcome(
    available: &[&str],
    filters: Vec<(&'static str, &[&str])>,
    filtered: &[&str],
    prioritizers: Vec<Prioritizer<'_>>,
    totals: Vec<i64>,
) -> Outcome {
    Outcome {
        namespace: "team".into(),
        name: "web".into(),
        bindings: vec!["s".into()],
        cluster_sets: vec!["s".into()],
        available: names(available),
        terminating: Vec::new(),
        filters: filters
            .into_iter()
            .map(|(n, dropped)| FilterResult {
                name: n,
                dropped: dropped
                    .iter()
                    .map(|d| {
                        (
                            Name::from(*d),
                            DropReason::MissingTopologyKey("zone".into()),
                        )
                    })
                    .collect(),
            })
            .collect(),
        filtered: names(filtered),
        prioritizers: prioritizers
            .into_iter()
            .map(|(n, weight, scores)| PrioritizerResult {
                name: n.into(),
                weight,
                scores,
            })
            .collect(),
        totals,
        selected: Vec::new(),
        spread: None,
        unscheduled: 0,
        status: Status::success(),
        notes: Vec::new(),
        validity_capped: Vec::new(),
        groups: Vec::new(),
        decisions: Vec::new(),
        writes: Vec::new(),
        placement_status: Default::default(),
        requeue_at: None,
    }
}

fn body(p: &Placement, o: &Outcome) -> Value {
    serde_json::to_value(debug_result(p, o)).unwrap()
}

#[test]
fn cumulative_filters_scores_and_totals_in_upstreams_shape() {
    let o = outcome(
        &["a", "b", "c", "d", "e"],
        vec![("Predicate", &["d"]), ("TaintToleration", &["b"])],
        &["a", "c", "e"],
        vec![
            ("Balance", 1, vec![Some(100), Some(100), Some(-100)]),
            ("Steady", 1, vec![Some(0), Some(100), Some(0)]),
            (
                "ResourceAllocatableCPU",
                2,
                vec![Some(-100), None, Some(100)],
            ),
            ("AddOn/usage/cpu", 3, vec![Some(10), Some(0), Some(-5)]),
        ],
        vec![30, 200, 85],
    );
    assert_eq!(
        body(&stored_placement(), &o),
        json!({
            "placement": {
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "Placement",
                "metadata": {
                    "name": "web", "namespace": "team",
                    "labels": {"app": "web"}, "annotations": {"note": "x"}
                },
                "spec": {
                    "clusterSets": ["s"], "numberOfClusters": 2,
                    "prioritizerPolicy": {}
                }
            },
            "filteredPipelineResults": [
                {"name": "Predicate", "filteredClusters": ["a", "b", "c", "e"]},
                // The last one in score order, as upstream's in-place sort leaves it.
                {"name": "Predicate,TaintToleration", "filteredClusters": ["c", "e", "a"]}
            ],
            "prioritizeResults": [
                {"name": "Balance", "weight": 1, "scores": {"a": 100, "c": 100, "e": -100}},
                {"name": "Steady", "weight": 1, "scores": {"a": 0, "c": 100, "e": 0}},
                // No entry for a cluster the prioritizer has no opinion on.
                {"name": "ResourceAllocatableCPU", "weight": 2, "scores": {"a": -100, "e": 100}},
                {"name": "AddOn/usage/cpu", "weight": 3, "scores": {"a": 10, "c": 0, "e": -5}}
            ],
            "aggregatedScores": [
                {"clusterName": "c", "score": 200},
                {"clusterName": "e", "score": 85},
                {"clusterName": "a", "score": 30}
            ]
        })
    );
}

#[test]
fn a_third_filter_extends_the_pipeline_name_and_only_the_last_is_in_score_order() {
    let o = outcome(
        &["a", "b", "c", "d"],
        vec![
            ("Predicate", &[]),
            ("TaintToleration", &["a"]),
            ("SpreadConstraints", &["c"]),
        ],
        &["b", "d"],
        vec![("Balance", 1, vec![Some(0), Some(100)])],
        vec![0, 100],
    );
    assert_eq!(
        body(&stored_placement(), &o)["filteredPipelineResults"],
        json!([
            {"name": "Predicate", "filteredClusters": ["a", "b", "c", "d"]},
            {"name": "Predicate,TaintToleration", "filteredClusters": ["b", "c", "d"]},
            {"name": "Predicate,TaintToleration,SpreadConstraints", "filteredClusters": ["d", "b"]}
        ])
    );
}

#[test]
fn equal_totals_sort_by_name_and_negative_totals_come_last() {
    let o = outcome(
        &["z", "m", "a", "q"],
        vec![("Predicate", &[]), ("TaintToleration", &[])],
        &["a", "m", "q", "z"],
        vec![],
        vec![-10, 50, 0, 50],
    );
    let v = body(&stored_placement(), &o);
    assert_eq!(
        v["aggregatedScores"],
        json!([
            {"clusterName": "m", "score": 50},
            {"clusterName": "z", "score": 50},
            {"clusterName": "q", "score": 0},
            {"clusterName": "a", "score": -10}
        ])
    );
    assert_eq!(
        v["filteredPipelineResults"][1]["filteredClusters"],
        json!(["m", "z", "q", "a"])
    );
    // No prioritizer ran (Exact mode without configurations): the list is left out.
    assert!(v.get("prioritizeResults").is_none());
}

#[test]
fn empty_lists_are_left_out_but_an_emptied_filter_shows_an_empty_list() {
    // Misconfigured before the filters: only the placement, without status.
    let o = outcome(&["a"], vec![], &[], vec![], vec![]);
    let v = body(&stored_placement(), &o);
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["placement"]);
    assert!(v["placement"].get("status").is_none());

    // Every cluster dropped: each filter still has its (empty) list; nothing was scored.
    let o = outcome(
        &["a"],
        vec![("Predicate", &["a"]), ("TaintToleration", &[])],
        &[],
        vec![("Balance", 1, vec![]), ("Steady", 1, vec![])],
        vec![],
    );
    let v = body(&stored_placement(), &o);
    assert_eq!(
        v["filteredPipelineResults"],
        json!([
            {"name": "Predicate", "filteredClusters": []},
            {"name": "Predicate,TaintToleration", "filteredClusters": []}
        ])
    );
    assert_eq!(
        v["prioritizeResults"],
        json!([
            {"name": "Balance", "weight": 1, "scores": {}},
            {"name": "Steady", "weight": 1, "scores": {}}
        ])
    );
    assert!(v.get("aggregatedScores").is_none());
}

#[test]
fn the_result_reads_back_and_keeps_no_runtime_metadata() {
    let o = outcome(
        &["a", "b"],
        vec![("Predicate", &["b"]), ("TaintToleration", &[])],
        &["a"],
        vec![("Balance", 1, vec![Some(100)])],
        vec![100],
    );
    let r = debug_result(&stored_placement(), &o);
    let back: DebugResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r);
    let p = back.placement.unwrap();
    assert_eq!(p.metadata.uid, None);
    assert_eq!(p.metadata.resource_version, None);
    assert_eq!(p.metadata.generation, None);
    assert_eq!(p.metadata.creation_timestamp, None);
    assert_eq!(p.metadata.finalizers, None);
    assert_eq!(p.metadata.managed_fields, None);
    assert_eq!(p.status, None);
    assert_eq!(p.spec, stored_placement().spec);
}

#[test]
fn errors_carry_upstreams_messages_and_codes() {
    let cases: Vec<(DebugError, StatusCode, &str)> = vec![
        (
            DebugError::Forbidden {
                verb: "get",
                namespace: "team".into(),
                reason: String::new(),
            },
            StatusCode::FORBIDDEN,
            "user does not have permission to get placements in namespace team",
        ),
        (
            DebugError::Forbidden {
                verb: "create",
                namespace: "team".into(),
                reason: "no rule".into(),
            },
            StatusCode::FORBIDDEN,
            "user does not have permission to create placements in namespace team: no rule",
        ),
        (
            DebugError::InvalidPath,
            StatusCode::BAD_REQUEST,
            "invalid debug path: namespace and name required",
        ),
        (
            DebugError::NotFound("web".into()),
            StatusCode::NOT_FOUND,
            "placement 'web' not found",
        ),
        (
            DebugError::MethodNotAllowed("DELETE".into()),
            StatusCode::METHOD_NOT_ALLOWED,
            "method DELETE not allowed",
        ),
        (
            DebugError::DeclaredBodyTooLarge {
                declared: 2_000_000,
                limit: MAX_REQUEST_BODY_BYTES,
            },
            StatusCode::BAD_REQUEST,
            "request body too large: 2000000 bytes exceeds maximum of 1048576 bytes",
        ),
        (
            DebugError::BodyTooLarge(MAX_REQUEST_BODY_BYTES),
            StatusCode::BAD_REQUEST,
            "request body too large: exceeds maximum of 1048576 bytes",
        ),
        (
            DebugError::AccessReview(ReviewError::Timeout(REVIEW_TIMEOUT)),
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to check permissions: no answer within 10s",
        ),
    ];
    for (e, status, message) in cases {
        assert_eq!(e.status(), status, "{e}");
        assert_eq!(e.to_string(), message);
        let r = e.response();
        assert_eq!(r.status(), status);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    }
    let r = DebugError::NoToken.response();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    let e = DebugError::Busy(4);
    assert_eq!(
        e.to_string(),
        "too many debug requests in progress (at most 4, --debug-max-concurrent-requests): retry later"
    );
    let r = e.response();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[header::RETRY_AFTER], "1");
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
// Against a real apiserver

#[tokio::test]
async fn get_with_permission_to_get_placements_schedules_the_stored_placement() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-get").await.unwrap();
    let other_ns = testenv::namespace(&admin, "debug-get-other").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    let path = format!("/debug/placements/{ns}/web");
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.content_type, "application/json");
    assert_eq!(reply.body, expected_web(&ns));

    // `get` does not allow a what-if (`create`), nor anything in another namespace.
    let reply = server.post(token.as_str(), what_if(&ns).to_string()).await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to create placements in namespace {ns}"),
    );
    let reply = server
        .get(&format!("/debug/placements/{other_ns}/web"), &token)
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {other_ns}"),
    );
}

#[tokio::test]
async fn a_service_account_without_rbac_is_forbidden() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-norbac").await.unwrap();
    let token = service_account(&admin, &ns, "nobody").await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    let reply = server
        .get(&format!("/debug/placements/{ns}/web"), &token)
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {ns}"),
    );
    // Which placements exist is not told to someone who may not read them: 403, not 404.
    let reply = server
        .get(&format!("/debug/placements/{ns}/no-such"), &token)
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{reply:?}");
    let reply = server.post(token.as_str(), what_if(&ns).to_string()).await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to create placements in namespace {ns}"),
    );
}

#[tokio::test]
async fn missing_or_invalid_tokens_are_unauthorized() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-authn").await.unwrap();
    let token = service_account(&admin, &ns, "short-lived").await;
    grant(&admin, &ns, "short-lived", &["get", "create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;
    let path = format!("/debug/placements/{ns}/web");

    for authorization in [
        None,
        Some("Bearer"),
        Some("Bearer garbage"),
        Some("Basic cmVhZGVyOnNlY3JldA=="),
    ] {
        let reply = server
            .request(Method::GET, &path, authorization, Bytes::new())
            .await;
        reply.assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
        assert_eq!(reply.www_authenticate.as_deref(), Some("Bearer"));
    }
    // Authentication comes first, whatever the method, path or body.
    for (method, path) in [
        (Method::DELETE, path.as_str()),
        (Method::GET, "/debug/placements/only-a-name"),
        (Method::POST, "/debug/placements/"),
        (Method::GET, "/elsewhere"),
    ] {
        let reply = server
            .request(method, path, Some("Bearer garbage"), "{")
            .await;
        reply.assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }

    // A real token works until its ServiceAccount is deleted.
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .delete("short-lived", &DeleteParams::default())
        .await
        .unwrap();
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status == StatusCode::UNAUTHORIZED,
    )
    .await;
    reply.assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
}

#[tokio::test]
async fn a_what_if_post_schedules_the_unsaved_placement() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-post").await.unwrap();
    let other_ns = testenv::namespace(&admin, "debug-post-other")
        .await
        .unwrap();
    let token = service_account(&admin, &ns, "planner").await;
    grant(&admin, &ns, "planner", &["create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    let body = what_if(&ns).to_string();
    let reply = eventually(
        || server.post(token.as_str(), body.clone()),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.content_type, "application/json");
    let mut placement = what_if(&ns);
    let spec: Placement = serde_json::from_value(placement.clone()).unwrap();
    placement["spec"] = serde_json::to_value(&spec.spec).unwrap();
    assert_eq!(
        reply.body,
        json!({
            "placement": placement,
            "filteredPipelineResults": [
                {"name": "Predicate", "filteredClusters": ["c1", "c2", "c3", "c4"]},
                {"name": "Predicate,TaintToleration",
                 "filteredClusters": ["c4", "c1", "c3", "c2"]}
            ],
            "prioritizeResults": [
                {"name": "AddOn/demo/demo", "weight": 1,
                 "scores": {"c1": 50, "c2": -20, "c3": 0, "c4": 70}}
            ],
            "aggregatedScores": [
                {"clusterName": "c4", "score": 70},
                {"clusterName": "c1", "score": 50},
                {"clusterName": "c3", "score": 0},
                {"clusterName": "c2", "score": -20}
            ]
        })
    );

    // `create` does not allow GET (`get`).
    let reply = server
        .get(&format!("/debug/placements/{ns}/web"), &token)
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {ns}"),
    );
    // The namespace reviewed is the body's.
    let reply = server
        .post(token.as_str(), what_if(&other_ns).to_string())
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to create placements in namespace {other_ns}"),
    );
}

#[tokio::test]
async fn bad_requests_are_refused_with_upstreams_messages() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-bad").await.unwrap();
    let token = service_account(&admin, &ns, "both").await;
    grant(&admin, &ns, "both", &["get", "create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;
    let bearer = format!("Bearer {token}");

    // Wait until RBAC lets "both" in.
    let path = format!("/debug/placements/{ns}/web");
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let reply = eventually(
        || server.post(token.as_str(), what_if(&ns).to_string()),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    for p in [
        "/debug/placements/",
        "/debug/placements/only-a-name",
        &format!("/debug/placements/{ns}/"),
        &format!("/debug/placements/{ns}/web/extra"),
    ] {
        server.get(p, &token).await.assert_error(
            StatusCode::BAD_REQUEST,
            "invalid debug path: namespace and name required",
        );
    }
    server
        .get(&format!("/debug/placements/{ns}/no-such"), &token)
        .await
        .assert_error(StatusCode::NOT_FOUND, "placement 'no-such' not found");
    server
        .get("/debug/other", &token)
        .await
        .assert_error(StatusCode::NOT_FOUND, "path /debug/other not found");
    for method in [Method::DELETE, Method::PUT, Method::PATCH, Method::HEAD] {
        let reply = server
            .request(method.clone(), &path, Some(&bearer), Bytes::new())
            .await;
        if method == Method::HEAD {
            // No body comes back to a HEAD; the status says it.
            assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
            continue;
        }
        reply.assert_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("method {method} not allowed"),
        );
    }

    server.post(token.as_str(), "{").await.assert_error(
        StatusCode::BAD_REQUEST,
        "failed to unmarshal placement JSON: ",
    );
    server
        .post(token.as_str(), r#"{"spec": {"numberOfClusters": "two"}}"#)
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "failed to unmarshal placement JSON: ",
        );
    for no_namespace in [
        r#"{"metadata": {"name": "x"}}"#,
        "{}",
        r#"{"metadata": {"namespace": ""}}"#,
    ] {
        server
            .post(token.as_str(), no_namespace)
            .await
            .assert_error(
                StatusCode::BAD_REQUEST,
                "placement JSON has no metadata.namespace",
            );
    }
    server.post(token.as_str(), "[]").await.assert_error(
        StatusCode::BAD_REQUEST,
        "failed to unmarshal placement JSON: ",
    );
    // A Placement without spec is Go's zero spec: every cluster of the bound sets, scored by
    // the defaults.
    let reply = server
        .post(
            token.as_str(),
            json!({"metadata": {"name": "bare", "namespace": ns}}).to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(
        reply.body["filteredPipelineResults"][0],
        json!({"name": "Predicate", "filteredClusters": ["c1", "c2", "c3", "c4"]})
    );
    assert_eq!(
        reply.body["filteredPipelineResults"][1]["filteredClusters"],
        json!(["c4", "c1", "c2"])
    );
    server
        .post(token.as_str(), vec![b' '; MAX_REQUEST_BODY_BYTES + 1])
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "request body too large: 1048577 bytes exceeds maximum of 1048576 bytes",
        );
    // Exactly the limit is read (JSON may be padded with whitespace).
    let mut padded = what_if(&ns).to_string().into_bytes();
    padded.resize(MAX_REQUEST_BODY_BYTES, b' ');
    let reply = server.post(token.as_str(), padded).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn over_tls_with_a_self_signed_certificate() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-tls").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let server = start(admin.clone(), fleet(&ns), Some(self_signed_tls())).await;

    let path = format!("/debug/placements/{ns}/web");
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, expected_web(&ns));
    server
        .request(Method::GET, &path, None, Bytes::new())
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");

    // Plain HTTP to the TLS port gets no answer.
    let plain = Server {
        addr: server.addr,
        tls: None,
        stop: None,
    };
    let tcp = TcpStream::connect(plain.addr).await.unwrap();
    let req = Request::get(path.as_str())
        .header(header::HOST, plain.addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    assert!(sender.send_request(req).await.is_err());
}

#[tokio::test]
async fn reviews_the_server_may_not_make_are_server_errors() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-500").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    // The server acts as an identity that may create TokenReviews only once granted below,
    // and never SubjectAccessReviews.
    let identity = format!("debug-server-{ns}");
    let server = start(cp.client_as(&identity, &[]).unwrap(), fleet(&ns), None).await;
    let path = format!("/debug/placements/{ns}/web");

    server.get(&path, &token).await.assert_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "failed to authenticate the request: ",
    );

    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(identity.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["authentication.k8s.io".into()]),
            resources: Some(vec!["tokenreviews".into()]),
            verbs: vec!["create".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(identity.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: identity.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: identity.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let reply = eventually(
        || server.get(&path, &token),
        |r| !r.error().starts_with("failed to authenticate"),
    )
    .await;
    reply.assert_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "failed to check permissions: ",
    );

    // Cluster-scoped objects outlive the namespace: remove them.
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&identity, &DeleteParams::default())
        .await
        .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .delete(&identity, &DeleteParams::default())
        .await
        .unwrap();
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
            let rbac = include_str!("../../charts/ocm-placement/files/scheduler-rbac.yaml")
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

    fn logged(&self, message_contains: &str) -> bool {
        self.log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(message_contains))
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

/// Sends `GET path` with a bearer token as plain HTTP/1.1 bytes to `addr` and returns every
/// byte that comes back until the server closes the connection.
async fn plain_http_exchange(addr: SocketAddr, path: &str, token: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // A guard against a server that neither answers nor closes, not a timing assertion.
    tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer))
        .await
        .expect("the server neither answered nor closed the connection")
        .ok();
    answer
}

/// The certificate a TLS handshake with `addr` presents (`connector` must accept it).
async fn served_certificate(addr: SocketAddr, connector: &TlsConnector) -> CertificateDer<'static> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// Accepts the server certificate whose SHA-256 fingerprint is the pinned one (what a client
/// of a self-signed endpoint does with the fingerprint from its log); the handshake
/// signatures are still verified, so the server proves it holds the key.
#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if ocm_runtime::tls::fingerprint(end_entity) == self.fingerprint {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("not the pinned certificate".into()))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn pinning(fingerprint: &str) -> TlsConnector {
    let verifier = Pinned {
        fingerprint: fingerprint.to_owned(),
        provider: Arc::new(rustls::crypto::ring::default_provider()),
    };
    let config = client_config()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// The attack: a caller's bearer token sent to the scheduler's default debug endpoint. With
/// no certificate configured the endpoint used to answer plain HTTP, so anyone on the path
/// could read the token; now it serves only TLS, with a certificate made at start whose
/// fingerprint it logs, and still refuses callers without a token or without the RBAC.
#[tokio::test]
async fn the_binary_serves_its_debug_endpoint_over_tls_by_default() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-bin-tls").await.unwrap();
    let reader = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let nobody = service_account(&admin, &ns, "nobody").await;
    stored(&admin, &ns).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .unwrap();
    let process = scheduler_process(&ns, &[format!("--debug-bind-address={addr}")]).await;
    process
        .log_line("the debug endpoint serving", |v| {
            (v["message"] == "serving the placement debug endpoint").then_some(())
        })
        .await;
    let path = format!("/debug/placements/{ns}/web");

    // Plain HTTP with a valid token: no HTTP answer at all, the connection is closed.
    let answer = plain_http_exchange(addr, &path, &reader).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP was answered: {}",
        String::from_utf8_lossy(&answer)
    );

    // Over TLS, pinned to the logged fingerprint.
    let fingerprint = process
        .log_line("the self-signed certificate's fingerprint", |v| {
            v["fingerprint"].as_str().map(str::to_owned)
        })
        .await;
    let server = Server {
        addr,
        tls: Some(pinning(&fingerprint)),
        stop: None,
    };
    let presented = served_certificate(addr, server.tls.as_ref().unwrap()).await;
    assert_eq!(ocm_runtime::tls::fingerprint(&presented), fingerprint);
    server
        .request(Method::GET, &path, None, Bytes::new())
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    server
        .get(&path, "garbage")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    server.get(&path, &nobody).await.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {ns}"),
    );
    let reply = eventually(
        || server.get(&path, &reader),
        |r| r.status == StatusCode::OK,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(
        reply.body["placement"]["metadata"]["name"], "web",
        "{reply:?}"
    );
}

/// Replaces `path` with `contents` in one step, as a Secret volume or cert-manager does.
fn replace_file(path: &std::path::Path, contents: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, contents).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Certificate files replaced under the running binary: a half-written pair (the new
/// certificate with the old key) keeps the old certificate, the complete pair reaches new
/// connections, without a restart.
#[tokio::test]
async fn the_binary_serves_replaced_certificate_files_to_new_connections() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-bin-reload")
        .await
        .unwrap();
    let certs = std::env::temp_dir().join(format!("{ns}-certs-{}", std::process::id()));
    std::fs::create_dir_all(&certs).unwrap();
    let (cert, key) = (certs.join("tls.crt"), certs.join("tls.key"));
    let old = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let new = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    replace_file(&cert, &old.cert.pem());
    replace_file(&key, &old.signing_key.serialize_pem());
    let addr: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .unwrap();
    let process = scheduler_process(
        &ns,
        &[
            format!("--debug-bind-address={addr}"),
            format!("--tls-cert-file={}", cert.display()),
            format!("--tls-key-file={}", key.display()),
        ],
    )
    .await;
    process
        .log_line("the debug endpoint serving", |v| {
            (v["message"] == "serving the placement debug endpoint").then_some(())
        })
        .await;
    let client = trusting(&[old.cert.der().clone(), new.cert.der().clone()]);
    assert_eq!(served_certificate(addr, &client).await, *old.cert.der());

    // Half-written: the old certificate stays, and the refusal is logged.
    replace_file(&cert, &new.cert.pem());
    assert_eq!(served_certificate(addr, &client).await, *old.cert.der());
    process
        .log_line("the unusable pair logged", |v| {
            (v["level"] == "ERROR" && v["error"].as_str()?.contains("does not belong"))
                .then_some(())
        })
        .await;

    replace_file(&key, &new.signing_key.serialize_pem());
    assert_eq!(served_certificate(addr, &client).await, *new.cert.der());
    assert!(process.logged("serving certificate reloaded"));
    // And it serves the endpoint with it.
    let server = Server {
        addr,
        tls: Some(client),
        stop: None,
    };
    server
        .request(Method::GET, "/debug/placements/a/b", None, Bytes::new())
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    drop(process);
    std::fs::remove_dir_all(&certs).unwrap();
}

/// Plain HTTP only when asked for, and then only on loopback: a non-loopback bind stops the
/// binary at start with a clear error, and the library refuses it as well.
#[tokio::test]
async fn plain_http_is_served_only_on_loopback() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-bin-plain").await.unwrap();

    let mut refused = scheduler_process(
        &ns,
        &[
            "--debug-insecure-loopback".to_owned(),
            format!("--debug-bind-address=0.0.0.0:{}", testenv::free_port()),
        ],
    )
    .await;
    let (status, log) = refused.exit().await;
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("plain HTTP is served only on a loopback address"),
        "{log}"
    );

    let addr: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .unwrap();
    let process = scheduler_process(
        &ns,
        &[
            "--debug-insecure-loopback".to_owned(),
            format!("--debug-bind-address={addr}"),
        ],
    )
    .await;
    process
        .log_line("the debug endpoint serving", |v| {
            (v["message"] == "serving the placement debug endpoint" && v["tls"] == false)
                .then_some(())
        })
        .await;
    let server = Server {
        addr,
        tls: None,
        stop: None,
    };
    server
        .request(Method::GET, "/debug/placements/a/b", None, Bytes::new())
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");

    for any in ["0.0.0.0:0", "[::]:0"] {
        let Ok(listener) = TcpListener::bind(any).await else {
            continue; // no IPv6 here
        };
        let refused = debug::serve(
            listener,
            Transport::PlainLoopback,
            debug::Debugger::new(
                admin.clone(),
                Arc::new(fleet(&ns)),
                debug::DebugLimits::default(),
                debug::DebugMetrics::default(),
            ),
            std::future::pending(),
        );
        assert!(
            matches!(refused, Err(ServeError::PlainNotLoopback(_))),
            "{any}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bounds: the review cache, the concurrency bound, and a review flood against the binary

/// The value of the sample `name_and_labels` (as the text format writes it) in `text`, 0 when
/// absent.
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

fn encoded(registry: &prometheus_client::registry::Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

const TOKEN_ACCEPTED: &str =
    r#"placement_debug_reviews_total{kind="TokenReview",result="Accepted"}"#;
const TOKEN_REJECTED: &str =
    r#"placement_debug_reviews_total{kind="TokenReview",result="Rejected"}"#;
const ACCESS_ACCEPTED: &str =
    r#"placement_debug_reviews_total{kind="SubjectAccessReview",result="Accepted"}"#;
const TOKEN_HITS: &str = r#"placement_debug_review_cache_hits_total{kind="TokenReview"}"#;
const ACCESS_HITS: &str = r#"placement_debug_review_cache_hits_total{kind="SubjectAccessReview"}"#;
const THROTTLED: &str = "placement_debug_requests_throttled_total";

/// A caller's requests within the cache's time to live cost one TokenReview and one
/// SubjectAccessReview, not one each per request.
#[tokio::test]
async fn a_callers_reviews_are_reused_within_the_cache_ttl() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-cache").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = debug::DebugMetrics::new(&mut registry);
    let limits = debug::DebugLimits {
        debug_review_cache_ttl: Duration::from_secs(60),
        ..Default::default()
    };
    let debugger = debug::Debugger::new(admin.clone(), Arc::new(fleet(&ns)), limits, metrics);
    let server = start_with(debugger, None).await;
    let path = format!("/debug/placements/{ns}/web");
    // RBAC reaches the authorizer through its cache: until then a denial, cached as well.
    let reply = testenv::eventually("the grant to be seen", Duration::from_secs(90), || async {
        let r = server.get(&path, &token).await;
        (r.status == StatusCode::OK).then_some(r)
    })
    .await;
    assert_eq!(reply.status, StatusCode::OK);

    let before = encoded(&registry);
    for _ in 0..20 {
        assert_eq!(server.get(&path, &token).await.status, StatusCode::OK);
    }
    let after = encoded(&registry);
    let delta = |name: &str| sample(&after, name) - sample(&before, name);
    assert_eq!(delta(TOKEN_ACCEPTED), 0.0, "{after}");
    assert_eq!(delta(ACCESS_ACCEPTED), 0.0, "{after}");
    assert_eq!(delta(TOKEN_HITS), 20.0, "{after}");
    assert_eq!(delta(ACCESS_HITS), 20.0, "{after}");
    assert_eq!(
        sample(&after, TOKEN_ACCEPTED),
        1.0,
        "one review for one token: {after}"
    );

    // A token that is not accepted is not reviewed again either; one never seen is.
    for _ in 0..3 {
        server
            .get(&path, "not-a-token")
            .await
            .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    server
        .get(&path, "another-bad-token")
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    assert_eq!(sample(&encoded(&registry), TOKEN_REJECTED), 2.0);
}

/// A debug source whose scheduling waits until the test opens the gate.
struct Gated {
    fleet: Fleet,
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    entered: std::sync::atomic::AtomicUsize,
}

impl Gated {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl DebugSource for Gated {
    fn placement(&self, namespace: &str, name: &str) -> Option<Arc<Placement>> {
        self.fleet.placement(namespace, name)
    }

    fn schedule(&self, placement: &Placement) -> Outcome {
        self.entered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        drop(open);
        self.fleet.schedule(placement)
    }
}

/// With `--debug-max-concurrent-requests` requests being worked on, the next is answered 429
/// with `Retry-After` at once (not queued); once they finish, requests are served again.
#[tokio::test]
async fn requests_beyond_the_concurrency_bound_are_answered_429_at_once() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-busy").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let gated = Arc::new(Gated {
        fleet: fleet(&ns),
        open: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
        entered: Default::default(),
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = debug::DebugMetrics::new(&mut registry);
    let limits = debug::DebugLimits {
        debug_max_concurrent_requests: 2,
        ..Default::default()
    };
    let debugger = debug::Debugger::new(admin.clone(), gated.clone(), limits, metrics);
    let server = Arc::new(start_with(debugger, None).await);
    let path = format!("/debug/placements/{ns}/web");

    // Two requests get as far as scheduling and wait there.
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (server, path, token) = (server.clone(), path.clone(), token.clone());
            tokio::spawn(async move {
                testenv::eventually("the grant to be seen", Duration::from_secs(90), || async {
                    let r = server.get(&path, &token).await;
                    (r.status != StatusCode::FORBIDDEN).then_some(r)
                })
                .await
            })
        })
        .collect();
    testenv::eventually("two requests scheduling", Duration::from_secs(90), || {
        let n = gated.entered.load(std::sync::atomic::Ordering::SeqCst);
        async move { (n >= 2).then_some(()) }
    })
    .await;

    // The third is refused at once: it waits neither for a permit nor for a review.
    let reply = tokio::time::timeout(Duration::from_secs(10), server.get(&path, &token))
        .await
        .expect("a request beyond the bound is answered at once");
    reply.assert_error(
        StatusCode::TOO_MANY_REQUESTS,
        "too many debug requests in progress (at most 2",
    );
    let throttled = sample(&encoded(&registry), THROTTLED);
    assert_eq!(throttled, 1.0);

    gated.open();
    for w in waiting {
        assert_eq!(w.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(server.get(&path, &token).await.status, StatusCode::OK);
}

/// The TokenReviews (POST tokenreviews) the apiserver has served so far, from its metrics.
async fn apiserver_token_reviews(admin: &Client) -> f64 {
    let text = admin
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"resource="tokenreviews""#)
                && l.contains(r#"verb="POST""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The holder and renew time of a Lease.
async fn lease_state(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
) -> Option<(String, String)> {
    let spec = leases.get_opt("placement-scheduler").await.ok()??.spec?;
    Some((
        spec.holder_identity.filter(|h| !h.is_empty())?,
        serde_json::to_string(&spec.renew_time).ok()?,
    ))
}

/// Idle and half-sent connections beyond the default cap (256) held on the metrics and the
/// debug port, and a flood of debug requests (distinct invalid tokens, a valid token over and
/// over) against the binary while it leads: the Lease keeps its holder and is renewed all
/// along, /metrics and /healthz keep answering, each port holds at most its cap of the held
/// connections, requests beyond the bound are 429 at once, and the valid token's requests
/// cost a bounded number of TokenReviews (the cache), far fewer than requests answered.
/// Prints the /metrics latency under the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_review_flood_neither_costs_the_lease_nor_stalls_metrics() {
    const FLOOD: Duration = Duration::from_secs(8);
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-flood").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    stored(&admin, &ns).await;
    // The Lease lives where the chart's identity may write it.
    let (user, _) = chart_identity().await;
    let lease_ns = user.split(':').nth(2).unwrap().to_owned();
    let leases = Api::namespaced(admin.clone(), &lease_ns);
    let addr: SocketAddr = format!("127.0.0.1:{}", testenv::free_port())
        .parse()
        .unwrap();
    let process = scheduler_process(
        &ns,
        &[
            "--leader-elect=true".to_owned(),
            format!("--leader-election-namespace={lease_ns}"),
            "--leader-election-lease-duration=4s".to_owned(),
            "--leader-election-renew-deadline=3s".to_owned(),
            "--leader-election-retry-period=500ms".to_owned(),
            "--debug-insecure-loopback".to_owned(),
            format!("--debug-bind-address={addr}"),
        ],
    )
    .await;
    let (holder, _) = testenv::eventually("the scheduler to lead", Duration::from_secs(60), || {
        lease_state(&leases)
    })
    .await;
    let server = Arc::new(Server {
        addr,
        tls: None,
        stop: None,
    });
    let path = format!("/debug/placements/{ns}/web");
    testenv::eventually(
        "the debug endpoint to serve the reader",
        Duration::from_secs(90),
        || {
            let (server, path, token) = (server.clone(), path.clone(), token.clone());
            async move {
                let r = server.get(&path, &token).await;
                (r.status == StatusCode::OK).then_some(())
            }
        },
    )
    .await;
    let scheduler_metrics = || async {
        tokio::time::timeout(
            Duration::from_secs(5),
            plain_get(process.metrics, "/metrics"),
        )
        .await
        .expect("/metrics answers")
    };
    let before = scheduler_metrics().await;
    let apiserver_before = apiserver_token_reviews(&admin).await;

    // More held connections than the default cap on each port.
    const CAP: usize = ocm_runtime::http::DEFAULT_MAX_CONNECTIONS;
    let mut held: HashMap<&str, Vec<TcpStream>> = HashMap::new();
    for (port, at) in [("metrics", process.metrics), ("debug", addr)] {
        for i in 0..CAP + 50 {
            held.entry(port)
                .or_default()
                .push(hold(at, i % 2 == 1).await);
        }
    }

    let started = Instant::now();
    // Counted answers: 200, 401, 429 by the valid token / the invalid ones.
    let tally = Arc::new(std::sync::Mutex::new(
        HashMap::<(&str, StatusCode), u32>::new(),
    ));
    let mut flood = Vec::new();
    for task in 0..16 {
        let (server, path, tally) = (server.clone(), path.clone(), tally.clone());
        flood.push(tokio::spawn(async move {
            let mut i = 0;
            while started.elapsed() < FLOOD {
                let r = server.get(&path, &format!("invalid-{task}-{i}")).await;
                i += 1;
                assert!(
                    matches!(
                        r.status,
                        StatusCode::UNAUTHORIZED | StatusCode::TOO_MANY_REQUESTS
                    ),
                    "{r:?}"
                );
                *tally
                    .lock()
                    .unwrap()
                    .entry(("invalid", r.status))
                    .or_default() += 1;
            }
        }));
    }
    for _ in 0..2 {
        let (server, path, tally, token) =
            (server.clone(), path.clone(), tally.clone(), token.clone());
        flood.push(tokio::spawn(async move {
            while started.elapsed() < FLOOD {
                let r = server.get(&path, &token).await;
                assert!(
                    matches!(r.status, StatusCode::OK | StatusCode::TOO_MANY_REQUESTS),
                    "{r:?}"
                );
                *tally
                    .lock()
                    .unwrap()
                    .entry(("valid", r.status))
                    .or_default() += 1;
            }
        }));
    }

    // Meanwhile: the Lease never changes hands and keeps being renewed; the probes answer.
    let mut renewals = std::collections::HashSet::new();
    let mut latency = Vec::new();
    while started.elapsed() < FLOOD {
        for (port, at) in [("metrics", process.metrics), ("debug", addr)] {
            held.entry(port).or_default().push(hold(at, true).await);
        }
        let (now_holder, renewed) = lease_state(&leases).await.expect("the Lease has a holder");
        assert_eq!(
            now_holder, holder,
            "the Lease changed hands during the flood"
        );
        renewals.insert(renewed);
        let probe = Instant::now();
        let _ = scheduler_metrics().await;
        latency.push(probe.elapsed());
        let healthz = tokio::time::timeout(
            Duration::from_secs(5),
            plain_get(process.metrics, "/healthz"),
        )
        .await
        .expect("/healthz answers");
        assert_eq!(healthz, "ok\n");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for f in flood {
        f.await.unwrap();
    }
    let (last_holder, _) = lease_state(&leases).await.unwrap();
    assert_eq!(last_holder, holder);
    for (port, conns) in &held {
        testenv::eventually(
            &format!(
                "the {port} port to hold at most {CAP} of {} held connections",
                conns.len()
            ),
            Duration::from_secs(10),
            || {
                let open = conns.iter().filter(|c| !closed_by_server(c)).count();
                async move { (open <= CAP).then_some(()) }
            },
        )
        .await;
    }
    assert!(
        renewals.len() >= 2,
        "the Lease was renewed during the flood: {renewals:?}"
    );

    let after = scheduler_metrics().await;
    let apiserver_delta = apiserver_token_reviews(&admin).await - apiserver_before;
    let delta = |name: &str| sample(&after, name) - sample(&before, name);
    let tally = tally.lock().unwrap().clone();
    let count = |who, status| f64::from(tally.get(&(who, status)).copied().unwrap_or(0));
    let valid_ok = count("valid", StatusCode::OK);
    let invalid_401 = count("invalid", StatusCode::UNAUTHORIZED);
    let all_429 = count("valid", StatusCode::TOO_MANY_REQUESTS)
        + count("invalid", StatusCode::TOO_MANY_REQUESTS);
    latency.sort();
    println!(
        "flood of {FLOOD:?}: {tally:?}; TokenReviews sent: {} accepted, {} rejected; apiserver TokenReviews: {apiserver_delta}; /metrics p50 {:?} p99 {:?} max {:?}",
        delta(TOKEN_ACCEPTED),
        delta(TOKEN_REJECTED),
        latency[latency.len() / 2],
        latency[(latency.len() * 99 / 100).min(latency.len() - 1)],
        latency.last().unwrap(),
    );
    assert!(valid_ok > 0.0, "{tally:?}");
    // The valid token: within the flood (shorter than the cache's 10 s) its entry expires at
    // most once, and then each of the two callers may miss it at the same moment: at most two
    // reviews, not one per request.
    assert!(
        delta(TOKEN_ACCEPTED) <= 2.0,
        "{} TokenReviews for one token in {FLOOD:?}",
        delta(TOKEN_ACCEPTED)
    );
    // Each invalid token is reviewed at most once; none is reviewed for a 429.
    assert!(delta(TOKEN_REJECTED) <= invalid_401, "{tally:?}");
    assert_eq!(delta(THROTTLED), all_429, "every 429 is counted");
    // What the apiserver saw (this also holds other tests' reviews): fewer TokenReviews than
    // requests reviewed one by one would make.
    assert!(
        apiserver_delta < valid_ok + invalid_401,
        "apiserver served {apiserver_delta} TokenReviews for {valid_ok} valid and {invalid_401} invalid requests"
    );
}

/// GET `path` over plain HTTP on a new connection: the body of a 200 answer.
async fn plain_get(addr: SocketAddr, path: &str) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header(header::HOST, addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A connection that sends nothing, or (`half_sent`) the start of a request head, and stops.
async fn hold(addr: SocketAddr, half_sent: bool) -> TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    if half_sent {
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
    }
    conn
}

/// Whether the server closed `conn`, as the client sees it: a read that ends or fails.
fn closed_by_server(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    !matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
