//! A small HTTP/1 server on hyper (already in the tree through kube): `/metrics`, `/healthz`,
//! `/readyz` and the scheduler's debug endpoint all go through [`serve`].
//!
//! Every port is bounded ([`HttpLimits`], flags shared by every binary), so that slow or idle
//! clients cannot pile up until file descriptors or memory run out:
//!
//! - a connection must finish its TLS handshake, and send each request head, within
//!   `--http-header-read-timeout` of being accepted or of its previous answer (hyper's header
//!   timer also runs while a keep-alive connection waits, so this is the idle timeout too);
//! - a request head is at most `--http-max-header-bytes` (larger: 431), so that a held
//!   connection costs little memory;
//! - at most `--http-max-connections` are open per port. At the cap, a new connection closes
//!   the oldest one that is not being answered (idle, slow to send its head, or still in its
//!   TLS handshake) instead of being refused: an attacker holding many idle connections cannot
//!   lock the real callers (a probe, a scrape) out; it only loses its own oldest ones. Only
//!   when every open connection is being answered is the new one closed.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

/// How long to wait after a failed accept before the next one.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// At most one warning per this long about connections closed at the cap.
const CAP_WARNING_PERIOD: Duration = Duration::from_secs(10);

/// The default of `--http-header-read-timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default of `--http-max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The default of `--http-max-header-bytes`: a bearer token and the usual headers fit many
/// times over.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

/// The address a request came from: every request [`serve`] hands its handler carries it
/// as an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// A response with a complete body.
pub type HttpResponse = Response<Full<Bytes>>;

/// Limits every port applies (the metrics port, the scheduler's debug port: each has its own
/// connection cap).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// A connection must finish its TLS handshake and send each request head within this
    /// long, counted from its accept or from its previous answer (so an idle keep-alive
    /// connection is closed after it too). Slow clients are closed, not waited for.
    #[arg(long, env = "HTTP_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = crate::flags::parse_duration)]
    pub http_header_read_timeout: Duration,
    /// Open connections per port. At the cap a new connection closes the oldest one that is
    /// not being answered (idle, slow or handshaking); only when all are being answered is
    /// the new one closed. A warning is logged (at most every 10 s) when the cap is hit.
    #[arg(long, env = "HTTP_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub http_max_connections: usize,
    /// The largest request head (request line and headers), in bytes; a larger one is
    /// answered 431 and the connection closed.
    #[arg(long, env = "HTTP_MAX_HEADER_BYTES", default_value_t = DEFAULT_MAX_HEADER_BYTES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    pub http_max_header_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            http_header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            http_max_connections: DEFAULT_MAX_CONNECTIONS,
            http_max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

/// A bound port and the limits its server applies.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
    limits: HttpLimits,
}

impl Listener {
    pub fn new(tcp: TcpListener, limits: HttpLimits) -> Self {
        Self { tcp, limits }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    pub fn limits(&self) -> &HttpLimits {
        &self.limits
    }
}

/// A listener with the default limits.
impl From<TcpListener> for Listener {
    fn from(tcp: TcpListener) -> Self {
        Self::new(tcp, HttpLimits::default())
    }
}

/// Serves `handler` on `listener` until `shutdown` completes, within the listener's
/// [`HttpLimits`]. With `tls`, connections are TLS (see [`crate::tls`]). A connection that
/// fails (a bad or slow TLS handshake, a slow request head, a reset) is logged at debug level
/// and does not affect the others.
pub async fn serve<H, F>(
    listener: impl Into<Listener>,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HttpResponse> + Send + 'static,
{
    let Listener { tcp, limits } = listener.into();
    let acceptor = tls.map(TlsAcceptor::from);
    let table = Arc::new(Mutex::new(Connections::new(
        limits.http_max_connections,
        tcp.local_addr().ok(),
    )));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = tcp.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Most often out of file descriptors: retrying at once would spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let Some(slot) = Connections::admit(&table) else {
            // Every open connection is being answered: this one waits for nothing.
            drop(stream);
            continue;
        };
        let handler = handler.clone();
        let acceptor = acceptor.clone();
        let (header_timeout, max_header) = (
            limits.http_header_read_timeout,
            limits.http_max_header_bytes,
        );
        tokio::spawn(async move {
            let Slot {
                busy,
                closed,
                _guard,
            } = slot;
            let service = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(Peer(peer));
                let handler = handler.clone();
                let answering = Answering::start(busy.clone());
                async move {
                    let response = handler(req).await;
                    drop(answering);
                    Ok::<_, Infallible>(response)
                }
            });
            let connection =
                serve_connection(stream, acceptor, header_timeout, max_header, service);
            tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                _ = closed => {
                    tracing::debug!(%peer, "connection closed to make room under the connection cap");
                }
            }
        });
    }
}

/// One connection: the TLS handshake (bounded by the header timeout, as Go's server counts
/// it), then HTTP/1 with hyper's header timer.
async fn serve_connection<S>(
    stream: TcpStream,
    acceptor: Option<TlsAcceptor>,
    header_timeout: Duration,
    max_header: usize,
    service: S,
) -> Result<(), ConnectionError>
where
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_header_size(max_header)
        .keep_alive(true);
    match acceptor {
        Some(acceptor) => {
            let tls = tokio::time::timeout(header_timeout, acceptor.accept(stream))
                .await
                .map_err(|_| ConnectionError::HandshakeTimeout(header_timeout))?
                .map_err(ConnectionError::Handshake)?;
            builder
                .serve_connection(TokioIo::new(tls), service)
                .await
                .map_err(ConnectionError::Http)
        }
        None => builder
            .serve_connection(TokioIo::new(stream), service)
            .await
            .map_err(ConnectionError::Http),
    }
}

#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("TLS handshake not finished within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("TLS handshake failed: {0}")]
    Handshake(#[source] std::io::Error),
    #[error(transparent)]
    Http(hyper::Error),
}

/// The open connections of one port, oldest first (ids grow with each accept).
struct Connections {
    cap: usize,
    addr: Option<SocketAddr>,
    next_id: u64,
    open: BTreeMap<u64, Open>,
    /// Connections closed at the cap since the last warning, and when that was.
    closed_at_cap: u64,
    refused_at_cap: u64,
    warned: Option<Instant>,
}

struct Open {
    /// Requests of this connection whose handler runs (0 or 1 on HTTP/1).
    busy: Arc<AtomicUsize>,
    close: oneshot::Sender<()>,
}

/// What a connection's task holds: its busy count, the signal that closes it, and the guard
/// that takes it out of the table when the task ends.
struct Slot {
    busy: Arc<AtomicUsize>,
    closed: oneshot::Receiver<()>,
    _guard: Remove,
}

impl Connections {
    fn new(cap: usize, addr: Option<SocketAddr>) -> Self {
        Self {
            cap: cap.max(1),
            addr,
            next_id: 0,
            open: BTreeMap::new(),
            closed_at_cap: 0,
            refused_at_cap: 0,
            warned: None,
        }
    }

    /// A slot for a new connection, closing the oldest idle one at the cap; `None` when all
    /// are being answered.
    fn admit(table: &Arc<Mutex<Self>>) -> Option<Slot> {
        let mut t = table.lock();
        if t.open.len() >= t.cap {
            let oldest_idle = t
                .open
                .iter()
                .find(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
                .map(|(id, _)| *id);
            match oldest_idle.and_then(|id| t.open.remove(&id)) {
                Some(evicted) => {
                    // The task may have ended meanwhile: nothing to close then.
                    let _ = evicted.close.send(());
                    t.closed_at_cap += 1;
                }
                None => t.refused_at_cap += 1,
            }
            t.warn_at_cap();
            if t.open.len() >= t.cap {
                return None;
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        let (close, closed) = oneshot::channel();
        t.open.insert(
            id,
            Open {
                busy: busy.clone(),
                close,
            },
        );
        Some(Slot {
            busy,
            closed,
            _guard: Remove {
                table: table.clone(),
                id,
            },
        })
    }

    fn warn_at_cap(&mut self) {
        let now = Instant::now();
        if self
            .warned
            .is_some_and(|at| now.duration_since(at) < CAP_WARNING_PERIOD)
        {
            return;
        }
        self.warned = Some(now);
        tracing::warn!(
            address = ?self.addr,
            cap = self.cap,
            closed_idle = self.closed_at_cap,
            refused = self.refused_at_cap,
            "the connection cap (--http-max-connections) was reached: the oldest idle or slow connections were closed for new ones (too many clients, or slow or idle ones holding connections open)"
        );
        self.closed_at_cap = 0;
        self.refused_at_cap = 0;
    }
}

/// Takes a connection out of its table when its task ends.
struct Remove {
    table: Arc<Mutex<Connections>>,
    id: u64,
}

impl Drop for Remove {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        t.open.remove(&self.id);
    }
}

/// Marks a connection as being answered while its handler runs (also when the handler is
/// dropped midway).
struct Answering(Arc<AtomicUsize>);

impl Answering {
    fn start(busy: Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::AcqRel);
        Self(busy)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response with a status, a content type and a body.
pub fn respond(
    status: http::StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> HttpResponse {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn table(cap: usize) -> Arc<Mutex<Connections>> {
        Arc::new(Mutex::new(Connections::new(cap, None)))
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let t = table(2);
        let mut first = Connections::admit(&t).unwrap();
        let second = Connections::admit(&t).unwrap();
        // The first is being answered: the second, idle, is closed for the third.
        let answering = Answering::start(first.busy.clone());
        let mut second = second;
        let _third = Connections::admit(&t).unwrap();
        assert_eq!(second.closed.try_recv(), Ok(()));
        assert!(first.closed.try_recv().is_err());
        assert_eq!(t.lock().open.len(), 2);
        drop(second);
        assert_eq!(t.lock().open.len(), 2, "an evicted slot was already out");
        drop(answering);
        // Now the first is idle and the oldest.
        let _fourth = Connections::admit(&t).unwrap();
        assert_eq!(first.closed.try_recv(), Ok(()));
    }

    #[test]
    fn when_every_connection_is_answered_the_new_one_is_refused() {
        let t = table(1);
        let only = Connections::admit(&t).unwrap();
        let _answering = Answering::start(only.busy.clone());
        assert!(Connections::admit(&t).is_none());
        drop(_answering);
        drop(only);
        assert!(t.lock().open.is_empty());
        assert!(Connections::admit(&t).is_some());
    }

    #[test]
    fn limit_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            limits: HttpLimits,
        }
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.limits, HttpLimits::default());
        let cli = Cli::try_parse_from([
            "x",
            "--http-header-read-timeout=2s",
            "--http-max-connections=5",
            "--http-max-header-bytes=8192",
        ])
        .unwrap();
        assert_eq!(cli.limits.http_header_read_timeout, Duration::from_secs(2));
        assert_eq!(cli.limits.http_max_connections, 5);
        assert_eq!(cli.limits.http_max_header_bytes, 8192);
        assert!(Cli::try_parse_from(["x", "--http-max-connections=0"]).is_err());
    }
}
