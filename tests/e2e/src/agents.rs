//! What stands in for a managed cluster's kubelet beside upstream's real klusterlet
//! (`testenv::ocm_agents`): nodes on the cluster's own apiserver, the rolled-out status of the
//! agent's Deployment, and the files of the `<addon>-hub-kubeconfig` secret that the kubelet
//! would mount for the agent. Shared by the end-to-end test and `fleet`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::fleet::{CLUSTER_LABEL, Error};

/// Where the manager installs the agent unless configured otherwise (its flag's default).
pub const INSTALL_NAMESPACE: &str = testenv::ocm_agents::ADDON_NAMESPACE;

/// The agent's Deployment and service account name for `addon`.
pub fn agent_name(addon: &str) -> String {
    format!("{addon}-agent")
}

/// Two Ready nodes of `cores / 2` CPUs each, named `<cluster>-n0` and `-n1`, labelled with the
/// cluster's name.
pub async fn add_nodes(client: &Client, cluster: &str, cores: u32) -> Result<(), Error> {
    let nodes = Api::<Node>::all(client.clone());
    for i in 0..2 {
        let cpu = format!("{}", cores.div_ceil(2));
        let name = format!("{cluster}-n{i}");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster}},
            "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "500"},
                       "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "500"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))?;
        nodes.create(&PostParams::default(), &node).await?;
        // Play kubelet: the status a create drops, and no not-ready taint.
        nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": node.status})),
            )
            .await?;
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": []}})),
            )
            .await?;
    }
    Ok(())
}

/// Writes the status the deployment controller and kubelet would: every replica of the current
/// generation updated and available. Returns the Deployment as it was before.
pub async fn roll_out(spoke: &Client, deployment: &Deployment) -> Result<(), Error> {
    let ns = deployment.namespace().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or(1);
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    Api::<Deployment>::namespaced(spoke.clone(), &ns)
        .patch_status(
            &deployment.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": generation, "replicas": replicas,
                "updatedReplicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}})),
        )
        .await?;
    Ok(())
}

/// When the registration agent has written `<addon>-hub-kubeconfig` in `namespace` on the
/// cluster: its files written into `dir` (as the kubelet mounts them) and the kubeconfig's path.
pub async fn hub_kubeconfig(
    spoke: &Client,
    addon: &str,
    namespace: &str,
    dir: &Path,
) -> Result<Option<PathBuf>, Error> {
    let Some(secret) = Api::<Secret>::namespaced(spoke.clone(), namespace)
        .get_opt(&format!("{addon}-hub-kubeconfig"))
        .await?
    else {
        return Ok(None);
    };
    let data = secret.data.unwrap_or_default();
    if !data.contains_key("kubeconfig") || !data.contains_key("tls.crt") {
        return Ok(None);
    }
    std::fs::create_dir_all(dir)?;
    for (name, value) in data {
        std::fs::write(dir.join(&name), &value.0)?;
    }
    Ok(Some(dir.join("kubeconfig")))
}
