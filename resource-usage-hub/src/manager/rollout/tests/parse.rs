//! Parsing strategies: thresholds, timeouts, Go durations, errors.

use super::*;

#[test]
fn threshold_of() {
    // upstream's TestCalculateRolloutSize (total 100, default 100) and more.
    let cases: Vec<(Threshold, usize, usize, usize)> = vec![
        (Threshold::Count(50), 100, 100, 50),
        (Threshold::Percent(30.0), 100, 100, 30),
        (Threshold::Count(0), 100, 100, 100),
        (Threshold::Count(101), 100, 100, 100),
        (Threshold::Percent(200.0), 100, 100, 100),
        (Threshold::Count(-1), 100, 7, 7),
        (Threshold::Percent(33.0), 3, 0, 1),
        (Threshold::Percent(34.0), 3, 0, 2),
        (Threshold::Percent(0.0), 3, 3, 3),
        (Threshold::Percent(-10.0), 3, 3, 3),
        (Threshold::Percent(0.1), 3, 0, 1),
        (Threshold::Percent(100.0), 0, 0, 0),
        (Threshold::Percent(f64::NAN), 3, 2, 2),
        (Threshold::Percent(f64::INFINITY), 3, 2, 2),
        (Threshold::Count(3), 3, 0, 3),
    ];
    for (threshold, total, default, want) in cases {
        assert_eq!(
            threshold.of(total, default),
            want,
            "{threshold:?} of {total}"
        );
    }
}

#[test]
fn timeouts() {
    let h = |n: u64| Some(Duration::from_secs(n * 3600));
    let cases: Vec<(&str, Result<Option<Duration>, &str>)> = vec![
        ("2h", Ok(h(2))),
        ("30m", Ok(Some(Duration::from_secs(1800)))),
        ("10s", Ok(Some(Duration::from_secs(10)))),
        ("90s", Ok(Some(Duration::from_secs(90)))),
        ("1h30m", Ok(Some(Duration::from_secs(5400)))),
        ("0s", Ok(Some(Duration::ZERO))),
        ("None", Ok(None)),
        ("", Ok(None)),
        // The regex only looks at the start: Go then parses the rest.
        ("10ms", Ok(Some(Duration::from_millis(10)))),
        ("1h0.5m", Ok(Some(Duration::from_secs(3630)))),
        ("2562047h47m16.854775807s", Ok(None)),
        ("2d", Err("want None or a duration such as 90s, 10m or 2h")),
        ("0", Err("want None or a duration such as 90s, 10m or 2h")),
        (
            "2d0s",
            Err("want None or a duration such as 90s, 10m or 2h"),
        ),
        ("10g", Err("want None or a duration such as 90s, 10m or 2h")),
        (
            "1.5h",
            Err("want None or a duration such as 90s, 10m or 2h"),
        ),
        ("-1s", Err("want None or a duration such as 90s, 10m or 2h")),
        (" 1s", Err("want None or a duration such as 90s, 10m or 2h")),
        ("1h-", Err("unknown unit in duration")),
        ("1|", Err("unknown unit in duration")),
        ("xNone", Err("invalid duration")),
        ("1h2", Err("missing unit in duration")),
        ("9999999999h", Err("invalid duration")),
    ];
    for (value, want) in cases {
        let got = parse_timeout(value, "f");
        let want = want.map_err(|reason| RolloutError::InvalidDuration {
            field: "f",
            value: value.to_owned(),
            reason,
        });
        assert_eq!(got, want, "{value:?}");
    }
}

#[test]
fn go_durations() {
    let cases: Vec<(&str, Result<i64, &str>)> = vec![
        ("0", Ok(0)),
        ("-0", Ok(0)),
        ("+5s", Ok(5_000_000_000)),
        ("-1m", Ok(-60_000_000_000)),
        ("1.5h", Ok(5_400_000_000_000)),
        (".5s", Ok(500_000_000)),
        ("5.s", Ok(5_000_000_000)),
        ("1h1m1s1ms1us1ns", Ok(3_661_001_001_001)),
        ("1µs", Ok(1_000)),
        ("1μs", Ok(1_000)),
        ("0.000000001s", Ok(1)),
        ("2562047h47m16.854775807s", Ok(i64::MAX)),
        ("-2562047h47m16.854775808s", Ok(i64::MIN)),
        ("2562047h47m16.854775808s", Err("invalid duration")),
        ("", Err("invalid duration")),
        ("-", Err("invalid duration")),
        (".s", Err("invalid duration")),
        ("s", Err("invalid duration")),
        ("1", Err("missing unit in duration")),
        ("1d", Err("unknown unit in duration")),
        ("1 s", Err("unknown unit in duration")),
        ("99999999999999999999ns", Err("invalid duration")),
    ];
    for (value, want) in cases {
        assert_eq!(
            go_duration(value),
            want.map(SignedDuration::from_nanos),
            "{value:?}"
        );
    }
}

#[test]
fn thresholds() {
    let cases: Vec<(Option<IntOrString>, Result<Threshold, &str>)> = vec![
        (None, Ok(Threshold::Count(0))),
        (int(3), Ok(Threshold::Count(3))),
        (int(-3), Ok(Threshold::Count(-3))),
        (pct("50%"), Ok(Threshold::Percent(50.0))),
        (pct("12.5%"), Ok(Threshold::Percent(12.5))),
        (pct("1e1%"), Ok(Threshold::Percent(10.0))),
        (pct("200%"), Ok(Threshold::Percent(200.0))),
        (pct("inf%"), Ok(Threshold::Percent(f64::INFINITY))),
        (pct("5"), Err("string is not a percentage")),
        (pct(""), Err("string is not a percentage")),
        (pct("invalid"), Err("string is not a percentage")),
        (pct("%"), Err("not a number before %")),
        (pct("50%%"), Err("not a number before %")),
        (pct("a%"), Err("not a number before %")),
        (pct("1e400%"), Err("not a number before %")),
        (pct("-nan%"), Err("not a number before %")),
        (pct("0x10%"), Err("not a number before %")),
    ];
    for (value, want) in cases {
        let got = parse_threshold(value.as_ref(), "f");
        let want = want.map_err(|reason| RolloutError::InvalidThreshold {
            field: "f",
            value: match &value {
                Some(IntOrString::String(s)) => s.clone(),
                _ => String::new(),
            },
            reason,
        });
        assert_eq!(got, want, "{value:?}");
    }
    // NaN never equals itself: check it apart.
    let nan = parse_threshold(pct("NaN%").as_ref(), "f");
    assert!(
        matches!(nan, Ok(Threshold::Percent(p)) if p.is_nan()),
        "{nan:?}"
    );
}

#[test]
fn parse_strategies() {
    let secs = |n| Some(Duration::from_secs(n));
    let limits = |min_success_secs, deadline, max_failures| Limits {
        min_success_time: Duration::from_secs(min_success_secs),
        progress_deadline: deadline,
        max_failures,
    };
    let cases: Vec<(&str, RolloutStrategy, Strategy)> = vec![
        (
            "default is All without deadline",
            RolloutStrategy::default(),
            Strategy::All {
                progress_deadline: None,
            },
        ),
        (
            "All 90s",
            all("90s"),
            Strategy::All {
                progress_deadline: secs(90),
            },
        ),
        (
            "All ignores invalid minSuccessTime and maxFailures like upstream",
            RolloutStrategy {
                all: Some(RolloutAll {
                    rollout_config: cfg("1h", pct("x"), "bogus"),
                }),
                ..RolloutStrategy::default()
            },
            Strategy::All {
                progress_deadline: secs(3600),
            },
        ),
        (
            "Progressive without details",
            RolloutStrategy {
                type_: "Progressive".into(),
                ..RolloutStrategy::default()
            },
            Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Count(0),
            },
        ),
        (
            "Progressive in full",
            prog(
                cfg("10m", pct("25%"), "90s"),
                int(4),
                &[by_name("canary"), by_index(2)],
            ),
            Strategy::Progressive {
                limits: limits(90, secs(600), Threshold::Percent(25.0)),
                mandatory: vec![
                    GroupSelector::Name("canary".into()),
                    GroupSelector::Index(2),
                ],
                max_concurrency: Threshold::Count(4),
            },
        ),
        (
            "ProgressivePerGroup; a name wins over an index; a negative soak is 0",
            ppg(
                cfg("None", int(1), "-5m"),
                &[
                    MandatoryDecisionGroup {
                        group_name: "a".into(),
                        group_index: 3,
                    },
                    by_index(0),
                ],
            ),
            Strategy::ProgressivePerGroup {
                limits: limits(0, None, Threshold::Count(1)),
                mandatory: vec![GroupSelector::Name("a".into()), GroupSelector::Index(0)],
            },
        ),
        (
            "ProgressivePerGroup ignores the progressive block",
            RolloutStrategy {
                type_: "ProgressivePerGroup".into(),
                progressive: Some(RolloutProgressive {
                    max_concurrency: pct("oops"),
                    ..RolloutProgressive::default()
                }),
                ..RolloutStrategy::default()
            },
            Strategy::ProgressivePerGroup {
                limits: Limits::default(),
                mandatory: vec![],
            },
        ),
    ];
    for (name, input, want) in cases {
        assert_eq!(Strategy::parse(&input), Ok(want), "{name}");
    }
}

#[test]
fn parse_errors() {
    let cases: Vec<(RolloutStrategy, RolloutError, &str)> = vec![
        (
            RolloutStrategy {
                type_: "Canary".into(),
                ..RolloutStrategy::default()
            },
            RolloutError::UnknownType("Canary".into()),
            r#"rolloutStrategy.type "Canary" is not one of All, Progressive, ProgressivePerGroup"#,
        ),
        (
            RolloutStrategy {
                type_: String::new(),
                ..RolloutStrategy::default()
            },
            RolloutError::UnknownType(String::new()),
            r#"rolloutStrategy.type "" is not one of All, Progressive, ProgressivePerGroup"#,
        ),
        (
            all("2d"),
            RolloutError::InvalidDuration {
                field: "rolloutStrategy.all.progressDeadline",
                value: "2d".into(),
                reason: "want None or a duration such as 90s, 10m or 2h",
            },
            r#"rolloutStrategy.all.progressDeadline "2d" is not a valid duration: want None or a duration such as 90s, 10m or 2h"#,
        ),
        (
            prog(cfg("", None, "5"), None, &[]),
            RolloutError::InvalidDuration {
                field: "rolloutStrategy.progressive.minSuccessTime",
                value: "5".into(),
                reason: "missing unit in duration",
            },
            r#"rolloutStrategy.progressive.minSuccessTime "5" is not a valid duration: missing unit in duration"#,
        ),
        (
            prog(cfg("1x", None, ""), None, &[]),
            RolloutError::InvalidDuration {
                field: "rolloutStrategy.progressive.progressDeadline",
                value: "1x".into(),
                reason: "want None or a duration such as 90s, 10m or 2h",
            },
            r#"rolloutStrategy.progressive.progressDeadline "1x" is not a valid duration: want None or a duration such as 90s, 10m or 2h"#,
        ),
        (
            prog(cfg("", pct("3"), ""), None, &[]),
            RolloutError::InvalidThreshold {
                field: "rolloutStrategy.progressive.maxFailures",
                value: "3".into(),
                reason: "string is not a percentage",
            },
            r#"rolloutStrategy.progressive.maxFailures "3" is not a count or a percentage: string is not a percentage"#,
        ),
        (
            prog(cfg("", None, ""), pct("half%"), &[]),
            RolloutError::InvalidThreshold {
                field: "rolloutStrategy.progressive.maxConcurrency",
                value: "half%".into(),
                reason: "not a number before %",
            },
            r#"rolloutStrategy.progressive.maxConcurrency "half%" is not a count or a percentage: not a number before %"#,
        ),
        (
            ppg(cfg("", None, "soon"), &[]),
            RolloutError::InvalidDuration {
                field: "rolloutStrategy.progressivePerGroup.minSuccessTime",
                value: "soon".into(),
                reason: "invalid duration",
            },
            r#"rolloutStrategy.progressivePerGroup.minSuccessTime "soon" is not a valid duration: invalid duration"#,
        ),
        (
            ppg(cfg("forever", None, ""), &[]),
            RolloutError::InvalidDuration {
                field: "rolloutStrategy.progressivePerGroup.progressDeadline",
                value: "forever".into(),
                reason: "want None or a duration such as 90s, 10m or 2h",
            },
            r#"rolloutStrategy.progressivePerGroup.progressDeadline "forever" is not a valid duration: want None or a duration such as 90s, 10m or 2h"#,
        ),
        (
            ppg(cfg("", pct("x%"), ""), &[]),
            RolloutError::InvalidThreshold {
                field: "rolloutStrategy.progressivePerGroup.maxFailures",
                value: "x%".into(),
                reason: "not a number before %",
            },
            r#"rolloutStrategy.progressivePerGroup.maxFailures "x%" is not a count or a percentage: not a number before %"#,
        ),
    ];
    for (input, want, message) in cases {
        let got = Strategy::parse(&input);
        assert_eq!(got, Err(want), "{input:?}");
        let got = got.err().map(|e| e.to_string());
        assert_eq!(got.as_deref(), Some(message));
    }
}

#[test]
fn parse_for_placement() {
    // (name, strategy, clustersPerDecisionGroup, want)
    type Row = (
        &'static str,
        RolloutStrategy,
        Option<IntOrString>,
        Result<Strategy, RolloutError>,
    );
    let per_group_100 = pct("100%");
    let cases: Vec<Row> = vec![
        (
            "unset maxConcurrency takes clustersPerDecisionGroup",
            prog(cfg("", None, ""), None, &[]),
            pct("25%"),
            Ok(Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Percent(25.0),
            }),
        ),
        (
            "so do 0 and \"\"",
            prog(cfg("", None, ""), int(0), &[]),
            int(5),
            Ok(Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Count(5),
            }),
        ),
        (
            "\"\" too",
            prog(cfg("", None, ""), pct(""), &[]),
            per_group_100.clone(),
            Ok(Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Percent(100.0),
            }),
        ),
        (
            "a progressive strategy without its block",
            RolloutStrategy {
                type_: "Progressive".into(),
                ..RolloutStrategy::default()
            },
            int(2),
            Ok(Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Count(2),
            }),
        ),
        (
            "a set maxConcurrency stays",
            prog(cfg("", None, ""), int(3), &[]),
            per_group_100.clone(),
            Ok(Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Count(3),
            }),
        ),
        (
            "other types are untouched",
            all(""),
            per_group_100,
            Ok(Strategy::All {
                progress_deadline: None,
            }),
        ),
        (
            "no placement value: all clusters",
            prog(cfg("", None, ""), None, &[]),
            None,
            Ok(Strategy::Progressive {
                limits: Limits::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Count(0),
            }),
        ),
        (
            "a bad placement value",
            prog(cfg("", None, ""), None, &[]),
            pct("some"),
            Err(RolloutError::InvalidThreshold {
                field: CLUSTERS_PER_GROUP_FIELD,
                value: "some".into(),
                reason: "string is not a percentage",
            }),
        ),
    ];
    for (name, input, per_group, want) in cases {
        assert_eq!(
            Strategy::parse_for_placement(&input, per_group.as_ref()),
            want,
            "{name}"
        );
    }
}

#[test]
fn mandatory_selectors() {
    // upstream's TestDecisionGroupsToGroupKeys: a name wins over an index.
    let cases: Vec<(MandatoryDecisionGroup, GroupSelector)> = vec![
        (
            MandatoryDecisionGroup {
                group_name: "group1".into(),
                group_index: 1,
            },
            GroupSelector::Name("group1".into()),
        ),
        (by_name("group2"), GroupSelector::Name("group2".into())),
        (by_index(2), GroupSelector::Index(2)),
        (MandatoryDecisionGroup::default(), GroupSelector::Index(0)),
    ];
    for (input, want) in cases {
        assert_eq!(GroupSelector::from(&input), want, "{input:?}");
    }
}
