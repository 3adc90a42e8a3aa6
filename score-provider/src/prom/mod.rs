//! A client of the Prometheus HTTP query API (`/api/v1/query`), which Thanos Querier and every
//! Prometheus-compatible store serve: bearer token, extra headers, a CA bundle, a timeout per
//! attempt and retries with backoff for what a retry can fix. An answer is read up to a size
//! limit and parsed into the shapes the scorer uses (an instant vector, a scalar): a query API
//! that answers hundreds of megabytes costs one failed query, not the process.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde::de::IgnoredAny;
use thiserror::Error;

type Connector = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// How to reach the query API.
#[derive(Clone, Debug)]
pub struct PromSettings {
    /// The API root, e.g. `https://thanos-querier.observability:9091` (a path prefix is kept).
    pub url: String,
    pub bearer_token: Option<String>,
    /// A file holding the bearer token, read for every request: projected service-account
    /// tokens rotate underneath a running process.
    pub bearer_token_file: Option<std::path::PathBuf>,
    /// PEM CA bundle to trust instead of the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    pub headers: Vec<(String, String)>,
    /// Per attempt.
    pub timeout: Duration,
    /// Attempts per query (1 = no retry).
    pub attempts: usize,
    /// Thanos' request parameters, sent when set (Prometheus ignores them).
    pub thanos: Option<ThanosParams>,
    /// The largest answer body read; a larger one fails the query ([`PromError::TooLarge`]).
    pub max_response_bytes: usize,
}

/// Thanos Query's `dedup` and `partial_response` parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThanosParams {
    /// Merge the replicas of an HA pair (series that differ only in Query's
    /// `--query.replica-label`) into one.
    pub dedup: bool,
    /// Accept an answer that lacks the stores that failed, with a warning naming each. Without
    /// it one dead store fails every query, so no cluster's score is renewed.
    pub partial_response: bool,
}

impl Default for ThanosParams {
    fn default() -> Self {
        Self {
            dedup: true,
            partial_response: true,
        }
    }
}

/// A successful answer: its samples, and the `warnings` a partial answer carries (Thanos names
/// the store that failed, with its external labels, in each).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answer {
    pub samples: Vec<Sample>,
    pub warnings: Vec<String>,
}

/// 8 MiB. A by-node series takes about 120 bytes of an answer (cluster, node and value
/// labels with typical names), so this holds about 70,000 nodes; a larger fleet raises it.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 << 20;

#[derive(Debug, Error)]
pub enum PromError {
    #[error("bad query URL {0}: {1}")]
    Url(String, String),
    #[error("reading the CA bundle {0}: {1}")]
    Ca(String, String),
    #[error("bad header {0:?}: {1}")]
    Header(String, String),
    #[error("reading the bearer token {0}: {1}")]
    Token(String, String),
    #[error("query API unreachable: {0}")]
    Transport(String),
    #[error("query API timed out after {0:?}")]
    Timeout(Duration),
    #[error("query API answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("query failed ({kind}): {message}")]
    Query { kind: String, message: String },
    #[error("unexpected answer: {0}")]
    Decode(String),
    /// The answer is over [`PromSettings::max_response_bytes`]: as said by its Content-Length
    /// (`Some`, not read at all) or found while reading (`None`, read up to the limit).
    #[error("the answer is larger than the limit of {limit} bytes{}", .length.map(|l| format!(" (Content-Length {l})")).unwrap_or_default())]
    TooLarge { limit: usize, length: Option<u64> },
}

/// Why a query failed, as a metric label: a closed set.
pub const FAILURE_REASONS: ocm_runtime::metrics::ClosedLabel =
    ocm_runtime::metrics::ClosedLabel::new(&[
        "setup",
        "transport",
        "timeout",
        "status",
        "query",
        "decode",
        "too_large",
    ]);

impl PromError {
    /// Worth another attempt: the server may be restarting or overloaded.
    fn transient(&self) -> bool {
        match self {
            PromError::Transport(_) | PromError::Timeout(_) => true,
            PromError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    /// One of [`FAILURE_REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            PromError::Url(..)
            | PromError::Ca(..)
            | PromError::Header(..)
            | PromError::Token(..) => "setup",
            PromError::Transport(_) => "transport",
            PromError::Timeout(_) => "timeout",
            PromError::Status { .. } => "status",
            PromError::Query { .. } => "query",
            PromError::Decode(_) => "decode",
            PromError::TooLarge { .. } => "too_large",
        }
    }
}

/// One sample of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The query client.
#[derive(Clone)]
pub struct PromClient {
    client: Client<Connector, Full<Bytes>>,
    base: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    settings: PromSettings,
}

impl std::fmt::Debug for PromClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromClient")
            .field("url", &self.base)
            .finish()
    }
}

impl PromClient {
    pub fn new(settings: PromSettings) -> Result<Self, PromError> {
        let base = settings.url.trim_end_matches('/').to_owned();
        base.parse::<Uri>()
            .map_err(|e| PromError::Url(base.clone(), e.to_string()))
            .and_then(|u| match u.scheme_str() {
                Some("http" | "https") if u.host().is_some() => Ok(()),
                _ => Err(PromError::Url(
                    base.clone(),
                    "want http(s)://host[:port][/prefix]".into(),
                )),
            })?;
        let mut roots = rustls::RootCertStore::empty();
        match &settings.ca_file {
            Some(path) => add_pem(&mut roots, path)?,
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    // A system certificate rustls cannot read is not ours to fix.
                    let _ = roots.add(cert);
                }
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| PromError::Ca("TLS setup".into(), e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let mut headers = Vec::new();
        for (k, v) in &settings.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| PromError::Header(k.clone(), e.to_string()))?;
            let value = HeaderValue::from_str(v)
                .map_err(|e| PromError::Header(k.clone(), e.to_string()))?;
            headers.push((name, value));
        }
        if let Some(path) = &settings.bearer_token_file {
            // Unreadable at start is a setup error, not something to retry every period.
            std::fs::read_to_string(path)
                .map_err(|e| PromError::Token(path.display().to_string(), e.to_string()))?;
        }
        if let (Some(token), None) = (&settings.bearer_token, &settings.bearer_token_file) {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .map_err(|e| PromError::Header("Authorization".into(), e.to_string()))?;
            value.set_sensitive(true);
            headers.push((http::header::AUTHORIZATION, value));
        }
        Ok(Self {
            client,
            base,
            headers,
            settings,
        })
    }

    /// An instant query, now. Retries transient failures with jittered backoff.
    pub async fn query(&self, promql: &str) -> Result<Answer, PromError> {
        let attempt = || async { self.query_once(promql).await };
        attempt
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(200))
                    .with_max_delay(Duration::from_secs(5))
                    .with_max_times(self.settings.attempts.saturating_sub(1))
                    .with_jitter(),
            )
            .when(PromError::transient)
            .await
    }

    async fn query_once(&self, promql: &str) -> Result<Answer, PromError> {
        let mut form = format!("query={}", encode(promql));
        if let Some(t) = self.settings.thanos {
            form.push_str(&format!(
                "&dedup={}&partial_response={}",
                t.dedup, t.partial_response
            ));
        }
        let mut req = Request::post(format!("{}/api/v1/query", self.base))
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json");
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(path) = &self.settings.bearer_token_file {
            let shown = path.display().to_string();
            let token = tokio::fs::read_to_string(path)
                .await
                .map_err(|e| PromError::Token(shown.clone(), e.to_string()))?;
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .map_err(|e| PromError::Token(shown, e.to_string()))?;
            value.set_sensitive(true);
            req = req.header(http::header::AUTHORIZATION, value);
        }
        let req = req
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| PromError::Url(self.base.clone(), e.to_string()))?;
        let timeout = self.settings.timeout;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| PromError::Transport(error_chain(&e)))?;
            let status = resp.status();
            let limit = self.settings.max_response_bytes;
            // Refused before reading when the server says how much is coming; else read, and
            // stop (closing the connection) at the limit.
            let length = resp
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if let Some(l) = length.filter(|l| *l > limit as u64) {
                return Err(PromError::TooLarge {
                    limit,
                    length: Some(l),
                });
            }
            let body = Limited::new(resp.into_body(), limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<LengthLimitError>().is_some() {
                        PromError::TooLarge {
                            limit,
                            length: None,
                        }
                    } else {
                        PromError::Transport(error_chain(&*e))
                    }
                })?
                .to_bytes();
            Ok::<_, PromError>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| PromError::Timeout(timeout))??;
        decode(status, &body)
    }
}

fn add_pem(roots: &mut rustls::RootCertStore, path: &Path) -> Result<(), PromError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let shown = path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| PromError::Ca(shown.clone(), e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PromError::Ca(shown.clone(), e.to_string()))?;
    if certs.is_empty() {
        return Err(PromError::Ca(shown, "no certificate in it".into()));
    }
    for c in certs {
        roots
            .add(c)
            .map_err(|e| PromError::Ca(shown.clone(), e.to_string()))?;
    }
    Ok(())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `application/x-www-form-urlencoded` value encoding.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error_type: String,
    #[serde(default)]
    error: String,
    /// A partial answer's reasons (Thanos; Prometheus for some evaluation problems).
    #[serde(default)]
    warnings: Vec<String>,
}

/// `data` of an answer by `resultType`: what the scorer uses is read, the other shapes are
/// skipped unread and refused.
#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<VectorSample>),
    Scalar((f64, String)),
    Matrix(IgnoredAny),
    String(IgnoredAny),
}

#[derive(Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// The answer of `/api/v1/query`: an instant vector (a scalar becomes one unlabelled sample),
/// with its warnings.
fn decode(status: StatusCode, body: &[u8]) -> Result<Answer, PromError> {
    let envelope: Result<Envelope, _> = serde_json::from_slice(body);
    let text = || String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
    let envelope = match envelope {
        Ok(e) => e,
        Err(_) if !status.is_success() => {
            return Err(PromError::Status {
                status: status.as_u16(),
                body: text(),
            });
        }
        Err(e) => return Err(PromError::Decode(format!("{e}: {}", text()))),
    };
    if envelope.status != "success" {
        // Prometheus reports bad queries as 400 with a JSON error body.
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Err(PromError::Status {
                status: status.as_u16(),
                body: envelope.error,
            });
        }
        return Err(PromError::Query {
            kind: envelope.error_type,
            message: envelope.error,
        });
    }
    let data = envelope
        .data
        .ok_or_else(|| PromError::Decode("a success without data".into()))?;
    let parse = |s: &str| -> Result<f64, PromError> {
        match s {
            "NaN" => Ok(f64::NAN),
            "+Inf" | "Inf" => Ok(f64::INFINITY),
            "-Inf" => Ok(f64::NEG_INFINITY),
            _ => s
                .parse::<f64>()
                .map_err(|e| PromError::Decode(format!("sample value {s:?}: {e}"))),
        }
    };
    let samples = match data {
        Data::Vector(samples) => samples
            .into_iter()
            .map(|s| {
                Ok(Sample {
                    labels: s.metric,
                    value: parse(&s.value.1)?,
                })
            })
            .collect::<Result<_, _>>()?,
        Data::Scalar((_, v)) => vec![Sample {
            labels: BTreeMap::new(),
            value: parse(&v)?,
        }],
        Data::Matrix(_) | Data::String(_) => {
            return Err(PromError::Decode(
                "a range vector or a string: a query must give an instant vector".into(),
            ));
        }
    };
    Ok(Answer {
        samples,
        warnings: envelope.warnings,
    })
}

/// The values of `label` a warning names, as Thanos writes a failed store's external labels
/// (`{cluster="c2", replica="a"}`, Go-quoted): every `label="value"` that starts a word. A
/// warning that names none (a store without that label) yields nothing.
pub fn named_in(warning: &str, label: &str) -> Vec<String> {
    let needle = format!("{label}=\"");
    let mut out = Vec::new();
    let mut rest = warning;
    while let Some(at) = rest.find(&needle) {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at + needle.len()..];
        rest = tail;
        // `xcluster="..."` is another label.
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut value = String::new();
        let mut chars = tail.char_indices();
        let mut closed = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(e);
                    }
                }
                '"' => {
                    closed = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let Some(end) = closed else { break };
        rest = &tail[end..];
        if !value.is_empty() && !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

#[cfg(test)]
mod tests;
