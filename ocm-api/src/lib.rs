//! Rust types for the Open Cluster Management objects this project reads and writes,
//! schema-compatible with the upstream CRDs (`open-cluster-management.io/api`, the version
//! pinned in `tests/control-plane/versions.env`).
//!
//! Every field upstream defines has a typed home here, so that reading an object and writing
//! it back loses nothing. Decoding follows Go's: a missing or `null` field takes its zero value
//! (or the CRD default where the zero value would mean something else), never an error.

pub mod addon;
pub mod cluster;
pub mod conditions;
pub mod crds;
mod null;
pub mod quantity;
pub mod schema;
pub mod score;
pub mod scoring;
pub mod selector;
pub mod wellknown;
pub mod work;

pub use addon::v1alpha1::{
    AddOnDeploymentConfig, AddOnDeploymentConfigSpec, ClusterManagementAddOn,
    ClusterManagementAddOnSpec, ClusterManagementAddOnStatus, ManagedClusterAddOn,
    ManagedClusterAddOnSpec, ManagedClusterAddOnStatus,
};
pub use cluster::v1::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus, Taint};
pub use cluster::v1alpha1::{
    AddOnPlacementScore, AddOnPlacementScoreItem, AddOnPlacementScoreStatus,
};
pub use cluster::v1beta1::{
    ClusterDecision, Placement, PlacementDecision, PlacementDecisionStatus, PlacementSpec,
    PlacementStatus,
};
pub use cluster::v1beta2::{
    ManagedClusterSet, ManagedClusterSetBinding, ManagedClusterSetBindingSpec,
    ManagedClusterSetSpec,
};
pub use work::v1::{ManifestWork, ManifestWorkSpec, ManifestWorkStatus};
