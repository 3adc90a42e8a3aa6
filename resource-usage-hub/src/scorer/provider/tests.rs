use super::*;
use crate::scorer::queries::{Conflict, Disagreement};
use std::time::Duration;

fn settings(normalise: Normalise) -> ScorerSettings {
    ScorerSettings {
        queries: Queries::default(),
        normalise,
        bounds: Bounds::default(),
        max_data_age: Duration::from_secs(900),
        score_name: "resource-usage-score".into(),
        manager: "resource-usage-hub-scorer".into(),
        deadline: Duration::from_secs(60),
    }
}

fn data(cpu: (f64, f64), mem: (f64, f64), newest: f64) -> ClusterData {
    ClusterData {
        cpu: Some(cpu),
        memory: Some(mem),
        newest: Some(newest),
        ..ClusterData::default()
    }
}

const GI: f64 = 1024.0 * 1024.0 * 1024.0;

#[test]
fn rates_fresh_clusters_and_lets_stale_ones_expire() {
    let clusters: Vec<String> = ["a", "b", "stale", "silent", "agent", "disputed"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let d = BTreeMap::from([
        (
            "a".to_owned(),
            data((50.0, 10.0), (256.0 * GI, 64.0 * GI), 10_000.0),
        ),
        (
            "b".to_owned(),
            data((10.0, 2.0), (64.0 * GI, 8.0 * GI), 10_000.0),
        ),
        (
            "stale".to_owned(),
            data((10.0, 2.0), (64.0 * GI, 8.0 * GI), 8_000.0),
        ),
        (
            "agent".to_owned(),
            data((10.0, 2.0), (64.0 * GI, 8.0 * GI), 10_000.0),
        ),
    ]);
    let conflict = Conflict {
        metric: Metric::CpuAllocatable,
        node: Some("n1".into()),
        what: Disagreement::Values(vec![16.0, 1000.0]),
    };
    let d = Assembled {
        clusters: d,
        conflicts: BTreeMap::from([("disputed".to_owned(), conflict.clone())]),
        dropped: BTreeMap::new(),
    };
    let (out, counts) = rate(
        &settings(Normalise::Absolute),
        &clusters,
        &d,
        &BTreeMap::new(),
        10_060.0,
        |c| c == "agent",
    )
    .expect("rates");
    assert_eq!(
        counts,
        Counts {
            rated: 2,
            stale: 2,
            skipped: 1,
            conflicting: 1,
            partial: 0,
        }
    );
    let Some(Outcome::Scores(a)) = out.get("a") else {
        panic!("a is rated: {out:?}");
    };
    // The agent's bounds: 0..100 cores, 0..512 GiB; 50 cores -> 0, 256 GiB -> 0.
    assert_eq!(a.get(names::CPU_CLUSTER), Some(0));
    assert_eq!(a.get(names::CPU), Some(0));
    assert_eq!(a.get(names::CPU_NODE), Some(-80));
    assert_eq!(a.get(names::MEM_CLUSTER), Some(0));
    assert!(
        matches!(out.get("stale"), Some(Outcome::Unavailable { reason, .. }) if reason == "MetricsStale")
    );
    assert!(
        matches!(out.get("silent"), Some(Outcome::Unavailable { reason, .. }) if reason == "NoMetrics")
    );
    assert!(out.get("agent").is_none());
    assert_eq!(
        out.get("disputed"),
        Some(&Outcome::Unavailable {
            reason: REASON_CONFLICT.into(),
            message: conflict.to_string()
        })
    );

    let (out, _) = rate(
        &settings(Normalise::Fleet),
        &clusters,
        &d,
        &BTreeMap::new(),
        10_060.0,
        |_| false,
    )
    .expect("rates");
    let score = |c: &str, n: &str| match out.get(c) {
        Some(Outcome::Scores(s)) => s.get(n),
        _ => None,
    };
    assert_eq!(score("a", names::CPU_CLUSTER), Some(100));
    assert_eq!(score("b", names::CPU_CLUSTER), Some(-100));
    assert_eq!(score("agent", names::CPU_CLUSTER), Some(-100));
    assert!(matches!(
        out.get("disputed"),
        Some(Outcome::Unavailable { .. })
    ));
}

/// A partial answer: the cluster a warning names is missing even though some of its series
/// came (another store of it answered), the cluster whose series are absent is missing,
/// and every other cluster is rated as if the answer were whole.
#[test]
fn a_partial_answer_withholds_only_the_clusters_it_lacks() {
    let clusters: Vec<String> = ["a", "b", "named", "absent"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let fresh = || data((10.0, 2.0), (64.0 * GI, 8.0 * GI), 10_000.0);
    let d = Assembled {
        clusters: BTreeMap::from([
            ("a".to_owned(), fresh()),
            ("b".to_owned(), fresh()),
            ("named".to_owned(), fresh()),
        ]),
        conflicts: BTreeMap::new(),
        dropped: BTreeMap::new(),
    };
    let partial = BTreeMap::from([(
        "named".to_owned(),
        r#"fetch series for {cluster="named"}: connection refused"#.to_owned(),
    )]);
    let (out, counts) = rate(
        &settings(Normalise::Absolute),
        &clusters,
        &d,
        &partial,
        10_060.0,
        |_| false,
    )
    .expect("rates");
    assert_eq!(
        counts,
        Counts {
            rated: 2,
            stale: 2,
            skipped: 0,
            conflicting: 0,
            partial: 1,
        }
    );
    assert!(matches!(out.get("a"), Some(Outcome::Scores(_))));
    assert!(matches!(out.get("b"), Some(Outcome::Scores(_))));
    for c in ["named", "absent"] {
        assert!(
            matches!(out.get(c), Some(Outcome::Unavailable { reason, .. }) if reason == REASON_NO_METRICS),
            "{c}: {out:?}"
        );
    }
    let Some(Outcome::Unavailable { message, .. }) = out.get("named") else {
        panic!("named");
    };
    assert!(message.contains("connection refused"), "{message}");
    assert_eq!(shorten(&"é".repeat(400)).len(), WARNING_SHOWN + 3);
}

#[test]
fn headroom_maps_fractions() {
    let mut s = Scores::new();
    let d = ClusterData {
        cpu_headroom: Some(0.75),
        memory_headroom: Some(1.7),
        ..ClusterData::default()
    };
    headroom(&mut s, &d).expect("in range");
    assert_eq!(s.get(CPU_HEADROOM), Some(50));
    assert_eq!(s.get(MEMORY_HEADROOM), Some(100));
}
