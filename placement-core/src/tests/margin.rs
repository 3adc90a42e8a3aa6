//! The margin: which score changes a placement's last pass can judge without a new pass, as a
//! table of verdicts, and as a property against the truth (a new pass at every change).

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::fixtures::*;
use crate::margin::Verdict;
use crate::snapshot::{MaxScoreValidity, ScoreFields};
use crate::{Margin, Outcome, schedule};

fn addon_exact(n: u32, rate_limit: &str) -> Value {
    json!({"numberOfClusters": n, "scoreRateLimit": rate_limit, "prioritizerPolicy": {"mode": "Exact",
        "configurations": [{"scoreCoordinate": {"type": "AddOn",
            "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}})
}

/// Clusters c1..c5 with scores 90, 80, 50, 40, 10.
fn fleet() -> World {
    let mut w = World::new((1..=5).map(|i| cluster(&format!("c{i}"))).collect());
    for (i, v) in [90, 80, 50, 40, 10].into_iter().enumerate() {
        w.score(score(&format!("c{}", i + 1), "r", &[("s", v)], None));
    }
    w
}

/// Judges `cluster`'s score becoming `value` and applies it to the world.
fn change(w: &mut World, m: &mut Margin, cluster: &str, value: i32) -> Verdict {
    let old = w.snapshot.score(cluster, "r").cloned();
    let new = score(cluster, "r", &[("s", value)], None);
    let v = m.judge(
        cluster,
        "r",
        old.as_ref(),
        Some(&new),
        MaxScoreValidity::default(),
        now(),
    );
    w.score(new);
    v
}

fn settled(w: &mut World, spec: Value) -> (ocm_api::Placement, Outcome) {
    let mut p = placement("ns", "p", spec);
    let out = w.apply(&mut p);
    (p, out)
}

/// A case: what it shows, the placement's spec, the hub's score fields, and the changes in
/// order with the verdict each gets.
type Case = (
    &'static str,
    Value,
    ScoreFields,
    Vec<(&'static str, i32, Verdict)>,
);

/// A placement that gets no margin: what it shows, its spec, an annotation.
type Unjudged = (&'static str, Value, Option<(&'static str, &'static str)>);

#[test]
fn score_changes_judged_against_the_selection() {
    let window_end = now() + jiff::SignedDuration::from_secs(60);
    let cases: Vec<Case> = vec![
        (
            "outside the selection, below its lowest: nothing; reaching it (a tie): a pass",
            addon_exact(2, "1m"),
            ScoreFields::Stored,
            vec![
                ("c3", 60, Verdict::Nothing),
                ("c5", 79, Verdict::Nothing),
                ("c4", 80, Verdict::Pass),
            ],
        ),
        (
            "inside it: the shown score waits for the window; falling to the best outside: a pass",
            addon_exact(2, "1m"),
            ScoreFields::Stored,
            vec![
                ("c1", 85, Verdict::PassAt(window_end)),
                ("c2", 51, Verdict::PassAt(window_end)),
                ("c2", 50, Verdict::Pass),
            ],
        ),
        (
            "changes outside add up: the best outside is what they raised it to",
            addon_exact(2, "1m"),
            ScoreFields::Stored,
            vec![
                ("c3", 70, Verdict::Nothing),
                ("c4", 75, Verdict::Nothing),
                ("c2", 76, Verdict::PassAt(window_end)),
                ("c2", 75, Verdict::Pass),
            ],
        ),
        (
            "no window (scoreRateLimit 0s): a shown score is a pass at once",
            addon_exact(2, "0s"),
            ScoreFields::Stored,
            vec![("c1", 85, Verdict::Pass), ("c3", 20, Verdict::Nothing)],
        ),
        (
            "a hub without the score fields shows no score: nothing",
            addon_exact(2, "1m"),
            ScoreFields::Absent,
            // A tie inside the selection moves nothing; one with the best outside does.
            vec![
                ("c1", 85, Verdict::Nothing),
                ("c1", 80, Verdict::Nothing),
                ("c1", 50, Verdict::Pass),
            ],
        ),
        (
            "the same value again: nothing",
            addon_exact(2, "1m"),
            ScoreFields::Stored,
            vec![("c1", 90, Verdict::Nothing), ("c3", 50, Verdict::Nothing)],
        ),
        (
            "every feasible cluster selected: no change outside can matter",
            json!({"prioritizerPolicy": {"mode": "Exact", "configurations": [{"scoreCoordinate":
                {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]},
                "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"x": "y"}}}}]}),
            ScoreFields::Absent,
            vec![
                ("c1", -100, Verdict::Nothing),
                ("c5", 100, Verdict::Nothing),
            ],
        ),
    ];
    for (what, spec, fields, changes) in cases {
        let mut w = fleet();
        w.snapshot.set_score_fields(fields);
        let (_, out) = settled(&mut w, spec);
        assert_eq!(
            selected(&out),
            ["c1", "c2"][..selected(&out).len()],
            "{what}"
        );
        let mut m = out.margin.clone().expect(what);
        for (c, v, want) in changes {
            assert_eq!(change(&mut w, &mut m, c, v), want, "{what}: {c} -> {v}");
        }
    }
}

#[test]
fn weights_and_other_prioritizers_count() {
    // Weight 2 on the AddOn score, 1 on allocatable CPU (normalised over the candidates):
    // a change moves a total by twice the score's change, and the rest bounds the others.
    let mut w = World::new(
        [("c1", "8"), ("c2", "4"), ("c3", "2")]
            .into_iter()
            .map(|(n, cpu)| cluster(n).resources(cpu, "1Gi"))
            .collect(),
    );
    for (c, v) in [("c1", 50), ("c2", 40), ("c3", 0)] {
        w.score(score(c, "r", &[("s", v)], None));
    }
    w.snapshot.set_score_fields(ScoreFields::Absent);
    let (_, out) = settled(
        &mut w,
        json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 2},
            {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": 1}]}}),
    );
    assert_eq!(selected(&out), ["c1"]);
    // Totals: c1 2×50 + 100 = 200, c2 2×40 + x, c3 0 − 100; c2's rest is at most 100.
    let total = |o: &Outcome, c: &str| o.totals[o.filtered.iter().position(|n| &**n == c).unwrap()];
    let c2_rest = total(&out, "c2") - 80;
    let mut m = out.margin.clone().unwrap();
    // c2 at 49: 98 + rest < 200 as long as rest < 102.
    let want = if 98 + c2_rest >= 200 {
        Verdict::Pass
    } else {
        Verdict::Nothing
    };
    assert_eq!(change(&mut w, &mut m, "c2", 49), want);
    // c2 at 100: 200 + its rest, below c1's 200 while its CPU is below c1's.
    assert_eq!(change(&mut w, &mut m, "c2", 100), Verdict::Nothing);
    // c1 at 10: 120, below what c2 may now reach.
    assert_eq!(change(&mut w, &mut m, "c1", 10), Verdict::Pass);
    let truth = w.schedule(&placement("ns", "p", json!({"numberOfClusters": 1,
        "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 2},
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": 1}]}})));
    assert_eq!(selected(&truth), ["c2"]);
}

#[test]
fn no_margin_where_the_selection_reads_scores_otherwise() {
    let spread = {
        let mut s = addon_exact(2, "1m");
        s["spreadPolicy"] = json!({"spreadConstraints": [{"topologyKey": "zone",
            "topologyKeyType": "Label", "maxSkew": 1}]});
        s
    };
    let cel = {
        let mut s = addon_exact(2, "1m");
        s["predicates"] = json!([{"requiredClusterSelector": {"celSelector": {"celExpressions":
            ["managedCluster.scores(\"r\").all(s, s.value > 0)"]}}}]);
        s
    };
    let no_addon = json!({"numberOfClusters": 2});
    let cases: Vec<Unjudged> = vec![
        ("spread constraints", spread, None),
        ("a CEL predicate", cel, None),
        (
            "stability controls",
            addon_exact(2, "1m"),
            Some((
                "scheduling.ocm-placement.io/stability",
                "{\"minScoreGain\": 5}",
            )),
        ),
        ("no AddOn prioritizer", no_addon, None),
        ("misconfigured", json!({"numberOfClusters": -1}), None),
    ];
    for (what, spec, annotation) in cases {
        let mut w = fleet();
        let mut p = placement("ns", "p", spec);
        if let Some((k, v)) = annotation {
            p.metadata.annotations = Some([(k.to_owned(), v.to_owned())].into());
        }
        assert_eq!(w.apply(&mut p).margin, None, "{what}");
    }
    // A score the pass read had expired (a Warning): no margin either.
    let mut w = fleet();
    w.score(score("c3", "r", &[("s", 50)], Some(at(-10))));
    let (_, out) = settled(&mut w, addon_exact(2, "1m"));
    assert_eq!(out.margin, None, "an expired score");
}

#[test]
fn values_that_are_not_plain_are_a_pass() {
    let mut w = fleet();
    let (_, out) = settled(&mut w, addon_exact(2, "1m"));
    let m = out.margin.unwrap();
    let old = score("c5", "r", &[("s", 10)], None);
    let bound = MaxScoreValidity::default();
    let cases: Vec<(&str, Option<ocm_api::AddOnPlacementScore>)> = vec![
        ("deleted", None),
        (
            "expired",
            Some(score("c5", "r", &[("s", 11)], Some(at(-1)))),
        ),
        (
            "a repeated item",
            Some(score("c5", "r", &[("s", 11), ("s", 12)], None)),
        ),
        ("out of range", Some(score("c5", "r", &[("s", 101)], None))),
        (
            // The old one never expires; the new one does: the pass sets its timer.
            "counts for less long",
            Some(score("c5", "r", &[("s", 11)], Some(at(30)))),
        ),
    ];
    for (what, new) in cases {
        let mut m = m.clone();
        let v = m.judge("c5", "r", Some(&old), new.as_ref(), bound, now());
        assert_eq!(v, Verdict::Pass, "{what}");
    }
    // An item the placement does not read: nothing moves.
    let mut m2 = m.clone();
    let other = score("c5", "r", &[("s", 10), ("t", 99)], None);
    assert_eq!(
        m2.judge("c5", "r", Some(&old), Some(&other), bound, now()),
        Verdict::Nothing
    );
}

/// A fleet, a placement, and a run of score changes.
#[derive(Debug, Clone)]
struct Run {
    scores: Vec<i32>,
    cpu: Vec<u8>,
    n: Option<u8>,
    additive: bool,
    cpu_weight: i8,
    weight: i8,
    rate_limit: bool,
    stored: bool,
    settle: bool,
    changes: Vec<(usize, i32)>,
}

fn run() -> impl Strategy<Value = Run> {
    (2usize..9)
        .prop_flat_map(|k| {
            (
                proptest::collection::vec(-100i32..=100, k),
                proptest::collection::vec(1u8..16, k),
                proptest::option::of(0u8..6),
                any::<bool>(),
                -2i8..=2,
                prop_oneof![Just(1i8), Just(2), Just(-1), Just(3)],
                (any::<bool>(), any::<bool>(), any::<bool>()),
                proptest::collection::vec((0..k, -100i32..=100), 1..24),
            )
        })
        .prop_map(
            |(
                scores,
                cpu,
                n,
                additive,
                cpu_weight,
                weight,
                (rate_limit, stored, settle),
                changes,
            )| Run {
                scores,
                cpu,
                n,
                additive,
                cpu_weight,
                weight,
                rate_limit,
                stored,
                settle,
                changes,
            },
        )
}

fn spec(r: &Run) -> Value {
    let mut configs = vec![json!({"scoreCoordinate": {"type": "AddOn",
        "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": r.weight})];
    if r.cpu_weight != 0 {
        configs.push(json!({"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": r.cpu_weight}));
    }
    let mut s = json!({"scoreRateLimit": if r.rate_limit { "1m" } else { "0s" },
        "prioritizerPolicy": {"mode": if r.additive { "Additive" } else { "Exact" },
        "configurations": configs}});
    if let Some(n) = r.n {
        s["numberOfClusters"] = json!(n);
    }
    s
}

/// A pass, applied; with `settle`, passes until one writes nothing. Its margin.
fn pass(w: &mut World, p: &mut ocm_api::Placement, settle: bool) -> Option<Margin> {
    let mut out = w.apply(p);
    for _ in 0..4 {
        if !settle {
            break;
        }
        let again = w.schedule(p);
        if again.writes.is_empty() {
            return again.margin;
        }
        w.apply_outcome(p, &again);
        out = again;
    }
    out.margin
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whenever the margin says a change needs no pass now, a pass now keeps the same clusters
    /// and, from a hub at rest, writes nothing; when it says "not before the window ends", a
    /// pass now keeps the same clusters. Margins come from each pass as the controller keeps
    /// them, or (`settle`) from the pass that found the hub at rest: a pass that moves the
    /// decisions leaves a margin without the Steady bonus its new clusters get next time,
    /// which only makes it judge more changes a pass.
    #[test]
    fn a_change_judged_without_a_pass_changes_nothing_a_pass_would_write(r in run()) {
        let mut w = World::new(
            r.cpu.iter().enumerate()
                .map(|(i, cpu)| cluster(&format!("c{i}")).resources(&cpu.to_string(), "1Gi"))
                .collect(),
        );
        w.snapshot.set_score_fields(if r.stored { ScoreFields::Stored } else { ScoreFields::Absent });
        for (i, v) in r.scores.iter().enumerate() {
            w.score(score(&format!("c{i}"), "r", &[("s", *v)], None));
        }
        let mut p = placement("ns", "p", spec(&r));
        let mut margin = pass(&mut w, &mut p, r.settle);
        for &(i, v) in &r.changes {
            let c = format!("c{i}");
            let old = w.snapshot.score(&c, "r").cloned();
            let new = score(&c, "r", &[("s", v)], None);
            let verdict = margin.as_mut().map_or(Verdict::Pass, |m| {
                m.judge(&c, "r", old.as_ref(), Some(&new), MaxScoreValidity::default(), now())
            });
            w.snapshot.upsert_score(Arc::new(new));
            let truth = schedule(&w.snapshot, &p, now());
            if verdict == Verdict::Pass {
                margin = pass(&mut w, &mut p, r.settle);
                continue;
            }
            let mut before: Vec<String> = w.snapshot.decisions_of("ns", "p").iter()
                .flat_map(|d| crate::snapshot::decision_entries(d))
                .map(|e| e.cluster_name.clone()).collect();
            before.sort();
            let mut after: Vec<String> = truth.selected.iter().map(|n| n.to_string()).collect();
            after.sort();
            prop_assert_eq!(before, after, "{} -> {}: {:?}", c, v, verdict);
            if verdict == Verdict::Nothing && r.settle {
                prop_assert!(truth.writes.is_empty(), "{c} -> {v}: {:?}", truth.writes);
            }
        }
    }
}
