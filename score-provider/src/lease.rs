//! The add-on health Lease: OCM's registration agent on the managed cluster reads the Lease
//! named after the add-on in the agent's namespace and sets the ManagedClusterAddOn
//! `Available` while `renewTime` is less than five minutes old (score-addon.md §3.6). We
//! renew it every minute, but only while the provider is healthy, so that a wedged agent
//! shows as unavailable on the hub.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use ocm_runtime::write::{is_already_exists, is_not_found};

/// Where the Lease lives and how often it is renewed.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    /// The add-on's name (`resource-usage-collect`).
    pub name: String,
    /// Renewal period; upstream's lease updater uses 60 s and the hub allows five of them.
    pub period: Duration,
}

/// Renews the Lease once: creates it when missing. Errors are returned for logging; the next
/// renewal tries again.
pub async fn renew(
    client: &kube::Client,
    settings: &LeaseSettings,
    manager: &str,
    now: jiff::Timestamp,
) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let duration = i32::try_from(settings.period.as_secs()).unwrap_or(i32::MAX);
    let patch = serde_json::json!({
        "spec": {
            "renewTime": MicroTime(now),
            "leaseDurationSeconds": duration,
        }
    });
    match api
        .patch(
            &settings.name,
            &PatchParams::apply(manager),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(settings.name.clone()),
                    namespace: Some(settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    renew_time: Some(MicroTime(now)),
                    lease_duration_seconds: Some(duration),
                    ..LeaseSpec::default()
                }),
            };
            let params = PostParams {
                field_manager: Some(manager.to_owned()),
                ..PostParams::default()
            };
            match api.create(&params, &lease).await {
                // Created meanwhile by another replica: renewed all the same.
                Ok(_) => Ok(()),
                Err(e) if is_already_exists(&e) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
