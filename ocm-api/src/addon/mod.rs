//! The `addon.open-cluster-management.io` group. v1alpha1 is the storage version.

pub mod v1alpha1;
