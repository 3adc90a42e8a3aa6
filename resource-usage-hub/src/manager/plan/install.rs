//! Which clusters get the add-on (ocm `addonmanagement` install reconciler) and which
//! AddOnDeploymentConfig each one uses (`addonconfiguration`: the ManagedClusterAddOn's own
//! config, else its placement's, else the ClusterManagementAddOn's default).

use std::collections::BTreeMap;

use ocm_api::addon::v1alpha1::{AddOnConfig, ClusterManagementAddOn, ManagedClusterAddOn};
use ocm_api::cluster::v1beta1::{Placement, PlacementDecision};
use ocm_api::conditions;
use ocm_api::wellknown::placement_condition::{self, reason};
use ocm_api::wellknown::{group, label};

/// The config kind the manager supports.
pub const ADC_RESOURCE: &str = "addondeploymentconfigs";

/// `installStrategy.type` values.
pub const MANUAL: &str = "Manual";
pub const PLACEMENTS: &str = "Placements";

/// Whether `decision` belongs to the placement `namespace/name`.
pub fn decision_of(decision: &PlacementDecision, namespace: &str, name: &str) -> bool {
    decision.metadata.namespace.as_deref() == Some(namespace)
        && decision
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::PLACEMENT))
            .is_some_and(|p| p == name)
}

/// Cluster → index (in `installStrategy.placements`) of the placement that installs the
/// add-on there: the union of the placements' decisions, a later placement overriding an
/// earlier one for a cluster in both. Empty for the `Manual` strategy.
pub fn selected(
    cma: &ClusterManagementAddOn,
    decisions: &[&PlacementDecision],
) -> BTreeMap<String, usize> {
    let strategy = &cma.spec.install_strategy;
    let mut out = BTreeMap::new();
    if strategy.type_ != PLACEMENTS {
        return out;
    }
    for (i, p) in strategy.placements.iter().enumerate() {
        let (ns, name) = (&p.placement_ref.namespace, &p.placement_ref.name);
        for d in decisions.iter().filter(|d| decision_of(d, ns, name)) {
            for c in d.status.iter().flat_map(|s| &s.decisions) {
                if !c.cluster_name.is_empty() {
                    out.insert(c.cluster_name.clone(), i);
                }
            }
        }
    }
    out
}

/// Why a placement's decisions are not to be trusted for uninstalling: its scheduling failed
/// or is not known. The add-ons it installed stay until it is scheduled again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unscheduled {
    /// `PlacementNotFound`, `PlacementFailed` or `PlacementUnknown`.
    pub reason: &'static str,
    pub message: String,
}

pub const PLACEMENT_NOT_FOUND: &str = "PlacementNotFound";
pub const PLACEMENT_FAILED: &str = "PlacementFailed";
pub const PLACEMENT_UNKNOWN: &str = "PlacementUnknown";

/// `PlacementSatisfied=False` reasons that are a scheduling result ("selects no cluster", or
/// fewer than asked): the decisions are the scheduler's answer. Any other reason (the
/// scheduler's `CELBudgetExceeded`, or one a newer scheduler adds) means it did not schedule.
const SCHEDULED_REASONS: [&str; 5] = [
    reason::NO_MANAGED_CLUSTER_SET_BINDINGS,
    reason::NO_INTERSECTION,
    reason::ALL_MANAGED_CLUSTER_SETS_EMPTY,
    reason::NOT_ALL_DECISIONS_SCHEDULED,
    reason::NO_MANAGED_CLUSTER_MATCHED,
];

/// Whether `placement` (None: not found) was scheduled and its decisions, holding `decided`
/// clusters, are its answer. Upstream's addon-manager skips a missing placement (uninstalling
/// its clusters) and trusts whatever decisions exist; here only a successful scheduling whose
/// status agrees with its decisions may uninstall.
pub fn scheduled(
    namespace: &str,
    name: &str,
    placement: Option<&Placement>,
    decided: usize,
) -> Result<(), Unscheduled> {
    let unscheduled = |reason, why: String| {
        Err(Unscheduled {
            reason,
            message: format!("placement {namespace}/{name} {why}; the installed add-ons are kept"),
        })
    };
    let Some(p) = placement else {
        return unscheduled(PLACEMENT_NOT_FOUND, "is not found".to_owned());
    };
    let status = p.status.as_ref();
    let find = |t| status.and_then(|s| conditions::find(&s.conditions, t));
    if let Some(c) = find(placement_condition::MISCONFIGURED).filter(|c| c.status == "True") {
        return unscheduled(PLACEMENT_FAILED, format!("is misconfigured: {}", c.message));
    }
    let Some(satisfied) = find(placement_condition::SATISFIED) else {
        return unscheduled(PLACEMENT_UNKNOWN, "has not been scheduled".to_owned());
    };
    match satisfied.status.as_str() {
        "True" => {}
        "False" if SCHEDULED_REASONS.contains(&satisfied.reason.as_str()) => {}
        "False" => {
            return unscheduled(
                PLACEMENT_FAILED,
                format!(
                    "was not scheduled ({}: {})",
                    satisfied.reason, satisfied.message
                ),
            );
        }
        s => {
            return unscheduled(
                PLACEMENT_UNKNOWN,
                format!(
                    "has scheduling status {s} ({}: {})",
                    satisfied.reason, satisfied.message
                ),
            );
        }
    }
    // The scheduler writes the decisions, then the status: between the two (or while a
    // watch lags) they disagree, and the decisions are not yet the answer.
    let selected = status.map_or(0, |s| s.number_of_selected_clusters);
    if usize::try_from(selected).ok() != Some(decided) {
        return unscheduled(
            PLACEMENT_UNKNOWN,
            format!("selects {selected} clusters but its decisions hold {decided}"),
        );
    }
    Ok(())
}

/// Clusters in the decisions of the placement `namespace/name`.
pub fn decided(decisions: &[&PlacementDecision], namespace: &str, name: &str) -> usize {
    decisions
        .iter()
        .filter(|d| decision_of(d, namespace, name))
        .flat_map(|d| d.status.iter().flat_map(|s| &s.decisions))
        .filter(|c| !c.cluster_name.is_empty())
        .count()
}

/// `namespace/name` of an AddOnDeploymentConfig.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

fn adc_of(configs: &[AddOnConfig], default_namespace: &str) -> Option<ConfigKey> {
    configs
        .iter()
        .rev()
        .find(|c| {
            c.config_group_resource.group == group::ADDON
                && c.config_group_resource.resource == ADC_RESOURCE
        })
        .map(|c| ConfigKey {
            namespace: if c.config_referent.namespace.is_empty() {
                default_namespace.to_owned()
            } else {
                c.config_referent.namespace.clone()
            },
            name: c.config_referent.name.clone(),
        })
}

/// The placement's config, else the ClusterManagementAddOn's default (what a placement's
/// install progression reports).
pub fn placement_config(
    cma: &ClusterManagementAddOn,
    placement: Option<usize>,
) -> Option<ConfigKey> {
    let from_placement = placement
        .and_then(|i| cma.spec.install_strategy.placements.get(i))
        .and_then(|p| adc_of(&p.configs, &p.placement_ref.namespace));
    from_placement.or_else(|| {
        cma.spec
            .supported_configs
            .iter()
            .filter(|c| {
                c.config_group_resource.group == group::ADDON
                    && c.config_group_resource.resource == ADC_RESOURCE
            })
            .find_map(|c| c.default_config.as_ref())
            .map(|d| ConfigKey {
                namespace: d.namespace.clone(),
                name: d.name.clone(),
            })
    })
}

/// The AddOnDeploymentConfig the add-on on one cluster uses: the ManagedClusterAddOn's own
/// (a config without namespace is in the cluster's namespace), else the placement's, else
/// the default.
pub fn cluster_config(
    cma: Option<&ClusterManagementAddOn>,
    placement: Option<usize>,
    mca: &ManagedClusterAddOn,
) -> Option<ConfigKey> {
    let ns = mca.metadata.namespace.as_deref().unwrap_or_default();
    adc_of(&mca.spec.configs, ns).or_else(|| cma.and_then(|c| placement_config(c, placement)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cma(strategy: serde_json::Value) -> ClusterManagementAddOn {
        serde_json::from_value(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ClusterManagementAddOn",
            "metadata": {"name": "a"},
            "spec": {
                "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs",
                                      "defaultConfig": {"namespace": "hub", "name": "default"}}],
                "installStrategy": strategy
            }
        }))
        .expect("a cma")
    }

    fn decision(ns: &str, placement: &str, clusters: &[&str]) -> PlacementDecision {
        let decisions: Vec<_> = clusters
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "PlacementDecision",
            "metadata": {"name": format!("{placement}-decision-1"), "namespace": ns,
                         "labels": {"cluster.open-cluster-management.io/placement": placement}},
            "status": {"decisions": decisions}
        }))
        .expect("a decision")
    }

    fn mca(ns: &str, configs: serde_json::Value) -> ManagedClusterAddOn {
        serde_json::from_value(json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ManagedClusterAddOn",
            "metadata": {"name": "a", "namespace": ns},
            "spec": {"configs": configs}
        }))
        .expect("an mca")
    }

    #[test]
    fn later_placements_override_earlier_ones() {
        let c = cma(json!({"type": "Placements", "placements": [
            {"namespace": "p", "name": "first"},
            {"namespace": "p", "name": "second",
             "configs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "tuned"}]}
        ]}));
        let ds = [
            decision("p", "first", &["c1", "c2"]),
            decision("p", "second", &["c2", "c3"]),
            decision("other", "first", &["c9"]),
            decision("p", "unrelated", &["c8"]),
        ];
        let refs: Vec<&PlacementDecision> = ds.iter().collect();
        let got = selected(&c, &refs);
        assert_eq!(
            got,
            BTreeMap::from([("c1".into(), 0), ("c2".into(), 1), ("c3".into(), 1)])
        );
        let manual = cma(json!({"type": "Manual"}));
        assert!(selected(&manual, &refs).is_empty());

        let key = |ns: &str, n: &str| ConfigKey {
            namespace: ns.into(),
            name: n.into(),
        };
        let plain = mca("c1", json!([]));
        assert_eq!(
            cluster_config(Some(&c), Some(0), &plain),
            Some(key("hub", "default"))
        );
        assert_eq!(
            cluster_config(Some(&c), Some(1), &plain),
            Some(key("p", "tuned"))
        );
        let own = mca(
            "c2",
            json!([{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "mine"}]),
        );
        assert_eq!(
            cluster_config(Some(&c), Some(1), &own),
            Some(key("c2", "mine"))
        );
        let other_kind = mca(
            "c2",
            json!([{"group": "addon.open-cluster-management.io", "resource": "addontemplates", "name": "t"}]),
        );
        assert_eq!(
            cluster_config(Some(&c), None, &other_kind),
            Some(key("hub", "default"))
        );
        assert_eq!(cluster_config(None, None, &plain), None);
    }
}
