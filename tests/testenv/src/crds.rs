//! Installing CRDs and waiting until they are served; per-test namespaces.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

use crate::{Error, paths};

const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads every CRD from the YAML files in `dir` (multi-document files allowed), sorted by file.
pub fn crds_from_dir(dir: &Path) -> Result<Vec<CustomResourceDefinition>, Error> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(Error::io(format!(
            "read {} (run tests/control-plane/build.sh)",
            dir.display()
        )))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(Error::io(format!("read {}", file.display())))?;
        let docs: Vec<CustomResourceDefinition> =
            serde_saphyr::from_multiple(&text).map_err(|e| Error::Parse {
                file: file.display().to_string(),
                message: e.to_string(),
            })?;
        out.extend(docs);
    }
    Ok(out)
}

/// The upstream OCM CRDs of the pinned `open-cluster-management.io/api` version.
pub fn upstream_crds() -> Result<Vec<CustomResourceDefinition>, Error> {
    crds_from_dir(&paths::upstream_crds_dir())
}

/// Applies the CRDs (server-side apply, so a re-install is harmless), then waits until each is
/// `Established` and its resources answer a list for every served version.
pub async fn install_crds(
    client: &Client,
    crds: Vec<CustomResourceDefinition>,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("testenv").force();
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut crd = crd.clone();
        crd.metadata.resource_version = None;
        crd.metadata.managed_fields = None;
        crd.status = None;
        api.patch(&name, &pp, &Patch::Apply(&crd)).await?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(Error::NotReady {
                    what: format!("CRD {name}"),
                    seconds: ESTABLISH_TIMEOUT.as_secs(),
                    detail: format!(": {e}"),
                });
            }
            Err(_) => {
                return Err(Error::NotReady {
                    what: format!("CRD {name} Established"),
                    seconds: ESTABLISH_TIMEOUT.as_secs(),
                    detail: String::new(),
                });
            }
        }
        wait_served(client, crd).await?;
    }
    Ok(())
}

/// `Established` can come a moment before the handler serves requests: list until it answers.
async fn wait_served(client: &Client, crd: &CustomResourceDefinition) -> Result<(), Error> {
    let spec = &crd.spec;
    for version in spec.versions.iter().filter(|v| v.served) {
        let ar = ApiResource {
            group: spec.group.clone(),
            version: version.name.clone(),
            api_version: format!("{}/{}", spec.group, version.name),
            kind: spec.names.kind.clone(),
            plural: spec.names.plural.clone(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let deadline = Instant::now() + ESTABLISH_TIMEOUT;
        loop {
            match api.list(&ListParams::default().limit(1)).await {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(Error::NotReady {
                        what: format!("{}/{} {}", spec.group, version.name, spec.names.plural),
                        seconds: ESTABLISH_TIMEOUT.as_secs(),
                        detail: format!(": {e}"),
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    Ok(())
}

/// Creates a namespace named `<prefix>-<n>`, unique within this test binary, and returns its
/// name. Tests that share a control plane stay apart by working in their own namespaces.
pub async fn namespace(client: &Client, prefix: &str) -> Result<String, Error> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let name = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

/// Makes the served OCM CRDs those of OCM 1.2 (open-cluster-management-io/api v1.2.0), whose
/// schemas predate `decisions[].score` on PlacementDecisions and `lastScoreUpdateTime` on
/// Placements: the two fields are removed from every version's schema. Returns once
/// `published` says the apiserver's OpenAPI document for `cluster.open-cluster-management.io/v1beta1`
/// shows the change (what a controller reads at start), or fails after a minute.
pub async fn as_ocm_1_2(
    client: &Client,
    published: impl Fn(&serde_json::Value) -> bool,
) -> Result<(), Error> {
    drop_field(
        client,
        "placementdecisions.cluster.open-cluster-management.io",
        "/properties/status/properties/decisions/items/properties",
        "score",
    )
    .await?;
    drop_field(
        client,
        "placements.cluster.open-cluster-management.io",
        "/properties/status/properties",
        "lastScoreUpdateTime",
    )
    .await?;
    let deadline = Instant::now() + ESTABLISH_TIMEOUT;
    loop {
        let request =
            http::Request::get("/openapi/v3/apis/cluster.open-cluster-management.io/v1beta1")
                .body(Vec::new())
                .map_err(|e| Error::Invalid(format!("an OpenAPI request: {e}")))?;
        let text = client.request_text(request).await.unwrap_or_default();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if published(&doc) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NotReady {
                what: "the OCM 1.2 CRDs in the apiserver's OpenAPI document".into(),
                seconds: ESTABLISH_TIMEOUT.as_secs(),
                detail: String::new(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Removes `field` from the `properties` at `path` (a JSON pointer below each version's
/// schema) of CRD `name`.
async fn drop_field(client: &Client, name: &str, path: &str, field: &str) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get(name).await?;
    let mut value = serde_json::to_value(&crd)
        .map_err(|e| Error::Invalid(format!("CRD {name} as JSON: {e}")))?;
    if let Some(versions) = value["spec"]["versions"].as_array_mut() {
        for version in versions {
            let schema = &mut version["schema"]["openAPIV3Schema"];
            if let Some(serde_json::Value::Object(props)) = schema.pointer_mut(path) {
                props.remove(field);
            }
        }
    }
    let crd: CustomResourceDefinition = serde_json::from_value(value)
        .map_err(|e| Error::Invalid(format!("CRD {name} from JSON: {e}")))?;
    crds.replace(name, &PostParams::default(), &crd).await?;
    Ok(())
}
