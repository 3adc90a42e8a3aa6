//! The deploy ManifestWork: as rendered, as observed, and whether they match.

use super::*;

/// Upstream's `config-spec-hash` annotation value: `{"<resource>.<group>/<ns>/<name>": hash}`.
pub(super) fn config_spec_hash_annotation(key: &ConfigKey, hash: &str) -> String {
    let map = BTreeMap::from([(
        format!(
            "{ADC_RESOURCE}.{}/{}/{}",
            group::ADDON,
            key.namespace,
            key.name
        ),
        hash.to_owned(),
    )]);
    serde_json::to_string(&map).unwrap_or_default()
}

pub(super) fn work_object(
    settings: &Settings,
    cluster: &str,
    rendered: &Rendered,
    config: Option<(&ConfigKey, &str)>,
    owner: OwnerReference,
) -> ManifestWork {
    let mut w = ManifestWork::new(&settings.work_name(), rendered.spec.clone());
    w.metadata.namespace = Some(cluster.to_owned());
    w.metadata.labels = Some(BTreeMap::from([(
        label::ADDON_NAME.to_owned(),
        settings.addon.clone(),
    )]));
    let mut annotations = BTreeMap::from([(RENDERING_HASH.to_owned(), rendered.hash.clone())]);
    if let Some((key, hash)) = config {
        annotations.insert(
            annotation::CONFIG_SPEC_HASH.to_owned(),
            config_spec_hash_annotation(key, hash),
        );
    }
    w.metadata.annotations = Some(annotations);
    w.metadata.owner_references = Some(vec![owner]);
    w
}

pub(super) fn annotation_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The observed work carries this rendering and config (by their hashes).
pub(super) fn work_current(
    observed: &ManifestWork,
    rendered: &Rendered,
    config: Option<(&ConfigKey, &str)>,
) -> bool {
    let config = config.map(|(k, h)| config_spec_hash_annotation(k, h));
    annotation_of(&observed.metadata, RENDERING_HASH) == Some(rendered.hash.as_str())
        && annotation_of(&observed.metadata, annotation::CONFIG_SPEC_HASH) == config.as_deref()
}

/// In memory only, on a watched work: the [`render::spec_hash`] of its spec, taken when it was
/// received, whose manifests are then dropped (they are most of a work's size, and nothing
/// else here reads them).
pub const OBSERVED_SPEC_HASH: &str = "addon.ocm-placement.io/observed-spec-hash";

/// A work as the plan reads it: the hash of its spec under [`OBSERVED_SPEC_HASH`] instead of
/// its manifests (most of its size); manifestConfigs, metadata and status stay.
pub fn slim_work(w: &mut ManifestWork) {
    if let Ok(hash) = render::spec_hash(&w.spec) {
        w.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(OBSERVED_SPEC_HASH.to_owned(), hash);
        w.spec.workload.manifests = Vec::new();
    }
}

/// The observed work is the rendering: same spec (by hash), our label, our owner among its
/// owners.
pub(super) fn work_matches(
    settings: &Settings,
    observed: &ManifestWork,
    rendered: &Rendered,
    owner: &OwnerReference,
) -> bool {
    let label_ok = observed
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::ADDON_NAME))
        == Some(&settings.addon);
    let owner_ok = observed
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner.uid && o.controller == owner.controller);
    let spec_hash = match annotation_of(&observed.metadata, OBSERVED_SPEC_HASH) {
        Some(h) => Some(h.to_owned()),
        None => render::spec_hash(&observed.spec).ok(),
    };
    label_ok && owner_ok && spec_hash.as_deref() == Some(rendered.spec_hash.as_str())
}
