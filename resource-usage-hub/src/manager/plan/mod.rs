//! One reconcile pass as a pure function: a snapshot of everything the manager watches in,
//! the writes that bring the hub to the desired state out. Deterministic: the pass's time is
//! in the snapshot (the controller reads the clock, the planner never does), so a pass over an
//! unchanged hub plans nothing.
//!
//! The pass, in order ([`pass`]): the ClusterManagementAddOn, the install set (which clusters
//! get the add-on), each cluster's assessment ([`assess`]: config, rendering, work, rollout
//! status), the rollout per placement, each cluster's writes (hub permission, work, health),
//! clean-up, CSR approvals, statuses.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};
use ocm_api::ManagedCluster;
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfigSpec, AddOnMeta, ClusterManagementAddOn, ClusterManagementAddOnSpec,
    ConfigGroupResource, ConfigMeta, ConfigReference, ConfigReferent, ConfigSpecHash,
    DefaultConfigReference, InstallConfigReference, InstallProgression, ManagedClusterAddOn,
    ManagedClusterAddOnSpec, ManagedClusterAddOnStatus,
};
use ocm_api::cluster::v1beta1::{Placement, PlacementDecision};
use ocm_api::conditions;
use ocm_api::scoring::{ScoreDefinition, ScoreDefinitionStatus};
use ocm_api::wellknown::{addon_condition, annotation, cluster_condition, group, label};
use ocm_api::work::v1::{ManifestWork, ManifestWorkSpec};

use super::health;
use super::registration;
use super::render::{self, AgentTemplate, Rendered};
use super::rollout::{self, ClusterStatus, Groups, Progress, Status, Strategy};

pub use super::render::RENDERING_HASH;

mod assess;
mod cma;
mod config_ref;
pub mod install;
mod pass;
mod renders;
#[cfg(test)]
mod tests;
mod work;
mod writes;

use super::registration::csr::RefusedCsr;
use assess::Cluster;
pub use config_ref::{
    CONFIG_REFERENCE_ACCEPTED, CONFIG_REFERENCE_REFUSED, CONFIG_SPEC_HASH_MISMATCH, ConfigRefusal,
    RefusedConfig, ReportedConfigs, config_refusal_occurrence,
};
use install::{ADC_RESOURCE, ConfigKey};
pub use renders::Renders;
pub use work::{OBSERVED_SPEC_HASH, slim_work};

/// `Configured` reasons: upstream's for a configured add-on (ocm `addonconfiguration`); upstream
/// has no False reason for a config that is missing or does not parse, so these two are ours.
const CONFIGURED: &str = "ConfigurationsConfigured";
const CONFIG_NOT_FOUND: &str = "ConfigurationNotFound";
const CONFIG_INVALID: &str = "ConfigurationInvalid";
/// An install progression's condition (type, and reason when True), ours: whether the
/// placement was scheduled, so that its decisions may install and uninstall. False names the
/// placement and why (reasons in [`install::Unscheduled`]); the add-ons stay meanwhile.
pub const PLACEMENT_SCHEDULED: &str = "PlacementScheduled";
/// `RegistrationApplied=False`: the subject the spoke reported is not its agent's identity
/// (upstream binds whatever the status says; this reason is ours).
const INVALID_SUBJECT: &str = "InvalidSubject";

/// How the add-on's `Available` is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HealthMode {
    /// From the work's Deployment feedback (`healthCheck.mode: Customized`), set by the manager.
    Work,
    /// From the agent's Lease on the managed cluster (`healthCheck.mode: Lease`), set by the
    /// klusterlet's registration agent; the manager leaves `Available` alone.
    Lease,
}

/// What the manager manages.
#[derive(Clone, Debug)]
pub struct Settings {
    pub addon: String,
    /// The agent name in the registration subject.
    pub agent: String,
    pub template: AgentTemplate,
    pub health: HealthMode,
    /// Create the ClusterManagementAddOn when it is missing (else the chart installs it).
    pub manage_cma: bool,
}

impl Settings {
    pub fn work_name(&self) -> String {
        format!("addon-{}-deploy-0", self.addon)
    }

    /// The name of the agent's hub RoleBinding in each cluster namespace.
    pub fn permission_name(&self) -> String {
        registration::permission_name(&self.addon)
    }
}

/// An AddOnDeploymentConfig as the manager sees it: its spec (or why it does not parse)
/// and upstream's spec hash.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub spec: Result<AddOnDeploymentConfigSpec, String>,
    pub hash: String,
}

/// Which write failed last for a cluster (their errors become conditions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Permission,
    Work,
}

/// Everything one pass reads.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub cma: Option<Arc<ClusterManagementAddOn>>,
    /// This add-on's ManagedClusterAddOns by cluster namespace.
    pub mcas: BTreeMap<String, Arc<ManagedClusterAddOn>>,
    pub decisions: Vec<Arc<PlacementDecision>>,
    /// The placements the install strategy names, by (namespace, name): a Progressive rollout
    /// without `maxConcurrency` takes their `clustersPerDecisionGroup`.
    pub placements: BTreeMap<(String, String), Arc<Placement>>,
    pub configs: BTreeMap<ConfigKey, Config>,
    /// ManagedClusters by name: an add-on is served only on a cluster that exists, a CSR
    /// approved only for one the hub accepts.
    pub clusters: BTreeMap<String, Arc<ManagedCluster>>,
    /// This add-on's deploy works by cluster namespace.
    pub works: BTreeMap<String, Arc<ManifestWork>>,
    /// The agent's hub Roles that earlier versions created (now a ClusterRole): deleted.
    pub roles: BTreeMap<String, Arc<Role>>,
    pub bindings: BTreeMap<String, Arc<RoleBinding>>,
    pub csrs: Vec<Arc<CertificateSigningRequest>>,
    /// The last failed write per cluster and step.
    pub errors: BTreeMap<(String, Step), String>,
    /// Per cluster, the config (and its spec hash) that its `configReferences` named when this
    /// process last deployed it under OCM's addon-manager ([`Plan::deployed_configs`], kept by
    /// the controller): while the addon-manager moves the cluster to another config, the
    /// reference still naming this one, with that spec, is no refusal.
    pub deployed_configs: BTreeMap<String, (ConfigKey, String)>,
    /// Every ScoreDefinition: the Agent ones are shipped to the agents (in their work) and
    /// get their status from this manager.
    pub definitions: Vec<Arc<ScoreDefinition>>,
    /// The pass's time (conditions' transition times, rollout deadlines): the controller's
    /// clock when it took the snapshot.
    pub now: Timestamp,
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreateCma(Box<ClusterManagementAddOn>),
    /// Merge patch of the ClusterManagementAddOn's spec.supportedConfigs.
    PatchCmaSupportedConfigs(Vec<ConfigMeta>),
    PatchCmaStatus {
        install_progressions: Vec<InstallProgression>,
        default_config_references: Vec<DefaultConfigReference>,
    },
    CreateMca(Box<ManagedClusterAddOn>),
    DeleteMca {
        cluster: String,
    },
    /// The whole status, guarded by the observed resourceVersion.
    PatchMcaStatus {
        cluster: String,
        resource_version: Option<String>,
        status: Box<ManagedClusterAddOnStatus>,
    },
    ApplyRoleBinding(Box<RoleBinding>),
    DeleteRole {
        cluster: String,
    },
    DeleteRoleBinding {
        cluster: String,
    },
    ApplyWork(Box<ManifestWork>),
    DeleteWork {
        cluster: String,
    },
    /// An Agent ScoreDefinition's status (merge patch of the status subresource, guarded by
    /// the observed resourceVersion).
    PatchDefinitionStatus {
        name: String,
        resource_version: Option<String>,
        status: Box<ScoreDefinitionStatus>,
    },
    /// Guarded by the observed resourceVersion: a CSR that changed since is looked at again.
    ApproveCsr {
        name: String,
        resource_version: Option<String>,
    },
}

impl Action {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::CreateCma(_) => "create_cma",
            Action::PatchCmaSupportedConfigs(_) => "patch_cma",
            Action::PatchCmaStatus { .. } => "patch_cma_status",
            Action::CreateMca(_) => "create_mca",
            Action::DeleteMca { .. } => "delete_mca",
            Action::PatchMcaStatus { .. } => "patch_mca_status",
            Action::ApplyRoleBinding(_) => "apply_rolebinding",
            Action::DeleteRole { .. } => "delete_role",
            Action::DeleteRoleBinding { .. } => "delete_rolebinding",
            Action::ApplyWork(_) => "apply_work",
            Action::DeleteWork { .. } => "delete_work",
            Action::ApproveCsr { .. } => "approve_csr",
            Action::PatchDefinitionStatus { .. } => "patch_definition_status",
        }
    }

    /// The cluster a write is for, when it is for one.
    pub fn cluster(&self) -> Option<&str> {
        match self {
            Action::DeleteMca { cluster }
            | Action::PatchMcaStatus { cluster, .. }
            | Action::DeleteRole { cluster }
            | Action::DeleteRoleBinding { cluster }
            | Action::DeleteWork { cluster } => Some(cluster),
            Action::CreateMca(o) => o.metadata.namespace.as_deref(),
            Action::ApplyRoleBinding(o) => o.metadata.namespace.as_deref(),
            Action::ApplyWork(o) => o.metadata.namespace.as_deref(),
            _ => None,
        }
    }
}

/// What a pass decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// In order: the add-on, then permissions before works, status last.
    pub actions: Vec<Action>,
    /// Look again by then even without events (rollout timeouts, minSuccessTime).
    pub recheck_after: Option<Duration>,
    /// Things a person should read (bad strategies, unknown configs).
    pub warnings: Vec<String>,
    /// This add-on's CSRs left unapproved, and why (reported once each by the controller).
    pub refused_csrs: Vec<RefusedCsr>,
    /// Add-ons whose `configReferences` name a config the hub does not assign to their
    /// cluster (reported once each by the controller).
    pub refused_configs: Vec<RefusedConfig>,
    /// Per cluster, the config its `configReferences` name that this pass deployed, with its
    /// spec hash (the controller keeps them as [`Snapshot::deployed_configs`]).
    pub deployed_configs: BTreeMap<String, (ConfigKey, String)>,
}

/// Plans one pass (without renderings from earlier passes).
pub fn plan(settings: &Settings, snap: &Snapshot) -> Plan {
    plan_with(settings, snap, &mut Renders::default())
}

/// Plans one pass, reusing `renders` from earlier ones.
pub fn plan_with(settings: &Settings, snap: &Snapshot, renders: &mut Renders) -> Plan {
    // The agents' definitions are part of every cluster's rendering (a change is a new
    // rendering, rolled out like any other).
    let shipping = super::definitions::ship(&snap.definitions, snap.now);
    let mut settings = settings.clone();
    settings.template.definitions = shipping.file;
    let mut plan = pass::plan(&settings, snap, renders);
    renders.rotate();
    for (name, status) in shipping.statuses {
        let resource_version = snap
            .definitions
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|d| d.metadata.resource_version.clone());
        plan.actions.push(Action::PatchDefinitionStatus {
            name,
            resource_version,
            status: Box::new(status),
        });
    }
    plan
}
