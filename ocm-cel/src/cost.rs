//! The runtime cost budget (see the module doc of `cel` for the why).
//!
//! The `cel` crate has no hook for interrupts or cost tracking, so the budget is built from
//! what it does have: an expression tree we may rewrite before evaluation, and functions that
//! can read per-evaluation state. [`instrument`] inserts calls to `@cost(units, value)`, a
//! function that charges `units` plus the size of `value` to the evaluation's [`Meter`] and
//! hands `value` back unchanged (no copy). `@` cannot start a CEL identifier, so expressions can
//! neither call nor shadow it. Charges, in cel-go's spirit:
//!
//! - once per evaluation: one unit per non-literal node outside comprehension loops;
//! - per comprehension iteration: the node count of the loop condition and step;
//! - per value that an operation copies or traverses: its size (one unit per element, map entry
//!   or scalar, plus one per ten bytes of string), computed with an early stop at the
//!   remaining budget. That covers list elements copied into a list or map literal, the
//!   elements a comprehension binds, and the operands of every function whose work grows with
//!   its inputs (`+`, `contains`, `split`, `==` between two non-literals, ...);
//! - `replace()` and `matches()` are routed to our own functions, which charge the size of the
//!   output (before building it) and an estimate of the regex compile work (before compiling).
//!
//! When the meter runs out, `@cost` fails the call, and the meter remembers it: an error that
//! CEL's `||`, `&&`, `all()` or `exists()` would absorb still makes the whole expression false.
//! Each loop charges in its condition (or, for `map()` and `filter()`, in the step, whose errors
//! are never absorbed), so a loop stops at its next iteration once the meter is empty.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators,
};
use cel::common::types::{
    CelBool, CelBytes, CelInt, CelList, CelMap, CelMapKey, CelOptional, CelString, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Context, ExecutionError, FunctionContext};

use super::check;

/// Charges its first argument (an int literal) plus the size of its second, which it returns.
pub(super) const COST_FN: &str = "@cost";
/// Charges its first argument (an int literal) only, and returns its second: for work whose size
/// is known when the expression is compiled (building a list literal, `in` on one).
pub(super) const CHARGE_FN: &str = "@charge";
/// Like [`COST_FN`], measuring strings at the [`Rate::Scan`] rate.
pub(super) const SCAN_FN: &str = "@scan";
/// Bytes of string one unit pays for when an operation copies it or builds a new one (`+`,
/// `split`, `join`, copying into a list...). What bounds an expression's allocations: 1,000,000
/// units hold about 100 MB of strings, as many as list elements of the same budget.
pub(super) const COPY_BYTES_PER_UNIT: usize = 100;
/// Bytes of string one unit pays for when an operation only reads it (`==`, `<`, `contains`,
/// `startsWith`, `endsWith`, map keys). Measured with the `cel_calibrate` example: about as much
/// time as a loop iteration.
pub(super) const SCAN_BYTES_PER_UNIT: usize = 1000;
/// Bytes of input one unit pays for when a regular expression runs over it (slower per byte).
pub(super) const REGEX_BYTES_PER_UNIT: usize = 10;

/// How string bytes are charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rate {
    /// Copied or built: [`COPY_BYTES_PER_UNIT`].
    Copy,
    /// Only read: [`SCAN_BYTES_PER_UNIT`].
    Scan,
}

/// The units of string work over `len` bytes, besides the one for the value itself.
pub(super) fn string_units(len: usize, rate: Rate) -> u64 {
    let per_unit = match rate {
        Rate::Copy => COPY_BYTES_PER_UNIT,
        Rate::Scan => SCAN_BYTES_PER_UNIT,
    };
    (len / per_unit) as u64
}
/// `replace()`, charging the size of its result before building it.
pub(super) const REPLACE_FN: &str = "@replace";
/// `matches()`, charging the regex compile work before compiling, on RE2-compatible syntax.
pub(super) const MATCHES_FN: &str = "@matches";
/// The variable the evaluation's [`Meter`] is bound to.
pub(super) const METER_VAR: &str = "@meter";

/// A function that gets the evaluation context: how `@cost` reaches the meter. (The same type as
/// the `cel` crate's private `magic::Function`.)
pub(super) type NativeFn = Box<
    dyn for<'c, 'v> Fn(&mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError>
        + Send
        + Sync,
>;

static METER_TYPE: Type = Type::new_unspecified_type("@meter");

/// The budget of one expression evaluation. Interior mutability because functions reach it
/// through a shared `&Context`; atomics only because values must be `Sync` (one thread uses it).
#[derive(Debug)]
pub(super) struct Meter {
    limit: u64,
    used: AtomicU64,
    exceeded: AtomicBool,
    /// The caller's deadline passed during this evaluation.
    interrupted: AtomicBool,
    /// `used` when the deadline was last looked at.
    looked_at: AtomicU64,
}

impl Meter {
    pub(super) fn new(limit: u64) -> Meter {
        Meter {
            limit,
            used: AtomicU64::new(0),
            exceeded: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            looked_at: AtomicU64::new(0),
        }
    }

    pub(super) fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// Looks at `deadline` when [`super::DEADLINE_EVERY_UNITS`] or more were charged since the
    /// last look; once it has passed, every further charge fails.
    pub(super) fn look_at(&self, deadline: &dyn super::Deadline) {
        let used = self.used();
        if used.saturating_sub(self.looked_at.load(Ordering::Relaxed)) < super::DEADLINE_EVERY_UNITS
        {
            return;
        }
        self.looked_at.store(used, Ordering::Relaxed);
        if deadline.passed() {
            self.interrupted.store(true, Ordering::Relaxed);
        }
    }

    pub(super) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub(super) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used())
    }

    pub(super) fn charge(&self, units: u64) -> Result<(), ExecutionError> {
        if self.interrupted() {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(ExecutionError::function_error(
                COST_FN,
                "operation cancelled: the deadline passed",
            ));
        }
        let used = self.used().saturating_add(units);
        self.used.store(used, Ordering::Relaxed);
        if used > self.limit {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(ExecutionError::function_error(
                COST_FN,
                format!(
                    "operation cancelled: actual cost limit exceeded ({})",
                    self.limit
                ),
            ));
        }
        Ok(())
    }
}

impl Val for Meter {
    fn get_type(&self) -> &Type {
        &METER_TYPE
    }
    fn cel_type() -> &'static Type {
        &METER_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        // Never cloned in practice (expressions cannot name it); a clone must not share state.
        Box::new(Meter::new(0))
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for Meter {}

/// Charges `units` plus the size of `value` to the meter of the evaluation `ptx` belongs to.
pub(super) fn charge(
    ptx: &Context<'_, '_>,
    units: u64,
    value: Option<&dyn Val>,
    rate: Rate,
) -> Result<(), ExecutionError> {
    let missing = || ExecutionError::function_error(COST_FN, "no cost meter in this evaluation");
    let meter = ptx.get_variable(METER_VAR).ok_or_else(missing)?;
    let meter = meter.downcast_ref::<Meter>().ok_or_else(missing)?;
    let size = value.map_or(0, |v| value_cost(v, meter.remaining(), rate));
    meter.charge(units.saturating_add(size))
}

/// The size of a value in budget units, counting no further than a little past `cap`.
pub(super) fn value_cost(value: &dyn Val, cap: u64, rate: Rate) -> u64 {
    let text = |len: usize| 1 + string_units(len, rate);
    let scalar = |value: &dyn Val| -> Option<u64> {
        if let Some(s) = value.downcast_ref::<CelString<'_>>() {
            Some(text(s.inner().len()))
        } else if let Some(b) = value.downcast_ref::<CelBytes<'_>>() {
            Some(text(b.inner().len()))
        } else if value.downcast_ref::<CelList<'_>>().is_some()
            || value.downcast_ref::<CelMap<'_>>().is_some()
            || value.downcast_ref::<CelOptional<'_>>().is_some()
        {
            None
        } else {
            Some(1)
        }
    };
    // Most operands are scalars: no allocation for them.
    if let Some(cost) = scalar(value) {
        return cost;
    }
    // Containers: an explicit stack, as nesting depth is not bounded by anything we control.
    let mut total = 0u64;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        total = total.saturating_add(1);
        if let Some(list) = value.downcast_ref::<CelList<'_>>() {
            pending.extend(list.inner().iter().map(|v| v.as_ref()));
        } else if let Some(map) = value.downcast_ref::<CelMap<'_>>() {
            for (key, v) in map.inner() {
                total = total.saturating_add(key_cost(key, rate));
                pending.push(v.as_ref());
            }
        } else if let Some(optional) = value.downcast_ref::<CelOptional<'_>>() {
            pending.extend(optional.inner());
        } else if let Some(cost) = scalar(value) {
            total = total.saturating_add(cost - 1);
        }
        if total > cap {
            break;
        }
    }
    total
}

fn key_cost(key: &CelMapKey<'_>, rate: Rate) -> u64 {
    match key.inner().downcast_ref::<CelString<'_>>() {
        Some(s) => 1 + string_units(s.inner().len(), rate),
        None => 1,
    }
}

/// A compiled expression, instrumented.
#[derive(Debug)]
pub(super) struct Program {
    pub(super) expr: IdedExpr,
    /// Charged once per evaluation: the nodes outside comprehension loops.
    pub(super) base_cost: u64,
    /// What the program holds, in bytes (estimated: see [`held_bytes`]).
    pub(super) size: usize,
}

/// The memory one node of an expression tree holds besides its strings: the node and its share
/// of the vectors and boxes that hold it (measured with the `cel_memory` example of
/// placement-core: about 150 bytes a list element, instrumented).
pub(super) const NODE_BYTES: usize = 160;

/// What a program holds: [`NODE_BYTES`] per node (list and map elements included) plus the
/// bytes of its strings (literals, names, fields, functions).
pub(super) fn held_bytes(e: &IdedExpr) -> usize {
    let mut total = 0usize;
    let mut pending = vec![e];
    while let Some(e) = pending.pop() {
        total = total.saturating_add(NODE_BYTES);
        match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => total += s.inner().len(),
            Expr::Literal(LiteralValue::Bytes(b)) => total += b.inner().len(),
            Expr::Literal(_) | Expr::Unspecified => {}
            Expr::Ident(name) => total += name.len(),
            Expr::Select(s) => {
                total += s.field.len();
                pending.push(&s.operand);
            }
            Expr::Call(c) => {
                total += c.func_name.len();
                pending.extend(c.target.as_deref());
                pending.extend(c.args.iter());
            }
            Expr::List(l) => pending.extend(l.elements.iter()),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(e) = &entry.expr {
                        pending.push(&e.key);
                        pending.push(&e.value);
                    }
                }
            }
            Expr::Struct(st) => {
                total += st.type_name.len();
                for entry in &st.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => {
                            total += f.field.len();
                            pending.push(&f.value);
                        }
                        EntryExpr::MapEntry(e) => {
                            pending.push(&e.key);
                            pending.push(&e.value);
                        }
                    }
                }
            }
            Expr::Comprehension(c) => {
                total += c.iter_var.len() + c.accu_var.len();
                pending.extend([
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]);
            }
        }
    }
    total
}

/// Rewrites a checked expression so that evaluating it charges the meter (see the module doc).
pub(super) fn instrument(expr: IdedExpr) -> Program {
    let base_cost = static_cost(&expr);
    let mut rewriter = Rewriter {
        next_id: max_id(&expr) + 1,
    };
    let expr = rewriter.rewrite(expr);
    let size = held_bytes(&expr);
    Program {
        expr,
        base_cost,
        size,
    }
}

/// One unit per non-literal node, not counting comprehension loops (charged per iteration).
fn static_cost(e: &IdedExpr) -> u64 {
    let children: u64 = match &e.expr {
        Expr::Literal(_) => return 0,
        Expr::Unspecified | Expr::Ident(_) => 0,
        Expr::Select(s) => static_cost(&s.operand),
        Expr::Call(c) => {
            c.target.iter().map(|t| static_cost(t)).sum::<u64>()
                + c.args.iter().map(static_cost).sum::<u64>()
        }
        Expr::List(l) => l.elements.iter().map(static_cost).sum(),
        Expr::Map(m) => m.entries.iter().map(|e| entry_cost(&e.expr)).sum(),
        Expr::Struct(s) => s.entries.iter().map(|e| entry_cost(&e.expr)).sum(),
        Expr::Comprehension(c) => {
            static_cost(&c.iter_range) + static_cost(&c.accu_init) + static_cost(&c.result)
        }
    };
    1 + children
}

fn entry_cost(entry: &EntryExpr) -> u64 {
    match entry {
        EntryExpr::MapEntry(e) => static_cost(&e.key) + static_cost(&e.value),
        EntryExpr::StructField(f) => static_cost(&f.value),
    }
}

fn max_id(e: &IdedExpr) -> u64 {
    let children = match &e.expr {
        Expr::Select(s) => max_id(&s.operand),
        Expr::Call(c) => c
            .target
            .iter()
            .map(|t| max_id(t))
            .chain(c.args.iter().map(max_id))
            .max()
            .unwrap_or(0),
        Expr::List(l) => l.elements.iter().map(max_id).max().unwrap_or(0),
        Expr::Map(m) => m
            .entries
            .iter()
            .map(|e| e.id.max(entry_max_id(&e.expr)))
            .max()
            .unwrap_or(0),
        Expr::Struct(s) => s
            .entries
            .iter()
            .map(|e| e.id.max(entry_max_id(&e.expr)))
            .max()
            .unwrap_or(0),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .map(max_id)
        .max()
        .unwrap_or(0),
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => 0,
    };
    e.id.max(children)
}

fn entry_max_id(entry: &EntryExpr) -> u64 {
    match entry {
        EntryExpr::MapEntry(e) => max_id(&e.key).max(max_id(&e.value)),
        EntryExpr::StructField(f) => max_id(&f.value),
    }
}

/// How a call's operands are charged.
enum Policy {
    /// Constant work whatever the operands: logic, arithmetic, presence tests.
    Free,
    /// Indexing: the key is hashed or compared, the container is not traversed.
    KeyOnly,
    /// Reading bounded by the smaller operand (`==`, `<`, `startsWith`): when one operand is a
    /// literal, its size; otherwise both operands' (at the scan rate).
    SmallerOperand,
    /// `x in y`: bounded by a list literal on the right.
    In,
    /// `managedCluster.scores(name)`: the receiver is only read for its name.
    ArgumentsOnly,
    /// Reads every operand, the receiver included, building nothing: `contains`.
    Scan,
    /// Work that grows with every operand, the receiver included.
    All,
}

fn policy(function: &str) -> Policy {
    match function {
        operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NEGATE
        | operators::CONDITIONAL
        | operators::NOT_STRICTLY_FALSE
        | operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO
        | operators::OPT_SELECT
        | "hasValue"
        | COST_FN
        | SCAN_FN
        | CHARGE_FN => Policy::Free,
        operators::INDEX | operators::OPT_INDEX => Policy::KeyOnly,
        operators::EQUALS
        | operators::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
        | "startsWith"
        | "endsWith" => Policy::SmallerOperand,
        operators::IN => Policy::In,
        "contains" => Policy::Scan,
        "scores" => Policy::ArgumentsOnly,
        _ => Policy::All,
    }
}

struct Rewriter {
    next_id: u64,
}

impl Rewriter {
    fn node(&mut self, expr: Expr) -> IdedExpr {
        self.next_id += 1;
        IdedExpr {
            id: self.next_id,
            expr,
        }
    }

    /// `@cost(units, e)`.
    fn wrap(&mut self, units: u64, e: IdedExpr) -> IdedExpr {
        let units = self.node(Expr::Literal(LiteralValue::Int(CelInt::from(
            i64::try_from(units).unwrap_or(i64::MAX),
        ))));
        self.node(Expr::Call(CallExpr {
            func_name: COST_FN.to_owned(),
            target: None,
            args: vec![units, e],
        }))
    }

    /// `@charge(units, e)`, or `e` when `units` is zero.
    fn charge_units(&mut self, units: u64, e: IdedExpr) -> IdedExpr {
        if units == 0 {
            return e;
        }
        let units = self.node(Expr::Literal(LiteralValue::Int(CelInt::from(
            i64::try_from(units).unwrap_or(i64::MAX),
        ))));
        self.node(Expr::Call(CallExpr {
            func_name: CHARGE_FN.to_owned(),
            target: None,
            args: vec![units, e],
        }))
    }

    /// `e`, charged for its size at the copy rate.
    fn charged(&mut self, e: IdedExpr) -> IdedExpr {
        self.charged_at(e, Rate::Copy)
    }

    /// `e`, charged for its size at `rate`: at run time, or statically for a string literal.
    fn charged_at(&mut self, e: IdedExpr, rate: Rate) -> IdedExpr {
        let free = match &e.expr {
            Expr::Literal(literal) => return self.charge_units(literal_units(literal, rate), e),
            // Comprehension accumulators (`@result`): charged where they are built.
            Expr::Ident(name) => name.starts_with('@'),
            // Already charged: measured, or a literal charged where it is built.
            Expr::Call(c) => [COST_FN, SCAN_FN, CHARGE_FN].contains(&c.func_name.as_str()),
            _ => false,
        };
        if free {
            e
        } else if rate == Rate::Scan {
            let e = self.wrap(0, e);
            match e.expr {
                Expr::Call(mut call) => {
                    call.func_name = SCAN_FN.to_owned();
                    IdedExpr {
                        id: e.id,
                        expr: Expr::Call(call),
                    }
                }
                other => IdedExpr {
                    id: e.id,
                    expr: other,
                },
            }
        } else {
            self.wrap(0, e)
        }
    }

    /// A list or map literal's elements: literal ones are paid for in `creation` (one unit each
    /// plus their string work: building the list copies them), the others by their size.
    fn element(&mut self, e: IdedExpr, creation: &mut u64) -> IdedExpr {
        let e = self.rewrite(e);
        if let Expr::Literal(literal) = &e.expr {
            *creation = creation.saturating_add(1 + literal_units(literal, Rate::Copy));
            e
        } else {
            self.charged(e)
        }
    }

    fn rewrite(&mut self, e: IdedExpr) -> IdedExpr {
        let expr = match e.expr {
            Expr::Call(call) => self.call(call),
            Expr::Select(mut select) => {
                let operand = std::mem::take(&mut *select.operand);
                *select.operand = self.rewrite(operand);
                Expr::Select(select)
            }
            Expr::List(mut list) => {
                let mut creation = 0;
                list.elements = std::mem::take(&mut list.elements)
                    .into_iter()
                    .map(|e| self.element(e, &mut creation))
                    .collect();
                let list = IdedExpr {
                    id: e.id,
                    expr: Expr::List(list),
                };
                return self.charge_units(creation, list);
            }
            Expr::Map(mut map) => {
                let mut creation = 0;
                for entry in &mut map.entries {
                    if let EntryExpr::MapEntry(e) = &mut entry.expr {
                        e.key = self.element(std::mem::take(&mut e.key), &mut creation);
                        e.value = self.element(std::mem::take(&mut e.value), &mut creation);
                    } else {
                        self.entry(&mut entry.expr);
                    }
                }
                let map = IdedExpr {
                    id: e.id,
                    expr: Expr::Map(map),
                };
                return self.charge_units(creation, map);
            }
            Expr::Struct(mut s) => {
                for entry in &mut s.entries {
                    self.entry(&mut entry.expr);
                }
                Expr::Struct(s)
            }
            Expr::Comprehension(c) => self.comprehension(*c),
            other => other,
        };
        IdedExpr { id: e.id, expr }
    }

    fn entry(&mut self, entry: &mut EntryExpr) {
        let values = match entry {
            EntryExpr::MapEntry(e) => vec![&mut e.key, &mut e.value],
            EntryExpr::StructField(f) => vec![&mut f.value],
        };
        for value in values {
            let rewritten = self.rewrite(std::mem::take(value));
            *value = self.charged(rewritten);
        }
    }

    fn call(&mut self, call: CallExpr) -> Expr {
        let CallExpr {
            mut func_name,
            mut target,
            mut args,
        } = call;
        // `optional.of(x)` parses as a call of `of` on `optional`: make it the global call it
        // is, so that the target is neither evaluated nor charged (and no name is built per call).
        if let Some(name) = target.as_deref().and_then(check::dotted) {
            let qualified = format!("{name}.{func_name}");
            if check::is_namespaced(&qualified) {
                func_name = qualified;
                target = None;
            }
        }
        // Our charging versions of `matches` and `replace`, called globally on (receiver, args...).
        if func_name == "matches" || (func_name == "replace" && target.is_some()) {
            func_name = if func_name == "matches" {
                MATCHES_FN
            } else {
                REPLACE_FN
            }
            .to_owned();
            if let Some(receiver) = target.take() {
                args.insert(0, *receiver);
            }
        }
        // `x in [...]` compares `x` with every element: the literal's length.
        // `x in {...}` hashes `x` into a map literal, charged where it is built.
        let (in_literal, in_map) = match (func_name.as_str(), args.get(1).map(|a| &a.expr)) {
            (operators::IN, Some(Expr::List(l))) => (Some(l.elements.len() as u64), false),
            (operators::IN, Some(Expr::Map(_))) => (None, true),
            _ => (None, false),
        };
        let mut target = target.map(|t| Box::new(self.rewrite(*t)));
        let mut args: Vec<IdedExpr> = args.into_iter().map(|a| self.rewrite(a)).collect();

        let literal = |e: &IdedExpr| matches!(e.expr, Expr::Literal(_));
        let (charge_target, charge_args) = match policy(&func_name) {
            Policy::Free => (false, false),
            Policy::KeyOnly => {
                if let Some(key) = args.get_mut(1) {
                    *key = self.charged_at(std::mem::take(key), Rate::Scan);
                }
                (false, false)
            }
            Policy::SmallerOperand => {
                let bounded = target.as_deref().is_some_and(literal) || args.iter().any(literal);
                if bounded {
                    // A literal bounds the work: charge the size of the first one only.
                    let mut first = true;
                    let mut scan_literal = |this: &mut Self, e: IdedExpr| {
                        if first && literal(&e) {
                            first = false;
                            this.charged_at(e, Rate::Scan)
                        } else {
                            e
                        }
                    };
                    if let Some(t) = target.take() {
                        target = Some(Box::new(scan_literal(self, *t)));
                    }
                    args = args.into_iter().map(|a| scan_literal(self, a)).collect();
                    (false, false)
                } else {
                    if let Some(t) = target.take() {
                        target = Some(Box::new(self.charged_at(*t, Rate::Scan)));
                    }
                    args = args
                        .into_iter()
                        .map(|a| self.charged_at(a, Rate::Scan))
                        .collect();
                    (false, false)
                }
            }
            Policy::In => {
                if let Some(len) = in_literal
                    && let Some(list) = args.get_mut(1)
                {
                    let list = std::mem::take(list);
                    args[1] = self.charge_units(len, list);
                    (false, false)
                } else {
                    (false, !in_map)
                }
            }
            Policy::ArgumentsOnly => (false, true),
            Policy::Scan => {
                if let Some(t) = target.take() {
                    target = Some(Box::new(self.charged_at(*t, Rate::Scan)));
                }
                args = args
                    .into_iter()
                    .map(|a| self.charged_at(a, Rate::Scan))
                    .collect();
                (false, false)
            }
            Policy::All => (true, true),
        };
        if charge_target && let Some(t) = target.take() {
            target = Some(Box::new(self.charged(*t)));
        }
        if charge_args {
            args = args.into_iter().map(|a| self.charged(a)).collect();
        }
        Expr::Call(CallExpr {
            func_name,
            target,
            args,
        })
    }

    fn comprehension(&mut self, mut c: ComprehensionExpr) -> Expr {
        // What one iteration evaluates, counted before we add to it.
        let per_iteration = (static_cost(&c.loop_cond) + static_cost(&c.loop_step)).max(1);

        let range = self.rewrite(std::mem::take(&mut c.iter_range));
        // Binding each element copies it: charge the range (a list literal is charged where it
        // is built).
        c.iter_range = self.charged(range);
        c.accu_init = self.rewrite(std::mem::take(&mut c.accu_init));
        c.result = self.rewrite(std::mem::take(&mut c.result));

        if is_append_step(&c) {
            // `map()` / `filter()`: the crate runs these in place only while the condition is a
            // literal and the step keeps its `@result + [e]` shape, so charge inside the step.
            c.loop_step = self.append_step(std::mem::take(&mut c.loop_step), per_iteration);
        } else {
            c.loop_step = self.rewrite(std::mem::take(&mut c.loop_step));
            let condition = self.rewrite(std::mem::take(&mut c.loop_cond));
            // An error in the condition is never absorbed: it ends the loop.
            c.loop_cond = self.wrap(per_iteration, condition);
        }
        Expr::Comprehension(Box::new(c))
    }

    /// Rewrites `@result + [e]` (charging `e` per iteration) or `g ? @result + [e] : @result`
    /// (charging `g` per iteration, `e` for its size), keeping the shape.
    fn append_step(&mut self, mut step: IdedExpr, per_iteration: u64) -> IdedExpr {
        if let Expr::Call(call) = &mut step.expr
            && call.func_name == operators::CONDITIONAL
        {
            if let [guard, append, _] = call.args.as_mut_slice() {
                let g = self.rewrite(std::mem::take(guard));
                *guard = self.wrap(per_iteration, g);
                self.append_elements(append, None);
            }
        } else {
            self.append_elements(&mut step, Some(per_iteration));
        }
        step
    }

    /// The elements of the list in `@result + [e]`: the first also carries `per_iteration`.
    fn append_elements(&mut self, append: &mut IdedExpr, mut per_iteration: Option<u64>) {
        let Expr::Call(add) = &mut append.expr else {
            return;
        };
        let Some(Expr::List(list)) = add.args.get_mut(1).map(|a| &mut a.expr) else {
            return;
        };
        for element in &mut list.elements {
            let e = self.rewrite(std::mem::take(element));
            *element = match per_iteration.take() {
                Some(units) => self.wrap(units, e),
                None => self.charged(e),
            };
        }
    }
}

/// The units a literal is charged for beyond its node: its string work.
fn literal_units(literal: &LiteralValue, rate: Rate) -> u64 {
    match literal {
        LiteralValue::String(s) => string_units(s.inner().len(), rate),
        LiteralValue::Bytes(b) => string_units(b.inner().len(), rate),
        _ => 0,
    }
}

/// The `map()` / `filter()` shape the `cel` crate evaluates in place (its `AppendStep`).
fn is_append_step(c: &ComprehensionExpr) -> bool {
    let accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    let append = |e: &IdedExpr| match &e.expr {
        Expr::Call(add) if add.func_name == operators::ADD && add.target.is_none() => {
            matches!(add.args.as_slice(), [lhs, rhs] if accu(lhs) && matches!(rhs.expr, Expr::List(_)))
        }
        _ => false,
    };
    if !accu(&c.result) || !matches!(c.loop_cond.expr, Expr::Literal(_)) {
        return false;
    }
    match &c.loop_step.expr {
        Expr::Call(cond) if cond.func_name == operators::CONDITIONAL && cond.target.is_none() => {
            matches!(cond.args.as_slice(), [_, step, otherwise] if append(step) && accu(otherwise))
        }
        _ => append(&c.loop_step),
    }
}

/// `@cost(units, value)`: see the module doc. Returns `value` as it got it, borrowed or not.
pub(super) fn cost_fn<'c, 'v>(
    ftx: &mut FunctionContext<'c, 'v>,
) -> Result<CowVal<'c, 'v>, ExecutionError> {
    measured(ftx, Rate::Copy)
}

/// `@scan(units, value)`: [`cost_fn`] at the scan rate.
pub(super) fn scan_fn<'c, 'v>(
    ftx: &mut FunctionContext<'c, 'v>,
) -> Result<CowVal<'c, 'v>, ExecutionError> {
    measured(ftx, Rate::Scan)
}

fn measured<'c, 'v>(
    ftx: &mut FunctionContext<'c, 'v>,
    rate: Rate,
) -> Result<CowVal<'c, 'v>, ExecutionError> {
    let (units, value) = units_and_value(ftx)?;
    charge(ftx.ptx, units, Some(value.as_ref()), rate)?;
    Ok(value)
}

/// `@charge(units, value)`: charges `units` only, returns `value` as it got it.
pub(super) fn charge_fn<'c, 'v>(
    ftx: &mut FunctionContext<'c, 'v>,
) -> Result<CowVal<'c, 'v>, ExecutionError> {
    let (units, value) = units_and_value(ftx)?;
    charge(ftx.ptx, units, None, Rate::Copy)?;
    Ok(value)
}

/// The `(units, value)` arguments of the charging functions (negative units: none).
fn units_and_value<'c, 'v>(
    ftx: &mut FunctionContext<'c, 'v>,
) -> Result<(u64, CowVal<'c, 'v>), ExecutionError> {
    let value = ftx
        .args
        .pop()
        .ok_or_else(|| ExecutionError::invalid_argument_count(2, 0))?;
    let units = ftx
        .args
        .first()
        .and_then(|u| u.downcast_ref::<CelInt>())
        .map_or(0, |u| u64::try_from(*u.inner()).unwrap_or(0));
    Ok((units, value))
}

fn string_arg<'a, 'v>(
    ftx: &'a FunctionContext<'_, 'v>,
    index: usize,
) -> Result<&'a CelString<'v>, ExecutionError> {
    ftx.args
        .get(index)
        .and_then(|a| a.downcast_ref::<CelString<'_>>())
        .ok_or_else(|| ExecutionError::function_error(ftx.name, "expected string arguments"))
}

/// `s.replace(old, new[, n])` with cel-go (Go `strings.Replace`) semantics: `n < 0` replaces
/// every occurrence, an empty `old` matches before every character and at the end.
pub(super) fn replace_fn<'c, 'v>(
    ftx: &mut FunctionContext<'c, 'v>,
) -> Result<CowVal<'c, 'v>, ExecutionError> {
    let (s, old, new) = (
        string_arg(ftx, 0)?.inner(),
        string_arg(ftx, 1)?.inner(),
        string_arg(ftx, 2)?.inner(),
    );
    let limit = match ftx.args.get(3) {
        None => None,
        Some(n) => {
            let n = n
                .downcast_ref::<CelInt>()
                .ok_or_else(|| ExecutionError::function_error("replace", "count must be an int"))?;
            usize::try_from(*n.inner()).ok()
        }
    };
    let found = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    let count = limit.map_or(found, |n| n.min(found));
    let out_len =
        (s.len().saturating_sub(count * old.len())).saturating_add(count.saturating_mul(new.len()));
    charge(
        ftx.ptx,
        1 + string_units(out_len, Rate::Copy),
        None,
        Rate::Copy,
    )?;
    let out = match limit {
        Some(n) => s.replacen(old, new, n),
        None => s.replace(old, new),
    };
    Ok(CowVal::owned(CelString::from(out)))
}

/// `s.matches(re)` / `matches(s, re)`: charges [`super::regex::compile_cost`] before the crate
/// compiles the (translated) pattern, then delegates to the crate's overload.
pub(super) fn matches_fn(env: std::sync::Arc<cel::Env>) -> NativeFn {
    Box::new(move |ftx: &mut FunctionContext<'_, '_>| {
        let (s, pattern) = (string_arg(ftx, 0)?, string_arg(ftx, 1)?.inner());
        let units = 1
            + (s.inner().len() / REGEX_BYTES_PER_UNIT) as u64
            + super::regex::compile_cost(pattern);
        charge(ftx.ptx, units, None, Rate::Copy)?;
        let args = vec![
            CowVal::Borrowed(s as &dyn Val),
            CowVal::owned(CelString::from(super::regex::to_rust_syntax(pattern))),
        ];
        let matches = env
            .find_overload("matches", &args)
            .ok_or_else(|| ExecutionError::function_error("matches", "no regex support"))?;
        let matched = matches(args)?
            .downcast_ref::<CelBool>()
            .map(|b| *b.inner())
            .ok_or_else(|| ExecutionError::function_error("matches", "unexpected result"))?;
        Ok(CowVal::owned(CelBool::from(matched)))
    })
}
