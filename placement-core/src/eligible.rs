//! The clusters a placement may choose from, in the three steps upstream's `syncPlacement`
//! takes before it schedules (open-cluster-management-io/ocm
//! `pkg/placement/controllers/scheduling/scheduling_controller.go`): the namespace's valid
//! ManagedClusterSetBindings, the eligible cluster sets, and their available clusters.

use std::sync::Arc;

use crate::pass::Pass;
use crate::snapshot::{ClusterInfo, Name, SetMembers, Snapshot};
use crate::status::{Code, Status};

/// What the eligibility steps found, as the Outcome and the `PlacementSatisfied` condition
/// report it.
pub(crate) struct Eligible {
    /// Bindings in the namespace whose clusterset exists, sorted.
    pub(crate) bindings: Vec<String>,
    /// The bound sets the placement may use (intersected with `spec.clusterSets`), sorted.
    pub(crate) cluster_sets: Vec<String>,
    /// Members of those sets, by name, without terminating clusters.
    pub(crate) available: Vec<Name>,
    /// Members left out because they are being deleted.
    pub(crate) terminating: Vec<Name>,
}

/// The eligible clusters of the pass, and what [`Eligible`] reports about them. A pass whose
/// `status` is already an error uses no cluster set; a set whose members cannot be read makes
/// it an Error (upstream returns the error and retries).
pub(crate) fn clusters<'a>(
    pass: &Pass<'a>,
    status: &mut Status,
) -> (Eligible, Vec<&'a ClusterInfo>) {
    let bindings = valid_bindings(pass.snapshot, &pass.namespace);
    let cluster_sets = if status.is_error() {
        Vec::new()
    } else {
        eligible_cluster_sets(&pass.spec.cluster_sets, &bindings)
    };
    let members = set_members(pass.snapshot, &cluster_sets, status);
    let (candidates, terminating) = available_clusters(pass.snapshot, &members);
    let available = candidates.iter().map(|c| c.name.clone()).collect();
    let eligible = Eligible {
        bindings,
        cluster_sets,
        available,
        terminating,
    };
    (eligible, candidates)
}

/// Upstream's `getValidManagedClusterSetBindings`: the namespace's bindings whose set exists.
fn valid_bindings(snapshot: &Snapshot, namespace: &str) -> Vec<String> {
    snapshot
        .bindings(namespace)
        .filter(|b| snapshot.set(b).is_some())
        .map(str::to_owned)
        .collect()
}

/// Upstream's `getEligibleClusterSets`: the bound sets, intersected with `spec.clusterSets`
/// when it names any.
fn eligible_cluster_sets(in_spec: &[String], bindings: &[String]) -> Vec<String> {
    if in_spec.is_empty() {
        bindings.to_vec()
    } else {
        bindings
            .iter()
            .filter(|b| in_spec.contains(b))
            .cloned()
            .collect()
    }
}

/// The slots of the sets' members, in name order. The first set whose members cannot be read
/// makes `status` an Error; the sets read before it still count (the outcome lists them).
fn set_members(snapshot: &Snapshot, sets: &[String], status: &mut Status) -> Vec<usize> {
    let mut parts: Vec<Arc<Vec<usize>>> = Vec::new();
    for set in sets {
        match snapshot.members(set) {
            SetMembers::Members(m) => parts.push(m),
            SetMembers::Invalid(e) => {
                *status = Status::new(
                    Code::Error,
                    "",
                    format!("failed to get clusters from ClusterSet {set}: {e}"),
                );
                break;
            }
        }
    }
    union_in_name_order(snapshot, &parts)
}

/// The union of member lists that each are in name order.
fn union_in_name_order(snapshot: &Snapshot, parts: &[Arc<Vec<usize>>]) -> Vec<usize> {
    match parts {
        [] => Vec::new(),
        [one] => one.to_vec(),
        many => {
            let mut all: Vec<usize> = many.iter().flat_map(|p| p.iter().copied()).collect();
            all.sort_unstable();
            all.dedup();
            all.sort_by(|a, b| {
                let name = |i: &usize| snapshot.slot(*i).map(|c| &c.name);
                name(a).cmp(&name(b))
            });
            all
        }
    }
}

/// Upstream's `getAvailableClusters`: the members not being deleted, and (ours, for the
/// outcome) the names of those that are.
fn available_clusters<'a>(
    snapshot: &'a Snapshot,
    members: &[usize],
) -> (Vec<&'a ClusterInfo>, Vec<Name>) {
    let mut terminating = Vec::new();
    let mut candidates = Vec::with_capacity(members.len());
    for c in members.iter().filter_map(|&i| snapshot.slot(i)) {
        if c.terminating {
            terminating.push(c.name.clone());
        } else {
            candidates.push(c);
        }
    }
    (candidates, terminating)
}
