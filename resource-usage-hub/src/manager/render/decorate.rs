//! AddOnDeploymentConfig decorations on the rendered objects (upstream's template add-on
//! decorators): install namespace, variables, node placement, image mirrors, resources.

use super::*;

pub(super) fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

pub(super) fn is_variable_name(s: &str) -> bool {
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

pub(super) fn mirror_image(registry: &ImageMirror, image: &str) -> Option<String> {
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
pub(super) struct ContainerSelector<'a> {
    pub(super) resource: &'a str,
    pub(super) name: &'a str,
    pub(super) container: &'a str,
    pub(super) resources: &'a ResourceRequirements,
}

impl<'a> ContainerSelector<'a> {
    pub(super) fn parse(entry: &'a ContainerResourceRequirements) -> Result<Self, RenderError> {
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

    pub(super) fn matches(&self, resource: &str, name: &str, container: &str) -> bool {
        let part = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        part(self.resource, resource) && part(self.name, name) && part(self.container, container)
    }
}

/// The AddOnDeploymentConfig, checked and ready to apply to rendered objects.
pub(super) struct Decorations<'a> {
    pub(super) namespace: &'a str,
    /// Customized variables that are not built-ins, in ADC order.
    pub(super) variables: Vec<&'a CustomizedVariable>,
    /// `None` when node placement is unspecified: the template's stays.
    pub(super) node_placement: Option<&'a NodePlacement>,
    pub(super) registries: &'a [ImageMirror],
    pub(super) resources: Vec<ContainerSelector<'a>>,
}

impl<'a> Decorations<'a> {
    // proxyConfig is not applied: the agent was not asked to go through a proxy.
    pub(super) fn new(
        namespace: &'a str,
        adc: &'a AddOnDeploymentConfigSpec,
    ) -> Result<Self, RenderError> {
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

    pub(super) fn decorate(&self, object: &mut Value) -> Result<(), RenderError> {
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
    pub(super) fn set_namespace(&self, object: &mut Value) -> Result<(), RenderError> {
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

    pub(super) fn decorate_pod(
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

    pub(super) fn override_image(&self, container: &mut Map<String, Value>) {
        if self.registries.is_empty() {
            return;
        }
        if let Some(Value::String(image)) = container.get_mut("image") {
            *image = override_image(self.registries, image);
        }
    }

    /// Each customized variable as an env var: an entry of the same name is replaced in place,
    /// a new one appended, in ADC order (the agent reads its settings from env).
    pub(super) fn set_env(
        &self,
        container: &mut Map<String, Value>,
        label: &str,
    ) -> Result<(), RenderError> {
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
    pub(super) fn set_resources(
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
