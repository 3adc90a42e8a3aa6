//! The bound on score validity (a deliberate difference from upstream): a score that sets
//! `validUntil` counts for at most `MaxScoreValidity` after the hub last accepted a write of
//! it, whatever its `validUntil` says. An unset `validUntil` never expires, as upstream.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::fixtures::*;
use crate::snapshot::MaxScoreValidity;
use crate::{CappedScore, Code, EventType, Outcome};

const TEN_YEARS: i64 = 10 * 365 * 24 * 3600;

fn ts(offset_secs: i64) -> Timestamp {
    at(offset_secs).0
}

/// One cluster `a` with score `a/r` item `s` = 40, written `written` seconds from now
/// (`None`: the object does not say, a file), `validUntil` `valid_until` seconds from now,
/// scheduled at now with `bound` seconds of validity (`None`: off).
fn run(written_at: Option<i64>, valid_until: Option<i64>, bound: Option<i64>) -> Outcome {
    let mut w = World::new(vec![cluster("a")]);
    w.snapshot
        .set_max_score_validity(MaxScoreValidity(bound.map(SignedDuration::from_secs)));
    let s = score("a", "r", &[("s", 40)], valid_until.map(at));
    let s = match written_at {
        Some(o) => written(s, at(o)),
        None => s,
    };
    w.snapshot.upsert_score(Arc::new(s));
    w.schedule(&placement("ns", "p", json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}})))
}

#[test]
fn validity_is_the_earlier_of_valid_until_and_write_plus_bound() {
    // (written, validUntil, bound) -> (value, ended by the bound at (validity_capped),
    // requeue at). A capped score that still counts is noted, not reported: the bound has
    // changed nothing yet.
    type Case = (
        Option<i64>,
        Option<i64>,
        Option<i64>,
        i64,
        Option<i64>,
        Option<i64>,
    );
    let cases: &[(&str, Case)] = &[
        (
            "within the bound",
            (Some(-60), Some(120), Some(600), 40, None, Some(121)),
        ),
        (
            "ten years ahead, fresh",
            (Some(-60), Some(TEN_YEARS), Some(600), 40, None, Some(541)),
        ),
        (
            "ten years ahead, stale",
            (Some(-700), Some(TEN_YEARS), Some(600), 0, Some(-100), None),
        ),
        // Unset: upstream's "never expires" (a static score), whatever the bound.
        ("unset, fresh", (Some(-60), None, Some(600), 40, None, None)),
        (
            "unset, written long ago",
            (Some(-TEN_YEARS), None, Some(600), 40, None, None),
        ),
        // A write time ahead of ours (the apiserver's clock ahead, or forged) counts as now:
        // the bound then never ends the score at this instant, as an unset one.
        (
            "written in the future",
            (Some(3600), Some(TEN_YEARS), Some(600), 40, None, Some(601)),
        ),
        (
            "exactly at the bound (expiry is strict)",
            (Some(-600), Some(TEN_YEARS), Some(600), 40, None, Some(1)),
        ),
        (
            "expired by its own validUntil first",
            (Some(-60), Some(-5), Some(600), 0, None, None),
        ),
        (
            "bound off: upstream",
            (
                Some(-700),
                Some(TEN_YEARS),
                None,
                40,
                None,
                Some(TEN_YEARS + 1),
            ),
        ),
        (
            "bound off, unset: never expires",
            (Some(-700), None, None, 40, None, None),
        ),
        // A file without a write time: the bound counts from now, so it never ends a score
        // at this instant and adds no requeue (a far validUntil is still noted).
        (
            "file, ten years ahead",
            (None, Some(TEN_YEARS), Some(600), 40, None, None),
        ),
        ("file, unset", (None, None, Some(600), 40, None, None)),
        (
            "file, within the bound",
            (None, Some(120), Some(600), 40, None, Some(121)),
        ),
    ];
    // Capped (a validUntil beyond the bound), whether or not it still counts.
    const NOTED: &[&str] = &[
        "ten years ahead, fresh",
        "ten years ahead, stale",
        "written in the future",
        "exactly at the bound (expiry is strict)",
        "file, ten years ahead",
    ];
    for (name, (written_at, valid_until, bound, value, capped, requeue)) in cases {
        let o = run(*written_at, *valid_until, *bound);
        assert_eq!(
            prioritizer(&o, "AddOn/r/s"),
            [Some(*value)],
            "{name}: value"
        );
        let want: Vec<CappedScore> = capped
            .iter()
            .map(|until| CappedScore {
                cluster: "a".into(),
                resource: "r".into(),
                valid_until: valid_until.map(ts),
                until: ts(*until),
            })
            .collect();
        assert_eq!(o.validity_capped, want, "{name}: ended by the bound");
        let noted = o.notes.iter().any(|n| n.contains("validity capped"));
        assert_eq!(noted, NOTED.contains(name), "{name}: noted: {:?}", o.notes);
        assert_eq!(o.requeue_at, requeue.map(ts), "{name}: requeue");
        let expired = *value == 0;
        assert_eq!(
            o.status.code == Code::Warning,
            expired,
            "{name}: expired warning"
        );
        if expired {
            assert_eq!(
                o.status.message, "AddOnPlacementScores a/r expired",
                "{name}"
            );
        }
    }
}

#[test]
fn capped_scores_are_noted_once_per_score_and_make_one_warning_event_once_ended() {
    let mut w = World::new(vec![cluster("a"), cluster("b")]);
    // Written 700 s ago: the 10-minute bound ended them 100 s ago.
    for c in ["a", "b"] {
        w.snapshot.upsert_score(Arc::new(written(
            score(c, "r", &[("s", 40), ("t", 1)], Some(at(TEN_YEARS))),
            at(-700),
        )));
    }
    // Two prioritizers read the same object: one entry per cluster and object.
    let o = w.schedule(&placement("ns", "p", json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1},
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "t"}}, "weight": 1}]}})));
    let clusters: Vec<&str> = o
        .validity_capped
        .iter()
        .map(|c| c.cluster.as_str())
        .collect();
    assert_eq!(clusters, ["a", "b"]);
    assert!(
        o.notes.iter().any(|n| n.starts_with(
            "AddOn/r/s: validity capped (10m after it was written): a/r (validUntil 2036-"
        )),
        "{:?}",
        o.notes
    );
    let e = crate::plan::validity_capped_event(&o.validity_capped).expect("an event");
    assert_eq!(
        (e.type_, e.reason),
        (EventType::Warning, "ScoreValidityCapped")
    );
    assert!(e.decision.is_empty(), "about the placement, no decision");
    assert!(
        e.note.contains("a/r (validUntil 2036-") && e.note.contains("b/r"),
        "{}",
        e.note
    );
    assert!(
        e.note.contains("counts until 2026-06-01T11:58:20Z"),
        "{}",
        e.note
    );
    assert!(crate::plan::validity_capped_event(&[]).is_none());
    // The default bound is 10 minutes.
    assert_eq!(
        crate::Snapshot::new().max_score_validity(),
        MaxScoreValidity(Some(SignedDuration::from_mins(10)))
    );
}

#[test]
fn a_fleet_of_capped_scores_is_noted_for_the_first_ten_and_counted() {
    let names: Vec<String> = (0..15).map(|i| format!("c{i:02}")).collect();
    let mut w = World::new(names.iter().map(|n| cluster(n)).collect());
    // Added in reverse name order, and written long enough ago for the bound to have ended
    // them: the list still comes out sorted.
    for n in names.iter().rev() {
        w.snapshot.upsert_score(Arc::new(written(
            score(n, "r", &[("s", 40)], Some(at(TEN_YEARS))),
            at(-700),
        )));
    }
    let o = w.schedule(&placement("ns", "p", json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}})));
    let clusters: Vec<&str> = o
        .validity_capped
        .iter()
        .map(|c| c.cluster.as_str())
        .collect();
    assert_eq!(
        clusters,
        names.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let capped: Vec<&String> = o
        .notes
        .iter()
        .filter(|n| n.contains("validity capped"))
        .collect();
    assert_eq!(capped.len(), 11, "{capped:?}");
    assert!(capped[0].contains(": c00/r (validUntil "), "{capped:?}");
    assert_eq!(
        capped[10],
        "AddOn/r/s: validity capped (10m after it was written) for 5 more scores"
    );
}

/// A renewal (same items, counts at least as long, the old version still counting) changes
/// no pass before the old version's end, for which every placement that used it has a timer.
#[test]
fn a_renewal_that_changes_no_item_and_ends_no_sooner_changes_nothing() {
    use crate::prioritize::addon::renewal_changes_nothing;
    use ocm_api::AddOnPlacementScore;

    // A version of score `a/r` with item `s` = `value`, `validUntil` `valid_until` seconds
    // from now, written `written_at` seconds from now (`None`: the object does not say).
    let version = |value: i32, valid_until: Option<i64>, written_at: Option<i64>| {
        let s = score("a", "r", &[("s", value)], valid_until.map(at));
        match written_at {
            Some(w) => written(s, at(w)),
            None => s,
        }
    };
    let bound = MaxScoreValidity(Some(SignedDuration::from_mins(10)));
    let off = MaxScoreValidity(None);
    // (old version, new version (written now), bound) -> a renewal that changes nothing
    type Case = (
        &'static str,
        AddOnPlacementScore,
        AddOnPlacementScore,
        MaxScoreValidity,
        bool,
    );
    let cases: &[Case] = &[
        (
            "validUntil moved later",
            version(40, Some(60), Some(-60)),
            version(40, Some(120), Some(0)),
            bound,
            true,
        ),
        (
            "the same validUntil",
            version(40, Some(60), Some(-60)),
            version(40, Some(60), Some(0)),
            bound,
            true,
        ),
        (
            "a value changed",
            version(40, Some(60), Some(-60)),
            version(41, Some(120), Some(0)),
            bound,
            false,
        ),
        (
            "validUntil moved earlier",
            version(40, Some(120), Some(-60)),
            version(40, Some(60), Some(0)),
            bound,
            false,
        ),
        (
            "the old one had expired",
            version(40, Some(-5), Some(-60)),
            version(40, Some(120), Some(0)),
            bound,
            false,
        ),
        (
            "the bound had ended the old one",
            version(40, Some(TEN_YEARS), Some(-700)),
            version(40, Some(TEN_YEARS), Some(0)),
            bound,
            false,
        ),
        (
            "far ahead, renewed within the bound",
            version(40, Some(TEN_YEARS), Some(-60)),
            version(40, Some(TEN_YEARS), Some(0)),
            bound,
            true,
        ),
        (
            "unset: never ends, nor does the new one",
            version(40, None, Some(-60)),
            version(40, None, Some(0)),
            bound,
            true,
        ),
        (
            "unset without a bound",
            version(40, None, Some(-60)),
            version(40, None, Some(0)),
            off,
            true,
        ),
        (
            "never ending before, ending now",
            version(40, None, Some(-60)),
            version(40, Some(120), Some(0)),
            off,
            false,
        ),
        (
            "no write times: the bound counts from now for both",
            version(40, Some(TEN_YEARS), None),
            version(40, Some(TEN_YEARS), None),
            bound,
            true,
        ),
        (
            "no status before",
            AddOnPlacementScore {
                status: None,
                ..version(40, None, Some(-60))
            },
            version(40, None, Some(0)),
            bound,
            false,
        ),
    ];
    for (name, old, new, bound, want) in cases {
        let got = renewal_changes_nothing(Some(old), Some(new), *bound, ts(0));
        assert_eq!(got, *want, "{name}");
    }
    assert!(!renewal_changes_nothing(
        None,
        Some(&version(1, None, Some(0))),
        bound,
        ts(0)
    ));
}
