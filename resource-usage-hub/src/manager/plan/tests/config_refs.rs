//! Under OCM's addon-manager, the config a cluster's `status.configReferences` name is
//! deployed only if the hub assigns it to that cluster: the spoke may write that status.

use ocm_api::addon::v1alpha1::CustomizedVariable;
use ocm_runtime::events::EventType;

use super::*;

/// The value of the variable in the other tenant's config.
const SECRET: &str = "s3cret-db-password";

fn key(ns: &str, name: &str) -> ConfigKey {
    ConfigKey {
        namespace: ns.into(),
        name: name.into(),
    }
}

/// The configs on the hub: each sets one variable to a value of its own (`value-of-<ns>-<name>`),
/// and its spec hash is `h-<name>`; the other tenant's holds the secret.
fn hub_configs() -> BTreeMap<ConfigKey, Config> {
    let config = |ns: &str, name: &str, variable: &str, value: String| {
        (
            key(ns, name),
            Config {
                spec: Ok(AddOnDeploymentConfigSpec {
                    customized_variables: vec![CustomizedVariable {
                        name: variable.into(),
                        value,
                    }],
                    agent_install_namespace: format!("agents-{name}"),
                    ..Default::default()
                }),
                hash: format!("h-{name}"),
            },
        )
    };
    let plain =
        |ns: &str, name: &str| config(ns, name, "LOG_LEVEL", format!("value-of-{ns}-{name}"));
    BTreeMap::from([
        plain("hub", "default"),
        plain("hub", "next"),
        plain("p", "placed"),
        plain("c1", "own"),
        config(
            "tenant-secret",
            "db-config",
            "DB_PASSWORD",
            SECRET.to_owned(),
        ),
    ])
}

/// The add-on under OCM's addon-manager (no lifecycle annotation): `default` as its default
/// config; installed by placement `p/fleet` (decisions: c1), which sets `placed` as its config.
fn foreign_cma(default: Option<&str>, placed: Option<&str>) -> Arc<ClusterManagementAddOn> {
    let adc = |ns: &str, name: &str| {
        json!({"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
               "namespace": ns, "name": name})
    };
    let mut supported =
        json!({"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"});
    if let Some(d) = default {
        supported["defaultConfig"] = json!({"namespace": "hub", "name": d});
    }
    let mut placement =
        json!({"namespace": "p", "name": "fleet", "rolloutStrategy": {"type": "All"}});
    if let Some(p) = placed {
        placement["configs"] = json!([adc("p", p)]);
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ClusterManagementAddOn",
            "metadata": {"name": ADDON, "uid": "cma-uid"},
            "spec": {
                "supportedConfigs": [supported],
                "installStrategy": {"type": "Placements", "placements": [placement]}
            }
        }))
        .expect("a cma"),
    )
}

/// `cluster`'s add-on, its spec naming `<cluster>/own` when `own`, its status naming
/// `(namespace, name, spec hash)` as the addon-manager (or the spoke) wrote it.
fn referring_mca(cluster: &str, own: bool, named: (&str, &str, &str)) -> ManagedClusterAddOn {
    let mut m = user_mca(cluster).as_ref().clone();
    if own {
        m.spec.configs = serde_json::from_value(json!([
            {"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "own"}
        ]))
        .expect("configs");
    }
    name_in_status(&mut m, named);
    m
}

/// Writes the reference into the add-on's status, as the spoke's registration agent may.
fn name_in_status(m: &mut ManagedClusterAddOn, (ns, name, hash): (&str, &str, &str)) {
    let status = m.status.get_or_insert_with(Default::default);
    status.config_references = serde_json::from_value(json!([{
        "group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
        "namespace": ns, "name": name,
        "desiredConfig": {"namespace": ns, "name": name, "specHash": hash}}]))
    .expect("config references");
}

fn hub(cma: Arc<ClusterManagementAddOn>, mca: ManagedClusterAddOn) -> Snapshot {
    let cluster = mca.metadata.namespace.clone().expect("ns");
    Snapshot {
        cma: Some(cma),
        mcas: BTreeMap::from([(cluster, Arc::new(mca))]),
        decisions: vec![decision("d1", None, &["c1"])],
        placements: satisfied(1),
        clusters: managed(&["c1", "c2"]),
        configs: hub_configs(),
        now: t(0),
        ..Snapshot::default()
    }
}

/// The works a plan applies, as JSON text (with their manifests).
fn applied(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplyWork(w) => serde_json::to_string(w).ok(),
            _ => None,
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// Deployed: the work carries this config (namespace, name).
    Deployed(&'static str, &'static str),
    /// Refused: nothing deployed, `ConfigReferenceRefused`, reported.
    Refused,
    /// The hub's config, another spec: nothing deployed, `ConfigSpecHashMismatch`, not reported.
    HashMismatch,
}

struct Case {
    name: &'static str,
    default: Option<&'static str>,
    placed: Option<&'static str>,
    own: bool,
    cluster: &'static str,
    named: (&'static str, &'static str, &'static str),
    want: Want,
}

#[test]
fn a_reference_is_deployed_only_if_the_hub_assigns_it() {
    let s = settings();
    let cases = [
        Case {
            name: "the default config",
            default: Some("default"),
            placed: None,
            own: false,
            cluster: "c1",
            named: ("hub", "default", "h-default"),
            want: Want::Deployed("hub", "default"),
        },
        Case {
            name: "the config of the placement that holds the cluster",
            default: Some("default"),
            placed: Some("placed"),
            own: false,
            cluster: "c1",
            named: ("p", "placed", "h-placed"),
            want: Want::Deployed("p", "placed"),
        },
        Case {
            name: "a placement's config, for a cluster outside it",
            default: Some("default"),
            placed: Some("placed"),
            own: false,
            cluster: "c2",
            named: ("p", "placed", "h-placed"),
            want: Want::Refused,
        },
        Case {
            name: "the default, where the placement's config overrides it",
            default: Some("default"),
            placed: Some("placed"),
            own: false,
            cluster: "c1",
            named: ("hub", "default", "h-default"),
            want: Want::Refused,
        },
        Case {
            name: "the add-on's own config (its spec, which hub users write)",
            default: Some("default"),
            placed: Some("placed"),
            own: true,
            cluster: "c1",
            named: ("c1", "own", "h-own"),
            want: Want::Deployed("c1", "own"),
        },
        Case {
            name: "another namespace's config",
            default: Some("default"),
            placed: None,
            own: false,
            cluster: "c1",
            named: ("tenant-secret", "db-config", "h-db-config"),
            want: Want::Refused,
        },
        Case {
            name: "another namespace's config, where the hub assigns none",
            default: None,
            placed: None,
            own: false,
            cluster: "c1",
            named: ("tenant-secret", "db-config", "h-db-config"),
            want: Want::Refused,
        },
        Case {
            name: "another namespace's config, with a made-up spec hash",
            default: Some("default"),
            placed: None,
            own: false,
            cluster: "c1",
            named: ("tenant-secret", "db-config", "forged"),
            want: Want::Refused,
        },
        Case {
            name: "the hub's config with a wrong spec hash",
            default: Some("default"),
            placed: None,
            own: false,
            cluster: "c1",
            named: ("hub", "default", "forged"),
            want: Want::HashMismatch,
        },
        Case {
            name: "the placement's config with a wrong spec hash",
            default: Some("default"),
            placed: Some("placed"),
            own: false,
            cluster: "c1",
            named: ("p", "placed", "h-default"),
            want: Want::HashMismatch,
        },
    ];
    for case in cases {
        let name = case.name;
        let mca = referring_mca(case.cluster, case.own, case.named);
        let mut snap = hub(foreign_cma(case.default, case.placed), mca);
        let first = plan(&s, &snap);
        let actions = converge(&s, &mut snap);
        let works = applied(&actions);
        assert!(
            works.iter().all(|w| !w.contains(SECRET)),
            "{name}: the secret was rendered"
        );
        let accepted = cond(&snap, case.cluster, CONFIG_REFERENCE_ACCEPTED);
        let (ns, n, hash) = case.named;
        match case.want {
            Want::Deployed(want_ns, want_name) => {
                assert_eq!(accepted, None, "{name}");
                assert!(first.refused_configs.is_empty(), "{name}");
                assert_eq!(
                    first.deployed_configs.get(case.cluster),
                    Some(&(key(want_ns, want_name), hash.to_owned())),
                    "{name}"
                );
                let w = &snap.works[case.cluster];
                assert_eq!(
                    annotation_of(&w.metadata, annotation::CONFIG_SPEC_HASH),
                    Some(
                        format!(
                            r#"{{"addondeploymentconfigs.addon.open-cluster-management.io/{want_ns}/{want_name}":"{hash}"}}"#
                        )
                        .as_str()
                    ),
                    "{name}"
                );
                let value = format!("value-of-{want_ns}-{want_name}");
                assert!(works.iter().any(|w| w.contains(&value)), "{name}: {value}");
            }
            Want::Refused => {
                assert_eq!(
                    accepted,
                    Some(("False", CONFIG_REFERENCE_REFUSED)),
                    "{name}"
                );
                assert!(works.is_empty(), "{name}: nothing is deployed");
                assert!(first.deployed_configs.is_empty(), "{name}");
                let [refused] = first.refused_configs.as_slice() else {
                    panic!("{name}: one refusal, got {:?}", first.refused_configs);
                };
                assert_eq!(refused.cluster, case.cluster, "{name}");
                assert_eq!(refused.uid, format!("mca-{}", case.cluster), "{name}");
                let message = refused.refusal.to_string();
                assert!(
                    message.contains(&format!("\"{ns}/{n}\"")),
                    "{name}: {message}"
                );
                let status = snap.mcas[case.cluster].status.clone().expect("status");
                let c = conditions::find(&status.conditions, CONFIG_REFERENCE_ACCEPTED)
                    .expect("condition");
                assert_eq!(c.message, message, "{name}");
                // The event names the reference and regards the add-on, in its namespace.
                let e = config_refusal_occurrence(refused, t(0));
                assert_eq!(e.type_, EventType::Warning, "{name}");
                assert_eq!(e.reason, CONFIG_REFERENCE_REFUSED, "{name}");
                assert_eq!(e.namespace, case.cluster, "{name}");
                assert_eq!(
                    (e.regarding.kind.as_deref(), e.regarding.name.as_deref()),
                    (Some("ManagedClusterAddOn"), Some(ADDON)),
                    "{name}"
                );
                assert_eq!(e.note, message, "{name}");
            }
            Want::HashMismatch => {
                assert_eq!(
                    accepted,
                    Some(("False", CONFIG_SPEC_HASH_MISMATCH)),
                    "{name}"
                );
                assert!(works.is_empty(), "{name}: nothing is deployed");
                assert!(first.refused_configs.is_empty(), "{name}: not reported");
            }
        }
    }
}

#[test]
fn a_refused_reference_keeps_the_deployed_agent() {
    let s = settings();
    let good = ("hub", "default", "h-default");
    let mut snap = hub(
        foreign_cma(Some("default"), None),
        referring_mca("c1", false, good),
    );
    converge(&s, &mut snap);
    report_work_in_memory(&mut snap, "c1", true);
    converge(&s, &mut snap);
    let deployed = snap.works["c1"].clone();
    let namespace = snap.mcas["c1"].status.clone().expect("status").namespace;
    assert_eq!(namespace, "agents-default");

    // The spoke names the other tenant's config.
    let mut m = snap.mcas["c1"].as_ref().clone();
    name_in_status(&mut m, ("tenant-secret", "db-config", "h-db-config"));
    snap.mcas.insert("c1".into(), Arc::new(m));
    let p = plan(&s, &snap);
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::ApplyWork(_) | Action::DeleteWork { .. })),
        "the work stays: {:?}",
        kinds(&p.actions)
    );
    assert_eq!(p.refused_configs.len(), 1);
    converge(&s, &mut snap);
    assert_eq!(snap.works["c1"], deployed, "the agent keeps its config");
    let status = snap.mcas["c1"].status.clone().expect("status");
    assert_eq!(status.namespace, namespace, "the agent stays where it runs");
    assert_eq!(
        cond(&snap, "c1", CONFIG_REFERENCE_ACCEPTED),
        Some(("False", CONFIG_REFERENCE_REFUSED))
    );
    assert_eq!(
        cond(&snap, "c1", "ManifestApplied").map(|c| c.0),
        Some("True"),
        "as the work agent reports the work it has"
    );
    let message = conditions::find(&status.conditions, CONFIG_REFERENCE_ACCEPTED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert_eq!(
        message,
        "configReferences name AddOnDeploymentConfig \"tenant-secret/db-config\", which the hub \
         does not assign to this cluster (it assigns hub/default); nothing from it is deployed"
    );

    // Reported once per add-on and reference, again when the reference changes.
    let mut reported = ReportedConfigs::default();
    assert_eq!(reported.fresh(&p.refused_configs).len(), 1);
    assert_eq!(reported.fresh(&plan(&s, &snap).refused_configs).len(), 0);
    let mut m = snap.mcas["c1"].as_ref().clone();
    name_in_status(&mut m, ("other", "config", "h"));
    let mut other = snap.clone();
    other.mcas.insert("c1".into(), Arc::new(m));
    assert_eq!(reported.fresh(&plan(&s, &other).refused_configs).len(), 1);
    assert_eq!(reported.len(), 1);

    // The addon-manager names the hub's config again: the condition goes.
    let mut m = snap.mcas["c1"].as_ref().clone();
    name_in_status(&mut m, good);
    snap.mcas.insert("c1".into(), Arc::new(m));
    let actions = converge(&s, &mut snap);
    assert!(applied(&actions).is_empty());
    assert_eq!(cond(&snap, "c1", CONFIG_REFERENCE_ACCEPTED), None);
    assert!(plan(&s, &snap).refused_configs.is_empty());
    assert!(reported.fresh(&[]).is_empty());
    assert_eq!(reported.len(), 0);
}

#[test]
fn a_config_the_hub_assigned_before_is_no_refusal_while_the_addon_manager_moves_on() {
    let s = settings();
    // The default moved from hub/default to hub/next; the addon-manager has not rewritten
    // c1's status yet.
    let before = ("hub", "default", "h-default");
    let mut snap = hub(
        foreign_cma(Some("next"), None),
        referring_mca("c1", false, before),
    );
    let verdict = |snap: &Snapshot| {
        let mut snap = snap.clone();
        converge(&s, &mut snap);
        cond(&snap, "c1", CONFIG_REFERENCE_ACCEPTED).map(|(_, r)| r.to_owned())
    };
    assert_eq!(verdict(&snap).as_deref(), Some(CONFIG_REFERENCE_REFUSED));

    // ... which this manager deployed, with that spec: kept.
    snap.deployed_configs
        .insert("c1".into(), (key("hub", "default"), "h-default".into()));
    assert_eq!(verdict(&snap), None);
    assert_eq!(
        plan(&s, &snap).deployed_configs.get("c1"),
        Some(&(key("hub", "default"), "h-default".to_owned()))
    );
    // ... deployed with another spec (it changed since): not deployed, no refusal.
    snap.deployed_configs
        .insert("c1".into(), (key("hub", "default"), "h-older".into()));
    assert_eq!(verdict(&snap).as_deref(), Some(CONFIG_SPEC_HASH_MISMATCH));
    assert!(plan(&s, &snap).refused_configs.is_empty());
    snap.deployed_configs.clear();

    // A progressive rollout of the placement's config: the ClusterManagementAddOn's status
    // still records the one before as the placement's last known good.
    let mut cma = foreign_cma(Some("next"), Some("placed")).as_ref().clone();
    cma.status = serde_json::from_value(json!({"installProgressions": [{
        "namespace": "p", "name": "fleet",
        "configReferences": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
            "desiredConfig": {"namespace": "p", "name": "placed", "specHash": "h-placed"},
            "lastKnownGoodConfig": {"namespace": "hub", "name": "default", "specHash": "h-default"},
            "lastAppliedConfig": null}]}]}))
    .ok();
    snap.cma = Some(Arc::new(cma));
    assert_eq!(verdict(&snap), None);
    // Not for a cluster outside that placement.
    let mut outside = snap.clone();
    outside.mcas = BTreeMap::from([(
        "c2".to_owned(),
        Arc::new(referring_mca("c2", false, before)),
    )]);
    let mut converged = outside.clone();
    converge(&s, &mut converged);
    assert_eq!(
        cond(&converged, "c2", CONFIG_REFERENCE_ACCEPTED),
        Some(("False", CONFIG_REFERENCE_REFUSED))
    );
}
