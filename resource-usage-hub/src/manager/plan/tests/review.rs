//! Review cases, the addon-manager's lifecycle, bad strategies and CSR approval.

use super::*;

#[test]
fn review_cases() {
    let s = settings();
    let base = || Snapshot {
        cma: Some(cma(placements(json!({"type": "All"})), lifecycle_self())),
        decisions: vec![decision("d1", None, &["c1", "c2"])],
        clusters: managed(&["c1", "c2"]),
        now: t(0),
        ..Snapshot::default()
    };

    // New MCAs carry the cluster's add-on annotations, and only those.
    let mut snap = base();
    converge(&s, &mut snap);
    assert_eq!(
        snap.mcas["c1"].metadata.annotations,
        Some(BTreeMap::from([(
            "addon.open-cluster-management.io/values".to_owned(),
            "{}".to_owned()
        )]))
    );

    // Switching to Manual keeps the add-ons.
    let mut manual = snap.cma.as_deref().cloned().expect("cma");
    manual.spec.install_strategy.type_ = "Manual".into();
    snap.cma = Some(Arc::new(manual));
    converge(&s, &mut snap);
    assert_eq!(snap.mcas.len(), 2);

    // A hand-edited work spec is put back; an extra owner is tolerated.
    let mut snap = base();
    converge(&s, &mut snap);
    let mut w = snap.works["c1"].as_ref().clone();
    // (Watched works carry their spec's hash; someone edited the spec.)
    w.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(OBSERVED_SPEC_HASH.into(), "edited".into());
    w.metadata
        .owner_references
        .get_or_insert_with(Vec::new)
        .push(OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "other".into(),
            uid: "other-uid".into(),
            ..Default::default()
        });
    snap.works.insert("c1".into(), Arc::new(w));
    let p = plan(&s, &snap);
    assert_eq!(kinds(&p.actions), [("apply_work", Some("c1"))]);
    apply_in_memory(&mut snap, &p.actions);
    let mut w = snap.works["c1"].as_ref().clone();
    w.metadata
        .owner_references
        .get_or_insert_with(Vec::new)
        .push(OwnerReference {
            uid: "other-uid".into(),
            ..Default::default()
        });
    snap.works.insert("c1".into(), Arc::new(w));
    assert_eq!(plan(&s, &snap).actions, []);

    // What the add-on did not own is not deleted.
    let mut stray = snap.works["c1"].as_ref().clone();
    stray.metadata.namespace = Some("c9".into());
    stray.metadata.owner_references = None;
    snap.works.insert("c9".into(), Arc::new(stray));
    assert_eq!(plan(&s, &snap).actions, []);

    // The token driver: the agent's own subject is kept, and bound as its service account.
    let token = |snap: &mut Snapshot, user: &str, groups: &[&str]| {
        let mut m = snap.mcas["c1"].as_ref().clone();
        let st = m.status.get_or_insert_with(Default::default);
        st.kube_client_driver = "token".into();
        st.registrations[0].subject = ocm_api::addon::v1alpha1::Subject {
            user: user.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            organization_units: Vec::new(),
        };
        snap.mcas.insert("c1".into(), Arc::new(m));
    };
    let subjects = |snap: &Snapshot| -> Option<Vec<(String, String)>> {
        snap.bindings.get("c1").map(|b| {
            b.subjects
                .iter()
                .flatten()
                .map(|x| (x.kind.clone(), x.name.clone()))
                .collect()
        })
    };
    let own = "system:serviceaccount:c1:c1-ruc-agent";
    let mut snap = base();
    converge(&s, &mut snap);
    token(&mut snap, own, &[]);
    converge(&s, &mut snap);
    let status = snap.mcas["c1"].status.clone().expect("status");
    assert_eq!(status.registrations[0].subject.user, own);
    assert_eq!(
        subjects(&snap),
        Some(vec![("ServiceAccount".into(), "c1-ruc-agent".into())])
    );
    assert_eq!(
        cond(&snap, "c1", "RegistrationApplied"),
        Some(("True", "SetPermissionApplied"))
    );

    // Any other subject the spoke writes never reaches a RoleBinding: the one we made goes,
    // and the condition says why.
    let injected = format!(
        "{own}\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:authenticated"
    );
    let hostile: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "a newline and YAML",
            &injected,
            vec!["system:serviceaccounts:c1"],
        ),
        (
            "another cluster's agent",
            "system:serviceaccount:c2:c2-ruc-agent",
            vec![],
        ),
        (
            "another cluster's certificate user",
            "system:open-cluster-management:cluster:c2:addon:ruc:agent:ruc-agent",
            vec!["system:open-cluster-management:cluster:c2:addon:ruc"],
        ),
        ("everyone as a group", own, vec!["system:authenticated"]),
        (
            "the cluster namespace's default account",
            "system:serviceaccount:c1:default",
            vec![],
        ),
    ];
    for (what, user, groups) in hostile {
        let mut snap = base();
        converge(&s, &mut snap);
        assert!(snap.bindings.contains_key("c1"));
        token(&mut snap, user, &groups);
        let actions = converge(&s, &mut snap);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::ApplyRoleBinding(_))),
            "{what}: {actions:?}"
        );
        assert_eq!(subjects(&snap), None, "{what}");
        assert_eq!(
            cond(&snap, "c1", "RegistrationApplied"),
            Some(("False", "InvalidSubject")),
            "{what}"
        );
        // The other cluster is untouched.
        assert!(snap.bindings.contains_key("c2"), "{what}");
    }

    // An earlier version's Role binding: replaced (roleRef is immutable), its Role deleted.
    let mut snap = base();
    converge(&s, &mut snap);
    let mut old = snap.bindings["c1"].as_ref().clone();
    old.role_ref.kind = "Role".into();
    snap.bindings.insert("c1".into(), Arc::new(old.clone()));
    let role = Role {
        metadata: ObjectMeta {
            name: old.metadata.name.clone(),
            namespace: Some("c1".into()),
            owner_references: old.metadata.owner_references.clone(),
            ..ObjectMeta::default()
        },
        rules: None,
    };
    snap.roles.insert("c1".into(), Arc::new(role));
    let actions = converge(&s, &mut snap);
    assert_eq!(
        kinds(&actions)
            .into_iter()
            .filter(|(k, _)| !k.starts_with("patch"))
            .collect::<Vec<_>>(),
        [
            ("delete_rolebinding", Some("c1")),
            ("apply_rolebinding", Some("c1")),
            ("delete_role", Some("c1"))
        ]
    );
    assert_eq!(snap.bindings["c1"].role_ref.kind, "ClusterRole");
    assert!(snap.roles.is_empty());

    // While the cluster is Unknown, Available is left to the hub's registration controller.
    let mut snap = base();
    converge(&s, &mut snap);
    let mut c = snap.clusters["c1"].as_ref().clone();
    c.status = serde_json::from_value(json!({"conditions": [{"type": "ManagedClusterConditionAvailable",
            "status": "Unknown", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})).ok();
    snap.clusters.insert("c1".into(), Arc::new(c));
    let mut m = snap.mcas["c1"].as_ref().clone();
    conditions::set(
        &mut m.status.get_or_insert_with(Default::default).conditions,
        addon_condition::AVAILABLE,
        "Unknown",
        "ClusterUnknown",
        "copied from the cluster",
        t(0),
    );
    snap.mcas.insert("c1".into(), Arc::new(m));
    report_work_in_memory(&mut snap, "c1", true);
    converge(&s, &mut snap);
    assert_eq!(
        cond(&snap, "c1", "Available"),
        Some(("Unknown", "ClusterUnknown"))
    );

    // A cluster that is gone gets nothing; its add-on is not served.
    let mut snap = base();
    snap.clusters.remove("c2");
    converge(&s, &mut snap);
    assert!(!snap.mcas.contains_key("c2"));
    assert!(!snap.works.contains_key("c2"));
}

#[test]
fn under_the_addon_manager_it_deploys_the_configs_it_is_given() {
    let s = settings();
    let mut m = user_mca("c1").as_ref().clone();
    m.status = serde_json::from_value(json!({"configReferences": [{
            "group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
            "namespace": "hub", "name": "tuned",
            "desiredConfig": {"namespace": "hub", "name": "tuned", "specHash": ""}}]}))
    .ok();
    let spec = AddOnDeploymentConfigSpec {
        agent_install_namespace: "tuned-ns".into(),
        ..Default::default()
    };
    // (The hub assigns it: the config of the placement whose decisions hold c1.)
    let strategy = json!({"type": "Placements", "placements": [{"namespace": "p", "name": "fleet",
        "rolloutStrategy": {"type": "All"},
        "configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                     "namespace": "hub", "name": "tuned"}]}]});
    let mut snap = Snapshot {
        cma: Some(cma(strategy, json!({}))),
        mcas: BTreeMap::from([("c1".to_owned(), Arc::new(m))]),
        decisions: vec![decision("d1", None, &["c1", "c2"])],
        clusters: managed(&["c1", "c2"]),
        configs: BTreeMap::from([(
            ConfigKey {
                namespace: "hub".into(),
                name: "tuned".into(),
            },
            Config {
                spec: Ok(spec),
                hash: "h".into(),
            },
        )]),
        now: t(0),
        ..Snapshot::default()
    };
    let actions = converge(&s, &mut snap);
    // No install, no configuration or progression of its own; nothing deployed before
    // the addon-manager has hashed the config.
    assert!(
        !kinds(&actions)
            .iter()
            .any(|(k, _)| *k == "create_mca" || *k == "patch_cma_status")
    );
    assert!(snap.works.is_empty());
    assert_eq!(cond(&snap, "c1", "Configured"), None);
    assert_eq!(cond(&snap, "c1", "Progressing"), None);
    // Hashed: deployed with that config.
    let mut m = snap.mcas["c1"].as_ref().clone();
    if let Some(d) = m
        .status
        .as_mut()
        .and_then(|s| s.config_references.first_mut())
        .and_then(|r| r.desired_config.as_mut())
    {
        d.spec_hash = "h".into();
    }
    snap.mcas.insert("c1".into(), Arc::new(m));
    converge(&s, &mut snap);
    assert_eq!(
        snap.mcas["c1"]
            .status
            .as_ref()
            .map(|s| s.namespace.as_str()),
        Some("tuned-ns")
    );
    assert!(snap.works.contains_key("c1"));
    assert_eq!(cond(&snap, "c1", "Progressing"), None);
}

#[test]
fn a_bad_strategy_is_reported_and_deploys_nothing() {
    let s = settings();
    let mut snap = Snapshot {
        cma: Some(cma(
            placements(json!({"type": "Sideways"})),
            lifecycle_self(),
        )),
        decisions: vec![decision("d1", None, &["c1"])],
        placements: satisfied(1),
        clusters: managed(&["c1"]),
        now: t(0),
        ..Snapshot::default()
    };
    converge(&s, &mut snap);
    assert!(snap.works.is_empty());
    let p = plan(&s, &snap);
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    let progression = &snap
        .cma
        .as_ref()
        .and_then(|c| c.status.clone())
        .expect("status")
        .install_progressions[0];
    assert_eq!(progression.conditions[0].reason, "Failed");
}

#[test]
fn approves_only_csrs_of_clusters_with_the_addon() {
    let s = settings();
    let csr = |name: &str, cluster: &str| {
        let groups = registration::default_groups(cluster, ADDON);
        let (pem, _) = testenv::certificate_request(
            &registration::default_user(cluster, ADDON, &s.agent),
            &[&groups[0], &groups[1]],
        )
        .expect("a request");
        let mut c = CertificateSigningRequest::default();
        c.metadata.name = Some(name.into());
        c.metadata.labels = Some(BTreeMap::from([
            (label::CLUSTER_NAME.to_owned(), cluster.to_owned()),
            (label::ADDON_NAME.to_owned(), ADDON.to_owned()),
        ]));
        c.spec = CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(pem.into_bytes()),
            signer_name: registration::KUBE_CLIENT_SIGNER.into(),
            username: Some(format!("system:open-cluster-management:{cluster}:agent1")),
            groups: Some(vec![
                registration::cluster_group(cluster),
                crate::manager::registration::csr::MANAGED_CLUSTERS_GROUP.to_owned(),
            ]),
            usages: Some(vec!["client auth".into()]),
            ..Default::default()
        };
        Arc::new(c)
    };
    let mut snap = Snapshot {
        cma: Some(cma(json!({"type": "Manual"}), lifecycle_self())),
        // c3 has the add-on but the hub does not accept the cluster.
        mcas: BTreeMap::from([
            ("c1".to_owned(), user_mca("c1")),
            ("c3".to_owned(), user_mca("c3")),
        ]),
        csrs: vec![csr("a", "c1"), csr("b", "c2"), csr("c", "c3")],
        clusters: {
            let mut c = managed(&["c1", "c2", "c3"]);
            let mut c3 = c["c3"].as_ref().clone();
            c3.spec.hub_accepts_client = false;
            c.insert("c3".into(), Arc::new(c3));
            c
        },
        now: t(0),
        ..Snapshot::default()
    };
    let actions = converge(&s, &mut snap);
    let approvals: Vec<&Action> = actions
        .iter()
        .filter(|a| a.kind() == "approve_csr")
        .collect();
    assert_eq!(
        approvals,
        [&Action::ApproveCsr {
            name: "a".into(),
            resource_version: None
        }]
    );
}
