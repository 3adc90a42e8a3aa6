//! Filters: hard constraints, run in upstream's order (Predicate, then TaintToleration). Each
//! keeps some candidates and says why it dropped the others.

pub mod predicate;
pub mod taint;

use std::fmt;

use super::snapshot::{ClusterInfo, Name};

/// Why a filter dropped a cluster. Formatted only when someone reads it (simulate, debug).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    /// For each predicate (1-based), the first of its selectors that did not match.
    Predicates(Vec<(usize, &'static str)>),
    /// A taint no toleration covers (or whose toleration has expired).
    Taint {
        key: String,
        value: String,
        effect: String,
        expired: bool,
    },
    /// DoNotSchedule spread needs the topology key on every cluster it may select.
    MissingTopologyKey(String),
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::Predicates(p) => {
                let parts: Vec<String> = p
                    .iter()
                    .map(|(i, part)| format!("predicate {i}: {part} does not match"))
                    .collect();
                write!(f, "{}", parts.join("; "))
            }
            DropReason::Taint {
                key,
                value,
                effect,
                expired,
            } => {
                let v = if value.is_empty() {
                    String::new()
                } else {
                    format!("={value}")
                };
                if *expired {
                    write!(f, "taint {key}{v}:{effect}: toleration expired")
                } else {
                    write!(f, "taint {key}{v}:{effect} is not tolerated")
                }
            }
            DropReason::MissingTopologyKey(k) => {
                write!(f, "no value for topology key {k} (DoNotSchedule spread)")
            }
        }
    }
}

/// One filter's result: the clusters it dropped, in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterResult {
    pub name: &'static str,
    pub dropped: Vec<(Name, DropReason)>,
}

/// Keeps the candidates `check` accepts, recording the others.
pub(crate) fn apply<'a>(
    name: &'static str,
    candidates: Vec<&'a ClusterInfo>,
    mut check: impl FnMut(&ClusterInfo) -> Option<DropReason>,
) -> (Vec<&'a ClusterInfo>, FilterResult) {
    let mut kept = Vec::with_capacity(candidates.len());
    let mut dropped = Vec::new();
    for c in candidates {
        match check(c) {
            None => kept.push(c),
            Some(r) => dropped.push((c.name.clone(), r)),
        }
    }
    (kept, FilterResult { name, dropped })
}
