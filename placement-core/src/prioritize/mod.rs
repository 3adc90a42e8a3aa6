//! Prioritizers: which ones a Placement uses with which weights (upstream's modes and
//! quirks), and their scores. Every score is an integer in [-100, 100]; a cluster a
//! prioritizer has no opinion on gets no entry (`None`).

pub mod addon;
pub mod affinity;
pub mod balance;
pub mod resource;
pub mod steady;

use ocm_api::cluster::v1beta1::{AddOnScore, PrioritizerPolicy};
use ocm_api::wellknown::{
    builtin_prioritizer as builtin, limits, prioritizer_mode, score_coordinate_type,
};

use super::status::Status;

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

/// The prioritizers of a policy, in a fixed order: the defaults, then the configurations in
/// spec order. Upstream iterates a Go map (random order); only the totals depend on it.
pub fn from_policy(policy: &PrioritizerPolicy) -> Result<Vec<Weighted>, Status> {
    // Entries keyed like upstream's map key {type, builtIn, addOn *AddOnScore}: a coordinate
    // that carries an addOn never merges with another entry (the pointer differs).
    struct Entry {
        type_: String,
        built_in: String,
        add_on: Option<AddOnScore>,
        weight: i32,
    }
    let mut entries: Vec<Entry> = Vec::new();
    match policy.mode.as_str() {
        "" | prioritizer_mode::ADDITIVE => {
            for name in [builtin::BALANCE, builtin::STEADY] {
                entries.push(Entry {
                    type_: score_coordinate_type::BUILT_IN.into(),
                    built_in: name.into(),
                    add_on: None,
                    weight: 1,
                });
            }
        }
        prioritizer_mode::EXACT => {}
        other => {
            return Err(Status::misconfigured(
                "",
                format!("incorrect prioritizer policy mode: {other}"),
            ));
        }
    }
    for config in &policy.configurations {
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
    }
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        if e.weight == 0 {
            continue;
        }
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
            _ => e.built_in.clone(),
        };
        out.push(Weighted {
            name,
            kind,
            weight: e.weight,
        });
    }
    Ok(out)
}

/// Min-max normalisation to [-100, 100] as the resource prioritizer does it.
pub use ocm_api::score::min_max as normalise;
