//! The cost budget: runaway expressions stop, the selector shares one budget, costs resemble
//! cel-go's, and size and nesting are bounded.

use super::*;

/// 100 ints, as a list literal.
fn hundred() -> String {
    format!(
        "[{}]",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[test]
fn budget_stops_runaway_expressions() {
    let l = hundred();
    // 100^5 = 10^10 iterations: hours unbounded.
    let nested = format!("{l}.all(a, {l}.all(b, {l}.all(c, {l}.all(d, {l}.all(e, true)))))");
    // 10^10 characters, built by ten replace() calls.
    let replaced = format!("'a'{}.size() > 0", ".replace('a', 'aaaaaaaaaa')".repeat(10));
    // Nested map() building 10^8 elements.
    let built = format!("{l}.map(a, {l}.map(b, {l}.map(c, {l}.map(d, d)))).size() > 0");
    // Copying an ever bigger list: the copies, not the iterations, are the work.
    let copies = format!("{l}.map(a, {l}.map(b, {l})).map(x, x).map(y, y).size() > 0");
    // A regex that takes seconds to compile is not compiled.
    let regex = r"managedCluster.metadata.name.matches('\\p{L}{5000}')".to_string();
    // An error that `||` or `exists()` would absorb still fails the expression.
    let absorbed = format!("{nested} || true");
    let in_exists =
        format!("{l}.exists(x, {l}.all(a, {l}.all(b, {l}.all(c, true))) && false || x == 99)");
    for expression in [nested, replaced, built, copies, regex, absorbed, in_exists] {
        assert!(!eval(&expression), "{expression}");
    }
}

#[test]
fn budget_is_shared_by_the_expressions_of_a_selector() {
    let (l, five) = (hundred(), "[0, 1, 2, 3, 4]");
    // Within one expression's limit, but enough copies exceed the cluster's budget.
    let expensive = format!("{l}.all(a, {l}.all(b, {five}.filter(c, c < 3).size() == 3))");
    let units = cost(&expensive);
    assert!((100_000..PER_CALL_LIMIT).contains(&units), "{units}");
    let fit = (RUNTIME_COST_BUDGET / units) as usize;
    let source = scores(&[]);
    assert!(eval_with(&vec![expensive.as_str(); fit], &source));
    assert!(!eval_with(&vec![expensive.as_str(); fit + 1], &source));
}

#[test]
fn costs_resemble_cel_go() {
    // cel-go charges 5 for this one (ocm's cel_test.go).
    assert_eq!(
        cost(r#"managedCluster.metadata.labels["env"] == "prod""#),
        5
    );
    let small = cost("[1, 2, 3].all(x, x > 0)");
    assert!((10..100).contains(&small), "{small}");
}

#[test]
fn deep_and_long_expressions_are_bounded() {
    let error = |expression: &str| compile(&[expression]).err().unwrap_or_default();
    // `+` chains nest to the left (`&&` and `||` chains are balanced trees).
    let chain = format!("{}1 > 0", "1 + ".repeat(MAX_DEPTH));
    assert!(error(&chain).contains("max recursion depth exceeded: 250"));
    let long = format!("true{}", " ".repeat(MAX_SOURCE_SIZE));
    assert!(error(&long).contains("code point size exceeds limit"));
    // Parentheses nest deeper in the parser than in the tree: its own limit applies.
    let parens = format!("{}true{}", "(".repeat(200), ")".repeat(200));
    assert!(error(&parens).contains("Recursion limit"));

    // The deepest expressions we accept, where every level also charges the budget.
    let name = "managedCluster.metadata.name";
    let deepest = [
        format!("{}true", "true && ".repeat(5 * MAX_DEPTH)),
        format!(
            "size({}{name}{}) > 0",
            format!("{name} + ").repeat(MAX_DEPTH - 10),
            ""
        ),
        format!("size({}{name}{}) == 1", "[".repeat(90), "]".repeat(90)),
        format!("{}true{}", "[1].all(x, ".repeat(30), ")".repeat(30)),
    ];
    // Evaluation recurses per level on the caller's stack: 2 MiB is plenty in release
    // builds; debug builds use about 25 times more per level.
    let stack = if cfg!(debug_assertions) {
        128 << 20
    } else {
        2 << 20
    };
    let evaluated = std::thread::Builder::new()
        .stack_size(stack)
        .spawn(move || {
            deepest.iter().all(|expression| {
                let selector = compile(&[expression]).unwrap_or_else(|e| panic!("{e}"));
                selector.matches(&CelCluster::new(&test_cluster()), &scores(&[]))
            })
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(evaluated);
}
