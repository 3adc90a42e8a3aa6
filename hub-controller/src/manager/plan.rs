//! One reconcile pass as a pure function: a snapshot of everything the manager watches in,
//! the writes that bring the hub to the desired state out. Deterministic (the clock is in the
//! snapshot), so a pass over an unchanged hub plans nothing.

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
use ocm_api::wellknown::{addon_condition, annotation, cluster_condition, group, label};
use ocm_api::work::v1::{ManifestWork, ManifestWorkSpec};

use super::health;
use super::install::{self, ADC_RESOURCE, ConfigKey};
use super::registration;
use super::render::{self, AgentTemplate, Rendered};
use super::rollout::{self, ClusterStatus, Groups, Progress, Status, Strategy};

pub use super::render::RENDERING_HASH;

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
    pub now: Option<Timestamp>,
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
    pub refused_csrs: Vec<super::csr::RefusedCsr>,
}

/// The add-on on one cluster while planning.
struct Cluster<'a> {
    name: &'a str,
    mca: &'a ManagedClusterAddOn,
    placement: Option<usize>,
    config: Option<ConfigKey>,
    config_hash: Option<String>,
    rendered: Result<Arc<Rendered>, String>,
    /// The subject the spoke reported with the token driver (to be checked, never trusted).
    token_subject: Option<ocm_api::addon::v1alpha1::Subject>,
    /// The config the rendering used (a write renders again with it).
    adc: Option<AddOnDeploymentConfigSpec>,
    work: Option<&'a ManifestWork>,
    up_to_date: bool,
    status: ManagedClusterAddOnStatus,
    rollout: ClusterStatus,
}

/// Renderings kept between passes: rendering parses the agent's YAML templates, and a pass
/// over a settled fleet needs each cluster's rendering only to compare hashes. Keyed by the
/// cluster and the config's spec, for one template; what a pass did not use is dropped.
/// Also the CSR requests parsed (by uid and resourceVersion), dropped the same way.
#[derive(Debug, Default)]
pub struct Renders {
    template: Option<AgentTemplate>,
    previous: HashMap<(String, String), Result<Arc<Rendered>, String>>,
    current: HashMap<(String, String), Result<Arc<Rendered>, String>>,
    requests: super::csr::Requests,
}

impl Renders {
    fn get(
        &mut self,
        t: &AgentTemplate,
        cluster: &str,
        adc: Option<&AddOnDeploymentConfigSpec>,
    ) -> Result<Arc<Rendered>, String> {
        if self.template.as_ref() != Some(t) {
            self.template = Some(t.clone());
            self.previous.clear();
            self.current.clear();
        }
        let config = adc
            .map(|a| serde_json::to_string(a).unwrap_or_default())
            .unwrap_or_default();
        let key = (cluster.to_owned(), config);
        if let Some(r) = self.current.get(&key) {
            return r.clone();
        }
        let r = match self.previous.remove(&key) {
            Some(r) => r,
            // Kept without the spec (most of a rendering's memory); a write renders again.
            None => render::render(t, cluster, adc)
                .map(|mut r| {
                    r.spec = ManifestWorkSpec::default();
                    Arc::new(r)
                })
                .map_err(|e| e.to_string()),
        };
        self.current.insert(key, r.clone());
        r
    }

    /// Ends a pass: what it did not use goes.
    fn rotate(&mut self) {
        self.previous = std::mem::take(&mut self.current);
        self.requests.rotate();
    }

    /// Entries kept: (renderings, parsed CSR requests).
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.previous.len() + self.current.len(),
            self.requests.len(),
        )
    }
}

/// Plans one pass (without renderings from earlier passes).
pub fn plan(settings: &Settings, snap: &Snapshot) -> Plan {
    plan_with(settings, snap, &mut Renders::default())
}

/// Plans one pass, reusing `renders` from earlier ones.
pub fn plan_with(settings: &Settings, snap: &Snapshot, renders: &mut Renders) -> Plan {
    let plan = plan_inner(settings, snap, renders);
    renders.rotate();
    plan
}

fn plan_inner(settings: &Settings, snap: &Snapshot, renders: &mut Renders) -> Plan {
    let now = snap.now.unwrap_or_else(Timestamp::now);
    let mut out = Plan::default();
    let cma = snap.cma.as_deref();
    ensure_cma(settings, cma, &mut out);
    // `self`: this manager installs, configures and rolls out. Otherwise (no annotation, as
    // upstream's `ManagedByAddonManager`, or `addon-manager`) OCM's addon-manager does, and
    // this manager only registers, deploys the config the MCA's `configReferences` name and
    // reports health.
    let installs = cma.is_some_and(|c| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::ADDON_LIFECYCLE))
            .is_some_and(|v| v == "self")
    });
    let decisions: Vec<&PlacementDecision> = snap.decisions.iter().map(|d| d.as_ref()).collect();
    let selected = match cma {
        Some(c) if installs => install::selected(c, &decisions),
        _ => BTreeMap::new(),
    };

    let placements: &[ocm_api::addon::v1alpha1::PlacementStrategy] = match cma {
        Some(c) if installs && c.spec.install_strategy.type_ == install::PLACEMENTS => {
            &c.spec.install_strategy.placements
        }
        _ => &[],
    };
    // A placement whose scheduling failed or is unknown says nothing about which clusters
    // should lose the add-on: while any is, nothing is uninstalled, and the add-ons no healthy
    // placement selects are left as they are (`held`).
    let scheduling: Vec<Result<(), install::Unscheduled>> = placements
        .iter()
        .map(|p| {
            let (ns, name) = (&p.placement_ref.namespace, &p.placement_ref.name);
            let placement = snap.placements.get(&(ns.clone(), name.clone()));
            install::scheduled(
                ns,
                name,
                placement.map(|p| p.as_ref()),
                install::decided(&decisions, ns, name),
            )
        })
        .collect();
    for e in scheduling.iter().filter_map(|r| r.as_ref().err()) {
        out.warnings.push(e.message.clone());
    }
    let hold = scheduling.iter().any(Result::is_err);
    let held = |cluster: &str, mca: &ManagedClusterAddOn| {
        hold && !selected.contains_key(cluster) && cma.is_some_and(|c| owned_by(&mca.metadata, c))
    };

    // Install: a ManagedClusterAddOn per selected cluster, none where the CMA's went away
    // (only under `Placements`: switching to `Manual` leaves the add-ons where they are).
    if let Some(c) =
        cma.filter(|c| installs && c.spec.install_strategy.type_ == install::PLACEMENTS)
    {
        for cluster in selected.keys() {
            let Some(managed) = snap.clusters.get(cluster) else {
                continue;
            };
            if !snap.mcas.contains_key(cluster) && managed.metadata.deletion_timestamp.is_none() {
                out.actions.push(Action::CreateMca(Box::new(new_mca(
                    settings, c, cluster, managed,
                ))));
            }
        }
        for (cluster, mca) in &snap.mcas {
            if !selected.contains_key(cluster)
                && !hold
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
        // Upstream's registration and deploy controllers skip an add-on whose cluster is gone
        // or going.
        let cluster_ok = snap
            .clusters
            .get(name)
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none());
        if mca.metadata.deletion_timestamp.is_some() || !cluster_ok || held(name, mca) {
            continue;
        }
        let placement = selected.get(name).copied();
        clusters.push(assess(
            settings, snap, cma, installs, name, mca, placement, now, renders,
        ));
    }

    // Rollout: which clusters may take the current rendering now.
    let mut allowed: BTreeSet<&str> = BTreeSet::new();
    let mut progressions = Vec::new();
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
        // Upstream: every cluster the placement selects, and every add-on it configures
        // (a cluster whose config is missing counts, and keeps the progression from completing).
        let mut progress = Progress {
            total: all.len(),
            configured: clusters.iter().filter(|c| c.placement == Some(i)).count(),
            ..Progress::default()
        };
        let per_group = snap
            .placements
            .get(&(ns.clone(), pname.clone()))
            .and_then(|p| {
                p.spec
                    .decision_strategy
                    .group_strategy
                    .clusters_per_decision_group
                    .as_ref()
            });
        let condition = match Strategy::parse_for_placement(&p.rollout_strategy, per_group) {
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
        let mut progression = progression(
            cma,
            i,
            p.placement_ref.clone(),
            condition,
            progress.completed(),
            snap,
            now,
        );
        let (s, r, m) = match &scheduling[i] {
            Ok(()) => (
                "True",
                PLACEMENT_SCHEDULED,
                format!("placement {ns}/{pname} is scheduled"),
            ),
            Err(e) => ("False", e.reason, e.message.clone()),
        };
        conditions::set(
            &mut progression.conditions,
            PLACEMENT_SCHEDULED,
            s,
            r,
            &m,
            now,
        );
        progressions.push(progression);
    }
    // Clusters no placement rolls out to (Manual, an MCA a user made, or OCM's addon-manager
    // rolling out through `configReferences`) take it at once.
    for c in &clusters {
        if c.placement.is_none() {
            allowed.insert(c.name);
        }
    }

    // Only what an MCA of this add-on owned (the garbage collector does the same; this is for
    // hubs where it lags, and for a work left behind by a foreground deletion).
    let ours = |meta: &ObjectMeta| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "ManagedClusterAddOn" && o.name == settings.addon)
    };

    // Writes per cluster.
    let mut status_actions = Vec::new();
    for mut c in clusters {
        let Some(owner) = mca_owner(c.mca) else {
            continue;
        };
        // Hub permission: the agent ClusterRole bound to the identity this cluster's agent
        // really has. A subject the spoke reported that is anything else is refused, and a
        // binding we made earlier goes.
        let observed = snap.bindings.get(c.name);
        match registration::hub_permission(
            c.name,
            &settings.addon,
            &settings.agent,
            c.token_subject.as_ref(),
            owner.clone(),
        ) {
            Ok(binding) => {
                let binding_ok =
                    observed.is_some_and(|o| registration::binding_matches(o, &binding));
                if !binding_ok {
                    // roleRef cannot change in place (earlier versions bound a Role).
                    if observed.is_some_and(|o| o.role_ref != binding.role_ref) {
                        out.actions.push(Action::DeleteRoleBinding {
                            cluster: c.name.to_owned(),
                        });
                    }
                    out.actions
                        .push(Action::ApplyRoleBinding(Box::new(binding)));
                }
                let (s, r, m) = match snap.errors.get(&(c.name.to_owned(), Step::Permission)) {
                    Some(e) => (
                        "False",
                        addon_condition::reason::SET_PERMISSION_FAILED,
                        format!("Failed to set permission for hub agent: {e}"),
                    ),
                    None if binding_ok => (
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
                if observed.is_some_and(|o| ours(&o.metadata)) {
                    out.actions.push(Action::DeleteRoleBinding {
                        cluster: c.name.to_owned(),
                    });
                }
                out.warnings.push(format!(
                    "cluster {}: no hub permission for the add-on agent: {e}",
                    c.name
                ));
                conditions::set(
                    &mut c.status.conditions,
                    addon_condition::REGISTRATION_APPLIED,
                    "False",
                    INVALID_SUBJECT,
                    &format!("The hub permission of the addon agent is refused: {e}"),
                    now,
                );
            }
        }

        // The work.
        let work_error = snap.errors.get(&(c.name.to_owned(), Step::Work));
        match &c.rendered {
            Ok(rendered) => {
                let config = c.config.as_ref().zip(c.config_hash.as_deref());
                // The cache keeps no spec: render it for the write (the same inputs rendered
                // a moment ago, so this does not fail; if it did, nothing would be written).
                let desired = || {
                    render::render(&settings.template, c.name, c.adc.as_ref())
                        .ok()
                        .map(|full| {
                            Box::new(work_object(settings, c.name, &full, config, owner.clone()))
                        })
                };
                if !c.up_to_date && allowed.contains(c.name) {
                    out.actions.extend(desired().map(Action::ApplyWork));
                    if installs {
                        conditions::set(
                            &mut c.status.conditions,
                            addon_condition::PROGRESSING,
                            "True",
                            addon_condition::reason::PROGRESSING,
                            "progressing... applying the agent's new rendering",
                            now,
                        );
                    }
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
                } else if c
                    .work
                    .is_some_and(|w| !work_matches(settings, w, rendered, &owner))
                {
                    // Same rendering, drifted spec or metadata (an edit by hand, a lost owner):
                    // repair, no rollout.
                    out.actions.extend(desired().map(Action::ApplyWork));
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
        // While the cluster is Unknown the hub's registration controller copies that into
        // `Available`; the work's feedback is stale then (upstream skips the probe too).
        let cluster_unknown = snap
            .clusters
            .get(c.name)
            .and_then(|m| m.status.as_ref())
            .and_then(|s| conditions::find(&s.conditions, cluster_condition::AVAILABLE))
            .is_some_and(|x| x.status == "Unknown");
        if settings.health == HealthMode::Work && !cluster_unknown {
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
    for (ns, w) in &snap.works {
        if !live(ns) && ours(&w.metadata) {
            out.actions.push(Action::DeleteWork {
                cluster: ns.clone(),
            });
        }
    }
    // The agent's Role of earlier versions: the binding now names the ClusterRole.
    for (ns, r) in &snap.roles {
        if ours(&r.metadata) {
            out.actions.push(Action::DeleteRole {
                cluster: ns.clone(),
            });
        }
    }
    for (ns, b) in &snap.bindings {
        if !snap.mcas.contains_key(ns) && ours(&b.metadata) {
            out.actions.push(Action::DeleteRoleBinding {
                cluster: ns.clone(),
            });
        }
    }

    // Certificates.
    let registered = |c: &str| {
        live(c)
            && snap.clusters.get(c).is_some_and(|m| {
                m.metadata.deletion_timestamp.is_none() && m.spec.hub_accepts_client
            })
    };
    for csr in &snap.csrs {
        match registration::check_csr_with(
            csr,
            &settings.addon,
            &settings.agent,
            registered,
            &mut renders.requests,
        ) {
            Ok(()) => {
                if let Some(name) = &csr.metadata.name {
                    out.actions.push(Action::ApproveCsr {
                        name: name.clone(),
                        resource_version: csr.metadata.resource_version.clone(),
                    });
                }
            }
            Err(refusal) => out.refused_csrs.extend(super::csr::refused(csr, refusal)),
        }
    }

    out.actions.extend(status_actions);
    if let Some(c) = cma.filter(|_| installs) {
        let defaults = default_config_references(c, snap);
        let observed = c.status.clone().unwrap_or_default();
        if observed.install_progressions != progressions
            || observed.default_config_references != defaults
        {
            out.actions.push(Action::PatchCmaStatus {
                install_progressions: progressions,
                default_config_references: defaults,
            });
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

/// The observed work carries this rendering and config (by their hashes).
fn work_current(
    observed: &ManifestWork,
    rendered: &Rendered,
    config: Option<(&ConfigKey, &str)>,
) -> bool {
    let config = config.map(|(k, h)| config_spec_hash_annotation(k, h));
    annotation_of(&observed.metadata, RENDERING_HASH) == Some(rendered.hash.as_str())
        && annotation_of(&observed.metadata, annotation::CONFIG_SPEC_HASH) == config.as_deref()
}

/// In memory only, on a watched work: the [`render::spec_hash`] of its spec, taken when it was
/// received, whose manifests are then dropped (they are most of a work's size, and nothing
/// else here reads them).
pub const OBSERVED_SPEC_HASH: &str = "addon.ocm-placement.io/observed-spec-hash";

/// A work as the plan reads it: the hash of its spec under [`OBSERVED_SPEC_HASH`] instead of
/// its manifests (most of its size); manifestConfigs, metadata and status stay.
pub fn slim_work(w: &mut ManifestWork) {
    if let Ok(hash) = render::spec_hash(&w.spec) {
        w.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(OBSERVED_SPEC_HASH.to_owned(), hash);
        w.spec.workload.manifests = Vec::new();
    }
}

/// The observed work is the rendering: same spec (by hash), our label, our owner among its
/// owners.
fn work_matches(
    settings: &Settings,
    observed: &ManifestWork,
    rendered: &Rendered,
    owner: &OwnerReference,
) -> bool {
    let label_ok = observed
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::ADDON_NAME))
        == Some(&settings.addon);
    let owner_ok = observed
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner.uid && o.controller == owner.controller);
    let spec_hash = match annotation_of(&observed.metadata, OBSERVED_SPEC_HASH) {
        Some(h) => Some(h.to_owned()),
        None => render::spec_hash(&observed.spec).ok(),
    };
    label_ok && owner_ok && spec_hash.as_deref() == Some(rendered.spec_hash.as_str())
}

/// `status.defaultconfigReferences`: the CMA's default config with its spec hash.
fn default_config_references(
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

/// The add-on on one cluster: its configuration, rendering, work and rollout status, and the
/// status fields that do not depend on the rollout.
#[allow(clippy::too_many_arguments)]
fn assess<'a>(
    settings: &Settings,
    snap: &'a Snapshot,
    cma: Option<&ClusterManagementAddOn>,
    installs: bool,
    name: &'a str,
    mca: &'a ManagedClusterAddOn,
    placement: Option<usize>,
    now: Timestamp,
    renders: &mut Renders,
) -> Cluster<'a> {
    let mut status = mca.status.clone().unwrap_or_default();
    let adc_gr = ConfigGroupResource {
        group: group::ADDON.to_owned(),
        resource: ADC_RESOURCE.to_owned(),
    };
    status.supported_configs = vec![adc_gr.clone()];
    // The token driver: the agent's own subject stays (upstream `buildRegistrationConfigs`);
    // the spoke wrote it, so it is bound only if it is that cluster's agent (see
    // `registration::hub_permission`).
    let token_subject = status
        .registrations
        .first()
        .map(|r| r.subject.clone())
        .filter(|s| status.kube_client_driver == "token" && !s.user.is_empty());
    status.registrations = registration::registrations(name, &settings.addon, &settings.agent);
    if let (Some(subject), Some(r)) = (&token_subject, status.registrations.first_mut()) {
        r.subject = subject.clone();
    }
    status.health_check.mode = match settings.health {
        HealthMode::Work => "Customized",
        HealthMode::Lease => "Lease",
    }
    .to_owned();

    // The config: chosen here when this manager installs; otherwise the one OCM's
    // addon-manager put in `configReferences` (deployed once it has a spec hash).
    let (config, pending) = if installs {
        (install::cluster_config(cma, placement, mca), false)
    } else {
        let desired = status
            .config_references
            .iter()
            .find(|r| r.config_group_resource == adc_gr)
            .map(|r| r.desired_config.clone());
        match desired {
            None => (None, false),
            Some(None) => (None, true),
            Some(Some(d)) => (
                Some(ConfigKey {
                    namespace: d.config_referent.namespace.clone(),
                    name: d.config_referent.name.clone(),
                }),
                d.spec_hash.is_empty(),
            ),
        }
    };
    let found = config.as_ref().map(|k| (k, snap.configs.get(k)));
    let (spec, config_hash, configured) = match found {
        _ if pending => (
            Err("waiting for the addon-manager to configure the add-on".to_owned()),
            None,
            None,
        ),
        None => (
            Ok(None),
            None,
            Some(("True", CONFIGURED, "Configurations configured".to_owned())),
        ),
        Some((k, None)) => {
            let m = format!("AddOnDeploymentConfig {k} is not found");
            (Err(m.clone()), None, Some(("False", CONFIG_NOT_FOUND, m)))
        }
        Some((k, Some(Config { spec: Err(e), .. }))) => {
            let m = format!("AddOnDeploymentConfig {k} is invalid: {e}");
            (Err(m.clone()), None, Some(("False", CONFIG_INVALID, m)))
        }
        Some((_, Some(Config { spec: Ok(s), hash }))) => (
            Ok(Some(s)),
            Some(hash.clone()),
            Some(("True", CONFIGURED, "Configurations configured".to_owned())),
        ),
    };
    if let (true, Some((s, r, m))) = (installs, configured) {
        conditions::set(
            &mut status.conditions,
            addon_condition::CONFIGURED,
            s,
            r,
            &m,
            now,
        );
    }
    let adc = spec.as_ref().ok().copied().flatten();
    let adc_owned = adc.cloned();
    status.namespace = render::install_namespace(&settings.template, adc);
    let rendered = spec.and_then(|s| renders.get(&settings.template, name, s));

    let work = snap.works.get(name).map(|w| w.as_ref());
    let up_to_date = match (work, rendered.as_ref()) {
        (Some(w), Ok(r)) => work_current(w, r, config.as_ref().zip(config_hash.as_deref())),
        _ => false,
    };

    // Progressing for a cluster already on the current rendering (upstream `addonprogressing`),
    // except that done means rolled out: the agent's Deployment runs this rendering on every
    // replica (the work's RolledOut rule) and, in Work mode, is Available. A rollout of an image
    // that does not start stops at the first group instead of sweeping the fleet.
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
        } else if health::work_ready(w) && health::rolled_out(w) && available {
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
        let mut conds = status.conditions.clone();
        conditions::set(&mut conds, addon_condition::PROGRESSING, s, r, &m, now);
        let cond = conditions::find(&conds, addon_condition::PROGRESSING);
        rollout_status.last_transition = cond.map(|c| c.last_transition_time.0);
        rollout_status.status = match r {
            addon_condition::reason::FAILED => Status::Failed,
            addon_condition::reason::COMPLETED => Status::Succeeded,
            _ => Status::Progressing,
        };
        if installs {
            status.conditions = conds;
        }
    }

    // configReferences (when this manager configures): the config in use, last applied once
    // the cluster completed on it; a different config starts without a last applied one.
    if installs {
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
                    .find(|r| {
                        r.config_group_resource == adc_gr
                            && r.config_referent == desired.config_referent
                    })
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
    }

    Cluster {
        name,
        mca,
        placement,
        config,
        config_hash,
        rendered,
        token_subject,
        adc: adc_owned,
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

/// What the API server would hold after `actions`, in memory: made-up uids, generations that
/// move when a work's spec does, approvals as conditions. For tests and benchmarks that drive
/// [`plan`] to a fixed point without a server.
///
/// # Panics
/// When an action patches an object the snapshot does not hold (a planner bug).
pub fn apply_in_memory(snap: &mut Snapshot, actions: &[Action]) {
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
            Action::PatchCmaStatus {
                install_progressions,
                default_config_references,
            } => {
                let mut c = snap.cma.as_deref().cloned().expect("a cma");
                let st = c.status.get_or_insert_with(Default::default);
                st.install_progressions = install_progressions;
                st.default_config_references = default_config_references;
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
                let new_hash = render::spec_hash(&w.spec).ok();
                let changed = old.is_none_or(|o| {
                    annotation_of(&o.metadata, OBSERVED_SPEC_HASH) != new_hash.as_deref()
                });
                w.metadata.generation = Some(generation + i64::from(changed));
                w.status = old.and_then(|o| o.status.clone());
                slim_work(&mut w);
                snap.works.insert(ns, Arc::new(*w));
            }
            Action::DeleteWork { cluster } => {
                snap.works.remove(&cluster);
            }
            Action::ApproveCsr { name, .. } => {
                let i = snap
                    .csrs
                    .iter()
                    .position(|c| c.metadata.name.as_deref() == Some(name.as_str()))
                    .expect("the csr");
                let mut c = snap.csrs[i].as_ref().clone();
                c.status = serde_json::from_value(
                    serde_json::json!({"conditions": [{"type": "Approved", "status": "True"}]}),
                )
                .ok();
                snap.csrs[i] = Arc::new(c);
            }
        }
    }
}

/// What a work agent reports for `cluster`'s work, in memory: `Applied` (True or False) and
/// `Available` for the current generation, and the Deployment rolled out with one ready replica.
/// For tests and benchmarks, like [`apply_in_memory`].
///
/// # Panics
/// When the snapshot holds no work for `cluster`.
pub fn report_work_in_memory(snap: &mut Snapshot, cluster: &str, applied: bool) {
    let mut w = snap.works[cluster].as_ref().clone();
    let generation = w.metadata.generation;
    let cond = |ty: &str, st: &str| {
        serde_json::json!({"type": ty, "status": st, "reason": "R", "message": format!("{ty} {st}"),
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
    };
    let probe = &w.spec.manifest_configs[0].resource_identifier;
    let (ns, name) = (probe.namespace.clone(), probe.name.clone());
    w.status = serde_json::from_value(serde_json::json!({
        "conditions": [cond("Applied", if applied { "True" } else { "False" }), cond("Available", "True")],
        "resourceStatus": {"manifests": [{
            "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment",
                             "resource": "deployments", "namespace": ns, "name": name},
            "statusFeedback": {"values": [
                {"name": "ReadyReplicas", "fieldValue": {"type": "Integer", "integer": 1}},
                {"name": "Replicas", "fieldValue": {"type": "Integer", "integer": 1}}]},
            "conditions": [cond(super::render::ROLLED_OUT, "True")]}]}
    }))
    .ok();
    snap.works.insert(cluster.into(), Arc::new(w));
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

    fn lifecycle_self() -> Value {
        json!({"addon.open-cluster-management.io/lifecycle": "self"})
    }

    /// Accepted ManagedClusters of these names.
    fn managed(names: &[&str]) -> BTreeMap<String, Arc<ManagedCluster>> {
        names
            .iter()
            .map(|n| {
                let c: ManagedCluster = serde_json::from_value(json!({
                    "apiVersion": "cluster.open-cluster-management.io/v1",
                    "kind": "ManagedCluster",
                    "metadata": {"name": n, "annotations": {
                        "addon.open-cluster-management.io/values": "{}", "other.io/x": "y"}},
                    "spec": {"hubAcceptsClient": true}
                }))
                .expect("a cluster");
                ((*n).to_owned(), Arc::new(c))
            })
            .collect()
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

    /// The placement `p/fleet` with this status.
    fn fleet(status: Value) -> BTreeMap<(String, String), Arc<Placement>> {
        let p: Placement = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "Placement",
            "metadata": {"name": "fleet", "namespace": "p"},
            "spec": {},
            "status": status
        }))
        .expect("a placement");
        BTreeMap::from([(("p".to_owned(), "fleet".to_owned()), Arc::new(p))])
    }

    /// A `PlacementSatisfied` condition as the scheduler writes it.
    fn satisfied_condition(status: &str, reason: &str) -> Value {
        json!({"type": "PlacementSatisfied", "status": status, "reason": reason,
               "message": format!("{reason} message"), "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    /// `p/fleet` scheduled, selecting `n` clusters.
    fn satisfied(n: usize) -> BTreeMap<(String, String), Arc<Placement>> {
        fleet(json!({"numberOfSelectedClusters": n,
                     "conditions": [satisfied_condition("True", "AllDecisionsScheduled")]}))
    }

    fn user_mca(cluster: &str) -> Arc<ManagedClusterAddOn> {
        let mut m = ManagedClusterAddOn::new(ADDON, ManagedClusterAddOnSpec::default());
        m.metadata.namespace = Some(cluster.into());
        m.metadata.uid = Some(format!("mca-{cluster}"));
        Arc::new(m)
    }

    /// Plans and applies until nothing is left to do; returns every action taken.
    fn converge(s: &Settings, snap: &mut Snapshot) -> Vec<Action> {
        let mut all = Vec::new();
        for _ in 0..6 {
            let p = plan(s, snap);
            if p.actions.is_empty() {
                return all;
            }
            apply_in_memory(snap, &p.actions);
            all.extend(p.actions);
        }
        panic!("no fixed point: {:?}", plan(s, snap).actions);
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
            cma: Some(cma(placements(json!({"type": "All"})), lifecycle_self())),
            decisions: vec![decision("d1", None, &["c1", "c2"])],
            placements: satisfied(2),
            clusters: managed(&["c1", "c2"]),
            now: Some(t(0)),
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
        snap.now = Some(t(3600));
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
                now: Some(t(0)),
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
            snap.now = Some(t(60));
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
            snap.now = Some(t(120));
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
            clusters: managed(&["c1", "c2"]),
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

    #[test]
    fn configs_and_failures_become_conditions() {
        let s = settings();
        let mut with_config = user_mca("c1").as_ref().clone();
        with_config.spec.configs = serde_json::from_value(json!([
            {"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "tuned"}
        ]))
        .expect("configs");
        let mut snap = Snapshot {
            cma: Some(cma(json!({"type": "Manual"}), lifecycle_self())),
            mcas: BTreeMap::from([("c1".to_owned(), Arc::new(with_config))]),
            clusters: managed(&["c1"]),
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
        report_work_in_memory(&mut snap, "c1", true);
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
            cma: Some(cma(json!({"type": "Manual"}), lifecycle_self())),
            mcas: BTreeMap::from([("c1".to_owned(), user_mca("c1"))]),
            clusters: managed(&["c1"]),
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
        // Applied and rolled out is done: no Available probe is consulted.
        let mut w = snap.works["c1"].as_ref().clone();
        let deployment = w.spec.manifest_configs[0].resource_identifier.clone();
        w.status = serde_json::from_value(json!({
            "conditions": [
                {"type": "Applied", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
                {"type": "Available", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
            "resourceStatus": {"manifests": [{
                "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments",
                                 "namespace": deployment.namespace, "name": deployment.name},
                "conditions": [{"type": "RolledOut", "status": "True", "reason": "R", "message": "",
                                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}]}
        }))
        .ok();
        snap.works.insert("c1".into(), Arc::new(w.clone()));
        converge(&s, &mut snap);
        assert_eq!(
            cond(&snap, "c1", "Progressing"),
            Some(("False", "Completed"))
        );
        // Not rolled out (the rule evaluated for an older generation): still progressing.
        w.metadata.generation = Some(2);
        snap.works.insert("c1".into(), Arc::new(w));
        converge(&s, &mut snap);
        assert_eq!(
            cond(&snap, "c1", "Progressing"),
            Some(("True", "Progressing"))
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
                lifecycle_self(),
            )),
            decisions: vec![
                decision("d1", Some((0, "canary")), &["c1"]),
                decision("d2", Some((1, "")), &["c2"]),
                decision("d3", Some((2, "")), &["c3"]),
            ],
            clusters: managed(&["c1", "c2", "c3"]),
            now: Some(t(0)),
            ..Snapshot::default()
        };
        converge(&s, &mut snap);
        assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1"]);
        assert_eq!(
            cond(&snap, "c2", "Progressing"),
            Some(("False", "WaitingForCanary"))
        );
        report_work_in_memory(&mut snap, "c1", true);
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
        report_work_in_memory(&mut snap, "c2", true);
        report_work_in_memory(&mut snap, "c3", true);
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
        report_work_in_memory(&mut snap, "c1", false);
        snap.now = Some(t(10_000));
        converge(&s2, &mut snap);
        assert_eq!(cond(&snap, "c1", "Progressing"), Some(("False", "Failed")));
        assert_eq!(
            hash(&snap, "c2"),
            before[1],
            "a failed mandatory group stops the rollout, even past its deadline"
        );
        report_work_in_memory(&mut snap, "c1", true);
        converge(&s2, &mut snap);
        assert_ne!(hash(&snap, "c2"), before[1]);
    }

    #[test]
    fn progressive_takes_the_placements_group_size() {
        let s = settings();
        let placement: Placement = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "Placement",
            "metadata": {"name": "fleet", "namespace": "p"},
            "spec": {"decisionStrategy": {"groupStrategy": {"clustersPerDecisionGroup": 2}}}
        }))
        .expect("a placement");
        let mut snap = Snapshot {
            cma: Some(cma(
                placements(json!({"type": "Progressive"})),
                lifecycle_self(),
            )),
            decisions: vec![decision("d1", Some((0, "")), &["c1", "c2", "c3"])],
            placements: BTreeMap::from([(
                ("p".to_owned(), "fleet".to_owned()),
                Arc::new(placement),
            )]),
            clusters: managed(&["c1", "c2", "c3"]),
            now: Some(t(0)),
            ..Snapshot::default()
        };
        converge(&s, &mut snap);
        assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1", "c2"]);
        report_work_in_memory(&mut snap, "c1", true);
        converge(&s, &mut snap);
        assert_eq!(snap.works.keys().collect::<Vec<_>>(), ["c1", "c2", "c3"]);
        // Without the placement: no limit.
        snap.placements.clear();
        snap.works.clear();
        converge(&s, &mut snap);
        assert_eq!(snap.works.len(), 3);
    }

    #[test]
    fn review_cases() {
        let s = settings();
        let base = || Snapshot {
            cma: Some(cma(placements(json!({"type": "All"})), lifecycle_self())),
            decisions: vec![decision("d1", None, &["c1", "c2"])],
            clusters: managed(&["c1", "c2"]),
            now: Some(t(0)),
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
        let mut snap = Snapshot {
            cma: Some(cma(placements(json!({"type": "All"})), json!({}))),
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
            now: Some(t(0)),
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
                username: Some(format!("system:open-cluster-management:{cluster}:agent1")),
                groups: Some(vec![
                    registration::cluster_group(cluster),
                    super::super::csr::MANAGED_CLUSTERS_GROUP.to_owned(),
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
            now: Some(t(0)),
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
}
