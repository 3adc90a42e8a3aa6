//! The Prometheus harness itself: a real Prometheus scrapes the in-process exporter, answers
//! queries, refuses them while stopped, and keeps its data across a restart.

use std::time::{Duration, Instant};

use testenv::prometheus::{Exporter, Prometheus, query, samples};
use testenv::{eventually, process::is_running};

/// The value of `promql` if it matches exactly one series.
async fn single_value(url: &str, promql: &str) -> Option<f64> {
    let data = query(url, promql).await.ok()?;
    match samples(&data).ok()?.as_slice() {
        [one] => Some(one.value),
        _ => None,
    }
}

#[tokio::test]
async fn scrapes_answers_and_keeps_data_across_a_restart() {
    let start = Instant::now();
    let exporter = Exporter::start().await.expect("the exporter starts");
    exporter.set("fleet_test_metric{cluster=\"a\"} 42\n");
    let mut prom = Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
        .await
        .unwrap_or_else(|e| panic!("Prometheus does not start: {e}"));
    let url = &prom.url();
    eprintln!("ready after {:?}", start.elapsed());

    // The first sample is queryable about one scrape interval after the start.
    eventually(
        "fleet_test_metric = 42",
        Duration::from_secs(30),
        || async {
            single_value(url, "fleet_test_metric")
                .await
                .filter(|v| *v == 42.0)
        },
    )
    .await;
    eprintln!("first sample queryable after {:?}", start.elapsed());
    let data = query(url, "fleet_test_metric").await.expect("a query");
    let found = samples(&data).expect("an instant vector");
    assert_eq!(
        found[0].labels.get("cluster").map(String::as_str),
        Some("a"),
        "honor_labels keeps the exporter's labels: {found:?}"
    );
    assert!(exporter.scrapes() > 0);

    let pid = prom.pid().expect("running");
    prom.stop();
    assert!(!is_running(pid), "stop() kills and reaps");
    assert_eq!(prom.pid(), None);
    let err = query(url, "fleet_test_metric")
        .await
        .expect_err("a stopped Prometheus answers no query");
    eprintln!("while stopped: {err}");

    // Only the data kept from before the restart can hold 42 now.
    exporter.set("fleet_test_metric{cluster=\"a\"} 7\n");
    let restart = Instant::now();
    prom.start_again().await.expect("Prometheus starts again");
    assert_eq!(&prom.url(), url, "same port after a restart");
    assert_ne!(prom.pid(), Some(pid));
    eprintln!("ready again after {:?}", restart.elapsed());
    let max = single_value(url, "max_over_time(fleet_test_metric[1h])")
        .await
        .expect("the series from before the restart");
    assert_eq!(max, 42.0, "data from before the restart is kept");

    eventually("fleet_test_metric = 7", Duration::from_secs(30), || async {
        single_value(url, "fleet_test_metric")
            .await
            .filter(|v| *v == 7.0)
    })
    .await;
    eprintln!(
        "new sample after restart queryable after {:?} (total {:?})",
        restart.elapsed(),
        start.elapsed()
    );
}
