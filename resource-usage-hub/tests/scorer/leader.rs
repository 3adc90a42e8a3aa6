//! One replica scores; a lost lease ends it. With the chart's scorer RBAC.

use super::*;

/// Two replicas: one rates, the other stands by (ready); the standby takes over when the
/// leader dies; a leader whose Lease is taken from it stops and exits.
#[tokio::test]
async fn one_replica_scores_and_a_lost_lease_ends_it() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer-ha").await.expect("ns");
    let cluster = Cluster {
        name: format!("{prefix}-a"),
        nodes: vec![node("n1", 16.0, 64.0)],
        pods: vec![],
    };
    create_cluster(&client, &cluster.name, Some("fleet")).await;
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(cluster.exposition());
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");
    let dir = std::env::temp_dir().join(format!("scorer-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // The replicas run as a service account bound to the chart's scorer RBAC, nothing more.
    let sa = "resource-usage-scorer";
    apply_rbac(&client, &prefix, sa).await;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig_as_service_account(&prefix, sa)).expect("kubeconfig");
    let definition = builtin_definition(
        &client,
        &prefix,
        RESOURCE_USAGE_SCORE,
        "1s",
        "1m",
        "30s",
        Some(("100", "512Gi")),
    )
    .await;
    let spawn = |port: u16| {
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=true",
                "--leader-election-lease-duration=2s",
                "--leader-election-renew-deadline=1500ms",
                "--leader-election-retry-period=300ms",
                "--refresh-period=1s",
                "--debounce=200ms",
            ])
            .args(&definition)
            .arg(format!("--leader-election-namespace={prefix}"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", prom.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Process)
            .expect("scorer")
    };
    let ports = [testenv::free_port(), testenv::free_port()];
    let mut replicas = [Some(spawn(ports[0])), Some(spawn(ports[1]))];
    for port in ports {
        eventually("both ready (the standby too)", DEADLINE, || async {
            let (code, _) = testenv::http::get(([127, 0, 0, 1], port).into(), "/readyz")
                .await
                .ok()?;
            (code == 200).then_some(())
        })
        .await;
    }
    let leader = eventually("exactly one rates", DEADLINE, || async {
        let a = metric(ports[0], "scorer_rated_clusters").await;
        let b = metric(ports[1], "scorer_rated_clusters").await;
        ((a > 0.0) != (b > 0.0)).then_some(usize::from(b > 0.0))
    })
    .await;
    let standby = 1 - leader;
    eventually(
        "scores written with the scorer's own permission",
        DEADLINE,
        || async {
            score(&client, &cluster.name)
                .await
                .filter(|s| !scores_of(s).is_empty())
        },
    )
    .await;
    replicas[leader] = None;
    eventually("the standby takes over", DEADLINE, || async {
        (metric(ports[standby], "scorer_rated_clusters").await > 0.0).then_some(())
    })
    .await;

    // Someone else takes the Lease: the leader stops and exits with an error.
    let leases =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &prefix);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    eventually("the Lease taken", DEADLINE, || async {
        let mut lease = leases.get("resource-usage-hub-scorer").await.ok()?;
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("someone-else".into());
        spec.renew_time = Some(now.clone());
        spec.lease_duration_seconds = Some(3600);
        leases
            .replace("resource-usage-hub-scorer", &PostParams::default(), &lease)
            .await
            .ok()
    })
    .await;
    let Some(mut survivor) = replicas[standby].take() else {
        panic!("the standby is running");
    };
    let status = eventually("the old leader exits", DEADLINE, || {
        let s = survivor.0.try_wait().ok().flatten();
        async move { s }
    })
    .await;
    assert!(!status.success(), "a lost lease is an error exit: {status}");

    // What the scorer's identity may not do.
    let me = cp.client_as_service_account(&prefix, sa).expect("client");
    let refused =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(refused(
        Api::<k8s_openapi::api::core::v1::Secret>::all(me.clone())
            .list(&Default::default())
            .await
            .map(drop)
    ));
    // It reads definitions and writes their status, never what they say.
    assert!(refused(
        Api::<ocm_api::scoring::ScoreDefinition>::all(me.clone())
            .delete(&prefix, &Default::default())
            .await
            .map(drop)
    ));
    assert!(refused(
        Api::<ocm_api::scoring::ScoreDefinition>::all(me.clone())
            .patch(
                &prefix,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {"scoreName": "other"}})),
            )
            .await
            .map(drop)
    ));
    assert!(refused(
        Api::<ocm_api::PlacementDecision>::all(me)
            .list(&Default::default())
            .await
            .map(drop)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The chart's scorer RBAC (`charts/ocm-placement/files/scorer-rbac.yaml`) for `sa` in `ns`.
async fn apply_rbac(client: &Client, ns: &str, sa: &str) {
    let text = include_str!("../../../charts/ocm-placement/files/scorer-rbac.yaml")
        .replace("{{NAMESPACE}}", ns)
        .replace("{{SUBJECT}}", sa);
    testenv::apply_yaml(client, &text, ns)
        .await
        .expect("the scorer's RBAC");
}
