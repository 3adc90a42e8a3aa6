//! Applying YAML manifests the way `kubectl apply --server-side` does: each document's kind
//! is looked up by discovery and the object is applied with a field manager (forced), so tests
//! install shipped files (RBAC, rendered works) exactly as written.

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::Error;

/// Applies every document of `yaml`. A namespaced object without a namespace goes to
/// `namespace`.
pub async fn apply_yaml(client: &Client, yaml: &str, namespace: &str) -> Result<(), Error> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).map_err(|e| Error::Parse {
        file: "manifests".into(),
        message: e.to_string(),
    })?;
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        apply(client, &doc, namespace).await?;
    }
    Ok(())
}

/// Applies one object (JSON), as [`apply_yaml`] does each document.
pub async fn apply(client: &Client, obj: &Value, namespace: &str) -> Result<(), Error> {
    let text = |k: &str| obj[k].as_str().unwrap_or_default().to_owned();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if kind.is_empty() || name.is_empty() {
        return Err(Error::Invalid(format!(
            "a manifest without kind or name: {obj}"
        )));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(namespace);
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    api.patch(
        name,
        &PatchParams::apply("testenv").force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}
