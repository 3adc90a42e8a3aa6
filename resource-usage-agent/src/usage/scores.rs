//! From free amounts to the resource-usage scores: upstream's names (node scope: the freest
//! single node; cluster scope: the sum over counted nodes) plus seed 001's `cpuAvailable` and
//! `memAvailable` (equal to cluster scope), each normalised between absolute bounds in real
//! units. A resource the cluster does not have gets no item: placements then read 0 for it,
//! not -100 (absent is not full; upstream cannot tell the two apart).

use ocm_api::score::{BoundsError, Normaliser};
use ocm_api::wellknown::score::names;

use super::requests::Resource;
use score_provider::provider::{ScoreError, Scores};

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
        self.0[slot(resource)] = Some(Scoped { cluster, node });
    }

    /// `None` when the cluster does not have `resource`.
    pub fn get(&self, resource: Resource) -> Option<Scoped> {
        self.0[slot(resource)]
    }
}

fn slot(r: Resource) -> usize {
    match r {
        Resource::Cpu => 0,
        Resource::Memory => 1,
        Resource::Gpu => 2,
        Resource::Tpu => 3,
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
        self.cluster[slot(resource)] = n;
        self.node[slot(resource)] = n;
        Ok(())
    }

    /// Sets the bounds of `resource` at node scope only.
    pub fn set_node(&mut self, resource: Resource, min: f64, max: f64) -> Result<(), BoundsError> {
        self.node[slot(resource)] = Normaliser::new(min, max)?;
        Ok(())
    }

    pub fn cluster(&self, resource: Resource) -> &Normaliser {
        &self.cluster[slot(resource)]
    }

    pub fn node(&self, resource: Resource) -> &Normaliser {
        &self.node[slot(resource)]
    }
}

/// The score names of `resource`: (node scope, cluster scope, seed 001's alias of cluster
/// scope).
fn names_of(resource: Resource) -> (&'static str, &'static str, Option<&'static str>) {
    match resource {
        Resource::Cpu => (names::CPU_NODE, names::CPU_CLUSTER, Some(names::CPU)),
        Resource::Memory => (names::MEM_NODE, names::MEM_CLUSTER, Some(names::MEM)),
        Resource::Gpu => (names::GPU_NODE, names::GPU_CLUSTER, None),
        Resource::Tpu => (names::TPU_NODE, names::TPU_CLUSTER, None),
    }
}

/// The scores for `free`.
pub fn scores(free: &Free, bounds: &Bounds) -> Result<Scores, ScoreError> {
    let mut out = Scores::new();
    for resource in Resource::ALL {
        let Some(f) = free.get(resource) else {
            continue;
        };
        let (node, cluster, alias) = names_of(resource);
        let cluster_score = bounds.cluster(resource).normalise(f.cluster);
        out.insert(cluster, i64::from(cluster_score))?;
        if let Some(alias) = alias {
            out.insert(alias, i64::from(cluster_score))?;
        }
        out.insert_normalised(node, f.node.unwrap_or(0.0), bounds.node(resource))?;
    }
    Ok(out)
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
        let s = scores(&free, &Bounds::default()).expect("in range");
        let got: Vec<(&str, i32)> = s.iter().collect();
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
        let s = scores(&free, &Bounds::default()).expect("in range");
        assert_eq!(s.get("gpuClusterAvailable"), Some(-100));
        assert_eq!(s.get("gpuNodeAvailable"), Some(-100));
        assert_eq!(s.get("tpuClusterAvailable"), Some(-80));
        assert_eq!(s.get("tpuNodeAvailable"), Some(-90));
    }

    #[test]
    fn overcommitted_clusters_clamp_and_bounds_are_settable() {
        let mut free = Free::default();
        free.set(Resource::Cpu, -3.0, Some(-1.0));
        let mut b = Bounds::default();
        assert!(b.set(Resource::Cpu, 0.0, 10.0).is_ok());
        assert!(b.set_node(Resource::Cpu, 0.0, 4.0).is_ok());
        assert!(b.set(Resource::Cpu, 5.0, 5.0).is_err());
        let s = scores(&free, &b).expect("in range");
        assert_eq!(s.get("cpuClusterAvailable"), Some(-100));
        free.set(Resource::Cpu, 5.0, Some(3.0));
        let s = scores(&free, &b).expect("in range");
        assert_eq!(s.get("cpuClusterAvailable"), Some(0));
        assert_eq!(s.get("cpuNodeAvailable"), Some(50));
    }
}
