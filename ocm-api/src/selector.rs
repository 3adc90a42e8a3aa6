//! Kubernetes label-selector semantics, once: for cluster labels, cluster claims, clusterset
//! membership and decision-group selectors.
//!
//! A [`Selector`] is converted from a `metav1.LabelSelector` (or a bare list of requirements)
//! with the same checks as apimachinery's `LabelSelectorAsSelector`, so that a bad selector is
//! reported when the Placement is read rather than silently matching nothing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use thiserror::Error;

/// Why a selector could not be built. The texts are apimachinery's, to the letter (they end
/// up in `PlacementMisconfigured` messages).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    #[error("{0:?} is not a valid label selector operator")]
    Operator(String),
    #[error("values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty")]
    EmptyValues,
    #[error("values: Invalid value: {0}: values set must be empty for exists and does not exist")]
    UnexpectedValues(String),
    #[error("key: Invalid value: {0:?}: {1}")]
    Key(String, String),
    #[error("values[{index}][{key}]: Invalid value: {value:?}: {reason}")]
    Value {
        index: usize,
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
            validate_value(0, key, value)?;
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
                        return Err(SelectorError::EmptyValues);
                    }
                    for (i, v) in values.iter().enumerate() {
                        validate_value(i, &expr.key, v)?;
                    }
                    if expr.operator == "In" {
                        Op::In(values)
                    } else {
                        Op::NotIn(values)
                    }
                }
                "Exists" | "DoesNotExist" => {
                    if !values.is_empty() {
                        let shown = serde_json::to_string(&values).unwrap_or_default();
                        return Err(SelectorError::UnexpectedValues(shown));
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

const NAME_REASON: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PREFIX_REASON: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const VALUE_REASON: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// A qualified name: `[prefix/]name`, as label keys are validated. Every problem is listed,
/// joined by "; ", as apimachinery does.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let mut problems: Vec<String> = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".into());
            } else {
                if prefix.len() > 253 {
                    problems.push("prefix part must be no more than 253 characters".into());
                }
                if !is_dns_subdomain(prefix) {
                    problems.push(PREFIX_REASON.into());
                }
            }
            *name
        }
        _ => {
            return Err(SelectorError::Key(
                key.to_owned(),
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
            ));
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".into());
    }
    if !is_name_part(name) {
        problems.push(NAME_REASON.into());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SelectorError::Key(key.to_owned(), problems.join("; ")))
    }
}

/// A label value: empty, or a name part of at most 63 characters.
fn validate_value(index: usize, key: &str, value: &str) -> Result<(), SelectorError> {
    let bad = |reason| SelectorError::Value {
        index,
        key: key.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if value.len() > 63 {
        return Err(bad("must be no more than 63 characters"));
    }
    if value.is_empty() || is_name_part(value) {
        Ok(())
    } else {
        Err(bad(VALUE_REASON))
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
    fn bad_selectors_are_errors_with_apimachinerys_text() {
        // Each expected text was printed by apimachinery v0.34's LabelSelectorAsSelector.
        let name_reason = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let value_reason = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
        let long = "a".repeat(72);
        let bad = [
            (req("k", "In", &[]), "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty".to_string()),
            (req("k", "Exists", &["v"]), "values: Invalid value: [\"v\"]: values set must be empty for exists and does not exist".to_string()),
            (req("k", "Equals", &["v"]), "\"Equals\" is not a valid label selector operator".to_string()),
            (req("bad key", "Exists", &[]), format!("key: Invalid value: \"bad key\": {name_reason}")),
            (req("Bad.Prefix/k", "Exists", &[]), "key: Invalid value: \"Bad.Prefix/k\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()),
            (req("k", "In", &["not a value"]), format!("values[0][k]: Invalid value: \"not a value\": {value_reason}")),
            (req(&long, "Exists", &[]), format!("key: Invalid value: \"{long}\": name part must be no more than 63 characters")),
            (req("", "Exists", &[]), format!("key: Invalid value: \"\": name part must be non-empty; {name_reason}")),
        ];
        for (r, want) in bad {
            let err = Selector::from_requirements(std::slice::from_ref(&r)).unwrap_err();
            assert_eq!(err.to_string(), want, "{r:?}");
        }
        let ml = LabelSelector {
            match_labels: Some(labels(&[("k", "not a value")])),
            match_expressions: None,
        };
        assert_eq!(
            Selector::from_label_selector(&ml).unwrap_err().to_string(),
            format!("values[0][k]: Invalid value: \"not a value\": {value_reason}")
        );
        assert!(Selector::from_requirements(&[req("example.com/k-1.x", "Exists", &[])]).is_ok());
    }
}
