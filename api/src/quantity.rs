//! Kubernetes resource quantities as approximate floats (apimachinery's
//! `Quantity.AsApproximateFloat64`), for the resource prioritizers and the score providers.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}"
)]
pub struct QuantityError(pub String);

/// Parses `"500m"`, `"2"`, `"1.5Gi"`, `"1e3"` and the like.
pub fn parse(s: &str) -> Result<f64, QuantityError> {
    let err = || QuantityError(s.to_owned());
    let t = s.trim();
    let split = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(t.len(), |(i, _)| i);
    let (num, suffix) = t.split_at(split);
    if num.is_empty() || num == "+" || num == "-" || num.matches('.').count() > 1 {
        return Err(err());
    }
    let mantissa: f64 = num.parse().map_err(|_| err())?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().map_err(|_| err())?;
            10f64.powi(e)
        }
        _ => return Err(err()),
    };
    let v = mantissa * factor;
    if v.is_finite() { Ok(v) } else { Err(err()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        let cases = [
            ("2", 2.0),
            ("500m", 0.5),
            ("1.5", 1.5),
            ("1k", 1000.0),
            ("1Ki", 1024.0),
            ("16Gi", 16.0 * 1024f64.powi(3)),
            ("1e3", 1000.0),
            ("2E-3", 0.002),
            ("-1", -1.0),
            ("+4M", 4e6),
        ];
        for (s, want) in cases {
            assert!(
                (parse(s).unwrap() - want).abs() < 1e-9 * want.abs().max(1.0),
                "{s}"
            );
        }
    }

    #[test]
    fn garbage_is_an_error() {
        for s in ["", "abc", "1.2.3", "5Xi", "m", "-", "1e", "1e99999"] {
            assert!(parse(s).is_err(), "{s}");
        }
    }
}
