//! The resource-usage scores, from free amounts: upstream's names (node scope: the freest
//! single node; cluster scope: the sum over counted nodes) plus `cpuAvailable` and
//! `memAvailable`, the names addon-contrib's first agent wrote (equal to cluster scope), each
//! normalised between absolute bounds in real units. A resource the cluster does not have gets
//! no item: placements then read 0 for it, not -100 (absent is not full; upstream cannot tell
//! the two apart).
//!
//! Here, not in the agent, because the hub scorer rates clusters with the same formula: both
//! use it without the other's sources (the agent's watches and host probe, the scorer's
//! queries).

use std::collections::BTreeMap;

use super::{BoundsError, Normaliser};
use crate::quantity::{self, QuantityError};
use crate::wellknown::score::names;

/// The resources the resource-usage provider scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// In millicores.
    Cpu,
    /// In bytes.
    Memory,
    /// NVIDIA GPUs, in devices.
    Gpu,
    /// Google TPUs, in devices.
    Tpu,
}

impl Resource {
    /// Every resource, in declaration order (so `r as usize` is `r`'s position here).
    pub const ALL: [Resource; 4] = [Self::Cpu, Self::Memory, Self::Gpu, Self::Tpu];

    /// The Kubernetes resource name (the key in `requests` and `allocatable`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Gpu => "nvidia.com/gpu",
            Self::Tpu => "google.com/tpu",
        }
    }

    /// The unit amounts of this resource are counted in.
    pub const fn unit(self) -> &'static str {
        match self {
            Self::Cpu => "millicores",
            Self::Memory => "bytes",
            Self::Gpu | Self::Tpu => "devices",
        }
    }

    /// The resource called `name` in Kubernetes, if it is one we track.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// A quantity of this resource in its [unit](Self::unit), converted like the scheduler
    /// does (`MilliValue()` for CPU, `Value()` otherwise: exact, rounded up).
    pub fn amount(self, quantity: &str) -> Result<i64, QuantityError> {
        match self {
            Self::Cpu => quantity::milli_value(quantity),
            Self::Memory | Self::Gpu | Self::Tpu => quantity::value(quantity),
        }
    }

    /// The position of this resource in [`Resource::ALL`], for arrays indexed by resource.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Free amounts in natural units (cores, bytes, devices).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Free([Option<Scoped>; 4]);

/// One resource's free amount at both scopes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scoped {
    /// Σ allocatable − Σ requests over the counted nodes (may be negative when overcommitted).
    pub cluster: f64,
    /// The largest free amount on one counted node; `None` when no counted node has the
    /// resource (all such nodes cordoned): scored as nothing free.
    pub node: Option<f64>,
}

impl Free {
    /// `resource` is present with these free amounts.
    pub fn set(&mut self, resource: Resource, cluster: f64, node: Option<f64>) {
        self.0[resource.index()] = Some(Scoped { cluster, node });
    }

    /// `None` when the cluster does not have `resource`.
    pub fn get(&self, resource: Resource) -> Option<Scoped> {
        self.0[resource.index()]
    }
}

/// Normalisation bounds per resource and scope, in natural units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    cluster: [Normaliser; 4],
    node: [Normaliser; 4],
}

/// Default bounds `(min, max)` per resource, in natural units. CPU, GPU and TPU keep
/// upstream's (0–100 cores, 0–20 devices: the same free amount scores as upstream's agent
/// does). Memory is 0–512 GiB: upstream's memory bound is in the wrong unit (anything above
/// 1 MiB free scores 100), and 512 GiB keeps upstream's CPU range's ratio of about 5 GiB per
/// core.
pub const DEFAULT_BOUNDS: [(f64, f64); 4] = [
    (0.0, 100.0),
    (0.0, 512.0 * 1024.0 * 1024.0 * 1024.0),
    (0.0, 20.0),
    (0.0, 20.0),
];

impl Default for Bounds {
    fn default() -> Self {
        // The constants are valid bounds.
        let n =
            |(min, max): (f64, f64)| Normaliser::new(min, max).unwrap_or_else(|_| unreachable!());
        let all = DEFAULT_BOUNDS.map(n);
        Self {
            cluster: all,
            node: all,
        }
    }
}

impl Bounds {
    /// Sets the bounds of `resource` at both scopes ([`Bounds::set_node`] then overrides the
    /// node scope).
    pub fn set(&mut self, resource: Resource, min: f64, max: f64) -> Result<(), BoundsError> {
        let n = Normaliser::new(min, max)?;
        self.cluster[resource.index()] = n;
        self.node[resource.index()] = n;
        Ok(())
    }

    /// Sets the bounds of `resource` at node scope only.
    pub fn set_node(&mut self, resource: Resource, min: f64, max: f64) -> Result<(), BoundsError> {
        self.node[resource.index()] = Normaliser::new(min, max)?;
        Ok(())
    }

    pub fn cluster(&self, resource: Resource) -> &Normaliser {
        &self.cluster[resource.index()]
    }

    pub fn node(&self, resource: Resource) -> &Normaliser {
        &self.node[resource.index()]
    }
}

/// The score names of `resource`: (node scope, cluster scope, the first agent's name for
/// cluster scope).
fn names_of(resource: Resource) -> (&'static str, &'static str, Option<&'static str>) {
    match resource {
        Resource::Cpu => (names::CPU_NODE, names::CPU_CLUSTER, Some(names::CPU)),
        Resource::Memory => (names::MEM_NODE, names::MEM_CLUSTER, Some(names::MEM)),
        Resource::Gpu => (names::GPU_NODE, names::GPU_CLUSTER, None),
        Resource::Tpu => (names::TPU_NODE, names::TPU_CLUSTER, None),
    }
}

/// The scores for `free`, by name; each value is in [-100, 100].
pub fn scores(free: &Free, bounds: &Bounds) -> BTreeMap<&'static str, i32> {
    let mut out = BTreeMap::new();
    for resource in Resource::ALL {
        let Some(f) = free.get(resource) else {
            continue;
        };
        let (node, cluster, alias) = names_of(resource);
        let cluster_score = bounds.cluster(resource).normalise(f.cluster);
        out.insert(cluster, cluster_score);
        if let Some(alias) = alias {
            out.insert(alias, cluster_score);
        }
        out.insert(node, bounds.node(resource).normalise(f.node.unwrap_or(0.0)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: f64 = 1024.0 * 1024.0 * 1024.0;

    #[test]
    fn names_values_and_absent_resources() {
        let mut free = Free::default();
        free.set(Resource::Cpu, 40.0, Some(8.0));
        free.set(Resource::Memory, 256.0 * GI, Some(32.0 * GI));
        let s = scores(&free, &Bounds::default());
        let got: Vec<(&str, i32)> = s.into_iter().collect();
        assert_eq!(
            got,
            vec![
                ("cpuAvailable", -20),
                ("cpuClusterAvailable", -20),
                ("cpuNodeAvailable", -84),
                ("memAvailable", 0),
                ("memClusterAvailable", 0),
                ("memNodeAvailable", -87),
            ],
            "no GPU or TPU items for a cluster without them"
        );
    }

    #[test]
    fn present_but_nothing_schedulable_is_minus_100() {
        let mut free = Free::default();
        free.set(Resource::Gpu, 0.0, None);
        free.set(Resource::Tpu, 2.0, Some(1.0));
        let s = scores(&free, &Bounds::default());
        assert_eq!(s.get("gpuClusterAvailable"), Some(&-100));
        assert_eq!(s.get("gpuNodeAvailable"), Some(&-100));
        assert_eq!(s.get("tpuClusterAvailable"), Some(&-80));
        assert_eq!(s.get("tpuNodeAvailable"), Some(&-90));
    }

    #[test]
    fn overcommitted_clusters_clamp_and_bounds_are_settable() {
        let mut free = Free::default();
        free.set(Resource::Cpu, -3.0, Some(-1.0));
        let mut b = Bounds::default();
        assert!(b.set(Resource::Cpu, 0.0, 10.0).is_ok());
        assert!(b.set_node(Resource::Cpu, 0.0, 4.0).is_ok());
        assert!(b.set(Resource::Cpu, 5.0, 5.0).is_err());
        let s = scores(&free, &b);
        assert_eq!(s.get("cpuClusterAvailable"), Some(&-100));
        free.set(Resource::Cpu, 5.0, Some(3.0));
        let s = scores(&free, &b);
        assert_eq!(s.get("cpuClusterAvailable"), Some(&0));
        assert_eq!(s.get("cpuNodeAvailable"), Some(&50));
    }

    #[test]
    fn resources_in_order_with_their_names() {
        assert_eq!(
            Resource::ALL.map(Resource::name),
            ["cpu", "memory", "nvidia.com/gpu", "google.com/tpu"]
        );
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(Resource::from_name(r.name()), Some(r));
        }
        assert_eq!(Resource::from_name("ephemeral-storage"), None);
        assert_eq!(Resource::Cpu.amount("1.5"), Ok(1500));
        assert_eq!(Resource::Memory.amount("1Ki"), Ok(1024));
    }
}
