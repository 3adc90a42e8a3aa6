//! Refusing to fight OCM's own placement controller. Every OCM hub runs one (the
//! ClusterManager's `<name>-placement-controller` Deployment, whose replicas elect a leader on the
//! Lease `placement-lock`); a second scheduler writing the same PlacementDecisions would undo
//! its decisions and be undone in turn. So the scheduler started as itself (the chart's
//! invocation) looks for it before scheduling and refuses to start when it is active, unless
//! told to take over (then it does not look). Started as `placement` (swapped in through the
//! ClusterManager's `spec.placementImagePullSpec`), the scheduler *is* that controller and
//! joins that Lease's election instead (see [`crate::upstream`]), so it does not check.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use thiserror::Error;

use crate::upstream::UPSTREAM_LEASE;

/// The Deployment the cluster-manager operator runs upstream's placement controller in, for
/// the ClusterManager named `cluster-manager` (every install guide's name).
pub const UPSTREAM_DEPLOYMENT: &str = "cluster-manager-placement-controller";

/// A sign that OCM's placement controller is active.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Its Lease, held and renewed within its duration.
    Lease {
        namespace: String,
        holder: String,
        renewed_ago: SignedDuration,
    },
    /// Its Deployment, with ready replicas.
    Deployment { namespace: String, ready: i32 },
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Lease {
                namespace,
                holder,
                renewed_ago,
            } => write!(
                f,
                "Lease {namespace}/{UPSTREAM_LEASE} is held by {holder:?} (renewed {}s ago)",
                renewed_ago.as_secs()
            ),
            Found::Deployment { namespace, ready } => write!(
                f,
                "Deployment {namespace}/{UPSTREAM_DEPLOYMENT} has {ready} ready replica(s)"
            ),
        }
    }
}

#[derive(Debug, Error)]
pub enum CoexistError {
    #[error(
        "OCM's own placement controller is active on this hub: {}. Two schedulers would fight over the same PlacementDecisions. Either run this scheduler as OCM's placement controller (set the ClusterManager's spec.placementImagePullSpec to this scheduler's image: OCM keeps managing its Deployment, RBAC and upgrades, and this chart's scheduler stays off), or scale OCM's placement controller down and pass --take-over (TAKE_OVER=true; the chart's scheduler.takeOver)",
        found.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Active { found: Vec<Found> },
    #[error("cannot tell whether OCM's placement controller is active: reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// Whether a Lease is held: a holder, renewed (or acquired) less than its duration before
/// `now`. Returns how long ago it was renewed.
pub fn lease_held(spec: &LeaseSpec, now: Timestamp) -> Option<(String, SignedDuration)> {
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    let ago = now.duration_since(renewed);
    (ago < duration).then(|| (holder.to_owned(), ago))
}

/// What shows OCM's placement controller active in `namespace` (its hub namespace): its held
/// Lease, its Deployment with ready replicas. A read the scheduler may not make (RBAC) is
/// logged and skipped: the chart grants both.
pub async fn find_upstream(
    client: &kube::Client,
    namespace: &str,
    now: Timestamp,
) -> Result<Vec<Found>, CoexistError> {
    let mut found = Vec::new();
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = read(leases.get_opt(UPSTREAM_LEASE).await, || {
        format!("Lease {namespace}/{UPSTREAM_LEASE}")
    })?;
    if let Some((holder, renewed_ago)) = lease
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| lease_held(&s, now))
    {
        found.push(Found::Lease {
            namespace: namespace.to_owned(),
            holder,
            renewed_ago,
        });
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = read(deployments.get_opt(UPSTREAM_DEPLOYMENT).await, || {
        format!("Deployment {namespace}/{UPSTREAM_DEPLOYMENT}")
    })?;
    let ready = deployment
        .flatten()
        .and_then(|d| d.status)
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    if ready > 0 {
        found.push(Found::Deployment {
            namespace: namespace.to_owned(),
            ready,
        });
    }
    Ok(found)
}

/// `Some(object)` read, `None` when forbidden (logged), or the error.
fn read<T>(
    result: Result<T, kube::Error>,
    what: impl FnOnce() -> String,
) -> Result<Option<T>, CoexistError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            tracing::warn!(object = %what(), message = %s.message, "cannot read it to check for OCM's placement controller (forbidden): not checked");
            Ok(None)
        }
        Err(source) => Err(CoexistError::Read {
            what: what(),
            source,
        }),
    }
}

/// The start-up check: an error naming what was found and the two remedies. Not made with
/// `--take-over`. An apiserver that cannot be reached is the caller's to wait for (its error,
/// [`CoexistError::Read`], holds the client's).
pub async fn check(client: &kube::Client, namespace: &str) -> Result<(), CoexistError> {
    let found = find_upstream(client, namespace, Timestamp::now()).await?;
    if found.is_empty() {
        tracing::debug!(%namespace, "OCM's placement controller is not active");
        return Ok(());
    }
    Err(CoexistError::Active { found })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn spec(holder: &str, renewed: &str, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed.parse().expect("time"))),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_is_held_while_renewed_within_its_duration() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().expect("now");
        assert_eq!(
            lease_held(&spec("a", "2026-01-01T00:00:50Z", 137), now),
            Some(("a".into(), SignedDuration::from_secs(10)))
        );
        // Stale: renewed longer ago than its duration.
        assert_eq!(
            lease_held(&spec("a", "2026-01-01T00:00:00Z", 15), now),
            None
        );
        // Released: no holder.
        assert_eq!(
            lease_held(&spec("", "2026-01-01T00:00:59Z", 137), now),
            None
        );
        assert_eq!(lease_held(&LeaseSpec::default(), now), None);
    }

    #[test]
    fn the_refusal_names_what_was_found_and_both_remedies() {
        let e = CoexistError::Active {
            found: vec![
                Found::Lease {
                    namespace: "open-cluster-management-hub".into(),
                    holder: "pod_1".into(),
                    renewed_ago: SignedDuration::from_secs(3),
                },
                Found::Deployment {
                    namespace: "open-cluster-management-hub".into(),
                    ready: 2,
                },
            ],
        }
        .to_string();
        for part in [
            "Lease open-cluster-management-hub/placement-lock is held by \"pod_1\" (renewed 3s ago)",
            "Deployment open-cluster-management-hub/cluster-manager-placement-controller has 2 ready replica(s)",
            "spec.placementImagePullSpec",
            "--take-over",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
    }
}
