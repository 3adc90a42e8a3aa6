//! The golden works, the rollout stamp and the install namespace.

use super::*;

#[test]
fn the_deployment_is_stamped_for_the_rollout() {
    let r = render(&template(), "c1", None).unwrap();
    let v = spec_json(&r);
    let d = index_of_kind(&v, "Deployment");
    assert_eq!(
        v["workload"]["manifests"][d]["metadata"]["annotations"][RENDERING_HASH],
        json!(r.hash)
    );
    let rule = &v["manifestConfigs"][0]["conditionRules"][0];
    assert_eq!(rule["condition"], json!(ROLLED_OUT));
    assert_eq!(rule["type"], json!("CEL"));
    assert!(
        rule["celExpressions"][0]
            .as_str()
            .unwrap()
            .contains(&r.hash)
    );
    // The hash is of the unstamped rendering: stamping does not change what it names.
    let other = render(&template(), "c2", None).unwrap();
    assert_ne!(r.hash, other.hash);
}

/// Sets (or with `None` removes) what `pointer` names; its parent must exist.
pub(super) fn set(value: &mut Value, pointer: &str, to: Option<Value>) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    match (value.pointer_mut(parent).unwrap(), to) {
        (Value::Object(map), Some(v)) => {
            map.insert(last.into(), v);
        }
        (Value::Object(map), None) => {
            map.remove(last);
        }
        (Value::Array(items), Some(v)) => items[last.parse::<usize>().unwrap()] = v,
        (other, _) => panic!("{pointer}: parent is {other}"),
    }
}

pub(super) fn index_of_kind(spec: &Value, kind: &str) -> usize {
    spec["workload"]["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .position(|m| m["kind"] == kind)
        .unwrap()
}

#[test]
fn renders_the_golden_works() {
    let golden = golden_adc();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/expected");
    let update = std::env::var_os("UPDATE_EXPECTED").is_some_and(|v| v == "1");
    for (file, cluster, adc) in [
        ("work-default.json", "cluster1", None),
        ("work-adc.json", "cluster2", Some(&golden)),
    ] {
        let rendered = render(&template(), cluster, adc).unwrap();
        let path = dir.join(file);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            let text = serde_json::to_string_pretty(&rendered.spec).unwrap();
            std::fs::write(&path, text + "\n").unwrap();
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; UPDATE_EXPECTED=1 writes it", path.display()));
        let expected: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            spec_json(&rendered),
            expected,
            "{file} differs; if the change is intended, rerun with UPDATE_EXPECTED=1 and \
                 review the diff"
        );
        // What a client reads back from the file is the same spec, with the same hash.
        let spec: ManifestWorkSpec = serde_json::from_value(expected).unwrap();
        assert_eq!(spec, rendered.spec, "{file}");
    }
}

#[test]
fn golden_works_hold_what_the_agent_needs() {
    let golden = golden_adc();
    for (cluster, adc, namespace, image) in [
        ("cluster1", None, DEFAULT_NS, IMAGE),
        (
            "cluster2",
            Some(&golden),
            "custom-agents",
            "registry.example.com/mirror/resource-usage-agent:test",
        ),
    ] {
        let rendered = render(&template(), cluster, adc).unwrap();
        assert_eq!(rendered.install_namespace, namespace);
        let spec = unstamped(&rendered);
        let manifests = spec["workload"]["manifests"].as_array().unwrap();
        let kinds: Vec<&str> = manifests
            .iter()
            .filter_map(|m| m["kind"].as_str())
            .collect();
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
        // The shipped definitions (none here), mounted where the agent reads them.
        assert_eq!(manifests[5]["data"]["definitions.yaml"], "[]\n");
        for m in manifests {
            if m["kind"] != "ClusterRole" && m["kind"] != "ClusterRoleBinding" {
                assert_eq!(m["metadata"]["namespace"], namespace, "{}", m["kind"]);
            }
            if let Some(subjects) = m["subjects"].as_array() {
                assert!(subjects.iter().all(|s| s["namespace"] == namespace));
            }
        }
        let deployment = &manifests[6];
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(container["image"], image);
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for arg in [
            "--hub-kubeconfig=/managed/hub-kubeconfig/kubeconfig".to_owned(),
            format!("--cluster-name={cluster}"),
            format!("--addon-namespace={namespace}"),
            "--addon-name=resource-usage-collect".to_owned(),
        ] {
            assert!(args.contains(&arg.as_str()), "{cluster}: {arg} in {args:?}");
        }
        assert_eq!(
            pod["volumes"],
            json!([{"name": "hub-kubeconfig",
                        "secret": {"secretName": "resource-usage-collect-hub-kubeconfig"}},
                   {"name": "definitions",
                        "configMap": {"name": "resource-usage-collect-definitions", "optional": true}}])
        );
        assert!(
            container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "definitions"
                    && m["mountPath"] == ocm_api::scoring::shipped::MOUNT_DIR)
        );
        assert_eq!(
            spec["manifestConfigs"],
            json!([{
                "resourceIdentifier": {"group": "apps", "resource": "deployments",
                    "name": "resource-usage-collect-agent", "namespace": namespace},
                "feedbackRules": [{"type": "WellKnownStatus"}],
                "feedbackScrapeType": "Poll"
            }])
        );
        assert!(spec.get("deleteOption").is_none() && spec.get("executor").is_none());
    }
}

#[test]
fn install_namespace_prefers_a_non_empty_adc_value() {
    let cases = [
        ("no ADC", None, DEFAULT_NS),
        ("ADC defaults", Some(adc(|_| {})), DEFAULT_NS),
        (
            "empty",
            Some(adc(|a| a.agent_install_namespace = String::new())),
            DEFAULT_NS,
        ),
        (
            "set",
            Some(adc(|a| a.agent_install_namespace = "custom".into())),
            "custom",
        ),
    ];
    for (name, adc, want) in cases {
        assert_eq!(install_namespace(&template(), adc.as_ref()), want, "{name}");
        let rendered = render(&template(), "c1", adc.as_ref()).unwrap();
        assert_eq!(rendered.install_namespace, want, "{name}");
    }
}
