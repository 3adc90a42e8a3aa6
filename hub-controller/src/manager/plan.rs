//! One reconcile pass as a pure function: a snapshot of everything the manager watches in,
//! the writes that bring the hub to the desired state out. Deterministic (the clock is in the
//! snapshot), so a pass over an unchanged hub plans nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfigSpec, AddOnMeta, ClusterManagementAddOn, ClusterManagementAddOnSpec,
    ConfigGroupResource, ConfigMeta, ConfigReference, ConfigReferent, ConfigSpecHash,
    InstallConfigReference, InstallProgression, ManagedClusterAddOn, ManagedClusterAddOnSpec,
    ManagedClusterAddOnStatus,
};
use ocm_api::cluster::v1beta1::PlacementDecision;
use ocm_api::conditions;
use ocm_api::wellknown::{addon_condition, annotation, group, label};
use ocm_api::work::v1::ManifestWork;

use super::health;
use super::install::{self, ADC_RESOURCE, ConfigKey};
use super::registration;
use super::render::{self, AgentTemplate, Rendered};
use super::rollout::{self, ClusterStatus, Groups, Progress, Status, Strategy};

/// On the add-on's ManifestWork: the hash of the rendered spec, which the rollout compares.
pub const RENDERING_HASH: &str = "addon.ocm-placement.io/rendering-hash";

/// `Configured` reasons (ocm `addonconfiguration`).
const CONFIGURED: &str = "ConfigurationsConfigured";
const CONFIG_NOT_FOUND: &str = "ConfigurationNotFound";
const CONFIG_INVALID: &str = "ConfigurationInvalid";

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

    /// The name of the agent's hub Role and RoleBinding in each cluster namespace.
    pub fn permission_name(&self) -> String {
        format!("open-cluster-management:{}:agent", self.addon)
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
    pub configs: BTreeMap<ConfigKey, Config>,
    /// This add-on's deploy works by cluster namespace.
    pub works: BTreeMap<String, Arc<ManifestWork>>,
    pub roles: BTreeMap<String, Arc<Role>>,
    pub bindings: BTreeMap<String, Arc<RoleBinding>>,
    pub csrs: Vec<Arc<CertificateSigningRequest>>,
    /// The last failed write per cluster and step.
    pub errors: BTreeMap<(String, Step), String>,
    pub now: Option<Timestamp>,
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreateCma(Box<ClusterManagementAddOn>),
    /// Merge patch of the ClusterManagementAddOn's spec.supportedConfigs.
    PatchCmaSupportedConfigs(Vec<ConfigMeta>),
    PatchCmaStatus(Vec<InstallProgression>),
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
    ApplyRole(Box<Role>),
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
    ApproveCsr {
        name: String,
    },
}

impl Action {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::CreateCma(_) => "create_cma",
            Action::PatchCmaSupportedConfigs(_) => "patch_cma",
            Action::PatchCmaStatus(_) => "patch_cma_status",
            Action::CreateMca(_) => "create_mca",
            Action::DeleteMca { .. } => "delete_mca",
            Action::PatchMcaStatus { .. } => "patch_mca_status",
            Action::ApplyRole(_) => "apply_role",
            Action::ApplyRoleBinding(_) => "apply_rolebinding",
            Action::DeleteRole { .. } => "delete_role",
            Action::DeleteRoleBinding { .. } => "delete_rolebinding",
            Action::ApplyWork(_) => "apply_work",
            Action::DeleteWork { .. } => "delete_work",
            Action::ApproveCsr { .. } => "approve_csr",
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
            Action::ApplyRole(o) => o.metadata.namespace.as_deref(),
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
}

/// The add-on on one cluster while planning.
struct Cluster<'a> {
    name: &'a str,
    mca: &'a ManagedClusterAddOn,
    placement: Option<usize>,
    config: Option<ConfigKey>,
    config_hash: Option<String>,
    rendered: Result<Rendered, String>,
    work: Option<&'a ManifestWork>,
    up_to_date: bool,
    status: ManagedClusterAddOnStatus,
    rollout: ClusterStatus,
}

/// Plans one pass.
pub fn plan(settings: &Settings, snap: &Snapshot) -> Plan {
    let now = snap.now.unwrap_or_else(Timestamp::now);
    let mut out = Plan::default();
    let cma = snap.cma.as_deref();
    ensure_cma(settings, cma, &mut out);
    // `self` or no annotation: this manager installs and rolls out; `addon-manager`: OCM's
    // addon-manager does, and this manager only registers, deploys and reports health.
    let installs = cma.is_some_and(|c| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::ADDON_LIFECYCLE))
            .is_none_or(|v| v != "addon-manager")
    });
    let decisions: Vec<&PlacementDecision> = snap.decisions.iter().map(|d| d.as_ref()).collect();
    let selected = match cma {
        Some(c) if installs => install::selected(c, &decisions),
        _ => BTreeMap::new(),
    };

    // Install: a ManagedClusterAddOn per selected cluster, none where the CMA's went away.
    if let Some(c) = cma.filter(|_| installs) {
        for cluster in selected.keys() {
            if !snap.mcas.contains_key(cluster) {
                out.actions
                    .push(Action::CreateMca(Box::new(new_mca(settings, c, cluster))));
            }
        }
        for (cluster, mca) in &snap.mcas {
            if !selected.contains_key(cluster)
                && owned_by(&mca.metadata, c)
                && mca.metadata.deletion_timestamp.is_none()
            {
                out.actions.push(Action::DeleteMca {
                    cluster: cluster.clone(),
                });
            }
        }
    }

    // Per cluster: configuration, rendering, the work's state.
    let mut clusters: Vec<Cluster<'_>> = Vec::new();
    for (name, mca) in &snap.mcas {
        if mca.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let placement = selected.get(name).copied();
        clusters.push(assess(settings, snap, cma, name, mca, placement, now));
    }

    // Rollout: which clusters may take the current rendering now.
    let mut allowed: BTreeSet<&str> = BTreeSet::new();
    let mut progressions = Vec::new();
    let placements: &[ocm_api::addon::v1alpha1::PlacementStrategy] = match cma {
        Some(c) if installs && c.spec.install_strategy.type_ == install::PLACEMENTS => {
            &c.spec.install_strategy.placements
        }
        _ => &[],
    };
    for (i, p) in placements.iter().enumerate() {
        let ns = &p.placement_ref.namespace;
        let pname = &p.placement_ref.name;
        let all = Groups::from_decisions(
            decisions
                .iter()
                .copied()
                .filter(|d| install::decision_of(d, ns, pname)),
        );
        let mut groups = Groups::default();
        for c in all.clusters() {
            let here = selected.get(c) == Some(&i) && clusters.iter().any(|x| x.name == c);
            if let (true, Some(k)) = (here, all.group_of(c)) {
                groups.insert(k.clone(), c);
            }
        }
        let existing: Vec<ClusterStatus> = clusters
            .iter()
            .filter(|c| c.placement == Some(i))
            .map(|c| c.rollout.clone())
            .collect();
        let mut progress = Progress {
            total: selected.values().filter(|v| **v == i).count(),
            configured: clusters
                .iter()
                .filter(|c| c.placement == Some(i) && c.rendered.is_ok())
                .count(),
            ..Progress::default()
        };
        let condition = match Strategy::parse(&p.rollout_strategy) {
            Ok(strategy) => {
                let result = rollout::rollout(&strategy, &groups, &existing, now);
                allowed.extend(
                    result
                        .to_rollout
                        .iter()
                        .filter_map(|s| clusters.iter().find(|c| c.name == s.cluster))
                        .map(|c| c.name),
                );
                if let Some(r) = result.recheck_after {
                    out.recheck_after = Some(out.recheck_after.map_or(r, |o| o.min(r)));
                }
                let timed_out: BTreeSet<&str> = result
                    .timed_out
                    .iter()
                    .map(|s| s.cluster.as_str())
                    .collect();
                for s in &existing {
                    match s.status {
                        _ if timed_out.contains(s.cluster.as_str()) => progress.timed_out += 1,
                        Status::Progressing => progress.progressing += 1,
                        Status::Succeeded => progress.succeeded += 1,
                        Status::Failed => progress.failed += 1,
                        Status::TimeOut => progress.timed_out += 1,
                        Status::ToApply | Status::Skip => {}
                    }
                }
                let (status, reason, message) = progress.condition();
                (status, reason, message)
            }
            Err(e) => {
                let msg = format!("placement {ns}/{pname}: {e}");
                out.warnings.push(msg.clone());
                ("False", addon_condition::reason::FAILED, msg)
            }
        };
        progressions.push(progression(
            cma,
            i,
            p.placement_ref.clone(),
            condition,
            progress.completed(),
            snap,
            now,
        ));
    }
    // Clusters no placement rolls out to (Manual, or an MCA a user made) take it at once.
    for c in &clusters {
        if c.placement.is_none() {
            allowed.insert(c.name);
        }
    }

    // Writes per cluster.
    let mut status_actions = Vec::new();
    for mut c in clusters {
        let Some(owner) = mca_owner(c.mca) else {
            continue;
        };
        // Hub permission.
        match registration::hub_permission(c.name, &settings.addon, &settings.agent, owner.clone())
        {
            Ok((role, binding)) => {
                let role_ok = snap
                    .roles
                    .get(c.name)
                    .is_some_and(|o| registration::role_matches(o, &role));
                let binding_ok = snap
                    .bindings
                    .get(c.name)
                    .is_some_and(|o| registration::binding_matches(o, &binding));
                if !role_ok {
                    out.actions.push(Action::ApplyRole(Box::new(role)));
                }
                if !binding_ok {
                    out.actions
                        .push(Action::ApplyRoleBinding(Box::new(binding)));
                }
                let (s, r, m) = match snap.errors.get(&(c.name.to_owned(), Step::Permission)) {
                    Some(e) => (
                        "False",
                        addon_condition::reason::SET_PERMISSION_FAILED,
                        format!("Failed to set permission for hub agent: {e}"),
                    ),
                    None if role_ok && binding_ok => (
                        "True",
                        addon_condition::reason::SET_PERMISSION_APPLIED,
                        "Registration of the addon agent is configured".to_owned(),
                    ),
                    None => (
                        "False",
                        addon_condition::reason::PERMISSION_CONFIG_PENDING,
                        "Waiting for the hub permission of the addon agent".to_owned(),
                    ),
                };
                conditions::set(
                    &mut c.status.conditions,
                    addon_condition::REGISTRATION_APPLIED,
                    s,
                    r,
                    &m,
                    now,
                );
            }
            Err(e) => {
                conditions::set(
                    &mut c.status.conditions,
                    addon_condition::REGISTRATION_APPLIED,
                    "False",
                    addon_condition::reason::SET_PERMISSION_FAILED,
                    &format!("Failed to set permission for hub agent: {e}"),
                    now,
                );
            }
        }

        // The work.
        let work_error = snap.errors.get(&(c.name.to_owned(), Step::Work));
        match &c.rendered {
            Ok(rendered) => {
                let desired = work_object(
                    settings,
                    c.name,
                    rendered,
                    c.config.as_ref().zip(c.config_hash.as_deref()),
                    owner,
                );
                if !c.up_to_date && allowed.contains(c.name) {
                    out.actions.push(Action::ApplyWork(Box::new(desired)));
                    conditions::set(
                        &mut c.status.conditions,
                        addon_condition::PROGRESSING,
                        "True",
                        addon_condition::reason::PROGRESSING,
                        "progressing... applying the agent's new rendering",
                        now,
                    );
                } else if !c.up_to_date {
                    let placement = c
                        .placement
                        .and_then(|i| placements.get(i))
                        .map(|p| format!("{}/{}", p.placement_ref.namespace, p.placement_ref.name))
                        .unwrap_or_default();
                    conditions::set(
                        &mut c.status.conditions,
                        addon_condition::PROGRESSING,
                        "False",
                        addon_condition::reason::WAITING_FOR_CANARY,
                        &format!(
                            "waiting for the rollout of placement {placement} to reach this cluster"
                        ),
                        now,
                    );
                } else if c.work.is_some_and(|w| !work_meta_matches(w, &desired)) {
                    // Same rendering, drifted metadata (labels, owner): repair, no rollout.
                    out.actions.push(Action::ApplyWork(Box::new(desired)));
                }
                match (work_error, c.work) {
                    (Some(e), _) => conditions::set(
                        &mut c.status.conditions,
                        addon_condition::MANIFEST_APPLIED,
                        "False",
                        addon_condition::reason::MANIFEST_WORK_APPLY_FAILED,
                        &format!("failed to apply manifestWork: {e}"),
                        now,
                    ),
                    (None, Some(w)) => match health::manifest_applied(w) {
                        Some((s, r, m)) => conditions::set(
                            &mut c.status.conditions,
                            addon_condition::MANIFEST_APPLIED,
                            s,
                            r,
                            &m,
                            now,
                        ),
                        None => c.status.conditions.retain(|x| {
                            x.type_ != addon_condition::MANIFEST_APPLIED || x.status != "False"
                        }),
                    },
                    (None, None) => {}
                }
            }
            Err(e) => conditions::set(
                &mut c.status.conditions,
                addon_condition::MANIFEST_APPLIED,
                "False",
                addon_condition::reason::MANIFEST_WORK_APPLY_FAILED,
                &format!("failed to render the agent: {e}"),
                now,
            ),
        }
        if settings.health == HealthMode::Work {
            let (s, r, m) = health::available(c.work, &settings.addon);
            conditions::set(
                &mut c.status.conditions,
                addon_condition::AVAILABLE,
                s,
                r,
                &m,
                now,
            );
        }
        if c.mca.status.as_ref() != Some(&c.status) {
            status_actions.push(Action::PatchMcaStatus {
                cluster: c.name.to_owned(),
                resource_version: c.mca.metadata.resource_version.clone(),
                status: Box::new(c.status),
            });
        }
    }

    // What belongs to clusters that no longer have the add-on.
    let live = |ns: &str| {
        snap.mcas
            .get(ns)
            .is_some_and(|m| m.metadata.deletion_timestamp.is_none())
    };
    for ns in snap.works.keys().filter(|ns| !live(ns.as_str())) {
        out.actions.push(Action::DeleteWork {
            cluster: ns.clone(),
        });
    }
    for ns in snap.roles.keys().filter(|ns| !snap.mcas.contains_key(*ns)) {
        out.actions.push(Action::DeleteRole {
            cluster: ns.clone(),
        });
    }
    for ns in snap
        .bindings
        .keys()
        .filter(|ns| !snap.mcas.contains_key(*ns))
    {
        out.actions.push(Action::DeleteRoleBinding {
            cluster: ns.clone(),
        });
    }

    // Certificates.
    for csr in &snap.csrs {
        let ok = registration::check_csr(csr, &settings.addon, &settings.agent, live);
        if ok.is_ok()
            && let Some(name) = &csr.metadata.name
        {
            out.actions.push(Action::ApproveCsr { name: name.clone() });
        }
    }

    out.actions.extend(status_actions);
    if let Some(c) = cma.filter(|_| installs) {
        let observed = c
            .status
            .as_ref()
            .map(|s| s.install_progressions.clone())
            .unwrap_or_default();
        if observed != progressions {
            out.actions.push(Action::PatchCmaStatus(progressions));
        }
    }
    out
}

/// The ClusterManagementAddOn exists and supports AddOnDeploymentConfig.
fn ensure_cma(settings: &Settings, cma: Option<&ClusterManagementAddOn>, out: &mut Plan) {
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

fn new_mca(
    settings: &Settings,
    cma: &ClusterManagementAddOn,
    cluster: &str,
) -> ManagedClusterAddOn {
    let mut m = ManagedClusterAddOn::new(&settings.addon, ManagedClusterAddOnSpec::default());
    m.metadata.namespace = Some(cluster.to_owned());
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

fn owned_by(meta: &ObjectMeta, cma: &ClusterManagementAddOn) -> bool {
    meta.owner_references.iter().flatten().any(|o| {
        o.kind == "ClusterManagementAddOn"
            && o.name == cma.metadata.name.as_deref().unwrap_or_default()
            && cma.metadata.uid.as_deref().is_none_or(|u| u == o.uid)
    })
}

fn mca_owner(mca: &ManagedClusterAddOn) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "addon.open-cluster-management.io/v1alpha1".to_owned(),
        kind: "ManagedClusterAddOn".to_owned(),
        name: mca.metadata.name.clone()?,
        uid: mca.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Upstream's `config-spec-hash` annotation value: `{"<resource>.<group>/<ns>/<name>": hash}`.
fn config_spec_hash_annotation(key: &ConfigKey, hash: &str) -> String {
    let map = BTreeMap::from([(
        format!(
            "{ADC_RESOURCE}.{}/{}/{}",
            group::ADDON,
            key.namespace,
            key.name
        ),
        hash.to_owned(),
    )]);
    serde_json::to_string(&map).unwrap_or_default()
}

fn work_object(
    settings: &Settings,
    cluster: &str,
    rendered: &Rendered,
    config: Option<(&ConfigKey, &str)>,
    owner: OwnerReference,
) -> ManifestWork {
    let mut w = ManifestWork::new(&settings.work_name(), rendered.spec.clone());
    w.metadata.namespace = Some(cluster.to_owned());
    w.metadata.labels = Some(BTreeMap::from([(
        label::ADDON_NAME.to_owned(),
        settings.addon.clone(),
    )]));
    let mut annotations = BTreeMap::from([(RENDERING_HASH.to_owned(), rendered.hash.clone())]);
    if let Some((key, hash)) = config {
        annotations.insert(
            annotation::CONFIG_SPEC_HASH.to_owned(),
            config_spec_hash_annotation(key, hash),
        );
    }
    w.metadata.annotations = Some(annotations);
    w.metadata.owner_references = Some(vec![owner]);
    w
}

fn annotation_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Same rendering and configs as `desired`.
fn work_current(observed: &ManifestWork, desired: &ManifestWork) -> bool {
    [RENDERING_HASH, annotation::CONFIG_SPEC_HASH]
        .iter()
        .all(|k| annotation_of(&observed.metadata, k) == annotation_of(&desired.metadata, k))
}

fn work_meta_matches(observed: &ManifestWork, desired: &ManifestWork) -> bool {
    let label_ok = observed
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::ADDON_NAME))
        == desired
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::ADDON_NAME));
    label_ok && observed.metadata.owner_references == desired.metadata.owner_references
}

/// The add-on on one cluster: its configuration, rendering, work and rollout status, and the
/// status fields that do not depend on the rollout.
fn assess<'a>(
    settings: &Settings,
    snap: &'a Snapshot,
    cma: Option<&ClusterManagementAddOn>,
    name: &'a str,
    mca: &'a ManagedClusterAddOn,
    placement: Option<usize>,
    now: Timestamp,
) -> Cluster<'a> {
    let mut status = mca.status.clone().unwrap_or_default();
    let config = install::cluster_config(cma, placement, mca);
    let adc_gr = ConfigGroupResource {
        group: group::ADDON.to_owned(),
        resource: ADC_RESOURCE.to_owned(),
    };
    status.supported_configs = vec![adc_gr.clone()];
    status.registrations = registration::registrations(name, &settings.addon, &settings.agent);
    status.health_check.mode = match settings.health {
        HealthMode::Work => "Customized",
        HealthMode::Lease => "Lease",
    }
    .to_owned();

    let found = config.as_ref().map(|k| (k, snap.configs.get(k)));
    let (spec, config_hash, configured) = match found {
        None => (Ok(None), None, None),
        Some((k, None)) => (
            Err(format!("AddOnDeploymentConfig {k} is not found")),
            None,
            Some((
                "False",
                CONFIG_NOT_FOUND,
                format!("AddOnDeploymentConfig {k} is not found"),
            )),
        ),
        Some((k, Some(Config { spec: Err(e), .. }))) => (
            Err(format!("AddOnDeploymentConfig {k} is invalid: {e}")),
            None,
            Some((
                "False",
                CONFIG_INVALID,
                format!("AddOnDeploymentConfig {k} is invalid: {e}"),
            )),
        ),
        Some((_, Some(Config { spec: Ok(s), hash }))) => (
            Ok(Some(s)),
            Some(hash.clone()),
            Some(("True", CONFIGURED, "Configurations configured".to_owned())),
        ),
    };
    match configured {
        Some((s, r, m)) => conditions::set(
            &mut status.conditions,
            addon_condition::CONFIGURED,
            s,
            r,
            &m,
            now,
        ),
        None => conditions::set(
            &mut status.conditions,
            addon_condition::CONFIGURED,
            "True",
            CONFIGURED,
            "Configurations configured",
            now,
        ),
    }
    let adc = spec.as_ref().ok().copied().flatten();
    status.namespace = render::install_namespace(&settings.template, adc);
    let rendered =
        spec.and_then(|s| render::render(&settings.template, name, s).map_err(|e| e.to_string()));

    let work = snap.works.get(name).map(|w| w.as_ref());
    let desired_meta = rendered
        .as_ref()
        .ok()
        .zip(mca_owner(mca))
        .map(|(r, owner)| {
            work_object(
                settings,
                name,
                r,
                config.as_ref().zip(config_hash.as_deref()),
                owner,
            )
        });
    let up_to_date = match (work, &desired_meta) {
        (Some(w), Some(d)) => work_current(w, d),
        _ => false,
    };

    // Progressing for a cluster already on the current rendering (upstream `addonprogressing`,
    // except that success also needs the agent Available in Work mode: a rollout of a broken
    // image stops at the first group instead of sweeping the fleet).
    let mut rollout_status = ClusterStatus {
        cluster: name.to_owned(),
        group: None,
        status: Status::ToApply,
        last_transition: None,
        recheck_at: None,
    };
    if rendered.is_err() {
        rollout_status.status = Status::Skip;
    } else if let (true, Some(w)) = (up_to_date, work) {
        let available = settings.health == HealthMode::Lease
            || health::available(Some(w), &settings.addon).0 == "True";
        let (s, r, m) = if let Some(e) = health::work_failed(w) {
            ("False", addon_condition::reason::FAILED, e)
        } else if health::work_ready(w) && available {
            (
                "False",
                addon_condition::reason::COMPLETED,
                "completed with no errors.".to_owned(),
            )
        } else {
            (
                "True",
                addon_condition::reason::PROGRESSING,
                "progressing... work is not ready".to_owned(),
            )
        };
        conditions::set(
            &mut status.conditions,
            addon_condition::PROGRESSING,
            s,
            r,
            &m,
            now,
        );
        let cond = conditions::find(&status.conditions, addon_condition::PROGRESSING);
        rollout_status.last_transition = cond.map(|c| c.last_transition_time.0);
        rollout_status.status = match r {
            addon_condition::reason::FAILED => Status::Failed,
            addon_condition::reason::COMPLETED => Status::Succeeded,
            _ => Status::Progressing,
        };
    }

    // configReferences: the config in use, last applied once the cluster completed on it.
    status.config_references = match (&config, &config_hash) {
        (Some(k), Some(h)) => {
            let desired = ConfigSpecHash {
                config_referent: ConfigReferent {
                    namespace: k.namespace.clone(),
                    name: k.name.clone(),
                },
                spec_hash: h.clone(),
            };
            let previous = status
                .config_references
                .iter()
                .find(|r| r.config_group_resource == adc_gr)
                .and_then(|r| r.last_applied_config.clone());
            let last_applied = if rollout_status.status == Status::Succeeded {
                Some(desired.clone())
            } else {
                previous
            };
            vec![ConfigReference {
                config_group_resource: adc_gr,
                config_referent: desired.config_referent.clone(),
                last_observed_generation: 0,
                desired_config: Some(desired),
                last_applied_config: last_applied,
            }]
        }
        _ => Vec::new(),
    };

    Cluster {
        name,
        mca,
        placement,
        config,
        config_hash,
        rendered,
        work,
        up_to_date,
        status,
        rollout: rollout_status,
    }
}

fn progression(
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
    use serde_json::{Value, json};

    const ADDON: &str = "ruc";

    fn settings() -> Settings {
        Settings {
            addon: ADDON.into(),
            agent: format!("{ADDON}-agent"),
            template: AgentTemplate {
                addon_name: ADDON.into(),
                image: "example.com/agent:1".into(),
                default_install_namespace: "agents".into(),
            },
            health: HealthMode::Work,
            manage_cma: true,
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("a time")
    }

    fn cma(strategy: Value, annotations: Value) -> Arc<ClusterManagementAddOn> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "addon.open-cluster-management.io/v1alpha1",
                "kind": "ClusterManagementAddOn",
                "metadata": {"name": ADDON, "uid": "cma-uid", "annotations": annotations},
                "spec": {
                    "supportedConfigs": [{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"}],
                    "installStrategy": strategy
                }
            }))
            .expect("a cma"),
        )
    }

    fn placements(rollout: Value) -> Value {
        json!({"type": "Placements", "placements": [{"namespace": "p", "name": "fleet", "rolloutStrategy": rollout}]})
    }

    fn decision(
        name: &str,
        group: Option<(i32, &str)>,
        clusters: &[&str],
    ) -> Arc<PlacementDecision> {
        let mut labels = json!({"cluster.open-cluster-management.io/placement": "fleet"});
        if let Some((i, n)) = group {
            labels["cluster.open-cluster-management.io/decision-group-index"] =
                json!(i.to_string());
            labels["cluster.open-cluster-management.io/decision-group-name"] = json!(n);
        }
        let decisions: Vec<Value> = clusters
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "PlacementDecision",
                "metadata": {"name": name, "namespace": "p", "labels": labels},
                "status": {"decisions": decisions}
            }))
            .expect("a decision"),
        )
    }

    fn user_mca(cluster: &str) -> Arc<ManagedClusterAddOn> {
        let mut m = ManagedClusterAddOn::new(ADDON, ManagedClusterAddOnSpec::default());
        m.metadata.namespace = Some(cluster.into());
        m.metadata.uid = Some(format!("mca-{cluster}"));
        Arc::new(m)
    }

    /// What the API server would hold after `actions` (generation bumps on spec changes).
    fn apply(snap: &mut Snapshot, actions: &[Action]) {
        for a in actions {
            match a.clone() {
                Action::CreateCma(mut c) => {
                    c.metadata.uid = Some("cma-uid".into());
                    snap.cma = Some(Arc::new(*c));
                }
                Action::PatchCmaSupportedConfigs(configs) => {
                    let mut c = snap.cma.as_deref().cloned().expect("a cma");
                    c.spec.supported_configs = configs;
                    snap.cma = Some(Arc::new(c));
                }
                Action::PatchCmaStatus(p) => {
                    let mut c = snap.cma.as_deref().cloned().expect("a cma");
                    c.status
                        .get_or_insert_with(Default::default)
                        .install_progressions = p;
                    snap.cma = Some(Arc::new(c));
                }
                Action::CreateMca(mut m) => {
                    let ns = m.metadata.namespace.clone().expect("ns");
                    m.metadata.uid = Some(format!("mca-{ns}"));
                    snap.mcas.insert(ns, Arc::new(*m));
                }
                Action::DeleteMca { cluster } => {
                    snap.mcas.remove(&cluster);
                }
                Action::PatchMcaStatus {
                    cluster, status, ..
                } => {
                    let mut m = snap.mcas[&cluster].as_ref().clone();
                    m.status = Some(*status);
                    snap.mcas.insert(cluster, Arc::new(m));
                }
                Action::ApplyRole(r) => {
                    snap.roles
                        .insert(r.metadata.namespace.clone().expect("ns"), Arc::new(*r));
                }
                Action::ApplyRoleBinding(b) => {
                    snap.bindings
                        .insert(b.metadata.namespace.clone().expect("ns"), Arc::new(*b));
                }
                Action::DeleteRole { cluster } => {
                    snap.roles.remove(&cluster);
                }
                Action::DeleteRoleBinding { cluster } => {
                    snap.bindings.remove(&cluster);
                }
                Action::ApplyWork(mut w) => {
                    let ns = w.metadata.namespace.clone().expect("ns");
                    let old = snap.works.get(&ns);
                    let generation = old.and_then(|o| o.metadata.generation).unwrap_or(0);
                    let changed = old.is_none_or(|o| o.spec != w.spec);
                    w.metadata.generation = Some(generation + i64::from(changed));
                    w.status = old.and_then(|o| o.status.clone());
                    snap.works.insert(ns, Arc::new(*w));
                }
                Action::DeleteWork { cluster } => {
                    snap.works.remove(&cluster);
                }
                Action::ApproveCsr { name } => {
                    let i = snap
                        .csrs
                        .iter()
                        .position(|c| c.metadata.name.as_deref() == Some(name.as_str()))
                        .expect("the csr");
                    let mut c = snap.csrs[i].as_ref().clone();
                    c.status = serde_json::from_value(
                        json!({"conditions": [{"type": "Approved", "status": "True"}]}),
                    )
                    .ok();
                    snap.csrs[i] = Arc::new(c);
                }
            }
        }
    }

    /// Plans and applies until nothing is left to do; returns every action taken.
    fn converge(s: &Settings, snap: &mut Snapshot) -> Vec<Action> {
        let mut all = Vec::new();
        for _ in 0..6 {
            let p = plan(s, snap);
            if p.actions.is_empty() {
                return all;
            }
            apply(snap, &p.actions);
            all.extend(p.actions);
        }
        panic!("no fixed point: {:?}", plan(s, snap).actions);
    }

    /// The work agent applied `cluster`'s work and its Deployment is ready (or not).
    fn report(snap: &mut Snapshot, cluster: &str, applied: bool) {
        let mut w = snap.works[cluster].as_ref().clone();
        let generation = w.metadata.generation;
        let cond = |ty: &str, st: &str| {
            json!({"type": ty, "status": st, "reason": "R", "message": format!("{ty} {st}"),
                   "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
        };
        let deployment = format!("{ADDON}-agent");
        let ns = w.spec.manifest_configs[0]
            .resource_identifier
            .namespace
            .clone();
        w.status = serde_json::from_value(json!({
            "conditions": [cond("Applied", if applied { "True" } else { "False" }), cond("Available", "True")],
            "resourceStatus": {"manifests": [{
                "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment",
                                 "resource": "deployments", "namespace": ns, "name": deployment},
                "statusFeedback": {"values": [
                    {"name": "ReadyReplicas", "fieldValue": {"type": "Integer", "integer": 1}},
                    {"name": "Replicas", "fieldValue": {"type": "Integer", "integer": 1}}]},
                "conditions": []}]}
        }))
        .ok();
        snap.works.insert(cluster.into(), Arc::new(w));
    }

    fn cond<'a>(snap: &'a Snapshot, cluster: &str, ty: &str) -> Option<(&'a str, &'a str)> {
        snap.mcas[cluster]
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, ty))
            .map(|c| (c.status.as_str(), c.reason.as_str()))
    }

    fn kinds(actions: &[Action]) -> Vec<(&'static str, Option<&str>)> {
        actions.iter().map(|a| (a.kind(), a.cluster())).collect()
    }

    #[test]
    fn installs_on_the_placements_clusters_and_then_rests() {
        let s = settings();
        let mut snap = Snapshot {
            cma: Some(cma(placements(json!({"type": "All"})), json!({}))),
            decisions: vec![decision("d1", None, &["c1", "c2"])],
            now: Some(t(0)),
            ..Snapshot::default()
        };
        let actions = converge(&s, &mut snap);
        assert_eq!(snap.mcas.keys().collect::<Vec<_>>(), ["c1", "c2"]);
        assert_eq!(snap.works.len(), 2);
        assert_eq!((snap.roles.len(), snap.bindings.len()), (2, 2));
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
        assert_eq!(
            c1,
            [
                "create_mca",
                "apply_role",
                "apply_rolebinding",
                "apply_work"
            ]
        );
        // Nothing changes: nothing to write, at any later time.
        snap.now = Some(t(3600));
        assert_eq!(plan(&s, &snap).actions, []);

        // The agent comes up: Available, then Completed; the progression completes.
        report(&mut snap, "c1", true);
        report(&mut snap, "c2", true);
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
        let actions = converge(&s, &mut snap);
        assert_eq!(
            kinds(&actions)
                .into_iter()
                .filter(|(k, _)| k.starts_with("delete"))
                .collect::<Vec<_>>(),
            [
                ("delete_mca", Some("c2")),
                ("delete_work", Some("c2")),
                ("delete_role", Some("c2")),
                ("delete_rolebinding", Some("c2"))
            ]
        );
    }

    #[test]
    fn manual_and_foreign_lifecycles() {
        let s = settings();
        // Manual: users' MCAs are served, never removed; no progression is kept.
        let mut snap = Snapshot {
            cma: Some(cma(json!({"type": "Manual"}), json!({}))),
            mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
            decisions: vec![decision("d1", None, &["c9"])],
            now: Some(t(0)),
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
            now: Some(t(0)),
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
            now: Some(t(0)),
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
        apply(&mut snap, &p.actions);
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

    #[test]
    fn configs_and_failures_become_conditions() {
        let s = settings();
        let mut with_config = user_mca("c1").as_ref().clone();
        with_config.spec.configs = serde_json::from_value(json!([
            {"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "tuned"}
        ]))
        .expect("configs");
        let mut snap = Snapshot {
            cma: Some(cma(json!({"type": "Manual"}), json!({}))),
            mcas: BTreeMap::from([("c1".to_owned(), Arc::new(with_config))]),
            now: Some(t(0)),
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
        report(&mut snap, "c1", true);
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
            cma: Some(cma(json!({"type": "Manual"}), json!({}))),
            mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
            now: Some(t(0)),
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
        // Applied is enough to complete without a probe.
        let mut w = snap.works["c1"].as_ref().clone();
        w.status = serde_json::from_value(json!({"conditions": [
            {"type": "Applied", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
            {"type": "Available", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]})).ok();
        snap.works.insert("c1".into(), Arc::new(w));
        converge(&s, &mut snap);
        assert_eq!(
            cond(&snap, "c1", "Progressing"),
            Some(("False", "Completed"))
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
                json!({}),
            )),
            decisions: vec![
                decision("d1", Some((0, "canary")), &["c1"]),
                decision("d2", Some((1, "")), &["c2"]),
                decision("d3", Some((2, "")), &["c3"]),
            ],
            now: Some(t(0)),
            ..Snapshot::default()
        };
        converge(&s, &mut snap);
        assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1"]);
        assert_eq!(
            cond(&snap, "c2", "Progressing"),
            Some(("False", "WaitingForCanary"))
        );
        report(&mut snap, "c1", true);
        converge(&s, &mut snap);
        assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1", "c2"]);
        // A group that does not come up holds the next one until its deadline.
        let p = plan(&s, &snap);
        assert_eq!(p.recheck_after, Some(Duration::from_secs(600)));
        snap.now = Some(t(599));
        converge(&s, &mut snap);
        assert!(!snap.works.contains_key("c3"));
        snap.now = Some(t(601));
        converge(&s, &mut snap);
        // Timed out counts as failed (upstream): within maxFailures, the rollout moves on.
        assert!(snap.works.contains_key("c3"), "the deadline passed");
        report(&mut snap, "c2", true);
        report(&mut snap, "c3", true);
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
        report(&mut snap, "c1", false);
        snap.now = Some(t(10_000));
        converge(&s2, &mut snap);
        assert_eq!(cond(&snap, "c1", "Progressing"), Some(("False", "Failed")));
        assert_eq!(
            hash(&snap, "c2"),
            before[1],
            "a failed mandatory group stops the rollout, even past its deadline"
        );
        report(&mut snap, "c1", true);
        converge(&s2, &mut snap);
        assert_ne!(hash(&snap, "c2"), before[1]);
    }

    #[test]
    fn a_bad_strategy_is_reported_and_deploys_nothing() {
        let s = settings();
        let mut snap = Snapshot {
            cma: Some(cma(placements(json!({"type": "Sideways"})), json!({}))),
            decisions: vec![decision("d1", None, &["c1"])],
            now: Some(t(0)),
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
                groups: Some(vec![registration::cluster_group(cluster)]),
                ..Default::default()
            };
            Arc::new(c)
        };
        let mut snap = Snapshot {
            cma: Some(cma(json!({"type": "Manual"}), json!({}))),
            mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
            csrs: vec![csr("a", "c1"), csr("b", "c2")],
            now: Some(t(0)),
            ..Snapshot::default()
        };
        let actions = converge(&s, &mut snap);
        let approvals: Vec<&Action> = actions
            .iter()
            .filter(|a| a.kind() == "approve_csr")
            .collect();
        assert_eq!(approvals, [&Action::ApproveCsr { name: "a".into() }]);
    }
}
