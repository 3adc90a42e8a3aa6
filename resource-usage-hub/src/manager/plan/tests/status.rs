//! Conditions, health modes and rollouts by decision group.

use super::*;

#[test]
fn configs_and_failures_become_conditions() {
    let s = settings();
    let mut with_config = user_mca("c1").as_ref().clone();
    with_config.spec.configs = serde_json::from_value(json!([
            {"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "tuned"}
        ]))
        .expect("configs");
    let mut snap = Snapshot {
        cma: Some(cma(json!({"type": "Manual"}), lifecycle_self())),
        mcas: BTreeMap::from([("c1".to_owned(), Arc::new(with_config))]),
        clusters: managed(&["c1"]),
        now: t(0),
        ..Snapshot::default()
    };
    converge(&s, &mut snap);
    assert_eq!(
        cond(&snap, "c1", "Configured"),
        Some(("False", CONFIG_NOT_FOUND))
    );
    assert_eq!(
        cond(&snap, "c1", "ManifestApplied"),
        Some(("False", "ManifestWorkApplyFailed"))
    );
    assert!(snap.works.is_empty(), "nothing deployed without its config");

    // The config appears: deployed with it, recorded in configReferences and the work.
    let spec = AddOnDeploymentConfigSpec {
        agent_install_namespace: "custom".into(),
        ..Default::default()
    };
    snap.configs.insert(
        ConfigKey {
            namespace: "c1".into(),
            name: "tuned".into(),
        },
        Config {
            spec: Ok(spec),
            hash: "h1".into(),
        },
    );
    converge(&s, &mut snap);
    assert_eq!(cond(&snap, "c1", "Configured"), Some(("True", CONFIGURED)));
    let status = snap.mcas["c1"].status.clone().expect("status");
    assert_eq!(status.namespace, "custom");
    assert_eq!(
        status.config_references[0]
            .desired_config
            .as_ref()
            .map(|d| d.spec_hash.as_str()),
        Some("h1")
    );
    let w = &snap.works["c1"];
    assert_eq!(
        annotation_of(&w.metadata, annotation::CONFIG_SPEC_HASH),
        Some(r#"{"addondeploymentconfigs.addon.open-cluster-management.io/c1/tuned":"h1"}"#)
    );
    // Completed on it: last applied.
    report_work_in_memory(&mut snap, "c1", true);
    converge(&s, &mut snap);
    let status = snap.mcas["c1"].status.clone().expect("status");
    assert_eq!(
        status.config_references[0].last_applied_config,
        status.config_references[0].desired_config
    );

    // An unparsable config and failed writes are reported, not fatal.
    snap.configs.insert(
        ConfigKey {
            namespace: "c1".into(),
            name: "tuned".into(),
        },
        Config {
            spec: Err("spec.registries: invalid type".into()),
            hash: "h2".into(),
        },
    );
    snap.errors
        .insert(("c1".into(), Step::Permission), "forbidden".into());
    converge(&s, &mut snap);
    assert_eq!(
        cond(&snap, "c1", "Configured"),
        Some(("False", CONFIG_INVALID))
    );
    assert_eq!(
        cond(&snap, "c1", "RegistrationApplied"),
        Some(("False", "SetPermissionFailed"))
    );
}

#[test]
fn lease_mode_leaves_available_to_the_klusterlet() {
    let s = Settings {
        health: HealthMode::Lease,
        ..settings()
    };
    let mut snap = Snapshot {
        cma: Some(cma(json!({"type": "Manual"}), lifecycle_self())),
        mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
        clusters: managed(&["c1"]),
        now: t(0),
        ..Snapshot::default()
    };
    converge(&s, &mut snap);
    assert_eq!(cond(&snap, "c1", "Available"), None);
    assert_eq!(
        snap.mcas["c1"]
            .status
            .as_ref()
            .map(|s| s.health_check.mode.as_str()),
        Some("Lease")
    );
    // Applied and rolled out is done: no Available probe is consulted.
    let mut w = snap.works["c1"].as_ref().clone();
    let deployment = w.spec.manifest_configs[0].resource_identifier.clone();
    w.status = serde_json::from_value(json!({
            "conditions": [
                {"type": "Applied", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
                {"type": "Available", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
            "resourceStatus": {"manifests": [{
                "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments",
                                 "namespace": deployment.namespace, "name": deployment.name},
                "conditions": [{"type": "RolledOut", "status": "True", "reason": "R", "message": "",
                                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}]}
        }))
        .ok();
    snap.works.insert("c1".into(), Arc::new(w.clone()));
    converge(&s, &mut snap);
    assert_eq!(
        cond(&snap, "c1", "Progressing"),
        Some(("False", "Completed"))
    );
    // Not rolled out (the rule evaluated for an older generation): still progressing.
    w.metadata.generation = Some(2);
    snap.works.insert("c1".into(), Arc::new(w));
    converge(&s, &mut snap);
    assert_eq!(
        cond(&snap, "c1", "Progressing"),
        Some(("True", "Progressing"))
    );
}

#[test]
fn rolls_out_by_decision_group() {
    let s = settings();
    let mut snap = Snapshot {
        cma: Some(cma(
            placements(
                json!({"type": "ProgressivePerGroup", "progressivePerGroup": {
                    "mandatoryDecisionGroups": [{"groupName": "canary"}], "progressDeadline": "10m", "maxFailures": 1}}),
            ),
            lifecycle_self(),
        )),
        decisions: vec![
            decision("d1", Some((0, "canary")), &["c1"]),
            decision("d2", Some((1, "")), &["c2"]),
            decision("d3", Some((2, "")), &["c3"]),
        ],
        clusters: managed(&["c1", "c2", "c3"]),
        now: t(0),
        ..Snapshot::default()
    };
    converge(&s, &mut snap);
    assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1"]);
    assert_eq!(
        cond(&snap, "c2", "Progressing"),
        Some(("False", "WaitingForCanary"))
    );
    report_work_in_memory(&mut snap, "c1", true);
    converge(&s, &mut snap);
    assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1", "c2"]);
    // A group that does not come up holds the next one until its deadline.
    let p = plan(&s, &snap);
    assert_eq!(p.recheck_after, Some(Duration::from_secs(600)));
    snap.now = t(599);
    converge(&s, &mut snap);
    assert!(!snap.works.contains_key("c3"));
    snap.now = t(601);
    converge(&s, &mut snap);
    // Timed out counts as failed (upstream): within maxFailures, the rollout moves on.
    assert!(snap.works.contains_key("c3"), "the deadline passed");
    report_work_in_memory(&mut snap, "c2", true);
    report_work_in_memory(&mut snap, "c3", true);
    converge(&s, &mut snap);

    // A new image: the canary first, and a failing canary stops it.
    let s2 = Settings {
        template: AgentTemplate {
            image: "example.com/agent:2".into(),
            ..s.template.clone()
        },
        ..s.clone()
    };
    let before: Vec<String> = ["c1", "c2", "c3"]
        .iter()
        .map(|c| {
            annotation_of(&snap.works[*c].metadata, RENDERING_HASH)
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    converge(&s2, &mut snap);
    let hash = |snap: &Snapshot, c: &str| {
        annotation_of(&snap.works[c].metadata, RENDERING_HASH)
            .unwrap_or_default()
            .to_owned()
    };
    assert_ne!(hash(&snap, "c1"), before[0]);
    assert_eq!(
        (hash(&snap, "c2"), hash(&snap, "c3")),
        (before[1].clone(), before[2].clone())
    );
    report_work_in_memory(&mut snap, "c1", false);
    snap.now = t(10_000);
    converge(&s2, &mut snap);
    assert_eq!(cond(&snap, "c1", "Progressing"), Some(("False", "Failed")));
    assert_eq!(
        hash(&snap, "c2"),
        before[1],
        "a failed mandatory group stops the rollout, even past its deadline"
    );
    report_work_in_memory(&mut snap, "c1", true);
    converge(&s2, &mut snap);
    assert_ne!(hash(&snap, "c2"), before[1]);
}

#[test]
fn progressive_takes_the_placements_group_size() {
    let s = settings();
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1",
        "kind": "Placement",
        "metadata": {"name": "fleet", "namespace": "p"},
        "spec": {"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": 2}}}
    }))
    .expect("a placement");
    let mut snap = Snapshot {
        cma: Some(cma(
            placements(json!({"type": "Progressive"})),
            lifecycle_self(),
        )),
        decisions: vec![decision("d1", Some((0, "")), &["c1", "c2", "c3"])],
        placements: BTreeMap::from([(("p".to_owned(), "fleet".to_owned()), Arc::new(placement))]),
        clusters: managed(&["c1", "c2", "c3"]),
        now: t(0),
        ..Snapshot::default()
    };
    converge(&s, &mut snap);
    assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1", "c2"]);
    report_work_in_memory(&mut snap, "c1", true);
    converge(&s, &mut snap);
    assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1", "c2", "c3"]);
    // Without the placement: no limit.
    snap.placements.clear();
    snap.works.clear();
    converge(&s, &mut snap);
    assert_eq!(snap.works.len(), 3);
}
