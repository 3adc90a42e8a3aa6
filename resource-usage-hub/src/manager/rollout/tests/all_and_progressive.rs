//! Upstream's `All` and `Progressive` rollout cases.

use super::*;

#[test]
fn rollout_all() {
    check(vec![
        Case {
            name: "all, 90s, nothing applied yet",
            strategy: all("90s"),
            groups: g_2_4(),
            existing: vec![],
            want: res(
                vec![
                    t(1, g1()),
                    t(2, g1()),
                    t(3, gi(1)),
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
            name: "all, 90s: past the deadline times out, the rest keeps going",
            strategy: all("90s"),
            groups: g_2_4(),
            existing: all_existing(),
            want: res(
                vec![
                    r(4, gi(1), Failed, -60, 30),
                    r(5, gi(1), Progressing, -60, 30),
                    t(6, gi(1)),
                ],
                vec![
                    r(2, g1(), TimeOut, -120, -30),
                    r(3, gi(1), TimeOut, -120, -30),
                ],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "all, 90s, cluster7 added",
            strategy: all("90s"),
            groups: groups(&[(0, "group1", &[1, 2, 7]), (1, "", &[3, 4, 5, 6])]),
            existing: all_existing(),
            want: res(
                vec![
                    r(4, gi(1), Failed, -60, 30),
                    r(5, gi(1), Progressing, -60, 30),
                    t(6, gi(1)),
                    t(7, g1()),
                ],
                vec![
                    r(2, g1(), TimeOut, -120, -30),
                    r(3, gi(1), TimeOut, -120, -30),
                ],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "all, 90s, clusters 2 and 4 removed (in input order)",
            strategy: all("90s"),
            groups: groups(&[(0, "group1", &[1]), (1, "", &[3, 5])]),
            existing: all_existing(),
            want: res(
                vec![r(5, gi(1), Progressing, -60, 30)],
                vec![r(3, gi(1), TimeOut, -120, -30)],
                vec![s(2, g1(), Failed, -120), s(4, gi(1), Failed, -60)],
                false,
                Some(30),
            ),
        },
        Case {
            name: "all ignores minSuccessTime and maxFailures",
            strategy: RolloutStrategy {
                type_: "All".into(),
                all: Some(RolloutAll {
                    rollout_config: cfg("", int(0), "1h"),
                }),
                ..RolloutStrategy::default()
            },
            groups: groups(&[(0, "", &[1, 2, 3])]),
            existing: vec![s(1, gi(0), Succeeded, -10), s(2, gi(0), Failed, -10)],
            want: res(
                vec![s(2, gi(0), Failed, -10), t(3, gi(0))],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "all: Skip is left alone, a nameless status is removed",
            strategy: all(""),
            groups: groups(&[(0, "", &[1, 2])]),
            existing: vec![t(0, None), s(1, gi(0), Skip, -10)]
                .into_iter()
                .map(|mut s| {
                    if s.cluster == "cluster0" {
                        s.cluster = String::new();
                    }
                    s
                })
                .collect(),
            want: res(
                vec![t(2, gi(0))],
                vec![],
                vec![ClusterStatus {
                    cluster: String::new(),
                    ..t(0, None)
                }],
                false,
                None,
            ),
        },
        Case {
            name: "all, no clusters selected: everything existing is removed",
            strategy: all("None"),
            groups: groups(&[(0, "", &[])]),
            existing: vec![s(1, gi(0), Progressing, -10)],
            want: res(
                vec![],
                vec![],
                vec![s(1, gi(0), Progressing, -10)],
                false,
                None,
            ),
        },
    ]);
}

#[test]
fn rollout_progressive() {
    let c90 = || cfg("90s", None, "");
    check(vec![
        Case {
            name: "maxConcurrency 2, nothing applied yet",
            strategy: prog(c90(), int(2), &[]),
            groups: g_3_3(),
            existing: vec![],
            want: res(vec![t(1, g1()), t(2, g1())], vec![], vec![], false, None),
        },
        Case {
            name: "maxConcurrency 4 over existing ToApply, cluster10 removed",
            strategy: prog(c90(), int(4), &[]),
            groups: g_3_3_3(),
            existing: to_apply_existing(),
            want: res(
                vec![
                    r(1, g1(), Progressing, -60, 30),
                    t(2, g1()),
                    t(3, g1()),
                    t(4, gi(1)),
                ],
                vec![],
                vec![t(10, gi(2))],
                false,
                Some(30),
            ),
        },
        Case {
            name: "maxConcurrency unset: all clusters",
            strategy: prog(c90(), None, &[]),
            groups: g_3_3_3(),
            existing: to_apply_existing(),
            want: res(
                vec![
                    r(1, g1(), Progressing, -60, 30),
                    t(2, g1()),
                    t(3, g1()),
                    t(4, gi(1)),
                    t(5, gi(1)),
                    t(6, gi(1)),
                    t(7, gi(2)),
                    t(8, gi(2)),
                    t(9, gi(2)),
                ],
                vec![],
                vec![t(10, gi(2))],
                false,
                Some(30),
            ),
        },
        Case {
            name: "maxFailures unset: one timeout breaches",
            strategy: prog(c90(), int(2), &[]),
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
            name: "maxFailures 100%, minSuccessTime 60s: soaking cluster1 holds a slot",
            strategy: prog(cfg("90s", pct("100%"), "1m"), int(2), &[]),
            groups: g_3_3(),
            existing: vec![
                s(1, g1(), Succeeded, -30),
                s(2, g1(), Failed, -120),
                s(3, g1(), Progressing, -30),
            ],
            want: res(
                vec![
                    r(1, g1(), Succeeded, -30, 30),
                    r(3, g1(), Progressing, -30, 60),
                ],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "mixed soak and deadline: recheck after the nearest",
            strategy: prog(cfg("90s", pct("100%"), "60s"), int(4), &[]),
            groups: groups(&[(0, "group1", &[1, 2, 3, 4])]),
            existing: vec![
                s(1, g1(), Succeeded, -30),
                s(2, g1(), Progressing, -60),
                s(3, g1(), Progressing, -30),
                s(4, g1(), Succeeded, -120),
            ],
            want: res(
                vec![
                    r(1, g1(), Succeeded, -30, 30),
                    r(2, g1(), Progressing, -60, 30),
                    r(3, g1(), Progressing, -30, 60),
                ],
                vec![],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "maxFailures 1 tolerates one timeout",
            strategy: prog(cfg("90s", int(1), ""), int(2), &[]),
            groups: g_3_3(),
            existing: first_group(Progressing, -60),
            want: res(
                vec![r(3, g1(), Progressing, -60, 30), t(4, gi(1))],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "deadline 0s times out at once, maxFailures 3",
            strategy: prog(cfg("0s", int(3), ""), int(2), &[]),
            groups: g_3_3(),
            existing: vec![
                s(1, g1(), Succeeded, -30),
                s(2, g1(), Progressing, -30),
                s(3, g1(), Progressing, -30),
            ],
            want: res(
                vec![t(4, gi(1)), t(5, gi(1))],
                vec![r(2, g1(), TimeOut, -30, -30), r(3, g1(), TimeOut, -30, -30)],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "mandatory group1 with a timeout: breach",
            strategy: prog(c90(), int(3), &[by_name("group1")]),
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
            name: "deadline None, maxConcurrency 50%, maxFailures 100%",
            strategy: prog(cfg("None", pct("100%"), ""), pct("50%"), &[]),
            groups: g_2_4(),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Failed, -120),
                s(3, gi(1), Progressing, -60),
            ],
            want: res(
                vec![
                    s(2, g1(), Failed, -120),
                    s(3, gi(1), Progressing, -60),
                    t(4, gi(1)),
                ],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "deadline None, maxConcurrency 50%, maxFailures 0%",
            strategy: prog(cfg("None", pct("0%"), ""), pct("50%"), &[]),
            groups: g_2_4(),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Failed, -120),
                s(3, gi(1), Progressing, -60),
            ],
            want: res(
                vec![s(2, g1(), Failed, -120), s(3, gi(1), Progressing, -60)],
                vec![],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "mandatory group failed: the rest waits",
            strategy: prog(c90(), int(3), &[by_name("group1")]),
            groups: g_2_2_2(),
            existing: vec![s(1, g1(), Failed, -120), s(2, g1(), Failed, -60)],
            want: res(
                vec![r(2, g1(), Failed, -60, 30)],
                vec![r(1, g1(), TimeOut, -120, -30)],
                vec![],
                true,
                Some(30),
            ),
        },
        Case {
            name: "mandatory group succeeded: maxConcurrency over the rest",
            strategy: prog(cfg("", None, ""), int(3), &[by_name("group1")]),
            groups: g_2_2_2(),
            existing: vec![s(1, g1(), Succeeded, -60), s(2, g1(), Succeeded, -120)],
            want: res(
                vec![t(3, gi(1)), t(4, gi(1)), t(5, gi(2))],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "cluster7 added to the succeeded mandatory group",
            strategy: prog(c90(), int(3), &[by_name("group1")]),
            groups: groups(&[
                (0, "group1", &[1, 2, 7]),
                (1, "", &[3, 4, 8]),
                (2, "", &[5, 6, 9]),
            ]),
            existing: vec![
                s(1, g1(), Succeeded, -60),
                s(2, g1(), Succeeded, -60),
                s(3, gi(1), Succeeded, -60),
                s(4, gi(1), Progressing, -60),
                s(5, gi(2), Progressing, -60),
            ],
            want: res(
                vec![
                    r(4, gi(1), Progressing, -60, 30),
                    r(5, gi(2), Progressing, -60, 30),
                    t(7, g1()),
                ],
                vec![],
                vec![],
                false,
                Some(30),
            ),
        },
        Case {
            name: "maxFailures 100%, cluster1 removed",
            strategy: prog(cfg("90s", pct("100%"), ""), int(2), &[]),
            groups: groups(&[(0, "group1", &[2, 3]), (1, "", &[4, 5, 6])]),
            existing: first_group(Progressing, -60),
            want: res(
                vec![r(3, g1(), Progressing, -60, 30), t(4, gi(1))],
                vec![r(2, g1(), TimeOut, -120, -30)],
                vec![s(1, g1(), Succeeded, -60)],
                false,
                Some(30),
            ),
        },
        Case {
            name: "failed cluster2 removed from the mandatory group",
            strategy: prog(c90(), int(2), &[by_name("group1")]),
            groups: groups(&[(0, "group1", &[1, 3]), (1, "", &[4, 5, 6])]),
            existing: first_group(Succeeded, -60),
            want: res(
                vec![t(4, gi(1)), t(5, gi(1))],
                vec![],
                vec![s(2, g1(), Failed, -120)],
                false,
                None,
            ),
        },
        Case {
            name: "mandatory by index: the whole group at once, whatever maxConcurrency",
            strategy: prog(c90(), int(1), &[by_index(1)]),
            groups: g_3_3_3(),
            existing: vec![],
            want: res(
                vec![t(4, gi(1)), t(5, gi(1)), t(6, gi(1))],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "a mandatory group that does not exist is ignored",
            strategy: prog(c90(), int(2), &[by_name("canary")]),
            groups: g_3_3(),
            existing: vec![],
            want: res(vec![t(1, g1()), t(2, g1())], vec![], vec![], false, None),
        },
        Case {
            // Upstream gates on the in-flight cluster1 here (its mandatory pass sees every
            // cluster); an empty mandatory group has nothing to wait for.
            name: "an empty mandatory group does not gate",
            strategy: prog(cfg("", None, ""), int(3), &[by_name("canary")]),
            groups: groups(&[(0, "canary", &[]), (1, "", &[1, 2, 3])]),
            existing: vec![s(1, gi(1), Progressing, -10)],
            want: res(
                vec![s(1, gi(1), Progressing, -10), t(2, gi(1)), t(3, gi(1))],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "maxConcurrency 33% of 3 rounds up to 1",
            strategy: prog(c90(), pct("33%"), &[]),
            groups: groups(&[(0, "", &[1, 2, 3])]),
            existing: vec![],
            want: res(vec![t(1, gi(0))], vec![], vec![], false, None),
        },
        Case {
            name: "maxConcurrency 34% of 3 rounds up to 2",
            strategy: prog(c90(), pct("34%"), &[]),
            groups: groups(&[(0, "", &[1, 2, 3])]),
            existing: vec![],
            want: res(vec![t(1, gi(0)), t(2, gi(0))], vec![], vec![], false, None),
        },
        Case {
            name: "maxConcurrency 0% falls back to all",
            strategy: prog(c90(), pct("0%"), &[]),
            groups: groups(&[(0, "", &[1, 2, 3])]),
            existing: vec![],
            want: res(
                vec![t(1, gi(0)), t(2, gi(0)), t(3, gi(0))],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "maxFailures 20% of 6 rounds up to 2: two failures are fine",
            strategy: prog(cfg("None", pct("20%"), ""), int(3), &[]),
            groups: groups(&[(0, "", &[1, 2, 3, 4, 5, 6])]),
            existing: vec![s(1, gi(0), Failed, -10), s(2, gi(0), Failed, -10)],
            want: res(
                vec![
                    s(1, gi(0), Failed, -10),
                    s(2, gi(0), Failed, -10),
                    t(3, gi(0)),
                ],
                vec![],
                vec![],
                false,
                None,
            ),
        },
        Case {
            name: "maxFailures 10% of 6 rounds up to 1: the second failure breaches",
            strategy: prog(cfg("None", pct("10%"), ""), int(3), &[]),
            groups: groups(&[(0, "", &[1, 2, 3, 4, 5, 6])]),
            existing: vec![s(1, gi(0), Failed, -10), s(2, gi(0), Failed, -10)],
            want: res(
                vec![s(1, gi(0), Failed, -10), s(2, gi(0), Failed, -10)],
                vec![],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "after a breach, existing ToApply clusters wait (statuses sorted by name)",
            strategy: prog(cfg("None", None, ""), int(3), &[]),
            groups: groups(&[(0, "", &[1, 2, 3])]),
            existing: vec![
                t(3, gi(0)),
                s(2, gi(0), Progressing, -5),
                s(1, gi(0), Failed, -5),
            ],
            want: res(
                vec![s(1, gi(0), Failed, -5), s(2, gi(0), Progressing, -5)],
                vec![],
                vec![],
                true,
                None,
            ),
        },
        Case {
            name: "an existing ToApply keeps its recheck time",
            strategy: prog(cfg("None", None, ""), int(1), &[]),
            groups: groups(&[(0, "", &[1, 2])]),
            existing: vec![ClusterStatus {
                recheck_at: Some(at(45)),
                ..t(1, gi(0))
            }],
            want: res(
                vec![ClusterStatus {
                    recheck_at: Some(at(45)),
                    ..t(1, gi(0))
                }],
                vec![],
                vec![],
                false,
                Some(45),
            ),
        },
    ]);
}
