//! Writes a pass's plan, each write fenced on the objects as the pass saw them.

use super::*;

pub(super) fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(super) fn exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

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
        DeleteParams {
            preconditions: uid
                .and_then(|o| o.meta().uid.clone())
                .map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        }
    }
}

pub(super) async fn execute(
    client: &Client,
    settings: &Settings,
    action: Action,
    fence: &mut Fence<'_>,
) -> Result<(), kube::Error> {
    let apply = PatchParams::apply(MANAGER).force();
    let ignore_gone = |r: Result<(), kube::Error>| match r {
        Err(e) if gone(&e) => Ok(()),
        other => other,
    };
    match action {
        Action::CreateCma(c) => {
            match Api::<ClusterManagementAddOn>::all(client.clone())
                .create(&PostParams::default(), &c)
                .await
            {
                Err(e) if exists(&e) => Ok(()),
                r => r.map(|c| fence.wrote_cma(&c)),
            }
        }
        Action::PatchCmaSupportedConfigs(configs) => {
            Api::<ClusterManagementAddOn>::all(client.clone())
                .patch(
                    &settings.addon,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"resourceVersion": fence.cma},
                        "spec": {"supportedConfigs": configs},
                    })),
                )
                .await
                .map(|c| fence.wrote_cma(&c))
        }
        Action::PatchCmaStatus {
            install_progressions,
            default_config_references,
        } => ignore_gone(
            Api::<ClusterManagementAddOn>::all(client.clone())
                .patch_status(
                    &settings.addon,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"resourceVersion": fence.cma},
                        "status": {
                            "installProgressions": install_progressions,
                            "defaultconfigReferences": default_config_references,
                        },
                    })),
                )
                .await
                .map(drop),
        ),
        Action::CreateMca(m) => {
            let ns = m.metadata.namespace.clone().unwrap_or_default();
            match Api::<ManagedClusterAddOn>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &m)
                .await
            {
                Err(e) if exists(&e) => Ok(()),
                r => r.map(drop),
            }
        }
        Action::DeleteMca { cluster } => ignore_gone(
            Api::<ManagedClusterAddOn>::namespaced(client.clone(), &cluster)
                .delete(
                    &settings.addon,
                    &Fence::delete_params(fence.snap.mcas.get(&cluster)),
                )
                .await
                .map(drop),
        ),
        Action::PatchMcaStatus {
            cluster,
            resource_version,
            status,
        } => {
            let mut body = serde_json::to_value(&status).map_err(kube::Error::SerdeError)?;
            if status.config_references.is_empty()
                && let Some(o) = body.as_object_mut()
            {
                // Merge patch keeps absent keys: clear a config that is no longer used.
                o.insert("configReferences".into(), serde_json::Value::Null);
            }
            ignore_gone(
                Api::<ManagedClusterAddOn>::namespaced(client.clone(), &cluster)
                    .patch_status(
                        &settings.addon,
                        &PatchParams::default(),
                        &Patch::Merge(json!({
                            "metadata": {"resourceVersion": resource_version},
                            "status": body,
                        })),
                    )
                    .await
                    .map(drop),
            )
        }
        Action::ApplyRoleBinding(b) => {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            Api::<RoleBinding>::namespaced(client.clone(), &ns)
                .patch(&settings.permission_name(), &apply, &Patch::Apply(&b))
                .await
                .map(drop)
        }
        Action::DeleteRole { cluster } => ignore_gone(
            Api::<Role>::namespaced(client.clone(), &cluster)
                .delete(
                    &settings.permission_name(),
                    &Fence::delete_params(fence.snap.roles.get(&cluster)),
                )
                .await
                .map(drop),
        ),
        Action::DeleteRoleBinding { cluster } => ignore_gone(
            Api::<RoleBinding>::namespaced(client.clone(), &cluster)
                .delete(
                    &settings.permission_name(),
                    &Fence::delete_params(fence.snap.bindings.get(&cluster)),
                )
                .await
                .map(drop),
        ),
        Action::ApplyWork(w) => {
            let ns = w.metadata.namespace.clone().unwrap_or_default();
            Api::<ManifestWork>::namespaced(client.clone(), &ns)
                .patch(&settings.work_name(), &apply, &Patch::Apply(&w))
                .await
                .map(drop)
        }
        Action::DeleteWork { cluster } => ignore_gone(
            Api::<ManifestWork>::namespaced(client.clone(), &cluster)
                .delete(
                    &settings.work_name(),
                    &Fence::delete_params(fence.snap.works.get(&cluster)),
                )
                .await
                .map(drop),
        ),
        Action::ApproveCsr {
            name,
            resource_version,
        } => {
            let condition = CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("AutoApprovedByHubCSRApprovingController".into()),
                message: Some("Auto approving addon agent certificate.".into()),
                ..Default::default()
            };
            tracing::info!(csr = %name, "approving the add-on agent's certificate request");
            ignore_gone(
                Api::<CertificateSigningRequest>::all(client.clone())
                    .patch_approval(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({
                            "metadata": {"resourceVersion": resource_version},
                            "status": {"conditions": [condition]},
                        })),
                    )
                    .await
                    .map(drop),
            )
        }
    }
}
