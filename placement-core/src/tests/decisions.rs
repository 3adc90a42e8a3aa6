//! Upstream's unit scenarios for decision objects (open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/scheduling_controller_test.go` and
//! `scheduling_controller_event_test.go`): splitting at 100,
//! names, the writes of a pass and their events, score visibility and its rate limit.

use serde_json::json;

use super::fixtures::*;

#[test]
fn decisions_split_at_100_and_name_from_1() {
    let w = World::new((0..128).map(|i| cluster(&format!("c{i:03}"))).collect());
    let o = w.schedule(&placement("ns", "p", json!({})));
    let counts: Vec<(String, usize)> = o
        .decisions
        .iter()
        .map(|d| {
            (
                d.metadata.name.clone().unwrap(),
                d.status.as_ref().unwrap().decisions.len(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [("p-decision-1".into(), 100), ("p-decision-2".into(), 28)]
    );
    let first = &o.decisions[0].status.as_ref().unwrap().decisions;
    assert!(
        first
            .windows(2)
            .all(|w| w[0].cluster_name < w[1].cluster_name),
        "names sorted"
    );
    let labels = o.decisions[1].metadata.labels.as_ref().unwrap();
    assert_eq!(labels["cluster.open-cluster-management.io/placement"], "p");
    assert_eq!(
        labels["cluster.open-cluster-management.io/decision-group-index"],
        "0"
    );
    assert_eq!(
        labels["cluster.open-cluster-management.io/decision-group-name"],
        ""
    );
    let gs = &o.placement_status.decision_groups;
    assert_eq!(gs.len(), 1);
    assert_eq!(
        (gs[0].decisions.clone(), gs[0].clusters_count),
        (vec!["p-decision-1".to_string(), "p-decision-2".into()], 128)
    );
    assert_eq!(writes(&o), ["create p-decision-1", "create p-decision-2"]);
}

#[test]
fn writes_create_update_label_only_no_change_and_leftovers() {
    let mut w = five();
    let mut p = placement("ns", "p", json!({"numberOfClusters": 2}));
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["create p-decision-1"]);
    // Creating the object and filling its status is one change: one event (upstream adds
    // DecisionUpdate and ScoreUpdate for the status write that completes the create).
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["DecisionCreate"]);

    // Nothing changed: no writes, same status.
    let o = w.schedule(&p);
    assert!(o.writes.is_empty(), "{:?}", writes(&o));
    assert_eq!(Some(&o.placement_status), p.status.as_ref());

    // Only the labels differ (someone edited them): a label write, no events.
    let mut edited = decision("ns", "p", 1, (7, "x"), &[]);
    edited.status = w.snapshot.decisions_of("ns", "p")[0].status.clone();
    w.decision(edited);
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["labels p-decision-1"]);
    assert_eq!(o.events().count(), 0);

    // A user-made object with the placement label is deleted; so is a renamed leftover.
    w.decision(decision("ns", "p", 9, (0, ""), &["c5"]));
    let o = w.apply(&mut p);
    // The selection seen on the hub changed (c5 left), so the scores are refreshed too.
    assert_eq!(writes(&o), ["status p-decision-1 2", "delete p-decision-9"]);
    assert_eq!(
        o.events().last().unwrap().note,
        "Decision p-decision-9 is deleted with placement p in namespace ns"
    );

    // Fewer clusters wanted: a status write, said by DecisionUpdate and the scores of every
    // filtered cluster (with no scoreRateLimit window open: inside one, the scores are said
    // once a window).
    p.spec.number_of_clusters = Some(1);
    p.spec.score_rate_limit = "0s".into();
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["status p-decision-1 1"]);
    let events: Vec<(&str, &str)> = o.events().map(|e| (e.reason, e.note.as_str())).collect();
    assert_eq!(
        events,
        [
            (
                "DecisionUpdate",
                "Decision p-decision-1 is updated with placement p in namespace ns"
            ),
            // Steady adds 100 for the clusters kept from the last pass.
            ("ScoreUpdate", "c1:200 c2:200 c3:100 c4:100 c5:100 "),
        ]
    );
}

#[test]
fn one_score_update_per_pass_however_many_objects_change() {
    // 150 clusters in two objects, then 120, 60 and 140: one or two objects rewritten.
    let mut w = World::new((0..150).map(|i| cluster(&format!("c{i:03}"))).collect());
    // scoreRateLimit 0s: no window, so every status write also says ScoreUpdate.
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 150, "scoreRateLimit": "0s"}),
    );
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["create p-decision-1", "create p-decision-2"]);
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["DecisionCreate", "DecisionCreate"]);

    // Each later pass: DecisionUpdate at most once per existing object it rewrote (and at
    // least once: the clusters change), ScoreUpdate once,
    // DecisionCreate and DecisionDelete for the objects created and deleted.
    for n in [120, 60, 140] {
        p.spec.number_of_clusters = Some(n);
        let o = w.apply(&mut p);
        let summaries = writes(&o);
        let count = |prefix: &str| summaries.iter().filter(|w| w.starts_with(prefix)).count();
        let said = |reason: &str| o.events().filter(|e| e.reason == reason).count();
        assert!(count("status ") >= 1, "{n}: {summaries:?}");
        // (An object whose clusters stay and only their scores move says no DecisionUpdate.)
        let updates = said("DecisionUpdate");
        assert!(
            (1..=count("status ")).contains(&updates),
            "{n}: {summaries:?}"
        );
        assert_eq!(said("ScoreUpdate"), 1, "{n}: {summaries:?}");
        assert_eq!(
            said("DecisionCreate"),
            count("create "),
            "{n}: {summaries:?}"
        );
        assert_eq!(
            said("DecisionDelete"),
            count("delete "),
            "{n}: {summaries:?}"
        );
    }
}

#[test]
fn a_scores_only_write_says_score_update_only() {
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    w.score(score("a", "r", &[("s", 90)], None));
    w.score(score("b", "r", &[("s", 80)], None));
    w.score(score("c", "r", &[("s", 10)], None));
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 2, "scoreRateLimit": "0s", "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}}),
    );
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["create p-decision-1"]);
    // a's score changes, the selection does not: the scores are rewritten; the decision did
    // not change, so no DecisionUpdate (upstream never writes scores at all).
    w.score(score("a", "r", &[("s", 70)], None));
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["status p-decision-1 2"]);
    let events: Vec<(&str, &str)> = o.events().map(|e| (e.reason, e.note.as_str())).collect();
    assert_eq!(events, [("ScoreUpdate", "a:70 b:80 c:10 ")]);
    // The selection changes: DecisionUpdate and ScoreUpdate.
    w.score(score("c", "r", &[("s", 95)], None));
    let o = w.apply(&mut p);
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["DecisionUpdate", "ScoreUpdate"]);
}

#[test]
fn score_update_note_is_cut_before_1000_characters() {
    let w = World::new(
        (0..200)
            .map(|i| cluster(&format!("cluster-{i:04}")))
            .collect(),
    );
    // The note comes with a status write of an existing object: 1 cluster, then all.
    let mut w = w;
    // scoreRateLimit 0s: no window, so every status write also says ScoreUpdate.
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 1, "scoreRateLimit": "0s"}),
    );
    w.apply(&mut p);
    p.spec.number_of_clusters = None;
    let o = w.schedule(&p);
    let note = &o.events().find(|e| e.reason == "ScoreUpdate").unwrap().note;
    assert!(note.ends_with("......"), "{note}");
    assert!(note.len() <= 1006);
    // (Steady now favours the one cluster kept from the first pass.)
    assert!(note.starts_with("cluster-0000:"), "{note}");
    assert!(note.contains(" cluster-0001:100 "), "{note}");
}

#[test]
fn disable_annotation_is_recognised() {
    let mut p = placement("ns", "p", json!({}));
    assert!(!crate::is_disabled(&p));
    p.metadata.annotations = Some(
        [(
            ocm_api::wellknown::annotation::PLACEMENT_DISABLE.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    assert!(crate::is_disabled(&p));
}

#[test]
fn schedule_to_cluster_with_least_decisions() {
    // Upstream's "schedule to cluster with least decisions": other placements use a and b.
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    w.decision(decision("o", "x", 1, (0, ""), &["a", "b"]));
    w.decision(decision("o", "y", 1, (0, ""), &["a"]));
    let o = w.schedule(&placement("ns", "p", json!({"numberOfClusters": 1})));
    assert_eq!(selected(&o), ["c"]);
    // "do not schedule to other cluster even with least decisions": Steady keeps b.
    let mut w2 = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    w2.decision(decision("ns", "p", 1, (0, ""), &["b"]));
    let o = w2.schedule(&placement("ns", "p", json!({"numberOfClusters": 1})));
    // b: Balance 100 (its own decision is not counted) + Steady 100.
    assert_eq!(selected(&o), ["b"]);
}

#[test]
fn score_visibility_sort_scores_and_rate_limit() {
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    for (c, v) in [("a", 10), ("b", 90), ("c", 50)] {
        w.score(score(c, "r", &[("s", v)], None));
    }
    let mut p = placement(
        "ns",
        "p",
        json!({"sortBy": "Score", "scoreRateLimit": "30s", "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 2}]}}),
    );
    let o = w.apply(&mut p);
    let entries = |o: &crate::Outcome| -> Vec<(String, i64)> {
        o.decisions[0]
            .status
            .as_ref()
            .unwrap()
            .decisions
            .iter()
            .map(|e| (e.cluster_name.clone(), e.score))
            .collect()
    };
    // sortBy Score: best first; decisions[].score is the total.
    assert_eq!(
        entries(&o),
        [("b".into(), 180), ("c".into(), 100), ("a".into(), 20)]
    );
    assert_eq!(o.placement_status.last_score_update_time, Some(at(0)));

    // A score-only change inside the window is held, and a reschedule is asked for when it ends.
    w.score(score("a", "r", &[("s", 100)], None));
    let o = w.schedule(&p);
    assert!(o.writes.is_empty());
    assert_eq!(entries(&o)[0].0, "b");
    assert_eq!(o.requeue_at, Some(at(30).0));
    // After the window it is written, in the new order.
    let o = crate::schedule(&w.snapshot, &p, at(30).0);
    assert_eq!(
        entries(&o),
        [("a".into(), 200), ("b".into(), 180), ("c".into(), 100)]
    );
    assert_eq!(o.placement_status.last_score_update_time, Some(at(30)));

    // Without sortBy the entries stay in name order, with their scores.
    p.spec.sort_by = String::new();
    p.status = None;
    let o = w.schedule(&p);
    assert_eq!(
        entries(&o),
        [("a".into(), 200), ("b".into(), 180), ("c".into(), 100)]
    );
    let _ = &mut w;
}

#[test]
fn a_move_inside_the_score_window_writes_fresh_scores_and_keeps_the_window() {
    let mut w = World::new(vec![cluster("a"), cluster("b")]);
    for (c, v) in [("a", 90), ("b", 10)] {
        w.score(score(c, "r", &[("s", v)], None));
    }
    let mut p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 1, "scoreRateLimit": "30s", "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}}),
    );
    let o = w.apply(&mut p);
    assert_eq!(chosen(&o), ["a"]);
    assert_eq!(o.placement_status.last_score_update_time, Some(at(0)));
    let entry = |o: &crate::Outcome| -> (String, i64) {
        let e = &o.decisions[0].status.as_ref().unwrap().decisions[0];
        (e.cluster_name.clone(), e.score)
    };

    // b becomes the best 10 s into the window: the move is written at once with b's fresh
    // score, and the window keeps its start, so the Placement status has nothing new to say.
    w.score(score("b", "r", &[("s", 100)], None));
    let o = crate::schedule(&w.snapshot, &p, at(10).0);
    assert_eq!(chosen(&o), ["b"]);
    assert_eq!(entry(&o), ("b".into(), 100));
    assert_eq!(writes(&o), ["status p-decision-1 1"]);
    assert_eq!(o.placement_status.last_score_update_time, Some(at(0)));
    assert_eq!(Some(&o.placement_status), p.status.as_ref());
    // The move says DecisionUpdate; the scores are said once a window, not per move.
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["DecisionUpdate"]);
    w.apply_outcome(&mut p, &o);

    // A score-only change after the window ended is written and starts the next window.
    w.score(score("b", "r", &[("s", 95)], None));
    let o = crate::schedule(&w.snapshot, &p, at(31).0);
    assert_eq!(entry(&o), ("b".into(), 95));
    assert_eq!(o.placement_status.last_score_update_time, Some(at(31)));
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["ScoreUpdate"]);
}

#[test]
fn a_membership_change_is_written_at_once_even_inside_the_window() {
    let mut w = World::new(vec![cluster("a"), cluster("b")]);
    let mut p = placement("ns", "p", json!({"numberOfClusters": 1}));
    w.apply(&mut p);
    w.add(cluster("a").taint("k", "", "NoSelect", Some(at(0))));
    let o = w.apply(&mut p);
    assert_eq!(chosen(&o), ["b"]);
    assert_eq!(writes(&o), ["status p-decision-1 1"]);
}

/// A hub of OCM 1.2, whose CRDs lack `decisions[].score` and `lastScoreUpdateTime`: what the
/// apiserver keeps of a pass's writes.
fn as_ocm_1_2_keeps_it(w: &mut World, p: &mut crate::Placement) {
    let stored: Vec<crate::PlacementDecision> = w
        .snapshot
        .decisions_of("ns", "p")
        .iter()
        .map(|d| (**d).clone())
        .collect();
    for mut d in stored {
        for e in d.status.iter_mut().flat_map(|s| s.decisions.iter_mut()) {
            e.score = 0;
        }
        w.snapshot.upsert_decision(std::sync::Arc::new(d));
    }
    if let Some(st) = p.status.as_mut() {
        st.last_score_update_time = None;
    }
}

fn scored_world() -> (World, crate::Placement) {
    let mut w = World::new(vec![cluster("a"), cluster("b"), cluster("c")]);
    w.score(score("a", "r", &[("s", 90)], None));
    w.score(score("b", "r", &[("s", 80)], None));
    w.score(score("c", "r", &[("s", 10)], None));
    let p = placement(
        "ns",
        "p",
        json!({"numberOfClusters": 2, "scoreRateLimit": "0s", "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}}),
    );
    (w, p)
}

#[test]
fn a_hub_without_the_score_fields_gets_none_and_no_rewrite_for_them() {
    let (mut w, mut p) = scored_world();
    w.snapshot.set_score_fields(crate::ScoreFields::Absent);
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["create p-decision-1"]);
    let scores: Vec<i64> = o
        .decisions
        .iter()
        .flat_map(|d| {
            d.status
                .iter()
                .flat_map(|s| s.decisions.iter().map(|e| e.score))
        })
        .collect();
    assert_eq!(scores, [0, 0]);
    assert_eq!(o.placement_status.last_score_update_time, None);
    as_ocm_1_2_keeps_it(&mut w, &mut p);

    // Again, and after a score change that keeps the selection: nothing to write or say.
    for value in [90, 70] {
        w.score(score("a", "r", &[("s", value)], None));
        let o = w.apply(&mut p);
        assert_eq!(writes(&o), Vec::<String>::new(), "a at {value}");
        assert_eq!(o.events().count(), 0, "a at {value}");
        assert_eq!(Some(&o.placement_status), p.status.as_ref());
        as_ocm_1_2_keeps_it(&mut w, &mut p);
    }
    // The selection changes: the decision is written (no scores), DecisionUpdate and
    // ScoreUpdate say it, as upstream's controller of OCM 1.2 says it.
    w.score(score("c", "r", &[("s", 95)], None));
    let o = w.apply(&mut p);
    assert_eq!(writes(&o), ["status p-decision-1 2"]);
    let events: Vec<&str> = o.events().map(|e| e.reason).collect();
    assert_eq!(events, ["DecisionUpdate", "ScoreUpdate"]);
    assert_eq!(chosen(&o), ["b", "c"]);
}

#[test]
fn with_the_score_fields_assumed_a_hub_that_drops_them_is_rewritten_every_pass() {
    // Why the core must know: each pass finds the scores it wrote missing.
    let (mut w, mut p) = scored_world();
    w.apply(&mut p);
    for _ in 0..3 {
        as_ocm_1_2_keeps_it(&mut w, &mut p);
        let o = w.apply(&mut p);
        assert_eq!(writes(&o), ["status p-decision-1 2"]);
    }
}
