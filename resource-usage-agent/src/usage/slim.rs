//! Pods and Nodes decoded with only the fields the usage index reads. A served pod is about
//! 14 KB of JSON (half of it managedFields, the rest env, probes, volumes...); decoding whole
//! `k8s_openapi` Pods a list page at a time left the agent at ~105 MB RSS with 30,000 pods,
//! all of it allocator residue of the initial list. Fields not named here are skipped by
//! serde without being allocated. The index reads these types as they are.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

/// The metadata the watcher and the index need; `managedFields`, annotations and the rest
/// are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    uid: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
}

/// Into kube's `ObjectMeta`, which the watcher's `kube::Resource` bound wants.
fn slim_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        uid: m.uid,
        labels: m.labels,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// A resource list (`requests`, `overhead`, `allocatable`), as served.
pub type ResourceList = Option<BTreeMap<String, Quantity>>;

/// `resources` of a container or a pod: the requests only (limits never count).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimResources {
    pub requests: ResourceList,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainer {
    pub resources: Option<SlimResources>,
    /// `Always` on an init container makes it a sidecar.
    pub restart_policy: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    pub node_name: Option<String>,
    #[serde(default)]
    pub containers: Vec<SlimContainer>,
    #[serde(default)]
    pub init_containers: Vec<SlimContainer>,
    pub overhead: ResourceList,
    /// Pod-level resources.
    pub resources: Option<SlimResources>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimPodStatus {
    pub phase: Option<String>,
}

/// A Pod with what the usage index reads.
#[derive(Clone, Debug, Deserialize)]
pub struct SlimPod {
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<SlimPodSpec>,
    #[serde(default)]
    pub status: Option<SlimPodStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimNodeSpec {
    pub unschedulable: Option<bool>,
    pub taints: Option<Vec<Taint>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNodeStatus {
    pub allocatable: ResourceList,
}

/// A Node with what the usage index reads (no images, conditions, addresses...).
#[derive(Clone, Debug, Deserialize)]
pub struct SlimNode {
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<SlimNodeSpec>,
    #[serde(default)]
    pub status: Option<SlimNodeStatus>,
}

impl SlimPod {
    /// `(namespace, name)`, what the index and the watch key a pod by (empty when missing,
    /// which the API server never sends).
    pub fn key(&self) -> (&str, &str) {
        let m = &self.metadata;
        (
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        )
    }
}

impl SlimNode {
    /// The node's name (empty when missing, which the API server never sends).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

macro_rules! core_v1 {
    ($t:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("")
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

core_v1!(SlimPod, "Pod", "pods", k8s_openapi::NamespaceResourceScope);
core_v1!(SlimNode, "Node", "nodes", k8s_openapi::ClusterResourceScope);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::requests::pod_requests;
    use k8s_openapi::api::core::v1::Pod;
    use ocm_api::score::resource_usage::Resource;

    #[test]
    fn a_slim_pod_requests_what_the_full_pod_does() {
        let json = serde_json::json!({
            "metadata": { "name": "p", "namespace": "n", "resourceVersion": "7",
                "managedFields": [{ "manager": "x", "fieldsV1": { "f:spec": {} } }],
                "annotations": { "a": "b" }, "deletionTimestamp": "2026-01-01T00:00:00Z" },
            "spec": {
                "nodeName": "node-1",
                "initContainers": [
                    { "name": "s", "restartPolicy": "Always", "resources": { "requests": { "cpu": "500m" } } },
                    { "name": "i", "resources": { "requests": { "cpu": "2" } }, "env": [{ "name": "X", "value": "1" }] },
                ],
                "containers": [{ "name": "a", "image": "x", "resources": { "requests": { "cpu": "1", "memory": "1Gi" }, "limits": { "cpu": "2" } } }],
                "overhead": { "cpu": "250m" },
                "volumes": [{ "name": "v", "emptyDir": {} }],
            },
            "status": { "phase": "Running", "podIP": "10.0.0.1" },
        });
        // The full Pod, as k8s-openapi reads and writes it, decodes to the same slim pod.
        let full: Pod = serde_json::from_value(json.clone()).expect("a pod");
        let from_full: SlimPod =
            serde_json::from_value(serde_json::to_value(&full).expect("JSON")).expect("a slim pod");
        let slim: SlimPod = serde_json::from_value(json).expect("a slim pod");
        assert_eq!(slim.key(), ("n", "p"));
        let (a, b) = (
            pod_requests(from_full.spec.as_ref().expect("spec")).expect("requests"),
            pod_requests(slim.spec.as_ref().expect("spec")).expect("requests"),
        );
        assert_eq!(a, b);
        assert_eq!(b.get(Resource::Cpu), 2750);
        assert_eq!(
            slim.spec.and_then(|s| s.node_name).as_deref(),
            Some("node-1")
        );
        assert!(slim.metadata.deletion_timestamp.is_some());
        assert!(slim.metadata.managed_fields.is_none());
        assert_eq!(
            slim.status.and_then(|s| s.phase).as_deref(),
            Some("Running")
        );
    }

    #[test]
    fn a_slim_node_keeps_labels_taints_and_allocatable() {
        let json = serde_json::json!({
            "metadata": { "name": "n1", "labels": { "pool": "a" } },
            "spec": { "unschedulable": true, "taints": [{ "key": "k", "effect": "NoSchedule" }] },
            "status": { "allocatable": { "cpu": "4" }, "images": [{ "names": ["x"] }] },
        });
        let n: SlimNode = serde_json::from_value(json).expect("a slim node");
        assert_eq!(n.name(), "n1");
        assert_eq!(
            n.metadata
                .labels
                .and_then(|l| l.get("pool").cloned())
                .as_deref(),
            Some("a")
        );
        let spec = n.spec.expect("spec");
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(spec.taints.map(|t| t.len()), Some(1));
        assert!(
            n.status
                .and_then(|s| s.allocatable)
                .is_some_and(|a| a.contains_key("cpu"))
        );
    }
}
