//! ScoreDefinitions end to end, with the shipped examples (`examples/scoring/`): a real
//! Prometheus scraping DCGM and probe series the test serves, the hub scorer evaluating the
//! GPU and latency definitions, a placement ranking by them; a change of range or expression
//! moves the scores without a restart; a bad expression and a definition ten times over its
//! series limit fail alone, said in their status; deleting a definition removes its scores.

use super::*;
use ocm_api::scoring::{ScoreDefinition, condition as cond};

const MIB: f64 = 1024.0 * 1024.0;

/// An example definition from `examples/scoring/`, renamed for this test and labelled so
/// that only this test's scorer evaluates it.
fn example(file: &str, name: &str, test: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scoring")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("example");
    let mut v: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
    v["metadata"]["name"] = json!(name);
    v["metadata"]["labels"] = json!({"test": test});
    v
}

/// A definition of our own, for the failure cases.
fn custom(
    name: &str,
    test: &str,
    score: &str,
    expression: &str,
    max_series: Option<i32>,
) -> serde_json::Value {
    let mut v = json!({
        "apiVersion": "scoring.ocm-placement.io/v1alpha1",
        "kind": "ScoreDefinition",
        "metadata": {"name": name, "labels": {"test": test}},
        "spec": {"scoreName": score, "refreshPeriod": "1s", "scores": [
            {"name": "v", "expression": expression, "normalise": {"type": "MinMax"}}
        ]}
    });
    if let Some(m) = max_series {
        v["spec"]["limits"] = json!({"maxSeries": m});
    }
    v
}

/// DCGM series (free MiB per GPU) and ingress probe durations, per cluster.
fn exposition(gpus: &[(&str, &[f64])], probes: &[(&str, f64)]) -> String {
    let mut out = String::new();
    for (cluster, free) in gpus {
        for (i, f) in free.iter().enumerate() {
            out += &format!(
                "DCGM_FI_DEV_FB_FREE{{cluster=\"{cluster}\",gpu=\"{i}\",modelName=\"NVIDIA A100 80GB\"}} {f}\n"
            );
        }
    }
    for (cluster, seconds) in probes {
        out += &format!(
            "probe_duration_seconds{{cluster=\"{cluster}\",job=\"ingress-probe\"}} {seconds}\n"
        );
    }
    out
}

async fn definition(client: &Client, name: &str) -> Option<ScoreDefinition> {
    Api::<ScoreDefinition>::all(client.clone())
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// The `type` condition's (status, reason, message).
fn condition_of(d: &ScoreDefinition, type_: &str) -> Option<(String, String, String)> {
    let c = ocm_api::conditions::find(&d.status.as_ref()?.conditions, type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn named(client: &Client, cluster: &str, score: &str) -> Option<AddOnPlacementScore> {
    Api::<AddOnPlacementScore>::namespaced(client.clone(), cluster)
        .get_opt(score)
        .await
        .ok()
        .flatten()
}

/// The README shows the GPU example as it is shipped.
#[test]
fn the_readme_shows_the_shipped_gpu_definition() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let section = readme
        .split("## Scores from your metrics, without code")
        .nth(1)
        .expect("the README's ScoreDefinitions section");
    let block = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml block");
    let file =
        std::fs::read_to_string(root.join("examples/scoring/gpu-memory.yaml")).expect("example");
    assert_eq!(block, file);
}

#[tokio::test]
async fn definitions_score_change_fail_alone_and_go() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let prefix = testenv::namespace(&client, "scoredef").await.expect("ns");
    let [a, b, c] = ["a", "b", "c"].map(|n| format!("{prefix}-{n}"));
    for name in [&a, &b, &c] {
        create_cluster(&client, name, Some("fleet")).await;
    }
    // a: eight A100s, three with free memory; b: two; c: no GPUs. Ten DCGM series in all.
    let a_free: &[f64] = &[70_000.0, 60_000.0, 10_000.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let b_free: &[f64] = &[40_000.0, 40_000.0];
    let probes = [(a.as_str(), 0.1), (b.as_str(), 0.3), (c.as_str(), 0.05)];
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(exposition(&[(&a, a_free), (&b, b_free)], &probes));
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");

    // The shipped examples (refreshed every second here), a definition with a bad
    // expression, and one that answers ten times its series limit.
    let gpu = format!("{prefix}-gpu");
    let latency = format!("{prefix}-latency");
    let broken = format!("{prefix}-broken");
    let greedy = format!("{prefix}-greedy");
    let mut gpu_def = example("gpu-memory.yaml", &gpu, &prefix);
    gpu_def["spec"]["refreshPeriod"] = json!("1s");
    let mut latency_def = example("ingress-latency.yaml", &latency, &prefix);
    latency_def["spec"]["refreshPeriod"] = json!("1s");
    let gpu_score = gpu_def["spec"]["scoreName"]
        .as_str()
        .expect("score")
        .to_owned();
    let latency_score = latency_def["spec"]["scoreName"]
        .as_str()
        .expect("score")
        .to_owned();
    let broken_score = format!("{prefix}-broken");
    let greedy_score = format!("{prefix}-greedy");
    for d in [
        &gpu_def,
        &latency_def,
        &custom(
            &broken,
            &prefix,
            &broken_score,
            "sum by ({{LABEL}} (DCGM_FI_DEV_FB_FREE)",
            None,
        ),
        &custom(
            &greedy,
            &prefix,
            &greedy_score,
            "DCGM_FI_DEV_FB_FREE",
            Some(1),
        ),
    ] {
        testenv::scoring::apply(&client, d)
            .await
            .expect("definition");
    }

    let dir = std::env::temp_dir().join(format!("scoredef-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    cp.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let port = testenv::free_port();
    let _scorer = Process(
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "scorer",
                "--leader-elect=false",
                "--debounce=200ms",
                "--definition-min-period=1s",
                "--prometheus-timeout=2s",
                "--prometheus-attempts=1",
            ])
            .arg(format!("--definition-selector=test={prefix}"))
            .arg(format!("--hub-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--prometheus-url={}", prom.url()))
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("scorer"),
    );

    // GPU scores for every cluster, as the definition's ranges say; c has none: -100.
    let gpu_scores = |free: &[f64], total_max: f64| -> BTreeMap<String, i32> {
        let total = Normaliser::new(0.0, total_max).expect("range");
        let one = Normaliser::new(0.0, 80.0 * GI).expect("range");
        let sum: f64 = free.iter().sum::<f64>() * MIB;
        let max = free.iter().copied().fold(f64::NEG_INFINITY, f64::max) * MIB;
        BTreeMap::from([
            ("gpuMemFree".to_owned(), total.normalise(sum)),
            ("gpuMemFreeMax".to_owned(), one.normalise(max)),
        ])
    };
    let none = BTreeMap::from([
        ("gpuMemFree".to_owned(), -100),
        ("gpuMemFreeMax".to_owned(), -100),
    ]);
    let want = [
        (&a, gpu_scores(a_free, 320.0 * GI)),
        (&b, gpu_scores(b_free, 320.0 * GI)),
        (&c, none.clone()),
    ];
    for (cluster, scores) in &want {
        eventually(
            &format!("the GPU scores of {cluster}"),
            DEADLINE,
            || async {
                named(&client, cluster, &gpu_score)
                    .await
                    .filter(|s| scores_of(s) == *scores)
            },
        )
        .await;
    }
    // Latency, lower is better over 0..500ms: c (50 ms) first, b (300 ms) last.
    let p95 = |s: f64| {
        BTreeMap::from([(
            "p95".to_owned(),
            Normaliser::new(-0.5, 0.0).expect("range").normalise(-s),
        )])
    };
    for (cluster, seconds) in probes {
        eventually(
            &format!("the latency score of {cluster}"),
            DEADLINE,
            || async {
                named(&client, cluster, &latency_score)
                    .await
                    .filter(|s| scores_of(s) == p95(seconds))
            },
        )
        .await;
    }

    // examples/scoring/scores.yaml holds what the scorer writes for these series (its
    // gpu-east, gpu-west and cpu-only are a, b and c).
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scoring/scores.yaml"),
    )
    .expect("scores.yaml");
    let list: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
    let items = list["items"].as_array().expect("items");
    for (example, live) in [("gpu-east", &a), ("gpu-west", &b), ("cpu-only", &c)] {
        for item in items
            .iter()
            .filter(|i| i["metadata"]["namespace"] == example)
        {
            let resource = item["metadata"]["name"].as_str().expect("name");
            let captured: AddOnPlacementScore =
                serde_json::from_value(item.clone()).expect("score");
            let written = named(&client, live, resource).await.expect("written");
            assert_eq!(
                scores_of(&captured),
                scores_of(&written),
                "{example} {resource}"
            );
        }
    }

    // The placement in examples/scoring ranks by free GPU memory: a.
    let gpu_objects: Vec<AddOnPlacementScore> =
        futures::future::join_all([&a, &b, &c].map(|n| named(&client, n, &gpu_score)))
            .await
            .into_iter()
            .flatten()
            .collect();
    assert_eq!(
        select_by(&[&a, &b, &c], &gpu_objects, 1, &gpu_score, "gpuMemFree"),
        std::slice::from_ref(&a)
    );

    // Status: accepted and scored; the broken one says its query failed, the greedy one its
    // limit, and neither wrote a score anywhere (the greedy one may have said NoMetrics before
    // Prometheus' first scrape).
    let evaluated = |name: String, reason: &'static str| {
        let client = client.clone();
        async move {
            eventually(&format!("{name}: Evaluated {reason}"), DEADLINE, || async {
                let d = definition(&client, &name).await?;
                let (_, r, message) = condition_of(&d, cond::EVALUATED)?;
                (r == reason).then_some((d, message))
            })
            .await
        }
    };
    let (d, message) = evaluated(gpu.clone(), cond::SCORED).await;
    assert_eq!(
        condition_of(&d, cond::ACCEPTED).map(|c| c.0),
        Some("True".into())
    );
    // Every accepted cluster gets the definition's scores (missingValue for c); other tests
    // of this binary add clusters of their own.
    let scored = d
        .status
        .as_ref()
        .and_then(|s| s.scored_clusters)
        .unwrap_or(0);
    assert!(scored >= 3, "{message}");
    assert!(
        message.starts_with(&format!("scored {scored} of {scored} clusters")),
        "{message}"
    );
    assert_eq!(
        d.status.as_ref().and_then(|s| s.observed_generation),
        d.metadata.generation
    );
    let (_, message) = evaluated(broken.clone(), cond::QUERY_FAILED).await;
    assert!(message.contains("query of v failed"), "{message}");
    let (_, message) = evaluated(greedy.clone(), cond::LIMIT_EXCEEDED).await;
    assert!(
        message.contains("10 series") && message.contains("limit of 1"),
        "{message}"
    );
    eventually("the greedy limit counted", DEADLINE, || async {
        let body = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics")
            .await
            .ok()?
            .1;
        body.lines()
            .any(|l| {
                l.starts_with("scorer_query_errors_total")
                    && l.contains("too_many_series")
                    && l.contains(&greedy)
            })
            .then_some(())
    })
    .await;
    let failing_since = jiff::Timestamp::now();
    for cluster in [&a, &b, &c] {
        assert!(named(&client, cluster, &broken_score).await.is_none());
        let greedy_scores = named(&client, cluster, &greedy_score).await;
        assert!(
            greedy_scores
                .as_ref()
                .is_none_or(|s| scores_of(s).is_empty()),
            "{greedy_scores:?}"
        );
    }
    // The failing ones touch nobody else: the GPU scores are renewed on.
    eventually(
        "the GPU scores renewed while others fail",
        DEADLINE,
        || async {
            let s = named(&client, &a, &gpu_score).await?;
            (valid_until(&s)? > failing_since + jiff::SignedDuration::from_secs(3)).then_some(())
        },
    )
    .await;

    // A new range and a new expression take effect without a restart.
    gpu_def["spec"]["scores"][0]["normalise"]["max"] = json!("160Gi");
    testenv::scoring::apply(&client, &gpu_def)
        .await
        .expect("new range");
    let narrower = gpu_scores(b_free, 160.0 * GI);
    assert_ne!(narrower, want[1].1);
    eventually("b's scores over the new range", DEADLINE, || async {
        named(&client, &b, &gpu_score)
            .await
            .filter(|s| scores_of(s) == narrower)
    })
    .await;
    gpu_def["spec"]["scores"][0]["expression"] =
        json!("min by ({{LABEL}}) (last_over_time(DCGM_FI_DEV_FB_FREE[5m])) * 1048576");
    testenv::scoring::apply(&client, &gpu_def)
        .await
        .expect("new expression");
    let least = Normaliser::new(0.0, 160.0 * GI)
        .expect("range")
        .normalise(0.0);
    eventually("a's score from the new expression", DEADLINE, || async {
        named(&client, &a, &gpu_score)
            .await
            .filter(|s| scores_of(s).get("gpuMemFree") == Some(&least))
    })
    .await;

    // Deleting the definition removes its scores; the latency ones stay.
    testenv::scoring::delete(&client, &gpu)
        .await
        .expect("delete");
    for cluster in [&a, &b, &c] {
        eventually(
            &format!("{cluster}'s GPU scores removed"),
            DEADLINE,
            || async {
                named(&client, cluster, &gpu_score)
                    .await
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        assert!(named(&client, cluster, &latency_score).await.is_some());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
