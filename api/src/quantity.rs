//! Kubernetes resource quantities as floats, exactly as apimachinery's
//! `Quantity.AsApproximateFloat64` computes them (the resource prioritizers compare these
//! values, and a one-ulp difference can move a truncated score by one).
//!
//! apimachinery keeps a quantity as an integer mantissa and a base-10 scale, then returns
//! `mantissa as float64 * math.Pow10(scale)`. We parse the same way: the digits without the
//! dot are the mantissa, the fraction length and the suffix make the scale, binary suffixes
//! multiply the mantissa by a power of two, and values below a nano unit round up to it.

use std::sync::OnceLock;

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}"
)]
pub struct QuantityError(pub String);

enum Suffix {
    Decimal(i32),
    Binary(u32),
}

fn suffix(s: &str) -> Option<Suffix> {
    Some(match s {
        "" => Suffix::Decimal(0),
        "n" => Suffix::Decimal(-9),
        "u" => Suffix::Decimal(-6),
        "m" => Suffix::Decimal(-3),
        "k" => Suffix::Decimal(3),
        "M" => Suffix::Decimal(6),
        "G" => Suffix::Decimal(9),
        "T" => Suffix::Decimal(12),
        "P" => Suffix::Decimal(15),
        "E" => Suffix::Decimal(18),
        "Ki" => Suffix::Binary(10),
        "Mi" => Suffix::Binary(20),
        "Gi" => Suffix::Binary(30),
        "Ti" => Suffix::Binary(40),
        "Pi" => Suffix::Binary(50),
        "Ei" => Suffix::Binary(60),
        e if e.starts_with(['e', 'E']) => Suffix::Decimal(e[1..].parse().ok()?),
        _ => return None,
    })
}

/// Go's `math.Pow10`: powers built from exactly rounded tables, so `3 * Pow10(-1)` is
/// `0.30000000000000004` as in Go.
fn pow10(n: i32) -> f64 {
    static TABLES: OnceLock<([f64; 32], [f64; 10], [f64; 11])> = OnceLock::new();
    let (tab, pos32, neg32) = TABLES.get_or_init(|| {
        let p = |e: i32| format!("1e{e}").parse::<f64>().unwrap_or(f64::NAN);
        (
            std::array::from_fn(|i| p(i as i32)),
            std::array::from_fn(|i| p(32 * i as i32)),
            std::array::from_fn(|i| p(-32 * i as i32)),
        )
    });
    let n_abs = n.unsigned_abs() as usize;
    if (0..=308).contains(&n) {
        pos32[n_abs / 32] * tab[n_abs % 32]
    } else if (-323..0).contains(&n) {
        neg32[n_abs / 32] / tab[n_abs % 32]
    } else if n > 0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// The largest quantity apimachinery keeps (`2^63 - 1`); bigger ones are capped to it.
const MAX: i128 = i64::MAX as i128;

/// `unscaled * 10^exponent` as `AsApproximateFloat64` computes it for an int64 amount.
fn scaled(unscaled: i128, exponent: i32) -> f64 {
    if exponent == 0 {
        unscaled as f64
    } else {
        unscaled as f64 * pow10(exponent)
    }
}

/// apimachinery's slow path: round up to nano units, cap at `2^63 - 1`, keep scale 9.
fn at_nano_scale(unscaled: i128, exponent: i32) -> f64 {
    if unscaled == 0 {
        return 0.0;
    }
    let nanos = if exponent < -9 {
        let drop = (-9 - exponent).unsigned_abs();
        match 10i128.checked_pow(drop) {
            Some(d) => (unscaled + d - 1) / d,
            None => 1,
        }
    } else {
        match 10i128
            .checked_pow((exponent + 9).unsigned_abs())
            .and_then(|m| unscaled.checked_mul(m))
        {
            Some(n) => n,
            None => return MAX as f64,
        }
    };
    if nanos / 1_000_000_000 >= MAX {
        return MAX as f64;
    }
    nanos as f64 * pow10(-9)
}

/// Parses `"500m"`, `"2"`, `"1.5Gi"`, `"1e3"` and the like into a float.
pub fn parse(s: &str) -> Result<f64, QuantityError> {
    let err = || QuantityError(s.to_owned());
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix_text) = rest.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(err());
    }
    let suffix = suffix(suffix_text).ok_or_else(err)?;
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    // Beyond 38 digits an i128 cannot hold the mantissa; such values are far past the cap.
    let mantissa: i128 = if digits.is_empty() {
        0
    } else if digits.len() > 38 {
        return Ok(if negative { -(MAX as f64) } else { MAX as f64 });
    } else {
        digits.parse().map_err(|_| err())?
    };
    let frac_len = i32::try_from(frac.len()).map_err(|_| err())?;
    let written_digits = int.len() + frac.len();
    // apimachinery's fast path keeps (mantissa, scale) as written; its slow path (many digits,
    // a fraction with a binary suffix, sub-nano values) holds the value at nano scale.
    let value = match suffix {
        Suffix::Decimal(e) => {
            let exponent = e.checked_sub(frac_len).ok_or_else(err)?;
            if written_digits <= 18 && exponent >= -9 {
                scaled(mantissa, exponent)
            } else {
                at_nano_scale(mantissa, exponent)
            }
        }
        Suffix::Binary(b) => {
            let unscaled = mantissa.checked_mul(1i128 << b).ok_or_else(err)?;
            let precision = 15 - int.len() as i64 - (b as f32 * 3.0 / 10.0) as i64 - 1;
            if frac.is_empty() && precision >= 0 && unscaled <= MAX {
                unscaled as f64
            } else {
                at_nano_scale(unscaled, -frac_len)
            }
        }
    };
    let value = if negative { -value } else { value };
    if value.is_finite() {
        Ok(value)
    } else {
        Err(err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bits_as_apimachinery() {
        // Printed by apimachinery v0.34: resource.MustParse(s).AsApproximateFloat64().
        let golden: &[(&str, u64)] = &[
            ("0", 0x0),
            ("1", 0x3ff0000000000000),
            ("0.3", 0x3fd3333333333334),
            ("1.1", 0x3ff199999999999a),
            ("300m", 0x3fd3333333333333),
            ("2.7", 0x400599999999999a),
            ("0.7", 0x3fe6666666666667),
            ("1.5Gi", 0x41d8000000000000),
            ("3.3Gi", 0x41ea666666666667),
            ("0.1", 0x3fb999999999999a),
            ("12.345", 0x4028b0a3d70a3d71),
            ("7.9", 0x401f99999999999a),
            ("1000.1", 0x408f40cccccccccd),
            ("500m", 0x3fe0000000000000),
            ("16Gi", 0x4210000000000000),
            ("1e3", 0x408f400000000000),
            ("2E-3", 0x3f60624dd2f1a9fc),
            ("1k", 0x408f400000000000),
            ("64", 0x4050000000000000),
            ("3.75", 0x400e000000000000),
            ("123456789", 0x419d6f3454000000),
            ("1.000000001", 0x3ff000000044b830),
            ("0.0000000001", 0x3e112e0be826d695),
            ("2Ki", 0x40a0000000000000),
            ("7.5Mi", 0x415e000000000001),
            ("0.5Ti", 0x4260000000000000),
            ("100n", 0x3e7ad7f29abcaf49),
            ("12.5u", 0x3eea36e2eb1c432c),
            ("3Pi", 0x4328000000000000),
            ("1.23456789012345678", 0x3ff3c0ca42c8964b),
            ("-1.5", 0xbff8000000000000),
            ("96Gi", 0x4238000000000000),
            ("191.5Gi", 0x4247f00000000000),
            ("48", 0x4048000000000000),
            ("8500m", 0x4021000000000000),
        ];
        for (s, bits) in golden {
            let v = parse(s).unwrap();
            assert_eq!(
                v.to_bits(),
                *bits,
                "{s}: ours {v:e}, apimachinery {:e}",
                f64::from_bits(*bits)
            );
        }
    }

    #[test]
    fn garbage_is_an_error() {
        for s in ["", "abc", "1.2.3", "5Xi", "m", "-", "1e", "."] {
            assert!(parse(s).is_err(), "{s}");
        }
    }
}
