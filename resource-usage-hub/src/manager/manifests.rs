//! The resource-usage agent's manifests (`addon-manifests/agent/`), embedded at build time and
//! rendered by replacing `{{NAME}}` placeholders; they go to the managed cluster through a
//! ManifestWork. They live with the manager, which ships them (the agent binary never reads
//! them). (The agent's hub permission is no template: a ClusterRole in the chart, bound by the
//! add-on manager with typed objects.)

use std::collections::BTreeMap;

use thiserror::Error;

/// `(file, template)` of what runs on the managed cluster, in apply order.
pub const AGENT: [(&str, &str); 7] = [
    (
        "serviceaccount.yaml",
        include_str!("../../../addon-manifests/agent/serviceaccount.yaml"),
    ),
    (
        "clusterrole.yaml",
        include_str!("../../../addon-manifests/agent/clusterrole.yaml"),
    ),
    (
        "clusterrolebinding.yaml",
        include_str!("../../../addon-manifests/agent/clusterrolebinding.yaml"),
    ),
    (
        "role.yaml",
        include_str!("../../../addon-manifests/agent/role.yaml"),
    ),
    (
        "rolebinding.yaml",
        include_str!("../../../addon-manifests/agent/rolebinding.yaml"),
    ),
    (
        "definitions-configmap.yaml",
        include_str!("../../../addon-manifests/agent/definitions-configmap.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../../addon-manifests/agent/deployment.yaml"),
    ),
];

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("{file}: no value for {{{{{name}}}}}")]
    Missing { file: String, name: String },
    #[error("{file}: an unclosed {{{{")]
    Unclosed { file: String },
    #[error("{file}: not a YAML object after rendering: {message}")]
    Yaml { file: String, message: String },
}

/// Renders `templates` with `values`, each into one object.
pub fn render(
    templates: &[(&str, &str)],
    values: &BTreeMap<&str, String>,
) -> Result<Vec<serde_json::Value>, RenderError> {
    templates
        .iter()
        .map(|(file, template)| {
            let text = substitute(file, template, values)?;
            serde_saphyr::from_str::<serde_json::Value>(&text).map_err(|e| RenderError::Yaml {
                file: (*file).to_owned(),
                message: e.to_string(),
            })
        })
        .collect()
}

fn substitute(
    file: &str,
    template: &str,
    values: &BTreeMap<&str, String>,
) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| RenderError::Unclosed {
            file: file.to_owned(),
        })?;
        let name = after[..end].trim();
        let value = values.get(name).ok_or_else(|| RenderError::Missing {
            file: file.to_owned(),
            name: name.to_owned(),
        })?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> BTreeMap<&'static str, String> {
        [
            ("ADDON_NAME", "resource-usage-collect"),
            ("INSTALL_NAMESPACE", "agent-ns"),
            ("CLUSTER_NAME", "cluster1"),
            ("IMAGE", "example.com/agent:1"),
            ("DEFINITIONS", "\"[]\\n\""),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect()
    }

    #[test]
    fn every_template_renders_to_an_object() {
        let agent = render(&AGENT, &values()).expect("agent manifests");
        let kinds: Vec<&str> = agent.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Deployment"
            ]
        );
        assert_eq!(agent[5]["data"]["definitions.yaml"], "[]\n");
        let args = &agent[6]["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .is_some_and(|a| a.iter().any(|v| v == "--cluster-name=cluster1"))
        );
    }

    #[test]
    fn a_missing_value_is_an_error() {
        let mut v = values();
        v.remove("IMAGE");
        assert_eq!(
            render(&AGENT, &v),
            Err(RenderError::Missing {
                file: "deployment.yaml".into(),
                name: "IMAGE".into()
            })
        );
        assert!(matches!(
            render(&[("x.yaml", "a: {{B")], &v),
            Err(RenderError::Unclosed { .. })
        ));
    }
}
