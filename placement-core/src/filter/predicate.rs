//! The Predicate filter: a cluster passes when it matches any predicate (OR); within one
//! predicate the label, claim and CEL selectors must all match (AND). Empty selectors match all.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use ocm_api::cluster::v1beta1::ClusterPredicate;
use ocm_api::selector::Selector;

use super::DropReason;
use crate::limits::Deadline;
use crate::snapshot::ClusterInfo;
use crate::status::{Code, Status};
use ocm_cel::{CelSelector, CompileError, PoolExhausted, ScoreSource};

pub const NAME: &str = "Predicate";

struct Compiled {
    labels: Selector,
    claims: Selector,
    cel: Option<Arc<CelSelector>>,
}

/// Compiled CEL selectors by their expressions. Compiling costs far more than evaluating
/// (about 130 µs), and the same placements are scheduled again and again; a pure cache of a
/// pure function, bounded by clearing it when full. Only deterministic results are cached:
/// a compiler that could not run says nothing about the expressions.
type CompiledCel = Result<Arc<CelSelector>, String>;
static CEL_CACHE: LazyLock<Mutex<HashMap<Vec<String>, CompiledCel>>> =
    LazyLock::new(Mutex::default);
const CEL_CACHE_LIMIT: usize = 4096;

fn compile_cel(expressions: &[String]) -> Result<Arc<CelSelector>, CompileError> {
    if let Ok(cache) = CEL_CACHE.lock()
        && let Some(hit) = cache.get(expressions)
    {
        return hit.clone().map_err(CompileError::Invalid);
    }
    let compiled = match CelSelector::compile(expressions) {
        Ok(c) => Ok(Arc::new(c)),
        Err(CompileError::Invalid(m)) => Err(m),
        Err(transient @ CompileError::Transient(_)) => return Err(transient),
    };
    if let Ok(mut cache) = CEL_CACHE.lock() {
        if cache.len() >= CEL_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(expressions.to_vec(), compiled.clone());
    }
    compiled.map_err(CompileError::Invalid)
}

/// The compiled predicates of one Placement.
pub struct Predicates {
    compiled: Vec<Compiled>,
}

impl Predicates {
    /// Compiles every selector; a bad one makes the Placement misconfigured, a compiler that
    /// could not run makes the pass [`Code::Transient`].
    pub fn compile(predicates: &[ClusterPredicate]) -> Result<Self, Status> {
        let bad = |m: String| Status::misconfigured(NAME, m);
        let mut compiled = Vec::with_capacity(predicates.len());
        for p in predicates {
            let s = &p.required_cluster_selector;
            let labels =
                Selector::from_label_selector(&s.label_selector).map_err(|e| bad(e.to_string()))?;
            let claims = Selector::from_requirements(&s.claim_selector.match_expressions)
                .map_err(|e| bad(e.to_string()))?;
            let exprs = &s.cel_selector.cel_expressions;
            let cel = if exprs.is_empty() {
                None
            } else {
                Some(compile_cel(exprs).map_err(|e| match e {
                    CompileError::Invalid(m) => bad(m),
                    CompileError::Transient(m) => Status::new(Code::Transient, NAME, m),
                })?)
            };
            compiled.push(Compiled {
                labels,
                claims,
                cel,
            });
        }
        Ok(Self { compiled })
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }

    /// Whether any predicate has a CEL selector (the pass's CEL budget applies).
    pub fn has_cel(&self) -> bool {
        self.compiled.iter().any(|p| p.cel.is_some())
    }

    /// `None` when the cluster passes; otherwise why each predicate refused it. CEL draws
    /// from `pool`, the pass's budget, within `deadline`; `Err` when either ran out.
    pub fn check(
        &self,
        cluster: &ClusterInfo,
        scores: &dyn ScoreSource,
        pool: &mut u64,
        deadline: &dyn Deadline,
    ) -> Result<Option<DropReason>, PoolExhausted> {
        if self.compiled.is_empty() {
            return Ok(None);
        }
        let mut misses = Vec::with_capacity(self.compiled.len());
        for (i, p) in self.compiled.iter().enumerate() {
            let miss = if !p.labels.matches(cluster.labels()) {
                Some("labelSelector")
            } else if !p.claims.matches(&cluster.claims) {
                Some("claimSelector")
            } else if let Some(cel) = &p.cel
                && !cel.matches_within(cluster.cel(), scores, pool, deadline)?
            {
                Some("celSelector")
            } else {
                None
            };
            match miss {
                None => return Ok(None),
                Some(part) => misses.push((i + 1, part)),
            }
        }
        Ok(Some(DropReason::Predicates(misses)))
    }
}
