//! Bounds: the review cache, the concurrency bound, and a review flood against the binary.

use super::*;

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
