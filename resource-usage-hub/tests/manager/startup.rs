//! Started before its hub: the manager waits for it, then does its job.

use super::*;

/// Started while its hub cannot be reached (nothing listens at the kubeconfig's address), the
/// manager keeps running for 10 s, alive and not ready, `/readyz` naming the hub and the last
/// error. Once the hub answers at that address (a forwarder to the real apiserver) it turns
/// ready and creates its ClusterManagementAddOn.
#[tokio::test]
async fn started_before_the_hub_the_manager_waits_for_it() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    testenv::install_crds(&admin, ocm_api::crds::ours())
        .await
        .expect("the ScoreDefinition CRD");
    let addon = "late-hub-addon";
    let dir = tempdir("late-hub");
    let port = testenv::free_port();
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig_at(&server, None)).expect("kubeconfig");
    let metrics = testenv::free_port();
    let mut manager = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "manager",
            "--addon-name",
            addon,
            "--agent-image",
            IMAGE,
            "--leader-elect=false",
            "--event-debounce=50ms",
        ])
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Process)
        .expect("manager binary");
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
            manager.0.try_wait().expect("status").is_none(),
            "exited while the hub was unreachable"
        );
        if let Err(e) = testenv::forward::waiting_for(probes, &server).await {
            panic!("not waiting for the hub: {e}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let _hub = testenv::forward::Forwarder::start(port, cp.address())
        .await
        .expect("forwarder");
    let cmas = Api::<ClusterManagementAddOn>::all(admin.clone());
    eventually(
        "the manager creates its ClusterManagementAddOn",
        DEADLINE,
        || async { cmas.get_opt(addon).await.ok().flatten() },
    )
    .await;
    eventually("/readyz to be 200", DEADLINE, || async {
        (get(metrics, "/readyz").await?.0 == 200).then_some(())
    })
    .await;
    drop(manager);
    let _ = cmas.delete(addon, &Default::default()).await;
    let _ = std::fs::remove_dir_all(&dir);
}
