//! What a pod asks of its node: the effective requests the kube-scheduler packs against.
//!
//! The rule is Kubernetes 1.34's `PodRequests` in k8s.io/component-helpers
//! `resource/helpers.go` (v0.34.4), which the scheduler calls from
//! `pkg/scheduler/framework/types.go` `PodInfo.CalculateResource` and converts with
//! `Quantity.MilliValue()` for CPU and `Value()` for everything else (`Resource.Add`):
//!
//! 1. sum the regular containers' requests;
//! 2. walk the init containers in order; a restartable one (`restartPolicy: Always`, a
//!    sidecar) keeps running, so it adds to the sum and to a running sidecar total, and while
//!    it starts the pod needs that sidecar total; a plain init container runs alone next to
//!    the sidecars started before it, so it needs its own request plus that total;
//! 3. take, per resource, the larger of the sum and the largest init-time demand;
//! 4. pod-level `spec.resources.requests` (PodLevelResources, beta and on by default in 1.34)
//!    replace the result for the resources set there, of which only cpu and memory are
//!    supported (and hugepages, which we do not track);
//! 5. add `spec.overhead`.
//!
//! Requests only. Upstream's agent and the question the scores answer ("what could still be
//! scheduled here") count requests; limits never count. A container that sets only limits
//! already carries equal requests, because the API server's defaulting copies them. Nor do we
//! add the scheduler's "non-zero" defaults (100m CPU, 200Mi memory for containers without
//! requests): those only spread pods when *scoring* nodes, not when fitting them.
//!
//! Two deliberate simplifications, both invisible in practice:
//! - the scheduler also reads `status.containerStatuses[].resources` while an in-place resize
//!   is in flight (`UseStatusResources`); we read the spec only, which is where a resize ends;
//! - Go adds the quantities exactly and converts the sum once; we convert each quantity
//!   (rounding up) and add integers, which differs only for sub-millicore CPU fractions.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use ocm_api::quantity::QuantityError;
use ocm_api::score::resource_usage::Resource;
use thiserror::Error;

use super::slim::{SlimContainer, SlimPodSpec};

/// One integer per [`Resource`], each in its resource's unit; indexed by `Resource`, stored
/// in the order of [`Resource::ALL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amounts(pub [i64; 4]);

impl Amounts {
    pub const ZERO: Self = Self([0; 4]);

    pub fn get(&self, resource: Resource) -> i64 {
        self.0[resource.index()]
    }

    pub fn set(&mut self, resource: Resource, amount: i64) {
        self.0[resource.index()] = amount;
    }

    /// Each resource with its amount.
    pub fn iter(&self) -> impl Iterator<Item = (Resource, i64)> + '_ {
        Resource::ALL.into_iter().map(|r| (r, self.get(r)))
    }

    pub fn saturating_add(self, other: Self) -> Self {
        self.zip_with(other, i64::saturating_add)
    }

    pub fn saturating_sub(self, other: Self) -> Self {
        self.zip_with(other, i64::saturating_sub)
    }

    /// The larger amount, per resource.
    pub fn max(self, other: Self) -> Self {
        self.zip_with(other, Ord::max)
    }

    fn zip_with(self, other: Self, f: impl Fn(i64, i64) -> i64) -> Self {
        Self(std::array::from_fn(|i| f(self.0[i], other.0[i])))
    }
}

impl Index<Resource> for Amounts {
    type Output = i64;

    fn index(&self, resource: Resource) -> &i64 {
        &self.0[resource.index()]
    }
}

impl IndexMut<Resource> for Amounts {
    fn index_mut(&mut self, resource: Resource) -> &mut i64 {
        &mut self.0[resource.index()]
    }
}

/// A quantity in a pod that is not a quantity. The API server validates quantities, so this
/// means a broken object or a new syntax; the caller logs it and leaves the pod out.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}{field}: {source}", pod_prefix(.pod.as_deref()))]
pub struct RequestsError {
    /// `namespace/name`, when known (the index fills it in).
    pub pod: Option<String>,
    /// The offending field, e.g. `spec.containers[1].resources.requests[cpu]`.
    pub field: String,
    pub source: QuantityError,
}

fn pod_prefix(pod: Option<&str>) -> String {
    pod.map(|p| format!("pod {p}: ")).unwrap_or_default()
}

/// The resources pod-level `spec.resources` may set (component-helpers
/// `supportedPodLevelResources`, leaving out hugepages, which we do not track).
const POD_LEVEL: [Resource; 2] = [Resource::Cpu, Resource::Memory];

/// A pod's effective requests, per the scheduler's rule (see the module documentation).
pub fn pod_requests(spec: &SlimPodSpec) -> Result<Amounts, RequestsError> {
    let mut requests = Amounts::ZERO;
    for (i, container) in spec.containers.iter().enumerate() {
        let own = container_requests(container, "containers", i)?;
        requests = requests.saturating_add(own);
    }

    // InitContainerUse(i) = Σ sidecars started before i + request of i (a sidecar's own
    // request already is in that running sum once it starts).
    let mut sidecars = Amounts::ZERO;
    let mut init_peak = Amounts::ZERO;
    for (i, container) in spec.init_containers.iter().enumerate() {
        let own = container_requests(container, "initContainers", i)?;
        let demand = if is_sidecar(container) {
            requests = requests.saturating_add(own);
            sidecars = sidecars.saturating_add(own);
            sidecars
        } else {
            own.saturating_add(sidecars)
        };
        init_peak = init_peak.max(demand);
    }
    requests = requests.max(init_peak);

    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        for resource in POD_LEVEL {
            if let Some(q) = pod_level.get(resource.name()) {
                requests[resource] = amount(resource, q, || "spec.resources.requests".into())?;
            }
        }
    }

    if let Some(overhead) = &spec.overhead {
        let overhead = amounts(overhead, || "spec.overhead".into())?;
        requests = requests.saturating_add(overhead);
    }
    Ok(requests)
}

/// A restartable init container (KEP-753 sidecar) keeps running next to the app containers.
fn is_sidecar(container: &SlimContainer) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

fn container_requests(
    container: &SlimContainer,
    list: &str,
    i: usize,
) -> Result<Amounts, RequestsError> {
    match container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
    {
        Some(requests) => amounts(requests, || format!("spec.{list}[{i}].resources.requests")),
        // Missing requests count as zero (no defaulting, see the module documentation).
        None => Ok(Amounts::ZERO),
    }
}

/// The tracked resources of a resource list; absent ones are zero, others are ignored.
/// `field` names the list for errors (built only when one occurs).
fn amounts(
    list: &BTreeMap<String, Quantity>,
    field: impl Fn() -> String,
) -> Result<Amounts, RequestsError> {
    let mut out = Amounts::ZERO;
    for resource in Resource::ALL {
        if let Some(q) = list.get(resource.name()) {
            out[resource] = amount(resource, q, &field)?;
        }
    }
    Ok(out)
}

fn amount(
    resource: Resource,
    q: &Quantity,
    field: impl Fn() -> String,
) -> Result<i64, RequestsError> {
    resource.amount(&q.0).map_err(|source| RequestsError {
        pod: None,
        field: format!("{}[{}]", field(), resource.name()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn spec(v: Value) -> SlimPodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn container(requests: Value) -> Value {
        json!({"name": "c", "resources": {"requests": requests}})
    }

    fn sidecar(requests: Value) -> Value {
        json!({"name": "s", "restartPolicy": "Always", "resources": {"requests": requests}})
    }

    /// (cpu millicores, memory bytes, gpus, tpus)
    fn amounts_of(cpu: i64, memory: i64, gpu: i64, tpu: i64) -> Amounts {
        Amounts([cpu, memory, gpu, tpu])
    }

    const MI: i64 = 1 << 20;

    #[test]
    fn effective_requests() {
        let cases: Vec<(&str, Value, Amounts)> = vec![
            ("no containers", json!({"containers": []}), Amounts::ZERO),
            (
                "plain containers add up",
                json!({"containers": [
                    container(json!({"cpu": "250m", "memory": "64Mi"})),
                    container(json!({"cpu": "1", "memory": "128Mi"})),
                ]}),
                amounts_of(1250, 192 * MI, 0, 0),
            ),
            (
                "missing requests are zero",
                json!({"containers": [
                    {"name": "bare"},
                    {"name": "limits-only", "resources": {"limits": {"cpu": "2"}}},
                    container(json!({"memory": "1Gi"})),
                ]}),
                amounts_of(0, 1024 * MI, 0, 0),
            ),
            (
                "an init container bigger than the containers wins per resource",
                json!({
                    "initContainers": [container(json!({"cpu": "2", "memory": "10Mi"}))],
                    "containers": [container(json!({"cpu": "500m", "memory": "100Mi"}))],
                }),
                amounts_of(2000, 100 * MI, 0, 0),
            ),
            (
                "init containers run one at a time: the largest counts, not the sum",
                json!({
                    "initContainers": [
                        container(json!({"cpu": "1"})),
                        container(json!({"cpu": "1500m"})),
                    ],
                    "containers": [container(json!({"cpu": "100m"}))],
                }),
                amounts_of(1500, 0, 0, 0),
            ),
            (
                "a sidecar before a regular init container runs next to it",
                json!({
                    "initContainers": [
                        sidecar(json!({"cpu": "500m"})),
                        container(json!({"cpu": "1"})),
                    ],
                    "containers": [container(json!({"cpu": "200m"}))],
                }),
                // init time: 500m + 1 = 1500m; running: 200m + 500m = 700m.
                amounts_of(1500, 0, 0, 0),
            ),
            (
                "a sidecar after a regular init container does not",
                json!({
                    "initContainers": [
                        container(json!({"cpu": "1"})),
                        sidecar(json!({"cpu": "500m"})),
                    ],
                    "containers": [container(json!({"cpu": "200m"}))],
                }),
                // init time: max(1, 500m) = 1; running: 200m + 500m = 700m.
                amounts_of(1000, 0, 0, 0),
            ),
            (
                "sidecars add to the running pod",
                json!({
                    "initContainers": [
                        sidecar(json!({"cpu": "300m", "memory": "32Mi"})),
                        sidecar(json!({"cpu": "200m"})),
                    ],
                    "containers": [container(json!({"cpu": "1", "memory": "64Mi"}))],
                }),
                amounts_of(1500, 96 * MI, 0, 0),
            ),
            (
                "overhead is added last",
                json!({
                    "initContainers": [container(json!({"cpu": "2"}))],
                    "containers": [container(json!({"cpu": "1", "memory": "100Mi"}))],
                    "overhead": {"cpu": "250m", "memory": "120Mi"},
                }),
                amounts_of(2250, 220 * MI, 0, 0),
            ),
            (
                "pod-level requests replace cpu and memory only",
                json!({
                    "resources": {"requests": {"cpu": "3", "nvidia.com/gpu": "9"}},
                    "containers": [container(json!({"cpu": "1", "memory": "1Mi", "nvidia.com/gpu": "1"}))],
                    "overhead": {"cpu": "100m"},
                }),
                amounts_of(3100, MI, 1, 0),
            ),
            (
                "pod-level memory below the containers' sum still wins",
                json!({
                    "resources": {"requests": {"memory": "1Mi"}, "limits": {"memory": "2Mi"}},
                    "containers": [container(json!({"cpu": "1", "memory": "100Mi"}))],
                }),
                amounts_of(1000, MI, 0, 0),
            ),
            (
                "GPUs and TPUs count in devices",
                json!({
                    "initContainers": [container(json!({"google.com/tpu": "8"}))],
                    "containers": [
                        container(json!({"nvidia.com/gpu": "2", "google.com/tpu": "4"})),
                        container(json!({"nvidia.com/gpu": "1", "example.com/fpga": "1"})),
                    ],
                }),
                amounts_of(0, 0, 3, 8),
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(pod_requests(&spec(pod)), Ok(want), "{name}");
        }
    }

    #[test]
    fn a_malformed_quantity_names_the_field() {
        let cases = [
            (
                json!({"containers": [container(json!({"cpu": "1"})), container(json!({"memory": "lots"}))]}),
                "spec.containers[1].resources.requests[memory]",
            ),
            (
                json!({"initContainers": [sidecar(json!({"nvidia.com/gpu": "1.2.3"}))], "containers": []}),
                "spec.initContainers[0].resources.requests[nvidia.com/gpu]",
            ),
            (
                json!({"containers": [], "overhead": {"cpu": "x"}}),
                "spec.overhead[cpu]",
            ),
            (
                json!({"containers": [], "resources": {"requests": {"cpu": ""}}}),
                "spec.resources.requests[cpu]",
            ),
        ];
        for (pod, field) in cases {
            let err = pod_requests(&spec(pod)).unwrap_err();
            assert_eq!(err.field, field);
            assert_eq!(err.pod, None);
        }
        // Untracked resources are not even parsed.
        let odd = json!({"containers": [container(json!({"example.com/odd": "??"}))]});
        assert_eq!(pod_requests(&spec(odd)), Ok(Amounts::ZERO));
    }

    #[test]
    fn error_text_names_pod_and_field() {
        let err = RequestsError {
            pod: Some("ns/p".into()),
            field: "spec.overhead[cpu]".into(),
            source: QuantityError("x".into()),
        };
        assert!(
            err.to_string()
                .starts_with("pod ns/p: spec.overhead[cpu]: quantities must match"),
            "{err}"
        );
    }

    #[test]
    fn resources_and_amounts() {
        assert_eq!(
            Resource::ALL.map(Resource::name),
            ["cpu", "memory", "nvidia.com/gpu", "google.com/tpu"]
        );
        for r in Resource::ALL {
            assert_eq!(Resource::from_name(r.name()), Some(r));
        }
        assert_eq!(Resource::from_name("ephemeral-storage"), None);
        assert_eq!(Resource::Cpu.amount("1.5"), Ok(1500));
        assert_eq!(Resource::Memory.amount("1Ki"), Ok(1024));
        assert_eq!(Resource::Gpu.amount("2"), Ok(2));

        let mut a = Amounts::ZERO;
        a[Resource::Gpu] = i64::MAX;
        a.set(Resource::Cpu, -5);
        let b = amounts_of(10, 3, 1, 0);
        assert_eq!(a.saturating_add(b), amounts_of(5, 3, i64::MAX, 0));
        assert_eq!(
            Amounts([i64::MIN, 0, 0, 0]).saturating_sub(b),
            amounts_of(i64::MIN, -3, -1, 0)
        );
        assert_eq!(a.max(b), amounts_of(10, 3, i64::MAX, 0));
        assert_eq!(a.iter().map(|(_, v)| v).sum::<i64>(), i64::MAX - 5);
    }
}
