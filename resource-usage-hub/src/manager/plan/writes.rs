//! One cluster's writes in a pass: the agent's hub permission, its work, and the conditions
//! that say where each stands (`RegistrationApplied`, `Progressing`, `ManifestApplied`,
//! `Available`).

use super::cma::mca_owner;
use super::pass::Pass;
use super::work::{work_matches, work_object};
use super::*;

impl<'a> Pass<'a> {
    /// One cluster's writes (hub permission, work) and conditions; its status patch, when it
    /// changed, is returned (statuses are written last).
    pub(super) fn cluster_writes(
        &self,
        mut c: Cluster<'a>,
        allowed: &BTreeSet<&str>,
        out: &mut Plan,
    ) -> Option<Action> {
        self.report_config(&mut c, out);
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

    /// The config deployed from the cluster's `configReferences` (kept by the controller), or
    /// the reference refused because the hub does not assign that config to the cluster.
    fn report_config(&self, c: &mut Cluster<'a>, out: &mut Plan) {
        if let Some(d) = c.deployed.take() {
            out.deployed_configs.insert(c.name.to_owned(), d);
        }
        if let Some(refusal @ ConfigRefusal::NotAssigned { .. }) = &c.held {
            out.refused_configs.push(RefusedConfig {
                cluster: c.name.to_owned(),
                addon: c.mca.metadata.name.clone().unwrap_or_default(),
                uid: c
                    .mca
                    .metadata
                    .uid
                    .clone()
                    .unwrap_or_else(|| c.name.to_owned()),
                refusal: refusal.clone(),
            });
        }
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
            // A config reference not deployed: the work stays as it is (the agent keeps the
            // config it was given), and says how it stands.
            Err(_) if c.held.is_some() => {
                self.manifest_applied(c);
                return;
            }
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
}
