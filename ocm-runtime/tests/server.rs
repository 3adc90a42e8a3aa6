//! The metrics and health server on a real TCP port, spoken to with a plain HTTP/1 client.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use ocm_runtime::client::RateLimiter;
use ocm_runtime::metrics::{Health, OPENMETRICS_CONTENT_TYPE, serve_metrics};
use ocm_runtime::tls::fingerprint;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use rustls_pki_types::CertificateDer;
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
        limits: Default::default(),
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

/// Replaces `path` with `contents` in one step (write aside, rename), as a Secret volume or
/// cert-manager does.
fn replace_file(path: &std::path::Path, contents: &[u8]) {
    let next = path.with_extension("next");
    std::fs::write(&next, contents).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// The fingerprint of the certificate a new TLS connection to `addr` is served, after a
/// request on it succeeded.
async fn served(addr: SocketAddr, trusted: &[&rcgen::CertifiedKey<rcgen::KeyPair>]) -> String {
    let tls = tls_connect(addr, trusted.iter().map(|c| c.cert.der().clone())).await;
    let certificate = fingerprint(&tls.get_ref().1.peer_certificates().unwrap()[0]);
    assert_eq!(get_root(tls).await, StatusCode::OK);
    certificate
}

/// A TLS connection to `addr` that trusts `roots`.
async fn tls_connect(
    addr: SocketAddr,
    roots: impl IntoIterator<Item = CertificateDer<'static>>,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut store = rustls::RootCertStore::empty();
    for c in roots {
        store.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap()
}

/// `GET /` on `tls`: the status.
async fn get_root(tls: tokio_rustls::client::TlsStream<TcpStream>) -> StatusCode {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get("/")
        .header(http::header::HOST, "127.0.0.1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    sender.send_request(req).await.unwrap().status()
}

/// The serving certificate follows its files: replaced or rewritten pairs reach new
/// connections; a pair that cannot be used (certificate and key not matching while one is
/// written before the other, an unparsable file, missing files) keeps the previous one.
#[tokio::test]
async fn the_serving_certificate_is_read_again_when_its_files_change() {
    let dir = std::env::temp_dir().join(format!("runtime-tls-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let [a, b, c] =
        [0; 3].map(|_| rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap());
    let all = [&a, &b, &c];
    let write = |pair: &rcgen::CertifiedKey<rcgen::KeyPair>| {
        replace_file(&cert, pair.cert.pem().as_bytes());
        replace_file(&key, pair.signing_key.serialize_pem().as_bytes());
    };
    write(&a);

    let config = ocm_runtime::tls::server_config(&cert, &key).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(ocm_runtime::http::serve(
        listener,
        Some(config),
        |_req| async { ocm_runtime::http::respond(StatusCode::OK, "text/plain", "ok") },
        async move {
            let _ = stopped.await;
        },
    ));
    assert_eq!(served(addr, &all).await, fingerprint(a.cert.der()));

    // Both files replaced.
    write(&b);
    assert_eq!(served(addr, &all).await, fingerprint(b.cert.der()));

    // Half-written: C's certificate with B's key. B stays.
    replace_file(&cert, c.cert.pem().as_bytes());
    assert_eq!(served(addr, &all).await, fingerprint(b.cert.der()));
    // Unparsable, then missing: B stays.
    replace_file(&cert, b"-----BEGIN CERTIFICATE-----\nnot base64\n");
    assert_eq!(served(addr, &all).await, fingerprint(b.cert.der()));
    std::fs::remove_file(&cert).unwrap();
    std::fs::remove_file(&key).unwrap();
    assert_eq!(served(addr, &all).await, fingerprint(b.cert.der()));

    // Rewritten in place (same inode) to C's pair: C.
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
    assert_eq!(served(addr, &all).await, fingerprint(c.cert.der()));

    stop.send(()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unusable_files_are_clear_errors_at_start() {
    let dir = std::env::temp_dir().join(format!("runtime-tls-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let a = rcgen::generate_simple_self_signed(vec!["a".to_owned()]).unwrap();
    let b = rcgen::generate_simple_self_signed(vec!["b".to_owned()]).unwrap();
    std::fs::write(&cert, a.cert.pem()).unwrap();
    std::fs::write(&key, b.signing_key.serialize_pem()).unwrap();
    let e = ocm_runtime::tls::server_config(&cert, &key)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not belong to the certificate"), "{e}");
    let e = ocm_runtime::tls::server_config(&dir.join("none.crt"), &key)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("reading the TLS certificate"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_self_signed_certificate_names_the_host_and_loopback_and_logs_its_fingerprint() {
    let names = ocm_runtime::tls::self_signed_names("10.1.2.3:9443".parse().unwrap());
    for n in ["localhost", "127.0.0.1", "::1", "10.1.2.3"] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    let any = ocm_runtime::tls::self_signed_names("0.0.0.0:9443".parse().unwrap());
    assert!(!any.iter().any(|x| x == "0.0.0.0"), "{any:?}");
    let generated = ocm_runtime::tls::self_signed(&names).unwrap();
    // openssl x509 -fingerprint -sha256's form: 32 upper-case hex pairs.
    let f = &generated.fingerprint;
    assert_eq!(f.len(), 32 * 3 - 1, "{f}");
    assert!(f.split(':').all(|p| {
        p.len() == 2
            && p.chars()
                .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
    }));
    assert_eq!(*f, ocm_runtime::tls::fingerprint(&generated.certificate));
    // SHA-256 of nothing, as `openssl x509 -fingerprint -sha256` would print it.
    assert_eq!(
        ocm_runtime::tls::fingerprint(b""),
        "E3:B0:C4:42:98:FC:1C:14:9A:FB:F4:C8:99:6F:B9:24:27:AE:41:E4:64:9B:93:4C:A4:95:99:1B:78:52:B8:55"
    );
}

// ---------------------------------------------------------------------------------------------
// Hostile clients: idle, slowloris and half-handshaken connections, and a request flood

/// Whether the server closed `conn`, as the client sees it: a read that ends (EOF) or fails.
/// Nothing is sent by a server to an idle or half-sent request, so open means "would block".
fn closed_by_server(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    !matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// How a hostile client holds a connection without finishing a request.
#[derive(Clone, Copy)]
enum Hold {
    /// Connects and sends nothing (on the TLS port: never starts the handshake).
    Idle,
    /// Sends the start of a request head (on the TLS port: a record header announcing a
    /// ClientHello that never comes) and stops.
    HalfSent,
}

async fn hold(addr: SocketAddr, how: Hold, tls: bool) -> TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    if let Hold::HalfSent = how {
        let start: &[u8] = if tls {
            &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]
        } else {
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "
        };
        conn.write_all(start).await.unwrap();
    }
    conn
}

/// `n` held connections to `addr`, half idle and half half-sent.
async fn hold_many(addr: SocketAddr, n: usize, tls: bool) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let how = if i % 2 == 0 {
            Hold::Idle
        } else {
            Hold::HalfSent
        };
        held.push(hold(addr, how, tls).await);
    }
    held
}

/// A GET over a new TLS connection that trusts `certificate`: the status.
async fn tls_get(addr: SocketAddr, certificate: &CertificateDer<'static>) -> StatusCode {
    get_root(tls_connect(addr, [certificate.clone()]).await).await
}

/// A metrics port (plain) and a TLS port, both with `limits`, stopped when `stop` is dropped.
struct Ports {
    metrics: SocketAddr,
    tls: SocketAddr,
    certificate: CertificateDer<'static>,
    _stop: oneshot::Sender<()>,
}

async fn ports(limits: ocm_runtime::HttpLimits) -> Ports {
    let (stop, stopped) = oneshot::channel::<()>();
    let stopped = futures::FutureExt::shared(async move {
        let _ = stopped.await;
    });
    let health = Health::new();
    health.set_ready(true);
    let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = metrics.local_addr().unwrap();
    tokio::spawn(serve_metrics(
        ocm_runtime::Listener::new(metrics, limits.clone()),
        Arc::new(Registry::default()),
        health,
        stopped.clone(),
    ));
    let generated = ocm_runtime::tls::self_signed(&["127.0.0.1".to_owned()]).unwrap();
    let tls = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls_addr = tls.local_addr().unwrap();
    tokio::spawn(ocm_runtime::http::serve(
        ocm_runtime::Listener::new(tls, limits),
        Some(generated.config),
        |_req| async { ocm_runtime::http::respond(StatusCode::OK, "text/plain", "ok") },
        stopped,
    ));
    Ports {
        metrics: metrics_addr,
        tls: tls_addr,
        certificate: generated.certificate,
        _stop: stop,
    }
}

/// A percentile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// More idle, slowloris and half-handshaken connections than the cap on each port, renewed
/// all along, and a request flood: `/metrics`, `/healthz` and the TLS port keep answering,
/// and each port holds at most its cap of the attackers' connections (the oldest idle ones
/// are closed for new ones). The header timeout is long here, so only the cap can close them.
/// Prints the /metrics latency under the attack (the report's figure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_connections_beyond_the_cap_and_a_flood_do_not_lock_out_probes() {
    const CAP: usize = 64;
    let limits = ocm_runtime::HttpLimits {
        http_header_read_timeout: Duration::from_secs(120),
        http_max_connections: CAP,
        ..Default::default()
    };
    let p = ports(limits).await;
    let certificate = p.certificate.clone();

    // The same probe without the attack, for comparison.
    let mut unloaded = Vec::new();
    for _ in 0..100 {
        let started = Instant::now();
        assert_eq!(get(p.metrics, "/metrics").await.0, StatusCode::OK);
        unloaded.push(started.elapsed());
    }
    unloaded.sort();
    println!(
        "/metrics latency unloaded: p50 {:?}, p99 {:?}",
        percentile(&unloaded, 0.50),
        percentile(&unloaded, 0.99)
    );

    // Three times the cap on each port before the probes start.
    let mut held_plain = hold_many(p.metrics, 3 * CAP, false).await;
    let mut held_tls = hold_many(p.tls, 3 * CAP, true).await;

    // The flood: new connections, each one /metrics request, from 8 tasks.
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let flooding = flooding.clone();
            let addr = p.metrics;
            tokio::spawn(async move {
                let mut answered = 0u64;
                while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await
                        && let Ok((mut sender, conn)) =
                            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
                    {
                        tokio::spawn(conn);
                        let req = Request::get("/metrics")
                            .header(http::header::HOST, "x")
                            .body(Empty::<Bytes>::new())
                            .unwrap();
                        if let Ok(r) = sender.send_request(req).await
                            && r.status() == StatusCode::OK
                        {
                            answered += 1;
                        }
                    }
                }
                answered
            })
        })
        .collect();

    // Probes while more hostile connections keep arriving: every probe is answered within a
    // generous liveness deadline.
    let liveness = Duration::from_secs(5);
    let mut metrics_latency = Vec::new();
    for round in 0..100 {
        held_plain.push(hold(p.metrics, Hold::HalfSent, false).await);
        held_tls.push(hold(p.tls, Hold::Idle, true).await);
        let started = Instant::now();
        let (status, _) = tokio::time::timeout(liveness, get(p.metrics, "/metrics"))
            .await
            .unwrap_or_else(|_| {
                panic!("/metrics did not answer within {liveness:?} (round {round})")
            });
        assert_eq!(status, StatusCode::OK);
        metrics_latency.push(started.elapsed());
        let (status, _) = tokio::time::timeout(liveness, get(p.metrics, "/healthz"))
            .await
            .unwrap_or_else(|_| {
                panic!("/healthz did not answer within {liveness:?} (round {round})")
            });
        assert_eq!(status, StatusCode::OK);
        if round % 10 == 0 {
            let status = tokio::time::timeout(liveness, tls_get(p.tls, &certificate))
                .await
                .unwrap_or_else(|_| panic!("the TLS port did not answer within {liveness:?}"));
            assert_eq!(status, StatusCode::OK);
        }
    }
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut flooded = 0;
    for f in flood {
        flooded += f.await.unwrap();
    }
    assert!(flooded > 0, "the flood was answered too");

    // Each port holds at most its cap of the attackers' connections.
    for (port, held) in [("metrics", &held_plain), ("tls", &held_tls)] {
        let open = testenv::eventually(
            &format!(
                "the {port} port to hold at most {CAP} of {} hostile connections",
                held.len()
            ),
            Duration::from_secs(10),
            || {
                let open = held.iter().filter(|c| !closed_by_server(c)).count();
                async move { (open <= CAP).then_some(open) }
            },
        )
        .await;
        println!(
            "{port} port: {open} of {} hostile connections still open (cap {CAP})",
            held.len()
        );
    }

    metrics_latency.sort();
    println!(
        "/metrics latency under {} held connections and a flood ({flooded} flood requests answered): p50 {:?}, p99 {:?}, max {:?}",
        held_plain.len(),
        percentile(&metrics_latency, 0.50),
        percentile(&metrics_latency, 0.99),
        metrics_latency.last().unwrap(),
    );
}

/// A client that does not finish its request head, its TLS handshake, or its next request on
/// a keep-alive connection within the header timeout is closed.
#[tokio::test]
async fn slow_and_idle_connections_are_closed_after_the_header_timeout() {
    let limits = ocm_runtime::HttpLimits {
        http_header_read_timeout: Duration::from_secs(1),
        http_max_connections: 64,
        ..Default::default()
    };
    let p = ports(limits).await;
    let mut conns = vec![
        hold(p.metrics, Hold::Idle, false).await,
        hold(p.metrics, Hold::HalfSent, false).await,
        hold(p.tls, Hold::Idle, true).await,
        hold(p.tls, Hold::HalfSent, true).await,
    ];
    // A keep-alive connection after one answered request.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut kept = TcpStream::connect(p.metrics).await.unwrap();
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 256];
        let n = kept.read(&mut answer).await.unwrap();
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            &answer[..n]
        );
        conns.push(kept);
    }
    testenv::eventually(
        "the server to close the slow and idle connections",
        Duration::from_secs(30),
        || {
            let open = conns.iter().filter(|c| !closed_by_server(c)).count();
            async move { (open == 0).then_some(()) }
        },
    )
    .await;
    // The port still serves.
    assert_eq!(get(p.metrics, "/healthz").await.0, StatusCode::OK);
}

/// A request head larger than the limit is refused (431) instead of being buffered; one
/// within it is answered.
#[tokio::test]
async fn an_oversized_request_head_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = ports(ocm_runtime::HttpLimits::default()).await;
    let exchange = |padding: usize| async move {
        let mut conn = TcpStream::connect(p.metrics).await.unwrap();
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Padding: {}\r\n\r\n",
            "a".repeat(padding)
        );
        // The server may answer and close before the whole head is written.
        let _ = conn.write_all(head.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    let small = exchange(1024).await;
    assert!(small.starts_with("HTTP/1.1 200"), "{small}");
    let large = exchange(128 * 1024).await;
    assert!(large.starts_with("HTTP/1.1 431"), "{large}");
}
