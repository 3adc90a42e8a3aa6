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
//! times that on 10,000 clusters. Here the pass has a budget too (placement-core's `limits`): the
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
mod presize;
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

/// The most memory one compiled expression may hold (estimated from what it holds after
/// parsing: [`NODE_BYTES`](cost::NODE_BYTES) per tree node, list and map elements included,
/// plus the bytes of its strings). About 6,000 list elements; ordinary expressions hold a few
/// KiB.
pub const MAX_COMPILED_EXPRESSION_BYTES: usize = 1 << 20;
/// The most memory the compiled `celSelector` expressions of one Placement may hold, all its
/// predicates together (placement-core checks the sum; [`CelSelector::compile`] stops as soon
/// as one selector is over it).
pub const MAX_COMPILED_PLACEMENT_BYTES: usize = 4 << 20;

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
    size: usize,
}

/// Why expressions did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileError {
    /// The expressions are wrong: the same input always fails (cacheable).
    Invalid(String),
    /// The compiler could not run (its thread could not start): may pass; never cached.
    Transient(String),
}

/// Units charged between two looks at the caller's [`Deadline`] inside one evaluation: about a
/// millisecond of work (see the `cel_calibrate` example).
pub const DEADLINE_EVERY_UNITS: u64 = 10_000;

/// When an evaluation must stop. This crate reads no clock: the caller's deadline does. It is
/// looked at inside an evaluation, every [`DEADLINE_EVERY_UNITS`] units.
pub trait Deadline: Sync {
    fn passed(&self) -> bool;
}

/// No deadline.
impl Deadline for () {
    fn passed(&self) -> bool {
        false
    }
}

/// A closure, for callers that keep the clock: `&|| Instant::now() >= until`.
impl<F: Fn() -> bool + Sync> Deadline for F {
    fn passed(&self) -> bool {
        self()
    }
}

/// The pass's CEL budget ran out while evaluating a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolExhausted {
    /// The cost pool is empty.
    Cost,
    /// The deadline passed (looked at inside the evaluation).
    Time,
}

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
        let size = programs.iter().map(|p| p.size).sum();
        Ok(CelSelector { programs, size })
    }

    /// The memory the compiled expressions hold, in bytes (estimated as for
    /// [`MAX_COMPILED_EXPRESSION_BYTES`]).
    pub fn size(&self) -> usize {
        self.size
    }

    /// True when every expression evaluates to `true` for `cluster`.
    pub fn matches(&self, cluster: &CelCluster, scores: &dyn ScoreSource) -> bool {
        let mut unlimited = u64::MAX;
        self.matches_within(cluster, scores, &mut unlimited, &())
            .unwrap_or(false)
    }

    /// [`CelSelector::matches`], drawing the units spent from `pool`, the budget of the whole
    /// pass, and stopping once `deadline` has passed. Each expression still gets at most
    /// upstream's per-call limit and the cluster at most its per-cluster budget (running out of
    /// those makes the cluster not match, as upstream); running out of the pool or of time
    /// stops the pass: `Err`.
    pub fn matches_within(
        &self,
        cluster: &CelCluster,
        scores: &dyn ScoreSource,
        pool: &mut u64,
        deadline: &dyn Deadline,
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
                deadline,
            };
            let matched = runtime.evaluate(program, &activation);
            let used = activation.meter.used().min(limit);
            budget = budget.saturating_sub(used);
            *pool = pool.saturating_sub(used);
            if activation.meter.interrupted() {
                return Err(PoolExhausted::Time);
            }
            if activation.meter.exceeded() && limit < own_limit {
                return Err(PoolExhausted::Cost);
            }
            if !matched {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The message of a Placement whose compiled expressions hold more than
/// [`MAX_COMPILED_PLACEMENT_BYTES`] (`total` so far: counting stops there).
pub fn placement_too_big(total: usize) -> String {
    format!(
        "compilation failed: the celSelector expressions compile to at least {total} bytes, more than the limit of {MAX_COMPILED_PLACEMENT_BYTES} bytes per Placement"
    )
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
        let functions: [(&str, NativeFn); 6] = [
            (cost::COST_FN, Box::new(cost::cost_fn)),
            (cost::SCAN_FN, Box::new(cost::scan_fn)),
            (cost::CHARGE_FN, Box::new(cost::charge_fn)),
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
        // Refuse what is surely too big before parsing it: the parser's own memory is many
        // times the tree's (see `presize`).
        let mut total = 0usize;
        for (i, source) in sources.iter().enumerate() {
            let nodes = presize::nodes_at_least(source);
            let bytes = nodes.saturating_mul(cost::NODE_BYTES);
            if bytes > MAX_COMPILED_EXPRESSION_BYTES {
                return Err(CompileError::Invalid(format!(
                    "compilation failed: celExpressions[{i}] holds at least {nodes} literals and names, which compile to at least {bytes} bytes, more than the limit of {MAX_COMPILED_EXPRESSION_BYTES} bytes per expression"
                )));
            }
            total = total.saturating_add(bytes);
        }
        if total > MAX_COMPILED_PLACEMENT_BYTES {
            return Err(CompileError::Invalid(placement_too_big(total)));
        }
        #[cfg(any(test, feature = "test-hooks"))]
        if test_hooks::FAIL_SPAWN.with(std::cell::Cell::get) {
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
                    let mut total = 0usize;
                    let mut programs = Vec::with_capacity(sources.len());
                    for (i, source) in sources.iter().enumerate() {
                        let program = self
                            .compile_on_this_thread(i, source)
                            .map_err(CompileError::Invalid)?;
                        total = total.saturating_add(program.size);
                        if total > MAX_COMPILED_PLACEMENT_BYTES {
                            return Err(CompileError::Invalid(placement_too_big(total)));
                        }
                        programs.push(program);
                    }
                    Ok(programs)
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

    fn compile_on_this_thread(&self, index: usize, source: &str) -> Result<Program, String> {
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
        let program = cost::instrument(parsed.expression().clone());
        if program.size > MAX_COMPILED_EXPRESSION_BYTES {
            return Err(format!(
                "compilation failed: celExpressions[{index}] compiles to about {} bytes, more than the limit of {MAX_COMPILED_EXPRESSION_BYTES} bytes per expression",
                program.size
            ));
        }
        Ok(program)
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
    deadline: &'a dyn Deadline,
}

impl VariableResolver for Activation<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        match variable {
            CLUSTER_VAR => Some(CowVal::Borrowed(self.cluster.value.as_ref())),
            // Every charge asks for the meter: where the deadline is looked at.
            cost::METER_VAR => {
                self.meter.look_at(self.deadline);
                Some(CowVal::Borrowed(&self.meter))
            }
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
    cost::charge(ftx.ptx, 0, Some(list.as_ref()), cost::Rate::Copy)?;
    Ok(CowVal::Owned(list.into_owned()))
}

/// Hooks for tests, in this crate and in crates that test through it (feature `test-hooks`).
#[cfg(any(test, feature = "test-hooks"))]
#[doc(hidden)]
pub mod test_hooks {
    thread_local! {
        /// Makes this thread's compiles fail as if the compiler thread could not start.
        pub static FAIL_SPAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
}

#[cfg(test)]
mod tests;
