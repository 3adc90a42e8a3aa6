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

/// `n` comma-separated ints from 0, as a list literal.
fn ints(n: usize) -> String {
    format!(
        "[{}]",
        (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    )
}

#[test]
fn operations_pay_for_the_sizes_they_work_on() {
    let x = |n: usize| format!("'{}'", "x".repeat(n));
    let entries = |n: usize| {
        format!(
            "{{{}}}",
            (0..n)
                .map(|i| format!("{i}: {i}"))
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    // (what, expression with a small operand, the same with a large one, units the large one
    // must cost at least); the large ones stay within the compiled size limit of 1 MiB
    let cases: Vec<(&str, String, String, u64)> = vec![
        // `in` on a list literal: building the list, then comparing with every element.
        (
            "in list literal",
            format!("!(-1 in {})", ints(10)),
            format!("!(-1 in {})", ints(5_000)),
            10_000,
        ),
        // Building a list literal copies each element.
        (
            "list literal",
            format!("size({}) > 0", ints(10)),
            format!("size({}) > 0", ints(5_000)),
            5_000,
        ),
        (
            "map literal",
            format!("size({}) > 0", entries(10)),
            format!("size({}) > 0", entries(2_500)),
            5_000,
        ),
        // Concatenation copies both operands (copy rate: 100 bytes a unit).
        (
            "string +",
            format!("{} + {} != ''", x(10), x(10)),
            format!("{} + {} != ''", x(50_000), x(40_000)),
            900,
        ),
        // Reading: 1,000 bytes a unit.
        (
            "contains",
            format!("!{}.contains('y')", x(10)),
            format!("!{}.contains('y')", x(90_000)),
            90,
        ),
        (
            "== literals",
            format!("{} != 'y'", x(10)),
            format!("{} != '{}y'", x(45_000), "x".repeat(45_000)),
            45,
        ),
        (
            "startsWith",
            format!("!{}.startsWith('y')", x(10)),
            format!("!{}.startsWith('{}y')", x(50_000), "x".repeat(40_000)),
            40,
        ),
        // A regular expression runs over its input at 10 bytes a unit.
        (
            "matches",
            format!("{}.matches('^x+$')", x(10)),
            format!("{}.matches('^x+$')", x(90_000)),
            9_000,
        ),
        // Index keys are hashed.
        (
            "index key",
            format!("!has({{'a': 1}}.b) || {{'a': 1}}[{}] > 0", x(1)),
            format!("{{{}: 1}}[{}] == 1", x(90_000 / 2), x(90_000 / 2)),
            90,
        ),
    ];
    for (what, small, large, at_least) in cases {
        let (s, l) = (cost(&small), cost(&large));
        assert!(s < 100, "{what}: {s} units for the small one");
        assert!(
            l >= at_least,
            "{what}: {l} units, expected at least {at_least}"
        );
    }
}

/// Ten true expressions, each spending over half of upstream's per-call limit.
fn ten_limits() -> Vec<String> {
    let l = hundred();
    let expression = format!("{l}.all(a, {l}.all(b, [0,1,2,3,4,5,6,7,8,9].all(c, c >= 0)))");
    let units = cost(&expression);
    assert!(
        (PER_CALL_LIMIT / 2..PER_CALL_LIMIT).contains(&units),
        "{units}"
    );
    vec![expression; 10]
}

#[test]
fn the_deadline_is_looked_at_inside_an_expression() {
    let selector = CelSelector::compile(&ten_limits()).unwrap();
    let cluster = CelCluster::new(&test_cluster());
    // Passes on the third look: after two lots of DEADLINE_EVERY_UNITS.
    for passes_at in [1u64, 3, 50] {
        let looks = std::sync::atomic::AtomicU64::new(0);
        let deadline = || looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 >= passes_at;
        let mut pool = u64::MAX;
        let got = selector.matches_within(&cluster, &scores(&[]), &mut pool, &deadline);
        assert_eq!(got, Err(PoolExhausted::Time));
        let used = u64::MAX - pool;
        let looked_at = passes_at * DEADLINE_EVERY_UNITS;
        // A look once DEADLINE_EVERY_UNITS more were charged, at the next charge (a loop
        // iteration's few units): a little later each time.
        assert!(
            (looked_at..looked_at + 20 * passes_at + 100).contains(&used),
            "deadline passed at look {passes_at}: {used} units"
        );
    }
    // A deadline that never passes changes nothing.
    let mut pool = u64::MAX;
    let got = selector.matches_within(&cluster, &scores(&[]), &mut pool, &|| false);
    assert_eq!(got, Ok(true));
    assert_eq!(u64::MAX - pool, 10 * cost(&ten_limits()[0]));
}

#[test]
fn an_expression_stops_soon_after_the_deadline() {
    // Would run for seconds (unoptimised build): ten expressions at upstream's per-call limit.
    let selector = CelSelector::compile(&ten_limits()).unwrap();
    let cluster = CelCluster::new(&test_cluster());
    // A deadline that has passed at its first look (the caller's clock, counted here).
    let looks = std::sync::atomic::AtomicUsize::new(0);
    let deadline = || looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1;
    let mut pool = u64::MAX;
    let got = selector.matches_within(&cluster, &scores(&[]), &mut pool, &deadline);
    assert_eq!(got, Err(PoolExhausted::Time));
    assert!(
        u64::MAX - pool < cost(&ten_limits()[0]),
        "stopped inside the first expression, not after it"
    );
}

/// `[0,0,...]` with `n` elements, compared with a name (so that it holds `n` list nodes).
fn list_of(n: usize) -> String {
    format!(
        "managedCluster.metadata.name in [{}]",
        vec!["0"; n].join(",")
    )
}

/// The largest `n` whose [`list_of`] holds at most `limit` bytes (the size grows linearly).
fn largest_under(limit: usize) -> usize {
    let size = |n: usize| compile(&[&list_of(n)]).unwrap().size();
    let (one, two) = (size(1), size(2));
    limit.saturating_sub(one) / (two - one) + 1
}

#[test]
fn compiled_size_is_bounded_per_expression_and_per_selector() {
    let n = largest_under(MAX_COMPILED_EXPRESSION_BYTES);
    let fits = compile(&[&list_of(n)]).unwrap();
    assert!(fits.size() <= MAX_COMPILED_EXPRESSION_BYTES);
    assert!(fits.size() > MAX_COMPILED_EXPRESSION_BYTES - 1024);
    let error = compile(&[&list_of(n + 1)]).err().unwrap_or_default();
    assert!(
        error.contains("celExpressions[0] compiles to about")
            && error.contains("more than the limit of 1048576 bytes per expression"),
        "{error}"
    );
    // Long string literals count by their bytes.
    let string = |len: usize| format!("managedCluster.metadata.name != '{}'", "x".repeat(len));
    assert!(compile(&[&string(90_000)]).unwrap().size() >= 90_000);

    // A selector: four just-under expressions fit; a fifth, even a small one, does not.
    let just_under = list_of(n);
    let four = vec![just_under.as_str(); 4];
    let fits = compile(&four).unwrap();
    assert!(fits.size() <= MAX_COMPILED_PLACEMENT_BYTES);
    let small = list_of(10);
    assert!(fits.size() + compile(&[&small]).unwrap().size() > MAX_COMPILED_PLACEMENT_BYTES);
    let error = compile(&[four, vec![small.as_str()]].concat())
        .err()
        .unwrap_or_default();
    assert!(
        error.contains("more than the limit of 4194304 bytes per Placement"),
        "{error}"
    );
}

#[test]
fn the_size_count_before_parsing_is_a_lower_bound_of_the_compiled_size() {
    // Every kind of token the count reads or skips.
    let corpus = [
        "managedCluster.metadata.name == 'cluster1'",
        "managedCluster.metadata.labels['env'] == \"prod\" // a comment: 1, 2, 3, x, y\n && true",
        "r'raw \\' string' == R\"x\" || b'bytes' == b'\\x41' || rb'x' == br'y'",
        "'''triple 'quoted' a, b, c''' != \"\"\"also \"\"\" + 'x'",
        "'escaped \\' quote, 1, 2' != 'x'",
        "0x1F + 1 == 32 && 1u < 2u && 1.5e-3 < .5 && 2e+10 > 1.0 && 0XFFu > 0u",
        "{'a': 1, 'b': [2, 3]}['a'] == 1",
        "{'a': {'b': 1}}.a.b == 1",
        "managedCluster.metadata.name == 'x' ? 1 : 2",
        "has(managedCluster.metadata.labels) && has(managedCluster.status.version)",
        "managedCluster.status.clusterClaims.exists(c, c.name == 'region' && c.value == 'us-east')",
        "managedCluster.status.clusterClaims.all(c, c.name.startsWith('r') || true)",
        "managedCluster.status.clusterClaims.map(c, c.name).filter(n, n.size() > 1).size() > 0",
        "managedCluster.status.clusterClaims.exists_one(c, c.name == 'platform')",
        "[1, 2, 3].map(x, x * 2)[0] == 2",
        "managedCluster.metadata.name in ['a', 'b', 'cluster1']",
        "size(managedCluster.metadata.name) > 0 && int('1') == 1 && string(1) == '1'",
        "managedCluster.scores('demo').filter(s, s.name == 'cpu').all(s, s.value > 0)",
        "semver(managedCluster.metadata.labels.version, true).isGreaterThan(semver('1.0.0', true))",
        "quantity(managedCluster.status.allocatable.cpu).isGreaterThan(quantity('1'))",
        "managedCluster.metadata.name.matches('^c.*1$') && 'a,b'.split(',').size() == 2",
        "!(managedCluster.metadata.name == 'x') && -1 < 0 && 7 % 3 == 1",
        "managedCluster.?metadata.?name.orValue('') != ''",
        "[?optional.none(), 1].size() == 1",
        "dyn(1) == 1 && type(1) == int && null == null",
        "json.decode(managedCluster.metadata.annotations.config).zones.size() == 2",
    ];
    for source in corpus {
        let Ok(compiled) = compile(&[source]) else {
            continue; // not in this environment: nothing to bound
        };
        let counted = presize::nodes_at_least(source) * cost::NODE_BYTES;
        assert!(
            counted <= compiled.size(),
            "{source}: counted {counted} bytes, compiled {}",
            compiled.size()
        );
        assert!(counted > 0, "{source}");
    }
    // Exact counts: names followed by `(` or `:`, comments and separators are not counted.
    for (source, nodes) in [
        ("a", 1),
        ("a.b.c", 3),
        ("f(x, y)", 2),
        ("a.f(1)", 2),
        ("{k: 1}", 1),
        ("x ? y : z", 2),
        ("'a, b, c' + r\"d\" + '''e'f'''", 3),
        ("1.5e-3 + 0x1Fu + .5", 3),
        ("// [1, 2, 3]\n[1, 2]", 2),
        ("'unterminated, 1, 2", 1),
        ("", 0),
    ] {
        assert_eq!(presize::nodes_at_least(source), nodes, "{source}");
    }
}

#[test]
fn an_expression_surely_too_big_is_refused_before_it_is_parsed() {
    // Unterminated: the parser would report a syntax error; the count refuses it first.
    let huge = format!(
        "managedCluster.metadata.name in [{}",
        vec!["0"; 45_000].join(",")
    );
    let error = compile(&[&huge]).err().unwrap_or_default();
    assert!(
        error.contains("celExpressions[0] holds at least 45004 literals and names")
            && error.contains("more than the limit of 1048576 bytes per expression"),
        "{error}"
    );
    // Five expressions each under the per-expression bound, together over the Placement's.
    let n = (MAX_COMPILED_EXPRESSION_BYTES / cost::NODE_BYTES) - 10;
    let big = format!("[{}", vec!["0"; n].join(","));
    let error = compile(&[big.as_str(); 5]).err().unwrap_or_default();
    assert!(
        error.contains("compile to at least") && error.contains("bytes per Placement"),
        "{error}"
    );
}
