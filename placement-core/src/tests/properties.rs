//! Property tests: determinism, input-order independence, and the hard limits.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;

use super::fixtures::*;
use crate::{Snapshot, schedule};

#[derive(Debug, Clone)]
struct Spec {
    zone: Option<u8>,
    score: i32,
    cpu: u8,
    taint: Option<(u8, bool)>, // (key, NoSelect else PreferNoSelect)
    env: u8,
}

fn cluster_spec() -> impl Strategy<Value = Spec> {
    (
        proptest::option::of(0u8..4),
        -100i32..=100,
        1u8..64,
        proptest::option::of((0u8..3, any::<bool>())),
        0u8..3,
    )
        .prop_map(|(zone, score, cpu, taint, env)| Spec {
            zone,
            score,
            cpu,
            taint,
            env,
        })
}

fn build(specs: &[Spec], order: &[usize]) -> Snapshot {
    let mut s = Snapshot::new();
    s.upsert_set(Arc::new(exclusive_set("set")));
    s.upsert_binding(&binding("ns", "set"));
    for &i in order {
        let sp = &specs[i];
        let name = format!("c{i:02}");
        let mut c = cluster(&name)
            .resources(&sp.cpu.to_string(), "1Gi")
            .label("env", &sp.env.to_string());
        if let Some(z) = sp.zone {
            c = c.label("zone", &format!("z{z}"));
        }
        if let Some((k, hard)) = sp.taint {
            c = c.taint(
                &format!("k{k}"),
                "",
                if hard { "NoSelect" } else { "PreferNoSelect" },
                Some(at(0)),
            );
        }
        s.upsert_cluster(Arc::new(c.0));
        s.upsert_score(Arc::new(score(&name, "r", &[("s", sp.score)], None)));
    }
    s
}

fn placement_spec(n: Option<u8>, skew: u8, hard: bool, spread: bool) -> serde_json::Value {
    let mut spec = json!({
        "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["2"]}]}}}],
        "tolerations": [{"key": "k0", "operator": "Exists"}],
        "prioritizerPolicy": {"configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 2},
            {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": -1}]},
    });
    if let Some(n) = n {
        spec["numberOfClusters"] = json!(n);
    }
    if spread {
        spec["spreadPolicy"] = json!({"spreadConstraints": [{"topologyKey": "zone", "topologyKeyType": "Label",
            "maxSkew": skew, "whenUnsatisfiable": if hard { "DoNotSchedule" } else { "ScheduleAnyway" }}]});
    }
    spec
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn invariants(
        specs in proptest::collection::vec(cluster_spec(), 0..24),
        n in proptest::option::of(0u8..30),
        skew in 1u8..4,
        hard in any::<bool>(),
        spread in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let order: Vec<usize> = (0..specs.len()).collect();
        // Another insertion order, from the seed.
        let mut shuffled = order.clone();
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let p = placement("ns", "p", placement_spec(n, skew, hard, spread));
        let a = schedule(&build(&specs, &order), &p, now());
        let b = schedule(&build(&specs, &shuffled), &p, now());
        prop_assert_eq!(&a, &b, "independent of input order");
        prop_assert_eq!(&a, &schedule(&build(&specs, &order), &p, now()), "deterministic");

        // Never a filtered-out cluster; never more than asked; no duplicates.
        for c in &a.selected {
            prop_assert!(a.filtered.contains(c));
        }
        if let Some(n) = n {
            prop_assert!(a.selected.len() <= n as usize);
        }
        let mut dedup = a.selected.clone();
        dedup.sort();
        dedup.dedup();
        prop_assert_eq!(dedup.len(), a.selected.len());
        // Never a NoSelect-tainted cluster the placement does not tolerate, nor env=2.
        for c in &a.selected {
            let i: usize = c[1..].parse().unwrap();
            prop_assert_ne!(specs[i].env, 2);
            if let Some((k, true)) = specs[i].taint {
                prop_assert_eq!(k, 0);
            }
        }
        // DoNotSchedule: the skew over the candidates' domains never exceeds maxSkew.
        if spread && hard {
            let mut counts: BTreeMap<u8, u32> = BTreeMap::new();
            for c in &a.filtered {
                let i: usize = c[1..].parse().unwrap();
                if let Some(z) = specs[i].zone { counts.entry(z).or_insert(0); }
            }
            for c in &a.selected {
                let i: usize = c[1..].parse().unwrap();
                *counts.get_mut(&specs[i].zone.unwrap()).unwrap() += 1;
            }
            if let (Some(min), Some(max)) = (counts.values().min(), counts.values().max()) {
                prop_assert!(max - min <= u32::from(skew), "{counts:?}");
            }
        }
    }

    #[test]
    fn rescheduling_keeps_every_kept_cluster(
        before in proptest::collection::vec(cluster_spec(), 0..40),
        drop_mask in any::<u64>(),
        per_group in 1u8..20,
    ) {
        let mut w = World::new(Vec::new());
        for (i, _) in before.iter().enumerate() {
            w.add(cluster(&format!("c{i:02}")));
        }
        let mut p = placement("ns", "p", json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": per_group}}}));
        w.apply(&mut p);
        for i in 0..before.len() {
            if drop_mask & (1 << i) != 0 {
                w.snapshot.remove_cluster(&format!("c{i:02}"));
            }
        }
        for i in 0..(drop_mask.count_ones() as usize) {
            w.add(cluster(&format!("n{i:02}")));
        }
        let o = w.apply(&mut p); // asserts the write order keeps every kept cluster
        for g in &o.groups {
            prop_assert!(g.cluster_count() <= per_group as usize);
        }
    }
}

/// One step of a fleet's history: after `advance` seconds, cluster `cluster` rewrites its
/// score (value, and `validUntil` unset, near or years ahead).
#[derive(Debug, Clone)]
struct Step {
    advance: u16,
    cluster: u8,
    value: i32,
    valid_until: u8,
}

fn step() -> impl Strategy<Value = Step> {
    (0u16..400, any::<u8>(), -100i32..=100, 0u8..4).prop_map(
        |(advance, cluster, value, valid_until)| Step {
            advance,
            cluster,
            value,
            valid_until,
        },
    )
}

/// The score a provider writes at `at` (the hub records the write's time in `managedFields`).
fn written_score(
    cluster: &str,
    value: i32,
    valid_until: u8,
    at_secs: i64,
) -> ocm_api::AddOnPlacementScore {
    let valid_until = match valid_until {
        0 => None,
        1 => Some(at_secs + 120),
        2 => Some(at_secs + 1800),
        _ => Some(at_secs + 10 * 365 * 24 * 3600),
    };
    written(
        score(cluster, "r", &[("s", value)], valid_until.map(at)),
        at(at_secs),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A restarted scheduler (or a new leader) decides as the one that lived through the
    /// history: a snapshot built afresh from the objects the hub holds, in another order, with
    /// none of the history, gives the same outcome at any later time. So a hub at rest (the
    /// long-lived scheduler would write nothing) sees no write from a restart.
    #[test]
    fn a_restart_decides_as_the_scheduler_that_lived_through_the_history(
        clusters in 1usize..12,
        history in proptest::collection::vec(step(), 0..24),
        n in 1i32..5,
        mode in 0u8..3,
        stable in any::<bool>(),
        later in 0i64..1500,
        seed in any::<u64>(),
    ) {
        let names: Vec<String> = (0..clusters).map(|i| format!("c{i:02}")).collect();
        let mut w = World::new(names.iter().map(|c| cluster(c)).collect());
        // Every cluster has a score to start with, written at 0.
        for (i, c) in names.iter().enumerate() {
            w.score(written_score(c, (i as i32 * 37) % 200 - 100, (i % 4) as u8, 0));
        }
        let prioritizers = match mode {
            0 => json!({"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}),
            1 => json!({"mode": "Additive", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}),
            _ => json!({"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 2},
                {"scoreCoordinate": {"builtIn": "Steady"}, "weight": 1}]}),
        };
        let mut p = placement("ns", "p", json!({"numberOfClusters": n, "prioritizerPolicy": prioritizers}));
        if stable {
            p.metadata.annotations = Some([(
                crate::stability::ANNOTATION.to_owned(),
                json!({"minScoreGain": 15, "minSelectedDuration": "5m", "maxScoreMovesPerHour": 4}).to_string(),
            )].into_iter().collect());
        }
        let mut clock = 0i64;
        let o = schedule(&w.snapshot, &p, at(clock).0);
        w.apply_outcome(&mut p, &o);
        for s in &history {
            clock += i64::from(s.advance);
            let c = &names[s.cluster as usize % clusters];
            w.score(written_score(c, s.value, s.valid_until, clock));
            let o = schedule(&w.snapshot, &p, at(clock).0);
            w.apply_outcome(&mut p, &o);
        }
        let when = at(clock + later).0;
        let lived = schedule(&w.snapshot, &p, when);

        // The restart: the same objects, another order, nothing else.
        let mut order: Vec<usize> = (0..clusters).collect();
        let mut x = seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut fresh = Snapshot::new();
        for &i in order.iter().rev() {
            let c = &names[i];
            if let Some(s) = w.snapshot.score(c, "r") {
                fresh.upsert_score(Arc::new(s.clone()));
            }
        }
        for d in w.snapshot.decisions_of("ns", "p") {
            fresh.upsert_decision(Arc::new(d.clone()));
        }
        fresh.upsert_binding(&binding("ns", "set"));
        for &i in &order {
            let info = w.snapshot.cluster(&names[i]).expect("a cluster");
            fresh.upsert_cluster(Arc::new((*info.object).clone()));
        }
        fresh.upsert_set(Arc::new(exclusive_set("set")));
        let restarted = schedule(&fresh, &p, when);
        prop_assert_eq!(&lived, &restarted);
        if lived.writes.is_empty() {
            prop_assert!(restarted.writes.is_empty());
        }
    }
}
