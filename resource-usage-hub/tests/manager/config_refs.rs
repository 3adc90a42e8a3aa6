//! The config a managed cluster's add-on status names, written by that cluster's klusterlet
//! (OCM lets it write the status of its add-ons): under OCM's addon-manager it reaches the
//! cluster's work only if the hub assigns that config to the cluster.

use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DynamicObject};
use resource_usage_hub::manager::render::config_spec_hash;

use super::*;

/// The ClusterManagementAddOn as OCM's addon-manager owns it (no lifecycle annotation), with
/// `default` (namespace, name) as its default AddOnDeploymentConfig.
async fn create_foreign_cma(client: &Client, addon: &str, (ns, name): (&str, &str)) {
    let cma: ClusterManagementAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ClusterManagementAddOn",
        "metadata": {"name": addon},
        "spec": {
            "addOnMeta": {"displayName": addon},
            "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                                  "defaultConfig": {"namespace": ns, "name": name}}],
            "installStrategy": {"type": "Manual"}
        }
    }))
    .expect("a cma");
    Api::<ClusterManagementAddOn>::all(client.clone())
        .create(&PostParams::default(), &cma)
        .await
        .expect("create cma");
}

/// Upstream's spec hash of the AddOnDeploymentConfig as the hub holds it (what OCM's
/// addon-manager writes into `configReferences`).
async fn spec_hash(client: &Client, ns: &str, name: &str) -> String {
    let ar = ApiResource::erase::<AddOnDeploymentConfig>(&());
    let o = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .get(name)
        .await
        .expect("the config");
    config_spec_hash(&o.data)
}

/// A status patch naming the AddOnDeploymentConfig `ns/name` with `hash` in `configReferences`.
fn reference(ns: &str, name: &str, hash: &str) -> Value {
    json!({"status": {"configReferences": [{
        "group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
        "namespace": ns, "name": name,
        "desiredConfig": {"namespace": ns, "name": name, "specHash": hash}}]}})
}

/// The work's spec as text (what the cluster applies, and may read).
fn shipped(w: &ManifestWork) -> String {
    serde_json::to_string(&w.spec).unwrap_or_default()
}

#[tokio::test]
async fn a_config_the_spoke_names_reaches_its_work_only_if_the_hub_assigns_it() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "deputy-addon";
    apply_agent_role(&admin, addon).await;
    let c1 = cluster(&admin, "deputy-cluster").await;
    let hub_ns = namespace(&admin, "deputy-configs").await;
    let tenant = namespace(&admin, "tenant-secret").await;
    let legit = format!("legit-{c1}");
    create_adc(
        &admin,
        &hub_ns,
        "agent-config",
        json!({"customizedVariables": [{"name": "LOG_LEVEL", "value": legit}]}),
    )
    .await;
    let secret = format!("s3cret-of-{tenant}");
    create_adc(
        &admin,
        &tenant,
        "db-config",
        json!({"customizedVariables": [{"name": "DB_PASSWORD", "value": secret}]}),
    )
    .await;
    create_foreign_cma(&admin, addon, (&hub_ns, "agent-config")).await;
    create_mca(&admin, &c1, addon).await;
    apply_klusterlet_rbac(&admin, &c1).await;
    let m = start(cp, settings(addon));

    // OCM's addon-manager (a hub component; the admin here) configures the add-on with the
    // hub's config.
    let mcas = Api::<ManagedClusterAddOn>::namespaced(admin.clone(), &c1);
    let legit_hash = spec_hash(&admin, &hub_ns, "agent-config").await;
    mcas.patch_status(
        addon,
        &PatchParams::default(),
        &Patch::Merge(reference(&hub_ns, "agent-config", &legit_hash)),
    )
    .await
    .expect("the addon-manager's status");
    eventually("the work carries the hub's config", DEADLINE, || async {
        work(&admin, &c1, addon)
            .await
            .filter(|w| shipped(w).contains(&legit))
    })
    .await;

    // c1's klusterlet, with OCM's permission: it reads its own work, not the other tenant's
    // config, and may not write its add-on's spec.
    let (user, groups) = registration_agent(&c1);
    let g: Vec<&str> = groups.iter().map(String::as_str).collect();
    let spoke = cp.client_as(&user, &g).expect("the klusterlet's client");
    let work_name = format!("addon-{addon}-deploy-0");
    let own_works = Api::<ManifestWork>::namespaced(spoke.clone(), &c1);
    own_works.get(&work_name).await.expect("c1 reads its work");
    let denied = |e: Option<kube::Error>| matches!(e, Some(kube::Error::Api(s)) if s.code == 403);
    let read = Api::<AddOnDeploymentConfig>::namespaced(spoke.clone(), &tenant)
        .get("db-config")
        .await;
    assert!(
        denied(read.err()),
        "c1 cannot read the other tenant's config"
    );
    let spoke_mcas = Api::<ManagedClusterAddOn>::namespaced(spoke.clone(), &c1);
    let spec = json!({"spec": {"configs": [{"group": "addon.open-cluster-management.io",
        "resource": "addondeploymentconfigs", "namespace": tenant, "name": "db-config"}]}});
    let written = spoke_mcas
        .patch(addon, &PatchParams::default(), &Patch::Merge(&spec))
        .await;
    assert!(denied(written.err()), "the add-on's spec is the hub's");

    // The attack: the klusterlet names the other tenant's config in its add-on's status, with
    // the spec hash the addon-manager would write.
    let secret_hash = spec_hash(&admin, &tenant, "db-config").await;
    let attack = reference(&tenant, "db-config", &secret_hash);
    eventually(
        "the klusterlet writes its add-on's status",
        DEADLINE,
        || async {
            spoke_mcas
                .patch_status(addon, &PatchParams::default(), &Patch::Merge(&attack))
                .await
                .ok()
        },
    )
    .await;
    let named = format!("\"{tenant}/db-config\"");
    let message = eventually("the reference is refused", DEADLINE, || async {
        // Meanwhile, the work never carries the secret.
        if let Some(w) = work(&admin, &c1, addon).await {
            assert!(
                !shipped(&w).contains(&secret),
                "c1's work carries the other tenant's DB_PASSWORD"
            );
        }
        let m = mca(&admin, &c1, addon).await?;
        let (status, reason, message) = condition(&m, "ConfigReferenceAccepted")?;
        ((status, reason) == ("False", "ConfigReferenceRefused") && message.contains(&named))
            .then(|| message.to_owned())
    })
    .await;
    assert!(
        message.contains(&format!("it assigns {hub_ns}/agent-config")),
        "{message}"
    );
    let events = Api::<Event>::namespaced(admin.clone(), &c1);
    let event = eventually("a Warning event names the reference", DEADLINE, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ConfigReferenceRefused"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.note.as_deref(), Some(message.as_str()));
    let regarding = event.regarding.expect("regarding");
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("ManagedClusterAddOn"), Some(addon))
    );
    assert_eq!(
        m.counter("addon_manager_config_references_refused_total"),
        1
    );

    // What c1 reads of its work: still the hub's config, and nothing of the secret.
    let w = own_works.get(&work_name).await.expect("c1 reads its work");
    assert!(shipped(&w).contains(&legit), "the hub's config still ships");
    assert!(!shipped(&w).contains(&secret));

    // The addon-manager names the hub's config again: the condition goes.
    mcas.patch_status(
        addon,
        &PatchParams::default(),
        &Patch::Merge(reference(&hub_ns, "agent-config", &legit_hash)),
    )
    .await
    .expect("the addon-manager's status");
    eventually("the refusal is withdrawn", DEADLINE, || async {
        let m = mca(&admin, &c1, addon).await?;
        condition(&m, "ConfigReferenceAccepted")
            .is_none()
            .then_some(())
    })
    .await;
    let w = work(&admin, &c1, addon).await.expect("the work");
    assert!(shipped(&w).contains(&legit) && !shipped(&w).contains(&secret));
    assert_eq!(
        m.counter("addon_manager_config_references_refused_total"),
        1,
        "reported once"
    );
}
