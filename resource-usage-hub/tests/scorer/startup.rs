//! Started before its hub: the scorer waits for it, and stops cleanly meanwhile.

use super::*;

/// Started while its hub cannot be reached (nothing listens at the kubeconfig's address), the
/// scorer keeps running for 10 s, alive and not ready, `/readyz` naming the hub and the last
/// error; SIGTERM during the wait ends it at once, with success.
#[tokio::test]
async fn started_before_the_hub_the_scorer_waits_and_stops_on_sigterm() {
    let cp = testenv::shared().await;
    let dir = std::env::temp_dir().join(format!("scorer-late-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let port = testenv::free_port();
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig_at(&server, None)).expect("kubeconfig");
    let metrics = testenv::free_port();
    // The query API is never asked: nothing is scored before the hub answers.
    let mut scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args(["scorer", "--leader-elect=false"])
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!(
            "--prometheus-url=http://127.0.0.1:{}",
            testenv::free_port()
        ))
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr")).expect("stderr"))
        .spawn()
        .map(Process)
        .expect("scorer");
    let probes = ([127, 0, 0, 1], metrics).into();
    eventually(
        "/readyz to name the connection's error",
        DEADLINE,
        || async {
            let body = testenv::forward::waiting_for(probes, &server).await.ok()?;
            body.contains("Connection refused").then_some(())
        },
    )
    .await;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        assert!(
            scorer.0.try_wait().expect("status").is_none(),
            "exited while the hub was unreachable"
        );
        if let Err(e) = testenv::forward::waiting_for(probes, &server).await {
            panic!("not waiting for the hub: {e}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let sent = Command::new("kill")
        .args(["-TERM", &scorer.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    // Prompt: well within the kubelet's grace period.
    let status = eventually(
        "the scorer to exit on SIGTERM",
        Duration::from_secs(10),
        || {
            let status = scorer.0.try_wait().expect("status");
            async move { status }
        },
    )
    .await;
    let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    assert!(status.success(), "{status}:\n{log}");
    assert!(log.contains("the hub apiserver is unreachable"), "{log}");
    assert!(!log.contains("hub scorer running"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
