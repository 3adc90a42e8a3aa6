//! The `cluster.open-cluster-management.io` group.

pub mod v1;
pub mod v1alpha1;
pub mod v1beta1;
pub mod v1beta2;
