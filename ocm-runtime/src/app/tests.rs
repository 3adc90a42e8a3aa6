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
