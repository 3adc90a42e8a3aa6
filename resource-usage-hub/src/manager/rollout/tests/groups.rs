//! Decision groups from PlacementDecisions, and the install progression.

use super::*;

fn decision(labels: &[(&str, &str)], clusters: Option<&[&str]>) -> PlacementDecision {
    PlacementDecision {
        metadata: ObjectMeta {
            name: Some("p-decision-1".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        },
        spec: PlacementDecisionFields {},
        status: clusters.map(|clusters| PlacementDecisionStatus {
            decisions: clusters
                .iter()
                .map(|c| ClusterDecision {
                    cluster_name: (*c).to_owned(),
                    reason: String::new(),
                    score: 0,
                })
                .collect(),
        }),
    }
}

#[test]
fn groups_from_decisions() {
    const INDEX: &str = label::DECISION_GROUP_INDEX;
    const NAME: &str = label::DECISION_GROUP_NAME;
    type Want = Vec<(i32, &'static str, Vec<&'static str>)>;
    let cases: Vec<(&str, Vec<PlacementDecision>, Want)> = vec![
        ("no decisions", vec![], vec![]),
        (
            "labelled as the scheduler writes them, one group over two decisions",
            vec![
                decision(&[(INDEX, "0"), (NAME, "canary")], Some(&["c1"])),
                decision(&[(INDEX, "1"), (NAME, "")], Some(&["c3", "c2"])),
                decision(&[(INDEX, "1"), (NAME, "")], Some(&["c4"])),
            ],
            vec![(0, "canary", vec!["c1"]), (1, "", vec!["c2", "c3", "c4"])],
        ),
        (
            "no labels: group 0 without a name",
            vec![PlacementDecision {
                metadata: ObjectMeta::default(),
                ..decision(&[], Some(&["c1"]))
            }],
            vec![(0, "", vec!["c1"])],
        ),
        (
            "garbage or missing index: group 0",
            vec![
                decision(&[(INDEX, "first"), (NAME, "a")], Some(&["c1"])),
                decision(&[(INDEX, ""), (NAME, "a")], Some(&["c2"])),
                decision(&[(NAME, "b")], Some(&["c3"])),
                decision(&[(INDEX, "99999999999999999999")], Some(&["c4"])),
            ],
            vec![
                (0, "", vec!["c4"]),
                (0, "a", vec!["c1", "c2"]),
                (0, "b", vec!["c3"]),
            ],
        ),
        (
            "Go's Atoi: signs and leading zeros; int32 wraps",
            vec![
                decision(&[(INDEX, "+02")], Some(&["c1"])),
                decision(&[(INDEX, "-1")], Some(&["c2"])),
                decision(&[(INDEX, "4294967299")], Some(&["c3"])),
            ],
            vec![
                (-1, "", vec!["c2"]),
                (2, "", vec!["c1"]),
                (3, "", vec!["c3"]),
            ],
        ),
        (
            "decisions without clusters keep their (empty) group",
            vec![
                decision(&[(INDEX, "0"), (NAME, "canary")], None),
                decision(&[(INDEX, "1")], Some(&[])),
            ],
            vec![(0, "canary", vec![]), (1, "", vec![])],
        ),
    ];
    for (name, decisions, want) in cases {
        let got: Vec<(i32, String, Vec<String>)> = Groups::from_decisions(&decisions)
            .iter()
            .map(|(key, clusters)| {
                (
                    key.index,
                    key.name.clone(),
                    clusters.iter().cloned().collect(),
                )
            })
            .collect();
        let want: Vec<(i32, String, Vec<String>)> = want
            .into_iter()
            .map(|(index, group, clusters)| {
                (
                    index,
                    group.to_owned(),
                    clusters.into_iter().map(str::to_owned).collect(),
                )
            })
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn groups_accessors() {
    let mut groups = groups(&[(1, "", &[3, 1]), (0, "canary", &[2])]);
    groups.insert_group(k(2, "empty"));
    groups.insert(k(1, ""), "cluster2");
    assert_eq!(
        groups.clusters(),
        BTreeSet::from(["cluster1", "cluster2", "cluster3"])
    );
    assert_eq!(groups.len(), 3);
    assert!(!groups.is_empty());
    assert_eq!(groups.group_count(), 3);
    let keys: Vec<_> = groups.iter().map(|(key, _)| key.clone()).collect();
    assert_eq!(keys, vec![k(0, "canary"), k(1, ""), k(2, "empty")]);
    // cluster2 is in two groups: the lowest wins.
    let cases = [
        ("cluster1", Some(k(1, ""))),
        ("cluster2", Some(k(0, "canary"))),
        ("cluster3", Some(k(1, ""))),
        ("cluster9", None),
    ];
    for (cluster, want) in cases {
        assert_eq!(groups.group_of(cluster), want.as_ref(), "{cluster}");
    }

    let mut empty = Groups::default();
    assert!(empty.is_empty());
    assert_eq!((empty.len(), empty.group_count()), (0, 0));
    empty.insert_group(k(0, ""));
    assert!(empty.is_empty());
    assert_eq!((empty.len(), empty.group_count()), (0, 1));
}

#[test]
fn groups_with_gaps_and_shared_indices_all_take_part() {
    // Upstream's tracker would drop index 5 (only 0..2 are looked at) and one of the two
    // names at index 0; here every group rolls out, in (index, name) order.
    let gaps = groups(&[(0, "a", &[1]), (0, "b", &[2]), (5, "", &[3])]);
    let got = rollout(
        &Strategy::parse(&all("")).unwrap(),
        &gaps,
        &[s(3, gi(5), Progressing, -1)],
        now(),
    );
    let want = res(
        vec![
            s(3, gi(5), Progressing, -1),
            t(1, Some(k(0, "a"))),
            t(2, Some(k(0, "b"))),
        ],
        vec![],
        vec![],
        false,
        None,
    );
    assert_eq!(got, want);
    // A mandatory index selects every group with it: cluster2's group "b" goes before
    // cluster1 although Progressive would take cluster1 first among the rest.
    let shared = groups(&[(0, "a", &[3]), (0, "b", &[2]), (5, "", &[1])]);
    let strategy = Strategy::parse(&prog(cfg("", None, ""), int(1), &[by_index(0)])).unwrap();
    let got = rollout(
        &strategy,
        &shared,
        &[s(3, Some(k(0, "a")), Succeeded, -60)],
        now(),
    );
    assert_eq!(
        got,
        res(vec![t(2, Some(k(0, "b")))], vec![], vec![], false, None)
    );
}

#[test]
fn progress_condition() {
    let p = |progressing, succeeded, failed, timed_out, total, configured| Progress {
        progressing,
        succeeded,
        failed,
        timed_out,
        total,
        configured,
    };
    let cases: Vec<(Progress, bool, &str, &str, &str)> = vec![
        (
            p(0, 0, 0, 0, 0, 0),
            false,
            "True",
            "Progressing",
            "selected clusters 0. configured addons 0/0 progressing..., 0 failed 0 timeout.",
        ),
        (
            p(2, 1, 1, 1, 5, 5),
            false,
            "True",
            "Progressing",
            "selected clusters 5. configured addons 3/5 progressing..., 1 failed 1 timeout.",
        ),
        (
            p(0, 3, 0, 0, 3, 3),
            true,
            "False",
            "Completed",
            "selected clusters 3. configured addons 3/3 completed with no errors, 0 failed 0 timeout.",
        ),
        (
            p(0, 2, 1, 1, 4, 2),
            true,
            "False",
            "Completed",
            "selected clusters 4. configured addons 2/2 completed with no errors, 1 failed 1 timeout.",
        ),
        (
            p(0, 3, 0, 0, 3, 2),
            false,
            "True",
            "Progressing",
            "selected clusters 3. configured addons 3/2 progressing..., 0 failed 0 timeout.",
        ),
    ];
    for (progress, completed, status, reason, message) in cases {
        assert_eq!(progress.completed(), completed, "{progress:?}");
        assert_eq!(
            progress.condition(),
            (status, reason, message.to_owned()),
            "{progress:?}"
        );
    }
}

#[test]
fn progress_tally() {
    let groups = g_3_3();
    let existing = vec![
        s(1, g1(), Succeeded, -30),
        s(2, g1(), Failed, -120),
        s(3, g1(), Progressing, -30),
        s(2, g1(), Succeeded, -120),
        s(4, gi(1), Succeeded, -120),
        s(5, gi(1), Failed, -10),
        s(7, gi(1), Failed, -10),
    ];
    let strategy = Strategy::parse(&prog(cfg("90s", pct("100%"), "1m"), int(6), &[])).unwrap();
    let result = rollout(&strategy, &groups, &existing, now());
    // In the rollout: 1 (soaking), 3 (progressing), 5 (failed in time), 6 (new, no add-on).
    // Done: 4. Past the deadline: 2 (its first status counts). Not selected: 7.
    let want = Progress {
        progressing: 3,
        succeeded: 1,
        failed: 1,
        timed_out: 1,
        total: 6,
        configured: 5,
    };
    assert_eq!(Progress::tally(&groups, &existing, &result, 5), want);
}
