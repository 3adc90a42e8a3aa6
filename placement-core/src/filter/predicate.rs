//! The Predicate filter: a cluster passes when it matches any predicate (OR); within one
//! predicate the label, claim and CEL selectors must all match (AND). Empty selectors match all.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use ocm_api::cluster::v1beta1::ClusterPredicate;
use ocm_api::selector::Selector;

use super::{DropReason, FilterResult};
use crate::limits::{self, Deadline};
use crate::snapshot::{ClusterInfo, Snapshot};
use crate::status::{Code, Status};
use ocm_cel::{CelSelector, CompileError, PoolExhausted, ScoreSource};

pub const NAME: &str = "Predicate";

struct Compiled {
    labels: Selector,
    claims: Selector,
    cel: Option<Arc<CelSelector>>,
}

/// A compile result: the selector, or why the expressions are invalid (deterministic).
type CompiledCel = Result<Arc<CelSelector>, String>;

/// The memory all cached CEL selectors may hold (their [`CelSelector::size`] plus their
/// expressions).
pub(crate) const CEL_CACHE_BYTES: usize = 64 << 20;
/// The memory the cached selectors of one namespace may hold: a namespace that needs more
/// drops its own entries, never another namespace's.
pub(crate) const CEL_CACHE_NAMESPACE_BYTES: usize = 16 << 20;
/// Entries one namespace may hold, however small.
pub(crate) const CEL_CACHE_NAMESPACE_ENTRIES: usize = 1024;
/// What an entry costs beyond its selector and expressions (the map slot, the key vector).
const ENTRY_BYTES: usize = 256;

/// Compiled CEL selectors by namespace and expressions. Compiling costs far more than
/// evaluating (about 130 µs), and the same placements are scheduled again and again; a pure
/// cache of a pure function. Only deterministic results are cached: a compiler that could not
/// run says nothing about the expressions. Bounded by memory, per namespace and in all, so that
/// no tenant can flush another's entries by filling the cache: a namespace over its share
/// clears its own entries; over the total, the namespace holding the most is cleared. The same
/// expressions in two namespaces share one compiled selector (each namespace is charged for it).
#[derive(Default)]
struct CelCache {
    namespaces: HashMap<String, Namespace>,
    bytes: usize,
    limits: CacheLimits,
}

#[derive(Clone, Copy)]
struct CacheLimits {
    total: usize,
    namespace: usize,
    entries: usize,
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self {
            total: CEL_CACHE_BYTES,
            namespace: CEL_CACHE_NAMESPACE_BYTES,
            entries: CEL_CACHE_NAMESPACE_ENTRIES,
        }
    }
}

#[derive(Default)]
struct Namespace {
    entries: HashMap<Vec<String>, (CompiledCel, usize)>,
    bytes: usize,
}

impl CelCache {
    fn get(&self, namespace: &str, expressions: &[String]) -> Option<CompiledCel> {
        let ns = self.namespaces.get(namespace)?;
        ns.entries.get(expressions).map(|(c, _)| c.clone())
    }

    /// The same expressions compiled for another namespace.
    fn shared(&self, expressions: &[String]) -> Option<CompiledCel> {
        self.namespaces
            .values()
            .find_map(|ns| ns.entries.get(expressions).map(|(c, _)| c.clone()))
    }

    fn insert(&mut self, namespace: &str, expressions: &[String], compiled: CompiledCel) {
        let size = ENTRY_BYTES
            + expressions.iter().map(String::len).sum::<usize>()
            + match &compiled {
                Ok(c) => c.size(),
                Err(m) => m.len(),
            };
        if size > self.limits.namespace || size > self.limits.total {
            return;
        }
        let limits = self.limits;
        let ns = self.namespaces.entry(namespace.to_owned()).or_default();
        if ns.bytes + size > limits.namespace || ns.entries.len() >= limits.entries {
            self.bytes -= ns.bytes;
            ns.entries.clear();
            ns.bytes = 0;
        }
        while self.bytes + size > limits.total {
            let Some(largest) = self
                .namespaces
                .iter()
                .max_by_key(|(_, ns)| ns.bytes)
                .map(|(name, _)| name.clone())
            else {
                break;
            };
            if let Some(ns) = self.namespaces.remove(&largest) {
                self.bytes -= ns.bytes;
            }
        }
        let ns = self.namespaces.entry(namespace.to_owned()).or_default();
        if let Some((_, old)) = ns.entries.insert(expressions.to_vec(), (compiled, size)) {
            ns.bytes -= old;
            self.bytes -= old;
        }
        ns.bytes += size;
        self.bytes += size;
    }
}

static CEL_CACHE: LazyLock<Mutex<CelCache>> = LazyLock::new(Mutex::default);

fn compile_cel(namespace: &str, expressions: &[String]) -> Result<Arc<CelSelector>, CompileError> {
    let cached = CEL_CACHE.lock().ok().and_then(|cache| {
        cache
            .get(namespace, expressions)
            .map(|hit| (hit, true))
            .or_else(|| cache.shared(expressions).map(|hit| (hit, false)))
    });
    let compiled = match cached {
        Some((hit, true)) => return hit.map_err(CompileError::Invalid),
        Some((shared, false)) => shared,
        None => match CelSelector::compile(expressions) {
            Ok(c) => Ok(Arc::new(c)),
            Err(CompileError::Invalid(m)) => Err(m),
            Err(transient @ CompileError::Transient(_)) => return Err(transient),
        },
    };
    if let Ok(mut cache) = CEL_CACHE.lock() {
        cache.insert(namespace, expressions, compiled.clone());
    }
    compiled.map_err(CompileError::Invalid)
}

/// The compiled predicates of one Placement.
pub(crate) struct Predicates {
    compiled: Vec<Compiled>,
}

impl Predicates {
    /// Compiles every selector of a Placement in `namespace` (the CEL cache's share); a bad one,
    /// or CEL selectors holding more than [`ocm_cel::MAX_COMPILED_PLACEMENT_BYTES`] in all,
    /// make the Placement misconfigured; a compiler that could not run makes the pass
    /// [`Code::Transient`].
    pub(crate) fn compile(
        namespace: &str,
        predicates: &[ClusterPredicate],
    ) -> Result<Self, Status> {
        let bad = |m: String| Status::misconfigured(NAME, m);
        let mut compiled = Vec::with_capacity(predicates.len());
        let mut cel_bytes = 0usize;
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
                let cel = compile_cel(namespace, exprs).map_err(|e| match e {
                    CompileError::Invalid(m) => bad(m),
                    CompileError::Transient(m) => Status::new(Code::Transient, NAME, m),
                })?;
                cel_bytes = cel_bytes.saturating_add(cel.size());
                if cel_bytes > ocm_cel::MAX_COMPILED_PLACEMENT_BYTES {
                    return Err(bad(ocm_cel::placement_too_big(cel_bytes)));
                }
                Some(cel)
            };
            compiled.push(Compiled {
                labels,
                claims,
                cel,
            });
        }
        Ok(Self { compiled })
    }

    /// Whether any predicate has a CEL selector (the pass's CEL budget applies).
    pub(crate) fn has_cel(&self) -> bool {
        self.compiled.iter().any(|p| p.cel.is_some())
    }

    /// `None` when the cluster passes; otherwise why each predicate refused it. CEL draws
    /// from `pool`, the pass's budget, within `deadline`; `Err` when either ran out.
    pub(crate) fn check(
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

impl Predicates {
    /// The Predicate filter within the pass's CEL budget ([`crate::limits`]): the cost pool is
    /// shared by every cluster; the deadline is looked at every [`limits::DEADLINE_EVERY`]
    /// clusters, after any cluster that took [`limits::DEADLINE_EVERY_UNITS`] or more since
    /// the last look, and inside evaluations (every [`ocm_cel::DEADLINE_EVERY_UNITS`] units).
    pub(crate) fn filter<'a>(
        &self,
        candidates: Vec<&'a ClusterInfo>,
        snapshot: &Snapshot,
        deadline: &dyn Deadline,
    ) -> Result<(Vec<&'a ClusterInfo>, FilterResult), Status> {
        let limits = snapshot.limits();
        let cel = self.has_cel();
        let mut pool = if cel { limits.cel_cost } else { u64::MAX };
        let total = candidates.len();
        let mut kept = Vec::with_capacity(total);
        let mut dropped = Vec::new();
        let mut pool_at_look = pool;
        for (i, c) in candidates.into_iter().enumerate() {
            let due = i % limits::DEADLINE_EVERY == 0
                || pool_at_look.saturating_sub(pool) >= limits::DEADLINE_EVERY_UNITS;
            if cel && due {
                if deadline.passed() {
                    return Err(limits::cel_budget_exceeded(&limits, true, i, total));
                }
                pool_at_look = pool;
            }
            match self.check(c, snapshot, &mut pool, deadline) {
                Ok(None) => kept.push(c),
                Ok(Some(why)) => dropped.push((c.name.clone(), why)),
                Err(exhausted) => {
                    let out_of_time = exhausted == PoolExhausted::Time;
                    return Err(limits::cel_budget_exceeded(&limits, out_of_time, i, total));
                }
            }
        }
        Ok((
            kept,
            FilterResult {
                name: NAME,
                dropped,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exprs(i: usize) -> Vec<String> {
        vec![format!("managedCluster.metadata.name != 'c{i}'")]
    }

    fn compiled(i: usize) -> CompiledCel {
        CelSelector::compile(&exprs(i))
            .map(Arc::new)
            .map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn one_namespace_filling_the_cache_does_not_evict_another() {
        let one = ENTRY_BYTES + exprs(0)[0].len() + compiled(0).map_or(0, |c| c.size());
        let mut cache = CelCache {
            limits: CacheLimits {
                total: 40 * one,
                namespace: 10 * one,
                entries: 1024,
            },
            ..CelCache::default()
        };
        cache.insert("b", &exprs(0), compiled(0));
        // Namespace a compiles ever new expressions: its share fills and is cleared, again
        // and again; b keeps its entry. (Four namespaces fill the total: the largest goes.)
        for i in 1..200 {
            cache.insert("a", &exprs(i), compiled(i));
            assert!(cache.get("b", &exprs(0)).is_some(), "evicted after {i}");
        }
        assert!(cache.get("a", &exprs(199)).is_some());
        assert!(cache.bytes <= 40 * one);
        for ns in ["c", "d", "e", "f"] {
            for i in 0..10 {
                cache.insert(ns, &exprs(i), compiled(i));
            }
        }
        assert!(cache.bytes <= 40 * one);
        assert!(
            cache.get("b", &exprs(0)).is_some(),
            "the smallest namespace was evicted"
        );
        // Another namespace finds the compiled selector to share (compile_cel does).
        assert!(cache.get("g", &exprs(0)).is_none());
        assert!(matches!(cache.shared(&exprs(0)), Some(Ok(_))));
    }

    #[test]
    fn a_placement_is_refused_past_its_compiled_size_limit() {
        // Three predicates whose selectors each hold about 1.5 MiB: two fit, three do not.
        let n = 4_500;
        let list = format!(
            "managedCluster.metadata.name in [{}]",
            vec!["0"; n].join(",")
        );
        let selector = CelSelector::compile(&[list.clone(), list.clone()]).unwrap();
        let two_mib = selector.size();
        assert!((1 << 20..2 << 20).contains(&two_mib), "{two_mib}");
        let predicate: ClusterPredicate = serde_json::from_value(serde_json::json!({
            "requiredClusterSelector": {"celSelector": {"celExpressions": [list, list]}}
        }))
        .unwrap();
        assert!(Predicates::compile("limits", &vec![predicate.clone(); 2]).is_ok());
        let Err(status) = Predicates::compile("limits", &vec![predicate; 3]) else {
            panic!("compiled");
        };
        assert!(
            status
                .message
                .contains("more than the limit of 4194304 bytes per Placement"),
            "{}",
            status.message
        );
    }
}
