//! The ClusterManagementAddOn (created, its status: install progressions and default
//! configs) and the ManagedClusterAddOns this manager creates and owns.

use super::*;

/// The ClusterManagementAddOn exists and supports AddOnDeploymentConfig.
pub(super) fn ensure_cma(
    settings: &Settings,
    cma: Option<&ClusterManagementAddOn>,
    out: &mut Plan,
) {
    let adc = ConfigGroupResource {
        group: group::ADDON.to_owned(),
        resource: ADC_RESOURCE.to_owned(),
    };
    match cma {
        None if settings.manage_cma => {
            let mut c = ClusterManagementAddOn::new(
                &settings.addon,
                ClusterManagementAddOnSpec {
                    add_on_meta: AddOnMeta {
                        display_name: settings.addon.clone(),
                        description: "Scores managed clusters by their free CPU and memory \
                                      (AddOnPlacementScore resource-usage-score)"
                            .to_owned(),
                    },
                    supported_configs: vec![ConfigMeta {
                        config_group_resource: adc,
                        default_config: None,
                    }],
                    ..Default::default()
                },
            );
            c.metadata.annotations = Some(BTreeMap::from([(
                annotation::ADDON_LIFECYCLE.to_owned(),
                "self".to_owned(),
            )]));
            out.actions.push(Action::CreateCma(Box::new(c)));
        }
        Some(c)
            if settings.manage_cma
                && !c
                    .spec
                    .supported_configs
                    .iter()
                    .any(|m| m.config_group_resource == adc) =>
        {
            let mut configs = c.spec.supported_configs.clone();
            configs.push(ConfigMeta {
                config_group_resource: adc,
                default_config: None,
            });
            out.actions.push(Action::PatchCmaSupportedConfigs(configs));
        }
        _ => {}
    }
}

pub(super) fn new_mca(
    settings: &Settings,
    cma: &ClusterManagementAddOn,
    cluster: &str,
    managed: &ManagedCluster,
) -> ManagedClusterAddOn {
    let mut m = ManagedClusterAddOn::new(&settings.addon, ManagedClusterAddOnSpec::default());
    m.metadata.namespace = Some(cluster.to_owned());
    // As upstream: the cluster's add-on annotations (install namespace, values, ...) go along.
    let carried: BTreeMap<String, String> = managed
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(group::ADDON))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !carried.is_empty() {
        m.metadata.annotations = Some(carried);
    }
    if let Some(uid) = &cma.metadata.uid {
        m.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "addon.open-cluster-management.io/v1alpha1".to_owned(),
            kind: "ClusterManagementAddOn".to_owned(),
            name: settings.addon.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
    }
    m
}

pub(super) fn owned_by(meta: &ObjectMeta, cma: &ClusterManagementAddOn) -> bool {
    meta.owner_references.iter().flatten().any(|o| {
        o.kind == "ClusterManagementAddOn"
            && o.name == cma.metadata.name.as_deref().unwrap_or_default()
            && cma.metadata.uid.as_deref().is_none_or(|u| u == o.uid)
    })
}

pub(super) fn mca_owner(mca: &ManagedClusterAddOn) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "addon.open-cluster-management.io/v1alpha1".to_owned(),
        kind: "ManagedClusterAddOn".to_owned(),
        name: mca.metadata.name.clone()?,
        uid: mca.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// `status.defaultconfigReferences`: the CMA's default config with its spec hash.
pub(super) fn default_config_references(
    cma: &ClusterManagementAddOn,
    snap: &Snapshot,
) -> Vec<DefaultConfigReference> {
    cma.spec
        .supported_configs
        .iter()
        .filter_map(|m| {
            let d = m.default_config.as_ref()?;
            let key = ConfigKey {
                namespace: d.namespace.clone(),
                name: d.name.clone(),
            };
            let hash = if m.config_group_resource.resource == ADC_RESOURCE
                && m.config_group_resource.group == group::ADDON
            {
                snap.configs
                    .get(&key)
                    .map(|c| c.hash.clone())
                    .unwrap_or_default()
            } else {
                String::new()
            };
            Some(DefaultConfigReference {
                config_group_resource: m.config_group_resource.clone(),
                desired_config: Some(ConfigSpecHash {
                    config_referent: d.clone(),
                    spec_hash: hash,
                }),
            })
        })
        .collect()
}

pub(super) fn progression(
    cma: Option<&ClusterManagementAddOn>,
    index: usize,
    placement_ref: ocm_api::addon::v1alpha1::PlacementRef,
    (status, reason, message): (&str, &str, String),
    completed: bool,
    snap: &Snapshot,
    now: Timestamp,
) -> InstallProgression {
    let observed = cma.and_then(|c| c.status.as_ref()).and_then(|s| {
        s.install_progressions
            .iter()
            .find(|p| p.placement_ref == placement_ref)
    });
    let mut conditions: Vec<Condition> = observed.map(|p| p.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut conditions,
        addon_condition::PROGRESSING,
        status,
        reason,
        &message,
        now,
    );
    let adc_gr = ConfigGroupResource {
        group: group::ADDON.to_owned(),
        resource: ADC_RESOURCE.to_owned(),
    };
    let config_references = cma
        .and_then(|c| install::placement_config(c, Some(index)))
        .and_then(|k| snap.configs.get(&k).map(|c| (k.clone(), c.hash.clone())))
        .map(|(k, hash)| {
            let desired = ConfigSpecHash {
                config_referent: ConfigReferent {
                    namespace: k.namespace,
                    name: k.name,
                },
                spec_hash: hash,
            };
            let before = observed.and_then(|p| {
                p.config_references
                    .iter()
                    .find(|r| r.config_group_resource == adc_gr)
            });
            let (applied, good) = if completed {
                (Some(desired.clone()), Some(desired.clone()))
            } else {
                (
                    before.and_then(|r| r.last_applied_config.clone()),
                    before.and_then(|r| r.last_known_good_config.clone()),
                )
            };
            vec![InstallConfigReference {
                config_group_resource: adc_gr.clone(),
                desired_config: Some(desired),
                last_known_good_config: good,
                last_applied_config: applied,
            }]
        })
        .unwrap_or_default();
    InstallProgression {
        placement_ref,
        config_references,
        conditions,
    }
}
