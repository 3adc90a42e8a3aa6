//! Selection: the top N by total, or — with spread constraints — one cluster at a time by
//! spread benefit plus total: the Selector phase of upstream's spread-policy proposal
//! (open-cluster-management-io/enhancements `enhancements/sig-architecture/70-spread-policy`),
//! which upstream's scheduler never implemented.
//!
//! Spread, per constraint (a topology key from a label or a claim):
//! - The domains are the key's values among the candidates. A domain's count is how many
//!   clusters already chosen are in it.
//! - `DoNotSchedule` refuses a cluster whose domain would exceed `maxSkew`, with Kubernetes'
//!   PodTopologySpread formula `count(domain) + 1 − min(counts) > maxSkew`. A cluster without
//!   the key cannot be placed under such a constraint and is dropped beforehand, as
//!   PodTopologySpread's filter drops nodes without the key.
//! - `ScheduleAnyway` never refuses. A cluster without the key is kept but gets the lowest
//!   spread score for that constraint (PodTopologySpread scores such nodes lowest too).
//! - Each round, a domain's benefit is 100 for the emptiest domain down to −100 for the
//!   fullest; constraints combine with earlier ones first (lexicographically), and the
//!   result is normalised to [−100, 100] over the clusters still in the running. The cluster
//!   with the highest `SPREAD_WEIGHT × benefit + total` wins (then the lower name), so spread
//!   acts like a prioritizer of weight 10 that is re-evaluated after every pick.

use std::collections::{BTreeMap, HashMap};

use ocm_api::cluster::v1beta1::SpreadConstraintsTerm;
use ocm_api::wellknown::{topology_key_type, when_unsatisfiable};

use super::filter::DropReason;
use super::prioritize::normalise;
use std::sync::Arc;

use super::snapshot::{ClusterInfo, Name, Topology};
use super::status::Status;

pub const PLUGIN: &str = "SpreadConstraints";
/// The weight of the spread benefit against the prioritizer totals (the maximum weight).
pub(crate) const SPREAD_WEIGHT: i64 = 10;

/// A validated spread constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Constraint {
    pub topology_key: String,
    pub claim: bool,
    pub max_skew: u32,
    pub hard: bool,
}

impl Constraint {
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} {} (maxSkew {}, {})",
            if self.claim { "claim" } else { "label" },
            self.topology_key,
            self.max_skew,
            if self.hard {
                when_unsatisfiable::DO_NOT_SCHEDULE
            } else {
                when_unsatisfiable::SCHEDULE_ANYWAY
            }
        )
    }
}

pub(crate) fn constraints(terms: &[SpreadConstraintsTerm]) -> Result<Vec<Constraint>, Status> {
    if terms.len() > 8 {
        return Err(Status::misconfigured(
            PLUGIN,
            "at most 8 spreadConstraints are allowed",
        ));
    }
    terms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let bad =
                |m: String| Status::misconfigured(PLUGIN, format!("spreadConstraints[{i}]: {m}"));
            if t.topology_key.is_empty() {
                return Err(bad("topologyKey is required".into()));
            }
            let claim = match t.topology_key_type.as_str() {
                topology_key_type::LABEL => false,
                topology_key_type::CLAIM => true,
                other => {
                    return Err(bad(format!(
                        "topologyKeyType must be Label or Claim, not {other:?}"
                    )));
                }
            };
            let hard = match t.when_unsatisfiable.as_str() {
                "" | when_unsatisfiable::SCHEDULE_ANYWAY => false,
                when_unsatisfiable::DO_NOT_SCHEDULE => true,
                other => {
                    return Err(bad(format!(
                        "whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway, not {other:?}"
                    )));
                }
            };
            let max_skew = u32::try_from(t.max_skew)
                .ok()
                .filter(|s| *s >= 1)
                .ok_or_else(|| bad(format!("maxSkew must be at least 1, not {}", t.max_skew)))?;
            Ok(Constraint {
                topology_key: t.topology_key.clone(),
                claim,
                max_skew,
                hard,
            })
        })
        .collect()
}

/// Drops the clusters a `DoNotSchedule` constraint can never place (no topology value).
pub(crate) fn missing_key(
    constraints: &[Constraint],
    topologies: &[Arc<Topology>],
    cluster: &ClusterInfo,
) -> Option<DropReason> {
    constraints
        .iter()
        .zip(topologies)
        .find(|(c, t)| {
            c.hard
                && t.domain_of_slot
                    .get(cluster.slot)
                    .is_none_or(|d| *d == Topology::NONE)
        })
        .map(|(c, _)| DropReason::MissingTopologyKey(c.topology_key.clone()))
}

/// The top `n` candidate indices by (total desc, name asc). Candidates are in name order.
pub(crate) fn top_n(totals: &[i64], n: usize) -> Vec<usize> {
    let key = |&i: &usize| (std::cmp::Reverse(totals[i]), i);
    let mut idx: Vec<usize> = (0..totals.len()).collect();
    if n < idx.len() {
        if n == 0 {
            return Vec::new();
        }
        idx.select_nth_unstable_by_key(n - 1, key);
        idx.truncate(n);
    }
    idx.sort_unstable_by_key(key);
    idx
}

/// One pick of the spread selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub cluster: Name,
    /// The normalised spread benefit in [-100, 100] at the time of the pick.
    pub benefit: i64,
    pub total: i64,
}

/// What the spread selection did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpreadReport {
    pub constraints: Vec<String>,
    pub picks: Vec<Pick>,
    /// Per constraint: domain -> clusters chosen in it.
    pub domains: Vec<BTreeMap<String, u32>>,
    /// Why selection stopped before `numberOfClusters`, when a constraint refused every cluster.
    pub stopped: Option<String>,
}

/// What the spread selection ranks candidates by.
#[derive(Clone, Copy)]
pub(crate) struct Ranking<'a> {
    /// The prioritizer totals (what the report shows).
    pub totals: &'a [i64],
    /// What selection weighs: the totals, or the totals scaled by `scale` with bonuses
    /// (the stability controls' incumbents, see `crate::stability`).
    pub keys: &'a [i64],
    /// How many key units a total unit is: the spread benefit scales with it.
    pub scale: i64,
}

/// Selects up to `n` candidates one at a time. Returns candidate indices in pick order.
pub(crate) fn spread(
    constraints: &[Constraint],
    topologies: &[Arc<Topology>],
    candidates: &[&ClusterInfo],
    ranking: Ranking<'_>,
    n: usize,
) -> (Vec<usize>, SpreadReport) {
    let mut round = Rounds::new(constraints, topologies, candidates, ranking.keys);
    let mut picked = Vec::new();
    let mut report = SpreadReport {
        constraints: constraints.iter().map(Constraint::describe).collect(),
        ..SpreadReport::default()
    };
    while picked.len() < n {
        let open = round.open();
        if open.is_empty() {
            if round.any_left() {
                report.stopped = Some(round.why_stopped());
            }
            break;
        }
        let Some((benefit, cand, g)) = best(&open, ranking) else {
            break;
        };
        round.pick(g);
        picked.push(cand);
        report.picks.push(Pick {
            cluster: candidates[cand].name.clone(),
            benefit,
            total: ranking.totals[cand],
        });
    }
    report.domains = round.domains();
    (picked, report)
}

/// A domain id per constraint (at most 8), [`Topology::NONE`] where a cluster lacks the key.
type Tuple = [u32; 8];

/// Candidates that share a tuple of domains: within such a group the spread benefit is the
/// same, so only its best remaining member (its head) can win a round.
struct Bucket {
    tuple: Tuple,
    /// Candidate indices, best key first (then lower index).
    members: Vec<usize>,
    /// How many members were picked.
    head: usize,
}

/// A bucket's head that a round may pick: (raw benefit, candidate, bucket).
type Open = (i128, usize, usize);

/// The state of the spread selection between rounds.
struct Rounds<'c> {
    constraints: &'c [Constraint],
    groups: Vec<Bucket>,
    /// Per constraint: domain names by id.
    domain_names: Vec<Vec<&'c str>>,
    /// Per constraint and domain: whether some candidate is in it. Only those count (for the
    /// minimum, as PodTopologySpread).
    present: Vec<Vec<bool>>,
    /// Per constraint and domain: clusters chosen in it so far.
    counts: Vec<Vec<u32>>,
}

impl<'c> Rounds<'c> {
    fn new(
        constraints: &'c [Constraint],
        topologies: &'c [Arc<Topology>],
        candidates: &[&ClusterInfo],
        keys: &[i64],
    ) -> Self {
        let mut groups = group_candidates(topologies, candidates, constraints.len());
        for g in &mut groups {
            g.members.sort_by_key(|&i| (std::cmp::Reverse(keys[i]), i));
        }
        let domain_names: Vec<Vec<&str>> = topologies
            .iter()
            .map(|t| t.domains.iter().map(String::as_str).collect())
            .collect();
        let mut present: Vec<Vec<bool>> = topologies
            .iter()
            .map(|t| vec![false; t.domains.len()])
            .collect();
        for g in &groups {
            for (t, d) in g.tuple.iter().take(constraints.len()).enumerate() {
                if *d != Topology::NONE {
                    present[t][*d as usize] = true;
                }
            }
        }
        let counts = domain_names.iter().map(|d| vec![0; d.len()]).collect();
        Rounds {
            constraints,
            groups,
            domain_names,
            present,
            counts,
        }
    }

    /// The fewest and most clusters chosen in a domain of constraint `t` that counts.
    fn bounds(&self, t: usize) -> (u32, u32) {
        let live = self.counts[t]
            .iter()
            .zip(&self.present[t])
            .filter(|(_, p)| **p)
            .map(|(c, _)| *c);
        (live.clone().min().unwrap_or(0), live.max().unwrap_or(0))
    }

    /// The heads no `DoNotSchedule` constraint refuses, each with its raw benefit: per
    /// constraint 100 for the emptiest domain down to −100 for the fullest (−100 without the
    /// key), combined lexicographically, earlier constraints first.
    fn open(&self) -> Vec<Open> {
        let bounds: Vec<(u32, u32)> = (0..self.constraints.len())
            .map(|t| self.bounds(t))
            .collect();
        self.groups
            .iter()
            .enumerate()
            .filter_map(|(g, group)| {
                let cand = *group.members.get(group.head)?;
                let raw = self.raw_benefit(&group.tuple, &bounds)?;
                Some((raw, cand, g))
            })
            .collect()
    }

    /// `None` when a `DoNotSchedule` constraint refuses the tuple: its domain would exceed
    /// `maxSkew` (PodTopologySpread's `count + 1 − min > maxSkew`).
    fn raw_benefit(&self, tuple: &Tuple, bounds: &[(u32, u32)]) -> Option<i128> {
        let mut raw: i128 = 0;
        let mut blocked = false;
        for (t, con) in self.constraints.iter().enumerate() {
            let (min, max) = bounds[t];
            let s: i64 = match tuple[t] {
                Topology::NONE => -100,
                d => {
                    let count = self.counts[t][d as usize];
                    if con.hard && count + 1 - min > con.max_skew {
                        blocked = true;
                    }
                    if max == min {
                        100
                    } else {
                        100 - 200 * i64::from(count - min) / i64::from(max - min)
                    }
                }
            };
            raw = raw * 201 + i128::from(s + 100);
        }
        (!blocked).then_some(raw)
    }

    fn any_left(&self) -> bool {
        self.groups.iter().any(|g| g.head < g.members.len())
    }

    /// Why selection stopped while candidates were left: each `DoNotSchedule` constraint
    /// with its domains' counts.
    fn why_stopped(&self) -> String {
        let why: Vec<String> = self
            .constraints
            .iter()
            .enumerate()
            .filter(|(_, c)| c.hard)
            .map(|(t, c)| {
                let domains =
                    domain_summary(&self.domain_names[t], &self.counts[t], &self.present[t]);
                format!("{}: {domains}", c.describe())
            })
            .collect();
        format!(
            "spread constraints allow no more clusters ({})",
            why.join("; ")
        )
    }

    /// Takes group `g`'s head: its domains count one more.
    fn pick(&mut self, g: usize) {
        let k = self.constraints.len();
        let group = &mut self.groups[g];
        group.head += 1;
        for (t, d) in group.tuple.iter().take(k).enumerate() {
            if *d != Topology::NONE {
                self.counts[t][*d as usize] += 1;
            }
        }
    }

    /// Per constraint: each domain some candidate is in, with the clusters chosen in it.
    fn domains(&self) -> Vec<BTreeMap<String, u32>> {
        (0..self.constraints.len())
            .map(|t| {
                self.domain_names[t]
                    .iter()
                    .zip(&self.counts[t])
                    .zip(&self.present[t])
                    .filter(|(_, p)| **p)
                    .map(|((n, c), _)| ((*n).to_owned(), *c))
                    .collect()
            })
            .collect()
    }
}

/// The candidates grouped by their tuple of domains over the first `k` topologies, groups in
/// the order of their first member.
fn group_candidates(
    topologies: &[Arc<Topology>],
    candidates: &[&ClusterInfo],
    k: usize,
) -> Vec<Bucket> {
    let domain = |t: usize, c: &ClusterInfo| {
        topologies[t]
            .domain_of_slot
            .get(c.slot)
            .copied()
            .unwrap_or(Topology::NONE)
    };
    let mut groups: Vec<Bucket> = Vec::new();
    if k == 1 {
        // One constraint: the domain id is the group (no hashing).
        let mut group_of: Vec<Option<usize>> = vec![None; topologies[0].domains.len() + 1];
        for (i, c) in candidates.iter().enumerate() {
            let d = domain(0, c);
            let slot = if d == Topology::NONE {
                group_of.len() - 1
            } else {
                d as usize
            };
            let g = *group_of[slot].get_or_insert_with(|| {
                let mut tuple = [Topology::NONE; 8];
                tuple[0] = d;
                new_group(&mut groups, tuple)
            });
            groups[g].members.push(i);
        }
    } else {
        let mut group_of: HashMap<Tuple, usize> = HashMap::new();
        for (i, c) in candidates.iter().enumerate() {
            let mut tuple = [Topology::NONE; 8];
            for (t, slot) in tuple.iter_mut().enumerate().take(k) {
                *slot = domain(t, c);
            }
            let g = *group_of
                .entry(tuple)
                .or_insert_with(|| new_group(&mut groups, tuple));
            groups[g].members.push(i);
        }
    }
    groups
}

fn new_group(groups: &mut Vec<Bucket>, tuple: Tuple) -> usize {
    groups.push(Bucket {
        tuple,
        members: Vec::new(),
        head: 0,
    });
    groups.len() - 1
}

/// The open head with the highest `SPREAD_WEIGHT × scale × benefit + key` (then the lower
/// index), with its benefit normalised to [−100, 100] over the open heads.
fn best(open: &[Open], ranking: Ranking<'_>) -> Option<(i64, usize, usize)> {
    let (lo, hi) = open
        .iter()
        .fold((i128::MAX, i128::MIN), |(lo, hi), (r, _, _)| {
            (lo.min(*r), hi.max(*r))
        });
    open.iter()
        .map(|(raw, cand, g)| {
            let benefit = if hi == lo {
                0
            } else {
                normalise(*raw as f64, lo as f64, hi as f64)
            };
            (benefit, *cand, *g)
        })
        .max_by_key(|&(benefit, cand, _)| {
            (
                SPREAD_WEIGHT * ranking.scale * benefit + ranking.keys[cand],
                std::cmp::Reverse(cand),
            )
        })
}

fn domain_summary(names: &[&str], counts: &[u32], present: &[bool]) -> String {
    let mut pairs: Vec<(&str, u32)> = names
        .iter()
        .copied()
        .zip(counts.iter().copied())
        .zip(present)
        .filter(|(_, p)| **p)
        .map(|(x, _)| x)
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(n, c)| format!("{n}={c}"))
        .collect::<Vec<_>>()
        .join(",")
}
