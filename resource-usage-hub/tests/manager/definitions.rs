//! ScoreDefinitions evaluated by the agents: the manager ships the valid Agent ones in the
//! agent's work (its ConfigMap), follows their changes, and sets their `Accepted` status; Hub
//! definitions are the scorer's. On a control plane of its own: definitions are cluster-scoped
//! and every other test's manager would ship them.

use ocm_api::scoring::{ScoreDefinition, ShippedDefinition};

use super::*;

fn definition(name: &str, evaluator: &str, valid_for: &str) -> ScoreDefinition {
    serde_json::from_value(json!({
        "apiVersion": "scoring.ocm-placement.io/v1alpha1", "kind": "ScoreDefinition",
        "metadata": {"name": name},
        "spec": {"scoreName": format!("{name}-score"), "evaluator": evaluator,
            "refreshPeriod": "60s", "validFor": valid_for,
            "scores": [{"name": "gpuMemoryFree", "expression": "sum(DCGM_FI_DEV_FB_FREE) * 1048576",
                "normalise": {"type": "Range", "min": "0", "max": "80Gi"}}]}
    }))
    .expect("a definition")
}

/// `(status, reason, observedGeneration)` of `Accepted`.
async fn accepted(api: &Api<ScoreDefinition>, name: &str) -> Option<(String, String, i64)> {
    let d = api.get_opt(name).await.ok().flatten()?;
    let st = d.status?;
    let c = st.conditions.iter().find(|c| c.type_ == "Accepted")?;
    Some((
        c.status.clone(),
        c.reason.clone(),
        st.observed_generation.unwrap_or_default(),
    ))
}

/// The shipped definitions' names and generations in `cluster`'s work.
async fn shipped(client: &Client, cluster: &str, addon: &str) -> Option<Vec<(String, i64)>> {
    let w = work(client, cluster, addon).await?;
    let cm = w
        .spec
        .workload
        .manifests
        .iter()
        .find(|m| m.raw["kind"] == "ConfigMap")?;
    let text = cm.raw["data"]["definitions.yaml"].as_str()?;
    let defs: Vec<ShippedDefinition> = serde_saphyr::from_str(text).ok()?;
    Some(defs.into_iter().map(|d| (d.name, d.generation)).collect())
}

#[tokio::test]
async fn agent_definitions_are_shipped_in_the_work_and_accepted() {
    let cp = ControlPlane::start(
        testenv::Options::default()
            .with_upstream_crds()
            .with_crds(ocm_api::crds::ours()),
    )
    .await
    .expect("a control plane of its own");
    let client = cp.client().expect("client");
    let addon = "defs-addon";
    let pns = namespace(&client, "placements").await;
    let cl = cluster(&client, "cluster").await;
    create_cma(
        &client,
        addon,
        json!({"type": "Placements", "placements": [{"namespace": pns, "name": "global"}]}),
    )
    .await;
    decision(
        &client,
        &pns,
        "global-decision-1",
        "global",
        None,
        &[cl.as_str()],
    )
    .await;
    let defs = Api::<ScoreDefinition>::all(client.clone());
    for d in [
        definition("gpu", "Agent", "180s"),
        // Valid for the API server, not for an evaluator: valid for less than a period.
        definition("inverted", "Agent", "30s"),
        definition("fleet", "Hub", "180s"),
    ] {
        defs.create(&PostParams::default(), &d)
            .await
            .expect("create the definition");
    }
    let _m = start(&cp, settings(addon));

    let ok = eventually("gpu accepted", DEADLINE, || accepted(&defs, "gpu")).await;
    assert_eq!(ok, ("True".into(), "EvaluatedByAgents".into(), 1));
    let bad = eventually("inverted refused", DEADLINE, || accepted(&defs, "inverted")).await;
    assert_eq!((bad.0.as_str(), bad.1.as_str()), ("False", "Invalid"));
    let got = eventually("the shipped definitions", DEADLINE, || async {
        shipped(&client, &cl, addon).await.filter(|s| !s.is_empty())
    })
    .await;
    assert_eq!(
        got,
        [("gpu".to_owned(), 1)],
        "only the valid Agent definition"
    );
    assert!(
        defs.get("fleet")
            .await
            .expect("fleet")
            .status
            .is_none_or(|s| s.conditions.is_empty()),
        "a Hub definition's status is the scorer's"
    );

    // A change rolls out in the work and is observed.
    defs.patch(
        "gpu",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"scores": [{"name": "gpuMemoryFree",
            "expression": "max(DCGM_FI_DEV_FB_FREE) * 1048576",
            "normalise": {"type": "Range", "min": "0", "max": "40Gi"}}]}})),
    )
    .await
    .expect("change the definition");
    eventually("the new generation shipped", DEADLINE, || async {
        (shipped(&client, &cl, addon).await? == [("gpu".to_owned(), 2)]).then_some(())
    })
    .await;
    eventually("the new generation observed", DEADLINE, || async {
        (accepted(&defs, "gpu").await?.2 == 2).then_some(())
    })
    .await;
    // Gone: the work ships none.
    defs.delete("gpu", &Default::default())
        .await
        .expect("delete");
    eventually("no definitions shipped", DEADLINE, || async {
        shipped(&client, &cl, addon).await?.is_empty().then_some(())
    })
    .await;
}
