//! Decision groups when the spec changes: the groups are recomputed to the
//! fewest the size allows, keeping as many clusters in their group and object as that permits;
//! once the layout fits, a cluster joining or leaving moves nobody unless the class then needs
//! fewer groups. Layouts are written `name k=clusters ... | ...`, one entry per group in index
//! order, `-` for the unnamed group and `k` for `p-decision-<k>`.

use std::collections::BTreeMap;

use ocm_api::Placement;
use serde_json::{Value, json};

use super::fixtures::*;
use crate::Outcome;
use crate::groups::group_length;

/// The layout in the notation above.
fn render(o: &Outcome) -> String {
    o.groups
        .iter()
        .map(|g| {
            let name = if g.name.is_empty() { "-" } else { &g.name };
            let objects = g.slices.iter().map(|s| {
                let k = s.name.rsplit('-').next().unwrap_or_default();
                format!("{k}={}", s.clusters.join(","))
            });
            std::iter::once(name.to_owned())
                .chain(objects)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// cluster -> (group index, group name, object name)
type Places = BTreeMap<String, (usize, String, String)>;

fn places(o: &Outcome) -> Places {
    let mut m = Places::new();
    for g in &o.groups {
        for s in &g.slices {
            for c in &s.clusters {
                m.insert(c.to_string(), (g.index, g.name.clone(), s.name.clone()));
            }
        }
    }
    m
}

/// (clusters that keep their group, clusters that keep their PlacementDecision) from `before`
/// to `after`. A new group continues the previous group of the same name most of its clusters
/// come from (lower index on ties; the first new group to claim it only); a cluster keeps its
/// group when its new group continues its previous one, and its object when the object's name
/// and its group's name are unchanged.
fn kept(before: &Places, after: &Places) -> (usize, usize) {
    let mut origin: BTreeMap<usize, BTreeMap<usize, usize>> = BTreeMap::new();
    for (c, (gi, name, _)) in after {
        if let Some((old, old_name, _)) = before.get(c)
            && old_name == name
        {
            *origin.entry(*gi).or_default().entry(*old).or_default() += 1;
        }
    }
    let mut continues: BTreeMap<usize, usize> = BTreeMap::new(); // new group -> old group
    for (new, counts) in &origin {
        let best = counts
            .iter()
            .max_by_key(|(old, n)| (**n, std::cmp::Reverse(**old)))
            .map(|(old, _)| *old);
        if let Some(old) = best
            && !continues.values().any(|o| *o == old)
        {
            continues.insert(*new, old);
        }
    }
    let mut groups = 0;
    let mut objects = 0;
    for (c, (gi, name, object)) in after {
        let Some((old, old_name, old_object)) = before.get(c) else {
            continue;
        };
        if name == old_name && continues.get(gi) == Some(old) {
            groups += 1;
        }
        if name == old_name && object == old_object {
            objects += 1;
        }
    }
    (groups, objects)
}

/// Clusters present before and after that changed object.
fn moves(before: &Places, after: &Places) -> usize {
    let common = after.keys().filter(|c| before.contains_key(*c)).count();
    common - kept(before, after).1
}

/// Asserts the layout satisfies the spec as the groups module's header defines it.
fn assert_fits(o: &Outcome, p: &Placement) {
    let strategy = &p.spec.decision_strategy.group_strategy;
    let total = o.selected.len();
    let size = group_length(strategy.clusters_per_decision_group.as_ref(), total).unwrap();
    let layout = render(o);
    // Classes in spec order, the unnamed rest last, each class's groups together.
    let mut order: Vec<&str> = strategy
        .decision_groups
        .iter()
        .map(|g| g.group_name.as_str())
        .collect();
    order.push("");
    let ranks: Vec<usize> = o
        .groups
        .iter()
        .map(|g| order.iter().position(|n| *n == g.name).unwrap())
        .collect();
    assert!(ranks.is_sorted(), "class order: {layout}");
    let mut members: BTreeMap<&str, (usize, usize)> = BTreeMap::new(); // clusters, groups
    for (i, g) in o.groups.iter().enumerate() {
        assert_eq!(g.index, i, "contiguous indices: {layout}");
        let n = g.cluster_count();
        assert!(n <= size.max(1), "group {i} over {size}: {layout}");
        assert_eq!(g.slices.len(), n.div_ceil(100).max(1), "objects: {layout}");
        assert!(g.slices.iter().all(|s| s.clusters.len() <= 100));
        let e = members.entry(g.name.as_str()).or_default();
        e.0 += n;
        e.1 += 1;
    }
    for (name, (m, groups)) in members {
        let want = m.div_ceil(size.max(1)).max(usize::from(total == 0));
        assert_eq!(
            groups, want,
            "class {name:?}: {m} clusters in {groups} groups of {size}: {layout}"
        );
    }
    let mut all: Vec<&str> = o.selected.iter().map(|n| &**n).collect();
    all.sort();
    let mut placed: Vec<&str> = o
        .groups
        .iter()
        .flat_map(|g| {
            g.slices
                .iter()
                .flat_map(|s| s.clusters.iter().map(|c| &**c))
        })
        .collect();
    placed.sort();
    assert_eq!(placed, all, "every selected cluster once: {layout}");
}

/// Applies `p` and checks the result fits and is stable: applying it again changes nothing
/// and writes nothing.
fn settle(w: &mut World, p: &mut Placement) -> Outcome {
    let o = w.apply(p);
    assert_fits(&o, p);
    let again = w.apply(p);
    assert_eq!(render(&again), render(&o), "stable");
    assert_eq!(
        again.writes,
        [],
        "nothing to write on a pass that changes nothing"
    );
    o
}

fn spec(size: Option<Value>, groups: &[(&str, &str, &str)]) -> Value {
    let mut s = json!({});
    if let Some(size) = size {
        s["clustersPerDecisionGroup"] = size;
    }
    if !groups.is_empty() {
        s["decisionGroups"] = groups
            .iter()
            .map(|(name, k, v)| json!({"groupName": name, "groupClusterSelector": {"labelSelector": {"matchLabels": {*k: *v}}}}))
            .collect();
    }
    json!({"decisionStrategy": {"groupStrategy": s}})
}

struct Case {
    name: &'static str,
    clusters: Vec<C>,
    before: Value,
    after: Value,
    /// The layouts before and after the change.
    want_before: &'static str,
    want: &'static str,
    /// (clusters keeping their group, clusters keeping their object) through the change.
    kept: (usize, usize),
    /// Then a cluster joins: the layout, and how many others move.
    join: C,
    want_join: &'static str,
    join_moves: usize,
    /// Then a cluster leaves.
    leave: &'static str,
    want_leave: &'static str,
    leave_moves: usize,
}

fn run(cases: Vec<Case>) {
    for case in cases {
        let name = case.name;
        let mut w = World::new(case.clusters);
        let mut p = placement("ns", "p", case.before);
        let before = settle(&mut w, &mut p);
        assert_eq!(render(&before), case.want_before, "{name}: before");
        p.spec = placement("ns", "p", case.after).spec;
        let after = settle(&mut w, &mut p);
        assert_eq!(render(&after), case.want, "{name}: after the change");
        assert_eq!(
            kept(&places(&before), &places(&after)),
            case.kept,
            "{name}: kept"
        );
        w.add(case.join);
        let joined = settle(&mut w, &mut p);
        assert_eq!(render(&joined), case.want_join, "{name}: after a join");
        assert_eq!(
            moves(&places(&after), &places(&joined)),
            case.join_moves,
            "{name}: moved by the join"
        );
        w.snapshot.remove_cluster(case.leave);
        let left = settle(&mut w, &mut p);
        assert_eq!(render(&left), case.want_leave, "{name}: after a leave");
        assert_eq!(
            moves(&places(&joined), &places(&left)),
            case.leave_moves,
            "{name}: moved by the leave"
        );
    }
}

fn plain(n: usize) -> Vec<C> {
    (1..=n).map(|i| cluster(&format!("c{i}"))).collect()
}

#[test]
fn clusters_per_decision_group_changes() {
    let two = || spec(Some(json!(2)), &[]);
    run(vec![
        Case {
            name: "2 -> default merges into one group",
            clusters: plain(4),
            before: two(),
            after: spec(None, &[]),
            want_before: "- 1=c1,c2 | - 2=c3,c4",
            want: "- 1=c1,c2,c3,c4",
            kept: (2, 2),
            join: cluster("c5"),
            want_join: "- 1=c1,c2,c3,c4,c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 1=c2,c3,c4,c5",
            leave_moves: 0,
        },
        Case {
            name: "2 -> 100% merges into one group",
            clusters: plain(4),
            before: two(),
            after: spec(Some(json!("100%")), &[]),
            want_before: "- 1=c1,c2 | - 2=c3,c4",
            want: "- 1=c1,c2,c3,c4",
            kept: (2, 2),
            join: cluster("c5"),
            want_join: "- 1=c1,c2,c3,c4,c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 1=c2,c3,c4,c5",
            leave_moves: 0,
        },
        Case {
            // Then c2 leaving lets the last group's one cluster join the first.
            name: "2 -> 4 merges; a leave that frees room merges again",
            clusters: plain(4),
            before: two(),
            after: spec(Some(json!(4)), &[]),
            want_before: "- 1=c1,c2 | - 2=c3,c4",
            want: "- 1=c1,c2,c3,c4",
            kept: (2, 2),
            join: cluster("c5"),
            want_join: "- 1=c1,c2,c3,c4 | - 2=c5",
            join_moves: 0,
            leave: "c2",
            want_leave: "- 1=c1,c3,c4,c5",
            leave_moves: 1,
        },
        Case {
            name: "4 -> 2 splits: each group keeps its first clusters by name",
            clusters: plain(6),
            before: spec(Some(json!(4)), &[]),
            after: two(),
            want_before: "- 1=c1,c2,c3,c4 | - 2=c5,c6",
            want: "- 1=c1,c2 | - 2=c5,c6 | - 3=c3,c4",
            kept: (4, 4),
            join: cluster("c7"),
            want_join: "- 1=c1,c2 | - 2=c5,c6 | - 3=c3,c4 | - 4=c7",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 1=c2,c7 | - 2=c5,c6 | - 3=c3,c4",
            leave_moves: 1,
        },
        Case {
            // 50% of 6 is 3: two groups; the third's clusters fill the others, latest first.
            // After the join 50% of 7 is 4; after the leave 50% of 6 is 3 again, so the
            // group over 3 gives up its last cluster by name.
            name: "2 -> 50% merges; the size following the count moves only the overflow",
            clusters: plain(6),
            before: two(),
            after: spec(Some(json!("50%")), &[]),
            want_before: "- 1=c1,c2 | - 2=c3,c4 | - 3=c5,c6",
            want: "- 1=c1,c2,c6 | - 2=c3,c4,c5",
            kept: (4, 4),
            join: cluster("c7"),
            want_join: "- 1=c1,c2,c6 | - 2=c3,c4,c5,c7",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 1=c2,c6,c7 | - 2=c3,c4,c5",
            leave_moves: 1,
        },
        Case {
            name: "25% -> 100% merges four groups into the first",
            clusters: plain(4),
            before: spec(Some(json!("25%")), &[]),
            after: spec(Some(json!("100%")), &[]),
            want_before: "- 1=c1 | - 2=c2 | - 3=c3 | - 4=c4",
            want: "- 1=c1,c2,c3,c4",
            kept: (1, 1),
            join: cluster("c5"),
            want_join: "- 1=c1,c2,c3,c4,c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 1=c2,c3,c4,c5",
            leave_moves: 0,
        },
        Case {
            name: "default -> 2 splits",
            clusters: plain(4),
            before: spec(None, &[]),
            after: two(),
            want_before: "- 1=c1,c2,c3,c4",
            want: "- 1=c1,c2 | - 2=c3,c4",
            kept: (2, 2),
            join: cluster("c5"),
            want_join: "- 1=c1,c2 | - 2=c3,c4 | - 3=c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 1=c2,c5 | - 2=c3,c4",
            leave_moves: 1,
        },
    ]);
}

#[test]
fn decision_groups_changes() {
    let canary = ("canary", "canary", "true");
    let edge = ("canary", "tier", "edge");
    let four = || {
        vec![
            cluster("c1").label("canary", "true"),
            cluster("c2"),
            cluster("c3").label("canary", "true"),
            cluster("c4"),
        ]
    };
    run(vec![
        Case {
            // The rest keeps one cluster in each of its two groups: they merge.
            name: "a named group added, size 2",
            clusters: four(),
            before: spec(Some(json!(2)), &[]),
            after: spec(Some(json!(2)), &[canary]),
            want_before: "- 1=c1,c2 | - 2=c3,c4",
            want: "canary 2=c1,c3 | - 1=c2,c4",
            kept: (1, 1),
            join: cluster("c5"),
            want_join: "canary 2=c1,c3 | - 1=c2,c4 | - 3=c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "canary 2=c3 | - 1=c2,c4 | - 3=c5",
            leave_moves: 0,
        },
        Case {
            name: "a named group added, default size",
            clusters: four(),
            before: spec(None, &[]),
            after: spec(None, &[canary]),
            want_before: "- 1=c1,c2,c3,c4",
            want: "canary 2=c1,c3 | - 1=c2,c4",
            kept: (2, 2),
            join: cluster("c5").label("canary", "true"),
            want_join: "canary 2=c1,c3,c5 | - 1=c2,c4",
            join_moves: 0,
            leave: "c2",
            want_leave: "canary 2=c1,c3,c5 | - 1=c4",
            leave_moves: 0,
        },
        Case {
            name: "a named group removed, default size",
            clusters: four(),
            before: spec(None, &[canary]),
            after: spec(None, &[]),
            want_before: "canary 1=c1,c3 | - 2=c2,c4",
            want: "- 2=c1,c2,c3,c4",
            kept: (2, 2),
            join: cluster("c5"),
            want_join: "- 2=c1,c2,c3,c4,c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "- 2=c2,c3,c4,c5",
            leave_moves: 0,
        },
        Case {
            name: "a named group removed, size 2",
            clusters: four(),
            before: spec(Some(json!(2)), &[canary]),
            after: spec(Some(json!(2)), &[]),
            want_before: "canary 1=c1,c3 | - 2=c2,c4",
            want: "- 2=c2,c4 | - 1=c1,c3",
            kept: (2, 2),
            join: cluster("c5"),
            want_join: "- 2=c2,c4 | - 1=c1,c3 | - 3=c5",
            join_moves: 0,
            leave: "c2",
            want_leave: "- 2=c4,c5 | - 1=c1,c3",
            leave_moves: 1,
        },
        Case {
            // The selector now also takes c4 and c6: the rest keeps c2 and c5, one in each
            // of its groups, which merge.
            name: "a named group's selector changed",
            clusters: vec![
                cluster("c1").label("canary", "true").label("tier", "edge"),
                cluster("c2"),
                cluster("c3").label("canary", "true").label("tier", "edge"),
                cluster("c4").label("tier", "edge"),
                cluster("c5"),
                cluster("c6").label("tier", "edge"),
            ],
            before: spec(Some(json!(2)), &[canary]),
            after: spec(Some(json!(2)), &[edge]),
            want_before: "canary 1=c1,c3 | - 2=c2,c4 | - 3=c5,c6",
            want: "canary 1=c1,c3 | canary 3=c4,c6 | - 2=c2,c5",
            kept: (3, 3),
            join: cluster("c7").label("tier", "edge"),
            want_join: "canary 1=c1,c3 | canary 3=c4,c6 | canary 4=c7 | - 2=c2,c5",
            join_moves: 0,
            leave: "c1",
            want_leave: "canary 1=c3,c7 | canary 3=c4,c6 | - 2=c2,c5",
            leave_moves: 1,
        },
    ]);
}

fn many(range: std::ops::Range<usize>) -> Vec<C> {
    range.map(|i| cluster(&format!("c{i:03}"))).collect()
}

#[test]
fn objects_merge_when_their_group_has_room() {
    // 150 clusters in one group: objects of 100 and 50.
    let mut w = World::new(many(0..150));
    let mut p = placement("ns", "p", spec(None, &[]));
    let before = settle(&mut w, &mut p);
    assert_eq!(
        before.groups[0]
            .slices
            .iter()
            .map(|s| (s.name.as_str(), s.clusters.len()))
            .collect::<Vec<_>>(),
        [("p-decision-1", 100), ("p-decision-2", 50)]
    );
    // 60 leave the first object: 90 fit in one, the fuller object stays.
    for i in 0..60 {
        w.snapshot.remove_cluster(&format!("c{i:03}"));
    }
    let o = settle(&mut w, &mut p);
    assert_eq!(o.groups.len(), 1);
    assert_eq!(o.groups[0].slices.len(), 1);
    assert_eq!(o.groups[0].slices[0].name, "p-decision-2");
    assert_eq!(o.groups[0].slices[0].clusters.len(), 90);
    assert_eq!(kept(&places(&before), &places(&o)), (90, 50));
    // Eleven join: ten fill the object, one opens the lowest free name (listed in `k` order);
    // nobody moves.
    for i in 150..161 {
        w.add(cluster(&format!("c{i:03}")));
    }
    let joined = settle(&mut w, &mut p);
    assert_eq!(
        joined.groups[0]
            .slices
            .iter()
            .map(|s| (s.name.as_str(), s.clusters.len()))
            .collect::<Vec<_>>(),
        [("p-decision-1", 1), ("p-decision-2", 100)]
    );
    assert_eq!(moves(&places(&o), &places(&joined)), 0);
}

#[test]
fn groups_of_one_hundred_merged_keep_their_objects() {
    // 250 clusters in groups of 100 -> the default: one group; the objects' contents and
    // names stay as they were (the first group is kept, the others' clusters refill the
    // freed names in name order).
    let mut w = World::new(many(0..250));
    let mut p = placement("ns", "p", spec(Some(json!(100)), &[]));
    let before = settle(&mut w, &mut p);
    assert_eq!(before.groups.len(), 3);
    p.spec = placement("ns", "p", spec(None, &[])).spec;
    let o = settle(&mut w, &mut p);
    assert_eq!(o.groups.len(), 1);
    assert_eq!(kept(&places(&before), &places(&o)), (100, 250));
}

/// A small deterministic generator (xorshift64*), so the property test needs no new crate and
/// every run checks the same layouts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn any_sequence_of_specs_and_memberships_fits_and_is_stable() {
    let sizes = [
        None,
        Some(json!(0)),
        Some(json!(1)),
        Some(json!(2)),
        Some(json!(3)),
        Some(json!(5)),
        Some(json!(8)),
        Some(json!(120)),
        Some(json!("10%")),
        Some(json!("25%")),
        Some(json!("33%")),
        Some(json!("50%")),
        Some(json!("100%")),
    ];
    let named = [("ga", "tier", "a"), ("gb", "tier", "b")];
    let mut rng = Rng(0x5eed_0017);
    for run in 0..60 {
        // Mostly small hubs; one run in six large enough for several objects per group.
        let pool = if run % 6 == 5 { 260 } else { 24 };
        let mut w = World::new(Vec::new());
        let mut p = placement("ns", "p", json!({}));
        let mut present = vec![false; pool];
        for step in 0..6 {
            // Change a part of the membership (and labels), and maybe the spec.
            for (i, here) in present.iter_mut().enumerate() {
                if step == 0 || rng.below(4) == 0 {
                    let name = format!("c{i:03}");
                    if rng.below(3) == 0 {
                        w.snapshot.remove_cluster(&name);
                        *here = false;
                    } else {
                        let c = match rng.below(3) {
                            0 => cluster(&name).label("tier", "a"),
                            1 => cluster(&name).label("tier", "b"),
                            _ => cluster(&name),
                        };
                        w.add(c);
                        *here = true;
                    }
                }
            }
            if step == 0 || rng.below(2) == 0 {
                let size = sizes[rng.below(sizes.len() as u64) as usize].clone();
                let groups: Vec<_> = match rng.below(4) {
                    0 => vec![],
                    1 => vec![named[0]],
                    2 => vec![named[1], named[0]],
                    _ => vec![named[0], named[1]],
                };
                p.spec = placement("ns", "p", spec(size, &groups)).spec;
            }
            settle(&mut w, &mut p); // fits the spec, and running it again changes nothing
        }
    }
}
