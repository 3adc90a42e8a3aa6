//! The rendering hash, upstream's config spec hash, and their JSON.

use super::*;
use crate::manager::render::hash::{Dialect, write_json};

#[test]
fn the_hash_is_stable_and_follows_every_change() {
    let golden = golden_adc();
    let first = render(&template(), "cluster2", Some(&golden)).unwrap();
    let again = render(&template(), "cluster2", Some(&golden.clone())).unwrap();
    assert_eq!(first.hash, again.hash);
    assert_eq!(first.hash.len(), 64);
    assert!(
        first
            .hash
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    );
    // Not applied, so not part of the work.
    let proxied = adc(|a| {
        *a = golden_adc();
        a.proxy_config.http_proxy = "http://proxy:3128".into();
    });
    assert_eq!(
        render(&template(), "cluster2", Some(&proxied))
            .unwrap()
            .hash,
        first.hash
    );

    let changes: Vec<(&str, Edit)> = vec![
        (
            "a variable value",
            Box::new(|a| a.customized_variables[0].value = "0:32".into()),
        ),
        (
            "another variable",
            Box::new(|a| a.customized_variables.push(variable("X", "1"))),
        ),
        (
            "variable order",
            Box::new(|a| a.customized_variables.reverse()),
        ),
        ("no variables", Box::new(|a| a.customized_variables.clear())),
        (
            "a node selector value",
            Box::new(|a| {
                if let Some(np) = a.node_placement.as_mut() {
                    np.node_selector
                        .insert("node-role.kubernetes.io/infra".into(), "y".into());
                }
            }),
        ),
        (
            "no tolerations",
            Box::new(|a| {
                if let Some(np) = a.node_placement.as_mut() {
                    np.tolerations.clear();
                }
            }),
        ),
        ("no node placement", Box::new(|a| a.node_placement = None)),
        (
            "a mirror",
            Box::new(|a| a.registries[0].mirror = "other.local".into()),
        ),
        ("no registries", Box::new(|a| a.registries.clear())),
        (
            "a resource value",
            Box::new(|a| {
                a.resource_requirements[0] = cpu_request("deployments:*:*", "20m");
            }),
        ),
        (
            "no resources",
            Box::new(|a| a.resource_requirements.clear()),
        ),
        (
            "the namespace",
            Box::new(|a| a.agent_install_namespace = "other".into()),
        ),
    ];
    let mut hashes = BTreeSet::from([first.hash.clone()]);
    for (name, change) in &changes {
        let mut adc = golden_adc();
        change(&mut adc);
        let hash = render(&template(), "cluster2", Some(&adc)).unwrap().hash;
        assert!(hashes.insert(hash), "{name}: same hash as another input");
    }
    for (name, cluster, adc) in [
        ("another cluster", "cluster3", Some(&golden)),
        ("no ADC", "cluster2", None),
    ] {
        let hash = render(&template(), cluster, adc).unwrap().hash;
        assert!(hashes.insert(hash), "{name}: same hash as another input");
    }
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let mut text = String::new();
    write_json(
        &json!({"b": 1, "a": {"d": [{"z": 1, "y": "<&>"}], "c": null}}),
        Dialect::Serde,
        &mut text,
    );
    assert_eq!(text, r#"{"a":{"c":null,"d":[{"y":"<&>","z":1}]},"b":1}"#);
}

/// The rendering hash is over serde_json's spelling of scalars (stored works carry it): the
/// writer's Serde dialect must spell every scalar exactly as serde_json does.
#[test]
fn the_serde_dialect_spells_scalars_as_serde_json() {
    let scalars = [
        json!("q\"\\/<&>\u{2028}\u{2029}"),
        json!("\u{8}\u{c}\n\r\t\u{0}\u{1}\u{1f}\u{7f}é€😀"),
        json!(1e21),
        json!(1.5e-7),
        json!(100.0),
        json!(-7),
        json!(u64::MAX),
        json!(true),
        json!(null),
    ];
    for value in scalars {
        let mut text = String::new();
        write_json(&value, Dialect::Serde, &mut text);
        assert_eq!(text, value.to_string(), "{value}");
    }
}

/// The expected hash was produced by Go 1.26: a `main` that `json.Unmarshal`s this very
/// object into a `map[string]interface{}`, drops apiVersion, kind, metadata and status as
/// addon-framework's `utils.GetSpecHash` does, `json.Marshal`s the rest and prints
/// `fmt.Sprintf("%x", sha256.Sum256(...))`.
#[test]
fn config_spec_hash_matches_go() {
    let object: Value = serde_json::from_str(
            r#"{
  "apiVersion": "addon.open-cluster-management.io/v1alpha1",
  "kind": "AddOnDeploymentConfig",
  "metadata": {"name": "agent-config", "namespace": "cluster1", "generation": 3, "uid": "0b4c4d0e-1b1c-4c59-9d0a-3f0e5c1d2a77"},
  "spec": {
    "agentInstallNamespace": "custom-agents",
    "customizedVariables": [
      {"name": "CPU_RANGE", "value": "0:64"},
      {"name": "FILTER", "value": "a<b && c>d\u2028\"q\"\\\t"}
    ],
    "nodePlacement": {
      "nodeSelector": {"zone": "b", "kubernetes.io/os": "linux"},
      "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    }
  },
  "status": {"ignored": true}
}"#,
        )
        .unwrap();
    let go = "decc764466ef44d4665975afe388b4bcdf9307b87cff2fad6940566660932bd7";
    assert_eq!(config_spec_hash(&object), go);

    // Only the config fields count.
    let mut other_meta = object.clone();
    set(&mut other_meta, "/metadata/generation", Some(json!(4)));
    set(&mut other_meta, "/status", None);
    set(&mut other_meta, "/kind", None);
    assert_eq!(config_spec_hash(&other_meta), go);
    let mut other_spec = object;
    set(
        &mut other_spec,
        "/spec/agentInstallNamespace",
        Some(json!("x")),
    );
    assert_ne!(config_spec_hash(&other_spec), go);
}

/// Expected texts printed by Go 1.26's `json.Marshal` of the same values (a `go run` in
/// /tmp; `u64::MAX` as the float64 unstructured decodes it to).
#[test]
fn go_json_encoding_of_scalars() {
    let cases = [
        (json!(1e21), "1e+21"),
        (json!(1.5e-7), "1.5e-7"),
        (json!(0.000001), "0.000001"),
        (json!(100.0), "100"),
        (json!(2.5), "2.5"),
        (json!(1e20), "100000000000000000000"),
        (json!(123456789.125), "123456789.125"),
        (json!(1e-10), "1e-10"),
        (json!(-3e25), "-3e+25"),
        (json!(300), "300"),
        (json!(-7), "-7"),
        (json!(u64::MAX), "18446744073709552000"),
        (json!("<a&b>"), r#""\u003ca\u0026b\u003e""#),
        (json!("\u{2028}\u{2029}"), r#""\u2028\u2029""#),
        (json!("q\"\\/"), r#""q\"\\/""#),
        (
            json!("\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}"),
            "\"\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\"",
        ),
        (json!("é€😀"), "\"é€😀\""),
        (json!([true, false, null]), "[true,false,null]"),
    ];
    for (value, want) in cases {
        let mut text = String::new();
        write_json(&value, Dialect::Go, &mut text);
        assert_eq!(text, want, "{value}");
    }
}
