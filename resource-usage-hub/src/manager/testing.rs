//! Test support, never in a release build: what the API server would do with a plan's writes,
//! in memory, so that unit tests and the planner's benchmark drive passes to a fixed point
//! without a server; and the AddOnDeploymentConfig of the golden works. Built for this crate's
//! tests, and for its benches and integration tests through the `test-support` feature (the
//! crate's dev-dependency on itself turns it on).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfigSpec, ContainerResourceRequirements, CustomizedVariable, ImageMirror,
    NodePlacement,
};

use super::plan::{Action, OBSERVED_SPEC_HASH, Snapshot, slim_work};
use super::render;

/// What the API server would hold after `actions`, in memory: made-up uids, generations that
/// move when a work's spec does, approvals as conditions. For tests and benchmarks that drive
/// [`super::plan::plan`] to a fixed point without a server.
///
/// # Panics
/// When an action patches an object the snapshot does not hold (a planner bug).
pub fn apply_in_memory(snap: &mut Snapshot, actions: &[Action]) {
    for a in actions {
        match a.clone() {
            Action::CreateCma(mut c) => {
                c.metadata.uid = Some("cma-uid".into());
                snap.cma = Some(Arc::new(*c));
            }
            Action::PatchCmaSupportedConfigs(configs) => {
                let mut c = snap.cma.as_deref().cloned().expect("a cma");
                c.spec.supported_configs = configs;
                snap.cma = Some(Arc::new(c));
            }
            Action::PatchCmaStatus {
                install_progressions,
                default_config_references,
            } => {
                let mut c = snap.cma.as_deref().cloned().expect("a cma");
                let st = c.status.get_or_insert_with(Default::default);
                st.install_progressions = install_progressions;
                st.default_config_references = default_config_references;
                snap.cma = Some(Arc::new(c));
            }
            Action::CreateMca(mut m) => {
                let ns = m.metadata.namespace.clone().expect("ns");
                m.metadata.uid = Some(format!("mca-{ns}"));
                snap.mcas.insert(ns, Arc::new(*m));
            }
            Action::DeleteMca { cluster } => {
                snap.mcas.remove(&cluster);
            }
            Action::PatchMcaStatus {
                cluster, status, ..
            } => {
                let mut m = snap.mcas[&cluster].as_ref().clone();
                m.status = Some(*status);
                snap.mcas.insert(cluster, Arc::new(m));
            }
            Action::ApplyRoleBinding(b) => {
                snap.bindings
                    .insert(b.metadata.namespace.clone().expect("ns"), Arc::new(*b));
            }
            Action::DeleteRole { cluster } => {
                snap.roles.remove(&cluster);
            }
            Action::DeleteRoleBinding { cluster } => {
                snap.bindings.remove(&cluster);
            }
            Action::ApplyWork(mut w) => {
                let ns = w.metadata.namespace.clone().expect("ns");
                let old = snap.works.get(&ns);
                let generation = old.and_then(|o| o.metadata.generation).unwrap_or(0);
                let new_hash = render::spec_hash(&w.spec).ok();
                let changed =
                    old.is_none_or(|o| observed_spec_hash(&o.metadata) != new_hash.as_deref());
                w.metadata.generation = Some(generation + i64::from(changed));
                w.status = old.and_then(|o| o.status.clone());
                slim_work(&mut w);
                snap.works.insert(ns, Arc::new(*w));
            }
            Action::DeleteWork { cluster } => {
                snap.works.remove(&cluster);
            }
            Action::ApproveCsr { name, .. } => {
                let i = snap
                    .csrs
                    .iter()
                    .position(|c| c.metadata.name.as_deref() == Some(name.as_str()))
                    .expect("the csr");
                let mut c = snap.csrs[i].as_ref().clone();
                c.status = serde_json::from_value(
                    serde_json::json!({"conditions": [{"type": "Approved", "status": "True"}]}),
                )
                .ok();
                snap.csrs[i] = Arc::new(c);
            }
            Action::PatchDefinitionStatus { name, status, .. } => {
                let i = snap
                    .definitions
                    .iter()
                    .position(|d| d.metadata.name.as_deref() == Some(name.as_str()))
                    .expect("the definition");
                let mut d = snap.definitions[i].as_ref().clone();
                d.status = Some(*status);
                snap.definitions[i] = Arc::new(d);
            }
        }
    }
}

/// What a work agent reports for `cluster`'s work, in memory: `Applied` (True or False) and
/// `Available` for the current generation, and the Deployment rolled out with one ready replica.
/// For tests and benchmarks, like [`apply_in_memory`].
///
/// # Panics
/// When the snapshot holds no work for `cluster`.
pub fn report_work_in_memory(snap: &mut Snapshot, cluster: &str, applied: bool) {
    let mut w = snap.works[cluster].as_ref().clone();
    let generation = w.metadata.generation;
    let cond = |ty: &str, st: &str| {
        serde_json::json!({"type": ty, "status": st, "reason": "R", "message": format!("{ty} {st}"),
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
    };
    let probe = &w.spec.manifest_configs[0].resource_identifier;
    let (ns, name) = (probe.namespace.clone(), probe.name.clone());
    w.status = serde_json::from_value(serde_json::json!({
        "conditions": [cond("Applied", if applied { "True" } else { "False" }), cond("Available", "True")],
        "resourceStatus": {"manifests": [{
            "resourceMeta": {"ordinal": 5, "group": "apps", "version": "v1", "kind": "Deployment",
                             "resource": "deployments", "namespace": ns, "name": name},
            "statusFeedback": {"values": [
                {"name": "ReadyReplicas", "fieldValue": {"type": "Integer", "integer": 1}},
                {"name": "Replicas", "fieldValue": {"type": "Integer", "integer": 1}}]},
            "conditions": [cond(render::ROLLED_OUT, "True")]}]}
    }))
    .ok();
    snap.works.insert(cluster.into(), Arc::new(w));
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

fn observed_spec_hash(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(OBSERVED_SPEC_HASH))
        .map(String::as_str)
}
