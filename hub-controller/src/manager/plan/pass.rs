//! One pass, step by step. Each step reads the snapshot and what earlier steps decided, and
//! appends to the plan; the order of the steps is the order of the writes.

use ocm_api::addon::v1alpha1::PlacementStrategy;

use super::cma::{
    default_config_references, ensure_cma, mca_owner, new_mca, owned_by, progression,
};
use super::work::{work_matches, work_object};
use super::*;

pub(super) fn plan(settings: &Settings, snap: &Snapshot, renders: &mut Renders) -> Plan {
    let mut out = Plan::default();
    ensure_cma(settings, snap.cma.as_deref(), &mut out);
    let pass = Pass::new(settings, snap, &mut out);
    pass.install(&mut out);
    let clusters = pass.assess_clusters(renders);
    let (allowed, progressions) = pass.roll_out(&clusters, &mut out);
    let mut status_actions = Vec::new();
    for c in clusters {
        status_actions.extend(pass.cluster_writes(c, &allowed, &mut out));
    }
    pass.clean_up(&mut out);
    pass.approve_csrs(renders, &mut out);
    out.actions.extend(status_actions);
    pass.cma_status(progressions, &mut out);
    out
}

/// What every step of a pass shares: its inputs and the install set.
struct Pass<'a> {
    settings: &'a Settings,
    snap: &'a Snapshot,
    now: Timestamp,
    cma: Option<&'a ClusterManagementAddOn>,
    /// `self` lifecycle: this manager installs, configures and rolls out.
    installs: bool,
    decisions: Vec<&'a PlacementDecision>,
    /// Cluster → index of the placement that installs the add-on there.
    selected: BTreeMap<String, usize>,
    /// The install strategy's placements (none unless this manager installs by placements).
    placements: &'a [PlacementStrategy],
    /// Per placement: scheduled, or why its decisions are not trusted.
    scheduling: Vec<Result<(), install::Unscheduled>>,
    /// Some placement is not scheduled: nothing is uninstalled.
    hold: bool,
}

impl<'a> Pass<'a> {
    fn new(settings: &'a Settings, snap: &'a Snapshot, out: &mut Plan) -> Pass<'a> {
        let cma = snap.cma.as_deref();
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
        let decisions: Vec<&PlacementDecision> =
            snap.decisions.iter().map(|d| d.as_ref()).collect();
        let selected = match cma {
            Some(c) if installs => install::selected(c, &decisions),
            _ => BTreeMap::new(),
        };
        let placements: &[PlacementStrategy] = match cma {
            Some(c) if installs && c.spec.install_strategy.type_ == install::PLACEMENTS => {
                &c.spec.install_strategy.placements
            }
            _ => &[],
        };
        // A placement whose scheduling failed or is unknown says nothing about which clusters
        // should lose the add-on: while any is, nothing is uninstalled, and the add-ons no
        // healthy placement selects are left as they are (`held`).
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
        Pass {
            settings,
            snap,
            now: snap.now,
            cma,
            installs,
            decisions,
            selected,
            placements,
            scheduling,
            hold,
        }
    }

    /// An add-on an unscheduled placement installed, that no scheduled one selects: kept as is.
    fn held(&self, cluster: &str, mca: &ManagedClusterAddOn) -> bool {
        self.hold
            && !self.selected.contains_key(cluster)
            && self.cma.is_some_and(|c| owned_by(&mca.metadata, c))
    }

    /// Install: a ManagedClusterAddOn per selected cluster, none where the CMA's went away
    /// (only under `Placements`: switching to `Manual` leaves the add-ons where they are).
    fn install(&self, out: &mut Plan) {
        let Some(c) = self
            .cma
            .filter(|c| self.installs && c.spec.install_strategy.type_ == install::PLACEMENTS)
        else {
            return;
        };
        let snap = self.snap;
        for cluster in self.selected.keys() {
            let Some(managed) = snap.clusters.get(cluster) else {
                continue;
            };
            if !snap.mcas.contains_key(cluster) && managed.metadata.deletion_timestamp.is_none() {
                out.actions.push(Action::CreateMca(Box::new(new_mca(
                    self.settings,
                    c,
                    cluster,
                    managed,
                ))));
            }
        }
        for (cluster, mca) in &snap.mcas {
            if !self.selected.contains_key(cluster)
                && !self.hold
                && owned_by(&mca.metadata, c)
                && mca.metadata.deletion_timestamp.is_none()
            {
                out.actions.push(Action::DeleteMca {
                    cluster: cluster.clone(),
                });
            }
        }
    }

    /// Per cluster: configuration, rendering, the work's state.
    fn assess_clusters(&self, renders: &mut Renders) -> Vec<Cluster<'a>> {
        let snap = self.snap;
        let mut clusters = Vec::new();
        for (name, mca) in &snap.mcas {
            // Upstream's registration and deploy controllers skip an add-on whose cluster is
            // gone or going.
            let cluster_ok = snap
                .clusters
                .get(name)
                .is_some_and(|c| c.metadata.deletion_timestamp.is_none());
            if mca.metadata.deletion_timestamp.is_some() || !cluster_ok || self.held(name, mca) {
                continue;
            }
            let inputs = assess::Inputs {
                settings: self.settings,
                snap,
                cma: self.cma,
                installs: self.installs,
                now: self.now,
            };
            let placement = self.selected.get(name).copied();
            clusters.push(assess::assess(&inputs, name, mca, placement, renders));
        }
        clusters
    }

    /// Rollout: which clusters may take the current rendering now, and each placement's
    /// install progression. Clusters no placement rolls out to (Manual, an MCA a user made, or
    /// OCM's addon-manager rolling out through `configReferences`) take it at once.
    fn roll_out(
        &self,
        clusters: &[Cluster<'a>],
        out: &mut Plan,
    ) -> (BTreeSet<&'a str>, Vec<InstallProgression>) {
        let mut allowed: BTreeSet<&str> = BTreeSet::new();
        let mut progressions = Vec::new();
        for (i, p) in self.placements.iter().enumerate() {
            progressions.push(self.roll_out_placement(i, p, clusters, &mut allowed, out));
        }
        for c in clusters {
            if c.placement.is_none() {
                allowed.insert(c.name);
            }
        }
        (allowed, progressions)
    }

    /// One placement's rollout: the clusters it allows now (into `allowed`), its progression.
    fn roll_out_placement(
        &self,
        i: usize,
        p: &PlacementStrategy,
        clusters: &[Cluster<'a>],
        allowed: &mut BTreeSet<&'a str>,
        out: &mut Plan,
    ) -> InstallProgression {
        let (ns, pname) = (&p.placement_ref.namespace, &p.placement_ref.name);
        let all = Groups::from_decisions(
            self.decisions
                .iter()
                .copied()
                .filter(|d| install::decision_of(d, ns, pname)),
        );
        let mut groups = Groups::default();
        for c in all.clusters() {
            let here = self.selected.get(c) == Some(&i) && clusters.iter().any(|x| x.name == c);
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
            configured: existing.len(),
            ..Progress::default()
        };
        let per_group = self
            .snap
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
                let result = rollout::rollout(&strategy, &groups, &existing, self.now);
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
                tally(&mut progress, &existing, &result);
                progress.condition()
            }
            Err(e) => {
                let msg = format!("placement {ns}/{pname}: {e}");
                out.warnings.push(msg.clone());
                ("False", addon_condition::reason::FAILED, msg)
            }
        };
        let mut progression = progression(
            self.cma,
            i,
            p.placement_ref.clone(),
            condition,
            progress.completed(),
            self.snap,
            self.now,
        );
        let (s, r, m) = match &self.scheduling[i] {
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
            self.now,
        );
        progression
    }

    /// Only what an MCA of this add-on owned (the garbage collector does the same; this is for
    /// hubs where it lags, and for a work left behind by a foreground deletion).
    fn ours(&self, meta: &ObjectMeta) -> bool {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "ManagedClusterAddOn" && o.name == self.settings.addon)
    }

    /// One cluster's writes (hub permission, work) and conditions; its status patch, when it
    /// changed, is returned (statuses are written last).
    fn cluster_writes(
        &self,
        mut c: Cluster<'a>,
        allowed: &BTreeSet<&str>,
        out: &mut Plan,
    ) -> Option<Action> {
        let owner = mca_owner(c.mca)?;
        self.permission(&mut c, &owner, out);
        self.work(&mut c, &owner, allowed, out);
        self.availability(&mut c);
        (c.mca.status.as_ref() != Some(&c.status)).then(|| Action::PatchMcaStatus {
            cluster: c.name.to_owned(),
            resource_version: c.mca.metadata.resource_version.clone(),
            status: Box::new(c.status),
        })
    }

    /// Hub permission: the agent ClusterRole bound to the identity this cluster's agent really
    /// has. A subject the spoke reported that is anything else is refused, and a binding we
    /// made earlier goes.
    fn permission(&self, c: &mut Cluster<'a>, owner: &OwnerReference, out: &mut Plan) {
        let settings = self.settings;
        let observed = self.snap.bindings.get(c.name);
        let binding = match registration::hub_permission(
            c.name,
            &settings.addon,
            &settings.agent,
            c.token_subject.as_ref(),
            owner.clone(),
        ) {
            Ok(binding) => binding,
            Err(e) => {
                if observed.is_some_and(|o| self.ours(&o.metadata)) {
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
                    self.now,
                );
                return;
            }
        };
        let binding_ok = observed.is_some_and(|o| registration::binding_matches(o, &binding));
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
        let (s, r, m) = match self.snap.errors.get(&(c.name.to_owned(), Step::Permission)) {
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
            self.now,
        );
    }

    /// The work: applied when the rollout allows this cluster, repaired when it drifted;
    /// `Progressing` and `ManifestApplied` say where it stands.
    fn work(
        &self,
        c: &mut Cluster<'a>,
        owner: &OwnerReference,
        allowed: &BTreeSet<&str>,
        out: &mut Plan,
    ) {
        let rendered = match &c.rendered {
            Ok(rendered) => Arc::clone(rendered),
            Err(e) => {
                let m = format!("failed to render the agent: {e}");
                self.set_manifest_applied_failed(c, &m);
                return;
            }
        };
        let settings = self.settings;
        let config = c.config.as_ref().zip(c.config_hash.as_deref());
        // The cache keeps no spec: render it for the write (the same inputs rendered a moment
        // ago, so this does not fail; if it did, nothing would be written).
        let desired = || {
            render::render(&settings.template, c.name, c.adc.as_ref())
                .ok()
                .map(|full| Box::new(work_object(settings, c.name, &full, config, owner.clone())))
        };
        if !c.up_to_date && allowed.contains(c.name) {
            out.actions.extend(desired().map(Action::ApplyWork));
            if self.installs {
                conditions::set(
                    &mut c.status.conditions,
                    addon_condition::PROGRESSING,
                    "True",
                    addon_condition::reason::PROGRESSING,
                    "progressing... applying the agent's new rendering",
                    self.now,
                );
            }
        } else if !c.up_to_date {
            let placement = c
                .placement
                .and_then(|i| self.placements.get(i))
                .map(|p| format!("{}/{}", p.placement_ref.namespace, p.placement_ref.name))
                .unwrap_or_default();
            conditions::set(
                &mut c.status.conditions,
                addon_condition::PROGRESSING,
                "False",
                addon_condition::reason::WAITING_FOR_CANARY,
                &format!("waiting for the rollout of placement {placement} to reach this cluster"),
                self.now,
            );
        } else if c
            .work
            .is_some_and(|w| !work_matches(settings, w, &rendered, owner))
        {
            // Same rendering, drifted spec or metadata (an edit by hand, a lost owner): repair,
            // no rollout.
            out.actions.extend(desired().map(Action::ApplyWork));
        }
        self.manifest_applied(c);
    }

    /// `ManifestApplied`: the last failed write, else what the work agent reports.
    fn manifest_applied(&self, c: &mut Cluster<'a>) {
        let work_error = self.snap.errors.get(&(c.name.to_owned(), Step::Work));
        match (work_error, c.work) {
            (Some(e), _) => {
                let m = format!("failed to apply manifestWork: {e}");
                self.set_manifest_applied_failed(c, &m);
            }
            (None, Some(w)) => match health::manifest_applied(w) {
                Some((s, r, m)) => conditions::set(
                    &mut c.status.conditions,
                    addon_condition::MANIFEST_APPLIED,
                    s,
                    r,
                    &m,
                    self.now,
                ),
                None => c.status.conditions.retain(|x| {
                    x.type_ != addon_condition::MANIFEST_APPLIED || x.status != "False"
                }),
            },
            (None, None) => {}
        }
    }

    fn set_manifest_applied_failed(&self, c: &mut Cluster<'a>, message: &str) {
        conditions::set(
            &mut c.status.conditions,
            addon_condition::MANIFEST_APPLIED,
            "False",
            addon_condition::reason::MANIFEST_WORK_APPLY_FAILED,
            message,
            self.now,
        );
    }

    /// `Available` from the work's feedback (Work health mode). While the cluster is Unknown
    /// the hub's registration controller copies that into `Available`; the work's feedback is
    /// stale then (upstream skips the probe too).
    fn availability(&self, c: &mut Cluster<'a>) {
        let cluster_unknown = self
            .snap
            .clusters
            .get(c.name)
            .and_then(|m| m.status.as_ref())
            .and_then(|s| conditions::find(&s.conditions, cluster_condition::AVAILABLE))
            .is_some_and(|x| x.status == "Unknown");
        if self.settings.health == HealthMode::Work && !cluster_unknown {
            let (s, r, m) = health::available(c.work, &self.settings.addon);
            conditions::set(
                &mut c.status.conditions,
                addon_condition::AVAILABLE,
                s,
                r,
                &m,
                self.now,
            );
        }
    }

    /// The add-on is on `cluster` and not being removed.
    fn live(&self, cluster: &str) -> bool {
        self.snap
            .mcas
            .get(cluster)
            .is_some_and(|m| m.metadata.deletion_timestamp.is_none())
    }

    /// What belongs to clusters that no longer have the add-on, and the agent's Role of earlier
    /// versions (the binding now names the ClusterRole).
    fn clean_up(&self, out: &mut Plan) {
        let snap = self.snap;
        for (ns, w) in &snap.works {
            if !self.live(ns) && self.ours(&w.metadata) {
                out.actions.push(Action::DeleteWork {
                    cluster: ns.clone(),
                });
            }
        }
        for (ns, r) in &snap.roles {
            if self.ours(&r.metadata) {
                out.actions.push(Action::DeleteRole {
                    cluster: ns.clone(),
                });
            }
        }
        for (ns, b) in &snap.bindings {
            if !snap.mcas.contains_key(ns) && self.ours(&b.metadata) {
                out.actions.push(Action::DeleteRoleBinding {
                    cluster: ns.clone(),
                });
            }
        }
    }

    /// Certificates: approved for the add-on's agent on a live, accepted cluster; the rest are
    /// refused, with the reason.
    fn approve_csrs(&self, renders: &mut Renders, out: &mut Plan) {
        let snap = self.snap;
        let registered = |c: &str| {
            self.live(c)
                && snap.clusters.get(c).is_some_and(|m| {
                    m.metadata.deletion_timestamp.is_none() && m.spec.hub_accepts_client
                })
        };
        for csr in &snap.csrs {
            match registration::check_csr_with(
                csr,
                &self.settings.addon,
                &self.settings.agent,
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
                Err(refusal) => out
                    .refused_csrs
                    .extend(registration::csr::refused(csr, refusal)),
            }
        }
    }

    /// The ClusterManagementAddOn's status, when this manager installs and it changed.
    fn cma_status(&self, progressions: Vec<InstallProgression>, out: &mut Plan) {
        let Some(c) = self.cma.filter(|_| self.installs) else {
            return;
        };
        let defaults = default_config_references(c, self.snap);
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
}

/// The progression's counts from the clusters' rollout statuses (a timed-out cluster counts
/// as timed out whatever its status).
fn tally(progress: &mut Progress, existing: &[ClusterStatus], result: &rollout::RolloutResult) {
    let timed_out: BTreeSet<&str> = result
        .timed_out
        .iter()
        .map(|s| s.cluster.as_str())
        .collect();
    for s in existing {
        match s.status {
            _ if timed_out.contains(s.cluster.as_str()) => progress.timed_out += 1,
            Status::Progressing => progress.progressing += 1,
            Status::Succeeded => progress.succeeded += 1,
            Status::Failed => progress.failed += 1,
            Status::TimeOut => progress.timed_out += 1,
            Status::ToApply | Status::Skip => {}
        }
    }
}
