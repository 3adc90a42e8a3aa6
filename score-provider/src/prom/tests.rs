use super::*;

#[test]
fn decodes_what_prometheus_answers() {
    let ok = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"cluster":"a","node":"n1"},"value":[1700000000.5,"8"]},
            {"metric":{"cluster":"b"},"value":[1700000000.5,"NaN"]}]}}"#;
    let got = decode(StatusCode::OK, ok).expect("decodes").samples;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].labels["node"], "n1");
    assert_eq!(got[0].value, 8.0);
    assert!(got[1].value.is_nan());
    let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"3.5"]}}"#;
    assert_eq!(
        decode(StatusCode::OK, scalar).expect("scalar").samples[0].value,
        3.5
    );
    let bad = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
    let e = decode(StatusCode::BAD_REQUEST, bad).expect_err("bad query");
    assert!(
        matches!(&e, PromError::Query { kind, .. } if kind == "bad_data"),
        "{e}"
    );
    assert!(!e.transient());
    let e = decode(StatusCode::SERVICE_UNAVAILABLE, b"<html>down</html>").expect_err("503");
    assert!(e.transient(), "{e}");
    let e = decode(StatusCode::OK, b"not json").expect_err("garbage");
    assert!(matches!(e, PromError::Decode(_)));
    let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
    assert!(decode(StatusCode::OK, matrix).is_err());
}

/// A server that reads the request and never answers (what a hung query API does; a real
/// Prometheus cannot be made to): the query gives up after its timeout, each attempt, and
/// the request carried the token (read from its file) and the extra headers.
#[tokio::test]
async fn a_hung_server_times_out() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let n = conn.read(&mut buf).await.unwrap_or(0);
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            held.push(conn);
        }
    });
    let dir = std::env::temp_dir().join(format!("prom-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let token = dir.join("token");
    std::fs::write(&token, "rotating-1\n").expect("token");
    let client = PromClient::new(PromSettings {
        url: format!("http://{addr}"),
        bearer_token: Some("ignored".into()),
        bearer_token_file: Some(token.clone()),
        ca_file: None,
        headers: vec![("X-Scope-OrgID".into(), "fleet".into())],
        timeout: Duration::from_millis(300),
        attempts: 2,
        thanos: Some(ThanosParams::default()),
        max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
    })
    .expect("client");
    let started = std::time::Instant::now();
    let e = client.query("up").await.expect_err("no answer");
    assert!(matches!(e, PromError::Timeout(_)), "{e}");
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "two attempts"
    );
    let request = rx.recv().await.expect("a request").to_ascii_lowercase();
    assert!(request.starts_with("post /api/v1/query"), "{request}");
    assert!(
        request.contains("authorization: bearer rotating-1\r\n"),
        "{request}"
    );
    assert_eq!(request.matches("authorization:").count(), 1, "{request}");
    assert!(request.contains("x-scope-orgid: fleet"), "{request}");
    // A rotated token is used by the next request.
    std::fs::write(&token, "rotating-2").expect("token");
    let _ = client.query("up").await;
    let mut seen = String::new();
    while let Ok(r) = rx.try_recv() {
        seen = r;
    }
    assert!(
        seen.to_ascii_lowercase().contains("bearer rotating-2"),
        "{seen}"
    );
    hold.abort();
    // Nothing listens now: refused at once, a transport error.
    let e = client.query("up").await.expect_err("refused");
    assert!(matches!(e, PromError::Transport(_)), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn decodes_only_the_shapes_the_scorer_uses() {
    // Fields the scorer does not read (Prometheus' stats) are skipped; warnings are kept.
    let extra = br#"{"status":"success","warnings":["w"],"data":{"resultType":"vector",
            "result":[{"metric":{"cluster":"a"},"value":[1,"2"]}],"stats":{"timings":{}}}}"#;
    let answer = decode(StatusCode::OK, extra).expect("vector");
    assert_eq!(answer.samples[0].value, 2.0);
    assert_eq!(answer.warnings, ["w"]);
    for bad in [
            // A native histogram sample has no value.
            &br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"histogram":[1,{}]}]}}"#[..],
            br#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#,
            br#"{"status":"success","data":{"resultType":"exemplars","result":[]}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":{"a":1}}}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"2"]}]}}"#,
        ] {
            let e = decode(StatusCode::OK, bad).expect_err("refused");
            assert!(matches!(e, PromError::Decode(_)), "{e}");
            assert_eq!(e.reason(), "decode");
        }
}

/// A server that answers every query with an endless body, with and without a
/// Content-Length saying so: the query fails as too large once the limit is read (or at
/// once, by the Content-Length), long before its timeout, and it is not retried.
#[tokio::test]
async fn an_oversized_answer_fails_the_query() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    let serve = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let chunked = n.is_multiple_of(2);
                let head = if chunked {
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                } else {
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 300000000\r\n\r\n"
                };
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("{:x}\r\n{}\r\n", 8192, "[".repeat(8192));
                let piece = if chunked { chunk } else { "[".repeat(8192) };
                // Until the client hangs up.
                while conn.write_all(piece.as_bytes()).await.is_ok() {}
            });
        }
    });
    let client = PromClient::new(PromSettings {
        url: format!("http://{addr}"),
        bearer_token: None,
        bearer_token_file: None,
        ca_file: None,
        headers: vec![],
        timeout: Duration::from_secs(60),
        attempts: 3,
        thanos: None,
        max_response_bytes: 1 << 20,
    })
    .expect("client");
    let e = client.query("up").await.expect_err("streamed");
    assert!(
        matches!(e, PromError::TooLarge { limit, length: None } if limit == 1 << 20),
        "{e}"
    );
    assert_eq!(e.reason(), "too_large");
    assert!(!e.transient());
    let e = client.query("up").await.expect_err("announced");
    assert!(
        matches!(
            e,
            PromError::TooLarge {
                length: Some(300_000_000),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("1048576 bytes"), "{e}");
    assert_eq!(connections.load(Ordering::SeqCst), 2, "no retry");
    serve.abort();
}

#[test]
fn names_the_clusters_a_warning_names() {
    let w = r#"receive series from Addr: 127.0.0.1:10901 LabelSets: {cluster="c2", replica="a"},{cluster="c\"3"} MinTime: 1 MaxTime: 2: rpc error: code = Unavailable"#;
    assert_eq!(named_in(w, "cluster"), ["c2", "c\"3"]);
    assert_eq!(named_in(w, "replica"), ["a"]);
    // Another label that ends in the name, an unclosed value, no label at all.
    assert!(named_in(r#"{xcluster="c1"}"#, "cluster").is_empty());
    assert!(named_in(r#"{cluster="c1"#, "cluster").is_empty());
    assert!(named_in("context deadline exceeded", "cluster").is_empty());
    assert!(named_in(r#"cluster="""#, "cluster").is_empty());
}

#[test]
fn form_encoding_and_settings_errors() {
    assert_eq!(
        encode("sum by (a) (x{y=\"z\"})"),
        "sum%20by%20%28a%29%20%28x%7By%3D%22z%22%7D%29"
    );
    let base = PromSettings {
        url: "http://127.0.0.1:9090".into(),
        bearer_token: None,
        bearer_token_file: None,
        ca_file: None,
        headers: vec![],
        timeout: Duration::from_secs(1),
        attempts: 1,
        thanos: None,
        max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
    };
    assert!(PromClient::new(base.clone()).is_ok());
    for url in ["ftp://x", "not a url", "http://"] {
        let s = PromSettings {
            url: url.into(),
            ..base.clone()
        };
        assert!(
            matches!(PromClient::new(s), Err(PromError::Url(..))),
            "{url}"
        );
    }
    let s = PromSettings {
        headers: vec![("bad header".into(), "v".into())],
        ..base.clone()
    };
    assert!(matches!(PromClient::new(s), Err(PromError::Header(..))));
    let s = PromSettings {
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..base
    };
    assert!(matches!(PromClient::new(s), Err(PromError::Ca(..))));
}
