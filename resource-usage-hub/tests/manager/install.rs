//! Install through placements and configs, and what an unscheduled placement keeps.

use super::*;

#[tokio::test]
async fn installs_through_placements_and_follows_configs() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    // The golden files are rendered for the default add-on name; this is the only test using it.
    let addon = "resource-usage-collect";
    let pns = namespace(&client, "placements").await;
    let mut clusters = Vec::new();
    for _ in 0..3 {
        clusters.push(cluster(&client, "cluster").await);
    }
    let c: Vec<&str> = clusters.iter().map(String::as_str).collect();
    create_cma(
        &client,
        addon,
        json!({"type": "Placements", "placements": [{"namespace": pns, "name": "global"}]}),
    )
    .await;
    decision(&client, &pns, "global-decision-1", "global", None, &c).await;
    let _m = start(cp, settings(addon));

    // Every selected cluster: an MCA owned by the CMA, hub RBAC, and the rendered work.
    let cma_uid = Api::<ClusterManagementAddOn>::all(client.clone())
        .get(addon)
        .await
        .expect("cma")
        .uid()
        .expect("uid");
    for cl in &c {
        let m = eventually("the MCA is registered", DEADLINE, || async {
            mca(&client, cl, addon)
                .await
                .filter(|m| condition(m, "RegistrationApplied").map(|c| c.0) == Some("True"))
        })
        .await;
        assert_eq!(
            m.owner_references().first().map(|o| o.uid.as_str()),
            Some(cma_uid.as_str())
        );
        let status = m.status.clone().expect("status");
        assert_eq!(status.namespace, AGENT_NS);
        assert_eq!(status.health_check.mode, "Customized");
        assert_eq!(status.registrations.len(), 1);
        assert_eq!(
            status.registrations[0].signer_name,
            "kubernetes.io/kube-apiserver-client"
        );
        assert_eq!(
            status.registrations[0].subject.user,
            default_user(cl, addon, &format!("{addon}-agent"))
        );
        assert_eq!(
            status.registrations[0].subject.groups,
            default_groups(cl, addon).to_vec()
        );
        assert_eq!(
            condition(&m, "Available").map(|c| (c.0, c.1)),
            Some(("Unknown", "WorkNotApplied"))
        );

        let w = eventually("the work", DEADLINE, || work(&client, cl, addon)).await;
        let spec = serde_json::to_value(&w.spec).expect("spec");
        let want = golden("work-default.json", "cluster1", cl);
        let want_hash = golden_hash(&want);
        assert_eq!(
            unstamped(spec, &rendering_hash(&w)),
            unstamped(want, &want_hash),
            "work of {cl}"
        );
        assert_eq!(
            w.labels()
                .get("open-cluster-management.io/addon-name")
                .map(String::as_str),
            Some(addon)
        );
        assert_eq!(
            w.owner_references()
                .first()
                .map(|o| (o.kind.as_str(), o.uid.as_str())),
            Some(("ManagedClusterAddOn", m.uid().unwrap_or_default().as_str()))
        );
        let binding = Api::<RoleBinding>::namespaced(client.clone(), cl)
            .get(&format!("open-cluster-management:{addon}:agent"))
            .await
            .expect("binding");
        assert_eq!(
            binding.owner_references().first().map(|o| o.kind.as_str()),
            Some("ManagedClusterAddOn")
        );
        assert_eq!(
            (
                binding.role_ref.kind.as_str(),
                binding.role_ref.name.as_str()
            ),
            (
                "ClusterRole",
                format!("open-cluster-management:{addon}:agent-hub").as_str()
            )
        );
        assert_eq!(
            subjects(&binding),
            [
                (
                    "User".to_owned(),
                    default_user(cl, addon, &format!("{addon}-agent"))
                ),
                ("Group".to_owned(), default_groups(cl, addon)[0].clone())
            ]
        );
    }

    // A cluster that leaves the placement loses its MCA, work and permission.
    set_decisions(&client, &pns, "global-decision-1", &c[..2]).await;
    eventually(
        "the third cluster's add-on is removed",
        DEADLINE,
        || async {
            let gone = mca(&client, c[2], addon).await.is_none()
                && work(&client, c[2], addon).await.is_none()
                && Api::<RoleBinding>::namespaced(client.clone(), c[2])
                    .get_opt(&format!("open-cluster-management:{addon}:agent"))
                    .await
                    .expect("binding")
                    .is_none();
            gone.then_some(())
        },
    )
    .await;
    assert!(mca(&client, c[0], addon).await.is_some());

    // A config on one cluster rewrites that cluster's work only.
    let before = work(&client, c[0], addon).await.expect("work");
    let adc = testing::golden_adc();
    create_adc(
        &client,
        c[1],
        "tuned",
        serde_json::to_value(&adc).expect("adc"),
    )
    .await;
    Api::<ManagedClusterAddOn>::namespaced(client.clone(), c[1])
        .patch(
            addon,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "tuned"}]}})),
        )
        .await
        .expect("configure");
    let tuned = eventually("the configured work", DEADLINE, || async {
        work(&client, c[1], addon).await.filter(|w| {
            let want = golden("work-adc.json", "cluster2", c[1]);
            let want_hash = golden_hash(&want);
            serde_json::to_value(&w.spec)
                .ok()
                .map(|s| unstamped(s, &rendering_hash(w)))
                == Some(unstamped(want, &want_hash))
        })
    })
    .await;
    assert!(
        tuned
            .annotations()
            .get("open-cluster-management.io/config-spec-hash")
            .is_some_and(|h| h.contains(&format!(
                "addondeploymentconfigs.addon.open-cluster-management.io/{}/tuned",
                c[1]
            ))),
        "config-spec-hash: {:?}",
        tuned.annotations()
    );
    let m1 = eventually("the MCA reports its config", DEADLINE, || async {
        mca(&client, c[1], addon).await.filter(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| s.namespace == "custom-agents" && s.config_references.len() == 1)
        })
    })
    .await;
    assert_eq!(condition(&m1, "Configured").map(|c| c.0), Some("True"));

    // Editing that config rewrites that work again; the other cluster's work is untouched.
    let hash = rendering_hash(&tuned);
    Api::<AddOnDeploymentConfig>::namespaced(client.clone(), c[1])
        .patch(
            "tuned",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"customizedVariables": [{"name": "CPU_RANGE", "value": "0:128"}]}}),
            ),
        )
        .await
        .expect("edit adc");
    let retuned = eventually("the work follows the edit", DEADLINE, || async {
        work(&client, c[1], addon)
            .await
            .filter(|w| rendering_hash(w) != hash)
    })
    .await;
    assert!(
        serde_json::to_string(&retuned.spec)
            .expect("spec")
            .contains("0:128")
    );
    let after = work(&client, c[0], addon).await.expect("work");
    assert_eq!(after.resource_version(), before.resource_version());

    // Converged: a pass over the unchanged hub writes nothing (what the server defaults or
    // prunes compares equal to what the manager wrote).
    let settled = eventually("the manager settles", DEADLINE, || async {
        let writes = _m.counter("addon_manager_writes_total");
        let passes = _m.counter("addon_manager_passes_total");
        create_adc(&client, &pns, &format!("unrelated-{passes}"), json!({})).await;
        eventually("a pass", DEADLINE, || async {
            (_m.counter("addon_manager_passes_total") > passes).then_some(())
        })
        .await;
        (_m.counter("addon_manager_writes_total") == writes).then_some(writes)
    })
    .await;
    assert!(settled > 0);
}

/// `status/reason: message` of the CMA's PlacementScheduled for its first placement.
async fn placement_scheduled(client: &Client, addon: &str) -> Option<String> {
    let cma = Api::<ClusterManagementAddOn>::all(client.clone())
        .get_opt(addon)
        .await
        .ok()??;
    let progression = cma.status?.install_progressions.into_iter().next()?;
    let c = progression
        .conditions
        .into_iter()
        .find(|c| c.type_ == "PlacementScheduled")?;
    Some(format!("{}/{}: {}", c.status, c.reason, c.message))
}

/// A placement whose scheduling failed or is unknown (misconfigured with its
/// decisions emptied, Unknown, its status gone, the placement gone) uninstalls nothing; the
/// ClusterManagementAddOn says why; when it is scheduled again with the same clusters nothing
/// is reinstalled. The manager binary runs as the chart's identity.
#[tokio::test]
async fn an_unscheduled_placement_uninstalls_nothing() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "unscheduled-addon";
    let system = namespace(&admin, "unscheduled-system").await;
    let (_dir, kubeconfig) = as_the_manager(cp, &admin, addon, &system).await;
    let pns = namespace(&admin, "unscheduled-placements").await;
    let clusters = [
        cluster(&admin, "unscheduled").await,
        cluster(&admin, "unscheduled").await,
    ];
    let c: Vec<&str> = clusters.iter().map(String::as_str).collect();
    create_cma(
        &admin,
        addon,
        json!({"type": "Placements", "placements": [{"namespace": pns, "name": "fleet"}]}),
    )
    .await;
    decision(&admin, &pns, "fleet-decision-1", "fleet", None, &c).await;
    let _manager = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "manager",
            "--addon-name",
            addon,
            "--agent-image",
            IMAGE,
            "--leader-elect=false",
            "--event-debounce=50ms",
        ])
        .arg(format!(
            "--metrics-bind-address=127.0.0.1:{}",
            testenv::free_port()
        ))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Process)
        .expect("manager binary");

    // Installed: an add-on and a work per cluster.
    let installed = || async {
        let mut out = Vec::new();
        for cl in &c {
            let m = mca(&admin, cl, addon).await?;
            let w = work(&admin, cl, addon).await?;
            out.push((m.uid()?, w.uid()?, w.metadata.generation));
        }
        Some(out)
    };
    let before = eventually("the add-on on both clusters", DEADLINE, installed).await;
    eventually("the placement reported scheduled", DEADLINE, || async {
        placement_scheduled(&admin, addon)
            .await
            .filter(|c| c.starts_with("True/PlacementScheduled"))
    })
    .await;

    let placements = Api::<Placement>::namespaced(admin.clone(), &pns);
    let misconfigured = json!({"numberOfSelectedClusters": 0, "conditions": [
        {"type": "PlacementMisconfigured", "status": "True", "reason": "Misconfigured",
         "message": "the CEL compiler could not start", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        satisfied("False", "Misconfigured")]});
    let unknown = json!({"numberOfSelectedClusters": 0,
                         "conditions": [satisfied("Unknown", "Scheduling")]});
    let cases = [
        (
            "misconfigured",
            Some(misconfigured),
            "False/PlacementFailed",
        ),
        ("Unknown", Some(unknown), "False/PlacementUnknown"),
        (
            "status removed",
            Some(Value::Null),
            "False/PlacementUnknown",
        ),
        ("placement deleted", None, "False/PlacementNotFound"),
    ];
    for (what, status, expected) in cases {
        // As a failing scheduler leaves it: the decisions emptied, the status saying why.
        set_decisions_only(&admin, &pns, "fleet-decision-1", &[]).await;
        match status {
            Some(s) => set_placement_status(&admin, &pns, "fleet", s).await,
            None => {
                placements
                    .delete("fleet", &Default::default())
                    .await
                    .expect("delete placement");
            }
        }
        let reported = eventually(
            &format!("{what}: the ClusterManagementAddOn says why"),
            DEADLINE,
            || async {
                placement_scheduled(&admin, addon)
                    .await
                    .filter(|c| c.starts_with(expected))
            },
        )
        .await;
        assert!(
            reported.contains(&format!("{pns}/fleet")),
            "{what}: {reported}"
        );
        // The pass that wrote the condition planned no uninstall: everything is still there,
        // the same objects, the works untouched.
        assert_eq!(installed().await.as_ref(), Some(&before), "{what}");

        // Scheduled again, the same clusters: nothing reinstalled.
        set_decisions(&admin, &pns, "fleet-decision-1", &c).await;
        eventually(&format!("{what}: scheduled again"), DEADLINE, || async {
            placement_scheduled(&admin, addon)
                .await
                .filter(|c| c.starts_with("True/PlacementScheduled"))
        })
        .await;
        assert_eq!(installed().await.as_ref(), Some(&before), "{what}");
    }

    // A genuine answer still uninstalls: the placement selects one cluster.
    set_decisions(&admin, &pns, "fleet-decision-1", &c[..1]).await;
    eventually("the other cluster's add-on goes", DEADLINE, || async {
        mca(&admin, c[1], addon).await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        mca(&admin, c[0], addon).await.and_then(|m| m.uid()),
        Some(before[0].0.clone())
    );
}
