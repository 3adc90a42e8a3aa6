//! Upstream's integration scenarios (open-cluster-management-io/ocm test/integration/placement)
//! and the extensible-scheduling enhancement's stories: decisions,
//! cluster sets, predicates, prioritizers, tolerations, decision groups and spread end to end.

use super::*;

#[tokio::test]
async fn recreates_deleted_decisions_and_reports_groups() {
    let hub = Hub::new("pl-recreate").await;
    hub.clusters(&["a", "b", "c", "d", "e"], json!({})).await;
    hub.placement("p", json!({})).await;
    hub.expect("p", &["a", "b", "c", "d", "e"]).await;
    // The Placement's status is written after its decisions.
    let groups = eventually("the placement's decision groups", || async {
        let p = hub.get_placement("p").await;
        p.status
            .map(|s| s.decision_groups)
            .filter(|g| g.first().is_some_and(|g| g.clusters_count == 5))
    })
    .await;
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].decisions, ["p-decision-1"]);
    assert_eq!(groups[0].clusters_count, 5);
    let d = &hub.decisions("p").await[0];
    let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Placement", "p", Some(true))
    );

    let api: Api<PlacementDecision> = Api::namespaced(hub.client.clone(), &hub.ns);
    api.delete("p-decision-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the decision to come back", || async {
        let ds = hub.decisions("p").await;
        (ds.len() == 1
            && ds[0]
                .status
                .as_ref()
                .is_some_and(|s| s.decisions.len() == 5))
        .then_some(())
    })
    .await;
    // A user edit is overwritten.
    api.patch_status(
        "p-decision-1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"decisions": []}})),
    )
    .await
    .unwrap();
    hub.expect("p", &["a", "b", "c", "d", "e"]).await;
}

#[tokio::test]
async fn terminating_clusters_leave_the_decisions() {
    let hub = Hub::new("pl-term").await;
    let names = hub.clusters(&["a", "b", "c", "d", "e"], json!({})).await;
    hub.placement("p", json!({})).await;
    hub.expect("p", &["a", "b", "c", "d", "e"]).await;
    hub.patch_cluster(
        &names[0],
        json!({"metadata": {"finalizers": ["test.io/hold"]}}),
    )
    .await;
    hub.delete_cluster(&names[0]).await;
    hub.expect("p", &["b", "c", "d", "e"]).await;
    hub.patch_cluster(&names[0], json!({"metadata": {"finalizers": null}}))
        .await;
}

#[tokio::test]
async fn an_empty_decision_when_nothing_matches() {
    let hub = Hub::new("pl-empty").await;
    hub.clusters(&["a"], json!({"env": "dev"})).await;
    hub.placement("p", json!({"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"env": "prod"}}}}]}))
        .await;
    let msg = hub
        .expect_condition("p", SATISFIED, "False", "NoManagedClusterMatched")
        .await;
    assert_eq!(
        msg,
        "No ManagedCluster matches any of the cluster predicate"
    );
    let ds = hub.decisions("p").await;
    assert_eq!(ds.len(), 1);
    // Created empty: like upstream, no status write follows (the apiserver drops status on
    // create, and an empty list needs none).
    assert!(ds[0].status.as_ref().is_none_or(|s| s.decisions.is_empty()));
}

#[tokio::test]
async fn more_than_100_clusters_make_two_decisions() {
    let hub = Hub::new("pl-101").await;
    let names: Vec<String> = (0..101).map(|i| format!("c{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    hub.clusters(&refs, json!({})).await;
    hub.placement("p", json!({})).await;
    hub.expect_count("p", 101).await;
    let ds = hub.decisions("p").await;
    let sizes: Vec<(String, usize)> = ds
        .iter()
        .map(|d| {
            (
                d.metadata.name.clone().unwrap(),
                d.status.as_ref().unwrap().decisions.len(),
            )
        })
        .collect();
    assert_eq!(
        sizes,
        [
            ("p-decision-1".to_string(), 100),
            ("p-decision-2".to_string(), 1)
        ]
    );
    hub.expect_condition("p", SATISFIED, "True", "AllDecisionsScheduled")
        .await;
}

#[tokio::test]
async fn reschedules_on_cluster_sets_and_number_of_clusters() {
    let hub = Hub::new("pl-sets").await;
    hub.clusters(&["a", "b", "c"], json!({})).await;
    let other = format!("{}-other", hub.ns);
    hub.create_set(
        &other,
        json!({"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}),
    )
    .await;
    hub.bind(&other).await;
    for n in ["x", "y"] {
        hub.cluster(
            n,
            json!({"cluster.open-cluster-management.io/clusterset": other}),
            serde_json::Value::Null,
        )
        .await;
    }
    hub.placement("p", json!({})).await;
    hub.expect("p", &["a", "b", "c", "x", "y"]).await;
    hub.patch_placement("p", json!({"spec": {"clusterSets": [other]}}))
        .await;
    hub.expect("p", &["x", "y"]).await;
    hub.patch_placement(
        "p",
        json!({"spec": {"clusterSets": null, "numberOfClusters": 4}}),
    )
    .await;
    hub.expect_count("p", 4).await;
    hub.patch_placement("p", json!({"spec": {"numberOfClusters": 2}}))
        .await;
    hub.expect_count("p", 2).await;
    hub.patch_placement("p", json!({"spec": {"numberOfClusters": 8}}))
        .await;
    hub.expect_count("p", 5).await;
    let msg = hub
        .expect_condition("p", SATISFIED, "False", "NotAllDecisionsScheduled")
        .await;
    assert_eq!(msg, "3 cluster decisions unscheduled");
    // New clusters satisfy it.
    hub.clusters(&["d", "e", "f"], json!({})).await;
    hub.expect_count("p", 8).await;
    hub.expect_condition("p", SATISFIED, "True", "AllDecisionsScheduled")
        .await;
}

#[tokio::test]
async fn a_misconfiguration_once_fixed_schedules() {
    let hub = Hub::new("pl-miscfg").await;
    hub.clusters(&["a"], json!({})).await;
    hub.placement(
        "p",
        json!({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
    )
    .await;
    let msg = hub
        .expect_condition("p", MISCONFIGURED, "True", "Misconfigured")
        .await;
    assert_eq!(
        msg,
        "TaintToleration:If the operator is Exists, the value should be empty."
    );
    hub.expect_condition("p", SATISFIED, "False", "NoManagedClusterMatched")
        .await;
    assert_eq!(hub.decisions("p").await.len(), 1);
    hub.patch_placement("p", json!({"spec": {"tolerations": null}}))
        .await;
    hub.expect("p", &["a"]).await;
    hub.expect_condition("p", MISCONFIGURED, "False", "Succeedconfigured")
        .await;
    hub.expect_condition("p", SATISFIED, "True", "AllDecisionsScheduled")
        .await;
}

#[tokio::test]
async fn label_selector_and_global_clustersets() {
    let hub = Hub::new("pl-lsset").await;
    let sel = format!("{}-sel", hub.ns);
    hub.create_set(&sel, json!({"clusterSelector": {"selectorType": "LabelSelector", "labelSelector": {"matchLabels": {"pick": hub.ns.clone()}}}})).await;
    hub.bind(&sel).await;
    hub.placement("p", json!({"clusterSets": [sel]})).await;
    hub.expect_condition("p", SATISFIED, "False", "AllManagedClusterSetsEmpty")
        .await;
    let pick = json!({"pick": hub.ns.clone()});
    let names = hub.clusters(&["a"], pick.clone()).await;
    hub.expect("p", &["a"]).await;
    hub.clusters(&["b"], pick.clone()).await;
    hub.expect("p", &["a", "b"]).await;
    hub.delete_cluster(&names[0]).await;
    hub.expect("p", &["b"]).await;
    // Relabel b out of the set.
    hub.cluster("b", json!({}), serde_json::Value::Null).await;
    hub.expect("p", &[]).await;
    // The set deleted, then added again.
    hub.cluster("b", pick, serde_json::Value::Null).await;
    hub.expect("p", &["b"]).await;
    hub.delete_set(&sel).await;
    hub.expect_condition("p", SATISFIED, "False", "NoIntersection")
        .await;
    hub.create_set(&sel, json!({"clusterSelector": {"selectorType": "LabelSelector", "labelSelector": {"matchLabels": {"pick": hub.ns.clone()}}}})).await;
    hub.expect("p", &["b"]).await;
    // The binding deleted, then added again.
    hub.unbind(&sel).await;
    hub.expect_condition("p", SATISFIED, "False", "NoIntersection")
        .await;
    hub.bind(&sel).await;
    hub.expect("p", &["b"]).await;
}

#[tokio::test]
async fn predicates_reschedule_when_they_change() {
    let hub = Hub::new("pl-pred").await;
    hub.cluster(
        "a",
        json!({"env": "prod"}),
        json!({"clusterClaims": [{"name": "region", "value": "east"}]}),
    )
    .await;
    hub.cluster(
        "b",
        json!({"env": "dev"}),
        json!({"clusterClaims": [{"name": "region", "value": "west"}]}),
    )
    .await;
    let sel =
        |s: serde_json::Value| json!({"spec": {"predicates": [{"requiredClusterSelector": s}]}});
    hub.placement("p", json!({"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"env": "prod"}}}}]})).await;
    hub.expect("p", &["a"]).await;
    hub.patch_placement("p", sel(json!({"claimSelector": {"matchExpressions": [{"key": "region", "operator": "In", "values": ["west"]}]}}))).await;
    hub.expect("p", &["b"]).await;
    hub.patch_placement(
        "p",
        sel(json!({"celSelector": {"celExpressions": ["xxxx.expression"]}})),
    )
    .await;
    let msg = hub
        .expect_condition("p", MISCONFIGURED, "True", "Misconfigured")
        .await;
    assert!(msg.starts_with("Predicate:compilation failed"), "{msg}");
    hub.expect("p", &[]).await;
    let a = hub.cluster_name("a");
    let b = hub.cluster_name("b");
    hub.score(&a, "demo", &[("demo", 90)], None).await;
    hub.score(&b, "demo", &[("demo", 70)], None).await;
    hub.patch_placement("p", sel(json!({"celSelector": {"celExpressions": ["managedCluster.scores(\"demo\").filter(s, s.name == 'demo').all(e, e.value > 80)"]}}))).await;
    hub.expect("p", &["a"]).await;
    // A score update reaches placements that read it through CEL.
    hub.score(&b, "demo", &[("demo", 95)], None).await;
    hub.expect("p", &["a", "b"]).await;
}

#[tokio::test]
async fn prioritizers_default_and_resources() {
    let hub = Hub::new("pl-prio").await;
    let res = |cpu: &str, mem: &str| json!({"allocatable": {"cpu": cpu, "memory": mem}, "capacity": {"cpu": cpu, "memory": mem}});
    hub.cluster("c0", json!({}), res("10", "50")).await;
    hub.cluster("c1", json!({}), res("7", "90")).await;
    hub.cluster("c2", json!({}), res("9", "80")).await;
    hub.placement("dflt", json!({"numberOfClusters": 2})).await;
    hub.expect("dflt", &["c0", "c1"]).await;
    hub.placement(
        "res",
        json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": 1},
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableMemory"}, "weight": 1}]}}),
    )
    .await;
    hub.expect("res", &["c0", "c2"]).await;
    // A new cluster with more resources wins; removing it goes back.
    let c3 = hub.cluster("c3", json!({}), res("10", "100")).await;
    hub.expect("res", &["c2", "c3"]).await;
    hub.delete_cluster(&c3).await;
    hub.expect("res", &["c0", "c2"]).await;
}

#[tokio::test]
async fn steady_keeps_the_decision() {
    let hub = Hub::new("pl-steady").await;
    let res = |cpu: &str, mem: &str| json!({"allocatable": {"cpu": cpu, "memory": mem}, "capacity": {"cpu": cpu, "memory": mem}});
    hub.cluster("c0", json!({}), res("10", "50")).await;
    let c1 = hub.cluster("c1", json!({}), res("7", "90")).await;
    hub.cluster("c2", json!({}), res("9", "80")).await;
    hub.placement(
        "steady",
        json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Additive", "configurations": [
        {"scoreCoordinate": {"builtIn": "Steady"}, "weight": 3},
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableCPU"}, "weight": 1},
        {"scoreCoordinate": {"builtIn": "ResourceAllocatableMemory"}, "weight": 1}]}}),
    )
    .await;
    hub.expect("steady", &["c0", "c2"]).await;
    // A foreign decision on c1 and a new, better cluster c3: Steady 3 keeps {c0, c2}.
    let api: Api<PlacementDecision> = Api::namespaced(hub.client.clone(), &hub.ns);
    let fake: PlacementDecision =
        serde_json::from_value(json!({"metadata": {"name": "other-1"}})).unwrap();
    api.create(&Default::default(), &fake).await.unwrap();
    api.patch_status(
        "other-1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"decisions": [{"clusterName": c1, "reason": ""}]}})),
    )
    .await
    .unwrap();
    hub.cluster("c3", json!({}), res("10", "100")).await;
    hub.placement(
        "probe",
        json!({"numberOfClusters": 4, "prioritizerPolicy": {"mode": "Exact"}}),
    )
    .await;
    hub.expect("probe", &["c0", "c1", "c2", "c3"]).await;
    assert_eq!(hub.chosen("steady").await, ["c0", "c2"]);
}

#[tokio::test]
async fn balance_moves_away_from_busy_clusters() {
    let hub = Hub::new("pl-bal").await;
    hub.clusters(&["c0", "c1", "c2"], json!({})).await;
    // Another placement (in another namespace: not this controller's) already uses c0.
    let api: Api<PlacementDecision> = Api::namespaced(hub.client.clone(), "default");
    let fake: PlacementDecision =
        serde_json::from_value(json!({"metadata": {"name": format!("{}-fake", hub.ns)}})).unwrap();
    api.create(&Default::default(), &fake).await.unwrap();
    api.patch_status(&format!("{}-fake", hub.ns), &PatchParams::default(), &Patch::Merge(&json!({"status": {"decisions": [{"clusterName": hub.cluster_name("c0"), "reason": ""}]}})))
        .await
        .unwrap();
    hub.placement(
        "p",
        json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"builtIn": "Balance"}, "weight": 2}]}}),
    )
    .await;
    hub.expect("p", &["c1", "c2"]).await;
    api.delete(&format!("{}-fake", hub.ns), &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn addon_scores_move_the_decision() {
    // The extensible-scheduling enhancement's story 1 (an agent's scores) and story 4 (a third party's): scores are written,
    // the decision follows them.
    let hub = Hub::new("pl-addon").await;
    let names = hub.clusters(&["c0", "c1", "c2"], json!({})).await;
    hub.placement("p", json!({"numberOfClusters": 2, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1}]}})).await;
    hub.expect("p", &["c0", "c1"]).await;
    for (c, v) in names.iter().zip([80, 90, 100]) {
        hub.score(c, "demo", &[("demo", v)], Some("2099-01-01T00:00:00Z"))
            .await;
    }
    hub.expect("p", &["c1", "c2"]).await;
    hub.score(
        &names[0],
        "demo",
        &[("demo", 100)],
        Some("2099-01-01T00:00:00Z"),
    )
    .await;
    hub.expect("p", &["c0", "c2"]).await;
    // The decisions carry the totals.
    let d = &hub.decisions("p").await[0];
    let scores: Vec<i64> = d
        .status
        .as_ref()
        .unwrap()
        .decisions
        .iter()
        .map(|e| e.score)
        .collect();
    assert_eq!(scores, [100, 100]);
}

#[tokio::test]
async fn disaster_recovery_fails_over_and_back() {
    let hub = Hub::new("pl-dr").await;
    let names = hub.clusters(&["primary", "backup"], json!({})).await;
    hub.score(&names[0], "disasterrecovery", &[("workload", 100)], None)
        .await;
    hub.score(&names[1], "disasterrecovery", &[("workload", 0)], None)
        .await;
    hub.placement("p", json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
        {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "disasterrecovery", "scoreName": "workload"}}, "weight": 1}]}})).await;
    hub.expect("p", &["primary"]).await;
    hub.patch_cluster(&names[0], json!({"spec": {"taints": [{"key": "cluster.open-cluster-management.io/unavailable", "effect": "NoSelect", "timeAdded": "2026-01-01T00:00:00Z"}]}})).await;
    hub.expect("p", &["backup"]).await;
    hub.patch_cluster(&names[0], json!({"spec": {"taints": null}}))
        .await;
    hub.expect("p", &["primary"]).await;
}

#[tokio::test]
async fn tolerations_no_select_if_new_and_expiry() {
    let hub = Hub::new("pl-tol").await;
    let now = jiff::Timestamp::now();
    let added = |secs_ago: i64| (now - jiff::SignedDuration::from_secs(secs_ago)).to_string();
    let names = hub.clusters(&["c0", "c1", "c2", "c3"], json!({})).await;
    let taint = |k: &str, v: &str, e: &str| json!({"spec": {"taints": [{"key": k, "value": v, "effect": e, "timeAdded": added(0)}]}});
    hub.patch_cluster(&names[0], taint("key1", "value1", "NoSelect"))
        .await;
    hub.patch_cluster(&names[1], taint("key2", "value2", "NoSelectIfNew"))
        .await;
    hub.patch_cluster(&names[2], taint("key3", "value3", "PreferNoSelect"))
        .await;
    hub.placement(
        "p",
        json!({"numberOfClusters": 4, "tolerations": [
        {"key": "key1", "operator": "Exists", "effect": "PreferNoSelect"},
        {"key": "key2", "operator": "Exists", "effect": "NoSelect"},
        {"key": "key3", "operator": "Exists", "effect": "NoSelect"},
        {"key": "key4", "operator": "Exists", "effect": "NoSelect"}]}),
    )
    .await;
    hub.expect("p", &["c2", "c3"]).await;
    hub.patch_cluster(&names[3], taint("key4", "", "NoSelectIfNew"))
        .await;
    // Give the controller a chance to see it, then check c3 is still there.
    hub.placement("probe", json!({"numberOfClusters": 4})).await;
    hub.expect("probe", &["c2"]).await;
    hub.expect("p", &["c2", "c3"]).await;

    // tolerationSeconds: tolerated for 3 s and 6 s from timeAdded, then evicted in turn.
    let t = |k: &str| json!({"spec": {"taints": [{"key": k, "effect": "NoSelect", "timeAdded": added(0)}]}});
    let fresh = hub.clusters(&["e1", "e2"], json!({})).await;
    hub.patch_cluster(&fresh[0], t("gone")).await;
    hub.patch_cluster(&fresh[1], t("later")).await;
    hub.placement("exp", json!({"clusterSets": [hub.set.clone()], "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}}}],
        "tolerations": [{"key": "gone", "operator": "Exists", "tolerationSeconds": 3}, {"key": "later", "operator": "Exists", "tolerationSeconds": 6}]})).await;
    eventually("e1 and e2 tolerated", || async {
        let c = hub.chosen("exp").await;
        (c.contains(&"e1".to_string()) && c.contains(&"e2".to_string())).then_some(())
    })
    .await;
    eventually("e1 evicted after its toleration", || async {
        let c = hub.chosen("exp").await;
        (!c.contains(&"e1".to_string()) && c.contains(&"e2".to_string())).then_some(())
    })
    .await;
    eventually("e2 evicted after its toleration", || async {
        (!hub.chosen("exp").await.contains(&"e2".to_string())).then_some(())
    })
    .await;
}

#[tokio::test]
async fn decision_groups_stay_stable_end_to_end() {
    let hub = Hub::new("pl-groups").await;
    hub.clusters(&["o1", "o2"], json!({"vendor": "openShift"}))
        .await;
    let others = hub.clusters(&["x1", "x2", "x3"], json!({})).await;
    hub.placement("p", json!({"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": 2,
        "decisionGroups": [{"groupName": "canary", "groupClusterSelector": {"labelSelector": {"matchLabels": {"vendor": "openShift"}}}}]}}})).await;
    let groups = |p: ocm_api::Placement| {
        p.status
            .unwrap_or_default()
            .decision_groups
            .iter()
            .map(|g| {
                (
                    g.decision_group_index,
                    g.decision_group_name.clone(),
                    g.decisions.clone(),
                    g.clusters_count,
                )
            })
            .collect::<Vec<_>>()
    };
    eventually("three groups", || async {
        let g = groups(hub.get_placement("p").await);
        (g.len() == 3).then_some(())
    })
    .await;
    assert_eq!(
        groups(hub.get_placement("p").await),
        [
            (0, "canary".to_string(), vec!["p-decision-1".to_string()], 2),
            (1, String::new(), vec!["p-decision-2".to_string()], 2),
            (2, String::new(), vec!["p-decision-3".to_string()], 1),
        ]
    );
    hub.delete_cluster(&hub.cluster_name("o1")).await;
    hub.delete_cluster(&others[2]).await;
    eventually("two groups", || async {
        (groups(hub.get_placement("p").await).len() == 2).then_some(())
    })
    .await;
    assert_eq!(
        groups(hub.get_placement("p").await),
        [
            (0, "canary".to_string(), vec!["p-decision-1".to_string()], 1),
            (1, String::new(), vec!["p-decision-2".to_string()], 2),
        ]
    );
    let labels = hub.decisions("p").await[0].metadata.labels.clone().unwrap();
    assert_eq!(
        labels["cluster.open-cluster-management.io/decision-group-name"],
        "canary"
    );
}

#[tokio::test]
async fn spread_end_to_end() {
    let hub = Hub::new("pl-spread").await;
    for (n, zone) in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")] {
        hub.cluster(n, json!({"zone": zone}), serde_json::Value::Null)
            .await;
    }
    hub.placement("p", json!({"numberOfClusters": 4, "spreadPolicy": {"spreadConstraints": [
        {"topologyKey": "zone", "topologyKeyType": "Label", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}})).await;
    hub.expect("p", &["a1", "a2", "b1"]).await;
    let msg = hub
        .expect_condition("p", SATISFIED, "False", "NotAllDecisionsScheduled")
        .await;
    assert!(
        msg.starts_with(
            "1 cluster decisions unscheduled: spread constraints allow no more clusters"
        ),
        "{msg}"
    );
    hub.cluster("b2", json!({"zone": "b"}), serde_json::Value::Null)
        .await;
    hub.expect_count("p", 4).await;
    hub.expect_condition("p", SATISFIED, "True", "AllDecisionsScheduled")
        .await;
}

#[tokio::test]
async fn the_disable_annotation_leaves_a_placement_alone() {
    let hub = Hub::new("pl-disable").await;
    hub.clusters(&["a"], json!({})).await;
    let api: Api<ocm_api::Placement> = Api::namespaced(hub.client.clone(), &hub.ns);
    let p: ocm_api::Placement = serde_json::from_value(json!({"metadata": {"name": "off", "annotations": {"cluster.open-cluster-management.io/experimental-scheduling-disable": "true"}}, "spec": {}})).unwrap();
    api.create(&Default::default(), &p).await.unwrap();
    hub.placement("on", json!({})).await;
    hub.expect("on", &["a"]).await;
    assert!(hub.decisions("off").await.is_empty());
    assert!(hub.get_placement("off").await.status.is_none());
}
