//! `matches()` patterns: upstream evaluates them with Go's RE2, we with the `regex` crate that
//! the `cel` crate uses. Two things differ enough to matter and are handled here:
//!
//! - Syntax and meaning. In RE2 `\d`, `\s`, `\w` and `\b` are ASCII-only; in the `regex` crate
//!   they are Unicode-aware (`\d` matches `٣`). Inside a bracket class RE2 reads `[`, `&` and `~`
//!   literally, where `regex` starts a nested class or a set operation. [`to_rust_syntax`]
//!   rewrites those constructs, and RE2's `\Q…\E` quoting, so that a pattern means what it means
//!   upstream.
//! - Cost. The `cel` crate compiles the pattern on every call, and compiling is where the time
//!   goes: `\p{L}{200}` takes tens of milliseconds. [`compile_cost`] estimates that work from the
//!   pattern text so the budget is charged *before* compiling (see `cost.rs`).

/// Rewrites an RE2 pattern into `regex` crate syntax with the same meaning (see the module doc).
/// Anything it does not know is copied as is, so an invalid pattern stays invalid.
pub(super) fn to_rust_syntax(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => {
                    if let Some(ascii) = ascii_perl_class(escaped) {
                        // A nested class: valid both inside and outside a bracket class.
                        out.push_str(ascii);
                    } else if !in_class && (escaped == 'b' || escaped == 'B') {
                        out.push_str(if escaped == 'b' {
                            r"(?-u:\b)"
                        } else {
                            r"(?-u:\B)"
                        });
                    } else if !in_class && escaped == 'Q' {
                        quote_until_e(&mut chars, &mut out);
                    } else {
                        out.push('\\');
                        out.push(escaped);
                    }
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                // A `]` right after the opening bracket is a literal in both syntaxes.
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str(r"\]");
                }
            }
            '[' => {
                if chars.peek() == Some(&':') {
                    // `[:alpha:]`: the same (ASCII) in both syntaxes.
                    out.push('[');
                    for p in chars.by_ref() {
                        out.push(p);
                        if p == ']' {
                            break;
                        }
                    }
                } else {
                    out.push_str(r"\[");
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// RE2's ASCII meaning of the Perl classes, as a `regex` crate class.
fn ascii_perl_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        's' => r"[\t\n\f\r ]",
        'S' => r"[^\t\n\f\r ]",
        'w' => "[0-9A-Za-z_]",
        'W' => "[^0-9A-Za-z_]",
        _ => return None,
    })
}

/// Copies RE2's `\Q…\E` literal text, escaped for the `regex` crate.
fn quote_until_e(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String) {
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&'E') {
            chars.next();
            return;
        }
        if c.is_ascii_punctuation() || c == ' ' {
            out.push('\\');
        }
        out.push(c);
    }
}

/// A rough upper bound of the work to compile `pattern` (RE2 syntax), in budget units of about
/// a quarter of a microsecond: each atom counts 1, a Unicode property class (`\p{L}`) 1000, `.`
/// and a negated class 4, multiplied by the counted repetitions (`{n}`, `{n,m}`) around it, plus
/// a base of 50 for compiling at all. Measured against the `regex` crate: `^[a-z]+$` ≈ 20 µs,
/// `[a-z]{1000}` ≈ 120 µs, `\p{L}{200}` ≈ 45 ms.
pub(super) fn compile_cost(pattern: &str) -> u64 {
    let chars: Vec<char> = pattern.chars().collect();
    // The summed cost of each open group, innermost last. Iterative, so that a pattern of
    // thousands of `(` cannot overflow the stack.
    let mut groups: Vec<u64> = vec![0];
    // The cost of the last atom or group: what a following `{n}` multiplies.
    let mut last: u64 = 0;
    let mut i = 0;
    while i < chars.len() {
        let atom = match chars[i] {
            '\\' => {
                let (weight, len) = escape_weight(&chars[i + 1..]);
                i += len.saturating_sub(1);
                weight
            }
            '[' => {
                let (weight, len) = class_weight(&chars[i..]);
                i += len.saturating_sub(1);
                weight
            }
            '.' => 4,
            '(' => {
                groups.push(0);
                last = 0;
                i += 1;
                continue;
            }
            ')' => {
                let group = groups.pop().unwrap_or(0);
                if groups.is_empty() {
                    groups.push(0);
                }
                group
            }
            '{' => match counted_repetition(&chars[i..]) {
                Some((count, len)) => {
                    let repeated = last.saturating_mul(count);
                    if let Some(top) = groups.last_mut() {
                        *top = top.saturating_sub(last).saturating_add(repeated);
                    }
                    last = repeated;
                    i += len;
                    continue;
                }
                None => 1,
            },
            '*' | '+' | '?' | '|' | '^' | '$' => {
                i += 1;
                continue;
            }
            _ => 1,
        };
        if let Some(top) = groups.last_mut() {
            *top = top.saturating_add(atom);
        }
        last = atom;
        i += 1;
    }
    groups
        .iter()
        .fold(50u64, |sum, group| sum.saturating_add(*group))
}

/// The weight of the escape after a `\` and how many characters it takes (the `\` included).
fn escape_weight(rest: &[char]) -> (u64, usize) {
    match rest.first() {
        Some('p' | 'P') => match rest.get(1) {
            Some('{') => {
                let close = rest
                    .iter()
                    .position(|c| *c == '}')
                    .unwrap_or(rest.len() - 1);
                (1000, close + 2)
            }
            _ => (1000, 3),
        },
        Some(_) => (1, 2),
        None => (1, 1),
    }
}

/// The weight of the bracket class starting at `class[0] == '['` and its length.
fn class_weight(class: &[char]) -> (u64, usize) {
    let mut weight = 1;
    let mut i = 1;
    if class.get(i) == Some(&'^') {
        weight = 4;
        i += 1;
    }
    if class.get(i) == Some(&']') {
        i += 1;
    }
    while i < class.len() {
        match class[i] {
            ']' => return (weight, i + 1),
            '\\' => {
                if matches!(class.get(i + 1), Some('p' | 'P')) {
                    weight = 1000;
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    (weight, class.len())
}

/// `{n}`, `{n,}` or `{n,m}` at the start of `rest`: the largest count and the length.
fn counted_repetition(rest: &[char]) -> Option<(u64, usize)> {
    let close = rest.iter().position(|c| *c == '}')?;
    let inner: String = rest[1..close].iter().collect();
    let (min, max) = match inner.split_once(',') {
        Some((min, max)) => (min, max),
        None => (inner.as_str(), inner.as_str()),
    };
    let min: u64 = min.parse().ok()?;
    let max: u64 = if max.is_empty() {
        min.saturating_add(1)
    } else {
        max.parse().ok()?
    };
    Some((min.max(max).max(1), close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_classes_become_ascii() {
        let cases = [
            (r"^\d+$", r"^[0-9]+$"),
            (r"\w-\s", r"[0-9A-Za-z_]-[\t\n\f\r ]"),
            (r"[\w.]", r"[[0-9A-Za-z_].]"),
            (r"\bx\B", r"(?-u:\b)x(?-u:\B)"),
            (r"[a[&~]", r"[a\[\&\~]"),
            (r"[]a]", r"[\]a]"),
            (r"[[:alpha:]x]", r"[[:alpha:]x]"),
            (r"\Qa.b\E+", r"a\.b+"),
            (r"\p{L}\.", r"\p{L}\."),
        ];
        for (go, rust) in cases {
            assert_eq!(to_rust_syntax(go), rust, "{go}");
        }
    }

    #[test]
    fn compile_cost_grows_with_counted_repetition() {
        assert!(compile_cost("^[a-z]+$") < 100);
        assert!(compile_cost("[a-z]{1000}") >= 1000);
        assert!(compile_cost(r"\p{L}{200}") >= 200_000);
        assert!(compile_cost("((a{100}){100}){100}") >= 1_000_000);
        // Unbalanced or odd input is estimated, never a panic.
        for odd in [
            "(((",
            ")))",
            "{",
            "a{",
            "a{99999999999999999999}",
            "\\",
            "[",
            "\\p{",
        ] {
            let _ = compile_cost(odd);
            let _ = to_rust_syntax(odd);
        }
    }
}
