//! The agent evaluating the ScoreDefinitions the add-on manager ships to it: the agent binary
//! with a definitions file (what the mounted ConfigMap holds), a real Prometheus scraping
//! DCGM-style GPU series the test serves, and a real apiserver as the hub. The score follows
//! the file without a restart, a removed definition is no longer renewed (its scores expire),
//! and a definition naming the agent's built-in score is refused.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ocm_api::score::Normaliser;
use ocm_api::wellknown::score::RESOURCE_USAGE_SCORE;
use testenv::prometheus::{Exporter, Prometheus};

const GI: f64 = 1024.0 * 1024.0 * 1024.0;
const SCORE: &str = "gpu-memory";
const ITEM: &str = "gpuMemoryFree";

/// One shipped definition of `score` (item [`ITEM`]) as the manager renders it: refreshed
/// every 2 s, valid 6 s.
fn definition(name: &str, generation: i64, score: &str, expression: &str, max: &str) -> String {
    format!(
        r#"- name: {name}
  generation: {generation}
  spec:
    scoreName: {score}
    evaluator: Agent
    refreshPeriod: 2s
    validFor: 6s
    scores:
    - name: {ITEM}
      expression: '{expression}'
      normalise: {{type: Range, min: "0", max: "{max}"}}
"#
    )
}

/// Replaces the file at once, as the kubelet swaps a ConfigMap volume's files.
fn ship(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the definitions");
    std::fs::rename(&tmp, path).expect("swap the definitions");
}

fn item(status: &ocm_api::AddOnPlacementScoreStatus) -> Option<i32> {
    scores_of(status).get(ITEM).copied()
}

fn valid_until(status: &ocm_api::AddOnPlacementScoreStatus) -> Option<String> {
    status.valid_until.as_ref().map(|t| t.0.to_string())
}

/// Two GPUs with 20 and 40 GiB of framebuffer free (DCGM reports MiB).
const GPUS: &str = "DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\"} 20480\nDCGM_FI_DEV_FB_FREE{gpu=\"1\",UUID=\"GPU-b\"} 40960\n";

#[tokio::test]
async fn a_shipped_definition_scores_from_the_clusters_prometheus_and_follows_the_file() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "defs").await;
    let exporter = Exporter::start().await.expect("exporter");
    exporter.set(GPUS);
    let prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .expect("prometheus");
    let file = setup.dir.join("definitions.yaml");
    ship(
        &file,
        &definition(
            "gpu",
            1,
            SCORE,
            "sum(DCGM_FI_DEV_FB_FREE) * 1048576",
            "80Gi",
        ),
    );
    let port = free_port();
    let mut args = setup.run_args(port);
    args.push(format!("--definitions-file={}", file.display()));
    args.push(format!("--prometheus-url={}", prom.url()));
    args.push("--definition-min-period=1s".into());
    let mut agent = Agent::spawn(&args, &setup.dir.join("agent.log"), port);
    let pid = agent.pid();
    let cluster = setup.cluster.as_str();
    let score = |free_gi: f64, max_gi: f64| {
        Normaliser::new(0.0, max_gi * GI)
            .expect("range")
            .normalise(free_gi * GI)
    };

    // 60 GiB free of 0..80Gi.
    let want = score(60.0, 80.0);
    assert_eq!(want, 50);
    eventually("the definition's score on the hub", DEADLINE, || async {
        let s = score_status(&admin, cluster, SCORE).await?;
        (item(&s) == Some(want)).then_some(())
    })
    .await;

    // Another expression: the freest GPU, 40 GiB of 0..80Gi.
    ship(
        &file,
        &definition(
            "gpu",
            2,
            SCORE,
            "max(DCGM_FI_DEV_FB_FREE) * 1048576",
            "80Gi",
        ),
    );
    let want = score(40.0, 80.0);
    eventually("the score of the new expression", DEADLINE, || async {
        let s = score_status(&admin, cluster, SCORE).await?;
        (item(&s) == Some(want)).then_some(())
    })
    .await;
    // Another range: 40 GiB of 0..40Gi is the top.
    ship(
        &file,
        &definition(
            "gpu",
            3,
            SCORE,
            "max(DCGM_FI_DEV_FB_FREE) * 1048576",
            "40Gi",
        ),
    );
    eventually("the score of the new range", DEADLINE, || async {
        let s = score_status(&admin, cluster, SCORE).await?;
        (item(&s) == Some(100)).then_some(())
    })
    .await;
    assert!(
        agent.running(),
        "the agent followed the file without a restart"
    );
    assert_eq!(agent.pid(), pid);
    // The metrics say one definition runs.
    eventually("one running definition", DEADLINE, || async {
        (agent.metric("agent_definitions{state=\"running\"}").await? == 1.0).then_some(())
    })
    .await;

    // Removed: no more renewals (validUntil, renewed every 2 s while it ran, stays for longer
    // than the 6 s validity), and the score object is left to expire.
    ship(&file, "[]\n");
    let seen: std::sync::Mutex<Option<(String, Instant)>> = std::sync::Mutex::new(None);
    eventually("validUntil to stop advancing", DEADLINE, || async {
        let s = score_status(&admin, cluster, SCORE).await?;
        let v = valid_until(&s)?;
        let now = Instant::now();
        let mut seen = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*seen {
            Some((last, since)) if *last == v => {
                (now.duration_since(*since) > Duration::from_secs(7)).then_some(())
            }
            _ => {
                *seen = Some((v, now));
                None
            }
        }
    })
    .await;
    let left = score_status(&admin, cluster, SCORE)
        .await
        .expect("the score object stays (the agent cannot delete)");
    assert_eq!(item(&left), Some(100), "its last scores expire, unchanged");
    assert_eq!(
        agent.metric("agent_definitions{state=\"running\"}").await,
        Some(0.0)
    );
    // A malformed file keeps the last good set (none here) and is counted.
    ship(&file, "- name: [broken\n");
    eventually("the file error counted", DEADLINE, || async {
        (agent.metric("agent_definitions_file_errors_total").await? >= 1.0).then_some(())
    })
    .await;
    assert!(agent.running());
    agent.kill();
}

/// A definition naming the agent's built-in score is refused (it would fight the built-in
/// writer); another runs, and without a Prometheus URL reports `NoPrometheus` on its score.
#[tokio::test]
async fn a_definition_of_the_built_in_score_is_refused_and_no_prometheus_is_reported() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin");
    let setup = Setup::new(cp, cp, "defs-refused").await;
    create_node(
        &admin,
        &node(&setup, "n1", &[("cpu", "16"), ("memory", "64Gi")], false),
    )
    .await;
    let file = setup.dir.join("definitions.yaml");
    let text = definition("a-builtin", 1, RESOURCE_USAGE_SCORE, "vector(1)", "1")
        + &definition("b-gpu", 1, SCORE, "vector(1)", "1");
    ship(&file, &text);
    let port = free_port();
    let mut args = setup.run_args(port);
    args.push(format!("--definitions-file={}", file.display()));
    args.push("--definition-min-period=1s".into());
    let mut agent = Agent::spawn_with_env(
        &args,
        &[("PROMETHEUS_URL", "")],
        &setup.dir.join("agent.log"),
        port,
    );
    let cluster = setup.cluster.as_str();
    let reason = eventually(
        "NoPrometheus on the definition's score",
        DEADLINE,
        || async {
            let s = score_status(&admin, cluster, SCORE).await?;
            let c = s
                .conditions
                .iter()
                .find(|c| c.type_ == "AddOnPlacementScoreUpdated")?;
            (c.status == "False").then(|| (c.reason.clone(), c.message.clone()))
        },
    )
    .await;
    assert_eq!(reason.0, "NoPrometheus");
    assert!(reason.1.contains("PROMETHEUS_URL"), "{}", reason.1);
    eventually("one refused, one running", DEADLINE, || async {
        let refused = agent.metric("agent_definitions{state=\"refused\"}").await?;
        let running = agent.metric("agent_definitions{state=\"running\"}").await?;
        (refused == 1.0 && running == 1.0).then_some(())
    })
    .await;
    assert!(agent.log_text().contains("refused"));
    // The built-in score is the built-in provider's alone: the definition's item never appears.
    let builtin = eventually("the built-in score", DEADLINE, || async {
        score_status(&admin, cluster, RESOURCE_USAGE_SCORE).await
    })
    .await;
    assert!(!scores_of(&builtin).contains_key(ITEM));
    agent.kill();
}
