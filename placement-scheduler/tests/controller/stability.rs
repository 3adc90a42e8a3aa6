//! The stability controls on the live hub: score noise moves a placement without them and
//! not one with them (a `DecisionHeld` event and the counter say so), a filter change moves
//! the stable one at once, the state they keep survives a restart, and a bad policy is a
//! `PlacementMisconfigured` condition.

use super::*;

const POLICY: &str = "scheduling.ocm-placement.io/stability";

fn spec() -> serde_json::Value {
    json!({
        "numberOfClusters": 2,
        "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"env": "prod"}}}}],
        "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "noise", "scoreName": "noise"}}, "weight": 1}]},
    })
}

/// The resource versions of a placement's decisions and of the placement itself.
async fn versions(hub: &Hub, placement: &str) -> Vec<Option<String>> {
    let mut v: Vec<Option<String>> = hub
        .decisions(placement)
        .await
        .into_iter()
        .map(|d| d.metadata.resource_version)
        .collect();
    v.push(hub.get_placement(placement).await.metadata.resource_version);
    v
}

async fn held_events(hub: &Hub, placement: &str) -> Vec<String> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::namespaced(hub.client.clone(), &hub.ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("DecisionHeld")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(placement)
        })
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn noise_moves_a_placement_without_the_controls_and_not_one_with_them() {
    let mut hub = Hub::new("pl-stable").await;
    let names = hub.clusters(&["a", "b", "c"], json!({"env": "prod"})).await;
    let (a, b, c) = (&names[0], &names[1], &names[2]);
    for (cluster, value) in [(a, 50), (b, 10), (c, 0)] {
        hub.score(cluster, "noise", &[("noise", value)], None).await;
    }
    hub.placement("plain", spec()).await;
    let api: Api<ocm_api::Placement> = Api::namespaced(hub.client.clone(), &hub.ns);
    let p: ocm_api::Placement = serde_json::from_value(json!({
        "metadata": {"name": "stable", "annotations": {POLICY: r#"{"minScoreGain": 30, "minSelectedDuration": "1h"}"#}},
        "spec": spec(),
    }))
    .unwrap();
    api.create(&Default::default(), &p).await.unwrap();
    hub.expect("plain", &["a", "b"]).await;
    hub.expect("stable", &["a", "b"]).await;

    // Noise: c overtakes b by 10. The plain placement follows; the stable one holds (b was
    // selected within the hour, and the gain is under 30), and says so once.
    hub.score(c, "noise", &[("noise", 20)], None).await;
    hub.expect("plain", &["a", "c"]).await;
    let notes = eventually("a DecisionHeld event for the stable placement", || async {
        let notes = held_events(&hub, "stable").await;
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert_eq!(hub.chosen("stable").await, ["a", "b"]);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&format!("{c} would replace {b}: {b} selected"))
            && notes[0].contains("less than minSelectedDuration 1h"),
        "{notes:?}"
    );
    let handle = &hub.controller.as_ref().unwrap().handle;
    assert_eq!(handle.metrics.moves_held.get(), 1);
    // Noise back and forth: the plain placement moves each time, the stable one never.
    for (bv, cv, plain) in [
        (25, 0, ["a", "b"]),
        (5, 30, ["a", "c"]),
        (40, -10, ["a", "b"]),
    ] {
        hub.score(b, "noise", &[("noise", bv)], None).await;
        hub.score(c, "noise", &[("noise", cv)], None).await;
        hub.expect("plain", &plain).await;
        assert_eq!(hub.chosen("stable").await, ["a", "b"]);
    }
    // The state is on the stable placement's first decision, and the plain one has none.
    let state = |ds: &[ocm_api::PlacementDecision]| {
        ds.iter()
            .filter_map(|d| {
                d.metadata
                    .annotations
                    .as_ref()?
                    .get("scheduling.ocm-placement.io/stability-state")
                    .cloned()
            })
            .collect::<Vec<_>>()
    };
    let kept = state(&hub.decisions("stable").await);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].contains(b.as_str()), "{kept:?}");
    assert!(state(&hub.decisions("plain").await).is_empty());

    // A restart: c overtakes b again while no scheduler runs; the new one holds it as the
    // old one would have (the state came back from the hub) and writes nothing for it.
    quiet(handle).await;
    let before = versions(&hub, "stable").await;
    let said = held_events(&hub, "stable").await.len();
    hub.controller.take().unwrap().stop().await;
    hub.score(b, "noise", &[("noise", 10)], None).await;
    hub.score(c, "noise", &[("noise", 20)], None).await;
    hub.controller = Some(start_controller(&hub.client, &hub.ns, None));
    let handle = &hub.controller.as_ref().unwrap().handle;
    hub.expect("plain", &["a", "c"]).await;
    quiet(handle).await;
    assert_eq!(hub.chosen("stable").await, ["a", "b"]);
    assert_eq!(
        versions(&hub, "stable").await,
        before,
        "the stable placement was rewritten"
    );
    assert_eq!(
        held_events(&hub, "stable").await.len(),
        said,
        "no new event after a restart"
    );
    assert_eq!(
        state(&hub.decisions("stable").await),
        kept,
        "state unchanged"
    );

    // A filter change is hard: b leaves prod and the stable placement moves at once.
    hub.patch_cluster(b, json!({"metadata": {"labels": {"env": "dev"}}}))
        .await;
    hub.expect("stable", &["a", "c"]).await;
}

#[tokio::test]
async fn a_bad_stability_policy_is_a_misconfiguration() {
    let hub = Hub::new("pl-stable-bad").await;
    hub.clusters(&["a"], json!({"env": "prod"})).await;
    let api: Api<ocm_api::Placement> = Api::namespaced(hub.client.clone(), &hub.ns);
    let p: ocm_api::Placement = serde_json::from_value(json!({
        "metadata": {"name": "p", "annotations": {POLICY: r#"{"minScoreGian": 3}"#}},
        "spec": spec(),
    }))
    .unwrap();
    api.create(&Default::default(), &p).await.unwrap();
    let message = hub
        .expect_condition("p", MISCONFIGURED, "True", "Misconfigured")
        .await;
    assert!(
        message.contains(POLICY) && message.contains("unknown field `minScoreGian`"),
        "{message}"
    );
    assert!(hub.chosen("p").await.is_empty());
}
