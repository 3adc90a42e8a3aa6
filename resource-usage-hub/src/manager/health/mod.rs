//! What a ManifestWork's status says about the add-on: `ManifestApplied` (addon-framework
//! `agentdeploy`), `Available` by the work's Deployment feedback (the `WorkloadAvailability`
//! prober) and whether the work has settled for a rollout.

use ocm_api::wellknown::{addon_condition, work_condition};
use ocm_api::work::v1::{ManifestWork, StatusFeedbackResult};

use super::render::ROLLED_OUT;

/// `(status, reason, message)` of a condition.
pub type Verdict = (&'static str, &'static str, String);

/// `ManifestApplied` from the work's `Applied` condition; `None` while the work agent has not
/// reported (upstream then drops a stale False and leaves a True alone).
pub fn manifest_applied(work: &ManifestWork) -> Option<Verdict> {
    let applied = find(work, work_condition::APPLIED)?;
    Some(if applied.status == "True" {
        (
            "True",
            addon_condition::reason::ADDON_MANIFEST_APPLIED,
            "manifests of addon are applied successfully".to_owned(),
        )
    } else {
        (
            "False",
            addon_condition::reason::ADDON_MANIFEST_APPLIED_FAILED,
            "failed to apply the manifests of addon".to_owned(),
        )
    })
}

/// `Available` as upstream's work health check with the WorkloadAvailability prober: the
/// work's `Available`, then the Deployments' WellKnownStatus feedback (ready replicas ≥ 1, or
/// no replicas wanted).
pub fn available(work: Option<&ManifestWork>, addon: &str) -> Verdict {
    use addon_condition::reason;
    let Some(work) = work else {
        return (
            "Unknown",
            reason::WORK_NOT_FOUND,
            "Addon manifestWork is not found".to_owned(),
        );
    };
    match find(work, work_condition::AVAILABLE) {
        None => {
            return (
                "Unknown",
                reason::WORK_NOT_APPLIED,
                "Addon manifestWork is not applied yet".to_owned(),
            );
        }
        Some(c) if c.status == "False" => {
            return ("False", reason::WORK_NOT_APPLIED, c.message.clone());
        }
        Some(_) => {}
    }
    let probes = deployment_probes(work);
    let results = probe_results(work, &probes);
    if !probes.is_empty() && results.is_empty() {
        return (
            "Unknown",
            reason::NO_PROBE_RESULT,
            "Probe results are not returned".to_owned(),
        );
    }
    for (ns, name, feedback) in results {
        if let Err(e) = deployment_available(ns, name, feedback) {
            return (
                "False",
                reason::PROBE_UNAVAILABLE,
                format!("Probe addon unavailable with err {e}"),
            );
        }
    }
    (
        "True",
        reason::PROBE_AVAILABLE,
        format!("{addon} add-on is available."),
    )
}

/// The Deployments the work probes (a WellKnownStatus feedback rule): (namespace, name).
fn deployment_probes(work: &ManifestWork) -> Vec<(&str, &str)> {
    work.spec
        .manifest_configs
        .iter()
        .filter(|c| {
            c.resource_identifier.group == "apps"
                && c.resource_identifier.resource == "deployments"
                && c.feedback_rules
                    .iter()
                    .any(|r| r.type_ == "WellKnownStatus")
        })
        .map(|c| {
            (
                c.resource_identifier.namespace.as_str(),
                c.resource_identifier.name.as_str(),
            )
        })
        .collect()
}

/// The feedback the work agent returned for each probed Deployment (those with values).
fn probe_results<'w>(
    work: &'w ManifestWork,
    probes: &[(&'w str, &'w str)],
) -> Vec<(&'w str, &'w str, &'w StatusFeedbackResult)> {
    probes
        .iter()
        .filter_map(|(ns, name)| {
            work.status
                .as_ref()?
                .resource_status
                .manifests
                .iter()
                .find(|m| {
                    m.resource_meta.group == "apps"
                        && m.resource_meta.resource == "deployments"
                        && m.resource_meta.namespace == *ns
                        && m.resource_meta.name == *name
                })
                .map(|m| &m.status_feedbacks)
                .filter(|f| !f.values.is_empty())
                .map(|f| (*ns, *name, f))
        })
        .collect()
}

/// addon-framework `checkWorkloadAvailabilityHealth` for a Deployment.
fn deployment_available(ns: &str, name: &str, f: &StatusFeedbackResult) -> Result<(), String> {
    let value = |n: &str| {
        f.values
            .iter()
            .find(|v| v.name == n)
            .and_then(|v| v.value.integer)
    };
    let ready = value("ReadyReplicas").ok_or("readyReplica is not probed")?;
    let desired = value("Replicas").ok_or("desiredNumberReplicas is not probed")?;
    if desired == 0 || ready >= 1 {
        Ok(())
    } else {
        Err(format!(
            "desiredNumberReplicas is {desired} but readyReplica is {ready} for deployments {ns}/{name}"
        ))
    }
}

/// Upstream's `workIsReady`: `Applied` and `Available` True for the work's current generation.
pub fn work_ready(work: &ManifestWork) -> bool {
    let current = |t: &str| {
        find(work, t).is_some_and(|c| {
            c.status == "True" && c.observed_generation == work.metadata.generation
        })
    };
    current(work_condition::APPLIED) && current(work_condition::AVAILABLE)
}

/// Every Deployment of the work reports [`ROLLED_OUT`] True for the work's current generation
/// (the rule's condition carries the generation it was evaluated for).
pub fn rolled_out(work: &ManifestWork) -> bool {
    let deployments = work
        .spec
        .manifest_configs
        .iter()
        .filter(|c| c.resource_identifier.resource == "deployments")
        .filter(|c| c.condition_rules.iter().any(|r| r.condition == ROLLED_OUT))
        .map(|c| &c.resource_identifier);
    let manifests = work
        .status
        .as_ref()
        .map(|s| s.resource_status.manifests.as_slice())
        .unwrap_or_default();
    deployments.into_iter().all(|id| {
        manifests.iter().any(|m| {
            m.resource_meta.group == id.group
                && m.resource_meta.resource == id.resource
                && m.resource_meta.namespace == id.namespace
                && m.resource_meta.name == id.name
                && ocm_api::conditions::find(&m.conditions, ROLLED_OUT).is_some_and(|c| {
                    c.status == "True" && c.observed_generation == work.metadata.generation
                })
        })
    })
}

/// The work agent failed to apply the current generation: the message of its `Applied`.
pub fn work_failed(work: &ManifestWork) -> Option<String> {
    find(work, work_condition::APPLIED)
        .filter(|c| c.status == "False" && c.observed_generation == work.metadata.generation)
        .map(|c| c.message.clone())
}

fn find<'a>(
    work: &'a ManifestWork,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    work.status
        .as_ref()
        .and_then(|s| ocm_api::conditions::find(&s.conditions, type_))
}

#[cfg(test)]
mod tests;
