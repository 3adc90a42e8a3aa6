//! The `work.open-cluster-management.io` group.

pub mod v1;
