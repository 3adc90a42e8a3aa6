//! A hostile query API: a 300 MB answer fails one query, and the next round scores.

use super::*;

/// The query API as the scorer sees it: a proxy that forwards every instant query to a real
/// Prometheus, except the ones it is armed for, which it answers with a valid-looking vector
/// of `HOSTILE_BYTES` streamed without a Content-Length (a real Prometheus cannot be made to
/// answer 300 MB cheaply). The test allocates one 1 MiB chunk, never the whole answer.
struct HostileQueryApi {
    addr: std::net::SocketAddr,
    state: Arc<HostileState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct HostileState {
    /// Queries still to answer with the oversized body.
    armed: std::sync::atomic::AtomicUsize,
    /// Oversized answers begun, and ended (finished or cut off by the client).
    begun: std::sync::atomic::AtomicUsize,
    ended: std::sync::atomic::AtomicUsize,
    /// Bytes of oversized answers the client took.
    sent: std::sync::atomic::AtomicU64,
}

const HOSTILE_BYTES: u64 = 300 << 20;

impl HostileQueryApi {
    async fn start(prometheus: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(HostileState::default());
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(Self::answer(conn, prometheus, shared.clone()));
            }
        });
        Self { addr, state, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next query gets the oversized answer.
    fn arm(&self) {
        self.state
            .armed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn answer(
        mut conn: tokio::net::TcpStream,
        prometheus: std::net::SocketAddr,
        state: Arc<HostileState>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // One request per connection (every answer closes it): head, then the form body.
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        let (head_len, body_len) = loop {
            let Ok(n) = conn.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            request.extend_from_slice(&buf[..n]);
            if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, length);
            }
        };
        while request.len() < head_len + body_len {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let form = String::from_utf8_lossy(&request[head_len..head_len + body_len]).into_owned();
        let hostile = state
            .armed
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !hostile {
            let (status, body) = testenv::http::get(prometheus, &format!("/api/v1/query?{form}"))
                .await
                .unwrap_or((502, String::new()));
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
            return;
        }
        state.begun.fetch_add(1, SeqCst);
        // Series of an unknown cluster, each with a 1 MiB node name: valid JSON throughout.
        let filler = "x".repeat(1 << 20);
        let series = format!(
            "{{\"metric\":{{\"cluster\":\"ghost\",\"node\":\"{filler}\"}},\"value\":[1,\"1\"]}},"
        );
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[";
        let mut sent = 0u64;
        let mut ok = conn.write_all(head.as_bytes()).await.is_ok();
        while ok && sent < HOSTILE_BYTES {
            ok = conn.write_all(series.as_bytes()).await.is_ok();
            if ok {
                sent += series.len() as u64;
                state.sent.fetch_add(series.len() as u64, SeqCst);
            }
        }
        if ok {
            let _ = conn
                .write_all(b"{\"metric\":{},\"value\":[1,\"1\"]}]}}")
                .await;
        }
        let _ = conn.shutdown().await;
        state.ended.fetch_add(1, SeqCst);
    }
}

impl Drop for HostileQueryApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Lines of `/metrics` of family `name` (with labels) that contain `needle`, summed.
async fn metric_with(port: u16, name: &str, needle: &str) -> f64 {
    let Ok((_, body)) = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics").await else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One 300 MB answer from the query API: the scorer reads at most its limit (8 MiB by
/// default) of it, stays alive and small, counts the query as failed `too_large` and logs it
/// with the limit and the flag; the scores it had are kept to expire, and the next round
/// scores normally.
#[tokio::test]
async fn a_300_mb_answer_fails_one_query_and_the_next_round_scores() {
    use std::sync::atomic::Ordering::SeqCst;
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer-big").await.expect("ns");
    let cluster = Cluster {
        name: format!("{prefix}-a"),
        nodes: vec![node("n1", 16.0, 64.0)],
        pods: vec![pod("p1", "n1", 4.0, 8.0)],
    };
    create_cluster(&client, &cluster.name, Some("fleet")).await;
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(cluster.exposition());
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");
    let api = HostileQueryApi::start(prom.addr()).await;

    let dir = std::env::temp_dir().join(format!("scorer-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let log = dir.join("scorer.log");
    let port = testenv::free_port();
    let definition = builtin_definition(
        &client,
        &prefix,
        RESOURCE_USAGE_SCORE,
        "1s",
        "1m",
        "30s",
        Some(("32", "128Gi")),
    )
    .await;
    let scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "scorer",
            "--leader-elect=false",
            "--refresh-period=1s",
            "--debounce=200ms",
            "--prometheus-timeout=5s",
            "--prometheus-attempts=1",
            "--log-format=json",
        ])
        .args(&definition)
        .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
        .arg(format!("--prometheus-url={}", api.url()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("scorer");
    let pid = scorer.id();
    let mut scorer = Process(scorer);

    let want = expected(&cluster);
    eventually("the first scores", DEADLINE, || async {
        score(&client, &cluster.name)
            .await
            .filter(|s| scores_of(s) == want)
    })
    .await;
    let before = testenv::procfs::status_bytes(pid, "VmHWM");

    api.arm();
    eventually("the oversized answer served", DEADLINE, || async {
        (api.state.ended.load(SeqCst) == 1).then_some(())
    })
    .await;
    let hostile_over = jiff::Timestamp::now();
    // The round that got it has ended once a compute is counted after the answer ended.
    let computes = metric(port, "score_provider_computes_total").await;
    eventually(
        "the round with the oversized answer over",
        DEADLINE,
        || async { (metric(port, "score_provider_computes_total").await > computes).then_some(()) },
    )
    .await;
    let peak = testenv::procfs::status_bytes(pid, "VmHWM");
    let taken = api.state.sent.load(SeqCst);
    println!(
        "scorer VmHWM: {:.1} MiB before, {:.1} MiB after one {} MiB answer, of which it took {:.1} MiB",
        before as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        HOSTILE_BYTES >> 20,
        taken as f64 / 1048576.0
    );
    assert!(
        scorer.0.try_wait().expect("wait").is_none(),
        "the scorer is alive"
    );
    let failed = metric_with(port, "scorer_query_errors_total", "reason=\"too_large\"").await;
    assert_eq!(failed, 1.0, "one query failed as too large");
    assert!(
        peak < 100 << 20,
        "the scorer's peak RSS grew to {peak} bytes (before: {before})"
    );
    assert!(
        taken < 64 << 20,
        "the scorer took {taken} bytes of the answer"
    );
    // The scores written before were kept (to expire at their validUntil, not emptied).
    let kept = score(&client, &cluster.name).await.expect("score");
    assert_eq!(scores_of(&kept), want);

    // The next round scores normally, through the real Prometheus.
    eventually(
        "scores renewed after the oversized answer",
        DEADLINE,
        || async {
            let s = score(&client, &cluster.name).await?;
            (scores_of(&s) == want
                && valid_until(&s)? > hostile_over + jiff::SignedDuration::from_secs(5)
                && condition(&s).is_some_and(|(st, _)| st == "True"))
            .then_some(())
        },
    )
    .await;
    assert!(scorer.0.try_wait().expect("wait").is_none());
    assert_eq!(api.state.begun.load(SeqCst), 1, "one oversized answer");
    let text = std::fs::read_to_string(&log).expect("log");
    let line = text
        .lines()
        .find(|l| l.contains("over the size limit"))
        .unwrap_or_else(|| panic!("no warning in the log:\n{text}"));
    for part in [
        "\"flag\":\"--prometheus-max-response-size\"",
        "\"limit_bytes\":8388608",
        "\"query\":\"",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }
    drop(scorer);
    let _ = std::fs::remove_dir_all(&dir);
}
