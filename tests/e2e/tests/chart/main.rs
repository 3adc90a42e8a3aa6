//! The Helm chart (`charts/ocm-placement`) with the real `helm` (built from its Go module by
//! tests/helm/build.sh): lint, render, the values schema, the CRDs against crdgen, the README's
//! values table, the monitoring objects and the metrics they name (scraped from the running
//! binaries; the rules checked by promtool), and install, upgrade and uninstall into real
//! apiservers. The upgrade from an earlier commit's chart is in `chart_upgrade.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ResourceQuota, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use ocm_api::addon::v1alpha1::ClusterManagementAddOn;
use ocm_api::scoring::ScoreDefinition;
use ocm_api::{ManagedClusterSetBinding, Placement};
use serde_json::{Value, json};
use testenv::{ControlPlane, eventually, helm};

const DEADLINE: Duration = Duration::from_secs(60);

/// The registry the tests point the chart at: it has none by default (no images are
/// published), and renders no component without one.
const REGISTRY: &str = "registry.example.com/ocm-placement";

/// Install, upgrade and uninstall into real apiservers; the metrics the chart names, scraped.
mod install;
/// The README's values table, the rules under promtool, the monitoring objects, the notes.
mod monitoring_and_notes;
/// Lint, render and the values schema (no apiserver).
mod render;

fn chart() -> String {
    e2e::chart::chart_dir().display().to_string()
}

/// `--set image.registry=<REGISTRY>`, which every render of a component needs.
fn registry() -> String {
    format!("image.registry={REGISTRY}")
}

/// The chart rendered for the namespace `hub`, pointed at [`REGISTRY`], with `extra`.
fn render(extra: &[&str]) -> Vec<Value> {
    let registry = registry();
    let mut args = vec!["--set", registry.as_str()];
    args.extend_from_slice(extra);
    e2e::chart::render(&e2e::chart::chart_dir(), "hub", &args).expect("helm template")
}

/// `ci/production-values.yaml`: every component with the production settings.
fn production_values() -> String {
    e2e::chart::chart_dir()
        .join("ci/production-values.yaml")
        .display()
        .to_string()
}

fn deployment<'a>(docs: &'a [Value], name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("Deployment {name}"))
}

fn kinds(docs: &[Value]) -> Vec<(String, String)> {
    let mut k: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    k.sort();
    k
}

fn args_of(docs: &[Value], name: &str) -> Vec<String> {
    deployment(docs, name)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}
