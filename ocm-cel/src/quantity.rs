//! The Kubernetes `quantity` library (apiserver `library/quantity.go`) on quantities parsed the
//! way apimachinery's `resource.ParseQuantity` does: exact decimal values, rounded up to whole
//! nano units and capped at ±(2⁶³−1), which is what makes an `i128` count of nano units exact.

use std::any::Any;

use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

const NANO_PER_UNIT: i128 = 1_000_000_000;
/// apimachinery caps every parsed quantity at `2^63 - 1`.
const MAX_NANO: i128 = (i64::MAX as i128) * NANO_PER_UNIT;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Quantity {
    nano: i128,
}

impl Quantity {
    /// `resource.ParseQuantity`: `[+-]digits[.digits][suffix]`, where the suffix is a binary SI
    /// (`Ki`..`Ei`), decimal SI (`n`, `u`, `m`, ``, `k`, `M`..`E`) or `e<int>` exponent.
    pub(super) fn parse(s: &str) -> Result<Quantity, String> {
        const FORMAT: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
        if s.is_empty() {
            return Err(FORMAT.into());
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (integer, rest) = rest.split_at(digits_end);
        let (fraction, suffix) = match rest.strip_prefix('.') {
            Some(after) => {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(end)
            }
            None => ("", rest),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(FORMAT.into());
        }
        let (base_ten, exponent) = suffix_exponent(suffix)?;
        let digits: String = [integer, fraction].concat();
        let mut nano = scale_to_nano(
            &digits,
            exponent_after_point(base_ten, exponent, fraction.len()),
            if base_ten { 0 } else { exponent },
        );
        if negative {
            nano = -nano;
        }
        Ok(Quantity { nano })
    }

    fn from_int(i: i64) -> Quantity {
        Quantity {
            nano: i128::from(i) * NANO_PER_UNIT,
        }
    }

    fn checked_add(self, other: Quantity) -> Result<Quantity, ExecutionError> {
        self.nano
            .checked_add(other.nano)
            .map(|nano| Quantity { nano })
            .ok_or_else(|| ExecutionError::function_error("add", "quantity overflow"))
    }

    fn checked_sub(self, other: Quantity) -> Result<Quantity, ExecutionError> {
        self.nano
            .checked_sub(other.nano)
            .map(|nano| Quantity { nano })
            .ok_or_else(|| ExecutionError::function_error("sub", "quantity overflow"))
    }

    /// `Quantity.AsInt64`: the value when it is a whole number that fits an `int64`.
    fn as_i64(self) -> Option<i64> {
        if self.nano % NANO_PER_UNIT != 0 {
            return None;
        }
        i64::try_from(self.nano / NANO_PER_UNIT).ok()
    }
}

/// Interprets the suffix: `(true, e)` for ×10^e, `(false, e)` for ×2^e.
fn suffix_exponent(suffix: &str) -> Result<(bool, i64), String> {
    Ok(match suffix {
        "Ki" => (false, 10),
        "Mi" => (false, 20),
        "Gi" => (false, 30),
        "Ti" => (false, 40),
        "Pi" => (false, 50),
        "Ei" => (false, 60),
        "n" => (true, -9),
        "u" => (true, -6),
        "m" => (true, -3),
        "" => (true, 0),
        "k" => (true, 3),
        "M" => (true, 6),
        "G" => (true, 9),
        "T" => (true, 12),
        "P" => (true, 15),
        "E" => (true, 18),
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .filter(|e| !e.is_empty())
                .and_then(|e| e.parse::<i64>().ok())
                .ok_or_else(|| "unable to parse quantity's suffix".to_string())?;
            (true, exponent.clamp(-1_000, 1_000))
        }
    })
}

/// The power of ten that turns the digit string (integer and fraction digits together) into
/// nano units.
fn exponent_after_point(base_ten: bool, exponent: i64, fraction_len: usize) -> i64 {
    let ten = if base_ten { exponent } else { 0 };
    ten + 9 - fraction_len as i64
}

/// `ceil(digits × 10^ten × 2^two)`, capped at [`MAX_NANO`]. Works on the decimal digit string so
/// that any input length is exact; the caps keep every step small.
fn scale_to_nano(digits: &str, mut ten: i64, two: i64) -> i128 {
    // Little-endian decimal digits, without leading zeros.
    let mut number: Vec<u8> = digits
        .trim_start_matches('0')
        .bytes()
        .rev()
        .map(|b| b - b'0')
        .collect();
    if number.is_empty() {
        return 0;
    }
    // Digits far below one nano unit only decide whether to round up: fold them into a flag so
    // that a long fraction costs no more than a short one below.
    let mut below_nano = false;
    if ten < -60 {
        let drop = ((-60 - ten) as usize).min(number.len());
        below_nano = number.drain(..drop).any(|d| d != 0);
        ten += drop as i64;
    }
    // The integer part of number × 10^ten has `len + ten` digits; doubling only adds digits.
    if number.len() as i64 + ten > 29 {
        // At least 10^29 nano units: beyond the cap.
        return MAX_NANO;
    }
    // × 2^two (0..=60): doubling the decimal digit string.
    for _ in 0..two {
        let mut carry = 0;
        for d in number.iter_mut() {
            let v = *d * 2 + carry;
            *d = v % 10;
            carry = v / 10;
        }
        if carry > 0 {
            number.push(carry);
        }
    }
    if number.len() as i64 + ten > 29 {
        return MAX_NANO;
    }
    let cut = if ten >= 0 {
        0
    } else {
        (-ten).min(number.len() as i64) as usize
    };
    let (fraction, integer) = number.split_at(cut);
    let mut nano: i128 = integer
        .iter()
        .rev()
        .fold(0i128, |acc, d| acc * 10 + i128::from(*d));
    if ten > 0 {
        nano *= 10i128.pow(ten as u32);
    }
    // Anything below one nano unit rounds up (away from zero), as apimachinery does.
    if below_nano || fraction.iter().any(|d| *d != 0) {
        nano += 1;
    }
    nano.min(MAX_NANO)
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    /// Like upstream's `Quantity.Equal`: equal values, so `quantity('1k') == quantity('1000')`.
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Quantity {}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    Quantity::parse(s.inner()).map_err(|e| ExecutionError::function_error("quantity", e))
}
fn is_quantity(s: &CelString<'_>) -> CelBool {
    Quantity::parse(s.inner()).is_ok().into()
}
fn sign(q: &Quantity) -> CelInt {
    (q.nano.signum() as i64).into()
}
fn is_greater_than(a: &Quantity, b: &Quantity) -> CelBool {
    (a > b).into()
}
fn is_less_than(a: &Quantity, b: &Quantity) -> CelBool {
    (a < b).into()
}
fn compare_to(a: &Quantity, b: &Quantity) -> CelInt {
    (a.cmp(b) as i64).into()
}
fn as_approximate_float(q: &Quantity) -> CelDouble {
    (q.nano as f64 / NANO_PER_UNIT as f64).into()
}
fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    q.as_i64().map(CelInt::from).ok_or_else(|| {
        ExecutionError::function_error("asInteger", "cannot convert value to integer")
    })
}
fn is_integer(q: &Quantity) -> CelBool {
    q.as_i64().is_some().into()
}
fn add(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.checked_add(*b)
}
fn add_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    a.checked_add(Quantity::from_int(*b.inner()))
}
fn sub(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.checked_sub(*b)
}
fn sub_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    a.checked_sub(Quantity::from_int(*b.inner()))
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(QUANTITY_TYPE.to_owned())?;
    cel::add_overload!(env, fn quantity: (CelString<'_>) -> Result<Quantity>, id = "string_to_quantity")?;
    cel::add_overload!(env, fn is_quantity: (CelString<'_>) -> CelBool, name = "isQuantity",
        id = "is_quantity_string")?;
    // Upstream declares `sign` as a global function although its docs write `q.sign()`; both
    // spellings work here.
    cel::add_overload!(env, fn sign: (Quantity) -> CelInt, id = "quantity_sign")?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt, id = "quantity_sign_member")?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool,
        id = "quantity_is_greater_than")?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool,
        id = "quantity_is_less_than")?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt,
        id = "quantity_compare_to")?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble,
        id = "quantity_get_float")?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>,
        id = "quantity_get_int")?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool,
        id = "quantity_is_integer")?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>,
        id = "quantity_add")?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>,
        name = "add", id = "quantity_add_int")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>,
        id = "quantity_sub")?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>,
        name = "sub", id = "quantity_sub_int")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nano(s: &str) -> i128 {
        Quantity::parse(s).unwrap().nano
    }

    #[test]
    fn parses_like_apimachinery() {
        let cases: [(&str, i128); 14] = [
            ("0", 0),
            ("1", 1_000_000_000),
            ("1.5", 1_500_000_000),
            ("200M", 200_000_000 * NANO_PER_UNIT),
            ("0.2G", 200_000_000 * NANO_PER_UNIT),
            ("1Ki", 1024 * NANO_PER_UNIT),
            ("1.5Gi", 1_610_612_736 * NANO_PER_UNIT),
            ("100m", 100_000_000),
            ("1n", 1),
            ("0.1n", 1), // rounded up to one nano
            ("-0.1n", -1),
            ("1e3", 1000 * NANO_PER_UNIT),
            ("1E-3", 1_000_000),
            ("9999999999999999999999999999999999999G", MAX_NANO),
        ];
        for (s, expected) in cases {
            assert_eq!(nano(s), expected, "{s}");
        }
        for bad in [
            "", "200K", "Three", "Mi", "1,3G", "1.5.5", ".", "1ki", "1e", "+",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn integers_and_comparisons() {
        assert_eq!(Quantity::parse("50k").unwrap().as_i64(), Some(50_000));
        assert_eq!(Quantity::parse("1.5").unwrap().as_i64(), None);
        assert!(Quantity::parse("50M").unwrap() < Quantity::parse("50Mi").unwrap());
        assert_eq!(nano("1e1000"), MAX_NANO);
        assert_eq!(
            nano("0.000000000000000000000000000000000000000000000000000000000000000000001Ki"),
            1
        );
    }
}
