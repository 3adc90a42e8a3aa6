//! The binary's debug endpoint as the chart's scheduler identity: TLS by default, replaced
//! certificate files, plain HTTP only on loopback.

use super::*;

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
    // Logged before the handshake that served it; the test reads the log as it arrives.
    process
        .log_line("the reload logged", |v| {
            (v["message"] == "serving certificate reloaded").then_some(())
        })
        .await;
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
