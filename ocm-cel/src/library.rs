//! The function libraries of the environment: the `cel` crate's standard library and strings
//! extension, plus our own versions of the Kubernetes `lists` library, the newer cel-go optional
//! functions and OCM's `parseJSON` (semver, quantity, ip and cidr have their own modules), and the
//! JSON-to-CEL conversion they share with `managedCluster`.

use std::collections::HashMap;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelOptional, CelString,
    DYN_TYPE, LIST_TYPE, STRING_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// Builds the environment every selector is compiled and evaluated in.
pub(super) fn new_env() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    // cel-go keeps the last of repeated map literal keys instead of failing.
    env.set_error_on_duplicate_map_keys(false);
    env.add_extension(cel::extensions::strings)?;
    env.add_extension(register_lists)?;
    env.add_extension(register_optional)?;
    env.add_extension(super::semver::register)?;
    env.add_extension(super::quantity::register)?;
    env.add_extension(super::net::register)?;
    env.add_member_overload(
        "parseJSON",
        "parse_json_string",
        STRING_TYPE,
        vec![],
        parse_json,
    )?;
    Ok(env)
}

/// How JSON numbers become CEL values.
#[derive(Clone, Copy)]
pub(super) enum Numbers {
    /// Like Kubernetes' unstructured conversion of an object: integers that fit become `int`,
    /// anything else `double`.
    IntWhenIntegral,
    /// Like Go's `json.Unmarshal` into `interface{}` (what `parseJSON` uses): always `double`.
    AlwaysDouble,
}

/// Converts JSON into CEL values owned by the result. Recursion is bounded by the input's
/// nesting (`serde_json` refuses more than 128 levels when parsing).
pub(super) fn json_to_val(json: &serde_json::Value, numbers: Numbers) -> Box<dyn Val> {
    use serde_json::Value as J;
    match json {
        J::Null => Box::new(CelNull),
        J::Bool(b) => Box::new(CelBool::from(*b)),
        J::Number(n) => match (numbers, n.as_i64()) {
            (Numbers::IntWhenIntegral, Some(i)) => Box::new(CelInt::from(i)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        J::String(s) => Box::new(CelString::from(s.clone())),
        J::Array(items) => Box::new(CelList::from(
            items
                .iter()
                .map(|i| json_to_val(i, numbers))
                .collect::<Vec<_>>(),
        )),
        J::Object(fields) => {
            let map: HashMap<CelMapKey<'static>, Box<dyn Val>> = fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.clone()), json_to_val(v, numbers)))
                .collect();
            Box::new(CelMap::from(map))
        }
    }
}

fn string_arg<'a, 'v>(
    function: &str,
    val: &'a (dyn Val + 'v),
) -> Result<&'a CelString<'v>, ExecutionError> {
    val.downcast_ref::<CelString<'_>>()
        .ok_or_else(|| ExecutionError::function_error(function, "argument must be a string"))
}

/// `<string>.parseJSON()` (OCM `JsonLib`).
fn parse_json<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let text = match args.first() {
        Some(arg) => string_arg("parseJSON", arg.as_ref())?,
        None => return Err(ExecutionError::invalid_argument_count(1, 0)),
    };
    let json: serde_json::Value = serde_json::from_str(text.inner()).map_err(|e| {
        ExecutionError::function_error("parseJSON", format!("failed to parse json: {e}"))
    })?;
    Ok(CowVal::Owned(json_to_val(&json, Numbers::AlwaysDouble)))
}

/// The receiver of a list method, as its elements.
fn elements<'a, 'v>(
    function: &str,
    args: &'a [CowVal<'_, 'v>],
) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let list = args
        .first()
        .and_then(|l| l.as_iterable())
        .ok_or_else(|| ExecutionError::function_error(function, "receiver must be a list"))?;
    let mut items = Vec::new();
    let mut iter = list.iter();
    while let Some(item) = iter.next() {
        items.push(item);
    }
    Ok(items)
}

fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<std::cmp::Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            ExecutionError::function_error(
                function,
                format!("{} is not comparable", a.get_type().name()),
            )
        })?
        .compare(b)
}

/// `<list>.isSorted()`.
fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements("isSorted", &args)?;
    for pair in items.windows(2) {
        if compare("isSorted", pair[0], pair[1])?.is_gt() {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

/// `<list>.sum()`: `0` for an empty list (upstream picks the zero of the static element type;
/// a dynamic list gets `int`), otherwise the elements added with `+`.
fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements("sum", &args)?;
    let Some((first, rest)) = items.split_first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut total: Box<dyn Val + 'v> = first.clone_as_boxed();
    for item in rest {
        let adder = total.as_adder().ok_or_else(|| {
            ExecutionError::function_error("sum", format!("cannot add {}", total.get_type().name()))
        })?;
        let next = adder.add(*item)?.into_owned();
        total = next;
    }
    Ok(CowVal::Owned(total))
}

/// `<list>.min()` and `<list>.max()`: `replace_when` is the comparison of the best so far with a candidate that makes the candidate the new best.
fn extreme<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    replace_when: std::cmp::Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(function, &args)?;
    let Some((first, rest)) = items.split_first() else {
        return Err(ExecutionError::function_error(
            function,
            format!("{function} called on empty list"),
        ));
    };
    let mut best = *first;
    for item in rest {
        if compare(function, best, *item)? == replace_when {
            best = *item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("min", args, std::cmp::Ordering::Greater)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("max", args, std::cmp::Ordering::Less)
}

/// `<list>.indexOf(x)` and `<list>.lastIndexOf(x)`: position of an equal element, or -1.
fn position<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(function, &args)?;
    let needle = args
        .get(1)
        .ok_or_else(|| ExecutionError::invalid_argument_count(2, args.len()))?;
    let found = if last {
        items.iter().rposition(|i| i.equals(needle.as_ref()))
    } else {
        items.iter().position(|i| i.equals(needle.as_ref()))
    };
    let index = found.map_or(-1, |i| i as i64);
    Ok(CowVal::owned(CelInt::from(index)))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("indexOf", args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("lastIndexOf", args, true)
}

/// The Kubernetes `lists` library (not cel-go's `ext.Lists`, which upstream does not load).
fn register_lists(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "isSorted",
        "list_is_sorted_bool",
        LIST_TYPE,
        vec![],
        is_sorted,
    )?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}

/// `<list>.first()` / `<list>.last()`: the element as an optional.
fn end<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(function, &args)?;
    let item = if last { items.last() } else { items.first() };
    Ok(CowVal::owned(match item {
        Some(item) => CelOptional::of(item.clone_as_boxed()),
        None => CelOptional::none(),
    }))
}

fn first<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    end("first", args, false)
}

fn last<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    end("last", args, true)
}

/// `optional.unwrap(list)` / `<list>.unwrapOpt()`: the values of the non-empty optionals.
fn unwrap_opt<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements("unwrapOpt", &args)?;
    let mut values: Vec<Box<dyn Val + 'v>> = Vec::with_capacity(items.len());
    for item in items {
        let optional = item.downcast_ref::<CelOptional<'_>>().ok_or_else(|| {
            ExecutionError::function_error("unwrapOpt", "list elements must be optional values")
        })?;
        if let Some(value) = optional.inner() {
            values.push(value.clone_as_boxed());
        }
    }
    Ok(CowVal::owned(CelList::from(values)))
}

/// cel-go's optional library version 2 additions the `cel` crate lacks.
fn register_optional(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("first", "list_first", LIST_TYPE, vec![], first)?;
    env.add_member_overload("last", "list_last", LIST_TYPE, vec![], last)?;
    env.add_overload(
        "optional.unwrap",
        "optional_unwrap",
        vec![LIST_TYPE],
        unwrap_opt,
    )?;
    env.add_member_overload(
        "unwrapOpt",
        "optional_unwrapOpt",
        LIST_TYPE,
        vec![],
        unwrap_opt,
    )?;
    Ok(())
}
