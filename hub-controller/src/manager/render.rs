//! Renders the resource-usage agent's ManifestWork for one managed cluster: the embedded
//! templates (`score_provider::manifests::AGENT`) with the cluster's values, decorated with its
//! AddOnDeploymentConfig the way upstream's template add-ons are (ocm
//! `pkg/addon/templateagent/decorator.go`). Pure: no client, no clock.
//!
//! Also upstream's config spec hash (`config_spec_hash`), which the manager writes into
//! `configReferences` so that rollouts compare the same numbers upstream does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfigSpec, ContainerResourceRequirements, CustomizedVariable, ImageMirror,
    NodePlacement,
};
use ocm_api::work::v1::{
    ConditionRule, FeedbackRule, Manifest, ManifestConfigOption, ManifestWorkSpec,
    ManifestsTemplate, ResourceIdentifier,
};
use ring::digest::{SHA256, digest};
use score_provider::manifests;
use serde_json::{Map, Value};

/// On the work and on the agent's Deployment: the hash of the rendering (see [`Rendered::hash`]).
pub const RENDERING_HASH: &str = "addon.ocm-placement.io/rendering-hash";

/// The manifest condition a CEL rule sets on the agent's Deployment once every replica runs
/// this rendering; what a rollout counts as done (the old pod staying Ready during a rolling
/// update, or a crash-looping new one, is not done).
pub const ROLLED_OUT: &str = "RolledOut";

/// Template values the manager sets; a customized variable of the same name is ignored, as
/// upstream's built-in values win over user values.
const BUILTINS: [&str; 4] = ["ADDON_NAME", "CLUSTER_NAME", "IMAGE", "INSTALL_NAMESPACE"];

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

/// Lowercase hex SHA-256 of `spec`'s canonical JSON (object keys sorted).
pub fn spec_hash(spec: &ManifestWorkSpec) -> Result<String, RenderError> {
    let value = serde_json::to_value(spec).map_err(|e| RenderError::Encode {
        what: "the ManifestWork spec",
        message: e.to_string(),
    })?;
    let mut text = String::new();
    write_canonical(&value, &mut text);
    Ok(sha256_hex(text.as_bytes()))
}

/// Compact JSON with every object's keys in byte order, whatever map type serde_json was
/// built with (its `preserve_order` feature would otherwise keep insertion order).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Upstream's config spec hash (addon-framework `utils.GetSpecHash`) of a config object as the
/// API server returned it: drop apiVersion, kind, metadata, status; encode the rest as Go's
/// `json.Marshal` does (keys sorted; `<`, `>`, `&`, U+2028 and U+2029 escaped); lowercase hex
/// SHA-256. A non-object hashes as the empty object, as Go's unstructured would hold nothing.
pub fn config_spec_hash(object: &serde_json::Value) -> String {
    let mut config = Map::new();
    if let Some(fields) = object.as_object() {
        for (key, value) in fields {
            if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                config.insert(key.clone(), value.clone());
            }
        }
    }
    let mut text = String::new();
    write_go_json(&Value::Object(config), &mut text);
    sha256_hex(text.as_bytes())
}

/// JSON as Go's `encoding/json` writes a `map[string]interface{}` decoded from JSON.
fn write_go_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Unstructured holds integers as int64 and every other number, larger ones included,
        // as float64.
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() => out.push_str(&go_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Go sorts map keys by their bytes, as `str`'s `Ord` does.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(key, out);
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_go_json(v, out);
                }
            }
            out.push('}');
        }
    }
}

/// A string as Go's `json.Marshal` escapes it (HTML-safe, JSONP-safe).
fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0}'..='\u{1f}' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Go's encoder writes it: like ES6, shortest round-trip digits, exponent form only
/// below 1e-6 or from 1e21, with the exponent unpadded and signed (`1e+21`, `1.5e-7`).
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        }
    } else {
        format!("{f}")
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    digest(&SHA256, bytes)
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

fn is_variable_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Upstream's image override (addon-framework `addonfactory.OverrideImage`): every registry
/// entry is tried against the original image, and the last one that changes it wins (entries
/// do not chain). Trailing `/` of source and mirror are ignored. An empty source matches every
/// image and keeps only its last path segment (`quay.io/a/b:1` → `<mirror>/b:1`); otherwise
/// the source is a plain string prefix of the image, replaced by the mirror (as upstream, so
/// `quay.io/ocm` also matches `quay.io/ocm-x/...`). One deliberate difference: an entry with
/// an empty mirror is ignored, as the API documents, where upstream's code would produce
/// `b:1` or `/b:1`.
pub fn override_image(registries: &[ImageMirror], image: &str) -> String {
    let mut result = image.to_owned();
    for registry in registries {
        if let Some(mirrored) = mirror_image(registry, image)
            && mirrored != image
        {
            result = mirrored;
        }
    }
    result
}

fn mirror_image(registry: &ImageMirror, image: &str) -> Option<String> {
    // Go's strings.TrimSuffix: one `/` at most.
    let mirror = registry
        .mirror
        .strip_suffix('/')
        .unwrap_or(&registry.mirror);
    let source = registry
        .source
        .strip_suffix('/')
        .unwrap_or(&registry.source);
    if mirror.is_empty() {
        return None;
    }
    if source.is_empty() {
        let last = image.rsplit('/').next().unwrap_or(image);
        return Some(format!("{mirror}/{last}"));
    }
    image
        .strip_prefix(source)
        .map(|rest| format!("{mirror}{rest}"))
}

/// One parsed `containerID`: `*` matches any value, anything else only itself. Upstream turns
/// `*` into the regex `.+` and uses the other parts as regexes, so a `.` in a name there also
/// matches any character; literal matching keeps a name from selecting its look-alikes.
#[derive(Debug)]
struct ContainerSelector<'a> {
    resource: &'a str,
    name: &'a str,
    container: &'a str,
    resources: &'a ResourceRequirements,
}

impl<'a> ContainerSelector<'a> {
    fn parse(entry: &'a ContainerResourceRequirements) -> Result<Self, RenderError> {
        let invalid = || RenderError::ContainerId {
            id: entry.container_id.clone(),
        };
        let mut parts = entry.container_id.split(':');
        let (Some(resource), Some(name), Some(container), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        if !CONTAINER_ID_RESOURCES.contains(&resource) || name.is_empty() || container.is_empty() {
            return Err(invalid());
        }
        Ok(Self {
            resource,
            name,
            container,
            resources: &entry.resources,
        })
    }

    fn matches(&self, resource: &str, name: &str, container: &str) -> bool {
        let part = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        part(self.resource, resource) && part(self.name, name) && part(self.container, container)
    }
}

/// The AddOnDeploymentConfig, checked and ready to apply to rendered objects.
struct Decorations<'a> {
    namespace: &'a str,
    /// Customized variables that are not built-ins, in ADC order.
    variables: Vec<&'a CustomizedVariable>,
    /// `None` when node placement is unspecified: the template's stays.
    node_placement: Option<&'a NodePlacement>,
    registries: &'a [ImageMirror],
    resources: Vec<ContainerSelector<'a>>,
}

impl<'a> Decorations<'a> {
    // proxyConfig is not applied: the agent was not asked to go through a proxy.
    fn new(namespace: &'a str, adc: &'a AddOnDeploymentConfigSpec) -> Result<Self, RenderError> {
        let mut variables = Vec::new();
        for variable in &adc.customized_variables {
            if !is_variable_name(&variable.name) {
                return Err(RenderError::VariableName {
                    name: variable.name.clone(),
                });
            }
            if !BUILTINS.contains(&variable.name.as_str()) {
                variables.push(variable);
            }
        }
        let resources = adc
            .resource_requirements
            .iter()
            .map(ContainerSelector::parse)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            namespace,
            variables,
            node_placement: adc.node_placement.as_ref(),
            registries: &adc.registries,
            resources,
        })
    }

    fn decorate(&self, object: &mut Value) -> Result<(), RenderError> {
        self.set_namespace(object)?;
        if let Some((resource, name)) = workload(object) {
            let label = format!("{resource}/{name}");
            let pod = object
                .pointer_mut("/spec/template/spec")
                .and_then(Value::as_object_mut)
                .ok_or(RenderError::Shape {
                    object: label.clone(),
                    field: "spec.template.spec",
                    expected: "an object",
                })?;
            self.decorate_pod(pod, resource, &name, &label)?;
        }
        Ok(())
    }

    /// Upstream's namespace decorator: namespaced objects, ServiceAccount subjects of
    /// (Cluster)RoleBindings and a Namespace object all follow the install namespace, even
    /// when a template hard-codes another.
    fn set_namespace(&self, object: &mut Value) -> Result<(), RenderError> {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let label = format!(
            "{kind}/{}",
            object["metadata"]["name"].as_str().unwrap_or("")
        );
        if let Some(namespace) = object.pointer_mut("/metadata/namespace")
            && namespace.as_str().is_some_and(|ns| !ns.is_empty())
        {
            *namespace = Value::from(self.namespace);
        }
        match kind.as_str() {
            "Namespace" => {
                if let Some(metadata) = object
                    .pointer_mut("/metadata")
                    .and_then(Value::as_object_mut)
                {
                    metadata.insert("name".into(), Value::from(self.namespace));
                }
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let Some(subjects) = object.get_mut("subjects") else {
                    return Ok(());
                };
                let subjects = subjects.as_array_mut().ok_or(RenderError::Shape {
                    object: label,
                    field: "subjects",
                    expected: "a list",
                })?;
                for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
                    if subject.get("kind").and_then(Value::as_str) == Some("ServiceAccount") {
                        subject.insert("namespace".into(), Value::from(self.namespace));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn decorate_pod(
        &self,
        pod: &mut Map<String, Value>,
        resource: &str,
        name: &str,
        label: &str,
    ) -> Result<(), RenderError> {
        if let Some(placement) = self.node_placement {
            set_or_remove(
                pod,
                "nodeSelector",
                encode(&placement.node_selector, "nodeSelector")?,
            );
            set_or_remove(
                pod,
                "tolerations",
                encode(&placement.tolerations, "tolerations")?,
            );
        }
        for field in ["containers", "initContainers"] {
            let Some(containers) = pod.get_mut(field) else {
                continue;
            };
            let containers = containers.as_array_mut().ok_or(RenderError::Shape {
                object: label.to_owned(),
                field: if field == "containers" {
                    "spec.template.spec.containers"
                } else {
                    "spec.template.spec.initContainers"
                },
                expected: "a list",
            })?;
            for container in containers.iter_mut() {
                let container = container.as_object_mut().ok_or(RenderError::Shape {
                    object: label.to_owned(),
                    field: "a container",
                    expected: "an object",
                })?;
                self.override_image(container);
                // Upstream sets env and resources on containers only, not init containers.
                if field == "containers" {
                    self.set_env(container, label)?;
                    self.set_resources(container, resource, name)?;
                }
            }
        }
        Ok(())
    }

    fn override_image(&self, container: &mut Map<String, Value>) {
        if self.registries.is_empty() {
            return;
        }
        if let Some(Value::String(image)) = container.get_mut("image") {
            *image = override_image(self.registries, image);
        }
    }

    /// Each customized variable as an env var: an entry of the same name is replaced in place,
    /// a new one appended, in ADC order (the agent reads its settings from env).
    fn set_env(&self, container: &mut Map<String, Value>, label: &str) -> Result<(), RenderError> {
        if self.variables.is_empty() {
            return Ok(());
        }
        let env = container
            .entry("env")
            .or_insert_with(|| Value::Array(Vec::new()));
        if env.is_null() {
            *env = Value::Array(Vec::new());
        }
        let env = env.as_array_mut().ok_or(RenderError::Shape {
            object: label.to_owned(),
            field: "a container's env",
            expected: "a list",
        })?;
        for variable in &self.variables {
            let entry = serde_json::json!({"name": variable.name, "value": variable.value});
            match env
                .iter_mut()
                .find(|e| e["name"].as_str() == Some(variable.name.as_str()))
            {
                Some(existing) => *existing = entry,
                None => env.push(entry),
            }
        }
        Ok(())
    }

    /// The last matching `resourceRequirements` entry replaces the container's resources.
    fn set_resources(
        &self,
        container: &mut Map<String, Value>,
        resource: &str,
        name: &str,
    ) -> Result<(), RenderError> {
        let container_name = container
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(selector) = self
            .resources
            .iter()
            .rev()
            .find(|s| s.matches(resource, name, container_name))
        else {
            return Ok(());
        };
        let resources = encode(selector.resources, "resources")?;
        container.insert("resources".into(), resources);
        Ok(())
    }
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

/// The AddOnDeploymentConfig the golden file `tests/expected/work-adc.json` is rendered with
/// (cluster `cluster2`): every decoration at once. Unit tests here and the controller's
/// integration tests use it.
pub fn golden_adc() -> AddOnDeploymentConfigSpec {
    let variable = |name: &str, value: &str| CustomizedVariable {
        name: name.to_owned(),
        value: value.to_owned(),
    };
    let quantities = |pairs: &[(&str, &str)]| -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    };
    AddOnDeploymentConfigSpec {
        customized_variables: vec![
            variable("CPU_RANGE", "0:64"),
            variable("REFRESH_PERIOD", "30s"),
        ],
        node_placement: Some(NodePlacement {
            node_selector: [("node-role.kubernetes.io/infra".to_owned(), String::new())].into(),
            tolerations: vec![Toleration {
                key: Some("node-role.kubernetes.io/infra".to_owned()),
                operator: Some("Exists".to_owned()),
                effect: Some("NoSchedule".to_owned()),
                ..Toleration::default()
            }],
        }),
        registries: vec![ImageMirror {
            source: "quay.io/ocm-placement".to_owned(),
            mirror: "registry.example.com/mirror".to_owned(),
        }],
        agent_install_namespace: "custom-agents".to_owned(),
        resource_requirements: vec![ContainerResourceRequirements {
            container_id: "deployments:*:*".to_owned(),
            resources: ResourceRequirements {
                requests: Some(quantities(&[("cpu", "20m"), ("memory", "64Mi")])),
                limits: Some(quantities(&[("memory", "256Mi")])),
                ..ResourceRequirements::default()
            },
        }],
        ..AddOnDeploymentConfigSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use ocm_api::addon::v1alpha1::ProxyConfig;
    use serde_json::json;

    use super::*;

    const DEFAULT_NS: &str = "open-cluster-management-agent-addon";
    const IMAGE: &str = "quay.io/ocm-placement/resource-usage-agent:test";

    /// `(JSON pointer, new value or None to remove)` edits of an expected work.
    type Changes = Vec<(String, Option<Value>)>;
    type Templates<'a> = &'a [(&'a str, &'a str)];
    type Edit = Box<dyn Fn(&mut AddOnDeploymentConfigSpec)>;

    fn template() -> AgentTemplate {
        AgentTemplate {
            addon_name: "resource-usage-collect".into(),
            image: IMAGE.into(),
            default_install_namespace: DEFAULT_NS.into(),
        }
    }

    fn adc(edit: impl FnOnce(&mut AddOnDeploymentConfigSpec)) -> AddOnDeploymentConfigSpec {
        let mut adc = AddOnDeploymentConfigSpec::default();
        edit(&mut adc);
        adc
    }

    fn variable(name: &str, value: &str) -> CustomizedVariable {
        CustomizedVariable {
            name: name.into(),
            value: value.into(),
        }
    }

    fn mirror(source: &str, mirror: &str) -> ImageMirror {
        ImageMirror {
            source: source.into(),
            mirror: mirror.into(),
        }
    }

    fn cpu_request(container_id: &str, cpu: &str) -> ContainerResourceRequirements {
        ContainerResourceRequirements {
            container_id: container_id.into(),
            resources: ResourceRequirements {
                requests: Some([("cpu".to_owned(), Quantity(cpu.into()))].into()),
                ..ResourceRequirements::default()
            },
        }
    }

    /// The work's manifests and manifest configs as one JSON value, to compare whole outcomes.
    fn spec_json(rendered: &Rendered) -> Value {
        serde_json::to_value(&rendered.spec).unwrap()
    }

    /// The spec without the rollout stamp (hash annotation, RolledOut rule), which differs with
    /// every change: what decoration tests compare.
    fn unstamped(rendered: &Rendered) -> Value {
        let mut v = spec_json(rendered);
        for m in v["workload"]["manifests"].as_array_mut().unwrap() {
            let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) else {
                continue;
            };
            if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                a.remove(RENDERING_HASH);
                if a.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
        for c in v["manifestConfigs"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("conditionRules");
        }
        v
    }

    #[test]
    fn the_deployment_is_stamped_for_the_rollout() {
        let r = render(&template(), "c1", None).unwrap();
        let v = spec_json(&r);
        let d = index_of_kind(&v, "Deployment");
        assert_eq!(
            v["workload"]["manifests"][d]["metadata"]["annotations"][RENDERING_HASH],
            json!(r.hash)
        );
        let rule = &v["manifestConfigs"][0]["conditionRules"][0];
        assert_eq!(rule["condition"], json!(ROLLED_OUT));
        assert_eq!(rule["type"], json!("CEL"));
        assert!(
            rule["celExpressions"][0]
                .as_str()
                .unwrap()
                .contains(&r.hash)
        );
        // The hash is of the unstamped rendering: stamping does not change what it names.
        let other = render(&template(), "c2", None).unwrap();
        assert_ne!(r.hash, other.hash);
    }

    /// Sets (or with `None` removes) what `pointer` names; its parent must exist.
    fn set(value: &mut Value, pointer: &str, to: Option<Value>) {
        let (parent, last) = pointer.rsplit_once('/').unwrap();
        match (value.pointer_mut(parent).unwrap(), to) {
            (Value::Object(map), Some(v)) => {
                map.insert(last.into(), v);
            }
            (Value::Object(map), None) => {
                map.remove(last);
            }
            (Value::Array(items), Some(v)) => items[last.parse::<usize>().unwrap()] = v,
            (other, _) => panic!("{pointer}: parent is {other}"),
        }
    }

    fn index_of_kind(spec: &Value, kind: &str) -> usize {
        spec["workload"]["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m["kind"] == kind)
            .unwrap()
    }

    #[test]
    fn renders_the_golden_works() {
        let golden = golden_adc();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/expected");
        let update = std::env::var_os("UPDATE_EXPECTED").is_some_and(|v| v == "1");
        for (file, cluster, adc) in [
            ("work-default.json", "cluster1", None),
            ("work-adc.json", "cluster2", Some(&golden)),
        ] {
            let rendered = render(&template(), cluster, adc).unwrap();
            let path = dir.join(file);
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                let text = serde_json::to_string_pretty(&rendered.spec).unwrap();
                std::fs::write(&path, text + "\n").unwrap();
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}; UPDATE_EXPECTED=1 writes it", path.display()));
            let expected: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                spec_json(&rendered),
                expected,
                "{file} differs; if the change is intended, rerun with UPDATE_EXPECTED=1 and \
                 review the diff"
            );
            // What a client reads back from the file is the same spec, with the same hash.
            let spec: ManifestWorkSpec = serde_json::from_value(expected).unwrap();
            assert_eq!(spec, rendered.spec, "{file}");
        }
    }

    #[test]
    fn golden_works_hold_what_the_agent_needs() {
        let golden = golden_adc();
        for (cluster, adc, namespace, image) in [
            ("cluster1", None, DEFAULT_NS, IMAGE),
            (
                "cluster2",
                Some(&golden),
                "custom-agents",
                "registry.example.com/mirror/resource-usage-agent:test",
            ),
        ] {
            let rendered = render(&template(), cluster, adc).unwrap();
            assert_eq!(rendered.install_namespace, namespace);
            let spec = unstamped(&rendered);
            let manifests = spec["workload"]["manifests"].as_array().unwrap();
            let kinds: Vec<&str> = manifests
                .iter()
                .filter_map(|m| m["kind"].as_str())
                .collect();
            assert_eq!(
                kinds,
                [
                    "ServiceAccount",
                    "ClusterRole",
                    "ClusterRoleBinding",
                    "Role",
                    "RoleBinding",
                    "Deployment"
                ]
            );
            for m in manifests {
                if m["kind"] != "ClusterRole" && m["kind"] != "ClusterRoleBinding" {
                    assert_eq!(m["metadata"]["namespace"], namespace, "{}", m["kind"]);
                }
                if let Some(subjects) = m["subjects"].as_array() {
                    assert!(subjects.iter().all(|s| s["namespace"] == namespace));
                }
            }
            let deployment = &manifests[5];
            let pod = &deployment["spec"]["template"]["spec"];
            let container = &pod["containers"][0];
            assert_eq!(container["image"], image);
            let args: Vec<&str> = container["args"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            for arg in [
                "--hub-kubeconfig=/managed/hub-kubeconfig/kubeconfig".to_owned(),
                format!("--cluster-name={cluster}"),
                format!("--addon-namespace={namespace}"),
                "--addon-name=resource-usage-collect".to_owned(),
            ] {
                assert!(args.contains(&arg.as_str()), "{cluster}: {arg} in {args:?}");
            }
            assert_eq!(
                pod["volumes"],
                json!([{"name": "hub-kubeconfig",
                        "secret": {"secretName": "resource-usage-collect-hub-kubeconfig"}}])
            );
            assert_eq!(
                spec["manifestConfigs"],
                json!([{
                    "resourceIdentifier": {"group": "apps", "resource": "deployments",
                        "name": "resource-usage-collect-agent", "namespace": namespace},
                    "feedbackRules": [{"type": "WellKnownStatus"}],
                    "feedbackScrapeType": "Poll"
                }])
            );
            assert!(spec.get("deleteOption").is_none() && spec.get("executor").is_none());
        }
    }

    #[test]
    fn install_namespace_prefers_a_non_empty_adc_value() {
        let cases = [
            ("no ADC", None, DEFAULT_NS),
            ("ADC defaults", Some(adc(|_| {})), DEFAULT_NS),
            (
                "empty",
                Some(adc(|a| a.agent_install_namespace = String::new())),
                DEFAULT_NS,
            ),
            (
                "set",
                Some(adc(|a| a.agent_install_namespace = "custom".into())),
                "custom",
            ),
        ];
        for (name, adc, want) in cases {
            assert_eq!(install_namespace(&template(), adc.as_ref()), want, "{name}");
            let rendered = render(&template(), "c1", adc.as_ref()).unwrap();
            assert_eq!(rendered.install_namespace, want, "{name}");
        }
    }

    /// Each decoration alone changes the agent's Deployment exactly where expected and nothing
    /// else in the work.
    #[test]
    fn each_decoration_alone() {
        let container = "/spec/template/spec/containers/0";
        let pod = "/spec/template/spec";
        let cases: Vec<(&str, AddOnDeploymentConfigSpec, Changes)> = vec![
            ("an ADC with defaults", adc(|_| {}), vec![]),
            (
                "customized variables become env vars in ADC order",
                adc(|a| {
                    a.customized_variables = vec![
                        variable("REFRESH_PERIOD", "30s"),
                        variable("CPU_RANGE", "0:64"),
                    ]
                }),
                vec![(
                    format!("{container}/env"),
                    Some(json!([{"name": "REFRESH_PERIOD", "value": "30s"},
                                {"name": "CPU_RANGE", "value": "0:64"}])),
                )],
            ),
            (
                "node placement",
                adc(|a| a.node_placement = golden_adc().node_placement),
                vec![
                    (
                        format!("{pod}/nodeSelector"),
                        Some(json!({"node-role.kubernetes.io/infra": ""})),
                    ),
                    (
                        format!("{pod}/tolerations"),
                        Some(json!([{"key": "node-role.kubernetes.io/infra",
                                     "operator": "Exists", "effect": "NoSchedule"}])),
                    ),
                ],
            ),
            (
                "an empty node placement leaves none",
                adc(|a| a.node_placement = Some(NodePlacement::default())),
                vec![],
            ),
            (
                "a matching registry",
                adc(|a| a.registries = golden_adc().registries),
                vec![(
                    format!("{container}/image"),
                    Some(json!(
                        "registry.example.com/mirror/resource-usage-agent:test"
                    )),
                )],
            ),
            (
                "a registry for another source",
                adc(|a| a.registries = vec![mirror("docker.io", "mirror.local")]),
                vec![],
            ),
            (
                "resource requirements replace requests and limits",
                adc(|a| a.resource_requirements = vec![cpu_request("deployments:*:agent", "50m")]),
                vec![(
                    format!("{container}/resources"),
                    Some(json!({"requests": {"cpu": "50m"}})),
                )],
            ),
            (
                "resource requirements for daemonsets only",
                adc(|a| a.resource_requirements = vec![cpu_request("daemonsets:*:*", "50m")]),
                vec![],
            ),
            (
                "proxy config is not applied",
                adc(|a| {
                    a.proxy_config = ProxyConfig {
                        http_proxy: "http://proxy:3128".into(),
                        ..ProxyConfig::default()
                    }
                }),
                vec![],
            ),
        ];
        let baseline = unstamped(&render(&template(), "c1", None).unwrap());
        let deployment = index_of_kind(&baseline, "Deployment");
        for (name, adc, changes) in cases {
            let mut want = baseline.clone();
            for (pointer, to) in changes {
                set(
                    &mut want,
                    &format!("/workload/manifests/{deployment}{pointer}"),
                    to,
                );
            }
            let got = render(&template(), "c1", Some(&adc)).unwrap();
            assert_eq!(unstamped(&got), want, "{name}");
        }
    }

    #[test]
    fn the_adc_namespace_is_the_default_namespace_elsewhere() {
        let custom = adc(|a| a.agent_install_namespace = "custom-agents".into());
        let via_adc = render(&template(), "c1", Some(&custom)).unwrap();
        let via_default = render(
            &AgentTemplate {
                default_install_namespace: "custom-agents".into(),
                ..template()
            },
            "c1",
            None,
        )
        .unwrap();
        assert_eq!(via_adc, via_default);
    }

    /// Templates with shapes the agent's lack: hard-coded namespaces, a User subject, a
    /// DaemonSet, init containers, two containers, existing env and node placement.
    const SHAPES: [(&str, &str); 4] = [
        (
            "binding.yaml",
            "apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: b, namespace: hard-coded}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}
subjects:
- {kind: ServiceAccount, name: sa, namespace: hard-coded}
- {kind: User, name: someone}
",
        ),
        (
            "clusterrole.yaml",
            "{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: c}}",
        ),
        (
            "deployment.yaml",
            "apiVersion: apps/v1
kind: Deployment
metadata: {name: agent-a, namespace: hard-coded}
spec:
  template:
    spec:
      nodeSelector: {old: x}
      tolerations: [{key: old, operator: Exists}]
      initContainers:
      - {name: init, image: 'quay.io/ocm-placement/init:1'}
      containers:
      - name: agent
        image: '{{IMAGE}}'
        env:
        - {name: CPU_RANGE, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: KEEP, value: kept}
        resources: {limits: {cpu: '1'}}
      - {name: sidecar, image: 'docker.io/library/busybox:1'}
",
        ),
        (
            "daemonset.yaml",
            "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent-b, namespace: '{{INSTALL_NAMESPACE}}'}
spec:
  template:
    spec:
      containers:
      - {name: agent, image: '{{IMAGE}}'}
",
        ),
    ];

    fn render_shapes(adc: &AddOnDeploymentConfigSpec) -> Result<Value, RenderError> {
        render_templates(&SHAPES, &template(), "c1", Some(adc)).map(|r| unstamped(&r))
    }

    #[test]
    fn decorations_on_other_shapes() {
        let deployment_pod = "/workload/manifests/2/spec/template/spec";
        let daemonset_pod = "/workload/manifests/3/spec/template/spec";
        let cases: Vec<(&str, AddOnDeploymentConfigSpec, String, Value)> = vec![
            (
                "a hard-coded namespace follows the install namespace",
                adc(|_| {}),
                "/workload/manifests/0/metadata/namespace".into(),
                json!(DEFAULT_NS),
            ),
            (
                "only ServiceAccount subjects get the namespace",
                adc(|a| a.agent_install_namespace = "ns2".into()),
                "/workload/manifests/0/subjects".into(),
                json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "ns2"},
                       {"kind": "User", "name": "someone"}]),
            ),
            (
                "a cluster-scoped object gets no namespace",
                adc(|a| a.agent_install_namespace = "ns2".into()),
                "/workload/manifests/1/metadata".into(),
                json!({"name": "c"}),
            ),
            (
                "a variable replaces a same-named env entry in place, the rest are appended",
                adc(|a| {
                    a.customized_variables =
                        vec![variable("NEW", "n"), variable("CPU_RANGE", "0:8")]
                }),
                format!("{deployment_pod}/containers/0/env"),
                json!([{"name": "CPU_RANGE", "value": "0:8"}, {"name": "KEEP", "value": "kept"},
                       {"name": "NEW", "value": "n"}]),
            ),
            (
                "a variable reaches every container, also one without env",
                adc(|a| a.customized_variables = vec![variable("CPU_RANGE", "0:8")]),
                format!("{deployment_pod}/containers/1/env"),
                json!([{"name": "CPU_RANGE", "value": "0:8"}]),
            ),
            (
                "init containers get no env, as upstream",
                adc(|a| a.customized_variables = vec![variable("CPU_RANGE", "0:8")]),
                format!("{deployment_pod}/initContainers/0"),
                json!({"name": "init", "image": "quay.io/ocm-placement/init:1"}),
            ),
            (
                "DaemonSets get env too",
                adc(|a| a.customized_variables = vec![variable("CPU_RANGE", "0:8")]),
                format!("{daemonset_pod}/containers/0/env"),
                json!([{"name": "CPU_RANGE", "value": "0:8"}]),
            ),
            (
                "node placement replaces the template's; empty tolerations are omitted",
                adc(|a| {
                    a.node_placement = Some(NodePlacement {
                        node_selector: [("new".to_owned(), "y".to_owned())].into(),
                        tolerations: vec![],
                    })
                }),
                deployment_pod.into(),
                json!({
                    "nodeSelector": {"new": "y"},
                    "initContainers": [{"name": "init", "image": "quay.io/ocm-placement/init:1"}],
                    "containers": [
                        {"name": "agent", "image": IMAGE,
                         "env": [{"name": "CPU_RANGE",
                                  "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                 {"name": "KEEP", "value": "kept"}],
                         "resources": {"limits": {"cpu": "1"}}},
                        {"name": "sidecar", "image": "docker.io/library/busybox:1"}
                    ]
                }),
            ),
            (
                "an empty node placement removes the template's",
                adc(|a| a.node_placement = Some(NodePlacement::default())),
                format!("{deployment_pod}/nodeSelector"),
                Value::Null,
            ),
            (
                "an empty node placement removes the template's tolerations",
                adc(|a| a.node_placement = Some(NodePlacement::default())),
                format!("{deployment_pod}/tolerations"),
                Value::Null,
            ),
            (
                "no node placement keeps the template's",
                adc(|_| {}),
                format!("{deployment_pod}/tolerations"),
                json!([{"key": "old", "operator": "Exists"}]),
            ),
            (
                "registries rewrite init containers",
                adc(|a| a.registries = vec![mirror("quay.io/ocm-placement", "m.local")]),
                format!("{deployment_pod}/initContainers/0/image"),
                json!("m.local/init:1"),
            ),
            (
                "registries rewrite DaemonSets",
                adc(|a| a.registries = vec![mirror("", "m.local")]),
                format!("{daemonset_pod}/containers/0/image"),
                json!("m.local/resource-usage-agent:test"),
            ),
            (
                "resources replace the template's limits too",
                adc(|a| a.resource_requirements = vec![cpu_request("*:*:agent", "5m")]),
                format!("{deployment_pod}/containers/0/resources"),
                json!({"requests": {"cpu": "5m"}}),
            ),
            (
                "DaemonSets are probed too",
                adc(|_| {}),
                "/manifestConfigs".into(),
                json!([
                    {"resourceIdentifier": {"group": "apps", "resource": "deployments",
                        "name": "agent-a", "namespace": DEFAULT_NS},
                     "feedbackRules": [{"type": "WellKnownStatus"}], "feedbackScrapeType": "Poll"},
                    {"resourceIdentifier": {"group": "apps", "resource": "daemonsets",
                        "name": "agent-b", "namespace": DEFAULT_NS},
                     "feedbackRules": [{"type": "WellKnownStatus"}], "feedbackScrapeType": "Poll"}
                ]),
            ),
        ];
        for (name, adc, pointer, want) in cases {
            let got = render_shapes(&adc).unwrap();
            let got = got.pointer(&pointer).cloned().unwrap_or(Value::Null);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_variable_is_a_template_value_and_builtins_win() {
        let templates = [(
            "configmap.yaml",
            "apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: '{{INSTALL_NAMESPACE}}'}
data:
  range: '{{CPU_RANGE}}'
  addon: '{{ADDON_NAME}}'
  cluster: '{{CLUSTER_NAME}}'
  image: '{{IMAGE}}'
",
        )];
        let with = |variables: Vec<CustomizedVariable>| {
            let adc = adc(|a| a.customized_variables = variables);
            render_templates(&templates, &template(), "c1", Some(&adc))
                .map(|r| r.spec.workload.manifests[0].raw["data"].clone())
        };
        assert_eq!(
            with(vec![variable("CPU_RANGE", "0:8")]),
            Ok(
                json!({"range": "0:8", "addon": "resource-usage-collect", "cluster": "c1",
                      "image": IMAGE})
            )
        );
        assert_eq!(
            with(vec![
                variable("CPU_RANGE", "0:8"),
                variable("ADDON_NAME", "evil"),
                variable("CLUSTER_NAME", "evil"),
                variable("IMAGE", "evil"),
                variable("INSTALL_NAMESPACE", "evil"),
            ]),
            Ok(
                json!({"range": "0:8", "addon": "resource-usage-collect", "cluster": "c1",
                      "image": IMAGE})
            )
        );
        assert_eq!(
            with(vec![]),
            Err(RenderError::Template(manifests::RenderError::Missing {
                file: "configmap.yaml".into(),
                name: "CPU_RANGE".into()
            }))
        );
    }

    /// A customized variable named like a built-in changes nothing: not the templates, not
    /// the env.
    #[test]
    fn builtins_cannot_be_overridden() {
        let baseline = render(&template(), "c1", None).unwrap();
        for builtin in BUILTINS {
            let adc = adc(|a| a.customized_variables = vec![variable(builtin, "evil")]);
            let got = render(&template(), "c1", Some(&adc)).unwrap();
            assert_eq!(got, baseline, "{builtin}");
        }
    }

    #[test]
    fn image_override_follows_upstream() {
        let agent = "quay.io/ocm-placement/resource-usage-agent:test";
        let digest = "quay.io/ocm-placement/agent@sha256:0123456789abcdef";
        let cases: Vec<(&str, Vec<ImageMirror>, &str, &str)> = vec![
            ("no registries", vec![], agent, agent),
            (
                "source prefix replaced by the mirror",
                vec![mirror(
                    "quay.io/ocm-placement",
                    "registry.example.com/mirror",
                )],
                agent,
                "registry.example.com/mirror/resource-usage-agent:test",
            ),
            (
                "one trailing slash of source and mirror is ignored",
                vec![mirror(
                    "quay.io/ocm-placement/",
                    "registry.example.com/mirror/",
                )],
                agent,
                "registry.example.com/mirror/resource-usage-agent:test",
            ),
            (
                "a registry-only source keeps the repository path",
                vec![mirror("quay.io", "mirror.local:5000")],
                agent,
                "mirror.local:5000/ocm-placement/resource-usage-agent:test",
            ),
            (
                "a non-matching source",
                vec![mirror("docker.io", "mirror.local")],
                agent,
                agent,
            ),
            (
                "the source is a plain string prefix, as upstream",
                vec![mirror("quay.io/ocm", "mirror.local/ocm2")],
                agent,
                "mirror.local/ocm2-placement/resource-usage-agent:test",
            ),
            (
                "an empty source keeps only the last path segment",
                vec![mirror("", "mirror.local/all")],
                agent,
                "mirror.local/all/resource-usage-agent:test",
            ),
            (
                "an empty source and an image without registry host",
                vec![mirror("", "mirror.local")],
                "nginx:1.27",
                "mirror.local/nginx:1.27",
            ),
            (
                "a source does not match an image without registry host",
                vec![mirror("docker.io", "mirror.local")],
                "library/nginx:1.27",
                "library/nginx:1.27",
            ),
            (
                "a digest image with a source",
                vec![mirror("quay.io/ocm-placement", "mirror.local")],
                digest,
                "mirror.local/agent@sha256:0123456789abcdef",
            ),
            (
                "a digest image with an empty source",
                vec![mirror("", "mirror.local")],
                digest,
                "mirror.local/agent@sha256:0123456789abcdef",
            ),
            (
                "the last matching entry wins",
                vec![
                    mirror("quay.io", "first.local"),
                    mirror("quay.io/ocm-placement", "last.local"),
                ],
                agent,
                "last.local/resource-usage-agent:test",
            ),
            (
                "a later non-matching entry does not undo a match",
                vec![
                    mirror("quay.io", "first.local"),
                    mirror("docker.io", "other.local"),
                ],
                agent,
                "first.local/ocm-placement/resource-usage-agent:test",
            ),
            (
                "entries apply to the original image, not to each other's result",
                vec![mirror("quay.io", "a.local"), mirror("a.local", "b.local")],
                agent,
                "a.local/ocm-placement/resource-usage-agent:test",
            ),
            (
                "an empty mirror is ignored, as the API documents",
                vec![mirror("quay.io", ""), mirror("", "/")],
                agent,
                agent,
            ),
        ];
        for (name, registries, image, want) in cases {
            assert_eq!(override_image(&registries, image), want, "{name}");
        }
    }

    #[test]
    fn container_ids_match_with_wildcards_and_the_last_match_wins() {
        // (agent-a/agent, agent-a/sidecar, agent-b/agent) cpu requests; None: the template's.
        type Want = [Option<&'static str>; 3];
        let cases: Vec<(&str, Vec<ContainerResourceRequirements>, Want)> = vec![
            (
                "every deployment container",
                vec![cpu_request("deployments:*:*", "1m")],
                [Some("1m"), Some("1m"), None],
            ),
            (
                "everything",
                vec![cpu_request("*:*:*", "1m")],
                [Some("1m"), Some("1m"), Some("1m")],
            ),
            (
                "a container name anywhere",
                vec![cpu_request("*:*:sidecar", "1m")],
                [None, Some("1m"), None],
            ),
            (
                "one DaemonSet container",
                vec![cpu_request("daemonsets:agent-b:agent", "1m")],
                [None, None, Some("1m")],
            ),
            (
                "a later specific entry beats an earlier wildcard",
                vec![
                    cpu_request("*:*:*", "1m"),
                    cpu_request("deployments:agent-a:agent", "2m"),
                ],
                [Some("2m"), Some("1m"), Some("1m")],
            ),
            (
                "a later wildcard beats an earlier specific entry",
                vec![
                    cpu_request("deployments:agent-a:agent", "2m"),
                    cpu_request("*:*:*", "1m"),
                ],
                [Some("1m"), Some("1m"), Some("1m")],
            ),
            (
                "names match whole, not as prefixes",
                vec![cpu_request("deployments:agent:agent", "1m")],
                [None, None, None],
            ),
            (
                "a resource type the agent does not ship",
                vec![cpu_request("pods:*:*", "1m")],
                [None, None, None],
            ),
        ];
        let pointers = [
            "/workload/manifests/2/spec/template/spec/containers/0/resources",
            "/workload/manifests/2/spec/template/spec/containers/1/resources",
            "/workload/manifests/3/spec/template/spec/containers/0/resources",
        ];
        let template_resources = [Some(json!({"limits": {"cpu": "1"}})), None, None];
        for (name, requirements, want) in cases {
            let got = render_shapes(&adc(|a| a.resource_requirements = requirements)).unwrap();
            for ((pointer, want), original) in pointers.iter().zip(want).zip(&template_resources) {
                let want = match want {
                    Some(cpu) => Some(json!({"requests": {"cpu": cpu}})),
                    None => original.clone(),
                };
                assert_eq!(got.pointer(pointer).cloned(), want, "{name}: {pointer}");
            }
        }
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let bad_id = |id: &str| RenderError::ContainerId { id: id.into() };
        let cases: Vec<(&str, AddOnDeploymentConfigSpec, RenderError)> = vec![
            (
                "two parts",
                adc(|a| a.resource_requirements = vec![cpu_request("deployments:*", "1m")]),
                bad_id("deployments:*"),
            ),
            (
                "four parts",
                adc(|a| a.resource_requirements = vec![cpu_request("deployments:a:b:c", "1m")]),
                bad_id("deployments:a:b:c"),
            ),
            (
                "an unknown resource",
                adc(|a| a.resource_requirements = vec![cpu_request("services:*:*", "1m")]),
                bad_id("services:*:*"),
            ),
            (
                "an empty name",
                adc(|a| a.resource_requirements = vec![cpu_request("deployments::agent", "1m")]),
                bad_id("deployments::agent"),
            ),
            (
                "a bad entry after a good one",
                adc(|a| {
                    a.resource_requirements =
                        vec![cpu_request("*:*:*", "1m"), cpu_request("", "1m")]
                }),
                bad_id(""),
            ),
            (
                "a variable name that is no env name",
                adc(|a| a.customized_variables = vec![variable("1ST", "x")]),
                RenderError::VariableName { name: "1ST".into() },
            ),
            (
                "a namespace that is no DNS label",
                adc(|a| a.agent_install_namespace = "Bad_NS".into()),
                RenderError::InstallNamespace {
                    namespace: "Bad_NS".into(),
                },
            ),
            (
                "a namespace that would change the YAML",
                adc(|a| a.agent_install_namespace = "a\nkind: Secret".into()),
                RenderError::InstallNamespace {
                    namespace: "a\nkind: Secret".into(),
                },
            ),
        ];
        for (name, adc, want) in cases {
            assert_eq!(render(&template(), "c1", Some(&adc)), Err(want), "{name}");
        }

        let templates: Vec<(&str, Templates<'_>, RenderError)> = vec![
            (
                "an unclosed placeholder",
                &[("x.yaml", "kind: {{KIND")],
                RenderError::Template(manifests::RenderError::Unclosed {
                    file: "x.yaml".into(),
                }),
            ),
            (
                "containers that are no list",
                &[(
                    "d.yaml",
                    "{apiVersion: apps/v1, kind: Deployment, metadata: {name: d},
                      spec: {template: {spec: {containers: oops}}}}",
                )],
                RenderError::Shape {
                    object: "deployments/d".into(),
                    field: "spec.template.spec.containers",
                    expected: "a list",
                },
            ),
            (
                "a Deployment without a pod spec",
                &[(
                    "d.yaml",
                    "{apiVersion: apps/v1, kind: Deployment, metadata: {name: d}}",
                )],
                RenderError::Shape {
                    object: "deployments/d".into(),
                    field: "spec.template.spec",
                    expected: "an object",
                },
            ),
        ];
        for (name, templates, want) in templates {
            assert_eq!(
                render_templates(templates, &template(), "c1", None),
                Err(want),
                "{name}"
            );
        }
        let message = RenderError::ContainerId { id: "x".into() }.to_string();
        assert!(message.contains("\"x\"") && message.contains("<resource>:<name>:<container>"));
    }

    #[test]
    fn the_hash_is_stable_and_follows_every_change() {
        let golden = golden_adc();
        let first = render(&template(), "cluster2", Some(&golden)).unwrap();
        let again = render(&template(), "cluster2", Some(&golden.clone())).unwrap();
        assert_eq!(first.hash, again.hash);
        assert_eq!(first.hash.len(), 64);
        assert!(
            first
                .hash
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
        // Not applied, so not part of the work.
        let proxied = adc(|a| {
            *a = golden_adc();
            a.proxy_config.http_proxy = "http://proxy:3128".into();
        });
        assert_eq!(
            render(&template(), "cluster2", Some(&proxied))
                .unwrap()
                .hash,
            first.hash
        );

        let changes: Vec<(&str, Edit)> = vec![
            (
                "a variable value",
                Box::new(|a| a.customized_variables[0].value = "0:32".into()),
            ),
            (
                "another variable",
                Box::new(|a| a.customized_variables.push(variable("X", "1"))),
            ),
            (
                "variable order",
                Box::new(|a| a.customized_variables.reverse()),
            ),
            ("no variables", Box::new(|a| a.customized_variables.clear())),
            (
                "a node selector value",
                Box::new(|a| {
                    if let Some(np) = a.node_placement.as_mut() {
                        np.node_selector
                            .insert("node-role.kubernetes.io/infra".into(), "y".into());
                    }
                }),
            ),
            (
                "no tolerations",
                Box::new(|a| {
                    if let Some(np) = a.node_placement.as_mut() {
                        np.tolerations.clear();
                    }
                }),
            ),
            ("no node placement", Box::new(|a| a.node_placement = None)),
            (
                "a mirror",
                Box::new(|a| a.registries[0].mirror = "other.local".into()),
            ),
            ("no registries", Box::new(|a| a.registries.clear())),
            (
                "a resource value",
                Box::new(|a| {
                    a.resource_requirements[0] = cpu_request("deployments:*:*", "20m");
                }),
            ),
            (
                "no resources",
                Box::new(|a| a.resource_requirements.clear()),
            ),
            (
                "the namespace",
                Box::new(|a| a.agent_install_namespace = "other".into()),
            ),
        ];
        let mut hashes = BTreeSet::from([first.hash.clone()]);
        for (name, change) in &changes {
            let mut adc = golden_adc();
            change(&mut adc);
            let hash = render(&template(), "cluster2", Some(&adc)).unwrap().hash;
            assert!(hashes.insert(hash), "{name}: same hash as another input");
        }
        for (name, cluster, adc) in [
            ("another cluster", "cluster3", Some(&golden)),
            ("no ADC", "cluster2", None),
        ] {
            let hash = render(&template(), cluster, adc).unwrap().hash;
            assert!(hashes.insert(hash), "{name}: same hash as another input");
        }
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let mut text = String::new();
        write_canonical(
            &json!({"b": 1, "a": {"d": [{"z": 1, "y": "<&>"}], "c": null}}),
            &mut text,
        );
        assert_eq!(text, r#"{"a":{"c":null,"d":[{"y":"<&>","z":1}]},"b":1}"#);
    }

    /// The expected hash was produced by Go 1.26: a `main` that `json.Unmarshal`s this very
    /// object into a `map[string]interface{}`, drops apiVersion, kind, metadata and status as
    /// addon-framework's `utils.GetSpecHash` does, `json.Marshal`s the rest and prints
    /// `fmt.Sprintf("%x", sha256.Sum256(...))`.
    #[test]
    fn config_spec_hash_matches_go() {
        let object: Value = serde_json::from_str(
            r#"{
  "apiVersion": "addon.open-cluster-management.io/v1alpha1",
  "kind": "AddOnDeploymentConfig",
  "metadata": {"name": "agent-config", "namespace": "cluster1", "generation": 3, "uid": "0b4c4d0e-1b1c-4c59-9d0a-3f0e5c1d2a77"},
  "spec": {
    "agentInstallNamespace": "custom-agents",
    "customizedVariables": [
      {"name": "CPU_RANGE", "value": "0:64"},
      {"name": "FILTER", "value": "a<b && c>d\u2028\"q\"\\\t"}
    ],
    "nodePlacement": {
      "nodeSelector": {"zone": "b", "kubernetes.io/os": "linux"},
      "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    }
  },
  "status": {"ignored": true}
}"#,
        )
        .unwrap();
        let go = "decc764466ef44d4665975afe388b4bcdf9307b87cff2fad6940566660932bd7";
        assert_eq!(config_spec_hash(&object), go);

        // Only the config fields count.
        let mut other_meta = object.clone();
        set(&mut other_meta, "/metadata/generation", Some(json!(4)));
        set(&mut other_meta, "/status", None);
        set(&mut other_meta, "/kind", None);
        assert_eq!(config_spec_hash(&other_meta), go);
        let mut other_spec = object;
        set(
            &mut other_spec,
            "/spec/agentInstallNamespace",
            Some(json!("x")),
        );
        assert_ne!(config_spec_hash(&other_spec), go);
    }

    /// Expected texts printed by Go 1.26's `json.Marshal` of the same values (a `go run` in
    /// /tmp; `u64::MAX` as the float64 unstructured decodes it to).
    #[test]
    fn go_json_encoding_of_scalars() {
        let cases = [
            (json!(1e21), "1e+21"),
            (json!(1.5e-7), "1.5e-7"),
            (json!(0.000001), "0.000001"),
            (json!(100.0), "100"),
            (json!(2.5), "2.5"),
            (json!(1e20), "100000000000000000000"),
            (json!(123456789.125), "123456789.125"),
            (json!(1e-10), "1e-10"),
            (json!(-3e25), "-3e+25"),
            (json!(300), "300"),
            (json!(-7), "-7"),
            (json!(u64::MAX), "18446744073709552000"),
            (json!("<a&b>"), r#""\u003ca\u0026b\u003e""#),
            (json!("\u{2028}\u{2029}"), r#""\u2028\u2029""#),
            (json!("q\"\\/"), r#""q\"\\/""#),
            (
                json!("\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}"),
                "\"\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\"",
            ),
            (json!("é€😀"), "\"é€😀\""),
            (json!([true, false, null]), "[true,false,null]"),
        ];
        for (value, want) in cases {
            let mut text = String::new();
            write_go_json(&value, &mut text);
            assert_eq!(text, want, "{value}");
        }
    }
}
