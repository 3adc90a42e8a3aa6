//! Whether the config a ManagedClusterAddOn's `status.configReferences` names may be deployed
//! (when OCM's addon-manager configures the add-on, that is where the config to deploy is
//! named).
//!
//! The status is not the hub's word: OCM's registration lets each managed cluster's
//! klusterlet patch and update its add-ons' status, while their spec is only readable to it
//! (ocm `pkg/registration/hub/manifests/rbac/managedcluster-registration-clusterrole.yaml`,
//! bound in the cluster namespace to the group `system:open-cluster-management:<cluster>`).
//! Taken as it is, a reference lets a spoke have the manager read a config it may not read
//! (another namespace's AddOnDeploymentConfig) and ship its values, as environment variables
//! of the agent, in the ManifestWork the spoke may read.
//!
//! So a reference is deployed only when it names a config the hub assigns to that cluster,
//! from what only hub users and the addon-manager write (ocm
//! `pkg/addon/controllers/addonconfiguration` resolves the same way):
//! - the ManagedClusterAddOn's own `spec.configs`, else the config of the last install-strategy
//!   placement whose decisions hold the cluster, else the ClusterManagementAddOn's default
//!   ([`install::cluster_config`]);
//! - while the addon-manager moves clusters from one config to another (a progressive rollout,
//!   or the moments before it rewrote every add-on's status): the configs the
//!   ClusterManagementAddOn's status records for that placement and as default, and the one
//!   this manager last deployed to the cluster, each only with the spec it had then.
//!
//! Its spec hash must be the hub object's: a config that changed since the addon-manager
//! assigned it is not deployed (the agent already running stays) until the addon-manager
//! assigns its current spec.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use ocm_runtime::events::{EventType, Occurrence};
use thiserror::Error;

use super::*;
use crate::manager::registration::shown;

/// `ConfigReferenceAccepted` (ours: in this mode OCM's addon-manager owns `Configured`): set
/// False while the config a cluster's `configReferences` name is not deployed, removed once
/// it is.
pub const CONFIG_REFERENCE_ACCEPTED: &str = "ConfigReferenceAccepted";
/// The reference names a config the hub does not assign to the cluster.
pub const CONFIG_REFERENCE_REFUSED: &str = "ConfigReferenceRefused";
/// The reference names the hub's config, with a spec that is not the hub's now.
pub const CONFIG_SPEC_HASH_MISMATCH: &str = "ConfigSpecHashMismatch";

/// Why the config a cluster's `configReferences` name is not deployed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigRefusal {
    #[error(
        "configReferences name AddOnDeploymentConfig {}, which the hub does not assign to this cluster ({}); nothing from it is deployed",
        shown(&.named.to_string()),
        assigned_text(.assigned.as_ref())
    )]
    NotAssigned {
        named: ConfigKey,
        /// What the hub assigns now.
        assigned: Option<ConfigKey>,
    },
    #[error(
        "configReferences name AddOnDeploymentConfig {} with spec hash {}, but its spec hash on the hub is {}; the deployed agent is kept until the addon-manager assigns the current spec",
        shown(&.named.to_string()),
        shown(.named_hash),
        .hub.as_deref().unwrap_or("unknown (not found)")
    )]
    SpecHashMismatch {
        named: ConfigKey,
        named_hash: String,
        hub: Option<String>,
    },
}

fn assigned_text(assigned: Option<&ConfigKey>) -> String {
    match assigned {
        Some(k) => format!("it assigns {k}"),
        None => "it assigns none".to_owned(),
    }
}

impl ConfigRefusal {
    /// The `ConfigReferenceAccepted=False` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ConfigRefusal::NotAssigned { .. } => CONFIG_REFERENCE_REFUSED,
            ConfigRefusal::SpecHashMismatch { .. } => CONFIG_SPEC_HASH_MISMATCH,
        }
    }
}

/// What decides a cluster's reference: the hub's state and the cluster's place in it.
pub(super) struct Assignment<'a> {
    pub(super) snap: &'a Snapshot,
    pub(super) cma: Option<&'a ClusterManagementAddOn>,
    /// The install-strategy placement whose config the cluster gets (the last one whose
    /// decisions hold it).
    pub(super) placement: Option<usize>,
    pub(super) cluster: &'a str,
    pub(super) mca: &'a ManagedClusterAddOn,
}

impl Assignment<'_> {
    /// Whether `named` at `named_hash` (from the cluster's `configReferences`) may be deployed.
    pub(super) fn check(&self, named: &ConfigKey, named_hash: &str) -> Result<(), ConfigRefusal> {
        let hub = self.snap.configs.get(named).map(|c| c.hash.as_str());
        let mismatch = || ConfigRefusal::SpecHashMismatch {
            named: named.clone(),
            named_hash: named_hash.to_owned(),
            hub: hub.map(str::to_owned),
        };
        let assigned = install::cluster_config(self.cma, self.placement, self.mca);
        if assigned.as_ref() == Some(named) {
            // (Not found: the add-on is reported unconfigured, as for any missing config.)
            return match hub {
                Some(h) if h != named_hash => Err(mismatch()),
                _ => Ok(()),
            };
        }
        let earlier = self.earlier();
        if !earlier.iter().any(|(k, _)| k == named) {
            return Err(ConfigRefusal::NotAssigned {
                named: named.clone(),
                assigned,
            });
        }
        let same_spec = hub == Some(named_hash)
            && earlier
                .iter()
                .any(|(k, h)| k == named && h.as_str() == named_hash);
        if same_spec { Ok(()) } else { Err(mismatch()) }
    }

    /// Configs the hub assigned to this cluster before, with their spec hashes then: the
    /// ClusterManagementAddOn's status (its placement's desired, last applied and last known
    /// good configs; the default config) and the one this manager last deployed here.
    fn earlier(&self) -> Vec<(ConfigKey, String)> {
        let adc =
            |gr: &ConfigGroupResource| gr.group == group::ADDON && gr.resource == ADC_RESOURCE;
        let key = |d: &ConfigSpecHash| {
            (
                ConfigKey {
                    namespace: d.config_referent.namespace.clone(),
                    name: d.config_referent.name.clone(),
                },
                d.spec_hash.clone(),
            )
        };
        let mut out: Vec<(ConfigKey, String)> = Vec::new();
        if let Some(c) = self.cma {
            let status = c.status.as_ref();
            let placement_ref = self
                .placement
                .and_then(|i| c.spec.install_strategy.placements.get(i))
                .map(|p| &p.placement_ref);
            let progressions = status
                .iter()
                .flat_map(|s| &s.install_progressions)
                .filter(|p| Some(&p.placement_ref) == placement_ref);
            for r in progressions
                .flat_map(|p| &p.config_references)
                .filter(|r| adc(&r.config_group_resource))
            {
                for d in [
                    &r.desired_config,
                    &r.last_applied_config,
                    &r.last_known_good_config,
                ]
                .into_iter()
                .flatten()
                {
                    out.push(key(d));
                }
            }
            for r in status
                .iter()
                .flat_map(|s| &s.default_config_references)
                .filter(|r| adc(&r.config_group_resource))
            {
                out.extend(r.desired_config.as_ref().map(key));
            }
        }
        out.extend(self.snap.deployed_configs.get(self.cluster).cloned());
        out.retain(|(_, h)| !h.is_empty());
        out
    }
}

/// A cluster whose `configReferences` name a config the hub does not assign to it: reported
/// once (a log line, a Warning event regarding its ManagedClusterAddOn, a counter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedConfig {
    /// The cluster namespace.
    pub cluster: String,
    /// The ManagedClusterAddOn's name and uid.
    pub addon: String,
    pub uid: String,
    pub refusal: ConfigRefusal,
}

/// The refusals already reported, so that each add-on gets its event once per refused
/// reference. Holds only add-ons whose reference is still refused.
#[derive(Debug, Default)]
pub struct ReportedConfigs {
    seen: HashMap<String, ConfigRefusal>,
}

impl ReportedConfigs {
    /// Add-ons whose refusal is remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The refusals of this pass not reported yet; remembers them, forgets the rest.
    pub fn fresh<'a>(&mut self, refused: &'a [RefusedConfig]) -> Vec<&'a RefusedConfig> {
        let fresh = refused
            .iter()
            .filter(|r| self.seen.get(&r.uid) != Some(&r.refusal))
            .collect();
        self.seen = refused
            .iter()
            .map(|r| (r.uid.clone(), r.refusal.clone()))
            .collect();
        fresh
    }
}

/// A Warning event (events.k8s.io/v1) regarding the ManagedClusterAddOn, in its namespace,
/// naming the refused reference, at `now` (its time and, once published, the suffix of its
/// name).
pub fn config_refusal_occurrence(r: &RefusedConfig, now: Timestamp) -> Occurrence {
    Occurrence {
        namespace: r.cluster.clone(),
        regarding: ObjectReference {
            api_version: Some("addon.open-cluster-management.io/v1alpha1".to_owned()),
            kind: Some("ManagedClusterAddOn".to_owned()),
            namespace: Some(r.cluster.clone()),
            name: Some(r.addon.clone()),
            uid: Some(r.uid.clone()),
            ..ObjectReference::default()
        },
        related: None,
        type_: EventType::Warning,
        reason: r.refusal.reason().into(),
        action: "NotDeployed".into(),
        note: r.refusal.to_string(),
        at: now,
    }
}
