//! The two hashes the manager compares: the rendering's (over its spec) and upstream's config
//! spec hash (over a config object), both SHA-256 of JSON with sorted keys written by the one
//! writer below, in the dialect each hash was defined with.

use std::fmt::Write as _;

use ring::digest::{SHA256, digest};
use serde_json::{Map, Value};

use super::{ManifestWorkSpec, RenderError};

/// Lowercase hex SHA-256 of `spec`'s canonical JSON (object keys sorted).
pub fn spec_hash(spec: &ManifestWorkSpec) -> Result<String, RenderError> {
    let value = serde_json::to_value(spec).map_err(|e| RenderError::Encode {
        what: "the ManifestWork spec",
        message: e.to_string(),
    })?;
    let mut text = String::new();
    write_json(&value, Dialect::Serde, &mut text);
    Ok(sha256_hex(text.as_bytes()))
}

/// Upstream's config spec hash (addon-framework `utils.GetSpecHash`) of a config object as the
/// API server returned it: drop apiVersion, kind, metadata, status; encode the rest as Go's
/// `json.Marshal` does (keys sorted; `<`, `>`, `&`, U+2028 and U+2029 escaped); lowercase hex
/// SHA-256. A non-object hashes as the empty object, as Go's unstructured would hold nothing.
pub fn config_spec_hash(object: &Value) -> String {
    let mut config = Map::new();
    if let Some(fields) = object.as_object() {
        for (key, value) in fields {
            if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                config.insert(key.clone(), value.clone());
            }
        }
    }
    let mut text = String::new();
    write_json(&Value::Object(config), Dialect::Go, &mut text);
    sha256_hex(text.as_bytes())
}

/// How scalars are spelled; the structure (compact, keys in byte order) is the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    /// serde_json's spelling: the rendering hash has always been over it, and stored works
    /// carry it (changing it would roll every cluster out again).
    Serde,
    /// Go's `encoding/json` of a `map[string]interface{}` decoded from JSON: HTML-safe
    /// strings, integers as int64 and every other number as float64.
    Go,
}

/// Compact JSON with every object's keys in byte order (Go sorts map keys by their bytes, as
/// `str`'s `Ord` does), whatever map type serde_json was built with (its `preserve_order`
/// feature would otherwise keep insertion order).
pub(super) fn write_json(value: &Value, dialect: Dialect, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, dialect, out);
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_json(v, dialect, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, dialect, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, dialect, out),
        Value::Number(n) if dialect == Dialect::Go && !n.is_i64() => match n.as_f64() {
            Some(f) => out.push_str(&go_float(f)),
            None => out.push_str(&n.to_string()),
        },
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A string with JSON's escapes; Go's dialect also escapes `<`, `>`, `&`, U+2028 and U+2029
/// (HTML-safe, JSONP-safe). Both escape other control characters as `\u00xx`.
fn write_string(s: &str, dialect: Dialect, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0}'..='\u{1f}' => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if dialect == Dialect::Go => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Go's encoder writes it: like ES6, shortest round-trip digits, exponent form only
/// below 1e-6 or from 1e21, with the exponent unpadded and signed (`1e+21`, `1.5e-7`).
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        }
    } else {
        format!("{f}")
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    digest(&SHA256, bytes)
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}
