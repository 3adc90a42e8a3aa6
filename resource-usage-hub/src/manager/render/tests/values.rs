//! Variables, image overrides, container IDs, and bad input.

use super::*;

#[test]
fn a_variable_is_a_template_value_and_builtins_win() {
    let templates = [(
        "configmap.yaml",
        "apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: '{{INSTALL_NAMESPACE}}'}
data:
  range: '{{CPU_RANGE}}'
  addon: '{{ADDON_NAME}}'
  cluster: '{{CLUSTER_NAME}}'
  image: '{{IMAGE}}'
",
    )];
    let with = |variables: Vec<CustomizedVariable>| {
        let adc = adc(|a| a.customized_variables = variables);
        render_templates(&templates, &template(), "c1", Some(&adc))
            .map(|r| r.spec.workload.manifests[0].raw["data"].clone())
    };
    assert_eq!(
        with(vec![variable("CPU_RANGE", "0:8")]),
        Ok(
            json!({"range": "0:8", "addon": "resource-usage-collect", "cluster": "c1",
                      "image": IMAGE})
        )
    );
    assert_eq!(
        with(vec![
            variable("CPU_RANGE", "0:8"),
            variable("ADDON_NAME", "evil"),
            variable("CLUSTER_NAME", "evil"),
            variable("IMAGE", "evil"),
            variable("INSTALL_NAMESPACE", "evil"),
        ]),
        Ok(
            json!({"range": "0:8", "addon": "resource-usage-collect", "cluster": "c1",
                      "image": IMAGE})
        )
    );
    assert_eq!(
        with(vec![]),
        Err(RenderError::Template(manifests::RenderError::Missing {
            file: "configmap.yaml".into(),
            name: "CPU_RANGE".into()
        }))
    );
}

/// A customized variable named like a built-in changes nothing: not the templates, not
/// the env.
#[test]
fn builtins_cannot_be_overridden() {
    let baseline = render(&template(), "c1", None).unwrap();
    for builtin in BUILTINS {
        let adc = adc(|a| a.customized_variables = vec![variable(builtin, "evil")]);
        let got = render(&template(), "c1", Some(&adc)).unwrap();
        assert_eq!(got, baseline, "{builtin}");
    }
}

#[test]
fn image_override_follows_upstream() {
    let agent = "quay.io/ocm-placement/resource-usage-agent:test";
    let digest = "quay.io/ocm-placement/agent@sha256:0123456789abcdef";
    let cases: Vec<(&str, Vec<ImageMirror>, &str, &str)> = vec![
        ("no registries", vec![], agent, agent),
        (
            "source prefix replaced by the mirror",
            vec![mirror(
                "quay.io/ocm-placement",
                "registry.example.com/mirror",
            )],
            agent,
            "registry.example.com/mirror/resource-usage-agent:test",
        ),
        (
            "one trailing slash of source and mirror is ignored",
            vec![mirror(
                "quay.io/ocm-placement/",
                "registry.example.com/mirror/",
            )],
            agent,
            "registry.example.com/mirror/resource-usage-agent:test",
        ),
        (
            "a registry-only source keeps the repository path",
            vec![mirror("quay.io", "mirror.local:5000")],
            agent,
            "mirror.local:5000/ocm-placement/resource-usage-agent:test",
        ),
        (
            "a non-matching source",
            vec![mirror("docker.io", "mirror.local")],
            agent,
            agent,
        ),
        (
            "the source is a plain string prefix, as upstream",
            vec![mirror("quay.io/ocm", "mirror.local/ocm2")],
            agent,
            "mirror.local/ocm2-placement/resource-usage-agent:test",
        ),
        (
            "an empty source keeps only the last path segment",
            vec![mirror("", "mirror.local/all")],
            agent,
            "mirror.local/all/resource-usage-agent:test",
        ),
        (
            "an empty source and an image without registry host",
            vec![mirror("", "mirror.local")],
            "nginx:1.27",
            "mirror.local/nginx:1.27",
        ),
        (
            "a source does not match an image without registry host",
            vec![mirror("docker.io", "mirror.local")],
            "library/nginx:1.27",
            "library/nginx:1.27",
        ),
        (
            "a digest image with a source",
            vec![mirror("quay.io/ocm-placement", "mirror.local")],
            digest,
            "mirror.local/agent@sha256:0123456789abcdef",
        ),
        (
            "a digest image with an empty source",
            vec![mirror("", "mirror.local")],
            digest,
            "mirror.local/agent@sha256:0123456789abcdef",
        ),
        (
            "the last matching entry wins",
            vec![
                mirror("quay.io", "first.local"),
                mirror("quay.io/ocm-placement", "last.local"),
            ],
            agent,
            "last.local/resource-usage-agent:test",
        ),
        (
            "a later non-matching entry does not undo a match",
            vec![
                mirror("quay.io", "first.local"),
                mirror("docker.io", "other.local"),
            ],
            agent,
            "first.local/ocm-placement/resource-usage-agent:test",
        ),
        (
            "entries apply to the original image, not to each other's result",
            vec![mirror("quay.io", "a.local"), mirror("a.local", "b.local")],
            agent,
            "a.local/ocm-placement/resource-usage-agent:test",
        ),
        (
            "an empty mirror is ignored, as the API documents",
            vec![mirror("quay.io", ""), mirror("", "/")],
            agent,
            agent,
        ),
    ];
    for (name, registries, image, want) in cases {
        assert_eq!(override_image(&registries, image), want, "{name}");
    }
}

#[test]
fn container_ids_match_with_wildcards_and_the_last_match_wins() {
    // (agent-a/agent, agent-a/sidecar, agent-b/agent) cpu requests; None: the template's.
    type Want = [Option<&'static str>; 3];
    let cases: Vec<(&str, Vec<ContainerResourceRequirements>, Want)> = vec![
        (
            "every deployment container",
            vec![cpu_request("deployments:*:*", "1m")],
            [Some("1m"), Some("1m"), None],
        ),
        (
            "everything",
            vec![cpu_request("*:*:*", "1m")],
            [Some("1m"), Some("1m"), Some("1m")],
        ),
        (
            "a container name anywhere",
            vec![cpu_request("*:*:sidecar", "1m")],
            [None, Some("1m"), None],
        ),
        (
            "one DaemonSet container",
            vec![cpu_request("daemonsets:agent-b:agent", "1m")],
            [None, None, Some("1m")],
        ),
        (
            "a later specific entry beats an earlier wildcard",
            vec![
                cpu_request("*:*:*", "1m"),
                cpu_request("deployments:agent-a:agent", "2m"),
            ],
            [Some("2m"), Some("1m"), Some("1m")],
        ),
        (
            "a later wildcard beats an earlier specific entry",
            vec![
                cpu_request("deployments:agent-a:agent", "2m"),
                cpu_request("*:*:*", "1m"),
            ],
            [Some("1m"), Some("1m"), Some("1m")],
        ),
        (
            "names match whole, not as prefixes",
            vec![cpu_request("deployments:agent:agent", "1m")],
            [None, None, None],
        ),
        (
            "a resource type the agent does not ship",
            vec![cpu_request("pods:*:*", "1m")],
            [None, None, None],
        ),
    ];
    let pointers = [
        "/workload/manifests/2/spec/template/spec/containers/0/resources",
        "/workload/manifests/2/spec/template/spec/containers/1/resources",
        "/workload/manifests/3/spec/template/spec/containers/0/resources",
    ];
    let template_resources = [Some(json!({"limits": {"cpu": "1"}})), None, None];
    for (name, requirements, want) in cases {
        let got = render_shapes(&adc(|a| a.resource_requirements = requirements)).unwrap();
        for ((pointer, want), original) in pointers.iter().zip(want).zip(&template_resources) {
            let want = match want {
                Some(cpu) => Some(json!({"requests": {"cpu": cpu}})),
                None => original.clone(),
            };
            assert_eq!(got.pointer(pointer).cloned(), want, "{name}: {pointer}");
        }
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let bad_id = |id: &str| RenderError::ContainerId { id: id.into() };
    let cases: Vec<(&str, AddOnDeploymentConfigSpec, RenderError)> = vec![
        (
            "two parts",
            adc(|a| a.resource_requirements = vec![cpu_request("deployments:*", "1m")]),
            bad_id("deployments:*"),
        ),
        (
            "four parts",
            adc(|a| a.resource_requirements = vec![cpu_request("deployments:a:b:c", "1m")]),
            bad_id("deployments:a:b:c"),
        ),
        (
            "an unknown resource",
            adc(|a| a.resource_requirements = vec![cpu_request("services:*:*", "1m")]),
            bad_id("services:*:*"),
        ),
        (
            "an empty name",
            adc(|a| a.resource_requirements = vec![cpu_request("deployments::agent", "1m")]),
            bad_id("deployments::agent"),
        ),
        (
            "a bad entry after a good one",
            adc(|a| {
                a.resource_requirements = vec![cpu_request("*:*:*", "1m"), cpu_request("", "1m")]
            }),
            bad_id(""),
        ),
        (
            "a variable name that is no env name",
            adc(|a| a.customized_variables = vec![variable("1ST", "x")]),
            RenderError::VariableName { name: "1ST".into() },
        ),
        (
            "a namespace that is no DNS label",
            adc(|a| a.agent_install_namespace = "Bad_NS".into()),
            RenderError::InstallNamespace {
                namespace: "Bad_NS".into(),
            },
        ),
        (
            "a namespace that would change the YAML",
            adc(|a| a.agent_install_namespace = "a\nkind: Secret".into()),
            RenderError::InstallNamespace {
                namespace: "a\nkind: Secret".into(),
            },
        ),
    ];
    for (name, adc, want) in cases {
        assert_eq!(render(&template(), "c1", Some(&adc)), Err(want), "{name}");
    }

    let templates: Vec<(&str, Templates<'_>, RenderError)> = vec![
        (
            "an unclosed placeholder",
            &[("x.yaml", "kind: {{KIND")],
            RenderError::Template(manifests::RenderError::Unclosed {
                file: "x.yaml".into(),
            }),
        ),
        (
            "containers that are no list",
            &[(
                "d.yaml",
                "{apiVersion: apps/v1, kind: Deployment, metadata: {name: d},
                      spec: {template: {spec: {containers: oops}}}}",
            )],
            RenderError::Shape {
                object: "deployments/d".into(),
                field: "spec.template.spec.containers",
                expected: "a list",
            },
        ),
        (
            "a Deployment without a pod spec",
            &[(
                "d.yaml",
                "{apiVersion: apps/v1, kind: Deployment, metadata: {name: d}}",
            )],
            RenderError::Shape {
                object: "deployments/d".into(),
                field: "spec.template.spec",
                expected: "an object",
            },
        ),
    ];
    for (name, templates, want) in templates {
        assert_eq!(
            render_templates(templates, &template(), "c1", None),
            Err(want),
            "{name}"
        );
    }
    let message = RenderError::ContainerId { id: "x".into() }.to_string();
    assert!(message.contains("\"x\"") && message.contains("<resource>:<name>:<container>"));
}
