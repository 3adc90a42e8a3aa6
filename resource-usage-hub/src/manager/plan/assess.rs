//! One cluster's add-on as a pass finds it: its configuration, rendering, work and rollout
//! status, and the status fields that do not depend on the rollout.

use ocm_api::addon::v1alpha1::Subject;

use super::config_ref;
use super::work::work_current;
use super::*;

/// The add-on on one cluster while planning.
pub(super) struct Cluster<'a> {
    pub(super) name: &'a str,
    pub(super) mca: &'a ManagedClusterAddOn,
    pub(super) placement: Option<usize>,
    pub(super) config: Option<ConfigKey>,
    pub(super) config_hash: Option<String>,
    pub(super) rendered: Result<Arc<Rendered>, String>,
    /// The subject the spoke reported with the token driver (to be checked, never trusted).
    pub(super) token_subject: Option<Subject>,
    /// The config the rendering used (a write renders again with it).
    pub(super) adc: Option<AddOnDeploymentConfigSpec>,
    pub(super) work: Option<&'a ManifestWork>,
    pub(super) up_to_date: bool,
    pub(super) status: ManagedClusterAddOnStatus,
    pub(super) rollout: ClusterStatus,
    /// Why the config the `configReferences` name is not deployed (the work stays as it is).
    pub(super) held: Option<ConfigRefusal>,
    /// The config (and spec hash) deployed from the `configReferences`, under OCM's
    /// addon-manager.
    pub(super) deployed: Option<(ConfigKey, String)>,
}

/// What every cluster's assessment reads.
pub(super) struct Inputs<'a, 'p> {
    pub(super) settings: &'a Settings,
    pub(super) snap: &'a Snapshot,
    pub(super) cma: Option<&'a ClusterManagementAddOn>,
    /// This manager installs (`self` lifecycle).
    pub(super) installs: bool,
    /// Cluster → the install-strategy placement whose config it gets.
    pub(super) config_placements: &'p BTreeMap<String, usize>,
    pub(super) now: Timestamp,
}

/// The config's state for one cluster: its spec (or why there is none to deploy), its hash,
/// and the `Configured` condition when there is one to set.
type Configured<'s> = (
    Result<Option<&'s AddOnDeploymentConfigSpec>, String>,
    Option<String>,
    Option<(&'static str, &'static str, String)>,
);

fn adc_group_resource() -> ConfigGroupResource {
    ConfigGroupResource {
        group: group::ADDON.to_owned(),
        resource: ADC_RESOURCE.to_owned(),
    }
}

pub(super) fn assess<'a>(
    inputs: &Inputs<'a, '_>,
    name: &'a str,
    mca: &'a ManagedClusterAddOn,
    placement: Option<usize>,
    renders: &mut Renders,
) -> Cluster<'a> {
    let (settings, snap) = (inputs.settings, inputs.snap);
    let mut status = mca.status.clone().unwrap_or_default();
    let token_subject = registration_status(settings, name, &mut status);

    let (config, pending, held) = match chosen_config(inputs, name, mca, placement, &status) {
        Chosen::Use(config) => (config, false, None),
        Chosen::Pending => (None, true, None),
        Chosen::Held(refusal) => (None, false, Some(refusal)),
    };
    let (spec, config_hash, configured) = match &held {
        Some(refusal) => (Err(refusal.to_string()), None, None),
        None => configured(snap, config.as_ref(), pending),
    };
    if let (true, Some((s, r, m))) = (inputs.installs, configured) {
        conditions::set(
            &mut status.conditions,
            addon_condition::CONFIGURED,
            s,
            r,
            &m,
            inputs.now,
        );
    }
    match &held {
        Some(refusal) => conditions::set(
            &mut status.conditions,
            CONFIG_REFERENCE_ACCEPTED,
            "False",
            refusal.reason(),
            &refusal.to_string(),
            inputs.now,
        ),
        None => status
            .conditions
            .retain(|c| c.type_ != CONFIG_REFERENCE_ACCEPTED),
    }
    let adc = spec.as_ref().ok().copied().flatten();
    let adc_owned = adc.cloned();
    if held.is_none() {
        // (While a reference is held, the agent keeps running where it runs.)
        status.namespace = render::install_namespace(&settings.template, adc);
    }
    let rendered = spec.and_then(|s| renders.get(&settings.template, name, s));
    // Under OCM's addon-manager: the config this pass deploys from the cluster's reference.
    let deployed = config
        .clone()
        .zip(config_hash.clone())
        .filter(|_| !inputs.installs && rendered.is_ok());

    let work = snap.works.get(name).map(|w| w.as_ref());
    let up_to_date = match (work, rendered.as_ref()) {
        (Some(w), Ok(r)) => work_current(w, r, config.as_ref().zip(config_hash.as_deref())),
        _ => false,
    };
    let rollout = rollout_status(
        inputs,
        name,
        &rendered,
        work.filter(|_| up_to_date),
        &mut status,
    );
    if inputs.installs {
        status.config_references =
            config_references(&status, config.as_ref(), config_hash.as_deref(), &rollout);
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
        rollout,
        held,
        deployed,
    }
}

/// Supported configs, registrations and health-check mode in `status`; returns the subject
/// the spoke reported with the token driver. That subject stays (upstream
/// `buildRegistrationConfigs`); the spoke wrote it, so it is bound only if it is that
/// cluster's agent (see `registration::hub_permission`).
fn registration_status(
    settings: &Settings,
    name: &str,
    status: &mut ManagedClusterAddOnStatus,
) -> Option<Subject> {
    status.supported_configs = vec![adc_group_resource()];
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
    token_subject
}

/// What a cluster deploys.
enum Chosen {
    /// This config (none: the agent's defaults).
    Use(Option<ConfigKey>),
    /// Not yet known: OCM's addon-manager has not hashed the config it named.
    Pending,
    /// The config the `configReferences` name is not deployed (the work stays as it is).
    Held(ConfigRefusal),
}

/// The config: chosen here when this manager installs; otherwise the one OCM's addon-manager
/// put in `configReferences` (deployed once it has a spec hash), if it is one the hub assigns
/// to the cluster ([`config_ref`]: the spoke may write that status too).
fn chosen_config(
    inputs: &Inputs<'_, '_>,
    name: &str,
    mca: &ManagedClusterAddOn,
    placement: Option<usize>,
    status: &ManagedClusterAddOnStatus,
) -> Chosen {
    if inputs.installs {
        return Chosen::Use(install::cluster_config(inputs.cma, placement, mca));
    }
    let adc_gr = adc_group_resource();
    let desired = status
        .config_references
        .iter()
        .find(|r| r.config_group_resource == adc_gr)
        .map(|r| r.desired_config.as_ref());
    match desired {
        None => Chosen::Use(None),
        Some(None) => Chosen::Pending,
        Some(Some(d)) if d.spec_hash.is_empty() => Chosen::Pending,
        Some(Some(d)) => {
            let named = ConfigKey {
                namespace: d.config_referent.namespace.clone(),
                name: d.config_referent.name.clone(),
            };
            let assignment = config_ref::Assignment {
                snap: inputs.snap,
                cma: inputs.cma,
                placement: inputs.config_placements.get(name).copied(),
                cluster: name,
                mca,
            };
            match assignment.check(&named, &d.spec_hash) {
                Ok(()) => Chosen::Use(Some(named)),
                Err(refusal) => Chosen::Held(refusal),
            }
        }
    }
}

/// The config's spec as the snapshot holds it, its hash and the `Configured` condition.
fn configured<'s>(snap: &'s Snapshot, config: Option<&ConfigKey>, pending: bool) -> Configured<'s> {
    let found = config.map(|k| (k, snap.configs.get(k)));
    match found {
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
    }
}

/// The cluster's rollout status. `current` is its work when that already carries the current
/// rendering: Progressing then as upstream's `addonprogressing`, except that done means rolled
/// out: the agent's Deployment runs this rendering on every replica (the work's RolledOut rule)
/// and, in Work mode, is Available. A rollout of an image that does not start stops at the
/// first group instead of sweeping the fleet.
fn rollout_status(
    inputs: &Inputs<'_, '_>,
    name: &str,
    rendered: &Result<Arc<Rendered>, String>,
    current: Option<&ManifestWork>,
    status: &mut ManagedClusterAddOnStatus,
) -> ClusterStatus {
    let settings = inputs.settings;
    let mut rollout_status = ClusterStatus {
        cluster: name.to_owned(),
        group: None,
        status: Status::ToApply,
        last_transition: None,
        recheck_at: None,
    };
    if rendered.is_err() {
        rollout_status.status = Status::Skip;
    } else if let Some(w) = current {
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
        conditions::set(
            &mut conds,
            addon_condition::PROGRESSING,
            s,
            r,
            &m,
            inputs.now,
        );
        let cond = conditions::find(&conds, addon_condition::PROGRESSING);
        rollout_status.last_transition = cond.map(|c| c.last_transition_time.0);
        rollout_status.status = match r {
            addon_condition::reason::FAILED => Status::Failed,
            addon_condition::reason::COMPLETED => Status::Succeeded,
            _ => Status::Progressing,
        };
        if inputs.installs {
            status.conditions = conds;
        }
    }
    rollout_status
}

/// configReferences (when this manager configures): the config in use, last applied once the
/// cluster completed on it; a different config starts without a last applied one.
fn config_references(
    status: &ManagedClusterAddOnStatus,
    config: Option<&ConfigKey>,
    config_hash: Option<&str>,
    rollout: &ClusterStatus,
) -> Vec<ConfigReference> {
    let (Some(k), Some(h)) = (config, config_hash) else {
        return Vec::new();
    };
    let adc_gr = adc_group_resource();
    let desired = ConfigSpecHash {
        config_referent: ConfigReferent {
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        },
        spec_hash: h.to_owned(),
    };
    let previous = status
        .config_references
        .iter()
        .find(|r| r.config_group_resource == adc_gr && r.config_referent == desired.config_referent)
        .and_then(|r| r.last_applied_config.clone());
    let last_applied = if rollout.status == Status::Succeeded {
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
