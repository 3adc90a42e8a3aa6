//! The `celSelector` evaluator of the sans-IO core: a predicate's `celSelector.celExpressions`
//! are compiled once ([`CelSelector`]) and evaluated against clusters converted once
//! ([`CelCluster`]).
//!
//! Behaviour follows upstream (ocm `pkg/placement/helpers/cel.go`, sdk-go `pkg/cel`):
//!
//! - The one variable is `managedCluster`: the ManagedCluster as JSON (`apiVersion`, `kind`,
//!   `metadata`, `spec`, `status`). `managedCluster.scores("<name>")` lists the items of the
//!   AddOnPlacementScore `<cluster name>/<name>` as `{name, value}` maps; like upstream it does
//!   not look at `validUntil`, and a missing object is an error. `s.parseJSON()` parses JSON.
//! - The libraries are upstream's as far as we implement them: the `cel` crate's standard
//!   library, cel-go optional types and strings extension, and our own Kubernetes `lists`,
//!   `quantity`, `semver`, `ip` and `cidr`. `matches()` keeps RE2 (Go) meanings. Kubernetes
//!   `regex` (`find`), `urls` and `format` are not implemented: using them is a compile error
//!   that says so. The README has the full table.
//! - An expression that does not parse or check gives `compilation failed: <issues>` in
//!   cel-go's format. Without static types, type errors cel-go would report here surface at
//!   evaluation instead.
//! - A predicate matches a cluster when every expression evaluates to `true`. A runtime error
//!   (a missing key, a missing score object, a type mismatch), a non-bool result or running out
//!   of budget makes that expression false, never an error.
//!
//! # Budget
//!
//! Upstream gives each expression a cost limit of 1,000,000 and each cluster a budget of
//! 10,000,000 across the selector's expressions. We keep both numbers, in our own units. The
//! `cel` crate has no interrupt, cost tracker or hook in its interpreter, so a static estimate
//! would have been the easy way; but any useful static bound rejects ordinary expressions (a
//! comprehension over a list read from the cluster has no static size). What the crate does
//! let us do is rewrite the parsed expression before evaluating it, and register functions
//! that see the evaluation context. So `cost.rs` threads calls to a charging function through
//! the expression: every comprehension iteration, and every operation whose work grows with
//! its operands, is charged at run time before or as it happens. That is a real bound: the work
//! of an evaluation is proportional to the units charged, whatever the expression. Nested
//! comprehensions, strings grown by `replace()` and slow-to-compile regular expressions stop at
//! the limit, and the expression is false even where CEL would absorb the error (`|| true`).
//!
//! Upstream stops there, so a selector that spends its whole per-cluster budget costs 10,000
//! times that on 10,000 clusters. Here the pass has a budget too ([`super::limits`]): the
//! units of every cluster are drawn from one pool ([`CelSelector::matches_within`]), and the
//! caller's deadline is looked at between clusters; either running out stops the pass.
//!
//! Compiling can fail for a reason that is not the expression's: the compiler thread cannot
//! start (no memory or address space for its stack, no threads left). That is
//! [`CompileError::Transient`]: never cached, the controller retries it.
//!
//! The only static limits are on size and nesting (100,000 code points, depth 250, like cel-go's
//! parser), because the parser and the interpreter recurse per level: they keep evaluation
//! within about 1 MiB of stack in release builds. Compiling runs on a short-lived thread with a
//! large stack for the same reason (the generated parser needs over 100 KiB per nested
//! parenthesis in debug builds). Debug builds also need far more stack per level to evaluate.

mod check;
mod cost;
mod library;
mod net;
mod quantity;
mod regex;
mod semver;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock};

use cel::common::types::{CelBool, CelInt, CelList, CelMap, CelMapKey, CelString};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, FunctionContext, Value};
use ocm_api::{AddOnPlacementScoreItem, ManagedCluster};

use cost::{Meter, NativeFn, Program};

/// Upstream's `celconfig.PerCallLimit`: the budget of one expression evaluation.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// Upstream's `celconfig.RuntimeCELCostBudget`: the budget of one cluster across all the
/// expressions of a selector.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// cel-go's default limit on the length of an expression, in code points.
const MAX_SOURCE_SIZE: usize = 100_000;
/// How deep an expression tree may nest, like cel-go's parser recursion limit. Evaluation
/// recurses once or twice per level: about 1.5 KiB of stack each in release builds, so the
/// deepest expression needs under 1 MiB. (Debug builds need some 25 times more.)
const MAX_DEPTH: usize = 250;
/// The stack of the thread that parses and checks an expression.
const COMPILE_STACK_SIZE: usize = 256 << 20;

const CLUSTER_VAR: &str = "managedCluster";
/// Prefix of the variable names the `scores` function asks the [`Activation`] for.
const SCORES_VAR: &str = "@scores:";

/// Where `managedCluster.scores("<resourceName>")` reads AddOnPlacementScores from.
///
/// `Sync` because the evaluation hands it to the `cel` crate, whose variable resolvers must be.
pub trait ScoreSource: Sync {
    /// The score items of the AddOnPlacementScore `<cluster>/<resource_name>`, or `None` when
    /// there is no such object (the expression then evaluates to false).
    fn scores(&self, cluster: &str, resource_name: &str) -> Option<Vec<AddOnPlacementScoreItem>>;
}

/// A ManagedCluster converted for CEL, once per scheduling pass.
#[derive(Debug)]
pub struct CelCluster {
    value: Box<dyn Val>,
}

impl CelCluster {
    pub fn new(cluster: &ManagedCluster) -> CelCluster {
        // Serialising a typed object does not fail; if it ever did, `null` makes every
        // expression false instead of panicking.
        let json = serde_json::to_value(cluster).unwrap_or(serde_json::Value::Null);
        CelCluster {
            value: library::json_to_val(&json, library::Numbers::IntWhenIntegral),
        }
    }
}

/// The compiled `celSelector.celExpressions` of one predicate (ANDed).
#[derive(Debug)]
pub struct CelSelector {
    programs: Vec<Program>,
}

/// Why expressions did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileError {
    /// The expressions are wrong: the same input always fails (cacheable).
    Invalid(String),
    /// The compiler could not run (its thread could not start): may pass; never cached.
    Transient(String),
}

/// The pass's CEL cost budget ran out while evaluating a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolExhausted;

impl CelSelector {
    /// Compiles every expression; the first invalid one gives
    /// `compilation failed: ERROR: <input>:line:column: message ...` (cel-go's format).
    pub fn compile(expressions: &[String]) -> Result<CelSelector, CompileError> {
        let runtime = RUNTIME
            .as_ref()
            .map_err(|e| CompileError::Invalid(format!("instantiation failed: {e}")))?;
        let programs = if expressions.is_empty() {
            Vec::new()
        } else {
            runtime.compile_all(expressions)?
        };
        Ok(CelSelector { programs })
    }

    /// True when every expression evaluates to `true` for `cluster`.
    pub fn matches(&self, cluster: &CelCluster, scores: &dyn ScoreSource) -> bool {
        let mut unlimited = u64::MAX;
        self.matches_within(cluster, scores, &mut unlimited)
            .unwrap_or(false)
    }

    /// [`CelSelector::matches`], drawing the units spent from `pool`, the budget of the whole
    /// pass. Each expression still gets at most upstream's per-call limit and the cluster at
    /// most its per-cluster budget (running out of those makes the cluster not match, as
    /// upstream); running out of the pool stops the pass: `Err`.
    pub fn matches_within(
        &self,
        cluster: &CelCluster,
        scores: &dyn ScoreSource,
        pool: &mut u64,
    ) -> Result<bool, PoolExhausted> {
        let Ok(runtime) = RUNTIME.as_ref() else {
            return Ok(false); // unreachable: compile() fails first
        };
        let mut budget = RUNTIME_COST_BUDGET;
        for program in &self.programs {
            let own_limit = budget.min(PER_CALL_LIMIT);
            let limit = own_limit.min(*pool);
            let activation = Activation {
                cluster,
                scores,
                meter: Meter::new(limit),
            };
            let matched = runtime.evaluate(program, &activation);
            let used = activation.meter.used().min(limit);
            budget = budget.saturating_sub(used);
            *pool = pool.saturating_sub(used);
            if activation.meter.exceeded() && limit < own_limit {
                return Err(PoolExhausted);
            }
            if !matched {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The environment and the root context, shared by every selector.
struct Runtime {
    env: Arc<Env>,
    context: Context<'static, 'static>,
}

static RUNTIME: LazyLock<Result<Runtime, String>> = LazyLock::new(Runtime::new);

impl Runtime {
    fn new() -> Result<Runtime, String> {
        let env = Arc::new(library::new_env().map_err(|e| e.to_string())?);
        let mut context = Context::with_env(Arc::clone(&env));
        let functions: [(&str, NativeFn); 4] = [
            (cost::COST_FN, Box::new(cost::cost_fn)),
            (cost::REPLACE_FN, Box::new(cost::replace_fn)),
            (cost::MATCHES_FN, cost::matches_fn(Arc::clone(&env))),
            ("scores", Box::new(scores_fn)),
        ];
        for (name, function) in functions {
            context
                .add_function(name, function)
                .map_err(|e| e.to_string())?;
        }
        Ok(Runtime { env, context })
    }

    fn compile_all(&self, sources: &[String]) -> Result<Vec<Program>, CompileError> {
        for source in sources {
            let size = source.chars().count();
            if size > MAX_SOURCE_SIZE {
                return Err(CompileError::Invalid(format!(
                    "compilation failed: ERROR: <input>:-1:0: expression code point size exceeds limit: size: {size}, limit {MAX_SOURCE_SIZE}"
                )));
            }
        }
        #[cfg(test)]
        if tests::FAIL_SPAWN.with(std::cell::Cell::get) {
            return Err(CompileError::Transient(
                "cannot start the compiler thread: (test) spawn refused".into(),
            ));
        }
        // Parsing and checking recurse as deep as an expression nests, and the generated parser
        // uses a lot of stack per level (over 100 KiB per parenthesis in debug builds): run
        // them on a thread of their own with room to spare. Only the touched pages are used.
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("cel-compile".into())
                .stack_size(COMPILE_STACK_SIZE)
                .spawn_scoped(scope, || {
                    sources
                        .iter()
                        .map(|source| self.compile_on_this_thread(source))
                        .collect::<Result<Vec<_>, String>>()
                        .map_err(CompileError::Invalid)
                })
                // Out of memory, address space or threads: not the expressions' fault.
                .map_err(|e| {
                    CompileError::Transient(format!("cannot start the compiler thread: {e}"))
                })?
                .join()
                // The parser is generated code we do not control: a panic in it is a compile
                // error, not a crash.
                .unwrap_or_else(|_| {
                    Err(CompileError::Invalid(
                        "compilation failed: the expression could not be parsed".into(),
                    ))
                })
        })
    }

    fn compile_on_this_thread(&self, source: &str) -> Result<Program, String> {
        let parsed = self.env.compile(source).map_err(|e| {
            format!(
                "compilation failed: {}",
                check::format_parse_errors(&e, source)
            )
        })?;
        check::check(
            parsed.expression(),
            parsed.source_info(),
            &self.env,
            MAX_DEPTH,
        )
        .map_err(|e| format!("compilation failed: {e}"))?;
        Ok(cost::instrument(parsed.expression().clone()))
    }

    /// Whether `program` evaluates to `true` within the activation's budget.
    fn evaluate(&self, program: &Program, activation: &Activation<'_>) -> bool {
        // A panic inside the `cel` crate on some input must not take the scheduler down: it
        // makes the expression false like any other failure.
        let result = catch_unwind(AssertUnwindSafe(|| {
            activation.meter.charge(program.base_cost).ok()?;
            let root: &Context<'_, '_> = &self.context;
            let mut scope = root.new_inner_scope();
            scope.set_variable_resolver(activation);
            let value = Value::resolve_val(&program.expr, &scope).ok()?;
            value.downcast_ref::<CelBool>().map(|b| *b.inner())
        }));
        matches!(result, Ok(Some(true))) && !activation.meter.exceeded()
    }
}

/// The per-evaluation variables: `managedCluster`, the meter, and score lookups.
struct Activation<'a> {
    cluster: &'a CelCluster,
    scores: &'a dyn ScoreSource,
    meter: Meter,
}

impl VariableResolver for Activation<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        match variable {
            CLUSTER_VAR => Some(CowVal::Borrowed(self.cluster.value.as_ref())),
            cost::METER_VAR => Some(CowVal::Borrowed(&self.meter)),
            _ => {
                // Functions get no state of their own, only the context, so `scores` asks for
                // the variable `@scores:<cluster name length>:<cluster name><resource name>`.
                let key = variable.strip_prefix(SCORES_VAR)?;
                let (len, rest) = key.split_once(':')?;
                let len: usize = len.parse().ok()?;
                let (cluster, resource) = (rest.get(..len)?, rest.get(len..)?);
                let items = self.scores.scores(cluster, resource)?;
                Some(CowVal::owned(scores_list(&items)))
            }
        }
    }
}

fn scores_list(items: &[AddOnPlacementScoreItem]) -> CelList<'static> {
    let maps: Vec<Box<dyn Val>> = items
        .iter()
        .map(|item| {
            let map: std::collections::HashMap<CelMapKey<'static>, Box<dyn Val>> = [
                (
                    CelMapKey::from("name"),
                    Box::new(CelString::from(item.name.clone())) as Box<dyn Val>,
                ),
                (
                    CelMapKey::from("value"),
                    Box::new(CelInt::from(i64::from(item.value))),
                ),
            ]
            .into_iter()
            .collect();
            Box::new(CelMap::from(map)) as Box<dyn Val>
        })
        .collect();
    CelList::from(maps)
}

/// `<cluster>.scores(name)`: like upstream, the cluster is the receiver's `metadata.name`.
fn scores_fn<'c, 'v>(ftx: &mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError> {
    let error = |message: &str| ExecutionError::function_error("scores", message);
    let receiver = ftx
        .this
        .as_ref()
        .ok_or_else(|| error("scores is a member function"))?;
    let field = |value: &dyn Val, name: &str| -> Option<String> {
        let found = value.as_indexer()?.get(&CelString::from(name)).ok()?;
        found
            .downcast_ref::<CelString<'_>>()
            .map(|s| s.inner().to_owned())
    };
    let metadata = receiver
        .as_indexer()
        .and_then(|m| m.get(&CelString::from("metadata")).ok())
        .ok_or_else(|| error("failed to get cluster metadata"))?;
    let cluster =
        field(metadata.as_ref(), "name").ok_or_else(|| error("failed to get cluster name"))?;
    let resource = ftx
        .args
        .first()
        .and_then(|a| a.downcast_ref::<CelString<'_>>())
        .ok_or_else(|| error("the score name must be a string"))?
        .inner();
    let key = format!("{SCORES_VAR}{}:{cluster}{resource}", cluster.len());
    let list = ftx.ptx.get_variable(&key).ok_or_else(|| {
        error(&format!(
            "failed to get score: addonplacementscores.cluster.open-cluster-management.io \"{resource}\" not found"
        ))
    })?;
    // Like upstream's cost estimator: the list and its maps.
    cost::charge(ftx.ptx, 0, Some(list.as_ref()))?;
    Ok(CowVal::Owned(list.into_owned()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    thread_local! {
        /// Makes this thread's compiles fail as if the compiler thread could not start.
        pub(crate) static FAIL_SPAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A cluster with labels, claims, a Kubernetes version and allocatable resources.
    fn test_cluster() -> ManagedCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.open-cluster-management.io/v1",
            "kind": "ManagedCluster",
            "metadata": {
                "name": "cluster1",
                "labels": {"version": "1.2", "env": "prod", "cloud": "aws"},
                "annotations": {"config": "{\"zones\": [\"a\", \"b\"], \"gpu\": true}"}
            },
            "spec": {"hubAcceptsClient": true},
            "status": {
                "clusterClaims": [
                    {"name": "region", "value": "us-east"},
                    {"name": "platform", "value": "AWS"}
                ],
                "version": {"kubernetes": "v1.30.2"},
                "allocatable": {"cpu": "8", "memory": "32Gi"}
            }
        }))
        .unwrap()
    }

    /// AddOnPlacementScores by `(cluster, name)`.
    struct Scores(HashMap<(String, String), Vec<AddOnPlacementScoreItem>>);

    impl ScoreSource for Scores {
        fn scores(&self, cluster: &str, name: &str) -> Option<Vec<AddOnPlacementScoreItem>> {
            self.0.get(&(cluster.to_owned(), name.to_owned())).cloned()
        }
    }

    fn scores(items: &[(&str, i32)]) -> Scores {
        let items = items
            .iter()
            .map(|(name, value)| AddOnPlacementScoreItem {
                name: (*name).into(),
                value: *value,
            })
            .collect();
        Scores(HashMap::from([(("cluster1".into(), "demo".into()), items)]))
    }

    fn compile(expressions: &[&str]) -> Result<CelSelector, String> {
        CelSelector::compile(
            &expressions
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>(),
        )
        .map_err(|e| match e {
            CompileError::Invalid(m) | CompileError::Transient(m) => m,
        })
    }

    fn eval_with(expressions: &[&str], source: &dyn ScoreSource) -> bool {
        let selector = compile(expressions).unwrap_or_else(|e| panic!("{expressions:?}: {e}"));
        selector.matches(&CelCluster::new(&test_cluster()), source)
    }

    fn eval(expression: &str) -> bool {
        eval_with(&[expression], &scores(&[]))
    }

    /// The units one evaluation of `expression` charges.
    fn cost(expression: &str) -> u64 {
        let selector = compile(&[expression]).unwrap();
        let cluster = CelCluster::new(&test_cluster());
        let activation = Activation {
            cluster: &cluster,
            scores: &scores(&[]),
            meter: Meter::new(u64::MAX),
        };
        let runtime = RUNTIME.as_ref().unwrap();
        runtime.evaluate(&selector.programs[0], &activation);
        activation.meter.used()
    }

    fn assert_all(cases: &[(&str, bool)]) {
        for (expression, expected) in cases {
            assert_eq!(eval(expression), *expected, "{expression}");
        }
    }

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
            compile(&[
                "[1].all(x, x == 1) && type(1) == int && optional.none() == optional.none()"
            ])
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

    #[test]
    fn standard_library() {
        assert_all(&[
            (
                "size('abc') == 3 && 'abc'.size() == 3 && size([1, 2]) == 2",
                true,
            ),
            ("'abc'.contains('b') && 'abc'.endsWith('c')", true),
            (
                "int('12') + 1 == 13 && string(12) == '12' && double(1) == 1.0 && uint(1) == 1u",
                true,
            ),
            (
                "bool('true') && bytes('a') == b'a' && dyn(1) == 1 && type('a') == string",
                true,
            ),
            (
                "timestamp('2024-01-02T00:00:00Z').getFullYear() == 2024",
                true,
            ),
            ("duration('1h') > duration('59m')", true),
            (
                "[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x > 1) == [2, 3]",
                true,
            ),
            (
                "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30] && [1, 2, 3].exists_one(x, x == 2)",
                true,
            ),
            ("2 in [1, 2] && !(3 in [1, 2]) && {'a': 1}.a == 1", true),
            (
                r#"managedCluster.metadata.name.matches('^c[a-z]+\\d$')"#,
                true,
            ),
            (r#"matches('abc', 'b')"#, true),
            // RE2 semantics: \d is ASCII only.
            (r#"'٣'.matches('^\\d$')"#, false),
            (
                r#"'a b'.matches('a\\sb') && 'x-y'.matches('\\bx\\b')"#,
                true,
            ),
            ("'abc'.matches('[') == false", false),
        ]);
    }

    #[test]
    fn strings_extension() {
        assert_all(&[
            ("'abc'.charAt(1) == 'b'", true),
            (
                "'abcb'.indexOf('b') == 1 && 'abcb'.indexOf('b', 2) == 3",
                true,
            ),
            (
                "'abcb'.lastIndexOf('b') == 3 && 'abcb'.lastIndexOf('b', 2) == 1",
                true,
            ),
            (
                "'AbC'.lowerAscii() == 'abc' && 'AbC'.upperAscii() == 'ABC'",
                true,
            ),
            (
                "'aXbXc'.replace('X', '-') == 'a-b-c' && 'aXbXc'.replace('X', '-', 1) == 'a-bXc'",
                true,
            ),
            (
                "'ab'.replace('', '-') == '-a-b-' && 'aXb'.replace('X', '-', 0) == 'aXb'",
                true,
            ),
            (
                "'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']",
                true,
            ),
            (
                "'abcdef'.substring(2) == 'cdef' && 'abcdef'.substring(1, 3) == 'bc'",
                true,
            ),
            (
                "'  a '.trim() == 'a' && ['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b'",
                true,
            ),
            ("'%s-%d'.format(['a', 1]) == 'a-1'", true),
            ("strings.quote('a\"b') == '\"a\\\\\"b\"'", true),
            ("'abc'.reverse() == 'cba'", true),
        ]);
    }

    #[test]
    fn optional_types() {
        assert_all(&[
            (
                "optional.of(1).hasValue() && optional.of(1).value() == 1",
                true,
            ),
            (
                "!optional.none().hasValue() && !optional.ofNonZeroValue(0).hasValue()",
                true,
            ),
            (
                "optional.none().or(optional.of(2)).value() == 2 && optional.none().orValue(3) == 3",
                true,
            ),
            (
                "managedCluster.metadata.labels.?missing.orValue('none') == 'none'",
                true,
            ),
            (
                "managedCluster.metadata.labels[?'env'].orValue('none') == 'prod'",
                true,
            ),
            (
                "[?optional.none(), ?optional.of(1)] == [1] && {?'a': optional.none()} == {}",
                true,
            ),
            ("optional.of(2).optMap(x, x * 2).value() == 4", true),
            (
                "optional.of(2).optFlatMap(x, optional.of(x + 1)).value() == 3",
                true,
            ),
            (
                "[1, 2].first().value() == 1 && [1, 2].last().value() == 2 && ![].first().hasValue()",
                true,
            ),
            (
                "optional.unwrap([optional.of(1), optional.none()]) == [1]",
                true,
            ),
            ("[optional.of(1), optional.none()].unwrapOpt() == [1]", true),
        ]);
    }

    #[test]
    fn kubernetes_lists() {
        assert_all(&[
            (
                "[1, 2, 2, 3].isSorted() && !['b', 'a'].isSorted() && [].isSorted()",
                true,
            ),
            (
                "[1, 3].sum() == 4 && [1.0, 2.5].sum() == 3.5 && [].sum() == 0",
                true,
            ),
            (
                "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'",
                true,
            ),
            ("[].min() == 0", false),
            (
                "[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2 && [1].indexOf(5) == -1",
                true,
            ),
        ]);
    }

    #[test]
    fn quantity() {
        assert_all(&[
            (
                "quantity(managedCluster.status.allocatable.memory).isGreaterThan(quantity('16Gi'))",
                true,
            ),
            (
                "quantity('200M').compareTo(quantity('0.2G')) == 0 && quantity('50M').compareTo(quantity('50Mi')) == -1",
                true,
            ),
            (
                "quantity('50M').isLessThan(quantity('100M')) && quantity('1k') == quantity('1000')",
                true,
            ),
            (
                "isQuantity('1.3Gi') && !isQuantity('200K') && !isQuantity('Three')",
                true,
            ),
            (
                "quantity('50k').add(quantity('20k')) == quantity('70k') && quantity('50k').add(20) == quantity('50020')",
                true,
            ),
            (
                "quantity('50k').sub(quantity('20k')) == quantity('30k') && quantity('50k').sub(20000) == quantity('30k')",
                true,
            ),
            (
                "quantity('50k').asInteger() == 50000 && quantity('50k').isInteger() && !quantity('1.5').isInteger()",
                true,
            ),
            (
                "quantity('50k').sub(20000).asApproximateFloat() == 30000.0",
                true,
            ),
            (
                "sign(quantity('-1')) == -1 && quantity('0').sign() == 0",
                true,
            ),
            ("quantity('1.5').asInteger() == 1", false),
            ("quantity('Three') == quantity('3')", false),
        ]);
    }

    #[test]
    fn semver() {
        assert_all(&[
            (
                "semver(managedCluster.status.version.kubernetes, true).isGreaterThan(semver('1.30.0'))",
                true,
            ),
            (
                "semver(managedCluster.status.version.kubernetes, true).isLessThan(semver('1.31.0'))",
                true,
            ),
            (
                "semver('1.2.3').compareTo(semver('1.2.3')) == 0 && semver('1.2.3').compareTo(semver('2.0.0')) == -1",
                true,
            ),
            (
                "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3",
                true,
            ),
            (
                "isSemver('1.0.0') && !isSemver('v1.0') && isSemver('v1.0', true) && !isSemver('1.0', false)",
                true,
            ),
            ("semver('1.0.0+a') == semver('1.0.0+b')", true),
            // Without normalization a leading `v` is an error.
            (
                "semver(managedCluster.status.version.kubernetes).major() == 1",
                false,
            ),
        ]);
    }

    #[test]
    fn ip_and_cidr() {
        assert_all(&[
            (
                "ip('127.0.0.1').family() == 4 && ip('::1').family() == 6",
                true,
            ),
            (
                "isIP('::1') && !isIP('127.0.0.256') && !isIP('::ffff:1.2.3.4')",
                true,
            ),
            (
                "ip.isCanonical('2001:db8::abcd') && !ip.isCanonical('2001:DB8::ABCD')",
                true,
            ),
            (
                "ip('0.0.0.0').isUnspecified() && ip('::1').isLoopback()",
                true,
            ),
            (
                "ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()",
                true,
            ),
            (
                "ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()",
                true,
            ),
            (
                "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
                true,
            ),
            (
                "string(ip('::1')) == '::1' && ip('10.0.0.1') == ip('10.0.0.1')",
                true,
            ),
            (
                "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1')) && !cidr('192.168.0.0/24').containsIP('192.168.1.1')",
                true,
            ),
            (
                "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24')) && !cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')",
                true,
            ),
            (
                "cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
                true,
            ),
            (
                "cidr('::1/128').prefixLength() == 128 && string(cidr('10.0.0.0/8')) == '10.0.0.0/8'",
                true,
            ),
            (
                "isCIDR('192.168.0.0/16') && !isCIDR('192.168.0.0/33')",
                true,
            ),
        ]);
    }

    #[test]
    fn parse_json() {
        assert_all(&[
            (
                "managedCluster.metadata.annotations.config.parseJSON().zones == ['a', 'b']",
                true,
            ),
            (
                "managedCluster.metadata.annotations.config.parseJSON().gpu",
                true,
            ),
            // Numbers are doubles, as Go's json.Unmarshal makes them.
            (
                "'{\"n\": 1}'.parseJSON().n == 1.0 && type('{\"n\": 1}'.parseJSON().n) == double",
                true,
            ),
            ("'not json'.parseJSON() == {}", false),
        ]);
    }

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
}
