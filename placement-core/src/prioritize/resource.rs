//! ResourceAllocatableCPU / ResourceAllocatableMemory (upstream `plugins/resource`): min-max
//! normalised allocatable over the clusters that report both allocatable and capacity; 100
//! for all when they are equal. Clusters without the resource get no entry.

use super::normalise;

pub(crate) fn score(values: impl Iterator<Item = Option<f64>> + Clone) -> Vec<Option<i64>> {
    let present = values.clone().flatten();
    let (min, max) = present.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    values
        .map(|v| {
            v.map(|v| {
                if max == min {
                    100
                } else {
                    normalise(v, min, max)
                }
            })
        })
        .collect()
}
