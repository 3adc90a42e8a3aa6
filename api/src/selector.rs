//! Kubernetes label-selector semantics, once: for cluster labels, cluster claims, clusterset
//! membership and decision-group selectors.
//!
//! A [`Selector`] is converted from a `metav1.LabelSelector` (or a bare list of requirements)
//! with the same checks as apimachinery's `LabelSelectorAsSelector`, so that a bad selector is
//! reported when the Placement is read rather than silently matching nothing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use thiserror::Error;

/// Why a selector could not be built. The texts follow apimachinery's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    #[error("{0:?} is not a valid label selector operator")]
    Operator(String),
    #[error(
        "values: Invalid value: {values:?}: for 'in', 'notin' operators, values set can't be empty (key {key:?})"
    )]
    EmptyValues { key: String, values: Vec<String> },
    #[error(
        "values: Invalid value: {values:?}: values set must be empty for exists and does not exist (key {key:?})"
    )]
    UnexpectedValues { key: String, values: Vec<String> },
    #[error("key: Invalid value: {0:?}: {1}")]
    Key(String, &'static str),
    #[error("values[0][{key}]: Invalid value: {value:?}: {reason}")]
    Value {
        key: String,
        value: String,
        reason: &'static str,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A validated selector: the requirements are ANDed; no requirement matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// Anything with string keys and values a selector can look into.
pub trait Labels {
    fn get(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

impl<L: Labels + ?Sized> Labels for &L {
    fn get(&self, key: &str) -> Option<&str> {
        (**self).get(key)
    }
}

/// No labels at all (an object whose `metadata.labels` is unset).
pub struct NoLabels;

impl Labels for NoLabels {
    fn get(&self, _key: &str) -> Option<&str> {
        None
    }
}

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// From a `metav1.LabelSelector`: `matchLabels` become equality requirements.
    pub fn from_label_selector(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            validate_key(key)?;
            validate_value(key, value)?;
            requirements.push(Requirement {
                key: key.clone(),
                op: Op::In(vec![value.clone()]),
            });
        }
        let exprs = selector.match_expressions.as_deref().unwrap_or_default();
        requirements.extend(Self::from_requirements(exprs)?.requirements);
        Ok(Self { requirements })
    }

    /// From bare requirements (a claim selector's `matchExpressions`).
    pub fn from_requirements(exprs: &[LabelSelectorRequirement]) -> Result<Self, SelectorError> {
        let mut requirements = Vec::with_capacity(exprs.len());
        for expr in exprs {
            validate_key(&expr.key)?;
            let values = expr.values.clone().unwrap_or_default();
            let op = match expr.operator.as_str() {
                "In" | "NotIn" => {
                    if values.is_empty() {
                        return Err(SelectorError::EmptyValues {
                            key: expr.key.clone(),
                            values,
                        });
                    }
                    for v in &values {
                        validate_value(&expr.key, v)?;
                    }
                    if expr.operator == "In" {
                        Op::In(values)
                    } else {
                        Op::NotIn(values)
                    }
                }
                "Exists" | "DoesNotExist" => {
                    if !values.is_empty() {
                        return Err(SelectorError::UnexpectedValues {
                            key: expr.key.clone(),
                            values,
                        });
                    }
                    if expr.operator == "Exists" {
                        Op::Exists
                    } else {
                        Op::DoesNotExist
                    }
                }
                other => return Err(SelectorError::Operator(other.to_owned())),
            };
            requirements.push(Requirement {
                key: expr.key.clone(),
                op,
            });
        }
        Ok(Self { requirements })
    }

    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &impl Labels) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.op {
                Op::In(values) => value.is_some_and(|v| values.iter().any(|x| x == v)),
                // NotIn matches an absent key, as in Kubernetes.
                Op::NotIn(values) => value.is_none_or(|v| values.iter().all(|x| x != v)),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
            }
        })
    }
}

const NAME_REASON: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63 characters";
const PREFIX_REASON: &str =
    "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters";

/// A qualified name: `[prefix/]name`, as label keys are validated.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return Err(SelectorError::Key(key.to_owned(), PREFIX_REASON));
    }
    if name.is_empty() || name.len() > 63 || !is_name_part(name) {
        return Err(SelectorError::Key(key.to_owned(), NAME_REASON));
    }
    Ok(())
}

/// A label value: empty, or a name part of at most 63 characters.
fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || (value.len() <= 63 && is_name_part(value)) {
        Ok(())
    } else {
        Err(SelectorError::Value {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63 characters",
        })
    }
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            b.first().is_some_and(edge)
                && b.last().is_some_and(edge)
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn operators_follow_kubernetes() {
        let l = labels(&[("env", "prod"), ("zone", "a")]);
        let cases = [
            (req("env", "In", &["prod", "dev"]), true),
            (req("env", "In", &["dev"]), false),
            (req("missing", "In", &["x"]), false),
            (req("env", "NotIn", &["dev"]), true),
            (req("env", "NotIn", &["prod"]), false),
            (req("missing", "NotIn", &["x"]), true),
            (req("zone", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("zone", "DoesNotExist", &[]), false),
        ];
        for (r, want) in cases {
            let s = Selector::from_requirements(std::slice::from_ref(&r)).unwrap();
            assert_eq!(s.matches(&l), want, "{r:?}");
        }
    }

    #[test]
    fn match_labels_and_expressions_are_anded_and_empty_matches_all() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("env", "prod")])),
            match_expressions: Some(vec![req("zone", "In", &["a"])]),
        };
        let s = Selector::from_label_selector(&sel).unwrap();
        assert!(s.matches(&labels(&[("env", "prod"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("zone", "b")])));
        assert!(!s.matches(&labels(&[("zone", "a")])));
        let all = Selector::from_label_selector(&LabelSelector::default()).unwrap();
        assert!(all.is_everything() && all.matches(&NoLabels));
    }

    #[test]
    fn bad_selectors_are_errors() {
        let bad = [
            (req("k", "In", &[]), "values set can't be empty"),
            (req("k", "NotIn", &[]), "values set can't be empty"),
            (req("k", "Exists", &["v"]), "must be empty"),
            (
                req("k", "Equals", &["v"]),
                "\"Equals\" is not a valid label selector operator",
            ),
            (req("bad key", "Exists", &[]), "name part must consist"),
            (req("Bad.Prefix/k", "Exists", &[]), "prefix part"),
            (req("k", "In", &["not a value"]), "a valid label must be"),
        ];
        for (r, want) in bad {
            let err = Selector::from_requirements(std::slice::from_ref(&r)).unwrap_err();
            assert!(err.to_string().contains(want), "{r:?}: {err}");
        }
        assert!(Selector::from_requirements(&[req("example.com/k-1.x", "Exists", &[])]).is_ok());
    }
}
