use std::collections::BTreeMap;
use std::time::Duration;

use ocm_api::scoring::{ScoreDefinition, ScoreDefinitionSpec};

use super::*;
use crate::provider::Outcome;

fn spec(yaml: &str) -> ScoreDefinitionSpec {
    let d: ScoreDefinition = serde_saphyr::from_str(yaml).expect("definition");
    d.spec
}

const GPU: &str = r#"
apiVersion: scoring.ocm-placement.io/v1alpha1
kind: ScoreDefinition
metadata: {name: gpu}
spec:
  scoreName: gpu-score
  refreshPeriod: 30s
  freshness:
    expression: max by ({{LABEL}}) (timestamp(up))
    maxAge: 5m
  scores:
  - name: gpuMemFree
    expression: sum by ({{LABEL}}) (free)
    normalise: {type: Range, min: "0", max: 80Gi}
    missingValue: -100
  - name: gpuMemFreeRank
    expression: sum by ({{LABEL}}) (free)
    normalise: {type: Rank}
  - name: latency
    expression: max by ({{LABEL}}) (p95)
    normalise: {type: MinMax, direction: LowerIsBetter}
"#;

fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        value,
    }
}

fn c(name: &str, value: f64) -> Sample {
    sample(&[("tenant", name)], value)
}

const GI: f64 = 1024.0 * 1024.0 * 1024.0;

fn scores(e: &Evaluation, cluster: &str) -> BTreeMap<String, i32> {
    match e.computed.get(cluster) {
        Some(Outcome::Scores(s)) => s.iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        other => panic!("{cluster}: {other:?}"),
    }
}

fn reason(e: &Evaluation, cluster: &str) -> String {
    match e.computed.get(cluster) {
        Some(Outcome::Unavailable { reason, .. }) => reason.clone(),
        other => panic!("{cluster}: {other:?}"),
    }
}

#[test]
fn compile_fills_the_label_runs_each_expression_once_and_defaults() {
    let d = compile(&spec(GPU), "tenant", &Caps::default(), false).expect("valid");
    assert_eq!(
        d.queries,
        [
            "sum by (tenant) (free)",
            "max by (tenant) (p95)",
            "max by (tenant) (timestamp(up))"
        ]
    );
    assert_eq!(d.rules[0].query, d.rules[1].query);
    assert_eq!(d.freshness, Some((2, Duration::from_secs(300))));
    assert_eq!(d.period, Duration::from_secs(30));
    assert_eq!(d.valid_for, Duration::from_secs(90), "three periods");
    assert_eq!(d.timeout, Duration::from_secs(30));
    assert_eq!(d.max_series, 10_000);
    assert_eq!(d.rules[0].missing, Some(-100));
    assert!(matches!(d.rules[0].norm, Norm::Range(n, _) if n.max() == 80.0 * GI));
}

#[test]
fn limits_are_capped_by_the_evaluator() {
    let mut s = spec(GPU);
    s.refresh_period = Some("1s".into());
    s.limits = Some(ocm_api::scoring::Limits {
        query_timeout: Some("5m".into()),
        max_series: Some(50),
    });
    let caps = Caps {
        max_series: 100,
        query_timeout: Duration::from_secs(10),
        min_period: Duration::from_secs(5),
        ..Caps::default()
    };
    let d = compile(&s, "cluster", &caps, false).expect("valid");
    assert_eq!(d.period, Duration::from_secs(5), "no faster than the cap");
    assert_eq!(d.timeout, Duration::from_secs(10));
    assert_eq!(d.max_series, 50, "a definition may ask for less");
    s.limits = Some(ocm_api::scoring::Limits {
        query_timeout: None,
        max_series: Some(1_000_000),
    });
    let d = compile(&s, "cluster", &caps, false).expect("valid");
    assert_eq!(d.max_series, 100, "never more");
}

#[test]
fn invalid_definitions_name_the_field() {
    type Change = Box<dyn Fn(&mut ScoreDefinitionSpec)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "period",
            Box::new(|s| s.refresh_period = Some("soon".into())),
            "refreshPeriod",
        ),
        (
            "validFor",
            Box::new(|s| s.valid_for = Some("10s".into())),
            "validFor",
        ),
        (
            "range",
            Box::new(|s| s.scores[0].normalise.min = Some("100Gi".into())),
            "scores[gpuMemFree].normalise",
        ),
        (
            "quantity",
            Box::new(|s| s.scores[0].normalise.max = Some("lots".into())),
            "scores[gpuMemFree].normalise.max",
        ),
        (
            "not range",
            Box::new(|s| s.scores[1].normalise.min = Some("1".into())),
            "scores[gpuMemFreeRank].normalise",
        ),
        (
            "duplicate",
            Box::new(|s| s.scores[1].name = "gpuMemFree".into()),
            "gpuMemFree",
        ),
        (
            "empty",
            Box::new(|s| s.scores[2].expression = "  ".into()),
            "scores[latency].expression",
        ),
        ("none", Box::new(|s| s.scores.clear()), "at least one"),
    ];
    for (name, change, needle) in cases {
        let mut s = spec(GPU);
        change(&mut s);
        let e = compile(&s, "cluster", &Caps::default(), false).expect_err(name);
        assert!(e.to_string().contains(needle), "{name}: {e}");
    }
    // An agent sees one cluster: fleet-relative normalisation means nothing there.
    let e = compile(&spec(GPU), "cluster", &Caps::default(), true).expect_err("agent");
    assert!(e.to_string().contains("gpuMemFreeRank"), "{e}");
}

fn clusters(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn run(d: &Compiled, answers: &[Vec<Sample>], names: &[&str], now: f64) -> Evaluation {
    let clusters = clusters(names);
    evaluate(
        d,
        &Input {
            owner: Owner::Label("tenant"),
            answers,
            clusters: &clusters,
            partial: &BTreeMap::new(),
            now,
        },
    )
    .expect("evaluates")
}

#[test]
fn every_normalisation_and_direction() {
    let d = compile(&spec(GPU), "tenant", &Caps::default(), false).expect("valid");
    let now = 1000.0;
    let free = vec![
        c("a", 80.0 * GI),
        c("b", 40.0 * GI),
        c("c", 0.0),
        c("d", 40.0 * GI),
    ];
    let p95 = vec![c("a", 0.2), c("b", 0.1), c("c", 0.3), c("d", 0.1)];
    let fresh = ["a", "b", "c", "d"].map(|n| c(n, now - 10.0)).to_vec();
    let e = run(&d, &[free, p95, fresh], &["a", "b", "c", "d"], now);
    assert_eq!(e.scored, 4);
    let got: Vec<_> = ["a", "b", "c", "d"].iter().map(|n| scores(&e, n)).collect();
    // Range over 0..80Gi; rank with b and d tied; latency lower is better over 0.1..0.3.
    assert_eq!(got[0]["gpuMemFree"], 100);
    assert_eq!(got[1]["gpuMemFree"], 0);
    assert_eq!(got[2]["gpuMemFree"], -100);
    assert_eq!(
        [
            got[0]["gpuMemFreeRank"],
            got[1]["gpuMemFreeRank"],
            got[2]["gpuMemFreeRank"],
            got[3]["gpuMemFreeRank"]
        ],
        [100, 0, -100, 0]
    );
    assert_eq!(got[1]["latency"], 100, "lowest latency is best");
    assert_eq!(got[2]["latency"], -100);
    assert_eq!(got[0]["latency"], 0);
    // A lower-is-better range: min scores 100.
    let n = ocm_api::score::Normaliser::new(0.0, 1.0).expect("bounds");
    assert_eq!(
        normalise(
            Norm::Range(n, ocm_api::scoring::Direction::LowerIsBetter),
            &[Some(0.0), Some(1.0), Some(2.0), None, Some(0.5)]
        ),
        vec![Some(100), Some(-100), Some(-100), None, Some(0)]
    );
    assert_eq!(
        normalise(
            Norm::Rank(ocm_api::scoring::Direction::HigherIsBetter),
            &[Some(7.0)]
        ),
        vec![Some(100)],
        "one cluster is the best"
    );
}

#[test]
fn missing_stale_partial_and_unknown() {
    let d = compile(&spec(GPU), "tenant", &Caps::default(), false).expect("valid");
    let now = 1000.0;
    // a: fresh without GPU series (missingValue -100, no rank, no latency);
    // b: stale; c: no freshness series; e: a partial answer's store; x: unknown to the hub.
    let free = vec![c("b", 1.0), c("e", 1.0), c("x", 1.0), sample(&[], 5.0)];
    let fresh = vec![
        c("a", now - 1.0),
        c("b", now - 301.0),
        c("e", now),
        c("x", now),
    ];
    let partial = BTreeMap::from([("e".to_owned(), "store down".to_owned())]);
    let clusters = clusters(&["a", "b", "c", "e"]);
    let e = evaluate(
        &d,
        &Input {
            owner: Owner::Label("tenant"),
            answers: &[free, vec![c("a", f64::NAN)], fresh],
            clusters: &clusters,
            partial: &partial,
            now,
        },
    )
    .expect("evaluates");
    assert_eq!(
        scores(&e, "a"),
        BTreeMap::from([("gpuMemFree".to_owned(), -100)])
    );
    assert_eq!(reason(&e, "b"), REASON_STALE);
    assert_eq!(reason(&e, "c"), REASON_NO_METRICS);
    assert_eq!(reason(&e, "e"), REASON_NO_METRICS);
    assert!(e.computed.get("x").is_none(), "never rated");
    assert_eq!((e.scored, e.missing), (1, 3));
    assert_eq!(e.dropped[&Dropped::UnknownCluster], 2);
    assert_eq!(e.dropped[&Dropped::Unlabelled], 1);
    assert_eq!(e.dropped[&Dropped::BadValue], 1);
}

#[test]
fn disagreeing_series_withhold_one_cluster_and_agreeing_replicas_are_one() {
    let d = compile(&spec(GPU), "tenant", &Caps::default(), false).expect("valid");
    let now = 1000.0;
    let free = vec![
        // a: two replicas that agree.
        sample(&[("tenant", "a"), ("replica", "0")], 8.0 * GI),
        sample(&[("tenant", "a"), ("replica", "1")], 8.0 * GI),
        // b: a forged series under b's name that disagrees.
        c("b", 8.0 * GI),
        sample(&[("tenant", "b"), ("job", "forged")], 80.0 * GI),
        c("m", 8.0 * GI),
    ];
    // m: the expression's own conflict part marks it.
    let p95 = vec![
        c("a", 0.1),
        c("b", 0.1),
        c("m", 0.1),
        sample(&[("tenant", "m"), (CONFLICT_LABEL, "node_state")], 1.0),
    ];
    let fresh = ["a", "b", "m"].map(|n| c(n, now)).to_vec();
    let e = run(&d, &[free, p95, fresh], &["a", "b", "m"], now);
    assert_eq!(scores(&e, "a")["gpuMemFree"], -80);
    assert_eq!(reason(&e, "b"), REASON_CONFLICT);
    assert_eq!(reason(&e, "m"), REASON_CONFLICT);
    assert!(
        e.conflicts["b"].contains("gpuMemFree"),
        "{}",
        e.conflicts["b"]
    );
    assert!(
        e.conflicts["m"].contains("node_state"),
        "{}",
        e.conflicts["m"]
    );
    // The fleet-relative columns are over the clusters that count: a alone is the best.
    assert_eq!(scores(&e, "a")["gpuMemFreeRank"], 100);
    assert_eq!(e.scored, 1);
}

#[test]
fn without_freshness_a_silent_cluster_has_no_metrics() {
    let mut s = spec(GPU);
    s.freshness = None;
    s.scores.truncate(2);
    s.scores[0].missing_value = None;
    let d = compile(&s, "tenant", &Caps::default(), false).expect("valid");
    let e = run(&d, &[vec![c("a", 1.0)]], &["a", "b"], 0.0);
    assert_eq!(e.scored, 1);
    assert_eq!(reason(&e, "b"), REASON_NO_METRICS);
}

#[test]
fn an_agent_owns_every_series_of_its_prometheus() {
    let mut s = spec(GPU);
    s.scores.truncate(1);
    s.freshness = None;
    let d = compile(&s, "cluster", &Caps::default(), true).expect("valid");
    let clusters = clusters(&["me"]);
    let partial = BTreeMap::new();
    let eval = |answer: Vec<Sample>| {
        evaluate(
            &d,
            &Input {
                owner: Owner::Own("me"),
                answers: &[answer],
                clusters: &clusters,
                partial: &partial,
                now: 0.0,
            },
        )
        .expect("evaluates")
    };
    let e = eval(vec![sample(&[], 40.0 * GI)]);
    assert_eq!(scores(&e, "me")["gpuMemFree"], 0);
    let e = eval(vec![
        sample(&[("gpu", "0")], 40.0 * GI),
        sample(&[("gpu", "1")], 10.0 * GI),
    ]);
    assert_eq!(reason(&e, "me"), REASON_CONFLICT, "one series per cluster");
}

/// A query API that accepts and never answers: the definition's own timeout ends the
/// evaluation (retries included), as `LimitExceeded`, whatever the client's per-attempt one.
#[tokio::test]
async fn a_hung_query_api_is_cut_at_the_definitions_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let client = crate::prom::PromClient::new(crate::prom::PromSettings {
        url: format!("http://{addr}"),
        bearer_token: None,
        bearer_token_file: None,
        ca_file: None,
        headers: Vec::new(),
        timeout: Duration::from_secs(60),
        attempts: 3,
        thanos: None,
        max_response_bytes: crate::prom::DEFAULT_MAX_RESPONSE_BYTES,
    })
    .expect("client");
    let mut s = spec(GPU);
    s.limits = Some(ocm_api::scoring::Limits {
        query_timeout: Some("300ms".into()),
        max_series: None,
    });
    let d = compile(&s, "cluster", &Caps::default(), false).expect("valid");
    let e = run_queries(&client, &d).await.expect_err("hung");
    assert!(
        matches!(e, Failure::Timeout(t) if t == Duration::from_millis(300)),
        "{e}"
    );
    assert_eq!(e.reason(), ocm_api::scoring::condition::LIMIT_EXCEEDED);
    assert_eq!(e.metric_reason(), "timeout");
    hold.abort();
}
