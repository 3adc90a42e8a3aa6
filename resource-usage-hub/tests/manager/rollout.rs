//! Progressive rollout by decision groups.

use super::*;

#[tokio::test]
async fn rolls_out_group_by_group_and_stops_at_a_failing_mandatory_group() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let addon = "rollout-addon";
    let pns = namespace(&client, "rollout").await;
    let mut clusters = Vec::new();
    for _ in 0..3 {
        clusters.push(cluster(&client, "rollout-cluster").await);
    }
    let c: Vec<&str> = clusters.iter().map(String::as_str).collect();
    create_adc(
        &client,
        &pns,
        "agent-config",
        json!({"customizedVariables": [{"name": "REFRESH_PERIOD", "value": "60s"}]}),
    )
    .await;
    create_cma(
        &client,
        addon,
        json!({"type": "Placements", "placements": [{
            "namespace": pns, "name": "fleet",
            "configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "agent-config"}],
            "rolloutStrategy": {"type": "ProgressivePerGroup", "progressivePerGroup": {
                "mandatoryDecisionGroups": [{"groupName": "canary"}]}}
        }]}),
    )
    .await;
    decision(
        &client,
        &pns,
        "fleet-decision-1",
        "fleet",
        Some((0, "canary")),
        &c[..1],
    )
    .await;
    decision(
        &client,
        &pns,
        "fleet-decision-2",
        "fleet",
        Some((1, "")),
        &c[1..2],
    )
    .await;
    decision(
        &client,
        &pns,
        "fleet-decision-3",
        "fleet",
        Some((2, "")),
        &c[2..],
    )
    .await;
    let _m = start(cp, settings(addon));

    // Install: the canary group first; the others wait for it.
    eventually("the canary's work", DEADLINE, || work(&client, c[0], addon)).await;
    for cl in &c[1..] {
        let m = eventually("a later group waits", DEADLINE, || async {
            mca(&client, cl, addon)
                .await
                .filter(|m| condition(m, "Progressing").map(|c| c.1) == Some("WaitingForCanary"))
        })
        .await;
        assert!(
            work(&client, cl, addon).await.is_none(),
            "{cl} installed before the canary"
        );
        assert!(m.status.is_some());
    }
    // Each group goes once the previous one is Available.
    for i in 0..3 {
        report_work(&client, c[i], addon, true).await;
        eventually("the group completes", DEADLINE, || async {
            mca(&client, c[i], addon).await.filter(|m| {
                condition(m, "Progressing").map(|c| c.1) == Some("Completed")
                    && condition(m, "Available").map(|c| c.0) == Some("True")
            })
        })
        .await;
        if i + 1 < 3 {
            eventually("the next group's work", DEADLINE, || {
                work(&client, c[i + 1], addon)
            })
            .await;
        }
        for later in &c[(i + 2).min(3)..] {
            assert!(
                work(&client, later, addon).await.is_none(),
                "{later} went early"
            );
        }
    }
    let cma_api = Api::<ClusterManagementAddOn>::all(client.clone());
    let progression_message = |cma: &ClusterManagementAddOn| -> Option<(String, String)> {
        cma.status
            .as_ref()?
            .install_progressions
            .first()
            .and_then(|p| {
                p.conditions
                    .iter()
                    .find(|c| c.type_ == "Progressing")
                    .map(|c| (c.reason.clone(), c.message.clone()))
            })
    };
    eventually("the install completes", DEADLINE, || async {
        cma_api
            .get(addon)
            .await
            .ok()
            .and_then(|c| progression_message(&c))
            .filter(|(r, _)| r == "Completed")
    })
    .await;

    // A config change rolls out the same way; a failing canary stops it.
    let old: Vec<String> = {
        let mut v = Vec::new();
        for cl in &c {
            v.push(rendering_hash(
                &work(&client, cl, addon).await.expect("work"),
            ));
        }
        v
    };
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), &pns)
        .patch(
            "agent-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"customizedVariables": [{"name": "REFRESH_PERIOD", "value": "30s"}]}})),
        )
        .await
        .expect("edit config");
    eventually("the canary gets the new rendering", DEADLINE, || async {
        work(&client, c[0], addon)
            .await
            .filter(|w| rendering_hash(w) != old[0])
    })
    .await;
    report_work(&client, c[0], addon, false).await;
    let m = eventually("the canary fails", DEADLINE, || async {
        mca(&client, c[0], addon)
            .await
            .filter(|m| condition(m, "Progressing").map(|c| c.1) == Some("Failed"))
    })
    .await;
    assert_eq!(condition(&m, "ManifestApplied").map(|c| c.0), Some("False"));
    // The pass that saw the failure decided about the other groups too; they were not touched.
    eventually("the progression reports the failure", DEADLINE, || async {
        cma_api
            .get(addon)
            .await
            .ok()
            .and_then(|c| progression_message(&c))
            .filter(|(r, m)| r == "Progressing" && m.contains("1 failed"))
    })
    .await;
    for (i, cl) in c.iter().enumerate().skip(1) {
        let w = work(&client, cl, addon).await.expect("work");
        assert_eq!(
            rendering_hash(&w),
            old[i],
            "{cl} must keep the old rendering"
        );
        let m = mca(&client, cl, addon).await.expect("mca");
        assert_eq!(
            condition(&m, "Progressing").map(|c| c.1),
            Some("WaitingForCanary")
        );
    }
    // The canary recovers: the rollout moves on.
    report_work(&client, c[0], addon, true).await;
    eventually(
        "the second group gets the new rendering",
        DEADLINE,
        || async {
            work(&client, c[1], addon)
                .await
                .filter(|w| rendering_hash(w) != old[1])
        },
    )
    .await;
    assert_eq!(
        rendering_hash(&work(&client, c[2], addon).await.expect("work")),
        old[2]
    );
}
