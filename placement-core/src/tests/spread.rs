//! Spread details: clusters without the topology key, claims, and no numberOfClusters.

use serde_json::json;

use super::fixtures::*;

fn world() -> World {
    World::new(vec![
        cluster("a1").label("zone", "a").claim("zone.claim", "a"),
        cluster("a2").label("zone", "a").claim("zone.claim", "a"),
        cluster("a3").label("zone", "a").claim("zone.claim", "a"),
        cluster("b1").label("zone", "b").claim("zone.claim", "b"),
        cluster("none"),
    ])
}

#[test]
fn do_not_schedule_drops_clusters_without_the_key() {
    let o = world().schedule(&placement("ns", "p", json!({"spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone", "topologyKeyType": "Label", "whenUnsatisfiable": "DoNotSchedule"}]}})));
    assert_eq!(
        dropped(&o, 2),
        ["none: no value for topology key zone (DoNotSchedule spread)"]
    );
    // Without numberOfClusters: as many as the skew allows (a1, a2, b1; a3 would make 3-1).
    assert_eq!(chosen(&o), ["a1", "a2", "b1"]);
    // a3 was refused: it counts as unscheduled, and the condition says why.
    assert_eq!(o.unscheduled, 1);
}

#[test]
fn schedule_anyway_keeps_clusters_without_the_key_last() {
    let o = world().schedule(&placement(
        "ns",
        "p",
        json!({"numberOfClusters": 3, "spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone.claim", "topologyKeyType": "Claim"}]}}),
    ));
    assert_eq!(chosen(&o), ["a1", "a2", "b1"]);
    let o = world().schedule(&placement(
        "ns",
        "p",
        json!({"spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone.claim", "topologyKeyType": "Claim"}]}}),
    ));
    assert_eq!(o.selected.len(), 5);
    assert_eq!(&*o.selected[4], "none", "picked last: {:?}", o.selected);
}

#[test]
fn report_lists_domains_and_picks() {
    let o = world().schedule(&placement(
        "ns",
        "p",
        json!({"numberOfClusters": 2, "spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone", "topologyKeyType": "Label"}]}}),
    ));
    let r = o.spread.unwrap();
    assert_eq!(r.constraints, ["label zone (maxSkew 1, ScheduleAnyway)"]);
    assert_eq!(
        r.domains[0],
        [("a".to_string(), 1), ("b".to_string(), 1)].into()
    );
    assert_eq!(
        r.picks.iter().map(|p| &*p.cluster).collect::<Vec<_>>(),
        ["a1", "b1"]
    );
}
