//! A small HTTP/1 server on hyper (already in the tree through kube): `/metrics`, `/healthz`,
//! `/readyz` and the scheduler's debug endpoint all go through [`serve`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How long to wait after a failed accept before the next one.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// A response with a complete body.
pub type HttpResponse = Response<Full<Bytes>>;

/// Serves `handler` on `listener` until `shutdown` completes. With `tls`, connections are
/// TLS (see [`crate::tls`]). A connection that fails (a bad TLS handshake, a reset) is logged
/// at debug level and does not affect the others.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HttpResponse> + Send + 'static,
{
    let acceptor = tls.map(TlsAcceptor::from);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Most often out of file descriptors: retrying at once would spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let handler = handler.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req).await) }
            });
            let result = match acceptor {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls) => {
                        http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await
                    }
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                },
                None => {
                    http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
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
