//! Scores from fleet metrics: their values, expiry, a Prometheus outage, and forged series.

use super::*;

#[tokio::test]
async fn scores_from_fleet_metrics_expire_when_stale_and_survive_an_outage() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer").await.expect("ns");
    let clusters = fleet(&prefix);
    for c in &clusters {
        create_cluster(&client, &c.name, Some("fleet")).await;
    }
    // A cluster with no metrics at all.
    let silent = format!("{prefix}-silent");
    create_cluster(&client, &silent, Some("fleet")).await;
    // A cluster whose score the agent writes: the scorer leaves it alone.
    let agents = format!("{prefix}-agents");
    create_cluster(&client, &agents, Some("fleet")).await;
    let theirs: AddOnPlacementScore = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
        "metadata": {"name": RESOURCE_USAGE_SCORE, "namespace": agents,
                     "labels": {"app.kubernetes.io/managed-by": "resource-usage-agent"}}
    }))
    .expect("score");
    let agent_api = Api::<AddOnPlacementScore>::namespaced(client.clone(), &agents);
    agent_api
        .create(&PostParams::default(), &theirs)
        .await
        .expect("the agent's score");
    let agent_version = agent_api
        .get(RESOURCE_USAGE_SCORE)
        .await
        .expect("score")
        .metadata
        .resource_version;

    let exporter = Exporter::start().await.expect("exporter");
    let agents_cluster = Cluster {
        name: agents.clone(),
        nodes: vec![node("n1", 4.0, 4.0)],
        pods: vec![],
    };
    let all: String = clusters
        .iter()
        .chain([&agents_cluster])
        .map(Cluster::exposition)
        .collect();
    exporter.set(all);
    let mut prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");

    let dir = std::env::temp_dir().join(format!("scorer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let port = testenv::free_port();
    let definition = builtin_definition(
        &client,
        &prefix,
        RESOURCE_USAGE_SCORE,
        "1s",
        "1m",
        "8s",
        Some(("32", "128Gi")),
    )
    .await;
    let scorer = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "scorer",
            "--leader-elect=false",
            "--refresh-period=1s",
            "--debounce=200ms",
            "--prometheus-timeout=2s",
            "--prometheus-attempts=1",
        ])
        .args(&definition)
        .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
        .arg(format!("--prometheus-url={}", prom.url()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("scorer");
    let _scorer = Process(scorer);

    // Every cluster's scores are what its data says; the silent one is reported unavailable.
    for c in &clusters {
        let want = expected(c);
        eventually(&format!("the scores of {}", c.name), DEADLINE, || async {
            score(&client, &c.name)
                .await
                .filter(|s| scores_of(s) == want)
        })
        .await;
    }
    let s = eventually("the silent cluster reported", DEADLINE, || async {
        score(&client, &silent)
            .await
            .filter(|s| condition(s).is_some())
    })
    .await;
    assert_eq!(condition(&s), Some(("False".into(), "NoMetrics".into())));
    assert!(scores_of(&s).is_empty());

    // The agent's object was not touched, and the scorer says it skipped one cluster.
    eventually("the skip counted", DEADLINE, || async {
        (metric(port, "scorer_skipped_clusters").await == 1.0).then_some(())
    })
    .await;
    assert_eq!(
        agent_api
            .get(RESOURCE_USAGE_SCORE)
            .await
            .expect("score")
            .metadata
            .resource_version,
        agent_version
    );

    // The placement core ranks by them: the two with most free CPU.
    let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let mut current = Vec::new();
    for c in &clusters {
        current.push(score(&client, &c.name).await.expect("score"));
    }
    let picked = select(&names, &current, 2);
    assert_eq!(picked, [clusters[0].name.clone(), clusters[2].name.clone()]);

    // Cluster b's data stops: after the definition's freshness.maxAge it is no longer renewed
    // and expires.
    let without_b: String = [&clusters[0], &clusters[2]]
        .iter()
        .map(|c| c.exposition())
        .collect();
    exporter.set(without_b);
    let stale = eventually("b reported stale", DEADLINE, || async {
        score(&client, &clusters[1].name)
            .await
            .filter(|s| condition(s).is_some_and(|(_, r)| r == "MetricsStale"))
    })
    .await;
    let frozen = valid_until(&stale).expect("validUntil");
    eventually(
        "b's scores to expire while a's are renewed",
        DEADLINE,
        || async {
            let a = score(&client, &clusters[0].name).await?;
            let b = score(&client, &clusters[1].name).await?;
            let now = jiff::Timestamp::now();
            (valid_until(&b) == Some(frozen) && frozen < now && valid_until(&a)? > now)
                .then_some(())
        },
    )
    .await;

    // Prometheus goes away: the scorer keeps running, says so, and recovers when it is back.
    prom.stop();
    eventually("query errors counted", DEADLINE, || async {
        (metric(port, "scorer_query_errors_total").await > 0.0).then_some(())
    })
    .await;
    assert!(
        metric(port, "score_provider_computes_total").await > 0.0,
        "the loop runs on"
    );
    let stopped_at = jiff::Timestamp::now();
    prom.start_again().await.expect("prometheus back");
    eventually("scores renewed after the outage", DEADLINE, || async {
        let a = score(&client, &clusters[0].name).await?;
        (valid_until(&a)? > stopped_at + jiff::SignedDuration::from_secs(3)
            && condition(&a).is_some_and(|(s, _)| s == "True"))
        .then_some(())
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spoke publishes series under another cluster's name. The attacker is the spoke's own
/// metrics pipeline: a scrape target of its own, serving what it likes. With the spoke-set
/// `cluster` label (the default), a forged series that disagrees with the victim's withholds
/// the victim's scores (condition, metric) instead of replacing them, and nobody else's; a
/// series for a cluster the hub does not know creates nothing. With a label the hub sets from
/// who sends (here Prometheus' per-target label, as Thanos Receive's tenant label), the forged
/// series do not touch the victim at all.
#[tokio::test]
async fn a_forged_series_for_another_cluster_changes_nothing() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scorer-forge")
        .await
        .expect("ns");
    let victim = Cluster {
        name: format!("{prefix}-victim"),
        nodes: vec![node("n1", 16.0, 64.0)],
        pods: vec![pod("p1", "n1", 4.0, 8.0)],
    };
    let attacker = Cluster {
        name: format!("{prefix}-attacker"),
        nodes: vec![node("n1", 8.0, 32.0)],
        pods: vec![],
    };
    let bystander = Cluster {
        name: format!("{prefix}-other"),
        nodes: vec![node("n1", 24.0, 96.0)],
        pods: vec![pod("p1", "n1", 2.0, 2.0)],
    };
    let fleet = [&victim, &attacker, &bystander];
    for c in fleet {
        create_cluster(&client, &c.name, Some("fleet")).await;
    }
    // Each cluster pushes through its own target; Prometheus labels what it scrapes there
    // with `tenant`, which the target cannot override.
    let mut exporters = Vec::new();
    for c in fleet {
        let e = Exporter::start().await.expect("exporter");
        e.set(c.exposition());
        exporters.push(e);
    }
    let targets: Vec<Target> = fleet
        .iter()
        .zip(&exporters)
        .map(|(c, e)| Target {
            addr: e.addr(),
            labels: BTreeMap::from([("tenant".to_owned(), c.name.clone())]),
        })
        .collect();
    let prom = Prometheus::start_labelled(&targets, Duration::from_secs(1))
        .await
        .expect("prometheus");

    let dir = std::env::temp_dir().join(format!("scorer-forge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    // Two scorers side by side, each writing a score object of its own: one trusts the
    // spoke-set `cluster` label, the other the hub-set `tenant`.
    const TRUSTED: &str = "tenant-score";
    // Short windows, so that the forged series leave them soon after they stop.
    let spoke_flags = builtin_definition(
        &client,
        &format!("{prefix}-spoke"),
        RESOURCE_USAGE_SCORE,
        "1s",
        "10s",
        "8s",
        Some(("32", "128Gi")),
    )
    .await;
    let hub_flags = builtin_definition(
        &client,
        &format!("{prefix}-hub"),
        TRUSTED,
        "1s",
        "10s",
        "8s",
        Some(("32", "128Gi")),
    )
    .await;
    let spawn = |port: u16, extra: &[String]| {
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=false",
                "--refresh-period=1s",
                "--debounce=200ms",
                "--prometheus-timeout=2s",
                "--prometheus-attempts=1",
            ])
            .args(extra)
            .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", prom.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Process)
            .expect("scorer")
    };
    let port = testenv::free_port();
    let _spoke_label = spawn(port, &spoke_flags);
    let mut hub_args = hub_flags.clone();
    hub_args.push("--cluster-label=tenant".into());
    let _hub_label = spawn(testenv::free_port(), &hub_args);
    let trusted = |cluster: &str| {
        let api = Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster);
        async move { api.get_opt(TRUSTED).await.ok().flatten() }
    };
    for c in fleet {
        let want = expected(c);
        eventually(&format!("the scores of {}", c.name), DEADLINE, || async {
            let s = score(&client, &c.name).await?;
            let t = trusted(&c.name).await?;
            (scores_of(&s) == want && scores_of(&t) == want).then_some(())
        })
        .await;
    }

    // The attack: the attacker's target also serves a node of the victim's, with far more
    // free capacity, trying the hub-set label too, and a cluster the hub does not know.
    let forged = Cluster {
        name: victim.name.clone(),
        nodes: vec![node("n1", 1000.0, 1000.0)],
        pods: vec![],
    };
    let forged_scores = expected(&forged);
    assert_ne!(forged_scores, expected(&victim), "the forgery shows");
    let ghost = Cluster {
        name: format!("{prefix}-ghost"),
        nodes: vec![node("n1", 64.0, 64.0)],
        pods: vec![],
    };
    let forged_text = forged.exposition().replace(
        &format!("cluster=\"{}\"", victim.name),
        &format!("cluster=\"{0}\",tenant=\"{0}\"", victim.name),
    );
    exporters[1].set(format!(
        "{}{forged_text}{}",
        attacker.exposition(),
        ghost.exposition()
    ));
    let attack = jiff::Timestamp::now();

    // Never the forged scores; the victim is reported instead, while the others are renewed.
    let not_forged = |s: &AddOnPlacementScore| {
        assert_ne!(
            scores_of(s),
            forged_scores,
            "the forged series set the victim's scores: {:?}",
            s.status
        );
    };
    let reported = eventually("the victim's conflict reported", DEADLINE, || async {
        let s = score(&client, &victim.name).await?;
        not_forged(&s);
        s.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "AddOnPlacementScoreUpdated" && c.reason == "ConflictingSeries")
            .map(|c| (c.status.clone(), c.message.clone(), s.clone()))
    })
    .await;
    let (status, message, s) = reported;
    assert_eq!(status, "False");
    assert!(
        message.contains("allocatable") && message.contains(&format!("{}-n1", victim.name)),
        "{message}"
    );
    assert_eq!(
        scores_of(&s),
        expected(&victim),
        "the last true scores stay"
    );
    let frozen = valid_until(&s).expect("validUntil");
    eventually("the conflict counted", DEADLINE, || async {
        (metric(port, "scorer_conflicting_clusters").await == 1.0).then_some(())
    })
    .await;
    eventually("the unknown cluster's series dropped", DEADLINE, || async {
        (metric(
            port,
            "scorer_dropped_series_total{reason=\"unknown_cluster\"}",
        )
        .await
            > 0.0)
            .then_some(())
    })
    .await;
    // The victim's scores are not renewed and expire, while everyone else's are, and the
    // hub-label scorer rates the victim on as before.
    eventually(
        "the victim's scores expire, the others renewed",
        DEADLINE,
        || async {
            let now = jiff::Timestamp::now();
            let v = score(&client, &victim.name).await?;
            not_forged(&v);
            if valid_until(&v) != Some(frozen) || frozen >= now {
                return None;
            }
            for c in [&attacker, &bystander] {
                let s = score(&client, &c.name).await?;
                (scores_of(&s) == expected(c) && valid_until(&s)? > now).then_some(())?;
            }
            let t = trusted(&victim.name).await?;
            (scores_of(&t) == expected(&victim)
                && valid_until(&t)? > attack + jiff::SignedDuration::from_secs(5)
                && condition(&t).is_some_and(|(s, _)| s == "True"))
            .then_some(())
        },
    )
    .await;
    assert!(
        Api::<AddOnPlacementScore>::namespaced(client.clone(), &ghost.name)
            .list(&Default::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true),
        "nothing for the unknown cluster"
    );
    assert!(
        Api::<ManagedCluster>::all(client.clone())
            .get_opt(&ghost.name)
            .await
            .expect("get")
            .is_none()
    );

    // The attack ends: once its series leave the window, the victim is rated again.
    exporters[1].set(attacker.exposition());
    eventually("the victim rated again", DEADLINE, || async {
        let s = score(&client, &victim.name).await?;
        not_forged(&s);
        (scores_of(&s) == expected(&victim)
            && valid_until(&s)? > jiff::Timestamp::now()
            && condition(&s).is_some_and(|(st, _)| st == "True"))
        .then_some(())
    })
    .await;
    assert_eq!(metric(port, "scorer_conflicting_clusters").await, 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}
