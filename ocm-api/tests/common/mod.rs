//! Helpers shared by the api crate's integration tests: reading fixtures and walking CRD
//! schemas.

#![allow(dead_code)] // each test binary uses a subset

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps,
    JSONSchemaPropsOrArray,
};
use serde_json::Value;

pub fn fixture_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Every YAML document of a fixture file, as JSON.
pub fn fixture_docs(rel: &str) -> Vec<Value> {
    let path = fixture_path(rel);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// The one document of a fixture file.
pub fn fixture(rel: &str) -> Value {
    let mut docs = fixture_docs(rel);
    assert_eq!(docs.len(), 1, "{rel} should hold one document");
    docs.remove(0)
}

/// The object without the fields the server owns or that identify it: what must survive a
/// round trip unchanged.
pub fn body(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
    }
    v
}

/// The storage version of a CRD.
pub fn storage_version(crd: &CustomResourceDefinition) -> &CustomResourceDefinitionVersion {
    crd.spec
        .versions
        .iter()
        .find(|v| v.storage)
        .expect("a CRD has a storage version")
}

/// The storage version's schema of a CRD.
pub fn storage_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    storage_version(crd)
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the storage version has a schema")
}

/// Every property path of a schema, below `prefix`: `spec.taints[].key`, `status.capacity{}`.
/// Free-form parts (preserve-unknown-fields, embedded resources) end the walk.
pub fn schema_paths(schema: &JSONSchemaProps, prefix: &str, out: &mut Vec<String>) {
    if schema.x_kubernetes_preserve_unknown_fields == Some(true)
        || schema.x_kubernetes_embedded_resource == Some(true)
    {
        return;
    }
    if let Some(props) = &schema.properties {
        for (name, sub) in props {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.push(path.clone());
            schema_paths(sub, &path, out);
        }
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
        let path = format!("{prefix}[]");
        schema_paths(items, &path, out);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(values)) =
        &schema.additional_properties
    {
        schema_paths(values, &format!("{prefix}{{}}"), out);
    }
}

/// Whether some value in `v` exists at `path` (arrays: any element; maps `{}`: any value).
pub fn has_path(v: &Value, path: &str) -> bool {
    fn walk(v: &Value, parts: &[&str]) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return true;
        };
        let (name, suffix) = match first.find(['[', '{']) {
            Some(i) => (&first[..i], &first[i..]),
            None => (*first, ""),
        };
        let Some(mut cur) = v.get(name).map(|c| vec![c]) else {
            return false;
        };
        for marker in suffix.split_inclusive([']', '}']) {
            cur = match marker {
                "[]" => cur.iter().filter_map(|c| c.as_array()).flatten().collect(),
                "{}" => cur
                    .iter()
                    .filter_map(|c| c.as_object())
                    .flat_map(|m| m.values())
                    .collect(),
                _ => return false,
            };
        }
        cur.iter().any(|c| walk(c, rest))
    }
    let parts: Vec<&str> = path.split('.').collect();
    walk(v, &parts)
}

/// The schema paths (below `spec` and `status`, and any other top-level field but metadata)
/// that `object` leaves out.
pub fn uncovered_paths(crd: &CustomResourceDefinition, object: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    schema_paths(storage_schema(crd), "", &mut paths);
    paths
        .into_iter()
        .filter(|p| {
            !matches!(
                p.split('.').next(),
                Some("metadata" | "apiVersion" | "kind")
            )
        })
        .filter(|p| !has_path(object, p))
        .collect()
}

/// The upstream CRD with this group and plural.
pub fn upstream_crd(group: &str, plural: &str) -> CustomResourceDefinition {
    testenv::upstream_crds()
        .expect("upstream CRDs (run tests/control-plane/build.sh)")
        .into_iter()
        .find(|c| c.spec.group == group && c.spec.names.plural == plural)
        .unwrap_or_else(|| panic!("no upstream CRD for {plural}.{group}"))
}
