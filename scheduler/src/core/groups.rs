//! Decision groups (seed 003; upstream `generateDecisionGroups`) and their PlacementDecision
//! slices, kept stable across reschedules.
//!
//! For a placement with no decisions yet the layout is exactly upstream's: named groups in
//! spec order (first match claims a cluster), each cut into chunks of `clustersPerDecisionGroup`
//! in name order, then the rest in unnamed chunks; every group split into objects of at most
//! 100 clusters named `<placement>-decision-<k>`, k counting from 1 across groups.
//!
//! Upstream recomputes that layout on every pass, so one cluster joining can shift others
//! into other groups and objects. Here a cluster that stays selected keeps its group and its
//! PlacementDecision for as long as it still belongs to that group's class (the named group
//! whose selector it matches first, or the unnamed rest) and the group is not over its size:
//! - newcomers fill the class's groups that have room, the most recent group first (seed
//!   003's "special case handling"), then open new groups;
//! - inside a group, newcomers fill its objects that have room, then new objects take the
//!   lowest free `k`;
//! - a group that shrinks to nothing disappears and the later groups' indices move down;
//! - when `clustersPerDecisionGroup` shrinks, a group keeps its first clusters by name and the
//!   rest are placed again as newcomers.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ocm_api::PlacementDecision;
use ocm_api::cluster::v1beta1::GroupStrategy;
use ocm_api::selector::Selector;
use ocm_api::wellknown::{label, limits::MAX_DECISIONS_PER_OBJECT};

use super::snapshot::{ClusterInfo, Name, decision_entries};
use super::status::Status;

/// One decision group and the PlacementDecision objects holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub index: usize,
    /// The `groupName`, or "" for the unnamed rest.
    pub name: String,
    pub slices: Vec<Slice>,
}

impl Group {
    pub fn cluster_count(&self) -> usize {
        self.slices.iter().map(|s| s.clusters.len()).sum()
    }
}

/// One PlacementDecision's clusters, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub name: String,
    pub clusters: Vec<Name>,
}

/// Upstream's `calculateLength`: a count or a percentage (rounded up) of `total`; anything
/// out of (0, total] means `total`.
pub fn group_length(value: Option<&IntOrString>, total: usize) -> Result<usize, Status> {
    let length: i64 = match value {
        None => 0,
        Some(IntOrString::Int(n)) => i64::from(*n),
        Some(IntOrString::String(s)) => {
            let bad = || {
                Status::misconfigured("", format!("{s} invalid type: string is not a percentage"))
            };
            let pct = s.strip_suffix('%').ok_or_else(bad)?;
            let f: f64 = pct.parse().map_err(|_| bad())?;
            (f / 100.0 * total as f64).ceil() as i64
        }
    };
    Ok(match usize::try_from(length) {
        Ok(l) if l > 0 && l <= total => l,
        _ => total,
    })
}

/// Where a cluster was before this pass.
struct Previous {
    group: i64,
    decision: String,
}

/// The `k` of `<placement>-decision-<k>`, if the name has that shape.
pub fn decision_number(placement: &str, name: &str) -> Option<u32> {
    let k = name.strip_prefix(placement)?.strip_prefix("-decision-")?;
    if k.starts_with('0') || k.starts_with('+') {
        return None;
    }
    k.parse().ok().filter(|k| *k >= 1)
}

pub fn decision_name(placement: &str, k: u32) -> String {
    format!("{placement}-decision-{k}")
}

/// Builds the groups for `selected` (any order), keeping what `existing` (this placement's
/// current PlacementDecisions) already says where it can.
///
/// A bad `clustersPerDecisionGroup` yields no groups at all. A bad group selector yields the
/// groups of the named groups before it and nothing else (upstream returns what it has built
/// when it meets the bad selector); either way the status says what is wrong.
pub fn build(
    placement: &str,
    strategy: &GroupStrategy,
    selected: &[&ClusterInfo],
    existing: &[&PlacementDecision],
) -> (Vec<Group>, Option<Status>) {
    let total = selected.len();
    let length = match group_length(strategy.clusters_per_decision_group.as_ref(), total) {
        Ok(l) => l,
        Err(st) => return (Vec::new(), Some(st)),
    };
    let mut named = Vec::with_capacity(strategy.decision_groups.len());
    let mut broken: Option<Status> = None;
    for g in &strategy.decision_groups {
        let s = &g.group_cluster_selector;
        let selectors = Selector::from_label_selector(&s.label_selector).and_then(|labels| {
            Ok((
                labels,
                Selector::from_requirements(&s.claim_selector.match_expressions)?,
            ))
        });
        match selectors {
            Ok((labels, claims)) => named.push((g.group_name.as_str(), labels, claims)),
            Err(e) => {
                broken = Some(Status::misconfigured("", e.to_string()));
                break;
            }
        }
    }

    // The previous layout, from objects named like ours with a readable group index.
    let mut previous: HashMap<&str, Previous> = HashMap::new();
    // group index -> (group name, decision names in k order)
    let mut previous_groups: BTreeMap<i64, (String, Vec<(u32, String)>)> = BTreeMap::new();
    let mut sorted_existing: Vec<(u32, &PlacementDecision)> = existing
        .iter()
        .filter_map(|d| Some((decision_number(placement, d.metadata.name.as_deref()?)?, *d)))
        .collect();
    sorted_existing.sort_by_key(|(k, _)| *k);
    for (k, d) in sorted_existing {
        let labels = d.metadata.labels.as_ref();
        let Some(index) = labels
            .and_then(|l| l.get(label::DECISION_GROUP_INDEX))
            .and_then(|v| v.parse::<i64>().ok())
        else {
            continue;
        };
        let name = labels
            .and_then(|l| l.get(label::DECISION_GROUP_NAME))
            .cloned()
            .unwrap_or_default();
        let decision = decision_name(placement, k);
        let entry = previous_groups
            .entry(index)
            .or_insert_with(|| (name.clone(), Vec::new()));
        if entry.0 != name {
            continue; // two objects disagree on the group's name: trust the first
        }
        entry.1.push((k, decision.clone()));
        for e in decision_entries(d).take(MAX_DECISIONS_PER_OBJECT) {
            previous.entry(e.cluster_name.as_str()).or_insert(Previous {
                group: index,
                decision: decision.clone(),
            });
        }
    }

    // Classes: named groups in spec order (first match wins), then the unnamed rest.
    let mut classes: Vec<Vec<&ClusterInfo>> = vec![Vec::new(); named.len() + 1];
    let class_count = if broken.is_some() {
        named.len()
    } else {
        named.len() + 1
    };
    let mut ordered: Vec<&ClusterInfo> = selected.to_vec();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    for c in ordered {
        let class = named
            .iter()
            .position(|(_, l, cl)| l.matches(c.labels()) && cl.matches(&c.claims))
            .unwrap_or(named.len());
        classes[class].push(c);
    }

    struct Building {
        name: String,
        /// decision name -> clusters (None for objects to be named later)
        slices: Vec<(Option<String>, Vec<Name>)>,
        count: usize,
    }
    let mut built: Vec<Building> = Vec::new();
    let mut claimed_groups: HashSet<i64> = HashSet::new();
    for (class, members) in classes.iter().enumerate().take(class_count) {
        let class_name = named.get(class).map_or("", |(n, _, _)| *n);
        // This class's previous groups, in index order.
        let mut mine: Vec<(i64, Building)> = previous_groups
            .iter()
            .filter(|(i, (n, _))| n == class_name && !claimed_groups.contains(i))
            .map(|(i, (n, ds))| {
                (
                    *i,
                    Building {
                        name: n.clone(),
                        slices: ds
                            .iter()
                            .map(|(_, d)| (Some(d.clone()), Vec::new()))
                            .collect(),
                        count: 0,
                    },
                )
            })
            .collect();
        let mut newcomers: Vec<&ClusterInfo> = Vec::new();
        for c in members {
            let home = previous.get(&*c.name).and_then(|p| {
                let g = mine.iter_mut().find(|(i, _)| *i == p.group)?;
                let s =
                    g.1.slices
                        .iter_mut()
                        .find(|(d, _)| d.as_deref() == Some(p.decision.as_str()))?;
                Some((g.1.count < length).then_some(()).map(|_| {
                    s.1.push(c.name.clone());
                    g.1.count += 1;
                }))
            });
            if !matches!(home, Some(Some(()))) {
                newcomers.push(c);
            }
        }
        for (i, g) in &mine {
            if g.count > 0 {
                claimed_groups.insert(*i);
            }
        }
        let mut groups: Vec<Building> = mine
            .into_iter()
            .map(|(_, g)| g)
            .filter(|g| g.count > 0)
            .collect();
        let mut newcomers = newcomers.into_iter().peekable();
        // Fill groups with room, most recent first.
        for g in groups.iter_mut().rev() {
            while g.count < length {
                let Some(c) = newcomers.next() else { break };
                place(&mut g.slices, c.name.clone());
                g.count += 1;
            }
        }
        // Then new groups.
        while newcomers.peek().is_some() {
            let mut g = Building {
                name: class_name.to_owned(),
                slices: Vec::new(),
                count: 0,
            };
            while g.count < length {
                let Some(c) = newcomers.next() else { break };
                place(&mut g.slices, c.name.clone());
                g.count += 1;
            }
            groups.push(g);
        }
        built.extend(groups);
    }
    if built.is_empty() && broken.is_none() {
        built.push(Building {
            name: String::new(),
            slices: Vec::new(),
            count: 0,
        });
    }

    // Name the objects: kept ones keep their names, new ones take the lowest free k.
    let mut used: HashSet<String> = HashSet::new();
    for g in &mut built {
        g.slices.retain(|(d, cs)| d.is_none() || !cs.is_empty());
        if g.slices.is_empty() {
            g.slices.push((None, Vec::new()));
        }
        for (d, _) in &g.slices {
            if let Some(d) = d {
                used.insert(d.clone());
            }
        }
    }
    let mut next = 1u32;
    let mut groups = Vec::with_capacity(built.len());
    for (index, g) in built.into_iter().enumerate() {
        let mut slices = Vec::with_capacity(g.slices.len());
        for (d, mut clusters) in g.slices {
            let name = match d {
                Some(d) => d,
                None => loop {
                    let candidate = decision_name(placement, next);
                    next += 1;
                    if used.insert(candidate.clone()) {
                        break candidate;
                    }
                },
            };
            clusters.sort();
            slices.push(Slice { name, clusters });
        }
        groups.push(Group {
            index,
            name: g.name,
            slices,
        });
    }
    (groups, broken)
}

/// Puts a cluster in the first object with room, or a new one.
fn place(slices: &mut Vec<(Option<String>, Vec<Name>)>, cluster: Name) {
    match slices
        .iter_mut()
        .find(|(_, cs)| cs.len() < MAX_DECISIONS_PER_OBJECT)
    {
        Some((_, cs)) => cs.push(cluster),
        None => slices.push((None, vec![cluster])),
    }
}
