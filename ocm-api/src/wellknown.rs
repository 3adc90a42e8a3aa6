//! Well-known names of the OCM APIs, defined once: labels, annotations, finalizers, taint keys,
//! condition types and reasons, and the values of the string-typed enum fields.
//!
//! Where upstream spells something oddly (`Succeedconfigured`) the constant keeps upstream's
//! spelling: these strings are the compatibility contract.

/// API groups.
pub mod group {
    pub const CLUSTER: &str = "cluster.open-cluster-management.io";
    pub const ADDON: &str = "addon.open-cluster-management.io";
    pub const WORK: &str = "work.open-cluster-management.io";
}

/// Labels.
pub mod label {
    /// Exclusive clusterset membership of a ManagedCluster.
    pub const CLUSTERSET: &str = "cluster.open-cluster-management.io/clusterset";
    /// On a PlacementDecision: the Placement it belongs to (what consumers key on).
    pub const PLACEMENT: &str = "cluster.open-cluster-management.io/placement";
    /// On a PlacementDecision: its decision group's index, as a decimal string.
    pub const DECISION_GROUP_INDEX: &str =
        "cluster.open-cluster-management.io/decision-group-index";
    /// On a PlacementDecision: its decision group's name ("" for unnamed groups).
    pub const DECISION_GROUP_NAME: &str = "cluster.open-cluster-management.io/decision-group-name";
    /// On objects that belong to one managed cluster.
    pub const CLUSTER_NAME: &str = "open-cluster-management.io/cluster-name";
    /// On an add-on's ManifestWorks and CSRs.
    pub const ADDON_NAME: &str = "open-cluster-management.io/addon-name";
    /// On an add-on's ManifestWorks when the MCA lives in another namespace.
    pub const ADDON_NAMESPACE: &str = "open-cluster-management.io/addon-namespace";
}

/// Annotations.
pub mod annotation {
    /// `"true"` on a Placement: the scheduler skips it entirely.
    pub const PLACEMENT_DISABLE: &str =
        "cluster.open-cluster-management.io/experimental-scheduling-disable";
    /// On a ManagedCluster: image registry mirrors, JSON `{"registries":[{"source","mirror"}]}`.
    pub const CLUSTER_IMAGE_REGISTRIES: &str = "open-cluster-management.io/image-registries";
    /// On a ManifestWork rendered for an add-on: hash of the configs it was rendered from.
    pub const CONFIG_SPEC_HASH: &str = "open-cluster-management.io/config-spec-hash";
    /// On a ManagedClusterAddOn: its agent's install namespace.
    pub const ADDON_INSTALL_NAMESPACE: &str = "addon.open-cluster-management.io/installNamespace";
    /// On a ManagedClusterAddOn: JSON template values.
    pub const ADDON_VALUES: &str = "addon.open-cluster-management.io/values";
    /// On an add-on manifest: orphan this object when the add-on is deleted.
    pub const ADDON_DELETION_ORPHAN: &str = "addon.open-cluster-management.io/deletion-orphan";
    /// On an add-on manifest: run it as a pre-delete hook.
    pub const ADDON_PRE_DELETE_HOOK: &str = "addon.open-cluster-management.io/addon-pre-delete";
    /// On a ClusterManagementAddOn: who manages its lifecycle (`addon-manager` or `self`).
    pub const ADDON_LIFECYCLE: &str = "addon.open-cluster-management.io/lifecycle";
}

/// Finalizers.
pub mod finalizer {
    pub const MANAGED_CLUSTER_API_RESOURCE_CLEANUP: &str =
        "cluster.open-cluster-management.io/api-resource-cleanup";
}

/// Built-in ManagedCluster taint keys (effect `NoSelect`, no value), kept by the hub.
pub mod taint {
    /// The cluster's `ManagedClusterConditionAvailable` is False.
    pub const UNAVAILABLE: &str = "cluster.open-cluster-management.io/unavailable";
    /// That condition is missing or Unknown.
    pub const UNREACHABLE: &str = "cluster.open-cluster-management.io/unreachable";
}

/// Values of `Taint.effect` and `Toleration.effect`.
pub mod taint_effect {
    pub const NO_SELECT: &str = "NoSelect";
    pub const PREFER_NO_SELECT: &str = "PreferNoSelect";
    /// Not selected by placements that do not already have the cluster in their decisions.
    pub const NO_SELECT_IF_NEW: &str = "NoSelectIfNew";
}

/// Values of `Toleration.operator` ("" means `Equal`).
pub mod toleration_operator {
    pub const EQUAL: &str = "Equal";
    pub const EXISTS: &str = "Exists";
}

/// Values of `ManagedClusterSet.spec.clusterSelector.selectorType` ("" means the exclusive label).
pub mod selector_type {
    pub const EXCLUSIVE_CLUSTERSET_LABEL: &str = "ExclusiveClusterSetLabel";
    pub const LABEL_SELECTOR: &str = "LabelSelector";
}

/// Values of `Placement.spec.prioritizerPolicy.mode` ("" means `Additive`).
pub mod prioritizer_mode {
    pub const ADDITIVE: &str = "Additive";
    pub const EXACT: &str = "Exact";
}

/// Values of `scoreCoordinate.type`.
pub mod score_coordinate_type {
    pub const BUILT_IN: &str = "BuiltIn";
    pub const ADD_ON: &str = "AddOn";
}

/// Values of `scoreCoordinate.builtIn`.
pub mod builtin_prioritizer {
    pub const BALANCE: &str = "Balance";
    pub const STEADY: &str = "Steady";
    pub const RESOURCE_ALLOCATABLE_CPU: &str = "ResourceAllocatableCPU";
    pub const RESOURCE_ALLOCATABLE_MEMORY: &str = "ResourceAllocatableMemory";
}

/// Values of `Placement.spec.sortBy` ("" means `ClusterName`).
pub mod sort_by {
    pub const CLUSTER_NAME: &str = "ClusterName";
    pub const SCORE: &str = "Score";
}

/// Values of `spreadConstraints[].topologyKeyType`.
pub mod topology_key_type {
    pub const LABEL: &str = "Label";
    pub const CLAIM: &str = "Claim";
}

/// Values of `spreadConstraints[].whenUnsatisfiable` ("" means `ScheduleAnyway`).
pub mod when_unsatisfiable {
    pub const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
    pub const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
}

/// ManagedCluster condition types.
pub mod cluster_condition {
    pub const JOINED: &str = "ManagedClusterJoined";
    pub const HUB_ACCEPTED: &str = "HubAcceptedManagedCluster";
    pub const HUB_DENIED: &str = "HubDeniedManagedCluster";
    pub const AVAILABLE: &str = "ManagedClusterConditionAvailable";
    pub const CLOCK_SYNCED: &str = "ManagedClusterConditionClockSynced";
    pub const DELETING: &str = "Deleting";
}

/// ManagedClusterSet and ManagedClusterSetBinding condition types.
pub mod clusterset_condition {
    pub const EMPTY: &str = "ClusterSetEmpty";
    pub const BOUND: &str = "Bound";
}

/// Placement condition types, reasons and fixed messages.
pub mod placement_condition {
    pub const SATISFIED: &str = "PlacementSatisfied";
    pub const MISCONFIGURED: &str = "PlacementMisconfigured";

    /// Reasons of `PlacementSatisfied`.
    pub mod reason {
        pub const NO_MANAGED_CLUSTER_SET_BINDINGS: &str = "NoManagedClusterSetBindings";
        pub const NO_INTERSECTION: &str = "NoIntersection";
        pub const ALL_MANAGED_CLUSTER_SETS_EMPTY: &str = "AllManagedClusterSetsEmpty";
        pub const NOT_ALL_DECISIONS_SCHEDULED: &str = "NotAllDecisionsScheduled";
        pub const NO_MANAGED_CLUSTER_MATCHED: &str = "NoManagedClusterMatched";
        pub const ALL_DECISIONS_SCHEDULED: &str = "AllDecisionsScheduled";
        /// Ours, not upstream's: the pass spent the Placement's CEL budget (cost or time)
        /// before it was done; it was not scheduled and its decisions were kept.
        pub const CEL_BUDGET_EXCEEDED: &str = "CELBudgetExceeded";
        /// Ours, not upstream's: the spec holds more list items than the scheduler accepts;
        /// it was not scheduled and its decisions were kept.
        pub const LIST_LIMIT_EXCEEDED: &str = "ListLimitExceeded";
        /// Of `PlacementMisconfigured=True`.
        pub const MISCONFIGURED: &str = "Misconfigured";
        /// Of `PlacementMisconfigured=False` (upstream's spelling).
        pub const SUCCEED_CONFIGURED: &str = "Succeedconfigured";
    }

    /// Fixed messages (the variable ones are built by the scheduler).
    pub mod message {
        pub const NO_MANAGED_CLUSTER_SET_BINDINGS: &str =
            "No valid ManagedClusterSetBindings found in placement namespace";
        pub const NO_MANAGED_CLUSTER_MATCHED: &str =
            "No ManagedCluster matches any of the cluster predicate";
        pub const ALL_DECISIONS_SCHEDULED: &str = "All cluster decisions scheduled";
        pub const CONFIGURATION_CHECK_PASS: &str = "Placement configurations check pass";
    }
}

/// Reasons and actions of the scheduler's events (`events.k8s.io/v1`).
pub mod placement_event {
    pub const REPORTING_CONTROLLER: &str = "placement-controller";
    pub const DECISION_CREATE: &str = "DecisionCreate";
    pub const DECISION_CREATED: &str = "DecisionCreated";
    pub const DECISION_UPDATE: &str = "DecisionUpdate";
    pub const DECISION_UPDATED: &str = "DecisionUpdated";
    pub const DECISION_DELETE: &str = "DecisionDelete";
    pub const DECISION_DELETED: &str = "DecisionDeleted";
    pub const SCORE_UPDATE: &str = "ScoreUpdate";
    pub const SCORE_UPDATED: &str = "ScoreUpdated";
    /// Ours, not upstream's: a score's `validUntil` lay beyond the scheduler's validity bound.
    pub const SCORE_VALIDITY_CAPPED: &str = "ScoreValidityCapped";
    pub const SCORE_VALIDITY_CAPPED_ACTION: &str = "ScoreValidityCap";
    /// Ours: the Placement's stability controls held back a move that scores alone asked for.
    pub const DECISION_HELD: &str = "DecisionHeld";
    pub const DECISION_HELD_ACTION: &str = "DecisionHold";
    /// Ours: the action of a Warning whose reason is a `PlacementSatisfied` reason of a limit
    /// (`CELBudgetExceeded`, `ListLimitExceeded`): the pass stopped, nothing was written.
    pub const SCHEDULING_SKIPPED_ACTION: &str = "SchedulingSkipped";
}

/// Limits the scheduler keeps.
pub mod limits {
    /// Clusters per PlacementDecision object.
    pub const MAX_DECISIONS_PER_OBJECT: usize = 100;
    /// Bounds of a score, an AddOnPlacementScore item's value and a prioritizer's result.
    pub const MIN_CLUSTER_SCORE: i64 = -100;
    pub const MAX_CLUSTER_SCORE: i64 = 100;
    /// Bounds of a prioritizer weight.
    pub const MIN_WEIGHT: i32 = -10;
    pub const MAX_WEIGHT: i32 = 10;
    /// `spec.spreadPolicy.spreadConstraints` items (the upstream CRD's `maxItems`).
    pub const MAX_SPREAD_CONSTRAINTS: usize = 8;
}

/// ManagedClusterAddOn condition types.
pub mod addon_condition {
    pub const AVAILABLE: &str = "Available";
    pub const DEGRADED: &str = "Degraded";
    pub const CONFIGURED: &str = "Configured";
    pub const PROGRESSING: &str = "Progressing";
    pub const MANIFEST_APPLIED: &str = "ManifestApplied";
    pub const HOOK_MANIFEST_COMPLETED: &str = "HookManifestCompleted";
    pub const HOSTING_MANIFEST_APPLIED: &str = "HostingManifestApplied";
    pub const HOSTING_CLUSTER_VALIDITY: &str = "HostingClusterValidity";
    pub const REGISTRATION_APPLIED: &str = "RegistrationApplied";
    pub const CLUSTER_CERTIFICATE_ROTATED: &str = "ClusterCertificateRotated";

    /// Reasons of the conditions above.
    pub mod reason {
        // Available
        pub const LEASE_UPDATED: &str = "ManagedClusterAddOnLeaseUpdated";
        pub const LEASE_UPDATE_STOPPED: &str = "ManagedClusterAddOnLeaseUpdateStopped";
        pub const LEASE_NOT_FOUND: &str = "ManagedClusterAddOnLeaseNotFound";
        pub const WORK_APPLIED: &str = "WorkApplied";
        pub const WORK_NOT_APPLIED: &str = "WorkNotApplied";
        pub const WORK_NOT_FOUND: &str = "WorkNotFound";
        pub const NO_PROBE_RESULT: &str = "NoProbeResult";
        pub const PROBE_UNAVAILABLE: &str = "ProbeUnavailable";
        pub const PROBE_AVAILABLE: &str = "ProbeAvailable";
        // Progressing
        pub const PROGRESSING: &str = "Progressing";
        pub const COMPLETED: &str = "Completed";
        pub const FAILED: &str = "Failed";
        pub const WAITING_FOR_CANARY: &str = "WaitingForCanary";
        pub const CONFIGURATION_UNSUPPORTED: &str = "ConfigurationUnsupported";
        pub const WAITING_FOR_MANIFEST_APPLIED: &str = "WaitingForManifestApplied";
        // ManifestApplied
        pub const MANIFEST_WORK_APPLY_FAILED: &str = "ManifestWorkApplyFailed";
        pub const ADDON_MANIFEST_APPLIED: &str = "AddonManifestApplied";
        pub const ADDON_MANIFEST_APPLIED_FAILED: &str = "AddonManifestAppliedFailed";
        // HostingClusterValidity
        pub const HOSTING_CLUSTER_VALID: &str = "HostingClusterValid";
        pub const HOSTING_CLUSTER_INVALID: &str = "HostingClusterInvalid";
        // RegistrationApplied
        pub const NIL_REGISTRATION: &str = "NilRegistration";
        pub const SET_PERMISSION_FAILED: &str = "SetPermissionFailed";
        pub const SET_PERMISSION_APPLIED: &str = "SetPermissionApplied";
        pub const PERMISSION_CONFIG_PENDING: &str = "PermissionConfigPending";
    }
}

/// ManifestWork condition types (on the work and on each applied manifest).
pub mod work_condition {
    pub const APPLIED: &str = "Applied";
    pub const AVAILABLE: &str = "Available";
    pub const DEGRADED: &str = "Degraded";
    pub const PROGRESSING: &str = "Progressing";
    pub const DELETED: &str = "Deleted";
    pub const STATUS_FEEDBACK_SYNCED: &str = "StatusFeedbackSynced";
}

/// Well-known names of the resource-usage score provider.
pub mod score {
    /// The AddOnPlacementScore the resource-usage agent and the hub scorer keep per cluster.
    pub const RESOURCE_USAGE_SCORE: &str = "resource-usage-score";
    /// The add-on that ships the resource-usage agent (and names its health Lease).
    pub const RESOURCE_USAGE_ADDON: &str = "resource-usage-collect";
    /// The condition a provider keeps on its AddOnPlacementScore (the OCM docs' example).
    pub const CONDITION_UPDATED: &str = "AddOnPlacementScoreUpdated";
    /// Reason and message of that condition when the scores are current.
    pub const REASON_UPDATED: &str = "AddOnPlacementScoreUpdated";
    pub const MESSAGE_UPDATED: &str = "AddOnPlacementScore updated successfully";

    /// Score names the resource-usage provider writes: upstream's current ones (node scope:
    /// the freest single node; cluster scope: the sum) and the ones addon-contrib's first
    /// agent wrote (`cpuAvailable`, `memAvailable`), equal to cluster scope.
    pub mod names {
        pub const CPU_NODE: &str = "cpuNodeAvailable";
        pub const CPU_CLUSTER: &str = "cpuClusterAvailable";
        pub const MEM_NODE: &str = "memNodeAvailable";
        pub const MEM_CLUSTER: &str = "memClusterAvailable";
        pub const GPU_NODE: &str = "gpuNodeAvailable";
        pub const GPU_CLUSTER: &str = "gpuClusterAvailable";
        pub const TPU_NODE: &str = "tpuNodeAvailable";
        pub const TPU_CLUSTER: &str = "tpuClusterAvailable";
        pub const CPU: &str = "cpuAvailable";
        pub const MEM: &str = "memAvailable";
    }
}
