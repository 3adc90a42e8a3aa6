//! The renderer's tests: golden works, decorations, values and hashes.

use std::collections::BTreeSet;
use std::path::PathBuf;

use ocm_api::addon::v1alpha1::ProxyConfig;
use serde_json::json;

use super::decorate::*;
use super::*;
use crate::manager::testing::golden_adc;
use decorate::render_shapes;
use golden::{index_of_kind, set};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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
        definitions: String::new(),
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

mod decorate;
mod golden;
mod hash;
mod values;
