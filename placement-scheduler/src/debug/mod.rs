//! The debug endpoint (upstream `pkg/placement/debugger`): schedules a stored Placement, or an
//! unsaved one sent in the request ("what if"), against the current state and shows how each
//! filter and prioritizer saw the clusters. Nothing is written.
//!
//! - `GET /debug/placements/<namespace>/<name>`: the stored Placement.
//! - `POST /debug/placements/` with a Placement as JSON (at most `--debug-max-body-bytes`,
//!   1 MiB as upstream): that Placement, in its `metadata.namespace`.
//!
//! Every request must carry `Authorization: Bearer <token>`. The token is checked with a
//! `TokenReview`, then a `SubjectAccessReview` asks whether that user (with its groups, uid
//! and extra) may `get` (GET) or `create` (POST) `placements.cluster.open-cluster-management.io`
//! in the placement's namespace. The server's own client needs `create` on `tokenreviews` and
//! `subjectaccessreviews`.
//!
//! Bounds ([`DebugLimits`], [`admit`]), so that no caller (nor a flood of them) stalls the
//! scheduler, competes with its lease or starves another caller. The caller is known first:
//! its token from the cache, or a TokenReview the gate lets through (at most
//! `--debug-max-concurrent-requests` at once, and `--debug-max-token-reviews-per-source` a
//! second from one address; a token accepted before has a lane of its own). Then a GET whose
//! denial is cached is answered 403 at once. Only then does the request take a slot: at most
//! `--debug-max-concurrent-requests` in all, shared fairly among users and at most
//! `--debug-max-requests-per-user` each, held while the POST body is read, an uncached
//! SubjectAccessReview is made and the Placement is scheduled (on the blocking pool, until it
//! ends). Every refusal is a 429 with `Retry-After` at once, never queued. SubjectAccessReview
//! answers are cached for `--debug-review-cache-ttl` (10 s, as the generic apiserver), an
//! accepted token for half of that (kube-apiserver's own token cache may vouch for a revoked
//! token for 10 s more), a refused one for at most 2 s; at most `--debug-review-cache-size`
//! entries per kind, keyed by a SHA-256 of the token (raw tokens are never kept); a review that
//! could not be made is not cached. `placement_debug_reviews_total{kind,result}` counts the reviews sent,
//! `placement_debug_review_cache_hits_total{kind}` those answered from the cache and
//! `placement_debug_requests_throttled_total` the 429s. The reviews go through a client of
//! their own (main.rs), whose rate limiter is not the controller's; the elector has its own.
//!
//! Because every request carries a token, [`serve`] speaks HTTPS ([`Transport::Tls`]), or
//! plain HTTP only on a loopback listener ([`Transport::PlainLoopback`]); plain HTTP on any
//! other address is refused before anything is served ([`ServeError`]).
//!
//! | answer | when |
//! | --- | --- |
//! | 200 | the [`DebugResult`] as JSON |
//! | 400 | a path without namespace and name, a body over `--debug-max-body-bytes` (1 MiB) or not sent within [`BODY_READ_TIMEOUT`], JSON that is no Placement, a Placement without namespace |
//! | 401 | no bearer token, or one the apiserver does not accept |
//! | 403 | the review denies the verb in that namespace |
//! | 429 | every slot taken, the user's share taken, too many TokenReviews in progress or from this address (`Retry-After: 1`) |
//! | 404 | no such Placement, or a path outside `/debug/placements/` |
//! | 405 | a method other than GET and POST |
//! | 500 | a review that could not be made, clusters that could not be read |
//!
//! Errors are `{"error": "<message>"}` with `Content-Type: application/json`, with
//! upstream's messages.
//!
//! Where this differs from upstream on purpose:
//!
//! - Upstream runs inside a Kubernetes generic apiserver, which authenticates and also requires
//!   the non-resource permission `/debug/placements/*` (verbs `get`/`post`) before the handler
//!   runs. Here the placements permission in the namespace is the only authorization: it is
//!   the one that says what a user may see.
//! - GET asks for `get` on placements, as upstream's main branch does (ocm#1623); OCM's
//!   v1.2 and v1.3 releases ask for `create`. Reading how a Placement is scheduled is reading.
//! - GET checks the permission before looking the Placement up, so that a user who may not
//!   read placements in a namespace cannot learn which exist there (403, never 404). Upstream
//!   looks up first.
//! - A `TokenReview` that cannot be made is a 500 (`failed to authenticate the request: ...`);
//!   the generic apiserver answers 401. A 401 body is our `{"error": ...}`, not a
//!   `metav1.Status`, and carries `WWW-Authenticate: Bearer`.
//! - The SubjectAccessReview carries the user's uid as well (upstream passes user, groups and
//!   extra). Both reviews are cached (above); each gets at most [`REVIEW_TIMEOUT`], and a
//!   POST body at most [`BODY_READ_TIMEOUT`] to arrive.
//! - A POSTed Placement without `metadata.namespace` is a 400. Upstream reviews the empty
//!   namespace (all namespaces) and schedules against namespace `""`, where nothing is bound.
//! - POSTed JSON is read by serde: field names match exactly (Go's decoder also accepts other
//!   letter cases). A missing or `null` optional field is the unset one, as in Go (its zero
//!   value, or the CRD default where upstream's CRD has one), `metadata` and `spec` included:
//!   Go clients write `null` for empty lists (`"conditions": null`).
//! - A denial whose review gives no reason ends after the namespace (upstream leaves a
//!   trailing `": "`).
//! - A path with more than two segments is the same 400 as one with fewer (upstream:
//!   `unexpected key format`).
//! - The 200 answer says `Content-Type: application/json` (upstream sets none, so Go sniffs
//!   `text/plain`).
//! - `placement` is our typed Placement: it always has `apiVersion` and `kind`, and leaves out
//!   `status` and `creationTimestamp`, which upstream writes as zero values
//!   (`"status": {"numberOfSelectedClusters": 0, ...}`, `"creationTimestamp": null`).
//! - The lists come in our core's fixed orders: filters in pipeline order (the
//!   `SpreadConstraints` filter, ours, is third when a `DoNotSchedule` constraint exists), each
//!   filter's clusters by name, prioritizers as the core runs them (defaults, then the
//!   configurations in spec order, then `TopologyAffinity/<key>`). Upstream iterates Go maps.
//!   A Placement our core finds misconfigured stops before the filters, so
//!   `filteredPipelineResults` is absent where upstream may show the filters that ran before a
//!   bad prioritizer configuration.
//!
//! Upstream quirks kept because they are harmless: the last `filteredPipelineResults` entry
//! lists its clusters in the final score order (total descending, then name), as upstream's
//! in-place sort leaves it; empty lists are left out (`omitempty`), except a filter's
//! `filteredClusters`, which is `[]`; a prioritizer's `scores` has no entry for a cluster it
//! has no opinion on (a cluster without the allocatable resource).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use ocm_api::Placement;
use ocm_runtime::http::{HttpResponse, Listener, respond};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use thiserror::Error;

use placement_core::{Code, Outcome};

/// The path prefix every request must start with.
pub const DEBUG_PATH: &str = "/debug/placements/";
/// The default largest POST body accepted (1 MiB, as upstream).
pub const MAX_REQUEST_BODY_BYTES: usize = 1024 * 1024;
/// How long a TokenReview or SubjectAccessReview may take before the request fails (500).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a POST body may take to arrive (a slow sender holds a request permit).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a token accepted before keeps its own review lane.
const KNOWN_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// What a 429 asks the caller to wait, in seconds.
const RETRY_AFTER_SECONDS: &str = "1";

/// The endpoint's bounds (flags of `placement-scheduler controller`).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct DebugLimits {
    /// Debug requests worked on at once, once their caller is known (a POST body, an uncached
    /// SubjectAccessReview, scheduling); more are answered 429 with Retry-After at once. Also
    /// the TokenReviews of unknown tokens in progress at once.
    #[arg(long, env = "DEBUG_MAX_CONCURRENT_REQUESTS", default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub debug_max_concurrent_requests: usize,
    /// The largest POST body (a what-if Placement) accepted, in bytes; larger is a 400.
    #[arg(long, env = "DEBUG_MAX_BODY_BYTES", default_value_t = MAX_REQUEST_BODY_BYTES)]
    pub debug_max_body_bytes: usize,
    /// One user's share of those: the slots are divided among the users holding them, and
    /// none gets more than this.
    #[arg(long, env = "DEBUG_MAX_REQUESTS_PER_USER", default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub debug_max_requests_per_user: usize,
    /// TokenReviews of tokens not seen accepted before, per second from one client address
    /// (in bursts of twice that); beyond, 429. Tokens accepted before are not counted. 0: no
    /// bound.
    #[arg(long, env = "DEBUG_MAX_TOKEN_REVIEWS_PER_SOURCE", default_value_t = 10)]
    pub debug_max_token_reviews_per_source: u32,
    /// How long SubjectAccessReview answers are reused (10s, as the generic apiserver), and
    /// TokenReview answers: an accepted token for half of it (kube-apiserver's own token cache
    /// may add up to 10 s), a refused one for at most 2 s; 0 turns the cache off.
    #[arg(long, env = "DEBUG_REVIEW_CACHE_TTL", default_value = "10s", value_parser = ocm_runtime::flags::parse_duration)]
    pub debug_review_cache_ttl: Duration,
    /// Cached review answers kept at most, per kind (the soonest to expire make room).
    #[arg(long, env = "DEBUG_REVIEW_CACHE_SIZE", default_value_t = 1024)]
    pub debug_review_cache_size: usize,
}

impl Default for DebugLimits {
    fn default() -> Self {
        Self {
            debug_max_concurrent_requests: 4,
            debug_max_requests_per_user: 2,
            debug_max_token_reviews_per_source: 10,
            debug_max_body_bytes: MAX_REQUEST_BODY_BYTES,
            debug_review_cache_ttl: Duration::from_secs(10),
            debug_review_cache_size: 1024,
        }
    }
}

/// Which review.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReviewKind {
    TokenReview,
    SubjectAccessReview,
}

/// What a review sent to the apiserver answered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReviewResult {
    /// Authenticated, or allowed.
    Accepted,
    /// Not authenticated, or denied.
    Rejected,
    /// No answer (an error, a timeout).
    Error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    kind: ReviewKind,
    result: ReviewResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: ReviewKind,
}

/// The endpoint's metrics, under `placement_debug_` (closed label sets).
#[derive(Clone, Debug, Default)]
pub struct DebugMetrics {
    reviews: Family<ReviewLabels, Counter>,
    cache_hits: Family<KindLabels, Counter>,
    throttled: Counter,
}

impl DebugMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("placement_debug");
        r.register(
            "reviews",
            "TokenReviews and SubjectAccessReviews the debug endpoint sent, by answer (Accepted, Rejected, Error)",
            m.reviews.clone(),
        );
        r.register(
            "review_cache_hits",
            "Debug requests whose review was answered from the cache",
            m.cache_hits.clone(),
        );
        r.register(
            "requests_throttled",
            "Debug requests answered 429: no free slot (--debug-max-concurrent-requests), beyond the caller's share (--debug-max-requests-per-user), or past its source's TokenReview rate (--debug-max-token-reviews-per-source)",
            m.throttled.clone(),
        );
        m
    }

    fn review(&self, kind: ReviewKind, result: ReviewResult) {
        self.reviews
            .get_or_create(&ReviewLabels { kind, result })
            .inc();
    }

    fn cache_hit(&self, kind: ReviewKind) {
        self.cache_hits.get_or_create(&KindLabels { kind }).inc();
    }
}

const PLACEMENT_GROUP: &str = "cluster.open-cluster-management.io";
const PLACEMENT_VERSION: &str = "v1beta1";
const PLACEMENT_RESOURCE: &str = "placements";
const JSON: &str = "application/json";

/// What the endpoint reads: the controller implements this over its stores.
pub trait DebugSource: Send + Sync + 'static {
    /// The stored Placement `<namespace>/<name>`, if there is one.
    fn placement(&self, namespace: &str, name: &str) -> Option<Arc<Placement>>;
    /// Schedules a Placement against the current state without writing anything.
    fn schedule(&self, placement: &Placement) -> Outcome;
}

/// How the endpoint talks to its callers. Every request carries a bearer token, so plain HTTP
/// is only served on a loopback listener, where nothing crosses the network (a caller on the
/// host, or `kubectl port-forward`, which connects inside the pod).
pub enum Transport {
    /// HTTPS with this configuration ([`ocm_runtime::tls`]: files read again when they
    /// change, or a self-signed certificate).
    Tls(Arc<rustls::ServerConfig>),
    /// Plain HTTP, on a loopback address only.
    PlainLoopback,
}

/// Why the endpoint cannot be served.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error(
        "the debug endpoint takes bearer tokens: plain HTTP is served only on a loopback address, not on {0} (serve TLS, or bind 127.0.0.1)"
    )]
    PlainNotLoopback(std::net::SocketAddr),
    #[error("the debug endpoint's listener has no address: {0}")]
    Address(#[source] std::io::Error),
}

/// The endpoint on `listener` (with its connection limits) and `transport`, until `shutdown`
/// completes: a future to spawn, or an error when the transport would expose tokens (plain
/// HTTP on a non-loopback address). `debugger` answers the requests.
pub fn serve(
    listener: impl Into<Listener>,
    transport: Transport,
    debugger: Debugger,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<impl Future<Output = ()> + Send + 'static, ServeError> {
    let listener = listener.into();
    let addr = listener.local_addr().map_err(ServeError::Address)?;
    let tls = match transport {
        Transport::Tls(config) => Some(config),
        Transport::PlainLoopback if addr.ip().is_loopback() => None,
        Transport::PlainLoopback => return Err(ServeError::PlainNotLoopback(addr)),
    };
    let debugger = Arc::new(debugger);
    tracing::info!(%addr, tls = tls.is_some(), "serving the placement debug endpoint");
    Ok(ocm_runtime::http::serve(
        listener,
        tls,
        move |req: Request<hyper::body::Incoming>| {
            let debugger = debugger.clone();
            async move { debugger.handle(req).await }
        },
        shutdown,
    ))
}

/// A SubjectAccessReview's question: the token's digest, the verb, the namespace.
type AccessKey = (cache::Digest, &'static str, String);

/// The request handler, for embedding into another server.
#[derive(Clone)]
pub struct Debugger {
    client: kube::Client,
    source: Arc<dyn DebugSource>,
    limits: DebugLimits,
    /// Requests in progress once their caller is known, shared fairly among users.
    slots: Arc<admit::Slots>,
    /// TokenReviews of tokens the cache does not know.
    reviews: Arc<admit::ReviewGate>,
    /// TokenReview answers by token digest: the users of accepted tokens...
    accepted: Arc<cache::TtlCache<cache::Digest, User>>,
    /// ...and the tokens not accepted.
    refused: Arc<cache::TtlCache<cache::Digest, ()>>,
    /// Tokens accepted before (for an hour): their reviews have a lane of their own.
    known: Arc<cache::TtlCache<cache::Digest, ()>>,
    /// SubjectAccessReview answers by token digest, verb and namespace: `Ok`, or the denial's
    /// reason.
    access: Arc<cache::TtlCache<AccessKey, Result<(), String>>>,
    metrics: DebugMetrics,
}

/// Who made a request, as the TokenReview says.
#[derive(Debug, Clone, Default)]
struct User {
    name: String,
    uid: Option<String>,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
}

impl Debugger {
    /// `client` makes the TokenReviews and SubjectAccessReviews (give it a rate limiter of its
    /// own); `source` has the placements and the state to schedule against.
    pub fn new(
        client: kube::Client,
        source: Arc<dyn DebugSource>,
        limits: DebugLimits,
        metrics: DebugMetrics,
    ) -> Self {
        let (ttl, size) = (
            limits.debug_review_cache_ttl,
            limits.debug_review_cache_size,
        );
        let (accepted_ttl, refused_ttl) = admit::token_ttls(ttl);
        Self {
            client,
            source,
            slots: Arc::new(admit::Slots::new(
                limits.debug_max_concurrent_requests,
                limits.debug_max_requests_per_user,
            )),
            reviews: Arc::new(admit::ReviewGate::new(
                limits.debug_max_concurrent_requests,
                limits.debug_max_token_reviews_per_source,
            )),
            accepted: Arc::new(cache::TtlCache::new(accepted_ttl, size)),
            refused: Arc::new(cache::TtlCache::new(refused_ttl, size)),
            known: Arc::new(cache::TtlCache::new(KNOWN_TOKEN_TTL, size)),
            access: Arc::new(cache::TtlCache::new(ttl, size)),
            limits,
            metrics,
        }
    }

    /// Answers one request.
    pub async fn handle<B>(&self, req: Request<B>) -> HttpResponse
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        match self.answer(req).await {
            Ok(body) => {
                tracing::debug!(%method, %path, "debug request answered");
                respond(StatusCode::OK, JSON, body)
            }
            Err(e) => {
                let status = e.status();
                if status.is_server_error() {
                    tracing::warn!(%method, %path, %status, error = %e, "debug request failed");
                } else {
                    tracing::debug!(%method, %path, %status, error = %e, "debug request refused");
                }
                e.response()
            }
        }
    }

    async fn answer<B>(&self, req: Request<B>) -> Result<Vec<u8>, DebugError>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let token = bearer_token(req.headers()).ok_or(DebugError::NoToken)?;
        let source = req
            .extensions()
            .get::<ocm_runtime::http::Peer>()
            .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.ip());
        let digest = cache::digest(token);
        // Who asks comes first (cached, or a review the gate bounds), then what it asks: a
        // request takes a slot only once its caller is known, and a denial already known is
        // answered without one. Every refusal here is at once, never queued.
        let user = self
            .authenticate(token, &digest, source)
            .await
            .inspect_err(|e| self.count_throttled(e))?;
        let path = req.uri().path().to_owned();
        let Some(key) = path.strip_prefix(DEBUG_PATH) else {
            return Err(DebugError::UnknownPath(path));
        };
        let get = match *req.method() {
            Method::GET => {
                let (namespace, _) = split_key(key).ok_or(DebugError::InvalidPath)?;
                self.cached_denial(&digest, "get", namespace)?;
                true
            }
            Method::POST => false,
            ref other => return Err(DebugError::MethodNotAllowed(other.to_string())),
        };
        let slot = self.take_slot(&user)?;
        let placement = if get {
            let (namespace, name) = split_key(key).ok_or(DebugError::InvalidPath)?;
            self.authorize(&user, &digest, "get", namespace).await?;
            self.source
                .placement(namespace, name)
                .ok_or_else(|| DebugError::NotFound(name.to_owned()))?
        } else {
            self.posted_placement(req, &user, &digest).await?
        };
        // The name is the caller's to choose (a ServiceAccount's, a user's): `?` escapes it,
        // so that a newline in it cannot start a line of its own in the text log.
        tracing::debug!(
            user = ?user.name,
            namespace = placement.metadata.namespace.as_deref().unwrap_or_default(),
            name = placement.metadata.name.as_deref().unwrap_or_default(),
            "debug scheduling"
        );
        self.schedule(placement, slot).await
    }

    /// A work slot for `user`, or the refusal (counted as throttled).
    fn take_slot(&self, user: &User) -> Result<admit::Slot, DebugError> {
        self.slots.try_take(&user.name).map_err(|refusal| {
            self.metrics.throttled.inc();
            match refusal {
                admit::Refusal::Full => DebugError::Busy(self.limits.debug_max_concurrent_requests),
                admit::Refusal::Share(share) => DebugError::UserBusy(share),
            }
        })
    }

    /// The Placement in a POST's body, once `user` may create Placements in its namespace.
    async fn posted_placement<B>(
        &self,
        req: Request<B>,
        user: &User,
        digest: &cache::Digest,
    ) -> Result<Arc<Placement>, DebugError>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let placement = read_placement(req.into_body(), self.limits.debug_max_body_bytes).await?;
        let namespace = placement
            .metadata
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .ok_or(DebugError::NoNamespace)?;
        self.authorize(user, digest, "create", namespace).await?;
        Ok(Arc::new(placement))
    }

    /// Schedules `placement` and encodes upstream's result. Scheduling is CPU work (tens of
    /// ms on a large fleet): off the async workers. The slot goes along, so that a caller who
    /// hangs up does not free it early.
    async fn schedule(
        &self,
        placement: Arc<Placement>,
        slot: admit::Slot,
    ) -> Result<Vec<u8>, DebugError> {
        let source = self.source.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let outcome = source.schedule(&placement);
            if outcome.status.code == Code::Error {
                return Err(DebugError::Scheduling(outcome.status.message));
            }
            serde_json::to_vec(&debug_result(&placement, &outcome)).map_err(DebugError::Encode)
        })
        .await
        .map_err(|e| DebugError::Task(e.to_string()))?
    }

    /// A 429 is counted wherever it comes from.
    fn count_throttled(&self, e: &DebugError) {
        if e.status() == StatusCode::TOO_MANY_REQUESTS {
            self.metrics.throttled.inc();
        }
    }

    /// The user behind the bearer token, by TokenReview (cached; a review the gate lets
    /// through: a token accepted before in its own lane, a stranger's within `source`'s
    /// budget).
    async fn authenticate(
        &self,
        token: &str,
        digest: &cache::Digest,
        source: std::net::IpAddr,
    ) -> Result<User, DebugError> {
        let kind = ReviewKind::TokenReview;
        let now = Instant::now();
        if let Some(user) = self.accepted.get(digest, now) {
            self.metrics.cache_hit(kind);
            return Ok(user);
        }
        if self.refused.get(digest, now).is_some() {
            self.metrics.cache_hit(kind);
            return Err(DebugError::InvalidToken);
        }
        let known = self.known.get(digest, now).is_some();
        let _pass = self
            .reviews
            .try_pass(known, source, now)
            .map_err(|refusal| match refusal {
                admit::ReviewRefusal::Busy => DebugError::ReviewsBusy,
                admit::ReviewRefusal::Source => {
                    DebugError::SourceBusy(self.limits.debug_max_token_reviews_per_source)
                }
            })?;
        let answer = self.review_token(token).await;
        let result = match &answer {
            Ok(Some(_)) => ReviewResult::Accepted,
            Ok(None) => ReviewResult::Rejected,
            Err(_) => ReviewResult::Error,
        };
        self.metrics.review(kind, result);
        // A review that could not be made is not an answer: not cached.
        let now = Instant::now();
        match answer? {
            Some(user) => {
                self.accepted.insert(*digest, user.clone(), now);
                self.known.insert(*digest, (), now);
                Ok(user)
            }
            None => {
                self.refused.insert(*digest, (), now);
                Err(DebugError::InvalidToken)
            }
        }
    }

    /// A denial of `verb` in `namespace` the cache already holds for this token (answered
    /// before the request takes a slot).
    fn cached_denial(
        &self,
        digest: &cache::Digest,
        verb: &'static str,
        namespace: &str,
    ) -> Result<(), DebugError> {
        let key = (*digest, verb, namespace.to_owned());
        match self.access.get(&key, Instant::now()) {
            Some(Err(reason)) => {
                self.metrics.cache_hit(ReviewKind::SubjectAccessReview);
                Err(DebugError::Forbidden {
                    verb,
                    namespace: namespace.to_owned(),
                    reason,
                })
            }
            _ => Ok(()),
        }
    }

    /// A TokenReview: the user, or `None` when the token is not accepted.
    async fn review_token(&self, token: &str) -> Result<Option<User>, DebugError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = with_timeout(api.create(&PostParams::default(), &review))
            .await
            .map_err(DebugError::TokenReview)?;
        let status = answer.status.unwrap_or_default();
        match (status.authenticated, status.user) {
            (
                Some(true),
                Some(UserInfo {
                    username: Some(name),
                    uid,
                    groups,
                    extra,
                }),
            ) if !name.is_empty() => Ok(Some(User {
                name,
                uid,
                groups,
                extra,
            })),
            _ => {
                tracing::debug!(
                    error = status.error.as_deref().unwrap_or_default(),
                    "bearer token not accepted"
                );
                Ok(None)
            }
        }
    }

    /// Whether `user` (the token's, by `digest`) may `verb` placements in `namespace`, by
    /// SubjectAccessReview (cached).
    async fn authorize(
        &self,
        user: &User,
        digest: &cache::Digest,
        verb: &'static str,
        namespace: &str,
    ) -> Result<(), DebugError> {
        let kind = ReviewKind::SubjectAccessReview;
        let key = (*digest, verb, namespace.to_owned());
        let answer = match self.access.get(&key, Instant::now()) {
            Some(known) => {
                self.metrics.cache_hit(kind);
                known
            }
            None => {
                let answer = self.review_access(user, verb, namespace).await;
                let result = match &answer {
                    Ok(Ok(())) => ReviewResult::Accepted,
                    Ok(Err(_)) => ReviewResult::Rejected,
                    Err(_) => ReviewResult::Error,
                };
                self.metrics.review(kind, result);
                let answer = answer?;
                self.access.insert(key, answer.clone(), Instant::now());
                answer
            }
        };
        answer.map_err(|reason| DebugError::Forbidden {
            verb,
            namespace: namespace.to_owned(),
            reason,
        })
    }

    /// A SubjectAccessReview: `Ok`, or the denial's reason.
    async fn review_access(
        &self,
        user: &User,
        verb: &'static str,
        namespace: &str,
    ) -> Result<Result<(), String>, DebugError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some(verb.to_owned()),
                    group: Some(PLACEMENT_GROUP.to_owned()),
                    version: Some(PLACEMENT_VERSION.to_owned()),
                    resource: Some(PLACEMENT_RESOURCE.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = with_timeout(api.create(&PostParams::default(), &review))
            .await
            .map_err(DebugError::AccessReview)?;
        let status = answer.status.unwrap_or_default();
        Ok(if status.allowed {
            Ok(())
        } else {
            Err(status.reason.unwrap_or_default())
        })
    }
}

async fn with_timeout<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ReviewError> {
    match tokio::time::timeout(REVIEW_TIMEOUT, call).await {
        Ok(r) => r.map_err(ReviewError::Api),
        Err(_) => Err(ReviewError::Timeout(REVIEW_TIMEOUT)),
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case, as Kubernetes).
fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// `<namespace>/<name>`, both non-empty.
fn split_key(key: &str) -> Option<(&str, &str)> {
    let (namespace, name) = key.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then_some((namespace, name))
}

/// The POSTed Placement: the body (at most `limit` bytes, within [`BODY_READ_TIMEOUT`]) as
/// JSON.
async fn read_placement<B>(body: B, limit: usize) -> Result<Placement, DebugError>
where
    B: hyper::body::Body<Data = Bytes> + Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if let Some(declared) = body.size_hint().exact()
        && declared > limit as u64
    {
        return Err(DebugError::DeclaredBodyTooLarge { declared, limit });
    }
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, Limited::new(body, limit).collect());
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(DebugError::BodyTooLarge(limit));
        }
        Ok(Err(e)) => return Err(DebugError::ReadBody(e.to_string())),
        Err(_) => {
            return Err(DebugError::ReadBody(format!(
                "not received within {BODY_READ_TIMEOUT:?}"
            )));
        }
    };
    // Go's decoder leaves a missing (or null) metadata or spec at its zero value. Our type
    // reads every other null as unset, but kube's derive makes the root's metadata and spec
    // required, so they are filled in here.
    let mut value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(DebugError::BadJson)?;
    if let Some(object) = value.as_object_mut() {
        for field in ["metadata", "spec"] {
            if object.get(field).is_none_or(serde_json::Value::is_null) {
                object.insert(field.into(), serde_json::Value::Object(Default::default()));
            }
        }
    }
    serde_json::from_value(value).map_err(DebugError::BadJson)
}

mod admit;
mod cache;
mod error;
mod result;

pub use error::{DebugError, ReviewError};

pub use result::{ClusterScore, DebugResult, FilterStep, PrioritizeStep, debug_result};
