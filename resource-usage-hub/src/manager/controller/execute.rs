//! Writes a pass's plan, each write fenced on the objects as the pass saw them.

use ocm_api::addon::v1alpha1::ManagedClusterAddOnStatus;
use ocm_api::scoring::{ScoreDefinition, ScoreDefinitionStatus};
use ocm_runtime::write::{ignore_not_found, is_already_exists, preconditioned};

use super::*;

/// What a pass's writes are preconditioned on: the objects as the plan saw them, and our own
/// writes of them since. A status or spec patch carries the `resourceVersion`, a delete the
/// `uid` (not one re-created meanwhile); a 409 fails the write and the next pass plans again,
/// so a deposed leader cannot overwrite what a newer one wrote.
pub(super) struct Fence<'a> {
    pub(super) snap: &'a Snapshot,
    /// The ClusterManagementAddOn's version, after our own writes of it in this pass.
    pub(super) cma: Option<String>,
}

impl<'a> Fence<'a> {
    pub(super) fn new(snap: &'a Snapshot) -> Self {
        Self {
            snap,
            cma: snap
                .cma
                .as_ref()
                .and_then(|c| c.metadata.resource_version.clone()),
        }
    }

    pub(super) fn wrote_cma(&mut self, c: &ClusterManagementAddOn) {
        self.cma = c.metadata.resource_version.clone();
    }

    /// Delete only the object of `uid`.
    pub(super) fn delete_params<K: kube::Resource>(uid: Option<&Arc<K>>) -> DeleteParams {
        ocm_runtime::write::delete_params(uid.and_then(|o| o.meta().uid.as_deref()), None)
    }
}

/// Writes a pass's actions in order, until the leadership is lost mid-pass; a write's failure
/// is kept in `errors` for its cluster and step (a success clears it). Whether any failed.
pub(super) async fn write_plan(
    client: &Client,
    options: &Options,
    handle: &Handle,
    actions: Vec<Action>,
    snap: &Snapshot,
    errors: &mut BTreeMap<(String, Step), String>,
) -> bool {
    let settings = &options.settings;
    let mut failed = false;
    let mut fence = Fence::new(snap);
    for action in actions {
        if !options.leadership.is_leader() {
            // Lost the lease mid-pass: the new leader plans again from its own view.
            break;
        }
        let kind = action.kind();
        let step = step_of(&action);
        let cluster = action.cluster().map(str::to_owned);
        let labels = ActionLabels {
            action: kind.to_owned(),
        };
        match execute(client, settings, action, &mut fence).await {
            Ok(()) => {
                handle.metrics.writes.get_or_create(&labels).inc();
                if let (Some(c), Some(s)) = (cluster, step) {
                    errors.remove(&(c, s));
                }
            }
            Err(e) => {
                failed = true;
                handle.metrics.write_errors.get_or_create(&labels).inc();
                tracing::warn!(action = kind, cluster = cluster.as_deref().unwrap_or(""), error = %e, "write failed; retrying");
                if let (Some(c), Some(s)) = (cluster, step) {
                    errors.insert((c, s), e.to_string());
                }
            }
        }
    }
    failed
}

pub(super) async fn execute(
    client: &Client,
    settings: &Settings,
    action: Action,
    fence: &mut Fence<'_>,
) -> Result<(), kube::Error> {
    let addon = settings.addon.as_str();
    match action {
        Action::CreateCma(c) => create_cma(client, &c, fence).await,
        Action::PatchCmaSupportedConfigs(configs) => {
            let body = preconditioned(
                json!({"spec": {"supportedConfigs": configs}}),
                fence.cma.as_deref(),
            );
            Api::<ClusterManagementAddOn>::all(client.clone())
                .patch(addon, &PatchParams::default(), &Patch::Merge(body))
                .await
                .map(|c| fence.wrote_cma(&c))
        }
        Action::PatchCmaStatus {
            install_progressions,
            default_config_references,
        } => {
            let body = preconditioned(
                json!({
                    "status": {
                        "installProgressions": install_progressions,
                        "defaultconfigReferences": default_config_references,
                    },
                }),
                fence.cma.as_deref(),
            );
            let cmas = Api::<ClusterManagementAddOn>::all(client.clone());
            ignore_gone(
                cmas.patch_status(addon, &PatchParams::default(), &Patch::Merge(body))
                    .await,
            )
        }
        Action::CreateMca(m) => create_mca(client, &m).await,
        Action::DeleteMca { cluster } => {
            let params = Fence::delete_params(fence.snap.mcas.get(&cluster));
            let mcas = Api::<ManagedClusterAddOn>::namespaced(client.clone(), &cluster);
            ignore_gone(mcas.delete(addon, &params).await)
        }
        Action::PatchMcaStatus {
            cluster,
            resource_version,
            status,
        } => patch_mca_status(client, addon, &cluster, resource_version, &status).await,
        Action::ApplyRoleBinding(b) => {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            Api::<RoleBinding>::namespaced(client.clone(), &ns)
                .patch(&settings.permission_name(), &apply(), &Patch::Apply(&b))
                .await
                .map(drop)
        }
        Action::DeleteRole { cluster } => {
            let params = Fence::delete_params(fence.snap.roles.get(&cluster));
            let roles = Api::<Role>::namespaced(client.clone(), &cluster);
            ignore_gone(roles.delete(&settings.permission_name(), &params).await)
        }
        Action::DeleteRoleBinding { cluster } => {
            let params = Fence::delete_params(fence.snap.bindings.get(&cluster));
            let bindings = Api::<RoleBinding>::namespaced(client.clone(), &cluster);
            ignore_gone(bindings.delete(&settings.permission_name(), &params).await)
        }
        Action::ApplyWork(w) => {
            let ns = w.metadata.namespace.clone().unwrap_or_default();
            Api::<ManifestWork>::namespaced(client.clone(), &ns)
                .patch(&settings.work_name(), &apply(), &Patch::Apply(&w))
                .await
                .map(drop)
        }
        Action::DeleteWork { cluster } => {
            let params = Fence::delete_params(fence.snap.works.get(&cluster));
            let works = Api::<ManifestWork>::namespaced(client.clone(), &cluster);
            ignore_gone(works.delete(&settings.work_name(), &params).await)
        }
        Action::ApproveCsr {
            name,
            resource_version,
        } => approve_csr(client, &name, resource_version).await,
        Action::PatchDefinitionStatus {
            name,
            resource_version,
            status,
        } => patch_definition_status(client, &name, resource_version, &status).await,
    }
}

/// Server-side apply as the manager, taking over fields others set.
fn apply() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// A write whose object is gone has nothing left to do.
fn ignore_gone<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    ignore_not_found(r).map(drop)
}

async fn create_cma(
    client: &Client,
    c: &ClusterManagementAddOn,
    fence: &mut Fence<'_>,
) -> Result<(), kube::Error> {
    match Api::<ClusterManagementAddOn>::all(client.clone())
        .create(&PostParams::default(), c)
        .await
    {
        Err(e) if is_already_exists(&e) => Ok(()),
        r => r.map(|c| fence.wrote_cma(&c)),
    }
}

async fn create_mca(client: &Client, m: &ManagedClusterAddOn) -> Result<(), kube::Error> {
    let ns = m.metadata.namespace.clone().unwrap_or_default();
    match Api::<ManagedClusterAddOn>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), m)
        .await
    {
        Err(e) if is_already_exists(&e) => Ok(()),
        r => r.map(drop),
    }
}

/// The whole status, guarded by the version the plan saw.
async fn patch_mca_status(
    client: &Client,
    addon: &str,
    cluster: &str,
    resource_version: Option<String>,
    status: &ManagedClusterAddOnStatus,
) -> Result<(), kube::Error> {
    let mut body = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    if status.config_references.is_empty()
        && let Some(o) = body.as_object_mut()
    {
        // Merge patch keeps absent keys: clear a config that is no longer used.
        o.insert("configReferences".into(), serde_json::Value::Null);
    }
    let patch = Patch::Merge(preconditioned(
        json!({"status": body}),
        resource_version.as_deref(),
    ));
    let mcas = Api::<ManagedClusterAddOn>::namespaced(client.clone(), cluster);
    ignore_gone(
        mcas.patch_status(addon, &PatchParams::default(), &patch)
            .await,
    )
}

/// An Agent definition's status: `observedGeneration` and `Accepted`, clearing what the hub
/// scorer may have set while it was a Hub definition (merge patch keeps absent keys).
async fn patch_definition_status(
    client: &Client,
    name: &str,
    resource_version: Option<String>,
    status: &ScoreDefinitionStatus,
) -> Result<(), kube::Error> {
    let mut body = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    if let Some(o) = body.as_object_mut() {
        for key in ["lastEvaluationTime", "scoredClusters"] {
            o.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let patch = Patch::Merge(preconditioned(
        json!({"status": body}),
        resource_version.as_deref(),
    ));
    let defs = Api::<ScoreDefinition>::all(client.clone());
    ignore_gone(
        defs.patch_status(name, &PatchParams::default(), &patch)
            .await,
    )
}

async fn approve_csr(
    client: &Client,
    name: &str,
    resource_version: Option<String>,
) -> Result<(), kube::Error> {
    let condition = CertificateSigningRequestCondition {
        type_: "Approved".into(),
        status: "True".into(),
        reason: Some("AutoApprovedByHubCSRApprovingController".into()),
        message: Some("Auto approving addon agent certificate.".into()),
        ..Default::default()
    };
    tracing::info!(csr = %name, "approving the add-on agent's certificate request");
    let patch = Patch::Merge(preconditioned(
        json!({"status": {"conditions": [condition]}}),
        resource_version.as_deref(),
    ));
    let csrs = Api::<CertificateSigningRequest>::all(client.clone());
    ignore_gone(
        csrs.patch_approval(name, &PatchParams::default(), &patch)
            .await,
    )
}
