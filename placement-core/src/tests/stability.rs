//! The stability controls (ours): replacements held by gain, by time selected and by an hourly
//! budget; hard changes applied at once; the state on the hub, written only with a move and
//! read back after a restart.

use std::sync::Arc;

use jiff::Timestamp;
use serde_json::json;

use super::fixtures::*;
use crate::plan::Write;
use crate::stability::{self, STATE_ANNOTATION, State};
use crate::{Code, Outcome, schedule};

fn t(offset_secs: i64) -> Timestamp {
    at(offset_secs).0
}

/// Clusters `a`..: score `r/s` of each as given; every cluster has env=prod unless listed in
/// `dev`.
fn world(scores: &[(&str, i32)]) -> World {
    let mut w = World::new(
        scores
            .iter()
            .map(|(c, _)| cluster(c).label("env", "prod"))
            .collect(),
    );
    for (c, v) in scores {
        w.score(score(c, "r", &[("s", *v)], None));
    }
    w
}

fn rescore(w: &mut World, c: &str, v: i32) {
    w.score(score(c, "r", &[("s", v)], None));
}

/// `numberOfClusters` n, Exact mode with the AddOn prioritizer, env=prod, and the stability
/// annotation `policy` (none when `None`).
fn stable(n: i32, policy: Option<serde_json::Value>) -> ocm_api::Placement {
    let mut p = placement(
        "ns",
        "p",
        json!({
            "numberOfClusters": n,
            "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"env": "prod"}}}}],
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]},
        }),
    );
    if let Some(policy) = policy {
        p.metadata.annotations = Some(
            [(stability::ANNOTATION.to_owned(), policy.to_string())]
                .into_iter()
                .collect(),
        );
    }
    p
}

/// Schedules at `at` and applies the outcome as the controller would.
fn pass(w: &mut World, p: &mut ocm_api::Placement, at: Timestamp) -> Outcome {
    let o = schedule(&w.snapshot, p, at);
    w.apply_outcome(p, &o);
    o
}

fn held(o: &Outcome) -> Vec<String> {
    o.held.iter().map(ToString::to_string).collect()
}

fn state_of(w: &World) -> State {
    State::read(&w.snapshot.decisions_of("ns", "p"))
}

#[test]
fn a_bad_policy_is_a_misconfiguration_that_names_the_problem() {
    let cases: &[(&str, &str)] = &[
        (
            "{\"minScoreGain\": -1}",
            "minScoreGain must be between 0 and",
        ),
        ("{\"minScoreGain\": \"x\"}", "invalid type"),
        (
            "{\"minSelectedDuration\": \"5 minutes\"}",
            "minSelectedDuration must be",
        ),
        ("{\"minSelectedDuration\": \"169h\"}", "at most 168h"),
        ("{\"maxScoreMovesPerHour\": -2}", "invalid value"),
        ("{\"minScoreGian\": 3}", "unknown field `minScoreGian`"),
        ("[1]", "must be a JSON object"),
        ("not json", "expected"),
    ];
    for (text, want) in cases {
        let mut w = world(&[("a", 10)]);
        let mut p = stable(1, None);
        p.metadata.annotations = Some(
            [(stability::ANNOTATION.to_owned(), (*text).to_owned())]
                .into_iter()
                .collect(),
        );
        let o = pass(&mut w, &mut p, now());
        assert_eq!(o.status.code, Code::Misconfigured, "{text}");
        assert!(o.selected.is_empty(), "{text}");
        let (status, reason, message) = condition(&o, "PlacementMisconfigured");
        assert_eq!((status, reason), ("True", "Misconfigured"), "{text}");
        assert!(
            message.contains(stability::ANNOTATION) && message.contains(want),
            "{text}: {message}"
        );
    }
    // Every field, valid: scheduled.
    let mut w = world(&[("a", 10)]);
    let mut p = stable(
        1,
        Some(json!({"minScoreGain": 5, "minSelectedDuration": "90s", "maxScoreMovesPerHour": 0})),
    );
    assert_eq!(pass(&mut w, &mut p, now()).status.code, Code::Success);
}

#[test]
fn min_score_gain_holds_a_smaller_gain_and_lets_an_equal_one_through() {
    // (gain the newcomer has over the weakest incumbent, minScoreGain) -> moves
    let cases: &[(i32, i64, bool)] = &[
        (29, 30, false),
        (30, 30, true),
        (31, 30, true),
        (1, 0, true),
        (-1, 30, false),
        (100, 30, true),
    ];
    for &(gain, min, moves) in cases {
        let mut w = world(&[("a", 50), ("b", 0), ("c", -50)]);
        let mut p = stable(2, Some(json!({"minScoreGain": min})));
        let o = pass(&mut w, &mut p, now());
        assert_eq!(chosen(&o), ["a", "b"]);
        rescore(&mut w, "c", gain);
        let o = pass(&mut w, &mut p, t(10));
        let want = if moves { ["a", "c"] } else { ["a", "b"] };
        assert_eq!(chosen(&o), want, "gain {gain}, min {min}");
        if moves || gain <= 0 {
            assert!(o.held.is_empty(), "gain {gain}: {:?}", o.held);
        } else {
            assert_eq!(
                held(&o),
                [format!(
                    "c would replace b: gain {gain} < minScoreGain {min}"
                )]
            );
        }
        // The decisions carry the true totals, not the bonus.
        let score_of_b = o
            .decisions
            .iter()
            .flat_map(|d| d.status.iter().flat_map(|s| s.decisions.iter()))
            .find(|e| e.cluster_name == "b")
            .map(|e| e.score);
        if !moves {
            assert_eq!(score_of_b, Some(0));
        }
    }
}

#[test]
fn without_the_annotation_nothing_is_held() {
    let mut w = world(&[("a", 50), ("b", 0), ("c", -50)]);
    let mut p = stable(2, None);
    pass(&mut w, &mut p, now());
    rescore(&mut w, "c", 1);
    let o = pass(&mut w, &mut p, t(10));
    assert_eq!(chosen(&o), ["a", "c"]);
    assert!(o.held.is_empty());
    assert!(
        o.decisions.iter().all(|d| d.metadata.annotations.is_none()),
        "no state without the controls"
    );
}

#[test]
fn hard_changes_apply_at_once_whatever_the_controls() {
    let policy =
        json!({"minScoreGain": 1000, "minSelectedDuration": "1h", "maxScoreMovesPerHour": 0});
    // A filter drops an incumbent: its replacement comes in at once.
    let mut w = world(&[("a", 50), ("b", 40), ("c", -50)]);
    let mut p = stable(2, Some(policy.clone()));
    assert_eq!(chosen(&pass(&mut w, &mut p, now())), ["a", "b"]);
    w.add(cluster("b").label("env", "dev"));
    let o = pass(&mut w, &mut p, t(10));
    assert_eq!(chosen(&o), ["a", "c"]);
    assert!(o.held.is_empty());

    // A deleted cluster.
    let mut w = world(&[("a", 50), ("b", 40), ("c", -50)]);
    let mut p = stable(2, Some(policy.clone()));
    pass(&mut w, &mut p, now());
    w.snapshot.remove_cluster("a");
    assert_eq!(chosen(&pass(&mut w, &mut p, t(10))), ["b", "c"]);

    // More clusters wanted: the best newcomer comes in; fewer: the weakest goes.
    let mut w = world(&[("a", 50), ("b", 40), ("c", -50), ("d", -90)]);
    let mut p = stable(2, Some(policy.clone()));
    assert_eq!(chosen(&pass(&mut w, &mut p, now())), ["a", "b"]);
    rescore(&mut w, "c", 80);
    rescore(&mut w, "d", 90);
    let o = pass(&mut w, &mut p, t(10));
    assert_eq!(chosen(&o), ["a", "b"], "held: {:?}", o.held);
    assert_eq!(o.held.len(), 2, "{:?}", o.held);
    p.spec.number_of_clusters = Some(3);
    assert_eq!(chosen(&pass(&mut w, &mut p, t(20))), ["a", "b", "d"]);
    p.spec.number_of_clusters = Some(1);
    // Fewer: the incumbents rank among themselves by score (d 90 stays).
    assert_eq!(chosen(&pass(&mut w, &mut p, t(30))), ["d"]);
}

#[test]
fn min_selected_duration_holds_a_new_cluster_until_it_has_been_selected_that_long() {
    let mut w = world(&[("a", 50), ("b", 0), ("c", -50)]);
    let mut p = stable(
        2,
        Some(json!({"minScoreGain": 10, "minSelectedDuration": "5m"})),
    );
    pass(&mut w, &mut p, now());
    // Its first decision: every cluster is new, and the state says since when.
    let st = state_of(&w);
    assert_eq!(
        st.selected_since.keys().collect::<Vec<_>>(),
        ["a", "b"],
        "{st:?}"
    );
    // Thirty seconds later c beats b by far: held, and looked at again when b's time is up.
    rescore(&mut w, "c", 90);
    let o = pass(&mut w, &mut p, t(30));
    assert_eq!(chosen(&o), ["a", "b"]);
    assert_eq!(
        held(&o),
        ["c would replace b: b selected 30s ago, less than minSelectedDuration 5m"]
    );
    assert_eq!(o.requeue_at, Some(t(301)));
    assert!(
        o.writes.is_empty(),
        "a held move writes nothing: {:?}",
        o.writes
    );
    // Once b has been selected 5 minutes, the gain decides: c comes in.
    let o = pass(&mut w, &mut p, t(301));
    assert_eq!(chosen(&o), ["a", "c"]);
    assert!(o.held.is_empty());
    // The state written with that move: a is older than 5 minutes (dropped), c is new.
    let st = state_of(&w);
    assert_eq!(
        st.selected_since.into_iter().collect::<Vec<_>>(),
        [("c".to_owned(), t(301))]
    );
    let annotation_writes: Vec<&Write> = o
        .writes
        .iter()
        .map(|pw| &pw.write)
        .filter(|w| matches!(w, Write::Annotations { .. }))
        .collect();
    assert_eq!(annotation_writes.len(), 1, "{:?}", o.writes);
}

#[test]
fn the_hourly_budget_counts_replacements_and_lets_the_best_ones_through() {
    let mut w = world(&[("a", 10), ("b", 0), ("c", -50), ("d", -60)]);
    let mut p = stable(2, Some(json!({"maxScoreMovesPerHour": 1})));
    pass(&mut w, &mut p, now());
    // Both c and d now beat both incumbents; one replacement is allowed: the best newcomer
    // (c) for the weakest incumbent (b).
    rescore(&mut w, "c", 80);
    rescore(&mut w, "d", 70);
    let o = pass(&mut w, &mut p, t(60));
    assert_eq!(chosen(&o), ["a", "c"]);
    assert_eq!(
        held(&o),
        ["d would replace a: 1 score moves in the last hour, maxScoreMovesPerHour 1"]
    );
    assert_eq!(o.requeue_at, Some(t(60 + 3600 + 1)));
    assert_eq!(state_of(&w).score_moves, [t(60)]);
    // The budget is spent for the hour: the next pass holds, and looks again when it frees.
    let o = pass(&mut w, &mut p, t(120));
    assert_eq!(chosen(&o), ["a", "c"]);
    assert_eq!(
        held(&o),
        ["d would replace a: 1 score moves in the last hour, maxScoreMovesPerHour 1"]
    );
    assert_eq!(o.requeue_at, Some(t(60 + 3600 + 1)));
    // An hour after the first move: d comes in.
    let o = pass(&mut w, &mut p, t(3660));
    assert_eq!(chosen(&o), ["c", "d"]);
    assert_eq!(state_of(&w).score_moves, [t(3660)]);
    // A budget of 0: scores never replace.
    let mut w = world(&[("a", 10), ("b", -10)]);
    let mut p = stable(1, Some(json!({"maxScoreMovesPerHour": 0})));
    pass(&mut w, &mut p, now());
    rescore(&mut w, "b", 100);
    assert_eq!(chosen(&pass(&mut w, &mut p, t(10))), ["a"]);
}

#[test]
fn a_placement_at_rest_writes_nothing_and_a_restart_reads_the_state_back() {
    let policy =
        json!({"minScoreGain": 20, "minSelectedDuration": "10m", "maxScoreMovesPerHour": 3});
    let mut w = world(&[("a", 50), ("b", 0), ("c", -50)]);
    let mut p = stable(2, Some(policy));
    let o = pass(&mut w, &mut p, now());
    assert!(!o.writes.is_empty());
    // Scores wander within the gain: nothing moves and nothing is written.
    for (i, v) in [5, -3, 10, 19].iter().enumerate() {
        rescore(&mut w, "c", *v);
        let o = pass(&mut w, &mut p, t(700 + i as i64));
        assert_eq!(chosen(&o), ["a", "b"]);
        assert!(o.writes.is_empty(), "{:?}", o.writes);
        assert_eq!(o.placement_status, p.status.clone().unwrap_or_default());
    }
    // A restarted scheduler: a new snapshot from the same objects decides the same.
    rescore(&mut w, "c", 90);
    let later = t(30);
    let before = schedule(&w.snapshot, &p, later);
    let mut fresh = crate::Snapshot::new();
    fresh.upsert_set(Arc::new(exclusive_set("set")));
    fresh.upsert_binding(&binding("ns", "set"));
    for c in ["a", "b", "c"] {
        let info = w.snapshot.cluster(c).expect("cluster");
        fresh.upsert_cluster(Arc::new((*info.object).clone()));
        let s = w.snapshot.score(c, "r").expect("score").clone();
        fresh.upsert_score(Arc::new(s));
    }
    for d in w.snapshot.decisions_of("ns", "p") {
        fresh.upsert_decision(Arc::new(d.clone()));
    }
    let after = schedule(&fresh, &p, later);
    assert_eq!(before, after);
    assert_eq!(
        held(&after),
        ["c would replace b: b selected 30s ago, less than minSelectedDuration 10m"]
    );
    // An unreadable state only forgets: the gain still holds what it would.
    let mut broken = w.snapshot.decisions_of("ns", "p")[0].clone();
    broken.metadata.annotations = Some(
        [(STATE_ANNOTATION.to_owned(), "{oops".to_owned())]
            .into_iter()
            .collect(),
    );
    assert_eq!(State::read(&[&broken]), State::default());
}

#[test]
fn spread_keeps_its_constraints_under_the_controls() {
    // Two zones; DoNotSchedule maxSkew 1 and two clusters: one per zone, whatever the bonus.
    let mut w = World::new(vec![
        cluster("a").label("env", "prod").label("zone", "z1"),
        cluster("b").label("env", "prod").label("zone", "z1"),
        cluster("c").label("env", "prod").label("zone", "z2"),
    ]);
    for (c, v) in [("a", 50), ("b", 40), ("c", -50)] {
        w.score(score(c, "r", &[("s", v)], None));
    }
    let mut p = stable(2, Some(json!({"minScoreGain": 30})));
    p.spec.spread_policy = serde_json::from_value(json!({"spreadConstraints": [
        {"topologyKey": "zone", "topologyKeyType": "Label", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}))
    .expect("a spread policy");
    let o = pass(&mut w, &mut p, now());
    assert_eq!(chosen(&o), ["a", "c"]);
    // b overtakes a by less than the gain: held; by more: it moves, still one per zone.
    rescore(&mut w, "b", 70);
    let o = pass(&mut w, &mut p, t(10));
    assert_eq!(chosen(&o), ["a", "c"]);
    assert_eq!(held(&o), ["b would replace a: gain 20 < minScoreGain 30"]);
    rescore(&mut w, "b", 90);
    assert_eq!(chosen(&pass(&mut w, &mut p, t(20))), ["b", "c"]);
    // The report shows the true totals.
    let picks: Vec<i64> = pass(&mut w, &mut p, t(30))
        .spread
        .expect("a spread report")
        .picks
        .iter()
        .map(|pk| pk.total)
        .collect();
    assert_eq!(picks, [90, -50]);
}

#[test]
fn a_state_annotation_a_user_planted_far_ahead_cannot_panic() {
    let mut w = world(&[("a", 50), ("b", 0), ("c", 90)]);
    let mut p = stable(
        1,
        Some(json!({"minSelectedDuration": "168h", "maxScoreMovesPerHour": 1})),
    );
    pass(&mut w, &mut p, now());
    let mut d = w.snapshot.decisions_of("ns", "p")[0].clone();
    d.metadata.annotations = Some(
        [(
            STATE_ANNOTATION.to_owned(),
            json!({"selectedSince": {"c": "9999-12-31T23:59:59Z"}, "scoreMoves": ["9999-12-31T23:59:59Z"]})
                .to_string(),
        )]
        .into_iter()
        .collect(),
    );
    w.decision(d);
    let o = pass(&mut w, &mut p, t(10));
    assert_eq!(o.status.code, Code::Success);
    assert_eq!(chosen(&o), ["c"]);
}
