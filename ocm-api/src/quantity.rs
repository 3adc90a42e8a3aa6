//! Kubernetes resource quantities as floats, exactly as apimachinery's
//! `Quantity.AsApproximateFloat64` computes them (the resource prioritizers compare these
//! values, and a one-ulp difference can move a truncated score by one).
//!
//! apimachinery keeps a quantity as an integer mantissa and a base-10 scale, then returns
//! `mantissa as float64 * math.Pow10(scale)`. We parse the same way: the digits without the
//! dot are the mantissa, the fraction length and the suffix make the scale, binary suffixes
//! multiply the mantissa by a power of two, and values below a nano unit round up to it.
//!
//! [`value`], [`milli_value`] and [`scaled_value`] are the exact integer conversions
//! (`Quantity.Value()`, `MilliValue()`) the scheduler accounts requests and allocatable with.

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

/// A quantity split into its written parts: sign, the digits either side of the dot, suffix.
struct Lexed<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
    suffix: Suffix,
}

/// The grammar both conversions share (apimachinery's `parseQuantityString` and suffixes).
fn lex(s: &str) -> Result<Lexed<'_>, QuantityError> {
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
    Ok(Lexed {
        negative,
        int,
        frac,
        suffix,
    })
}

/// Parses `"500m"`, `"2"`, `"1.5Gi"`, `"1e3"` and the like into a float.
pub fn parse(s: &str) -> Result<f64, QuantityError> {
    let err = || QuantityError(s.to_owned());
    let Lexed {
        negative,
        int,
        frac,
        suffix,
    } = lex(s)?;
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

// ---------------------------------------------------------------------------------------------
// Exact integer conversions: apimachinery's `Quantity.Value()`, `MilliValue()`, `ScaledValue()`.
//
// The scheduler and the kubelet account in integers (millicores, bytes, devices), converting
// each quantity with these functions; float arithmetic would drift by an ulp here and there,
// so these never go through `f64`.
// ---------------------------------------------------------------------------------------------

/// Every magnitude at or above this saturates (`2^63` = `-i64::MIN`).
const SATURATED: u128 = 1 << 63;

/// More significant digits than a `u128` always holds (`10^38 < 2^128`).
const MAX_DIGITS: usize = 38;

/// A non-negative decimal `(mantissa + δ) · 10^exponent`, with `0 < δ < 1` when `inexact`
/// (digits past [`MAX_DIGITS`] were dropped and some of them were not zero).
struct Decimal {
    mantissa: u128,
    exponent: i64,
    inexact: bool,
}

/// The significant digits (no leading zeros) of `int` and `frac` written together.
fn significant_digits<'a>(int: &'a str, frac: &'a str) -> impl Iterator<Item = u8> + 'a {
    int.bytes()
        .chain(frac.bytes())
        .skip_while(|&d| d == b'0')
        .map(|d| d - b'0')
}

/// `digits · 2^pow2 · 10^exponent` exactly, as a [`Decimal`].
fn to_decimal(int: &str, frac: &str, pow2: u32, exponent: i64) -> Decimal {
    // The usual case: at most 38 digits and the binary factor fit a u128.
    if significant_digits(int, frac).count() <= MAX_DIGITS {
        let mantissa = significant_digits(int, frac).fold(0u128, |m, d| m * 10 + u128::from(d));
        if let Some(mantissa) = 1u128
            .checked_shl(pow2)
            .and_then(|factor| mantissa.checked_mul(factor))
        {
            return Decimal {
                mantissa,
                exponent,
                inexact: false,
            };
        }
    }
    // Long numbers: multiply the digit string by 2^pow2 first (exact), then keep the leading
    // 38 digits and remember whether anything non-zero was dropped.
    let digits = times_power_of_two(significant_digits(int, frac).collect(), pow2);
    let kept = digits.len().min(MAX_DIGITS);
    let mantissa = digits[..kept]
        .iter()
        .fold(0u128, |m, &d| m * 10 + u128::from(d));
    let dropped = &digits[kept..];
    Decimal {
        mantissa,
        exponent: exponent + dropped.len() as i64,
        inexact: dropped.iter().any(|&d| d != 0),
    }
}

/// Multiplies a big-endian decimal digit string by `2^pow2` (suffixes go up to `Ei`, 2^60),
/// in chunks of at most 2^60 so that `digit · factor + carry` stays inside a u128.
fn times_power_of_two(mut digits: Vec<u8>, mut pow2: u32) -> Vec<u8> {
    while pow2 > 0 {
        let step = pow2.min(60);
        pow2 -= step;
        let factor = 1u128 << step;
        let mut carry = 0u128;
        for d in digits.iter_mut().rev() {
            let v = u128::from(*d) * factor + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        let mut head = Vec::new();
        while carry > 0 {
            head.push((carry % 10) as u8);
            carry /= 10;
        }
        head.reverse();
        head.append(&mut digits);
        digits = head;
    }
    digits
}

/// `ceil(d)`, capped at [`SATURATED`].
fn ceil_capped(d: &Decimal) -> u128 {
    if d.mantissa == 0 && !d.inexact {
        return 0;
    }
    if d.exponent >= 0 {
        // An inexact value kept 38 digits, so it is at least 10^37: saturated either way.
        if d.inexact {
            return SATURATED;
        }
        return u32::try_from(d.exponent)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .and_then(|p| d.mantissa.checked_mul(p))
            .map_or(SATURATED, |v| v.min(SATURATED));
    }
    // 10^39 exceeds any u128 mantissa: a positive value below one rounds up to one.
    let Some(divisor) = u32::try_from(-d.exponent)
        .ok()
        .and_then(|e| 10u128.checked_pow(e))
    else {
        return 1;
    };
    let quotient = d.mantissa / divisor;
    let fraction = !d.mantissa.is_multiple_of(divisor) || d.inexact;
    (quotient + u128::from(fraction)).min(SATURATED)
}

/// The exact value of the quantity times `10^scale`, rounded up to an integer and saturated
/// at the `i64` bounds. `scaled_value(s, 3)` is apimachinery's `MilliValue()`,
/// `scaled_value(s, 0)` its `Value()` (mind the sign: Go's `ScaledValue(Milli)` takes -3).
///
/// "Up" is away from zero, as apimachinery rounds the quantities anyone writes (its int64
/// fast path): `-1.5` gives `-2`. Where apimachinery diverges from that, we do not follow:
/// - values past `i64` wrap or come out as 0 in Go (`MilliValue("1E")` is 0); they saturate;
/// - negative values it keeps as big decimals (more than 18 digits, fractions of binary
///   suffixes) are rounded towards +∞ there, and `MilliValue("-1.23456789012345678")` is
///   even one off (-1233); such quantities are invalid in every request or capacity anyway;
/// - apimachinery first rounds sub-nano values up to `1n`; that changes nothing for
///   `scale <= 9` (a ceiling of a ceiling), and for larger scales we keep the exact value.
pub fn scaled_value(s: &str, scale: i32) -> Result<i64, QuantityError> {
    let Lexed {
        negative,
        int,
        frac,
        suffix,
    } = lex(s)?;
    let (exp10, pow2) = match suffix {
        Suffix::Decimal(e) => (e, 0),
        Suffix::Binary(b) => (0, b),
    };
    // The exponent of the last written digit; in i64 the sum of two i32s and a length cannot overflow.
    let exponent = i64::from(exp10) + i64::from(scale) - frac.len() as i64;
    let magnitude = ceil_capped(&to_decimal(int, frac, pow2, exponent));
    // `magnitude <= 2^63`, so both conversions succeed; the fallbacks only document the cap.
    let value = if negative {
        i64::try_from(-(magnitude as i128)).unwrap_or(i64::MIN)
    } else {
        i64::try_from(magnitude).unwrap_or(i64::MAX)
    };
    Ok(value)
}

/// apimachinery's `Quantity.Value()`: whole units (bytes, devices), rounded up.
pub fn value(s: &str) -> Result<i64, QuantityError> {
    scaled_value(s, 0)
}

/// apimachinery's `Quantity.MilliValue()`: thousandths (millicores), rounded up.
pub fn milli_value(s: &str) -> Result<i64, QuantityError> {
    scaled_value(s, 3)
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

    #[test]
    fn integer_values_as_apimachinery() {
        // Printed by apimachinery v0.34.4 (k8s.io/apimachinery/pkg/api/resource):
        //   q := resource.MustParse(s); fmt.Printf("(%q, %d, %d),\n", s, q.Value(), q.MilliValue())
        // Overflowing values are left out: Go wraps them (see `saturates_where_go_wraps`).
        let golden: &[(&str, i64, i64)] = &[
            ("0", 0, 0),
            ("1", 1, 1000),
            ("2", 2, 2000),
            ("64", 64, 64000),
            ("100m", 1, 100),
            ("250m", 1, 250),
            ("1500m", 2, 1500),
            ("8500m", 9, 8500),
            ("0.1", 1, 100),
            ("1.5", 2, 1500),
            ("10.5", 11, 10500),
            ("3.75", 4, 3750),
            ("0.5m", 1, 1),
            ("1.0001m", 1, 2),
            ("1m", 1, 1),
            ("0.001", 1, 1),
            ("1u", 1, 1),
            ("12.5u", 1, 1),
            ("100n", 1, 1),
            ("1n", 1, 1),
            ("0.0000000001", 1, 1),
            ("1e-12", 1, 1),
            ("1Ki", 1024, 1024000),
            ("0.5Ki", 512, 512000),
            ("2Ki", 2048, 2048000),
            ("4096Ki", 4194304, 4194304000),
            ("7.5Mi", 7864320, 7864320000),
            ("123Mi", 128974848, 128974848000),
            ("251638Mi", 263861567488, 263861567488000),
            ("1.5Gi", 1610612736, 1610612736000),
            ("3.3Gi", 3543348020, 3543348019200),
            ("16Gi", 17179869184, 17179869184000),
            ("96Gi", 103079215104, 103079215104000),
            ("191.5Gi", 205621559296, 205621559296000),
            ("0.5Ti", 549755813888, 549755813888000),
            ("3Pi", 3377699720527872, 3377699720527872000),
            ("1e3", 1000, 1000000),
            ("2E-3", 1, 2),
            ("1e-3", 1, 1),
            ("1k", 1000, 1000000),
            ("1M", 1000000, 1000000000),
            ("1G", 1000000000, 1000000000000),
            ("1T", 1000000000000, 1000000000000000),
            ("1P", 1000000000000000, 1000000000000000000),
            ("129e6", 129000000, 129000000000),
            ("129M", 129000000, 129000000000),
            ("128974848", 128974848, 128974848000),
            ("1.000000001", 2, 1001),
            ("1.23456789012345678", 2, 1235),
            (".5", 1, 500),
            ("5.", 5, 5000),
            ("+3", 3, 3000),
            ("-1.5", -2, -1500),
            ("-500m", -1, -500),
            ("-2", -2, -2000),
            ("-1.5Gi", -1610612736, -1610612736000),
            ("-0.5Ki", -512, -512000),
            ("9223372036854775", 9223372036854775, 9223372036854775000),
            ("100Gi", 107374182400, 107374182400000),
            ("1e-30", 1, 1),
            ("0.000000000000000000000000000000000000000000001", 1, 1),
            (
                "123456789012345678901234567890123456789012345e-40",
                12346,
                12345679,
            ),
            (
                "0.00000000000000000000000000000000000000000123456789012345678901234567890123456789012345Ei",
                1,
                1,
            ),
            ("0.1Ki", 103, 102400),
            ("0.001Ki", 2, 1024),
            ("0.0001Ki", 1, 103),
            ("1.0000000001Gi", 1073741825, 1073741824108),
        ];
        for &(s, v, milli) in golden {
            assert_eq!(value(s), Ok(v), "Value({s})");
            assert_eq!(milli_value(s), Ok(milli), "MilliValue({s})");
        }
    }

    #[test]
    fn saturates_where_go_wraps() {
        // apimachinery v0.34.4 prints the Go value in the comment; we saturate instead.
        let cases: &[(&str, i32, i64)] = &[
            ("9223372036854775807", 0, i64::MAX),
            ("9223372036854775807", 3, i64::MAX), // Go: -1000
            ("9223372036854775808", 0, i64::MAX),
            ("12345678901234567", 3, i64::MAX), // Go: -6101065172474984616
            ("1E", 3, i64::MAX),                // Go: 0
            ("9Ei", 0, i64::MAX),               // Go: capped at MaxInt64 too
            ("9Ei", 3, i64::MAX),               // Go: -1000
            ("1.1Ei", 3, i64::MAX),             // Go: -4611686018427387904
            ("1e30", 0, i64::MAX),              // Go: 0
            ("-1e30", 0, i64::MIN),             // Go: 0
            ("-9223372036854775808", 0, i64::MIN),
            ("-9223372036854775809", 0, i64::MIN),
            ("1e2147483647", 0, i64::MAX),
            ("1e-2147483648", 0, 1),
            (
                "99999999999999999999999999999999999999999999999999Ei",
                0,
                i64::MAX,
            ),
        ];
        for &(s, scale, want) in cases {
            assert_eq!(scaled_value(s, scale), Ok(want), "{s} at scale {scale}");
        }
    }

    #[test]
    fn other_scales_are_exact() {
        assert_eq!(scaled_value("1.5Gi", -9), Ok(2));
        assert_eq!(scaled_value("1.5", 9), Ok(1_500_000_000));
        assert_eq!(scaled_value("1.5n", 10), Ok(15));
        assert_eq!(scaled_value("0.15n", 10), Ok(2));
        assert_eq!(scaled_value("1234", -2), Ok(13));
        assert_eq!(scaled_value("1200", -2), Ok(12));
        assert_eq!(scaled_value("-1234", -2), Ok(-13));
        assert_eq!(scaled_value("0", 100), Ok(0));
        assert_eq!(scaled_value("-0", 0), Ok(0));
        assert_eq!(scaled_value("000.000", 0), Ok(0));
    }

    #[test]
    fn integer_garbage_is_an_error() {
        for s in [
            "",
            "abc",
            "1.2.3",
            "5Xi",
            "m",
            "-",
            "1e",
            ".",
            "1e99999999999",
        ] {
            assert!(value(s).is_err(), "{s}");
            assert!(milli_value(s).is_err(), "{s}");
        }
    }
}
