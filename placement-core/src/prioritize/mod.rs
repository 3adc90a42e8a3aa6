//! Prioritizers: which ones a Placement uses with which weights (upstream's modes and
//! quirks), and their scores. Every score is an integer in [-100, 100]; a cluster a
//! prioritizer has no opinion on gets no entry (`None`).

pub mod addon;
pub mod affinity;
pub(crate) mod balance;
pub(crate) mod resource;
pub(crate) mod steady;

use jiff::Timestamp;
use ocm_api::cluster::v1beta1::{AddOnScore, PrioritizerConfig, PrioritizerPolicy};
use ocm_api::wellknown::{
    builtin_prioritizer as builtin, limits, prioritizer_mode, score_coordinate_type,
};

use crate::pass::Own;
use crate::snapshot::{ClusterInfo, Snapshot};
use crate::status::Status;

/// One prioritizer a Placement uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Balance,
    Steady,
    ResourceCpu,
    ResourceMemory,
    AddOn(AddOnScore),
    /// Our extension: affinity spread from the topology-affinity annotation.
    Affinity(usize),
}

/// A prioritizer with its weight (never 0: weight 0 disables it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weighted {
    pub name: String,
    pub kind: Kind,
    pub weight: i32,
}

/// The prioritizers of a policy with their weights, in a fixed order: the defaults, then the
/// configurations in spec order. Upstream iterates a Go map (random order); only the totals
/// depend on it.
pub fn from_policy(policy: &PrioritizerPolicy) -> Result<Vec<Weighted>, Status> {
    let weights = weights(policy)?;
    prioritizers(weights)
}

/// One score coordinate and its weight, keyed like upstream's map key {type, builtIn, addOn
/// *AddOnScore}: a coordinate that carries an addOn never merges with another entry (the
/// pointer differs).
struct Entry {
    type_: String,
    built_in: String,
    add_on: Option<AddOnScore>,
    weight: i32,
}

/// Upstream's `getWeights`: in Additive mode (the default) the defaults, Balance and Steady
/// with weight 1, overridden by the configurations; in Exact mode the configurations alone.
fn weights(policy: &PrioritizerPolicy) -> Result<Vec<Entry>, Status> {
    let mut entries = match policy.mode.as_str() {
        "" | prioritizer_mode::ADDITIVE => default_weights(),
        prioritizer_mode::EXACT => Vec::new(),
        other => {
            return Err(Status::misconfigured(
                "",
                format!("incorrect prioritizer policy mode: {other}"),
            ));
        }
    };
    for config in &policy.configurations {
        merge_weight(&mut entries, config)?;
    }
    Ok(entries)
}

fn default_weights() -> Vec<Entry> {
    [builtin::BALANCE, builtin::STEADY]
        .into_iter()
        .map(|name| Entry {
            type_: score_coordinate_type::BUILT_IN.into(),
            built_in: name.into(),
            add_on: None,
            weight: 1,
        })
        .collect()
}

/// Upstream's `mergeWeights` for one configuration: it sets the weight of its coordinate,
/// replacing the one an earlier entry gave it.
fn merge_weight(entries: &mut Vec<Entry>, config: &PrioritizerConfig) -> Result<(), Status> {
    let Some(coord) = &config.score_coordinate else {
        return Err(Status::misconfigured(
            "",
            "scoreCoordinate field is required",
        ));
    };
    if !(limits::MIN_WEIGHT..=limits::MAX_WEIGHT).contains(&config.weight) {
        return Err(Status::misconfigured(
            "",
            format!(
                "weight {} is out of range [{}, {}]",
                config.weight,
                limits::MIN_WEIGHT,
                limits::MAX_WEIGHT
            ),
        ));
    }
    // The CRD defaults an unset type to BuiltIn; objects that never met an apiserver
    // (simulate, the debug endpoint's what-if) get the same default here.
    let type_ = if coord.type_.is_empty() {
        score_coordinate_type::BUILT_IN.to_owned()
    } else {
        coord.type_.clone()
    };
    let existing = if coord.add_on.is_none() {
        entries
            .iter_mut()
            .find(|e| e.add_on.is_none() && e.type_ == type_ && e.built_in == coord.built_in)
    } else {
        None
    };
    match existing {
        Some(e) => e.weight = config.weight,
        None => entries.push(Entry {
            type_,
            built_in: coord.built_in.clone(),
            add_on: coord.add_on.clone(),
            weight: config.weight,
        }),
    }
    Ok(())
}

/// Upstream's `getPrioritizers`: a prioritizer for every coordinate whose weight is not 0.
fn prioritizers(entries: Vec<Entry>) -> Result<Vec<Weighted>, Status> {
    entries
        .into_iter()
        .filter(|e| e.weight != 0)
        .map(prioritizer)
        .collect()
}

fn prioritizer(e: Entry) -> Result<Weighted, Status> {
    let kind = if e.type_ == score_coordinate_type::BUILT_IN {
        match e.built_in.as_str() {
            builtin::BALANCE => Kind::Balance,
            builtin::STEADY => Kind::Steady,
            builtin::RESOURCE_ALLOCATABLE_CPU => Kind::ResourceCpu,
            builtin::RESOURCE_ALLOCATABLE_MEMORY => Kind::ResourceMemory,
            other => {
                return Err(Status::misconfigured(
                    "",
                    format!("incorrect builtin prioritizer: {other}"),
                ));
            }
        }
    } else {
        match e.add_on {
            Some(a) => Kind::AddOn(a),
            None => return Err(Status::misconfigured("", "addOn should not be empty")),
        }
    };
    let name = match &kind {
        Kind::AddOn(a) => format!("AddOn/{}/{}", a.resource_name, a.score_name),
        _ => e.built_in,
    };
    Ok(Weighted {
        name,
        kind,
        weight: e.weight,
    })
}

/// What one prioritizer says about the candidates, the same shape for every prioritizer
/// (upstream's `PluginScoreResult`, with the plugin's status and its `RequeueAfter`).
pub(crate) struct Scored {
    /// Aligned with the candidates; `None` where the prioritizer has no opinion.
    pub(crate) scores: Vec<Option<i64>>,
    /// A Warning for the pass (expired AddOn scores).
    pub(crate) warning: Option<Status>,
    /// What the user should know that is not a status (clamped or capped values).
    pub(crate) notes: Vec<String>,
    /// Scores the validity bound has ended (see [`addon`]).
    pub(crate) capped: Vec<addon::CappedScore>,
    /// When the scores change on time alone (the earliest expiry of a score used).
    pub(crate) requeue_at: Option<Timestamp>,
}

impl From<Vec<Option<i64>>> for Scored {
    /// Scores that depend on nothing but the snapshot: no warning, no note, no timer.
    fn from(scores: Vec<Option<i64>>) -> Self {
        Scored {
            scores,
            warning: None,
            notes: Vec::new(),
            capped: Vec::new(),
            requeue_at: None,
        }
    }
}

/// What the prioritizers read about the candidates.
pub(crate) struct Candidates<'p> {
    pub(crate) snapshot: &'p Snapshot,
    pub(crate) own: &'p Own<'p>,
    /// The filtered clusters, in name order.
    pub(crate) clusters: &'p [&'p ClusterInfo],
    /// Whether each candidate is in this placement's decisions.
    pub(crate) in_decision: &'p [bool],
    /// The placement's affinity terms ([`Kind::Affinity`] indexes them).
    pub(crate) affinity: &'p [affinity::Term],
    pub(crate) now: Timestamp,
}

/// Runs one prioritizer over the candidates.
pub(crate) fn score(w: &Weighted, c: &Candidates<'_>) -> Scored {
    let clusters = c.clusters;
    match &w.kind {
        Kind::Balance => {
            balance::score(c.snapshot, &c.own.by_name, &c.own.by_slot, clusters).into()
        }
        Kind::Steady => steady::score(c.in_decision).into(),
        Kind::ResourceCpu => resource::score(clusters.iter().map(|c| c.cpu)).into(),
        Kind::ResourceMemory => resource::score(clusters.iter().map(|c| c.memory)).into(),
        Kind::Affinity(i) => affinity::score(&c.affinity[*i], clusters).into(),
        Kind::AddOn(coord) => addon::prioritize(&w.name, coord, clusters, c.snapshot, c.now),
    }
}

/// Min-max normalisation to [-100, 100] as the resource prioritizer does it.
pub use ocm_api::score::min_max as normalise;
