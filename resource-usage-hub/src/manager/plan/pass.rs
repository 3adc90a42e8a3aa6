//! One pass, step by step. Each step reads the snapshot and what earlier steps decided, and
//! appends to the plan; the order of the steps is the order of the writes.

use ocm_api::addon::v1alpha1::PlacementStrategy;

use super::cma::{default_config_references, ensure_cma, new_mca, owned_by, progression};

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
pub(super) struct Pass<'a> {
    pub(super) settings: &'a Settings,
    pub(super) snap: &'a Snapshot,
    pub(super) now: Timestamp,
    pub(super) cma: Option<&'a ClusterManagementAddOn>,
    /// `self` lifecycle: this manager installs, configures and rolls out.
    pub(super) installs: bool,
    pub(super) decisions: Vec<&'a PlacementDecision>,
    /// Cluster → index of the placement that installs the add-on there.
    pub(super) selected: BTreeMap<String, usize>,
    /// Cluster → index of the placement whose config it gets (also when OCM's addon-manager
    /// installs: what a `configReferences` entry is checked against).
    pub(super) config_placements: BTreeMap<String, usize>,
    /// The install strategy's placements (none unless this manager installs by placements).
    pub(super) placements: &'a [PlacementStrategy],
    /// Per placement: scheduled, or why its decisions are not trusted.
    pub(super) scheduling: Vec<Result<(), install::Unscheduled>>,
    /// Some placement is not scheduled: nothing is uninstalled.
    pub(super) hold: bool,
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
        // The placement whose config each cluster gets, whoever configures (OCM's
        // addon-manager resolves it the same way): the last one whose decisions hold it.
        let config_placements = cma
            .map(|c| install::selected(c, &decisions))
            .unwrap_or_default();
        let selected = if installs {
            config_placements.clone()
        } else {
            BTreeMap::new()
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
            config_placements,
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
                config_placements: &self.config_placements,
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
        let (all, groups) = self.placement_groups(i, ns, pname, clusters);
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
        self.set_scheduled(i, ns, pname, &mut progression);
        progression
    }

    /// The placement's decision groups: all of them, and those of the clusters it installs on
    /// that have the add-on now (what it rolls out over).
    fn placement_groups(
        &self,
        i: usize,
        ns: &str,
        name: &str,
        clusters: &[Cluster<'a>],
    ) -> (Groups, Groups) {
        let all = Groups::from_decisions(
            self.decisions
                .iter()
                .copied()
                .filter(|d| install::decision_of(d, ns, name)),
        );
        let mut groups = Groups::default();
        for c in all.clusters() {
            let here = self.selected.get(c) == Some(&i) && clusters.iter().any(|x| x.name == c);
            if let (true, Some(k)) = (here, all.group_of(c)) {
                groups.insert(k.clone(), c);
            }
        }
        (all, groups)
    }

    /// The progression's `PlacementScheduled`: whether placement `i` was scheduled, or why not.
    fn set_scheduled(&self, i: usize, ns: &str, name: &str, progression: &mut InstallProgression) {
        let (s, r, m) = match &self.scheduling[i] {
            Ok(()) => (
                "True",
                PLACEMENT_SCHEDULED,
                format!("placement {ns}/{name} is scheduled"),
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
    }

    /// Only what an MCA of this add-on owned (the garbage collector does the same; this is for
    /// hubs where it lags, and for a work left behind by a foreground deletion).
    pub(super) fn ours(&self, meta: &ObjectMeta) -> bool {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "ManagedClusterAddOn" && o.name == self.settings.addon)
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
