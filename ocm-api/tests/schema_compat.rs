//! The CRDs generated from our types match upstream's, property by property: the same tree of
//! fields, and the same type, format, enum, default, pattern, bounds and list/map semantics on
//! each. No apiserver needed; upstream's CRDs come from the pinned module in the cache.
//!
//! Known, deliberate differences, not compared:
//! - `required`: kube's derive requires `spec`; upstream marks a few defaulted fields required
//!   (with the default applied first, the two accept the same objects).
//! - Below `conditions[]`, `resources` (ResourceRequirements) and Quantity maps, the schemas
//!   come from k8s-openapi, which leaves out apimachinery's length limits, patterns and the
//!   `claims` list-map markers (the condition `status` enum is restored by `crds::all`).
//! - `x-kubernetes-list-type: atomic` on label-selector lists (k8s-openapi's LabelSelector
//!   schema has no list markers; atomic is the default for such lists in merges anyway).

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

mod common;

use std::collections::BTreeMap;

use common::{storage_schema, storage_version, upstream_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{Value, json};

/// path -> the compared facets of the schema there.
fn facets(schema: &JSONSchemaProps, path: &str, out: &mut BTreeMap<String, Value>) {
    let mut f = json!({
        "type": schema.type_,
        "format": schema.format,
        "enum": schema.enum_,
        "default": schema.default.as_ref().map(|d| d.0.clone()),
        "int-or-string": schema.x_kubernetes_int_or_string,
        "preserve-unknown-fields": schema.x_kubernetes_preserve_unknown_fields,
        "embedded-resource": schema.x_kubernetes_embedded_resource,
        "list-map-keys": schema.x_kubernetes_list_map_keys,
        "map-type": schema.x_kubernetes_map_type,
        "list-type": schema.x_kubernetes_list_type.as_deref().filter(|t| *t != "atomic"),
    });
    let from_k8s_openapi = path.contains("conditions[]")
        || path.contains(".resources.")
        || path.contains("resources{}")
        || path.ends_with("{}");
    if !from_k8s_openapi {
        let bounds = json!({
            "pattern": schema.pattern,
            "minLength": schema.min_length,
            "maxLength": schema.max_length,
            "minimum": schema.minimum,
            "maximum": schema.maximum,
            "maxItems": schema.max_items,
        });
        f.as_object_mut()
            .unwrap()
            .extend(bounds.as_object().unwrap().clone());
    }
    out.insert(path.to_string(), f);
    if path.ends_with(".resources") {
        return; // ResourceRequirements: k8s-openapi's schema, see the module doc
    }
    if let Some(props) = &schema.properties {
        for (name, sub) in props {
            facets(sub, &format!("{path}.{name}"), out);
        }
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
        facets(items, &format!("{path}[]"), out);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &schema.additional_properties {
        facets(values, &format!("{path}{{}}"), out);
    }
}

fn object_facets(schema: &JSONSchemaProps) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (name, sub) in schema.properties.iter().flatten() {
        // apiVersion, kind and metadata are the apiserver's, not ours to define.
        if !matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
            facets(sub, name, &mut out);
        }
    }
    out
}

#[test]
fn generated_crds_match_upstream_field_by_field() {
    let mut problems = Vec::new();
    for ours in ocm_api::crds::all() {
        let upstream = upstream_crd(&ours.spec.group, &ours.spec.names.plural);
        let kind = &ours.spec.names.kind;
        assert_eq!(ours.spec.scope, upstream.spec.scope, "{kind} scope");
        assert_eq!(
            ours.spec.names.short_names, upstream.spec.names.short_names,
            "{kind} short names"
        );
        let stored = storage_version(&upstream);
        assert_eq!(ours.spec.versions.len(), 1);
        assert_eq!(ours.spec.versions[0].name, stored.name, "{kind} version");
        assert_eq!(
            ours.spec.versions[0]
                .subresources
                .as_ref()
                .map(|s| s.status.is_some()),
            stored.subresources.as_ref().map(|s| s.status.is_some()),
            "{kind} status subresource"
        );

        let ours_f = object_facets(storage_schema(&ours));
        let up_f = object_facets(storage_schema(&upstream));
        for path in up_f.keys().filter(|p| !ours_f.contains_key(*p)) {
            problems.push(format!("{kind}.{path}: missing from ours"));
        }
        for path in ours_f.keys().filter(|p| !up_f.contains_key(*p)) {
            problems.push(format!("{kind}.{path}: not upstream"));
        }
        for (path, o) in &ours_f {
            if let Some(u) = up_f.get(path)
                && o != u
            {
                problems.push(format!(
                    "{kind}.{path}:\n    ours     {o}\n    upstream {u}"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} differences:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn generated_printer_columns_match_upstream() {
    for ours in ocm_api::crds::all() {
        let upstream = upstream_crd(&ours.spec.group, &ours.spec.names.plural);
        let stored = storage_version(&upstream);
        let cols = |c: &Option<Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition>>| {
            c.iter()
                .flatten()
                .filter(|c| c.json_path != ".metadata.creationTimestamp")
                .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cols(&ours.spec.versions[0].additional_printer_columns),
            cols(&stored.additional_printer_columns),
            "{} printer columns",
            ours.spec.names.kind
        );
    }
}
