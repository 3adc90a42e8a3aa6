//! An explicit JSON `null` for an optional field decodes as if the field were missing, as Go's
//! decoder reads it (Go clients write `null` for every nil slice and map without `omitempty`).
//! No apiserver needed.
//!
//! Schema-driven, so new fields are covered without touching this file: for each kind, a
//! maximal object (every field of the schema set, lists with one item, maps with one entry) is
//! built from the CRD schema, ours (`ocm_api::crds::all`) and upstream's, with `metadata` as
//! ObjectMeta's schema. Then for every optional property (not in its object's `required`), at
//! any depth, inside list items and map values too, the object with that property `null`
//! must decode to the same value as the object without it (compared re-encoded, so a CRD
//! default that `null` missed would show). So must the object with every optional field
//! `null` at once (but those holding other fields, kept so that the fields inside are `null`
//! too) against the object without them.
//!
//! Left out, on purpose:
//! - the root `metadata` and `spec` themselves (the fields inside them are checked): kube's
//!   derive makes both required on the root type, so missing and `null` are both refused; the
//!   debug endpoint reads either as the empty one.
//! - the inside of free-form values (`x-kubernetes-preserve-unknown-fields`, embedded
//!   resources: a ManifestWork's manifests): they are raw JSON, kept as written, `null`s too.
//!
//! Also: the objects Go's `encoding/json` writes (`fixtures/go-json/`, made by its `gen.sh`)
//! decode, to the same value as with their `null`s read as Go reads them.

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

mod common;

use std::collections::BTreeSet;

use common::{fixture_path, storage_schema, upstream_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ocm_api::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// Decodes into the kind's type and encodes again: the value compared.
type Decode = fn(Value) -> Result<Value, String>;

fn decoder(kind: &str) -> Decode {
    fn via<K: DeserializeOwned + Serialize>(v: Value) -> Result<Value, String> {
        let typed: K = serde_json::from_value(v).map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(typed).unwrap())
    }
    match kind {
        "ManagedCluster" => via::<ManagedCluster>,
        "ManagedClusterSet" => via::<ManagedClusterSet>,
        "ManagedClusterSetBinding" => via::<ManagedClusterSetBinding>,
        "Placement" => via::<Placement>,
        "PlacementDecision" => via::<PlacementDecision>,
        "AddOnPlacementScore" => via::<AddOnPlacementScore>,
        "ClusterManagementAddOn" => via::<ClusterManagementAddOn>,
        "ManagedClusterAddOn" => via::<ManagedClusterAddOn>,
        "AddOnDeploymentConfig" => via::<AddOnDeploymentConfig>,
        "ManifestWork" => via::<ManifestWork>,
        other => panic!("no type for kind {other}: add it here"),
    }
}

/// ObjectMeta's schema, as schemars derives it from k8s-openapi (the CRDs leave `metadata`
/// to the apiserver).
fn object_meta_schema() -> JSONSchemaProps {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let schema = generator.into_root_schema_for::<ObjectMeta>();
    serde_json::from_value(schema.to_value()).unwrap()
}

/// The kind's storage schema with `metadata` described.
fn with_metadata(schema: &JSONSchemaProps) -> JSONSchemaProps {
    let mut schema = schema.clone();
    schema
        .properties
        .get_or_insert_default()
        .insert("metadata".into(), object_meta_schema());
    schema
}

/// Raw JSON: not walked, not nulled inside.
fn free_form(s: &JSONSchemaProps) -> bool {
    s.x_kubernetes_preserve_unknown_fields == Some(true)
        || s.x_kubernetes_embedded_resource == Some(true)
}

fn items(s: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &s.items {
        Some(JSONSchemaPropsOrArray::Schema(items)) => Some(items),
        _ => None,
    }
}

fn values(s: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &s.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(values)) => Some(values),
        _ => None,
    }
}

/// A value for every field of the schema, recursively.
fn maximal(s: &JSONSchemaProps) -> Value {
    if s.x_kubernetes_embedded_resource == Some(true) {
        return json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "cm", "namespace": "default"},
                      "data": {"key": "value"}});
    }
    if s.x_kubernetes_preserve_unknown_fields == Some(true) {
        return json!({"free": {"form": ["x"]}});
    }
    if s.x_kubernetes_int_or_string == Some(true) {
        // A string reads as both an IntOrString and a Quantity.
        return json!("1");
    }
    if let Some(first) = s.enum_.as_ref().and_then(|e| e.first()) {
        return first.0.clone();
    }
    match s.type_.as_deref() {
        Some("string") => match s.format.as_deref() {
            Some("date-time") => json!("2024-01-02T03:04:05Z"),
            Some("byte") => json!("YQ=="),
            _ => json!("x"),
        },
        Some("integer") => {
            let mut n = 1.0_f64;
            if let Some(min) = s.minimum {
                n = n.max(min);
            }
            if let Some(max) = s.maximum {
                n = n.min(max);
            }
            json!(n as i64)
        }
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        Some("array") => json!([items(s).map(maximal).unwrap_or(json!("x"))]),
        Some("object") | None => {
            let mut out = Map::new();
            for (name, sub) in s.properties.iter().flatten() {
                out.insert(name.clone(), maximal(sub));
            }
            if let Some(values) = values(s) {
                out.insert("key".into(), maximal(values));
            }
            if s.properties.is_none() && values(s).is_none() {
                // An object of unknown shape (managedFields' fieldsV1).
                out.insert("f:any".into(), json!({}));
            }
            Value::Object(out)
        }
        Some(other) => panic!("no value for schema type {other}"),
    }
}

/// One step of a path: a property, every item of a list, every value of a map.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Field(String),
    Items,
    Values,
}

type Path = Vec<Step>;

fn show(path: &Path) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(name) if out.is_empty() => out.push_str(name),
            Step::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Step::Items => out.push_str("[]"),
            Step::Values => out.push_str("{}"),
        }
    }
    out
}

/// Every optional property's path, and the schema there.
fn optional_paths<'s>(
    s: &'s JSONSchemaProps,
    prefix: &Path,
    out: &mut Vec<(Path, &'s JSONSchemaProps)>,
) {
    if free_form(s) {
        return;
    }
    let required: BTreeSet<&str> = s.required.iter().flatten().map(String::as_str).collect();
    for (name, sub) in s.properties.iter().flatten() {
        let mut path = prefix.clone();
        path.push(Step::Field(name.clone()));
        let root_required_by_kube =
            prefix.is_empty() && matches!(name.as_str(), "metadata" | "spec");
        if !required.contains(name.as_str()) && !root_required_by_kube {
            out.push((path.clone(), sub));
        }
        optional_paths(sub, &path, out);
    }
    if let Some(items) = items(s) {
        let mut path = prefix.clone();
        path.push(Step::Items);
        optional_paths(items, &path, out);
    }
    if let Some(values) = values(s) {
        let mut path = prefix.clone();
        path.push(Step::Values);
        optional_paths(values, &path, out);
    }
}

/// Applies `edit` to the object holding the path's last field, with that field's name, at
/// every place the path reaches (each list item, each map value).
fn edit_at(v: &mut Value, path: &[Step], edit: &impl Fn(&mut Map<String, Value>, &str)) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    match first {
        Step::Field(name) if rest.is_empty() => {
            if let Some(object) = v.as_object_mut() {
                edit(object, name);
            }
        }
        Step::Field(name) => {
            if let Some(next) = v.get_mut(name.as_str()) {
                edit_at(next, rest, edit);
            }
        }
        Step::Items => {
            for item in v.as_array_mut().into_iter().flatten() {
                edit_at(item, rest, edit);
            }
        }
        Step::Values => {
            for value in v.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
                edit_at(value, rest, edit);
            }
        }
    }
}

fn set_null(map: &mut Map<String, Value>, name: &str) {
    if let Some(field) = map.get_mut(name) {
        *field = Value::Null;
    }
}

fn remove(map: &mut Map<String, Value>, name: &str) {
    map.remove(name);
}

/// Whether nulling a field whose schema is `s` would also wipe optional fields inside it
/// (an object with properties, or a list or map of such): for the all-at-once check, those
/// stay so that the fields inside are nulled too.
fn holds_fields(s: &JSONSchemaProps) -> bool {
    if free_form(s) {
        return false;
    }
    s.properties.as_ref().is_some_and(|p| !p.is_empty())
        || items(s).is_some_and(holds_fields)
        || values(s).is_some_and(holds_fields)
}

struct Checked {
    paths: usize,
    /// One per failing path.
    failures: Vec<String>,
    /// The all-at-once check's, if it fails.
    all_at_once: Option<String>,
}

/// The whole check on one schema of one kind.
fn check_schema(kind: &str, source: &str, schema: &JSONSchemaProps) -> Checked {
    let decode = decoder(kind);
    let full = maximal(schema);
    let mut failures = Vec::new();
    if let Err(e) = decode(full.clone()) {
        failures.push(format!(
            "{kind} ({source}): the maximal object does not decode: {e}"
        ));
        return Checked {
            paths: 0,
            failures,
            all_at_once: None,
        };
    }
    let mut paths = Vec::new();
    optional_paths(schema, &Vec::new(), &mut paths);
    for (path, _) in &paths {
        let (mut nulled, mut removed) = (full.clone(), full.clone());
        edit_at(&mut nulled, path, &set_null);
        edit_at(&mut removed, path, &remove);
        match (decode(nulled), decode(removed)) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(a), Ok(b)) => failures.push(format!(
                "{kind} ({source}) {}: null decodes to {a} but missing to {b}",
                show(path)
            )),
            (Err(e), _) => failures.push(format!(
                "{kind} ({source}) {}: null refused: {e}",
                show(path)
            )),
            (Ok(_), Err(e)) => failures.push(format!(
                "{kind} ({source}) {}: missing refused: {e}",
                show(path)
            )),
        }
    }

    // All at once: a field holding others stays, and they are nulled.
    let (mut nulled, mut removed) = (full.clone(), full);
    let all: Vec<&Path> = paths
        .iter()
        .filter(|(_, s)| !holds_fields(s))
        .map(|(p, _)| p)
        .collect();
    for path in &all {
        edit_at(&mut nulled, path, &set_null);
        edit_at(&mut removed, path, &remove);
    }
    let all_at_once = match (decode(nulled), decode(removed)) {
        (Ok(a), Ok(b)) if a == b => None,
        (a, b) => Some(format!(
            "{kind} ({source}): with all {} fields null: {a:?}; missing: {b:?}",
            all.len()
        )),
    };
    Checked {
        paths: paths.len(),
        failures,
        all_at_once,
    }
}

#[test]
fn a_null_optional_field_decodes_as_a_missing_one() {
    let mut failures = Vec::new();
    let mut all_at_once = Vec::new();
    let mut counts = Vec::new();
    let mut total = 0;
    for ours in ocm_api::crds::all() {
        let kind = ours.spec.names.kind.clone();
        let upstream = upstream_crd(&ours.spec.group, &ours.spec.names.plural);
        for (source, crd) in [("our CRD", &ours), ("upstream CRD", &upstream)] {
            let checked = check_schema(&kind, source, &with_metadata(storage_schema(crd)));
            counts.push(format!("{kind} ({source}): {}", checked.paths));
            total += checked.paths;
            failures.extend(checked.failures);
            all_at_once.extend(checked.all_at_once);
        }
    }
    println!(
        "optional field paths checked: {total}\n{}",
        counts.join("\n")
    );
    assert!(
        failures.is_empty() && all_at_once.is_empty(),
        "{} of {total} optional field paths fail, and {} of {} schemas with all at once:\n{}\n{}",
        failures.len(),
        all_at_once.len(),
        counts.len(),
        failures.join("\n"),
        all_at_once.join("\n")
    );
    // Guards the walk itself: every kind has optional fields, metadata's among them.
    assert!(
        total > 1000,
        "only {total} paths: is the schema walk broken?"
    );
}

#[test]
fn the_walk_reaches_list_items_map_values_and_metadata() {
    let placement = ocm_api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "Placement")
        .unwrap();
    let schema = with_metadata(storage_schema(&placement));
    let mut paths = Vec::new();
    optional_paths(&schema, &Vec::new(), &mut paths);
    let shown: BTreeSet<String> = paths.iter().map(|(p, _)| show(p)).collect();
    for expected in [
        "status",
        "status.conditions",
        "status.decisionGroups[].decisions",
        "spec.predicates[].requiredClusterSelector.labelSelector.matchExpressions[].values",
        "spec.prioritizerPolicy.configurations[].weight",
        "metadata.creationTimestamp",
        "metadata.ownerReferences[].controller",
        "metadata.managedFields[].fieldsV1",
    ] {
        assert!(shown.contains(expected), "{expected} not walked");
    }
    assert!(shown.contains("spec.predicates[].requiredClusterSelector"));
    // Required on the root type (kube's derive), so left out; the fields inside are walked.
    for left_out in ["metadata", "spec"] {
        assert!(!shown.contains(left_out), "{left_out}");
    }

    // In a ManagedCluster, map values (capacity) are reached too.
    let cluster = ocm_api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManagedCluster")
        .unwrap();
    let full = maximal(storage_schema(&cluster));
    assert_eq!(full["status"]["capacity"], json!({"key": "1"}));
}

#[test]
fn custom_defaults_apply_to_null_too() {
    let spec: PlacementSpec = serde_json::from_value(json!({
        "prioritizerPolicy": {"configurations": [{"scoreCoordinate": {"builtIn": "Steady"}, "weight": null}]},
        "spreadPolicy": {"spreadConstraints": [
            {"topologyKey": "zone", "topologyKeyType": "Label", "maxSkew": null}]}
    }))
    .unwrap();
    assert_eq!(spec.prioritizer_policy.configurations[0].weight, 1);
    assert_eq!(spec.spread_policy.spread_constraints[0].max_skew, 1);
    let cluster: ManagedClusterSpec =
        serde_json::from_value(json!({"leaseDurationSeconds": null})).unwrap();
    assert_eq!(cluster.lease_duration_seconds, 60);
    let config: AddOnDeploymentConfigSpec =
        serde_json::from_value(json!({"agentInstallNamespace": null})).unwrap();
    assert_eq!(
        config.agent_install_namespace,
        "open-cluster-management-agent-addon"
    );
    let addon: ClusterManagementAddOnSpec = serde_json::from_value(json!({
        "installStrategy": {"type": null, "placements": [
            {"namespace": "n", "name": "p", "rolloutStrategy": {"type": null}}]}
    }))
    .unwrap();
    assert_eq!(addon.install_strategy.type_, "Manual");
    let out = serde_json::to_value(&addon).unwrap();
    assert_eq!(
        out["installStrategy"]["placements"][0]["rolloutStrategy"],
        json!({"type": "All"})
    );
    let work: ManifestWorkSpec = serde_json::from_value(json!({
        "deleteOption": {"propagationPolicy": null},
        "manifestConfigs": [{
            "resourceIdentifier": {"resource": "r", "name": "n"},
            "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {
                "ignoreFields": [{"condition": null, "jsonPaths": [".a"]}]}}
        }]
    }))
    .unwrap();
    assert_eq!(work.delete_option.unwrap().propagation_policy, "Foreground");
    let update = work.manifest_configs[0].update_strategy.as_ref().unwrap();
    assert_eq!(
        update.server_side_apply.as_ref().unwrap().ignore_fields[0].condition,
        "OnSpokePresent"
    );
}

#[test]
fn required_lists_go_writes_as_null_are_empty_but_still_required() {
    let d: PlacementDecision = serde_json::from_value(json!({
        "metadata": {"name": "d"}, "status": {"decisions": null}
    }))
    .unwrap();
    assert!(d.status.unwrap().decisions.is_empty());
    let err = serde_json::from_value::<PlacementDecision>(json!({
        "metadata": {"name": "d"}, "status": {}
    }))
    .unwrap_err();
    assert!(err.to_string().contains("decisions"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// What Go writes

/// `v` as Go reads it into the kind's types: a `null` optional field is dropped, a `null`
/// required one is its type's zero value. Free-form values are left as they are.
fn go_read(v: &mut Value, s: &JSONSchemaProps) {
    if free_form(s) {
        return;
    }
    match v {
        Value::Object(map) => {
            let required: BTreeSet<&str> =
                s.required.iter().flatten().map(String::as_str).collect();
            map.retain(|name, field| !field.is_null() || required.contains(name.as_str()));
            for (name, field) in map.iter_mut() {
                let sub = s
                    .properties
                    .as_ref()
                    .and_then(|p| p.get(name))
                    .or_else(|| values(s));
                let Some(sub) = sub else { continue };
                if field.is_null() {
                    *field = match sub.type_.as_deref() {
                        Some("array") => json!([]),
                        Some("object") => json!({}),
                        Some("string") => json!(""),
                        Some("integer") => json!(0),
                        Some("boolean") => json!(false),
                        other => panic!("no zero value for a required {other:?} ({name})"),
                    };
                }
                go_read(field, sub);
            }
        }
        Value::Array(list) => {
            if let Some(items) = items(s) {
                for item in list {
                    go_read(item, items);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn objects_go_marshalled_decode() {
    let schemas: Vec<(String, JSONSchemaProps)> = ocm_api::crds::all()
        .iter()
        .map(|c| (c.spec.names.kind.clone(), with_metadata(storage_schema(c))))
        .collect();
    let mut seen = BTreeSet::new();
    let mut nulls = 0;
    for file in [
        "list.json",
        "zero-values.json",
        "zero-items.json",
        "placement.json",
    ] {
        let path = fixture_path(&format!("go-json/{file}"));
        let text = std::fs::read_to_string(&path).unwrap();
        nulls += text.matches("null").count();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let items = match doc["kind"].as_str() {
            Some("List") => doc["items"].as_array().unwrap().clone(),
            // The helper's Placement carries no apiVersion and kind.
            _ => vec![doc],
        };
        for item in items {
            let kind = item["kind"].as_str().unwrap_or("Placement").to_owned();
            let (_, schema) = schemas.iter().find(|(k, _)| *k == kind).unwrap();
            let decode = decoder(&kind);
            let got = decode(item.clone())
                .unwrap_or_else(|e| panic!("{file}: {kind} from Go refused: {e}\n{item}"));
            let mut as_go_reads = item.clone();
            go_read(&mut as_go_reads, schema);
            assert_eq!(
                got,
                decode(as_go_reads).unwrap(),
                "{file}: {kind} decodes otherwise than Go reads it"
            );
            seen.insert(kind);
        }
    }
    assert!(nulls > 20, "the Go fixtures should hold many nulls");
    let all: BTreeSet<String> = schemas.into_iter().map(|(k, _)| k).collect();
    assert_eq!(seen, all, "a Go-marshalled object of every kind");
}
