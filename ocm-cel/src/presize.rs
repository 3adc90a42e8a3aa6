//! A lower bound on the size of an expression, read from its source before parsing it.
//!
//! The compiled size limit is measured on the parsed tree, but parsing a large expression costs
//! far more memory than the tree it yields (the generated parser's token stream and parse tree
//! hold several hundred bytes a token, and the allocator keeps much of it after). Sixteen
//! Placements of ten 45,000-element lists, each refused after parsing, left the scheduler at
//! about 260 MB resident. Counting first refuses them before the parser sees them.
//!
//! The count is of the tokens that each become at least one node of the tree: literals, and
//! identifiers that are not a function's name (followed by `(`) or a struct field's (followed by
//! `:`, which also skips map keys and the middle of `? :`: a lower bound may miss some). So
//! [`NODE_BYTES`](crate::cost::NODE_BYTES) times the count never exceeds what the compiled
//! program is estimated to hold, and an expression this refuses would be refused after
//! compiling too.

/// The number of tokens of `source` that are each at least one node of its tree.
pub(super) fn nodes_at_least(source: &str) -> usize {
    let bytes = source.as_bytes();
    let mut count = 0usize;
    let mut i = 0usize;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = line_end(bytes, i),
            b'\'' | b'"' => {
                i = string_end(bytes, i, false);
                count += 1;
            }
            b'0'..=b'9' => {
                i = number_end(bytes, i);
                count += 1;
            }
            b'.' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = number_end(bytes, i);
                count += 1;
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let end = word_end(bytes, i);
                let word = &bytes[i..end];
                // A string or bytes literal's prefix (r, b, rb, br in either case).
                let prefix = word.len() <= 2
                    && word.iter().all(|c| matches!(c, b'r' | b'R' | b'b' | b'B'))
                    && matches!(bytes.get(end), Some(b'\'' | b'"'));
                if prefix {
                    let raw = word.iter().any(|c| matches!(c, b'r' | b'R'));
                    i = string_end(bytes, end, raw);
                    count += 1;
                } else {
                    i = end;
                    if !matches!(next_non_space(bytes, i), Some(b'(' | b':')) {
                        count += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    count
}

fn line_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |n| from + n + 1)
}

fn word_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
        .map_or(bytes.len(), |n| from + n)
}

/// The end of a number literal: digits, hex digits, `.`, `u`/`U`, and an exponent's sign.
fn number_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    let hex = bytes.get(i) == Some(&b'0') && matches!(bytes.get(i + 1), Some(b'x' | b'X'));
    while let Some(&b) = bytes.get(i) {
        let exponent_sign = !hex
            && matches!(b, b'+' | b'-')
            && i > from
            && matches!(bytes.get(i - 1), Some(b'e' | b'E'));
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// The end of the string literal whose opening quote is at `from` (single or triple quotes;
/// escapes skipped unless `raw`). An unterminated literal runs to the end.
fn string_end(bytes: &[u8], from: usize, raw: bool) -> usize {
    let Some(&quote) = bytes.get(from) else {
        return bytes.len();
    };
    let triple = bytes.get(from + 1) == Some(&quote) && bytes.get(from + 2) == Some(&quote);
    let close: &[u8] = if triple {
        &[quote, quote, quote]
    } else {
        std::slice::from_ref(&quote)
    };
    let mut i = from + close.len();
    while i < bytes.len() {
        if !raw && bytes[i] == b'\\' {
            i += 2;
        } else if bytes[i..].starts_with(close) {
            return i + close.len();
        } else if !triple && bytes[i] == b'\n' {
            return i; // a single-quoted literal ends at the line (a parse error follows)
        } else {
            i += 1;
        }
    }
    bytes.len()
}

fn next_non_space(bytes: &[u8], from: usize) -> Option<u8> {
    bytes[from..]
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
}
