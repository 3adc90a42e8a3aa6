//! What a selector means: variables, scores, ANDed expressions, compile errors, odd input.

use super::*;

#[test]
fn selectors_and_clusters_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CelSelector>();
    assert_send_sync::<CelCluster>();
}

#[test]
fn labels_claims_and_fields() {
    assert_all(&[
        (
            r#"managedCluster.metadata.labels["version"] == "1.2""#,
            true,
        ),
        (
            r#"managedCluster.metadata.labels["version"] == "1.3""#,
            false,
        ),
        (r#"managedCluster.metadata.labels.env == "prod""#, true),
        (r#"managedCluster.metadata.name.startsWith("c")"#, true),
        (r#"managedCluster.metadata.name.startsWith("x")"#, false),
        (
            r#"managedCluster.status.clusterClaims.exists(c, c.name == "region" && c.value == "us-east")"#,
            true,
        ),
        (
            r#"managedCluster.status.clusterClaims.exists(c, c.name == "region" && c.value == "eu")"#,
            false,
        ),
        (
            r#"managedCluster.kind == "ManagedCluster" && managedCluster.spec.hubAcceptsClient"#,
            true,
        ),
        (
            r#"has(managedCluster.metadata.labels.cloud) && !has(managedCluster.metadata.labels.gpu)"#,
            true,
        ),
        (r#""env" in managedCluster.metadata.labels"#, true),
    ]);
}

#[test]
fn addon_placement_scores() {
    let example =
        r#"managedCluster.scores("demo").filter(s, s.name == 'demo').all(e, e.value > 80)"#;
    assert!(eval_with(
        &[example],
        &scores(&[("demo", 90), ("other", 10)])
    ));
    assert!(!eval_with(&[example], &scores(&[("demo", 70)])));
    // No AddOnPlacementScore object: a runtime error, so false (even under `!`).
    assert!(!eval_with(
        &[r#"managedCluster.scores("missing").size() == 0"#],
        &scores(&[])
    ));
    assert!(!eval_with(
        &[r#"!(managedCluster.scores("missing").size() > 0)"#],
        &scores(&[])
    ));
    assert!(eval_with(
        &[r#"managedCluster.scores("demo") == [{"name": "cpu", "value": 3}]"#],
        &scores(&[("cpu", 3)])
    ));
}

#[test]
fn expressions_are_anded() {
    let source = scores(&[]);
    assert!(
        eval_with(&[], &source),
        "no expression matches every cluster"
    );
    assert!(eval_with(
        &["true", r#"managedCluster.metadata.labels.env == "prod""#],
        &source
    ));
    assert!(!eval_with(&["true", "false"], &source));
    assert!(!eval_with(&["false", "true"], &source));
}

#[test]
fn invalid_expressions_fail_to_compile() {
    assert_eq!(
        compile(&["invalid.expression"]).unwrap_err(),
        "compilation failed: ERROR: <input>:1:1: undeclared reference to 'invalid' (in container '')\n | invalid.expression\n | ^"
    );
    let cases = [
        ("managedCluster.metadata.labels[", "Syntax error"),
        ("true && foo", "undeclared reference to 'foo'"),
        (
            "nosuchfunction(1)",
            "undeclared reference to 'nosuchfunction'",
        ),
        ("semver()", "found no matching overload for 'semver'"),
        (
            "managedCluster.metadata.name.startsWith()",
            "found no matching overload for 'startsWith'",
        ),
        (
            "managedCluster.metadata.name.find('a') == 'a'",
            "Kubernetes regex library is not supported",
        ),
        (
            "isURL('https://example.com')",
            "Kubernetes urls library is not supported",
        ),
        (
            "format.dns1123Label().validate('a').hasValue()",
            "Kubernetes format library is not supported",
        ),
        ("[1].all(x, y)", "undeclared reference to 'y'"),
        ("Foo{a: 1} == 1", "undeclared reference to 'Foo'"),
        ("@cost(0, 1)", "Syntax error"),
    ];
    for (expression, message) in cases {
        let error = compile(&["true", expression]).unwrap_err();
        assert!(
            error.starts_with("compilation failed: "),
            "{expression}: {error}"
        );
        assert!(error.contains(message), "{expression}: {error}");
    }
    // Comprehension variables and type names are declared.
    assert!(
        compile(&["[1].all(x, x == 1) && type(1) == int && optional.none() == optional.none()"])
            .is_ok()
    );
}

#[test]
fn odd_input_never_panics() {
    let cluster = CelCluster::new(&test_cluster());
    let inputs = [
        "",
        " ",
        "(",
        ")",
        "[",
        "{",
        "'",
        "\"",
        "\\",
        "a.",
        ".a",
        "1..2",
        "!!!",
        "a ? b",
        "{1:}",
        "[?]",
        "managedCluster.?metadata.?name.orValue('')",
        "0x",
        "1e999 > 0",
        "b'\\xff' == b''",
        "'\\u{110000}'",
        "'日本' == '日本'",
        "9223372036854775807 + 1 > 0",
        "-9223372036854775808 / -1 == 0",
        "[1, 'a'].isSorted()",
        "[[1], [2]].sum() == [1, 2]",
        "{'a': 1, 'a': 2}.a == 2",
        "dyn(managedCluster).metadata.name == 'cluster1'",
        "managedCluster.scores(1) == []",
        "{'metadata': {'name': 'x'}}.scores('demo') == []",
        "'a'.matches('(((')",
        "quantity('1e99999999999999999999') == quantity('0')",
        ".managedCluster.metadata.name == 'cluster1'",
        "has(managedCluster.x.y)",
        "[1, 2].map(x, [x].map(y, y)).size() == 2",
        "type(managedCluster) == map",
    ];
    for input in inputs {
        if let Ok(selector) = compile(&[input]) {
            selector.matches(&cluster, &scores(&[]));
        }
    }
}

#[test]
fn non_bool_results_and_runtime_errors_are_false() {
    assert_all(&[
        ("1 + 1", false),
        ("managedCluster.metadata.name", false),
        ("managedCluster", false),
        (r#"managedCluster.metadata.labels["missing"] == "x""#, false),
        ("managedCluster.metadata.missing.name == 'x'", false),
        ("managedCluster.metadata.name + 1 == 'x'", false),
        ("1 / 0 == 1", false),
        ("int('x') == 1", false),
        // Errors are absorbed only where CEL says so.
        (
            r#"managedCluster.metadata.labels["missing"] == "x" || true"#,
            true,
        ),
    ]);
}
