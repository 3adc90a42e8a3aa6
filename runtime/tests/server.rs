//! The metrics and health server on a real TCP port, spoken to with a plain HTTP/1 client.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use ocm_runtime::client::RateLimiter;
use ocm_runtime::metrics::{Health, OPENMETRICS_CONTENT_TYPE, serve_metrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

async fn call(addr: SocketAddr, method: Method, path: &str) -> (StatusCode, HeaderMap, String) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

async fn get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let (status, _, body) = call(addr, Method::GET, path).await;
    (status, body)
}

#[tokio::test]
async fn metrics_health_and_readiness_over_http() {
    let mut registry = Registry::default();
    let scheduled = Counter::<u64>::default();
    registry.register(
        "placements_scheduled",
        "Placements scheduled",
        scheduled.clone(),
    );
    let limiter = RateLimiter::new(10.0, 10).unwrap();
    limiter.register(&mut registry);
    scheduled.inc_by(3);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let health = Health::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_metrics(
        listener,
        Arc::new(registry),
        health.clone(),
        async move {
            let _ = stopped.await;
        },
    ));

    let (status, headers, body) = call(addr, Method::GET, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers[http::header::CONTENT_TYPE],
        OPENMETRICS_CONTENT_TYPE
    );
    assert!(
        body.contains("# TYPE placements_scheduled counter\n"),
        "{body}"
    );
    assert!(body.contains("\nplacements_scheduled_total 3\n"), "{body}");
    assert!(
        body.contains("kube_client_rate_limiter_permits_total 0\n"),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");

    // Alive from the start; ready only when told, with the reason until then.
    assert_eq!(get(addr, "/healthz").await, (StatusCode::OK, "ok\n".into()));
    assert_eq!(
        get(addr, "/readyz").await,
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n".into())
    );
    health.set_ready(true);
    assert_eq!(get(addr, "/readyz").await, (StatusCode::OK, "ok\n".into()));
    health.set_not_ready("waiting for the informer caches");
    assert_eq!(
        get(addr, "/readyz").await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the informer caches\n".into()
        )
    );
    health.set_unhealthy("the watch of ManagedClusters is stuck");
    assert_eq!(
        get(addr, "/healthz").await,
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the watch of ManagedClusters is stuck\n".into()
        )
    );
    health.set_healthy(true);
    assert_eq!(get(addr, "/healthz").await.0, StatusCode::OK);

    assert_eq!(get(addr, "/").await.0, StatusCode::NOT_FOUND);
    assert_eq!(get(addr, "/metrics/x").await.0, StatusCode::NOT_FOUND);
    let (status, headers, _) = call(addr, Method::POST, "/metrics").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers[http::header::ALLOW], "GET, HEAD");
    let (status, _, body) = call(addr, Method::HEAD, "/healthz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));

    // Shutdown stops accepting: the port refuses new connections.
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_taken_address_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let args = ocm_runtime::ServeArgs {
        metrics_bind_address: taken.local_addr().unwrap(),
    };
    let e = args.bind().await.unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "cannot listen on {} (--metrics-bind-address)",
            args.metrics_bind_address
        )),
        "{e}"
    );
}
