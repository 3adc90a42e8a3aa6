//! Reading an explicit JSON `null` as "unset". Go's decoder leaves a non-pointer field at its
//! zero value on `null`, and Go clients write `null` for every nil slice or map without
//! `omitempty` (`"conditions": null`), so objects written by Go must decode here too.
//!
//! Every field that is not an `Option` and may be left out (and the few required lists Go
//! writes as `null`) carries `#[serde(deserialize_with = ...)]` with one of these: `null`
//! gives the value a missing field gets. Serialization and the generated schema are
//! untouched (schemars ignores `deserialize_with`). `Option` fields need nothing: serde reads
//! `null` as `None` already.

use serde::{Deserialize, Deserializer};

/// `null` is `T::default()`, the value of a missing field without a CRD default.
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `null` is `default()`: for a field with `#[serde(default = "default")]`, through a
/// [`null_as_fn`] wrapper.
pub(crate) fn null_as<'de, D, T>(d: D, default: fn() -> T) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_else(default))
}

/// Defines `fn $name`, a `deserialize_with` helper that reads `null` as `$default()`: the
/// field's `#[serde(default = "$default")]`, so that `null` and a missing field agree.
macro_rules! null_as_fn {
    ($(#[$doc:meta])* $vis:vis fn $name:ident() -> $ty:ty = $default:path) => {
        $(#[$doc])*
        $vis fn $name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            $crate::null::null_as(d, $default)
        }
    };
}
pub(crate) use null_as_fn;

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    fn seven() -> i32 {
        7
    }
    null_as_fn!(fn null_as_seven() -> i32 = seven);

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default)]
    struct T {
        #[serde(deserialize_with = "null_as_default")]
        list: Vec<String>,
        #[serde(default = "seven", deserialize_with = "null_as_seven")]
        n: i32,
    }

    #[test]
    fn null_is_the_missing_value() {
        let missing: T = serde_json::from_value(json!({})).expect("decodes");
        let null: T = serde_json::from_value(json!({"list": null, "n": null})).expect("decodes");
        assert_eq!(missing, null);
        assert_eq!(null.n, 7);
        let set: T = serde_json::from_value(json!({"list": ["a"], "n": 0})).expect("decodes");
        assert_eq!((set.list, set.n), (vec!["a".to_owned()], 0));
    }
}
