use super::*;

fn s(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        value,
    }
}

/// A `count_values` answer: the claimed value in the label, how many series in the value.
fn claim(cluster: &str, node: &str, value: &str, series: f64) -> Sample {
    s(
        &[("cluster", cluster), ("node", node), (VALUE_LABEL, value)],
        series,
    )
}

fn everyone(_: &str) -> bool {
    true
}

#[test]
fn templates_are_filled() {
    let q = Queries {
        label: "cluster_name".into(),
        window: "15m".into(),
        active_pods_only: true,
        cpu_headroom: Some("1 - avg by ({{LABEL}}) (x[{{WINDOW}}])".into()),
        ..Queries::default()
    };
    let built = q.build();
    assert_eq!(built.len(), 6);
    for b in &built {
        assert!(!b.promql.contains("{{"), "{}", b.promql);
    }
    assert!(built[0].promql.contains(r#"resource="cpu""#));
    assert!(
        built[0]
            .promql
            .starts_with(r#"count_values by (cluster_name, node) ("scorer_value","#)
    );
    assert!(built[1].promql.contains(
        "sum by (cluster_name, node) (max by (cluster_name, namespace, pod, container, node)"
    ));
    assert!(built[2].promql.contains(r#"resource="memory""#));
    assert!(built[1].promql.contains("kube_pod_status_phase"));
    assert!(
        built[1]
            .promql
            .contains(r#""scorer_conflict", "pod_phase""#)
    );
    let plain = Queries::default().build();
    assert!(!plain[1].promql.contains("kube_pod_status_phase"));
    assert!(
        plain[1]
            .promql
            .contains(r#""scorer_conflict", "pod_requests""#)
    );
    assert!(
        plain[0]
            .promql
            .contains(r#""scorer_conflict", "node_state""#)
    );
    assert_eq!(built[5].promql, "1 - avg by (cluster_name) (x[15m])");
}

#[test]
fn the_cluster_label_must_be_a_plain_label_name() {
    for (label, ok) in [
        ("cluster", true),
        ("tenant_id", true),
        ("_x9", true),
        ("", false),
        ("9lives", false),
        ("cluster-name", false),
        ("cluster) or vector(1", false),
        ("__name__", false),
        ("node", false),
        (VALUE_LABEL, false),
        (CONFLICT_LABEL, false),
    ] {
        let q = Queries {
            label: label.into(),
            ..Queries::default()
        };
        assert_eq!(q.check().is_ok(), ok, "{label:?}");
    }
}

#[test]
fn free_is_allocatable_minus_requests_per_counted_node() {
    let answers = BTreeMap::from([
        (
            Metric::CpuAllocatable,
            vec![
                claim("a", "n1", "8", 1.0),
                // An HA pair: two series making the same claim.
                claim("a", "n2", "4", 2.0),
                claim("b", "m1", "2", 1.0),
                s(&[("node", "orphan"), (VALUE_LABEL, "100")], 1.0),
                claim("c", "x", "NaN", 1.0),
            ],
        ),
        (
            Metric::CpuRequests,
            vec![
                s(&[("cluster", "a"), ("node", "n1")], 7.5),
                s(&[("cluster", "a"), ("node", "n2")], 1.0),
                // Pending (no node) and on a cordoned node (not counted): not subtracted.
                s(&[("cluster", "a"), ("node", "")], 50.0),
                s(&[("cluster", "a"), ("node", "cordoned")], 50.0),
                s(&[("cluster", "b"), ("node", "m1")], 3.0),
            ],
        ),
        (
            Metric::Freshness,
            vec![
                s(&[("cluster", "a")], 1000.0),
                s(&[("cluster", "d")], 900.0),
            ],
        ),
    ]);
    let got = assemble("cluster", &answers, everyone);
    assert!(got.conflicts.is_empty(), "{:?}", got.conflicts);
    let got = got.clusters;
    assert_eq!(got["a"].cpu, Some((3.5, 3.0)));
    assert_eq!(got["b"].cpu, Some((-1.0, -1.0)), "overcommitted");
    assert_eq!(got["a"].memory, None);
    assert_eq!(got["a"].newest, Some(1000.0));
    assert_eq!(got["d"].cpu, None);
    assert!(!got.contains_key("c"), "NaN is no data");
}

/// Each row: the answers of one round for the victim `v` (and a bystander `b`, always
/// fine), which clusters the hub knows, and what becomes of `v`.
#[test]
fn claims_that_disagree_withhold_the_cluster_and_unknown_ones_are_dropped() {
    enum Want {
        /// Rated with this free CPU (cluster scope).
        Rated(f64),
        /// Withheld for this conflict.
        Conflict(Conflict),
        /// Not in the answer (nothing known of it).
        Absent,
    }
    let values = |metric, node: &str, v: &[f64]| {
        Want::Conflict(Conflict {
            metric,
            node: Some(node.into()),
            what: Disagreement::Values(v.to_vec()),
        })
    };
    let marked = |metric, node: Option<&str>, kind| {
        Want::Conflict(Conflict {
            metric,
            node: node.map(Into::into),
            what: Disagreement::Marked(kind),
        })
    };
    let long_node = "n".repeat(200);
    // Name, extra answer series, the known clusters, the outcome for `v`.
    type Row<'a> = (&'a str, Vec<(Metric, Sample)>, &'a [&'a str], Want);
    let rows: Vec<Row<'_>> = vec![
        ("one claim", vec![], &["v", "b"], Want::Rated(16.0)),
        (
            "a replica making the same claim",
            vec![(Metric::CpuAllocatable, claim("v", "v-n1", "16", 1.0))],
            &["v", "b"],
            Want::Rated(16.0),
        ),
        (
            "-0 and 0 are the same claim",
            vec![
                (
                    Metric::CpuRequests,
                    s(&[("cluster", "v"), ("node", "v-n1")], 0.0),
                ),
                (
                    Metric::CpuRequests,
                    s(&[("cluster", "v"), ("node", "v-n1")], -0.0),
                ),
            ],
            &["v", "b"],
            Want::Rated(16.0),
        ),
        (
            "a forged allocatable for the victim's node",
            vec![(Metric::CpuAllocatable, claim("v", "v-n1", "1000", 1.0))],
            &["v", "b"],
            values(Metric::CpuAllocatable, "v-n1", &[16.0, 1000.0]),
        ),
        (
            "a forged node of the victim's, in memory",
            vec![
                (Metric::MemoryAllocatable, claim("v", "v-n1", "1", 1.0)),
                (Metric::MemoryAllocatable, claim("v", "v-n1", "2", 1.0)),
            ],
            &["v", "b"],
            values(Metric::MemoryAllocatable, "v-n1", &[1.0, 2.0]),
        ),
        (
            "requests claimed twice for a node",
            vec![(
                Metric::CpuRequests,
                s(&[("cluster", "v"), ("node", "v-n1")], 3.0),
            )],
            &["v", "b"],
            values(Metric::CpuRequests, "v-n1", &[0.0, 3.0]),
        ),
        (
            "two freshness claims",
            vec![(Metric::Freshness, s(&[("cluster", "v")], 5.0))],
            &["v", "b"],
            Want::Conflict(Conflict {
                metric: Metric::Freshness,
                node: None,
                what: Disagreement::Values(vec![5.0, 1000.0]),
            }),
        ),
        (
            "a node's readiness disputed",
            vec![(
                Metric::CpuAllocatable,
                s(
                    &[
                        ("cluster", "v"),
                        ("node", "v-n2"),
                        (CONFLICT_LABEL, "node_state"),
                    ],
                    1.0,
                ),
            )],
            &["v", "b"],
            marked(Metric::CpuAllocatable, Some("v-n2"), "node_state"),
        ),
        (
            "a pod's phase disputed, and a kind nobody wrote",
            vec![
                (
                    Metric::MemoryRequests,
                    s(&[("cluster", "v"), (CONFLICT_LABEL, "pod_phase")], 1.0),
                ),
                (
                    Metric::CpuRequests,
                    s(&[("cluster", "v"), (CONFLICT_LABEL, "<b>")], 1.0),
                ),
            ],
            &["v", "b"],
            // Answers are read in Metric order: cpu_requests first.
            marked(Metric::CpuRequests, None, "other"),
        ),
        (
            "a long node name is cut",
            vec![
                (Metric::CpuAllocatable, claim("v", &long_node, "1", 1.0)),
                (Metric::CpuAllocatable, claim("v", &long_node, "2", 1.0)),
            ],
            &["v", "b"],
            values(Metric::CpuAllocatable, &"n".repeat(NODE_SHOWN), &[1.0, 2.0]),
        ),
        (
            "the victim is no accepted ManagedCluster: dropped, no conflict",
            vec![(Metric::CpuAllocatable, claim("v", "v-n1", "1000", 1.0))],
            &["b"],
            Want::Absent,
        ),
    ];
    for (name, extra, known, want) in rows {
        let mut answers: BTreeMap<Metric, Vec<Sample>> = BTreeMap::from([
            (
                Metric::CpuAllocatable,
                vec![claim("v", "v-n1", "16", 1.0), claim("b", "b-n1", "8", 2.0)],
            ),
            (
                Metric::CpuRequests,
                vec![
                    s(&[("cluster", "v"), ("node", "v-n1")], 0.0),
                    s(&[("cluster", "b"), ("node", "b-n1")], 1.0),
                ],
            ),
            (
                Metric::Freshness,
                vec![
                    s(&[("cluster", "v")], 1000.0),
                    s(&[("cluster", "b")], 1000.0),
                ],
            ),
        ]);
        for (m, sample) in extra {
            answers.entry(m).or_default().push(sample);
        }
        let got = assemble("cluster", &answers, |c| known.contains(&c));
        assert_eq!(got.clusters["b"].cpu, Some((7.0, 7.0)), "{name}: bystander");
        match want {
            Want::Rated(cpu) => {
                assert!(got.conflicts.is_empty(), "{name}: {:?}", got.conflicts);
                assert_eq!(got.clusters["v"].cpu.map(|c| c.0), Some(cpu), "{name}");
            }
            Want::Conflict(c) => {
                assert_eq!(got.conflicts.get("v"), Some(&c), "{name}");
                assert_eq!(got.conflicts.len(), 1, "{name}");
                assert!(!got.clusters.contains_key("v"), "{name}: withheld");
            }
            Want::Absent => {
                assert!(got.conflicts.is_empty(), "{name}");
                assert!(!got.clusters.contains_key("v"), "{name}");
                assert!(
                    got.dropped
                        .get(&Dropped::UnknownCluster)
                        .is_some_and(|n| *n > 0),
                    "{name}: {:?}",
                    got.dropped
                );
            }
        }
    }
}

#[test]
fn drops_are_counted_by_reason() {
    let answers = BTreeMap::from([(
        Metric::CpuAllocatable,
        vec![
            s(&[("node", "n"), (VALUE_LABEL, "1")], 1.0),
            claim("", "n", "1", 1.0),
            claim("ghost", "n", "1", 1.0),
            claim("a", "n", "not a number", 1.0),
            claim("a", "m", "+Inf", 1.0),
            claim("a", "k", "2", 1.0),
        ],
    )]);
    let got = assemble("cluster", &answers, |c| c == "a");
    assert_eq!(
        got.dropped,
        BTreeMap::from([
            (Dropped::Unlabelled, 2),
            (Dropped::UnknownCluster, 1),
            (Dropped::BadValue, 2),
        ])
    );
    assert_eq!(got.clusters["a"].cpu, Some((2.0, 2.0)));
}

#[test]
fn a_conflict_says_what_and_where() {
    let c = Conflict {
        metric: Metric::CpuAllocatable,
        node: Some("n1".into()),
        what: Disagreement::Values(vec![16.0, 1000.0]),
    };
    assert_eq!(
        c.to_string(),
        "series under this cluster's name claim different values for cpu_allocatable of node \"n1\" (16, 1000); no scores until they agree"
    );
    let c = Conflict {
        metric: Metric::CpuRequests,
        node: None,
        what: Disagreement::Marked("pod_phase"),
    };
    assert_eq!(
        c.to_string(),
        "series under this cluster's name disagree on pod_phase (query cpu_requests); no scores until they agree"
    );
}
