#![allow(clippy::unwrap_used)]

use std::time::Duration;

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::leader::Leadership;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    app: AppArgs,
}

/// The shared flags keep the names (and so the chart's and the images' command lines) every
/// binary had before the builder.
#[test]
fn common_flags_keep_their_names() {
    let cli = Cli::try_parse_from([
        "x",
        "--kubeconfig=/k",
        "--client-qps=5",
        "--client-burst=7",
        "--leader-elect=false",
        "--leader-election-namespace=ns",
        "--leader-election-lease-duration=30s",
        "--leader-election-renew-deadline=20s",
        "--leader-election-retry-period=3s",
        "--metrics-bind-address=127.0.0.1:9",
        "--log-format=json",
        "--log-level=debug",
    ])
    .unwrap();
    let a = cli.app;
    assert_eq!(a.client.kubeconfig.as_deref(), Some("/k".as_ref()));
    assert_eq!((a.client.client_qps, a.client.client_burst), (5.0, 7));
    assert!(!a.leader.leader_elect);
    assert_eq!(a.leader.leader_election_namespace, "ns");
    assert_eq!(a.leader.timings().retry_period, Duration::from_secs(3));
    assert_eq!(a.serve.metrics_bind_address.port(), 9);
    assert_eq!(a.log.log_format, crate::LogFormat::Json);
    assert_eq!(a.log.log_level, "debug");
}

#[test]
fn main_turns_the_result_into_the_exit_code() {
    assert_eq!(main("x: ", || Ok::<(), String>(())), ExitCode::SUCCESS);
    assert_eq!(main("x: ", || Err("bad flag")), ExitCode::FAILURE);
    let answer = block_on(async { Ok::<_, AppError>(42) }, Drain::Background).unwrap();
    assert_eq!(answer, 42);
}

fn serve_args() -> ServeArgs {
    let cli = Cli::try_parse_from(["x", "--metrics-bind-address=127.0.0.1:0"]).unwrap();
    cli.app.serve
}

/// One plain HTTP/1.0 GET: the status line and the body.
async fn get(app: &Running, path: &str) -> String {
    let addr = app.metrics_address().unwrap();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    out
}

async fn eventually_contains(app: &Running, path: &str, want: &str) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        last = get(app, path).await;
        if last.contains(want) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{path} never had {want:?}: {last}");
}

/// The registry, the health and the leader gauge the builder sets up are the ones served.
#[tokio::test]
async fn serves_what_the_binary_registered_and_the_leader_gauge() {
    let mut app = App::new("test/0");
    let passes = prometheus_client::metrics::counter::Counter::<u64>::default();
    app.registry().register("passes", "Passes", passes.clone());
    passes.inc_by(3);
    let running = app.serve(&serve_args()).await.unwrap();
    let metrics = get(&running, "/metrics").await;
    assert!(metrics.contains("passes_total 3"), "{metrics}");
    assert!(get(&running, "/readyz").await.contains("starting"));
    running.health().set_ready(true);
    assert!(get(&running, "/readyz").await.starts_with("HTTP/1.0 200"));
    running.follow("the-lease", &Leadership::always());
    eventually_contains(
        &running,
        "/metrics",
        "leader_election_master_status{name=\"the-lease\"} 1",
    )
    .await;
}

#[tokio::test]
async fn without_leader_election_there_is_no_leader_gauge() {
    let running = App::new("test/0")
        .without_leader_election()
        .serve(&serve_args())
        .await
        .unwrap();
    running.follow("the-lease", &Leadership::always());
    let metrics = get(&running, "/metrics").await;
    assert!(metrics.contains("# EOF"), "{metrics}");
    assert!(!metrics.contains("leader_election"), "{metrics}");
}

/// Without a port nothing is bound, and the registry and health are still there for another
/// port to serve; the server is already stopped.
#[tokio::test]
async fn serving_without_a_port_binds_none_and_keeps_the_registry() {
    let mut app = App::new("test/0");
    let passes = prometheus_client::metrics::counter::Counter::<u64>::default();
    app.registry().register("passes", "Passes", passes.clone());
    passes.inc_by(2);
    let running = app.serve_optional(None).await.unwrap();
    assert_eq!(running.metrics_address(), None);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &running.registry()).unwrap();
    assert!(text.contains("passes_total 2"), "{text}");
    running.health().set_ready(true);
    assert!(running.health().is_ready());
    running.server_stopped().await;
}

/// With `--leader-elect=false` the work runs at once, with no leadership to check.
#[tokio::test]
async fn run_elected_without_election_runs_the_work() {
    let running = App::new("test/0").serve(&serve_args()).await.unwrap();
    let cli = Cli::try_parse_from(["x", "--leader-elect=false"]).unwrap();
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let mut ran = None;
    running
        .run_elected(&cli.app.leader, client, "l", |l| {
            ran = Some(l.is_none());
            async {}
        })
        .await
        .unwrap();
    assert_eq!(ran, Some(true));
}

/// A kubeconfig for a server that need not exist: connecting only reads it.
fn kubeconfig() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("app-test-{}.kubeconfig", std::process::id()));
    let yaml = r#"apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"#;
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The controllers' rate limiter is the flags' and its metrics are served; `--client-qps=0`
/// turns it (and them) off.
#[tokio::test]
async fn connect_makes_the_flags_rate_limiter_and_serves_its_metrics() {
    let path = kubeconfig();
    for (qps, limited) in [("5", true), ("0", false)] {
        let cli = Cli::try_parse_from([
            "x".to_owned(),
            format!("--kubeconfig={}", path.display()),
            format!("--client-qps={qps}"),
            "--metrics-bind-address=127.0.0.1:0".to_owned(),
        ])
        .unwrap();
        let mut app = App::new("test/0");
        let hub = app.connect(&cli.app.client).await.unwrap();
        assert_eq!(hub.limiter().map(|l| l.qps()), limited.then_some(5.0));
        assert_eq!(hub.config().cluster_url.port_u16(), Some(9));
        hub.unlimited().unwrap();
        hub.limited_apart().unwrap();
        hub.writer(&Leadership::always()).unwrap();
        let running = app.serve(&cli.app.serve).await.unwrap();
        let metrics = get(&running, "/metrics").await;
        assert_eq!(
            metrics.contains("kube_client_rate_limiter_permits"),
            limited,
            "{metrics}"
        );
    }
    let _ = std::fs::remove_file(path);
}

fn status(code: u16) -> kube::Error {
    let mut s = kube::core::Status::failure("", "Reason");
    s.code = code;
    kube::Error::Api(s.boxed())
}

/// An error of a start-up step that wraps the client's, as the coexistence check's does.
#[derive(Debug, thiserror::Error)]
#[error("reading something: {0}")]
struct Wrapped(#[source] kube::Error);

/// Only a hub that cannot answer is waited for: a failed connection, 5xx, 429. Any other
/// answer, a write refused for want of leadership or bad configuration is not.
#[test]
fn what_is_waited_for() {
    for code in [500, 502, 503, 504, 429] {
        assert!(unreachable(&status(code)), "{code}");
        assert!(caused_by_unreachable(&Wrapped(status(code))), "{code}");
    }
    for code in [400, 401, 403, 404, 409, 410, 422] {
        assert!(!unreachable(&status(code)), "{code}");
        assert!(!caused_by_unreachable(&Wrapped(status(code))), "{code}");
    }
    let refused = kube::Error::Service(Box::new(crate::leader::NotLeader {
        method: "PATCH".into(),
        path: "/x".into(),
    }));
    assert!(!unreachable(&refused));
    let config = kube::Error::InferKubeconfig(kube::config::KubeconfigError::FindPath);
    assert!(!unreachable(&config));
    let io = std::io::Error::other("no kube error in here");
    assert!(!caused_by_unreachable(&io));
}

/// A loopback port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn client_for(server: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.parse().unwrap())).unwrap()
}

/// A refused connection, as the client reports it, is waited for, and the reason names it.
#[tokio::test]
async fn a_refused_connection_is_waited_for() {
    let client = client_for(&format!("http://127.0.0.1:{}", closed_port()));
    let e = client.apiserver_version().await.unwrap_err();
    assert!(unreachable(&e), "{e:?}");
    let text = error_chain(&e);
    assert!(text.contains("Connection refused"), "{text}");
}

/// A kubeconfig that does not parse, or names no cluster, is bad input: `connect` fails,
/// naming the file, before anything is waited for.
#[tokio::test]
async fn a_broken_kubeconfig_is_an_error_not_a_wait() {
    let dir = std::env::temp_dir().join(format!("app-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("garbage.kubeconfig", "clusters: [this is: not: yaml"),
        (
            "no-cluster.kubeconfig",
            "apiVersion: v1\nkind: Config\nclusters: []\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
        ),
    ];
    for (name, text) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let cli = Cli::try_parse_from(["x".to_owned(), format!("--kubeconfig={}", path.display())])
            .unwrap();
        let err = App::new("test/0")
            .connect(&cli.app.client)
            .await
            .err()
            .unwrap_or_else(|| panic!("{name} was accepted"));
        assert!(
            matches!(err, AppError::Client(ClientError::Kubeconfig { .. })),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stop signal made by the test.
fn stop_signal() -> (tokio::sync::oneshot::Sender<()>, Shutdown) {
    use futures::FutureExt;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown: Shutdown = async move {
        let _ = rx.await;
    }
    .boxed()
    .shared();
    (tx, shutdown)
}

/// While the hub cannot be reached the probes answer: alive, not ready, naming the server
/// and the last error; the stop signal ends the wait at once.
#[tokio::test]
async fn the_wait_answers_probes_and_ends_on_the_stop_signal() {
    let (stop, shutdown) = stop_signal();
    let running = App::new("test/0")
        .with_shutdown(shutdown)
        .serve(&serve_args())
        .await
        .unwrap();
    let running = std::sync::Arc::new(running);
    let server = format!("http://127.0.0.1:{}/", closed_port());
    let waiting = {
        let running = running.clone();
        let server = server.clone();
        tokio::spawn(async move {
            let client = client_for(&server);
            running.wait_for_hub(&client, &server).await
        })
    };
    let want = format!("waiting for the hub apiserver at {server}: ");
    let readyz = eventually_contains(&running, "/readyz", "Connection refused").await;
    assert!(readyz.starts_with("HTTP/1.0 503"), "{readyz}");
    assert!(readyz.contains(&want), "{readyz}");
    assert!(get(&running, "/healthz").await.starts_with("HTTP/1.0 200"));
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the wait to end at the stop signal")
        .unwrap();
    assert!(matches!(ended, Err(Stopped)), "{ended:?}");
}

/// Attempts go on while the hub cannot answer and end with its first other answer, which is
/// returned; readiness goes back to `starting`.
#[tokio::test(start_paused = true)]
async fn retries_until_the_hub_answers_then_returns_its_answer() {
    let (_stop, shutdown) = stop_signal();
    let running = App::new("test/0")
        .with_shutdown(shutdown)
        .serve(&serve_args())
        .await
        .unwrap();
    let mut calls = 0;
    let answer = running
        .retry_while_unreachable("https://hub:6443/", || {
            calls += 1;
            let result = if calls < 4 {
                Err(Wrapped(status(503)))
            } else {
                Ok(calls)
            };
            async move { result }
        })
        .await
        .unwrap();
    assert_eq!(answer.unwrap(), 4);
    assert_eq!(running.health().not_ready().as_deref(), Some("starting"));
    // An answer that is not a blip ends the wait at the first attempt.
    let mut calls = 0;
    let answer = running
        .retry_while_unreachable("https://hub:6443/", || {
            calls += 1;
            async { Err::<(), _>(Wrapped(status(404))) }
        })
        .await
        .unwrap();
    assert!(answer.is_err());
    assert_eq!(calls, 1);
}
