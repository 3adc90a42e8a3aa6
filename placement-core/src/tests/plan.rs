//! Write ordering: a cluster selected before and after a pass is in some PlacementDecision
//! after every single write (`open-cluster-management-io/ocm#1346`), and the writes end in the
//! desired state.

use serde_json::json;

use super::fixtures::*;
use crate::plan::{self, EventContext, Replay, never_drops_kept};
use ocm_api::PlacementDecision;

fn names(prefix: &str, r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("{prefix}{i:03}")).collect()
}

fn pd(k: u32, clusters: &[String]) -> PlacementDecision {
    let refs: Vec<&str> = clusters.iter().map(String::as_str).collect();
    decision("ns", "p", k, (0, ""), &refs)
}

fn check(existing: Vec<PlacementDecision>, desired: Vec<PlacementDecision>) -> Vec<String> {
    let p = placement("ns", "p", json!({}));
    let ctx = EventContext {
        placement: "p",
        namespace: "ns",
        warning: None,
        score_note: None,
    };
    let refs: Vec<&PlacementDecision> = existing.iter().collect();
    let writes = plan::writes(&p, "ns", &refs, &desired, &ctx);
    never_drops_kept(&refs, &writes).unwrap();
    let mut state = Replay::new(&refs);
    for w in &writes {
        state.apply(&w.write);
    }
    let want = Replay::new(&desired.iter().collect::<Vec<_>>());
    assert_eq!(state, want);
    writes.iter().map(|w| plan::summary(&w.write)).collect()
}

#[test]
fn a_shift_towards_a_new_object_writes_the_receiver_first() {
    // 150 clusters as [100, 50]; a cluster sorting first joins and, chunked by name, the
    // 100th cluster moves to the second object.
    let mut all = names("c", 0..150);
    let existing = vec![pd(1, &all[..100]), pd(2, &all[100..])];
    all.insert(0, "a".into());
    let desired = vec![pd(1, &all[..100]), pd(2, &all[100..])];
    assert_eq!(
        check(existing, desired),
        ["status p-decision-2 51", "status p-decision-1 100"]
    );
}

#[test]
fn a_swap_between_objects_with_room_grows_one_first() {
    let existing = vec![
        pd(1, &["a".into(), "x".into()]),
        pd(2, &["b".into(), "y".into()]),
    ];
    let desired = vec![
        pd(1, &["a".into(), "y".into()]),
        pd(2, &["b".into(), "x".into()]),
    ];
    assert_eq!(
        check(existing, desired),
        [
            "status p-decision-1 3",
            "status p-decision-2 2",
            "status p-decision-1 2"
        ]
    );
}

#[test]
fn a_swap_between_full_objects_parks_clusters_in_a_temporary_object() {
    let a = names("a", 0..100);
    let b = names("b", 0..100);
    let mut a2 = a.clone();
    let mut b2 = b.clone();
    std::mem::swap(&mut a2[0], &mut b2[0]);
    let writes = check(vec![pd(1, &a), pd(2, &b)], vec![pd(1, &a2), pd(2, &b2)]);
    assert_eq!(
        writes,
        [
            "create p-decision-3",
            "status p-decision-1 100",
            "status p-decision-2 100",
            "delete p-decision-3"
        ]
    );
}

#[test]
fn leftovers_are_deleted_after_their_clusters_moved() {
    let existing = vec![pd(1, &["a".into()]), pd(2, &["b".into()])];
    let desired = vec![pd(1, &["a".into(), "b".into()])];
    assert_eq!(
        check(existing, desired),
        ["status p-decision-1 2", "delete p-decision-2"]
    );
}

#[test]
fn regrouping_many_clusters_never_loses_one() {
    // 250 clusters in groups of 100 by name; then every fifth cluster leaves and new ones join
    // across the name range: upstream-style re-chunking moves most clusters.
    let before = names("c", 0..250);
    let existing: Vec<PlacementDecision> = before
        .chunks(100)
        .enumerate()
        .map(|(i, c)| pd(i as u32 + 1, c))
        .collect();
    let mut after: Vec<String> = before
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 != 0)
        .map(|(_, c)| c.clone())
        .collect();
    after.extend((0..120).map(|i| format!("c{:03}x", i * 2)));
    after.sort();
    let desired: Vec<PlacementDecision> = after
        .chunks(100)
        .enumerate()
        .map(|(i, c)| pd(i as u32 + 1, c))
        .collect();
    check(existing, desired);
}
