//! Upstream's `ProgressivePerGroup` cases, and status and recheck decisions.

use super::*;

#[test]
fn rollout_progressive_per_group() {
    let c90 = || cfg("90s", None, "");
    check(vec![
        Case {
            name: "nothing applied yet: the first group",
            strategy: ppg(c90(), &[]),
            groups: g_3_3(),
            existing: vec![],
            want: res(
                vec![t(1, g1()), t(2, g1()), t(3, g1())],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "existing ToApply are recomputed per group",
            strategy: ppg(c90(), &[]),
            groups: g_3_3(),
            existing: vec![
                s(1, g1(), Progressing, -60),
                t(2, g1()),
                t(3, g1()),
                t(4, gi(1)),
                t(5, gi(1)),
                t(6, gi(1)),
            ],
            want: res(
                vec![r(1, g1(), Progressing, -60, 30), t(2, g1()), t(3, g1())],
                vec![],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "a timeout in the first group breaches maxFailures 0",
            strategy: ppg(c90(), &[]),
            groups: g_3_3(),
            existing: first_group(Progressing, -60),
            want: res(
                vec![r(3, g1(), Progressing, -60, 30)],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![],
                true,
                Some(30),
            ),
        },
        Case {
            name: "first group done with a timeout within maxFailures 2: next group",
            strategy: ppg(cfg("90s", int(2), ""), &[]),
            groups: g_3_3_3(),
            existing: first_group(Succeeded, -60),
            want: res(
                vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "second group succeeded too: third group",
            strategy: ppg(cfg("90s", int(2), ""), &[]),
            groups: g_3_3_3(),
            existing: [
                first_group(Succeeded, -60),
                vec![
                    s(4, gi(1), Succeeded, -60),
                    s(5, gi(1), Succeeded, -60),
                    s(6, gi(1), Succeeded, -60),
                ],
            ]
            .concat(),
            want: res(
                vec![t(7, gi(2)), t(8, gi(2)), t(9, gi(2))],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "deadline None, a failure in the first group: breach",
            strategy: ppg(cfg("None", None, ""), &[]),
            groups: g_3_3_3(),
            existing: first_group(Succeeded, -60),
            want: res(vec![s(2, g1(), Failed, -120)], vec![], vec![], true, None),
        },
        Case {
            name: "deadline None, one failure within maxFailures 2: next group too",
            strategy: ppg(cfg("None", int(2), ""), &[]),
            groups: g_3_3_3(),
            existing: first_group(Succeeded, -60),
            want: res(
                vec![
                    s(2, g1(), Failed, -120),
                    t(4, gi(1)),
                    t(5, gi(1)),
                    t(6, gi(1)),
                ],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "deadline None, two failures over maxFailures 30% (1 of 3): breach",
            strategy: ppg(cfg("None", pct("30%"), ""), &[]),
            groups: g_3_3_3(),
            existing: first_group(Failed, -120),
            want: res(
                vec![s(2, g1(), Failed, -120), s(3, g1(), Failed, -120)],
                vec![],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "mandatory group timed out: stop",
            strategy: ppg(c90(), &[by_name("group1")]),
            groups: g_3_3(),
            existing: first_group(Failed, -120),
            want: res(
                vec![],
                vec![
                    r(2, g1(), TimeOut, -120, -30),
                    r(3, g1(), TimeOut, -120, -30),
                ],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "mandatory group tolerates no failure, whatever maxFailures",
            strategy: ppg(cfg("90s", int(2), ""), &[by_name("group1")]),
            groups: g_3_3_3(),
            existing: first_group(Succeeded, -60),
            want: res(
                vec![],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "mandatory group succeeded: next group",
            strategy: ppg(c90(), &[by_name("group1")]),
            groups: g_3_3_3(),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Succeeded, -60),
                s(3, g1(), Succeeded, -60),
            ],
            want: res(
                vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "minSuccessTime: a soaking cluster keeps its group going",
            strategy: ppg(cfg("90s", pct("50%"), "1m"), &[]),
            groups: groups(&[(0, "group1", &[1, 2, 3]), (1, "group2", &[4, 5])]),
            existing: vec![
                s(1, g1(), Succeeded, -30),
                s(2, g1(), Succeeded, -120),
                s(3, g1(), Progressing, -30),
            ],
            want: res(
                vec![
                    r(1, g1(), Succeeded, -30, 30),
                    r(3, g1(), Progressing, -30, 60),
                ],
                vec![],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "minSuccessTime without a last transition soaks from now",
            strategy: ppg(cfg("", None, "2m"), &[]),
            groups: groups(&[(0, "", &[1]), (1, "", &[2])]),
            existing: vec![ClusterStatus {
                status: Succeeded,
                ..t(1, gi(0))
            }],
            want: res(
                vec![ClusterStatus {
                    status: Succeeded,
                    recheck_at: Some(at(120)),
                    ..t(1, gi(0))
                }],
                vec![],
                vec![],
                false,
                Some(120),
            ),
        },
        Case {
            name: "cluster3 added to the first group after the rollout started",
            strategy: ppg(c90(), &[]),
            groups: g_3_3(),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Succeeded, -60),
                s(4, gi(1), Progressing, -60),
                s(5, gi(1), Progressing, -60),
            ],
            want: res(
                vec![
                    r(4, gi(1), Progressing, -60, 30),
                    r(5, gi(1), Progressing, -60, 30),
                    t(3, g1()),
                ],
                vec![],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "failed cluster2 removed after the rollout started",
            strategy: ppg(c90(), &[]),
            groups: groups(&[(0, "group1", &[1, 3]), (1, "", &[4, 5, 6])]),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Failed, -60),
                s(3, g1(), Progressing, -60),
            ],
            want: res(
                vec![r(3, g1(), Progressing, -60, 30)],
                vec![],
                vec![s(2, g1(), Failed, -60)],
                false,
                Some(30),
            ),
        },
        Case {
            name: "cluster2 removed while cluster3 timed out within maxFailures 2",
            strategy: ppg(cfg("90s", int(2), ""), &[]),
            groups: groups(&[(0, "group1", &[1, 3]), (1, "", &[4, 5, 6])]),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Failed, -60),
                s(3, g1(), Progressing, -120),
            ],
            want: res(
                vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                vec![r(3, g1(), TimeOut, -120, -30)],
                vec![s(2, g1(), Failed, -60)],
                false,
                None,
            ),
        },
        Case {
            name: "failed cluster2 removed from the mandatory group",
            strategy: ppg(c90(), &[by_name("group1")]),
            groups: groups(&[
                (0, "group1", &[1, 3]),
                (1, "", &[4, 5, 6]),
                (2, "", &[7, 8, 9]),
            ]),
            existing: first_group(Succeeded, -60),
            want: res(
                vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                vec![],
                vec![s(2, g1(), Failed, -120)],
                false,
                None,
            ),
        },
        Case {
            // Upstream holds everything here; the mandatory group succeeded, so the rest
            // goes on as it would without mandatory groups (below).
            name: "a timeout outside the mandatory group does not hold the rollout",
            strategy: ppg(c90(), &[by_name("group1")]),
            groups: g_3_3_3(),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Succeeded, -60),
                s(3, g1(), Succeeded, -60),
                s(4, gi(1), Progressing, -120),
            ],
            want: res(
                vec![t(5, gi(1)), t(6, gi(1))],
                vec![r(4, gi(1), TimeOut, -120, -30)],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "the same without mandatory groups: breach in the second group",
            strategy: ppg(c90(), &[]),
            groups: g_3_3_3(),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Succeeded, -60),
                s(3, g1(), Succeeded, -60),
                s(4, gi(1), Progressing, -120),
            ],
            want: res(
                vec![t(5, gi(1)), t(6, gi(1))],
                vec![r(4, gi(1), TimeOut, -120, -30)],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "existing statuses keep their input order",
            strategy: ppg(cfg("None", None, ""), &[]),
            groups: groups(&[(0, "", &[1, 2, 3])]),
            existing: vec![s(3, gi(0), Progressing, -1), s(1, gi(0), Progressing, -1)],
            want: res(
                vec![
                    s(3, gi(0), Progressing, -1),
                    s(1, gi(0), Progressing, -1),
                    t(2, gi(0)),
                ],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "all groups done",
            strategy: ppg(c90(), &[]),
            groups: groups(&[(0, "", &[1]), (1, "", &[2])]),
            existing: vec![s(1, gi(0), Succeeded, -60), s(2, gi(1), Succeeded, -60)],
            want: res(vec![], vec![], vec![], false, None),
        },
    ]);
}

#[test]
fn determine_status() {
    // (name, status, last transition, minSuccessTime, deadline, rollout, timed out)
    type Row = (
        &'static str,
        Status,
        Option<i64>,
        Duration,
        Option<Duration>,
        Option<(Status, Option<i64>)>,
        Option<Option<i64>>,
    );
    let min = Duration::from_secs(60);
    let rows: Vec<Row> = vec![
        (
            "ToApply",
            ToApply,
            None,
            Duration::ZERO,
            Some(min),
            Some((ToApply, None)),
            None,
        ),
        ("Skip", Skip, None, Duration::ZERO, Some(min), None, None),
        (
            "Succeeded",
            Succeeded,
            None,
            Duration::ZERO,
            Some(min),
            None,
            None,
        ),
        (
            "Succeeded within minSuccessTime",
            Succeeded,
            None,
            min,
            None,
            Some((Succeeded, Some(60))),
            None,
        ),
        (
            "Succeeded after minSuccessTime",
            Succeeded,
            Some(-120),
            min,
            None,
            None,
            None,
        ),
        (
            "Succeeded, minSuccessTime is Go's max",
            Succeeded,
            None,
            GO_MAX_DURATION,
            None,
            None,
            None,
        ),
        (
            "TimeOut",
            TimeOut,
            None,
            Duration::ZERO,
            Some(min),
            None,
            None,
        ),
        (
            "Progressing within the deadline",
            Progressing,
            Some(-30),
            Duration::ZERO,
            Some(min),
            Some((Progressing, Some(30))),
            None,
        ),
        (
            "Failed at the deadline",
            Failed,
            Some(-60),
            Duration::ZERO,
            Some(min),
            None,
            Some(Some(0)),
        ),
        (
            "Progressing without a deadline",
            Progressing,
            Some(-3600),
            Duration::ZERO,
            None,
            Some((Progressing, None)),
            None,
        ),
        (
            "Progressing without a last transition",
            Progressing,
            None,
            Duration::ZERO,
            Some(min),
            Some((Progressing, Some(60))),
            None,
        ),
    ];
    for (name, status, ltt, min_success_time, deadline, want_rollout, want_timeout) in rows {
        let clock = Clock {
            now: now(),
            min_success_time,
            deadline,
        };
        let input = ClusterStatus {
            status,
            last_transition: ltt.map(at),
            ..t(1, None)
        };
        let (mut rollout, mut timed_out) = (Vec::new(), Vec::new());
        clock.determine(input.clone(), &mut rollout, &mut timed_out);
        let want_rollout: Vec<_> = want_rollout
            .map(|(status, recheck)| ClusterStatus {
                status,
                recheck_at: recheck.map(at),
                ..input.clone()
            })
            .into_iter()
            .collect();
        let want_timeout: Vec<_> = want_timeout
            .map(|recheck| ClusterStatus {
                status: TimeOut,
                recheck_at: recheck.map(at),
                ..input.clone()
            })
            .into_iter()
            .collect();
        assert_eq!((rollout, timed_out), (want_rollout, want_timeout), "{name}");
    }
}

#[test]
fn recheck_after() {
    let clock = Clock {
        now: now(),
        min_success_time: Duration::ZERO,
        deadline: None,
    };
    let rechecked = |n, secs| ClusterStatus {
        recheck_at: Some(at(secs)),
        ..t(n, None)
    };
    let cases: Vec<(&str, Vec<ClusterStatus>, Option<u64>)> = vec![
        ("one in 30s", vec![rechecked(1, 30)], Some(30)),
        (
            "the minimum",
            vec![rechecked(1, 60), rechecked(2, 30), rechecked(3, 60)],
            Some(30),
        ),
        ("none set", vec![t(1, None), t(2, None)], None),
        ("no clusters", vec![], None),
        (
            "only the set ones",
            vec![t(1, None), rechecked(2, 60), t(3, None)],
            Some(60),
        ),
        (
            "past and present ones are ignored",
            vec![rechecked(1, -5), rechecked(2, 0)],
            None,
        ),
    ];
    for (name, rollout, want) in cases {
        assert_eq!(
            clock.recheck_after(&rollout),
            want.map(Duration::from_secs),
            "{name}"
        );
    }
}
