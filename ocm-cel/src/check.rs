//! Compile-time checks. cel-go type-checks expressions when compiling them; the `cel` crate only
//! parses. Without types we still catch what upstream reports as `compilation failed`:
//! undeclared variables (`invalid.expression`), unknown functions, and calls with an argument
//! count or call style (`f(x)` vs `x.f()`) no overload has. Type mismatches that cel-go catches
//! statically (`"a" + 1`) are left to evaluation, where they make the expression false.

use std::collections::HashSet;

use cel::Env;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, SourceInfo};
use cel::parser::ParseErrors;

/// One function: the argument counts it accepts called as `f(...)` and as `x.f(...)`.
struct Signature {
    name: &'static str,
    global: &'static [usize],
    member: &'static [usize],
}

const fn global(name: &'static str, global: &'static [usize]) -> Signature {
    Signature {
        name,
        global,
        member: &[],
    }
}
const fn member(name: &'static str, member: &'static [usize]) -> Signature {
    Signature {
        name,
        global: &[],
        member,
    }
}
const fn both(name: &'static str, global: &'static [usize], member: &'static [usize]) -> Signature {
    Signature {
        name,
        global,
        member,
    }
}

/// Every function an expression may call (macros are expanded before the check).
#[rustfmt::skip]
const FUNCTIONS: &[Signature] = &[
    // Operators, and what the macros expand to.
    global("_+_", &[2]), global("_-_", &[2]), global("_*_", &[2]), global("_/_", &[2]),
    global("_%_", &[2]), global("_==_", &[2]), global("_!=_", &[2]), global("_<_", &[2]),
    global("_<=_", &[2]), global("_>_", &[2]), global("_>=_", &[2]), global("_&&_", &[2]),
    global("_||_", &[2]), global("_[_]", &[2]), global("_[?_]", &[2]), global("_?._", &[2]),
    global("@in", &[2]), global("!_", &[1]), global("-_", &[1]),
    global("@not_strictly_false", &[1]), global("_?_:_", &[3]),
    // Standard library.
    both("size", &[1], &[0]), member("contains", &[1]), member("startsWith", &[1]),
    member("endsWith", &[1]), both("matches", &[2], &[1]),
    global("int", &[1]), global("uint", &[1]), global("double", &[1]), global("string", &[1]),
    global("bytes", &[1]), global("bool", &[1]), global("dyn", &[1]), global("type", &[1]),
    global("duration", &[1]), global("timestamp", &[1]),
    member("getFullYear", &[0, 1]), member("getMonth", &[0, 1]), member("getDate", &[0, 1]),
    member("getDayOfMonth", &[0, 1]), member("getDayOfWeek", &[0, 1]),
    member("getDayOfYear", &[0, 1]), member("getHours", &[0, 1]), member("getMinutes", &[0, 1]),
    member("getSeconds", &[0, 1]), member("getMilliseconds", &[0, 1]),
    // cel-go optional types.
    global("optional.of", &[1]), global("optional.ofNonZeroValue", &[1]),
    global("optional.none", &[0]), global("optional.unwrap", &[1]),
    member("value", &[0]), member("hasValue", &[0]), member("or", &[1]), member("orValue", &[1]),
    member("unwrapOpt", &[0]), member("first", &[0]), member("last", &[0]),
    // cel-go ext.Strings.
    member("charAt", &[1]), member("indexOf", &[1, 2]), member("lastIndexOf", &[1, 2]),
    member("lowerAscii", &[0]), member("upperAscii", &[0]), member("replace", &[2, 3]),
    member("split", &[1, 2]), member("substring", &[1, 2]), member("trim", &[0]),
    member("join", &[0, 1]), member("format", &[1]), member("reverse", &[0]),
    global("strings.quote", &[1]),
    // Kubernetes lists (indexOf and lastIndexOf are above).
    member("isSorted", &[0]), member("sum", &[0]), member("min", &[0]), member("max", &[0]),
    // Kubernetes quantity and semver.
    global("quantity", &[1]), global("isQuantity", &[1]), both("sign", &[1], &[0]),
    member("isGreaterThan", &[1]), member("isLessThan", &[1]), member("compareTo", &[1]),
    member("add", &[1]), member("sub", &[1]), member("asInteger", &[0]),
    member("isInteger", &[0]), member("asApproximateFloat", &[0]),
    global("semver", &[1, 2]), global("isSemver", &[1, 2]),
    member("major", &[0]), member("minor", &[0]), member("patch", &[0]),
    // Kubernetes ip and cidr.
    both("ip", &[1], &[0]), global("isIP", &[1]), global("ip.isCanonical", &[1]),
    member("family", &[0]), member("isUnspecified", &[0]), member("isLoopback", &[0]),
    member("isLinkLocalMulticast", &[0]), member("isLinkLocalUnicast", &[0]),
    member("isGlobalUnicast", &[0]),
    global("cidr", &[1]), global("isCIDR", &[1]), member("containsIP", &[1]),
    member("containsCIDR", &[1]), member("prefixLength", &[0]), member("masked", &[0]),
    // OCM.
    member("scores", &[1]), member("parseJSON", &[0]),
];

/// Functions upstream has that this scheduler does not implement, with their library.
#[rustfmt::skip]
const UNSUPPORTED: &[(&str, &str)] = &[
    ("find", "Kubernetes regex"), ("findAll", "Kubernetes regex"),
    ("url", "Kubernetes urls"), ("isURL", "Kubernetes urls"), ("getScheme", "Kubernetes urls"),
    ("getHost", "Kubernetes urls"), ("getHostname", "Kubernetes urls"),
    ("getPort", "Kubernetes urls"), ("getEscapedPath", "Kubernetes urls"),
    ("getQuery", "Kubernetes urls"),
    ("format.named", "Kubernetes format"), ("format.dns1123Label", "Kubernetes format"),
    ("format.dns1123Subdomain", "Kubernetes format"), ("format.dns1035Label", "Kubernetes format"),
    ("format.qualifiedName", "Kubernetes format"),
    ("format.dns1123LabelPrefix", "Kubernetes format"),
    ("format.dns1123SubdomainPrefix", "Kubernetes format"),
    ("format.dns1035LabelPrefix", "Kubernetes format"), ("format.labelValue", "Kubernetes format"),
    ("format.uri", "Kubernetes format"), ("format.uuid", "Kubernetes format"),
    ("format.byte", "Kubernetes format"), ("format.date", "Kubernetes format"),
    ("format.datetime", "Kubernetes format"), ("validate", "Kubernetes format"),
];

fn signature(name: &str) -> Option<&'static Signature> {
    FUNCTIONS.iter().find(|s| s.name == name)
}

/// Whether `name` is a global function with a dotted name (`optional.of`), which the parser
/// reads as a member call on the identifier `optional`.
pub(super) fn is_namespaced(name: &str) -> bool {
    name.contains('.') && signature(name).is_some_and(|s| !s.global.is_empty())
}

/// A problem found in an expression, at the node `id`.
struct Issue {
    id: u64,
    message: String,
}

/// Checks a parsed expression; the error is cel-go's `issues.String()` format.
pub(super) fn check(
    expr: &IdedExpr,
    source_info: &SourceInfo,
    env: &Env,
    max_depth: usize,
) -> Result<(), String> {
    let mut checker = Checker {
        env,
        scopes: Vec::new(),
        issues: Vec::new(),
    };
    if let Some(too_deep) = deeper_than(expr, max_depth) {
        // Also what keeps evaluation, which recurses per level, within its stack.
        checker.issue(
            too_deep,
            format!("max recursion depth exceeded: {max_depth}"),
        );
    } else {
        checker.expr(expr);
    }
    if checker.issues.is_empty() {
        return Ok(());
    }
    Err(checker
        .issues
        .iter()
        .map(|issue| {
            let (line, column) = location(source_info, issue.id);
            format_error(&source_info.source, line, column, &issue.message)
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The crate's parse errors in cel-go's format.
pub(super) fn format_parse_errors(errors: &ParseErrors, source: &str) -> String {
    errors
        .errors
        .iter()
        .map(|e| {
            let line = usize::try_from(e.pos.0).unwrap_or(1).max(1);
            let column = usize::try_from(e.pos.1).unwrap_or(1).max(1);
            format_error(source, line, column, &e.msg)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `ERROR: <input>:line:column: message`, the source line, and a caret under the column, as
/// cel-go's `Error.ToDisplayString` writes them (wide characters get wide dots).
fn format_error(source: &str, line: usize, column: usize, message: &str) -> String {
    let mut out = format!("ERROR: <input>:{line}:{column}: {message}");
    if let Some(snippet) = source.lines().nth(line - 1) {
        let snippet = snippet.replace('\t', " ");
        out.push_str("\n | ");
        out.push_str(&snippet);
        out.push_str("\n | ");
        let mut chars = snippet.chars();
        for c in chars.by_ref().take(column - 1) {
            out.push(if c.len_utf8() > 1 { '\u{FF0E}' } else { '.' });
        }
        out.push(if chars.next().is_some_and(|c| c.len_utf8() > 1) {
            '\u{FF3E}'
        } else {
            '^'
        });
    }
    out
}

/// Line and column (1-based) of node `id`; offsets are character positions in the source.
fn location(source_info: &SourceInfo, id: u64) -> (usize, usize) {
    let Some((start, _)) = source_info.offset_for(id) else {
        return (1, 1);
    };
    let (mut line, mut column) = (1, 1);
    for c in source_info.source.chars().take(start as usize) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

struct Checker<'a> {
    env: &'a Env,
    /// The variables of the enclosing comprehensions.
    scopes: Vec<HashSet<String>>,
    issues: Vec<Issue>,
}

impl Checker<'_> {
    fn issue(&mut self, id: u64, message: String) {
        self.issues.push(Issue { id, message });
    }

    fn declared(&self, name: &str) -> bool {
        name == super::CLUSTER_VAR
            || self.scopes.iter().any(|s| s.contains(name))
            || self.env.types().find_type(name).is_some()
    }

    fn undeclared(&mut self, id: u64, name: &str) {
        self.issue(
            id,
            format!("undeclared reference to '{name}' (in container '')"),
        );
    }

    fn expr(&mut self, e: &IdedExpr) {
        match &e.expr {
            Expr::Literal(_) => {}
            Expr::Ident(name) => {
                if !self.declared(name) {
                    self.undeclared(e.id, name);
                }
            }
            Expr::Select(select) => {
                // A dotted type name (`google.protobuf.Timestamp`) is not a field selection.
                let is_type = !select.test
                    && dotted(e).is_some_and(|name| self.env.types().find_type(&name).is_some());
                if !is_type {
                    self.expr(&select.operand);
                }
            }
            Expr::Call(call) => {
                let qualified = call
                    .target
                    .as_deref()
                    .and_then(dotted)
                    .map(|t| format!("{t}.{}", call.func_name));
                match qualified {
                    Some(name) if is_namespaced(&name) || unsupported(&name).is_some() => {
                        self.function(e.id, &name, false, call.args.len());
                    }
                    _ => {
                        if let Some(target) = &call.target {
                            self.expr(target);
                        }
                        self.function(
                            e.id,
                            &call.func_name,
                            call.target.is_some(),
                            call.args.len(),
                        );
                    }
                }
                for arg in &call.args {
                    self.expr(arg);
                }
            }
            Expr::List(list) => list.elements.iter().for_each(|e| self.expr(e)),
            Expr::Map(map) => {
                for entry in &map.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(m) => {
                            self.expr(&m.key);
                            self.expr(&m.value);
                        }
                        // The interpreter would panic on these; the parser never makes them.
                        EntryExpr::StructField(_) => {
                            self.issue(entry.id, "unexpected field in a map literal".into());
                        }
                    }
                }
            }
            Expr::Struct(s) => {
                // No message types are declared: like cel-go, the type name is undeclared.
                self.undeclared(e.id, &s.type_name);
            }
            Expr::Comprehension(c) => {
                self.expr(&c.iter_range);
                self.expr(&c.accu_init);
                let mut scope = HashSet::from([c.iter_var.clone(), c.accu_var.clone()]);
                scope.extend(c.iter_var2.clone());
                self.scopes.push(scope);
                self.expr(&c.loop_cond);
                self.expr(&c.loop_step);
                self.expr(&c.result);
                self.scopes.pop();
            }
            // The interpreter panics on these; the parser never hands one back.
            Expr::Unspecified => self.issue(e.id, "unexpected empty expression".into()),
        }
    }

    fn function(&mut self, id: u64, name: &str, is_member: bool, args: usize) {
        let Some(signature) = signature(name) else {
            match unsupported(name) {
                Some(library) => self.issue(
                    id,
                    format!(
                        "undeclared reference to '{name}' (in container ''): the {library} library is not supported by this scheduler"
                    ),
                ),
                None => self.undeclared(id, name),
            }
            return;
        };
        let counts = if is_member {
            signature.member
        } else {
            signature.global
        };
        if !counts.contains(&args) {
            let style = if is_member {
                "member function"
            } else {
                "global function"
            };
            self.issue(
                id,
                format!(
                    "found no matching overload for '{name}' as a {style} with {args} argument(s)"
                ),
            );
        }
    }
}

/// The first node nested deeper than `max` levels, found without recursion.
fn deeper_than<'a>(root: &'a IdedExpr, max: usize) -> Option<u64> {
    let mut pending: Vec<(&'a IdedExpr, usize)> = vec![(root, 1)];
    while let Some((e, depth)) = pending.pop() {
        if depth > max {
            return Some(e.id);
        }
        let mut push = |child: &'a IdedExpr| pending.push((child, depth + 1));
        match &e.expr {
            Expr::Select(s) => push(&s.operand),
            Expr::Call(c) => {
                c.target.iter().for_each(|t| push(t));
                c.args.iter().for_each(&mut push);
            }
            Expr::List(l) => l.elements.iter().for_each(&mut push),
            Expr::Map(m) => m.entries.iter().for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(m) => {
                    push(&m.key);
                    push(&m.value);
                }
                EntryExpr::StructField(f) => push(&f.value),
            }),
            Expr::Struct(s) => s.entries.iter().for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(m) => {
                    push(&m.key);
                    push(&m.value);
                }
                EntryExpr::StructField(f) => push(&f.value),
            }),
            Expr::Comprehension(c) => {
                [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]
                .into_iter()
                .for_each(&mut push);
            }
            Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
        }
    }
    None
}

fn unsupported(name: &str) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, library)| *library)
}

/// The dotted name an identifier or field selection chain spells (`a.b.c`).
pub(super) fn dotted(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) if !s.test => Some(format!("{}.{}", dotted(&s.operand)?, s.field)),
        _ => None,
    }
}
