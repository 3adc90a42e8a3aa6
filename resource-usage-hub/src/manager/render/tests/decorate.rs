//! Each decoration, alone and on other template shapes.

use super::*;

/// Each decoration alone changes the agent's Deployment exactly where expected and nothing
/// else in the work.
#[test]
fn each_decoration_alone() {
    let container = "/spec/template/spec/containers/0";
    let pod = "/spec/template/spec";
    let cases: Vec<(&str, AddOnDeploymentConfigSpec, Changes)> = vec![
        ("an ADC with defaults", adc(|_| {}), vec![]),
        (
            "customized variables become env vars in ADC order",
            adc(|a| {
                a.customized_variables = vec![
                    variable("REFRESH_PERIOD", "30s"),
                    variable("CPU_RANGE", "0:64"),
                ]
            }),
            vec![(
                format!("{container}/env"),
                Some(json!([{"name": "REFRESH_PERIOD", "value": "30s"},
                                {"name": "CPU_RANGE", "value": "0:64"}])),
            )],
        ),
        (
            "node placement",
            adc(|a| a.node_placement = golden_adc().node_placement),
            vec![
                (
                    format!("{pod}/nodeSelector"),
                    Some(json!({"node-role.kubernetes.io/infra": ""})),
                ),
                (
                    format!("{pod}/tolerations"),
                    Some(json!([{"key": "node-role.kubernetes.io/infra",
                                     "operator": "Exists", "effect": "NoSchedule"}])),
                ),
            ],
        ),
        (
            "an empty node placement leaves none",
            adc(|a| a.node_placement = Some(NodePlacement::default())),
            vec![],
        ),
        (
            "a matching registry",
            adc(|a| a.registries = golden_adc().registries),
            vec![(
                format!("{container}/image"),
                Some(json!(
                    "registry.example.com/mirror/resource-usage-agent:test"
                )),
            )],
        ),
        (
            "a registry for another source",
            adc(|a| a.registries = vec![mirror("docker.io", "mirror.local")]),
            vec![],
        ),
        (
            "resource requirements replace requests and limits",
            adc(|a| a.resource_requirements = vec![cpu_request("deployments:*:agent", "50m")]),
            vec![(
                format!("{container}/resources"),
                Some(json!({"requests": {"cpu": "50m"}})),
            )],
        ),
        (
            "resource requirements for daemonsets only",
            adc(|a| a.resource_requirements = vec![cpu_request("daemonsets:*:*", "50m")]),
            vec![],
        ),
        (
            "proxy config is not applied",
            adc(|a| {
                a.proxy_config = ProxyConfig {
                    http_proxy: "http://proxy:3128".into(),
                    ..ProxyConfig::default()
                }
            }),
            vec![],
        ),
    ];
    let baseline = unstamped(&render(&template(), "c1", None).unwrap());
    let deployment = index_of_kind(&baseline, "Deployment");
    for (name, adc, changes) in cases {
        let mut want = baseline.clone();
        for (pointer, to) in changes {
            set(
                &mut want,
                &format!("/workload/manifests/{deployment}{pointer}"),
                to,
            );
        }
        let got = render(&template(), "c1", Some(&adc)).unwrap();
        assert_eq!(unstamped(&got), want, "{name}");
    }
}

#[test]
fn the_adc_namespace_is_the_default_namespace_elsewhere() {
    let custom = adc(|a| a.agent_install_namespace = "custom-agents".into());
    let via_adc = render(&template(), "c1", Some(&custom)).unwrap();
    let via_default = render(
        &AgentTemplate {
            default_install_namespace: "custom-agents".into(),
            definitions: String::new(),
            ..template()
        },
        "c1",
        None,
    )
    .unwrap();
    assert_eq!(via_adc, via_default);
}

/// Templates with shapes the agent's lack: hard-coded namespaces, a User subject, a
/// DaemonSet, init containers, two containers, existing env and node placement.
const SHAPES: [(&str, &str); 4] = [
    (
        "binding.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: b, namespace: hard-coded}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}
subjects:
- {kind: ServiceAccount, name: sa, namespace: hard-coded}
- {kind: User, name: someone}
",
    ),
    (
        "clusterrole.yaml",
        "{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: c}}",
    ),
    (
        "deployment.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: agent-a, namespace: hard-coded}
spec:
  template:
    spec:
      nodeSelector: {old: x}
      tolerations: [{key: old, operator: Exists}]
      initContainers:
      - {name: init, image: 'quay.io/ocm-placement/init:1'}
      containers:
      - name: agent
        image: '{{IMAGE}}'
        env:
        - {name: CPU_RANGE, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: KEEP, value: kept}
        resources: {limits: {cpu: '1'}}
      - {name: sidecar, image: 'docker.io/library/busybox:1'}
",
    ),
    (
        "daemonset.yaml",
        "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent-b, namespace: '{{INSTALL_NAMESPACE}}'}
spec:
  template:
    spec:
      containers:
      - {name: agent, image: '{{IMAGE}}'}
",
    ),
];

pub(super) fn render_shapes(adc: &AddOnDeploymentConfigSpec) -> Result<Value, RenderError> {
    render_templates(&SHAPES, &template(), "c1", Some(adc)).map(|r| unstamped(&r))
}

#[test]
fn decorations_on_other_shapes() {
    let deployment_pod = "/workload/manifests/2/spec/template/spec";
    let daemonset_pod = "/workload/manifests/3/spec/template/spec";
    let cases: Vec<(&str, AddOnDeploymentConfigSpec, String, Value)> = vec![
        (
            "a hard-coded namespace follows the install namespace",
            adc(|_| {}),
            "/workload/manifests/0/metadata/namespace".into(),
            json!(DEFAULT_NS),
        ),
        (
            "only ServiceAccount subjects get the namespace",
            adc(|a| a.agent_install_namespace = "ns2".into()),
            "/workload/manifests/0/subjects".into(),
            json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "ns2"},
                       {"kind": "User", "name": "someone"}]),
        ),
        (
            "a cluster-scoped object gets no namespace",
            adc(|a| a.agent_install_namespace = "ns2".into()),
            "/workload/manifests/1/metadata".into(),
            json!({"name": "c"}),
        ),
        (
            "a variable replaces a same-named env entry in place, the rest are appended",
            adc(|a| {
                a.customized_variables = vec![variable("NEW", "n"), variable("CPU_RANGE", "0:8")]
            }),
            format!("{deployment_pod}/containers/0/env"),
            json!([{"name": "CPU_RANGE", "value": "0:8"}, {"name": "KEEP", "value": "kept"},
                       {"name": "NEW", "value": "n"}]),
        ),
        (
            "a variable reaches every container, also one without env",
            adc(|a| a.customized_variables = vec![variable("CPU_RANGE", "0:8")]),
            format!("{deployment_pod}/containers/1/env"),
            json!([{"name": "CPU_RANGE", "value": "0:8"}]),
        ),
        (
            "init containers get no env, as upstream",
            adc(|a| a.customized_variables = vec![variable("CPU_RANGE", "0:8")]),
            format!("{deployment_pod}/initContainers/0"),
            json!({"name": "init", "image": "quay.io/ocm-placement/init:1"}),
        ),
        (
            "DaemonSets get env too",
            adc(|a| a.customized_variables = vec![variable("CPU_RANGE", "0:8")]),
            format!("{daemonset_pod}/containers/0/env"),
            json!([{"name": "CPU_RANGE", "value": "0:8"}]),
        ),
        (
            "node placement replaces the template's; empty tolerations are omitted",
            adc(|a| {
                a.node_placement = Some(NodePlacement {
                    node_selector: [("new".to_owned(), "y".to_owned())].into(),
                    tolerations: vec![],
                })
            }),
            deployment_pod.into(),
            json!({
                "nodeSelector": {"new": "y"},
                "initContainers": [{"name": "init", "image": "quay.io/ocm-placement/init:1"}],
                "containers": [
                    {"name": "agent", "image": IMAGE,
                     "env": [{"name": "CPU_RANGE",
                              "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                             {"name": "KEEP", "value": "kept"}],
                     "resources": {"limits": {"cpu": "1"}}},
                    {"name": "sidecar", "image": "docker.io/library/busybox:1"}
                ]
            }),
        ),
        (
            "an empty node placement removes the template's",
            adc(|a| a.node_placement = Some(NodePlacement::default())),
            format!("{deployment_pod}/nodeSelector"),
            Value::Null,
        ),
        (
            "an empty node placement removes the template's tolerations",
            adc(|a| a.node_placement = Some(NodePlacement::default())),
            format!("{deployment_pod}/tolerations"),
            Value::Null,
        ),
        (
            "no node placement keeps the template's",
            adc(|_| {}),
            format!("{deployment_pod}/tolerations"),
            json!([{"key": "old", "operator": "Exists"}]),
        ),
        (
            "registries rewrite init containers",
            adc(|a| a.registries = vec![mirror("quay.io/ocm-placement", "m.local")]),
            format!("{deployment_pod}/initContainers/0/image"),
            json!("m.local/init:1"),
        ),
        (
            "registries rewrite DaemonSets",
            adc(|a| a.registries = vec![mirror("", "m.local")]),
            format!("{daemonset_pod}/containers/0/image"),
            json!("m.local/resource-usage-agent:test"),
        ),
        (
            "resources replace the template's limits too",
            adc(|a| a.resource_requirements = vec![cpu_request("*:*:agent", "5m")]),
            format!("{deployment_pod}/containers/0/resources"),
            json!({"requests": {"cpu": "5m"}}),
        ),
        (
            "DaemonSets are probed too",
            adc(|_| {}),
            "/manifestConfigs".into(),
            json!([
                {"resourceIdentifier": {"group": "apps", "resource": "deployments",
                    "name": "agent-a", "namespace": DEFAULT_NS},
                 "feedbackRules": [{"type": "WellKnownStatus"}], "feedbackScrapeType": "Poll"},
                {"resourceIdentifier": {"group": "apps", "resource": "daemonsets",
                    "name": "agent-b", "namespace": DEFAULT_NS},
                 "feedbackRules": [{"type": "WellKnownStatus"}], "feedbackScrapeType": "Poll"}
            ]),
        ),
    ];
    for (name, adc, pointer, want) in cases {
        let got = render_shapes(&adc).unwrap();
        let got = got.pointer(&pointer).cloned().unwrap_or(Value::Null);
        assert_eq!(got, want, "{name}");
    }
}
