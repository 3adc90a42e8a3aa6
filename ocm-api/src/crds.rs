//! Every kind this crate defines, as a CRD generated from the Rust types: what `crdgen` (a
//! tool binary of `tests/e2e`) prints and what the generated-CRD tests install.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube_core::CustomResourceExt;

use crate::{
    AddOnDeploymentConfig, AddOnPlacementScore, ClusterManagementAddOn, ManagedCluster,
    ManagedClusterAddOn, ManagedClusterSet, ManagedClusterSetBinding, ManifestWork, Placement,
    PlacementDecision,
};

/// The CRDs of this project's own kinds (no upstream counterpart), in a stable order. The same
/// zero-default clean-up applies: a Go client reads them too.
pub fn ours() -> Vec<CustomResourceDefinition> {
    [crate::scoring::ScoreDefinition::crd()]
        .into_iter()
        .map(with_upstream_defaults)
        .collect()
}

/// The CRDs of every upstream OCM kind in this crate, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        ManagedCluster::crd(),
        ManagedClusterSet::crd(),
        ManagedClusterSetBinding::crd(),
        Placement::crd(),
        PlacementDecision::crd(),
        AddOnPlacementScore::crd(),
        ClusterManagementAddOn::crd(),
        ManagedClusterAddOn::crd(),
        AddOnDeploymentConfig::crd(),
        ManifestWork::crd(),
    ]
    .into_iter()
    .map(with_upstream_defaults)
    .collect()
}

/// Also restores the `status` enum of metav1.Condition, which k8s-openapi's schema lacks.
///
/// Decoding mirrors Go (a missing field is its zero value), so fields carry `#[serde(default)]`,
/// and schemars turns each into a schema `default` of that zero value: `""` against an enum or
/// a pattern, `{type: ""}` for a struct. The apiserver refuses such CRDs, and the defaults would
/// fill objects with values upstream never writes. So zero defaults go; the defaults upstream's
/// CRDs do have stay (ours are set with `extend("default" = …)` and are not zero, but for the
/// few listed here, which schemars cannot express).
fn with_upstream_defaults(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    /// (kind, property path, default) that upstream's CRDs have and a zero-default strip or
    /// schemars' field-level default would lose.
    const UPSTREAM: &[(&str, &str, &str)] = &[
        ("Placement", "status.decisionGroups[].clusterCount", "0"),
        (
            "ClusterManagementAddOn",
            "spec.supportedConfigs[].group",
            r#""""#,
        ),
        (
            "ClusterManagementAddOn",
            "spec.installStrategy.placements[].configs[].group",
            r#""""#,
        ),
        (
            "ClusterManagementAddOn",
            "status.defaultconfigReferences[].group",
            r#""""#,
        ),
        (
            "ClusterManagementAddOn",
            "status.installProgressions[].configReferences[].group",
            r#""""#,
        ),
        (
            "ClusterManagementAddOn",
            "spec.installStrategy.placements[].rolloutStrategy.all.maxFailures",
            "0",
        ),
        (
            "ClusterManagementAddOn",
            "spec.installStrategy.placements[].rolloutStrategy.progressive.maxFailures",
            "0",
        ),
        (
            "ClusterManagementAddOn",
            "spec.installStrategy.placements[].rolloutStrategy.progressivePerGroup.maxFailures",
            "0",
        ),
        ("ManagedClusterAddOn", "spec.configs[].group", r#""""#),
        (
            "ManagedClusterAddOn",
            "status.configReferences[].group",
            r#""""#,
        ),
        (
            "ManagedClusterAddOn",
            "status.supportedConfigs[].group",
            r#""""#,
        ),
        (
            "ManagedClusterSet",
            "spec",
            r#"{"clusterSelector":{"selectorType":"ExclusiveClusterSetLabel"}}"#,
        ),
        (
            "ManagedClusterSet",
            "spec.clusterSelector",
            r#"{"selectorType":"ExclusiveClusterSetLabel"}"#,
        ),
    ];

    fn is_zero(v: &serde_json::Value) -> bool {
        use serde_json::Value::*;
        match v {
            Null => true,
            Bool(b) => !b,
            Number(n) => n.as_f64() == Some(0.0),
            String(s) => s.is_empty(),
            Array(a) => a.is_empty(),
            Object(o) => o.values().all(is_zero),
        }
    }

    fn walk(schema: &mut JSONSchemaProps, path: &str, kind: &str) {
        if schema.default.as_ref().is_some_and(|d| is_zero(&d.0)) {
            schema.default = None;
        }
        if let Some((_, _, json)) = UPSTREAM.iter().find(|(k, p, _)| *k == kind && *p == path) {
            schema.default = serde_json::from_str(json).ok().map(JSON);
        }
        // k8s-openapi's Condition schema has no enum on `status`; metav1.Condition's has.
        if path.ends_with("conditions[].status") {
            schema.enum_ = Some(["True", "False", "Unknown"].map(|s| JSON(s.into())).into());
        }
        if let Some(props) = schema.properties.as_mut() {
            for (name, prop) in props.iter_mut() {
                let sub = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                walk(prop, &sub, kind);
            }
        }
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
            walk(items, &format!("{path}[]"), kind);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(values)) = schema.additional_properties.as_mut() {
            walk(values, &format!("{path}{{}}"), kind);
        }
    }

    let mut crd = crd;
    let kind = crd.spec.names.kind.clone();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            walk(schema, "", &kind);
        }
    }
    crd
}

/// CRDs as one multi-document YAML stream.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(crd)?);
    }
    Ok(out)
}
