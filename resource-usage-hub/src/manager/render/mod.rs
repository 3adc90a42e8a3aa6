//! Renders the resource-usage agent's ManifestWork for one managed cluster: the embedded
//! templates ([`manifests::AGENT`]) with the cluster's values, decorated with its
//! AddOnDeploymentConfig the way upstream's template add-ons are (ocm
//! `pkg/addon/templateagent/decorator.go`). Pure: no client, no clock.
//!
//! Also upstream's config spec hash (`config_spec_hash`), which the manager writes into
//! `configReferences` so that rollouts compare the same numbers upstream does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfigSpec, ContainerResourceRequirements, CustomizedVariable, ImageMirror,
    NodePlacement,
};
use ocm_api::work::v1::{
    ConditionRule, FeedbackRule, Manifest, ManifestConfigOption, ManifestWorkSpec,
    ManifestsTemplate, ResourceIdentifier,
};
use serde_json::{Map, Value};

use super::manifests;

mod decorate;
mod hash;
#[cfg(test)]
mod tests;

pub use decorate::override_image;
use decorate::{Decorations, is_dns_label};
pub use hash::{config_spec_hash, spec_hash};

/// On the work and on the agent's Deployment: the hash of the rendering (see [`Rendered::hash`]).
pub const RENDERING_HASH: &str = "addon.ocm-placement.io/rendering-hash";

/// The manifest condition a CEL rule sets on the agent's Deployment once every replica runs
/// this rendering; what a rollout counts as done (the old pod staying Ready during a rolling
/// update, or a crash-looping new one, is not done).
pub const ROLLED_OUT: &str = "RolledOut";

/// Template values the manager sets; a customized variable of the same name is ignored, as
/// upstream's built-in values win over user values.
const BUILTINS: [&str; 5] = [
    "ADDON_NAME",
    "CLUSTER_NAME",
    "DEFINITIONS",
    "IMAGE",
    "INSTALL_NAMESPACE",
];

/// The first part of a `containerID`, as the AddOnDeploymentConfig CRD allows it.
const CONTAINER_ID_RESOURCES: [&str; 8] = [
    "deployments",
    "daemonsets",
    "statefulsets",
    "replicasets",
    "jobs",
    "cronjobs",
    "pods",
    "*",
];

/// What every cluster's rendering shares (the manager's settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentTemplate {
    pub addon_name: String,
    pub image: String,
    pub default_install_namespace: String,
    /// The agents' ScoreDefinitions file (`definitions.yaml` of the ConfigMap
    /// `<addon>-definitions`), the same for every cluster: set for each pass from the hub's
    /// ScoreDefinitions ([`crate::manager::definitions`]); empty renders `[]`.
    pub definitions: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// Where the agent runs on the managed cluster (for MCA status.namespace).
    pub install_namespace: String,
    /// The ManifestWork spec: workload.manifests (the rendered, decorated objects in template
    /// order) and manifestConfigs (a WellKnownStatus feedback rule for each Deployment and
    /// DaemonSet).
    pub spec: ManifestWorkSpec,
    /// Lowercase hex SHA-256 of the canonical JSON of the spec before the rollout stamp
    /// (object keys sorted): what the rollout compares to decide whether a cluster's work is
    /// current.
    pub hash: String,
    /// [`spec_hash`] of `spec` as it is (stamped): what a stored work's spec is compared by.
    pub spec_hash: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("agent template: {0}")]
    Template(#[from] manifests::RenderError),
    #[error(
        "resourceRequirements containerID {id:?}: want <resource>:<name>:<container>, each part \
         non-empty or *, resource one of deployments, daemonsets, statefulsets, replicasets, \
         jobs, cronjobs, pods"
    )]
    ContainerId { id: String },
    #[error("customizedVariables name {name:?}: must match ^[a-zA-Z_][_a-zA-Z0-9]*$")]
    VariableName { name: String },
    #[error(
        "install namespace {namespace:?}: not a DNS label (1-63 of a-z, 0-9 and -, \
         alphanumeric at both ends)"
    )]
    InstallNamespace { namespace: String },
    #[error("{object}: {field} is not {expected}")]
    Shape {
        object: String,
        field: &'static str,
        expected: &'static str,
    },
    #[error("cannot encode {what} as JSON: {message}")]
    Encode { what: &'static str, message: String },
}

/// The install namespace for `adc` (agentInstallNamespace when non-empty, else the default).
pub fn install_namespace(t: &AgentTemplate, adc: Option<&AddOnDeploymentConfigSpec>) -> String {
    match adc {
        Some(adc) if !adc.agent_install_namespace.is_empty() => adc.agent_install_namespace.clone(),
        _ => t.default_install_namespace.clone(),
    }
}

/// Renders the agent for one cluster with an optional AddOnDeploymentConfig.
pub fn render(
    t: &AgentTemplate,
    cluster: &str,
    adc: Option<&AddOnDeploymentConfigSpec>,
) -> Result<Rendered, RenderError> {
    render_templates(&manifests::AGENT, t, cluster, adc)
}

/// [`render`] over any templates, so that tests can feed shapes the agent's templates lack.
fn render_templates(
    templates: &[(&str, &str)],
    t: &AgentTemplate,
    cluster: &str,
    adc: Option<&AddOnDeploymentConfigSpec>,
) -> Result<Rendered, RenderError> {
    let namespace = install_namespace(t, adc);
    // It goes into YAML text unquoted: a valid label cannot change the document's structure.
    if !is_dns_label(&namespace) {
        return Err(RenderError::InstallNamespace { namespace });
    }
    // No ADC decorates like an empty one: no variables, placement, mirrors or resources.
    let no_adc = AddOnDeploymentConfigSpec::default();
    let decorations = Decorations::new(&namespace, adc.unwrap_or(&no_adc))?;

    let mut values: BTreeMap<&str, String> = decorations
        .variables
        .iter()
        .map(|v| (v.name.as_str(), v.value.clone()))
        .collect();
    values.insert("ADDON_NAME", t.addon_name.clone());
    values.insert("CLUSTER_NAME", cluster.to_owned());
    values.insert("IMAGE", t.image.clone());
    values.insert("INSTALL_NAMESPACE", namespace.clone());
    // A JSON string is a YAML double-quoted scalar: any text stays one value.
    let definitions = if t.definitions.is_empty() {
        "[]\n"
    } else {
        t.definitions.as_str()
    };
    values.insert(
        "DEFINITIONS",
        encode(definitions, "the definitions")?.to_string(),
    );

    let mut objects = manifests::render(templates, &values)?;
    let mut manifest_configs = Vec::new();
    for object in &mut objects {
        decorations.decorate(object)?;
        if let Some(config) = probe_config(object) {
            manifest_configs.push(config);
        }
    }

    let spec = ManifestWorkSpec {
        workload: ManifestsTemplate {
            manifests: objects.into_iter().map(|raw| Manifest { raw }).collect(),
        },
        // None: upstream's default (Foreground); nothing of the agent is to be orphaned.
        delete_option: None,
        manifest_configs,
        executor: None,
    };
    let hash = spec_hash(&spec)?;
    let spec = stamp(spec, &hash);
    let stamped = spec_hash(&spec)?;
    Ok(Rendered {
        install_namespace: namespace,
        spec,
        hash,
        spec_hash: stamped,
    })
}

/// Marks each Deployment with the rendering's hash and asks the work agent for [`ROLLED_OUT`]:
/// the Deployment carries this hash, its controller has seen its generation, and every replica
/// is updated (at least one available). The hash in the rule keeps an evaluation of the old
/// object, before the work agent applied the new one, from counting.
fn stamp(mut spec: ManifestWorkSpec, hash: &str) -> ManifestWorkSpec {
    for m in &mut spec.workload.manifests {
        if m.raw["kind"] == "Deployment"
            && let Some(meta) = m.raw.get_mut("metadata").and_then(Value::as_object_mut)
        {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(RENDERING_HASH.to_owned(), Value::String(hash.to_owned()));
            }
        }
    }
    for c in &mut spec.manifest_configs {
        if c.resource_identifier.resource == "deployments" {
            c.condition_rules = vec![ConditionRule {
                condition: ROLLED_OUT.to_owned(),
                type_: "CEL".to_owned(),
                // Every field the object may lack is guarded (has(), `in`): the work agent
                // reports an unguarded missing field as ConditionRuleExpressionError, and a
                // fresh Deployment has no status fields yet (not rolled out, not an error).
                cel_expressions: vec![
                    format!(
                        "has(object.metadata.annotations) && '{RENDERING_HASH}' in object.metadata.annotations && object.metadata.annotations['{RENDERING_HASH}'] == '{hash}'"
                    ),
                    "has(object.status.observedGeneration) && object.metadata.generation == object.status.observedGeneration".to_owned(),
                    "(has(object.status.updatedReplicas) ? object.status.updatedReplicas : 0) == object.spec.replicas".to_owned(),
                    "(has(object.status.replicas) ? object.status.replicas : 0) == object.spec.replicas".to_owned(),
                    "object.spec.replicas == 0 || (has(object.status.availableReplicas) && object.status.availableReplicas >= 1)".to_owned(),
                ],
                message: "every replica of the agent runs this rendering".to_owned(),
                message_expression: String::new(),
            }];
        }
    }
    spec
}

/// `(containerID resource, name)` of a Deployment or DaemonSet; `None` for anything else.
fn workload(object: &Value) -> Option<(&'static str, String)> {
    if object["apiVersion"].as_str() != Some("apps/v1") {
        return None;
    }
    let resource = match object["kind"].as_str()? {
        "Deployment" => "deployments",
        "DaemonSet" => "daemonsets",
        _ => return None,
    };
    Some((resource, object["metadata"]["name"].as_str()?.to_owned()))
}

/// The health probe upstream's WorkloadAvailability prober asks for: the well-known status of
/// each Deployment and DaemonSet.
fn probe_config(object: &Value) -> Option<ManifestConfigOption> {
    let (resource, name) = workload(object)?;
    Some(ManifestConfigOption {
        resource_identifier: ResourceIdentifier {
            group: "apps".to_owned(),
            resource: resource.to_owned(),
            name,
            namespace: object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        },
        feedback_rules: vec![FeedbackRule {
            type_: "WellKnownStatus".to_owned(),
            json_paths: Vec::new(),
        }],
        update_strategy: None,
        condition_rules: Vec::new(),
        // The CRD's default, written out so the stored work equals the rendered one.
        feedback_scrape_type: "Poll".to_owned(),
    })
}

fn encode<T: serde::Serialize + ?Sized>(
    value: &T,
    what: &'static str,
) -> Result<Value, RenderError> {
    serde_json::to_value(value).map_err(|e| RenderError::Encode {
        what,
        message: e.to_string(),
    })
}

/// Sets `key` to `value`, or removes it when the value is empty (an empty map or list means
/// "none", which the API server stores as absent anyway).
fn set_or_remove(map: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    };
    if empty {
        map.remove(key);
    } else {
        map.insert(key.to_owned(), value);
    }
}
