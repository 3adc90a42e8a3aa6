//! The Kubernetes `semver` library (apiserver `library/semverlib.go`), on versions parsed and
//! ordered the way `github.com/blang/semver/v4` does it.

use std::any::Any;
use std::cmp::Ordering;

use cel::common::types::{CelBool, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

#[derive(Clone, Debug)]
pub(super) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Prerelease>,
    /// Kept for fidelity; build metadata never takes part in comparisons.
    #[allow(dead_code)]
    build: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Prerelease {
    Numeric(u64),
    Alphanumeric(String),
}

impl Prerelease {
    /// Numeric identifiers sort before alphanumeric ones (semver.org §11).
    fn cmp(&self, other: &Prerelease) -> Ordering {
        match (self, other) {
            (Prerelease::Numeric(a), Prerelease::Numeric(b)) => a.cmp(b),
            (Prerelease::Numeric(_), Prerelease::Alphanumeric(_)) => Ordering::Less,
            (Prerelease::Alphanumeric(_), Prerelease::Numeric(_)) => Ordering::Greater,
            (Prerelease::Alphanumeric(a), Prerelease::Alphanumeric(b)) => a.cmp(b),
        }
    }
}

fn is_alphanumeric(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn has_leading_zero(s: &str) -> bool {
    s.len() > 1 && s.starts_with('0')
}

/// Go's `strconv.ParseUint(s, 10, 64)` for a string already known to hold only digits.
fn parse_number(s: &str, what: &str) -> Result<u64, String> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {what} number {s:?}"));
    }
    if has_leading_zero(s) {
        let what = what[..1].to_uppercase() + &what[1..];
        return Err(format!(
            "{what} number must not contain leading zeroes {s:?}"
        ));
    }
    s.parse()
        .map_err(|_| format!("strconv.ParseUint: parsing {s:?}: invalid syntax or out of range"))
}

impl Semver {
    /// `semver.Parse`: strict `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`.
    pub(super) fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".into());
        }
        let parts: Vec<&str> = s.splitn(3, '.').collect();
        let [major, minor, rest] = parts[..] else {
            return Err("No Major.Minor.Patch elements found".into());
        };
        let major = parse_number(major, "major")?;
        let minor = parse_number(minor, "minor")?;
        let (rest, build) = match rest.split_once('+') {
            Some((rest, build)) => (rest, build.split('.').map(str::to_owned).collect()),
            None => (rest, Vec::new()),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((patch, pre)) => (patch, pre.split('.').collect()),
            None => (rest, Vec::new()),
        };
        let patch = parse_number(patch, "patch")?;
        let pre = pre
            .into_iter()
            .map(|p| {
                if p.is_empty() {
                    Err("Prerelease is empty".to_string())
                } else if p.bytes().all(|b| b.is_ascii_digit()) {
                    if has_leading_zero(p) {
                        return Err(format!(
                            "Numeric PreRelease version must not contain leading zeroes {p:?}"
                        ));
                    }
                    p.parse()
                        .map(Prerelease::Numeric)
                        .map_err(|e| e.to_string())
                } else if is_alphanumeric(p) {
                    Ok(Prerelease::Alphanumeric(p.to_owned()))
                } else {
                    Err(format!("Invalid character(s) found in prerelease {p:?}"))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        for b in &build {
            if b.is_empty() {
                return Err("Build meta data is empty".into());
            }
            if !is_alphanumeric(b) {
                return Err(format!(
                    "Invalid character(s) found in build meta data {b:?}"
                ));
            }
        }
        Ok(Semver {
            major,
            minor,
            patch,
            pre,
            build,
        })
    }

    /// `semver(s, true)`: drops a leading `v`, pads `1` and `1.2` with zeros and strips leading
    /// zeros, then parses strictly (Kubernetes `normalizeAndParse`).
    pub(super) fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s
            .splitn(3, '.')
            .map(|p| {
                if p.len() <= 1 {
                    return p.to_owned();
                }
                let trimmed = p.trim_start_matches('0');
                if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                    trimmed.to_owned()
                } else {
                    format!("0{trimmed}")
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".into());
            }
            parts.resize(3, "0".to_owned());
        }
        Semver::parse(&parts.join("."))
    }

    /// `Version.Compare`: precedence per semver.org; build metadata is ignored.
    fn compare(&self, other: &Semver) -> Ordering {
        let core =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => self
                .pre
                .iter()
                .zip(&other.pre)
                .map(|(a, b)| a.cmp(b))
                .find(|o| o.is_ne())
                .unwrap_or_else(|| self.pre.len().cmp(&other.pre.len())),
        }
    }
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    /// Like upstream's `Semver.Equal`: equal precedence, so `1.0.0+a == 1.0.0+b`.
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| self.compare(o).is_eq())
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Semver {}

fn semver(s: &CelString<'_>) -> Result<Semver, ExecutionError> {
    Semver::parse(s.inner()).map_err(|e| ExecutionError::function_error("semver", e))
}

fn semver_normalize(s: &CelString<'_>, normalize: &CelBool) -> Result<Semver, ExecutionError> {
    let parsed = if *normalize.inner() {
        Semver::parse_normalized(s.inner())
    } else {
        Semver::parse(s.inner())
    };
    parsed.map_err(|e| ExecutionError::function_error("semver", e))
}

fn is_semver(s: &CelString<'_>) -> CelBool {
    Semver::parse(s.inner()).is_ok().into()
}

fn is_semver_normalize(s: &CelString<'_>, normalize: &CelBool) -> CelBool {
    semver_normalize(s, normalize).is_ok().into()
}

fn major(v: &Semver) -> CelInt {
    (v.major as i64).into()
}
fn minor(v: &Semver) -> CelInt {
    (v.minor as i64).into()
}
fn patch(v: &Semver) -> CelInt {
    (v.patch as i64).into()
}
fn is_greater_than(a: &Semver, b: &Semver) -> CelBool {
    a.compare(b).is_gt().into()
}
fn is_less_than(a: &Semver, b: &Semver) -> CelBool {
    a.compare(b).is_lt().into()
}
fn compare_to(a: &Semver, b: &Semver) -> CelInt {
    (a.compare(b) as i64).into()
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(SEMVER_TYPE.to_owned())?;
    cel::add_overload!(env, fn semver: (CelString<'_>) -> Result<Semver>, id = "string_to_semver")?;
    cel::add_overload!(env, fn semver_normalize: (CelString<'_>, CelBool) -> Result<Semver>,
        name = "semver", id = "string_bool_to_semver")?;
    cel::add_overload!(env, fn is_semver: (CelString<'_>) -> CelBool, name = "isSemver",
        id = "is_semver_string")?;
    cel::add_overload!(env, fn is_semver_normalize: (CelString<'_>, CelBool) -> CelBool,
        name = "isSemver", id = "is_semver_string_bool")?;
    cel::add_member_overload!(env, fn major: (Semver) -> CelInt, id = "semver_major")?;
    cel::add_member_overload!(env, fn minor: (Semver) -> CelInt, id = "semver_minor")?;
    cel::add_member_overload!(env, fn patch: (Semver) -> CelInt, id = "semver_patch")?;
    cel::add_member_overload!(env, fn is_greater_than: (Semver, Semver) -> CelBool,
        id = "semver_is_greater_than")?;
    cel::add_member_overload!(env, fn is_less_than: (Semver, Semver) -> CelBool,
        id = "semver_is_less_than")?;
    cel::add_member_overload!(env, fn compare_to: (Semver, Semver) -> CelInt,
        id = "semver_compare_to")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_blang_semver() {
        for ok in [
            "1.0.0",
            "0.1.0-alpha.1",
            "1.2.3-rc.1+build.5",
            "1.30.2+k3s1",
            "1.2.3-eks-a1b2",
        ] {
            assert!(Semver::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1.0",
            "v1.0.0",
            "01.0.0",
            "1.0.0-01",
            "1.0.0-",
            "1.0.0+",
            "1.0.0-a_b",
            "200K",
            "1.a.0",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn normalizes_like_kubernetes() {
        let cases = [
            ("v1.0.0", "1.0.0"),
            ("1.0", "1.0.0"),
            ("01.01.01", "1.1.1"),
            ("v1.30.2", "1.30.2"),
            ("1", "1.0.0"),
        ];
        for (input, strict) in cases {
            let a = Semver::parse_normalized(input).unwrap();
            let b = Semver::parse(strict).unwrap();
            assert!(a.compare(&b).is_eq(), "{input}");
        }
        assert!(Semver::parse_normalized("1.0-alpha").is_err());
    }

    #[test]
    fn orders_by_precedence() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.30.0",
            "2.0.0",
        ];
        for pair in ordered.windows(2) {
            let (a, b) = (
                Semver::parse(pair[0]).unwrap(),
                Semver::parse(pair[1]).unwrap(),
            );
            assert!(a.compare(&b).is_lt(), "{} < {}", pair[0], pair[1]);
        }
        let (a, b) = (
            Semver::parse("1.0.0+a").unwrap(),
            Semver::parse("1.0.0+b").unwrap(),
        );
        assert!(a.equals(&b));
    }
}
