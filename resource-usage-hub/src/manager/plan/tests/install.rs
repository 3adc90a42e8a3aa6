//! Install and uninstall by placement, under every lifecycle.

use super::*;

#[test]
fn installs_on_the_placements_clusters_and_then_rests() {
    let s = settings();
    let mut snap = Snapshot {
        cma: Some(cma(placements(json!({"type": "All"})), lifecycle_self())),
        decisions: vec![decision("d1", None, &["c1", "c2"])],
        placements: satisfied(2),
        clusters: managed(&["c1", "c2"]),
        now: t(0),
        ..Snapshot::default()
    };
    let actions = converge(&s, &mut snap);
    assert_eq!(snap.mcas.keys().collect::<Vec<_>>(), ["c1", "c2"]);
    assert_eq!(snap.works.len(), 2);
    assert_eq!((snap.roles.len(), snap.bindings.len()), (0, 2));
    let m = &snap.mcas["c1"];
    assert!(owned_by(&m.metadata, snap.cma.as_deref().expect("cma")));
    assert_eq!(
        cond(&snap, "c1", "RegistrationApplied"),
        Some(("True", "SetPermissionApplied"))
    );
    assert_eq!(
        cond(&snap, "c1", "Available"),
        Some(("Unknown", "WorkNotApplied"))
    );
    assert_eq!(
        cond(&snap, "c1", "Progressing"),
        Some(("True", "Progressing"))
    );
    let status = m.status.as_ref().expect("status");
    assert_eq!(status.namespace, "agents");
    assert_eq!(status.health_check.mode, "Customized");
    assert_eq!(
        status.registrations[0].subject.user,
        "system:open-cluster-management:cluster:c1:addon:ruc:agent:ruc-agent"
    );
    // Each kind of write once per cluster, permission before work.
    let c1: Vec<&str> = actions
        .iter()
        .filter(|a| a.cluster() == Some("c1"))
        .map(Action::kind)
        .filter(|k| *k != "patch_mca_status")
        .collect();
    assert_eq!(c1, ["create_mca", "apply_rolebinding", "apply_work"]);
    // Nothing changes: nothing to write, at any later time.
    snap.now = t(3600);
    assert_eq!(plan(&s, &snap).actions, []);

    // The agent comes up: Available, then Completed; the progression completes.
    report_work_in_memory(&mut snap, "c1", true);
    report_work_in_memory(&mut snap, "c2", true);
    converge(&s, &mut snap);
    assert_eq!(
        cond(&snap, "c1", "Available"),
        Some(("True", "ProbeAvailable"))
    );
    assert_eq!(
        cond(&snap, "c1", "ManifestApplied"),
        Some(("True", "AddonManifestApplied"))
    );
    assert_eq!(
        cond(&snap, "c1", "Progressing"),
        Some(("False", "Completed"))
    );
    let progression = &snap
        .cma
        .as_ref()
        .and_then(|c| c.status.clone())
        .expect("status")
        .install_progressions[0];
    assert_eq!(progression.conditions[0].reason, "Completed");

    // A cluster leaves: its add-on goes, then what belonged to it.
    snap.decisions = vec![decision("d1", None, &["c1"])];
    snap.placements = satisfied(1);
    let actions = converge(&s, &mut snap);
    assert_eq!(
        kinds(&actions)
            .into_iter()
            .filter(|(k, _)| k.starts_with("delete"))
            .collect::<Vec<_>>(),
        [
            ("delete_mca", Some("c2")),
            ("delete_work", Some("c2")),
            ("delete_rolebinding", Some("c2"))
        ]
    );
}

#[test]
fn keeps_what_an_unscheduled_placement_installed() {
    let s = settings();
    let installed = || {
        let mut snap = Snapshot {
            cma: Some(cma(placements(json!({"type": "All"})), lifecycle_self())),
            decisions: vec![decision("d1", None, &["c1", "c2"])],
            placements: satisfied(2),
            clusters: managed(&["c1", "c2"]),
            now: t(0),
            ..Snapshot::default()
        };
        converge(&s, &mut snap);
        report_work_in_memory(&mut snap, "c1", true);
        report_work_in_memory(&mut snap, "c2", true);
        converge(&s, &mut snap);
        assert_eq!(scheduled_condition(&snap), "True/PlacementScheduled");
        snap
    };
    let misconfigured = json!({"conditions": [
            {"type": "PlacementMisconfigured", "status": "True", "reason": "Misconfigured",
             "message": "cel compile failed", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            satisfied_condition("False", "Misconfigured")]});
    // (what the scheduler leaves, decisions left, placement, the CMA's reason)
    let cases: Vec<(&str, &[&str], BTreeMap<_, _>, &str)> = vec![
        (
            "the placement is gone",
            &[],
            BTreeMap::new(),
            "PlacementNotFound",
        ),
        ("no status", &[], fleet(json!({})), "PlacementUnknown"),
        (
            "misconfigured, decisions emptied",
            &[],
            fleet(misconfigured),
            "PlacementFailed",
        ),
        (
            "scheduling Unknown",
            &["c1"],
            fleet(json!({"numberOfSelectedClusters": 1,
                             "conditions": [satisfied_condition("Unknown", "Scheduling")]})),
            "PlacementUnknown",
        ),
        (
            "over its CEL budget, decisions kept",
            &["c1", "c2"],
            fleet(json!({"numberOfSelectedClusters": 2,
                             "conditions": [satisfied_condition("False", "CELBudgetExceeded")]})),
            "PlacementFailed",
        ),
        (
            "decisions written, status not yet",
            &["c1"],
            satisfied(2),
            "PlacementUnknown",
        ),
    ];
    for (what, left, placement, reason) in cases {
        let mut snap = installed();
        let works = snap.works.clone();
        snap.decisions = vec![decision("d1", None, left)];
        snap.placements = placement;
        snap.now = t(60);
        let actions = converge(&s, &mut snap);
        assert!(
            actions.iter().all(|a| matches!(
                a,
                Action::PatchCmaStatus { .. } | Action::PatchMcaStatus { .. }
            )),
            "{what}: {:?}",
            kinds(&actions)
        );
        assert_eq!(snap.mcas.keys().collect::<Vec<_>>(), ["c1", "c2"], "{what}");
        assert_eq!(snap.works, works, "{what}");
        assert_eq!(
            scheduled_condition(&snap),
            format!("False/{reason}"),
            "{what}"
        );
        let message = conditions::find(&progression_of(&snap).conditions, PLACEMENT_SCHEDULED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(message.contains("p/fleet"), "{what}: {message}");
        assert_eq!(plan(&s, &snap).warnings.len(), 1, "{what}");

        // Scheduled again with the same clusters: nothing is reinstalled.
        snap.decisions = vec![decision("d1", None, &["c1", "c2"])];
        snap.placements = satisfied(2);
        snap.now = t(120);
        let actions = converge(&s, &mut snap);
        assert!(
            !actions.iter().any(|a| matches!(
                a,
                Action::CreateMca(_) | Action::DeleteMca { .. } | Action::ApplyWork(_)
            )),
            "{what}: {:?}",
            kinds(&actions)
        );
        assert_eq!(
            scheduled_condition(&snap),
            "True/PlacementScheduled",
            "{what}"
        );
    }

    // Scheduled and selecting nothing (a genuine answer): the add-ons go.
    for reason in ["NoManagedClusterMatched", "NoIntersection"] {
        let mut snap = installed();
        snap.decisions = vec![decision("d1", None, &[])];
        snap.placements = fleet(json!({"numberOfSelectedClusters": 0,
                                           "conditions": [satisfied_condition("False", reason)]}));
        converge(&s, &mut snap);
        assert!(snap.mcas.is_empty(), "{reason}");
        assert!(snap.works.is_empty(), "{reason}");
        assert_eq!(scheduled_condition(&snap), "True/PlacementScheduled");
    }

    // While one placement is unscheduled, an add-on the healthy one still selects is served.
    let mut snap = installed();
    snap.placements = fleet(json!({}));
    snap.decisions = vec![decision("d1", None, &["c1"])];
    let mut c1 = snap.works["c1"].as_ref().clone();
    c1.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(OBSERVED_SPEC_HASH.into(), "edited".into());
    snap.works.insert("c1".into(), Arc::new(c1));
    let actions = converge(&s, &mut snap);
    assert_eq!(
        kinds(&actions)
            .into_iter()
            .filter(|(k, _)| !k.starts_with("patch"))
            .collect::<Vec<_>>(),
        [("apply_work", Some("c1"))]
    );
}

fn progression_of(snap: &Snapshot) -> InstallProgression {
    snap.cma
        .as_ref()
        .and_then(|c| c.status.clone())
        .and_then(|s| s.install_progressions.into_iter().next())
        .expect("a progression")
}

/// `status/reason` of the progression's PlacementScheduled.
fn scheduled_condition(snap: &Snapshot) -> String {
    conditions::find(&progression_of(snap).conditions, PLACEMENT_SCHEDULED)
        .map(|c| format!("{}/{}", c.status, c.reason))
        .expect("PlacementScheduled")
}

#[test]
fn manual_and_foreign_lifecycles() {
    let s = settings();
    // Manual: users' MCAs are served, never removed; no progression is kept.
    let mut snap = Snapshot {
        cma: Some(cma(json!({"type": "Manual"}), lifecycle_self())),
        mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
        decisions: vec![decision("d1", None, &["c9"])],
        clusters: managed(&["c1", "c9"]),
        now: t(0),
        ..Snapshot::default()
    };
    let actions = converge(&s, &mut snap);
    assert!(snap.works.contains_key("c1"));
    assert!(!snap.mcas.contains_key("c9"));
    assert!(
        !kinds(&actions)
            .iter()
            .any(|(k, _)| *k == "delete_mca" || *k == "patch_cma_status")
    );

    // OCM's addon-manager owns install and rollout: this manager only deploys.
    let mut snap = Snapshot {
        cma: Some(cma(
            placements(json!({"type": "All"})),
            json!({"addon.open-cluster-management.io/lifecycle": "addon-manager"}),
        )),
        mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
        decisions: vec![decision("d1", None, &["c2"])],
        clusters: managed(&["c1", "c2"]),
        now: t(0),
        ..Snapshot::default()
    };
    let actions = converge(&s, &mut snap);
    assert_eq!(snap.mcas.len(), 1);
    assert!(snap.works.contains_key("c1"));
    assert!(
        !kinds(&actions)
            .iter()
            .any(|(k, _)| *k == "create_mca" || *k == "patch_cma_status")
    );
}

#[test]
fn keeps_its_cluster_management_addon() {
    let s = settings();
    let mut snap = Snapshot {
        now: t(0),
        ..Snapshot::default()
    };
    let p = plan(&s, &snap);
    let Some(Action::CreateCma(c)) = p.actions.first() else {
        panic!("creates the CMA: {:?}", p.actions);
    };
    assert_eq!(c.spec.install_strategy.type_, "Manual");
    assert_eq!(
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::ADDON_LIFECYCLE))
            .map(String::as_str),
        Some("self")
    );
    apply_in_memory(&mut snap, &p.actions);
    assert_eq!(plan(&s, &snap).actions, []);
    // A CMA from elsewhere without AddOnDeploymentConfig support gets it, once.
    let mut bare = snap.cma.as_deref().cloned().expect("cma");
    bare.spec.supported_configs.clear();
    snap.cma = Some(Arc::new(bare));
    let p = plan(&s, &snap);
    assert_eq!(kinds(&p.actions), [("patch_cma", None)]);
    let not_managed = Settings {
        manage_cma: false,
        ..settings()
    };
    assert_eq!(plan(&not_managed, &Snapshot::default()).actions, []);
}
