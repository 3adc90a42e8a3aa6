//! Decision groups (upstream's `generateDecisionGroups`, from the placement-strategy proposal in
//! open-cluster-management-io/enhancements `enhancements/sig-architecture/64-placementStrategy`)
//! and their PlacementDecision slices, kept stable across reschedules.
//!
//! For a placement with no decisions yet the layout is exactly upstream's: named groups in
//! spec order (first match claims a cluster), each cut into chunks of `clustersPerDecisionGroup`
//! in name order, then the rest in unnamed chunks; every group split into objects of at most
//! 100 clusters named `<placement>-decision-<k>`, k counting from 1 across groups.
//!
//! Upstream recomputes that layout on every pass, so one cluster joining can shift others
//! into other groups and objects. Here the previous layout is kept for as long as it still
//! satisfies the spec, and changed as little as possible when it does not.
//!
//! A cluster's class is the named group whose selector it matches first, or the unnamed rest;
//! `size` is `clustersPerDecisionGroup` resolved against the selected count. A layout
//! satisfies the spec when:
//! - every group holds clusters of one class only, and at most `size` of them;
//! - a class with `m` clusters has exactly `ceil(m / size)` groups: no two of its groups
//!   could be merged within the size (upstream's fresh layout has that count too);
//! - groups are numbered 0, 1, ... with the classes in spec order and the unnamed rest last;
//! - a group with `n` clusters is held in exactly `ceil(n / 100)` PlacementDecisions, none
//!   over 100 (objects are filled before new ones are opened).
//!
//! Each pass builds the layout class by class, and inside a group object by object, with one
//! rule at both levels: of the previous containers (the class's previous groups, then the
//! group's previous objects), keep as many as the minimal count allows, the ones holding the
//! most of their current clusters first (lower index or `k` first on ties); a kept group over
//! `size` keeps its first clusters by name. Every other cluster (newcomers, clusters whose
//! class changed or whose container was not kept, the overflow) is placed in name order into
//! the room left: the class's groups most recent first (the proposal's "special case handling"),
//! then new groups; inside a group, its objects in `k` order, then new objects taking the
//! lowest free `k`. Because the kept containers are the fullest and the rest fill room before
//! opening anything, the counts come out minimal; and a layout that already satisfies the spec
//! keeps every container and every cluster, so nothing moves: a cluster leaving only moves
//! others when the class (or group) then needs fewer groups (or objects). Groups are renumbered
//! contiguously in that order, so the later indices move down when one disappears.

use std::cmp::Reverse;
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
    pub(crate) fn cluster_count(&self) -> usize {
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
pub(crate) fn group_length(value: Option<&IntOrString>, total: usize) -> Result<usize, Status> {
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

/// The `k` of `<placement>-decision-<k>`, if the name has that shape.
pub(crate) fn decision_number(placement: &str, name: &str) -> Option<u32> {
    let k = name.strip_prefix(placement)?.strip_prefix("-decision-")?;
    if k.starts_with('0') || k.starts_with('+') {
        return None;
    }
    k.parse().ok().filter(|k| *k >= 1)
}

pub(crate) fn decision_name(placement: &str, k: u32) -> String {
    format!("{placement}-decision-{k}")
}

/// The previous layout, read from this placement's PlacementDecisions.
#[derive(Default)]
struct Previous<'a> {
    /// group index -> (group name, its decision names in `k` order)
    groups: BTreeMap<i64, (String, Vec<String>)>,
    /// cluster -> (group index, position of its object in that group's list)
    home: HashMap<&'a str, (i64, usize)>,
}

impl<'a> Previous<'a> {
    /// Objects named like ours with a readable group index; the rest is ignored.
    fn read(placement: &str, existing: &[&'a PlacementDecision]) -> Self {
        let mut prev = Previous::default();
        let mut sorted: Vec<(u32, &PlacementDecision)> = existing
            .iter()
            .filter_map(|d| Some((decision_number(placement, d.metadata.name.as_deref()?)?, *d)))
            .collect();
        sorted.sort_by_key(|(k, _)| *k);
        for (k, d) in sorted {
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
            let entry = prev
                .groups
                .entry(index)
                .or_insert_with(|| (name.clone(), Vec::new()));
            if entry.0 != name {
                continue; // two objects disagree on the group's name: trust the first
            }
            let position = entry.1.len();
            entry.1.push(decision_name(placement, k));
            for e in decision_entries(d).take(MAX_DECISIONS_PER_OBJECT) {
                prev.home
                    .entry(e.cluster_name.as_str())
                    .or_insert((index, position));
            }
        }
        prev
    }
}

/// A group being laid out.
struct Building {
    name: String,
    /// Its objects: a kept name (or `None` for one to be named later) and the clusters kept in it.
    objects: Vec<(Option<String>, Vec<Name>)>,
    /// Clusters joining the group, not yet in an object.
    incoming: Vec<Name>,
}

impl Building {
    fn new(name: &str) -> Self {
        Building {
            name: name.to_owned(),
            objects: Vec::new(),
            incoming: Vec::new(),
        }
    }
    fn count(&self) -> usize {
        self.objects.iter().map(|(_, cs)| cs.len()).sum::<usize>() + self.incoming.len()
    }
}

/// Which of `sizes` (clusters kept per container, in index order) stay: at most `limit`, the
/// fullest first, lower index first on ties; never an empty one.
fn keep_fullest(sizes: &[usize], limit: usize) -> Vec<bool> {
    let mut order: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 0).collect();
    order.sort_by_key(|&i| (Reverse(sizes[i]), i));
    let mut kept = vec![false; sizes.len()];
    for i in order.into_iter().take(limit) {
        kept[i] = true;
    }
    kept
}

/// One class's groups: the previous groups worth keeping, then the rest placed into room.
/// `members` are in name order; `claimed` holds the previous groups another class kept.
fn layout_class(
    class_name: &str,
    members: &[&ClusterInfo],
    size: usize,
    prev: &Previous<'_>,
    claimed: &mut HashSet<i64>,
) -> Vec<Building> {
    let mut candidates: Vec<(i64, Building)> = prev
        .groups
        .iter()
        .filter(|(i, (n, _))| n == class_name && !claimed.contains(i))
        .map(|(i, (n, ds))| {
            let mut b = Building::new(n);
            b.objects = ds.iter().map(|d| (Some(d.clone()), Vec::new())).collect();
            (*i, b)
        })
        .collect();
    let mut rest: Vec<Name> = Vec::new();
    for c in members {
        let home = prev.home.get(&*c.name).and_then(|(group, object)| {
            let (_, b) = candidates.iter_mut().find(|(i, _)| i == group)?;
            (b.count() < size).then_some((b, *object))
        });
        match home {
            Some((b, object)) => b.objects[object].1.push(c.name.clone()),
            None => rest.push(c.name.clone()),
        }
    }

    let sizes: Vec<usize> = candidates.iter().map(|(_, b)| b.count()).collect();
    let keep = keep_fullest(&sizes, members.len().div_ceil(size.max(1)));
    let mut groups = Vec::new();
    for ((i, b), keep) in candidates.into_iter().zip(keep) {
        if keep {
            claimed.insert(i);
            groups.push(b);
        } else {
            rest.extend(b.objects.into_iter().flat_map(|(_, cs)| cs));
        }
    }
    rest.sort();

    let mut rest = rest.into_iter().peekable();
    for b in groups.iter_mut().rev() {
        while b.count() < size {
            let Some(c) = rest.next() else { break };
            b.incoming.push(c);
        }
    }
    while rest.peek().is_some() {
        let mut b = Building::new(class_name);
        b.incoming.extend(rest.by_ref().take(size));
        groups.push(b);
    }
    groups
}

/// A group's objects: the fullest previous ones its count allows, then the rest placed into
/// room, in name order.
fn settle_objects(b: &mut Building) {
    let needed = b.count().div_ceil(MAX_DECISIONS_PER_OBJECT);
    let sizes: Vec<usize> = b.objects.iter().map(|(_, cs)| cs.len()).collect();
    let keep = keep_fullest(&sizes, needed);
    let mut rest = std::mem::take(&mut b.incoming);
    let mut objects = Vec::with_capacity(needed);
    for (object, keep) in std::mem::take(&mut b.objects).into_iter().zip(keep) {
        if keep {
            objects.push(object);
        } else {
            rest.extend(object.1);
        }
    }
    rest.sort();
    for c in rest {
        place(&mut objects, c);
    }
    b.objects = objects;
}

/// Builds the groups for `selected` (any order), keeping what `existing` (this placement's
/// current PlacementDecisions) already says where the spec allows (see the module header).
///
/// A bad `clustersPerDecisionGroup` yields no groups at all. A bad group selector yields the
/// groups of the named groups before it and nothing else (upstream returns what it has built
/// when it meets the bad selector); either way the status says what is wrong.
pub(crate) fn build(
    placement: &str,
    strategy: &GroupStrategy,
    selected: &[&ClusterInfo],
    existing: &[&PlacementDecision],
) -> (Vec<Group>, Option<Status>) {
    let size = match group_length(
        strategy.clusters_per_decision_group.as_ref(),
        selected.len(),
    ) {
        Ok(l) => l,
        Err(st) => return (Vec::new(), Some(st)),
    };
    let (named, broken) = named_groups(strategy);
    // Without the unnamed rest when a selector is bad: upstream stops at the bad selector.
    let class_count = named.len() + usize::from(broken.is_none());
    let classes = classify(selected, &named);
    let prev = Previous::read(placement, existing);
    let mut claimed: HashSet<i64> = HashSet::new();
    let mut built: Vec<Building> = Vec::new();
    for (class, members) in classes.iter().enumerate().take(class_count) {
        let class_name = named.get(class).map_or("", |g| g.name);
        built.extend(layout_class(class_name, members, size, &prev, &mut claimed));
    }
    // At least one (empty) group, so that a placement that selects nothing has an object
    // saying so (as upstream).
    if built.is_empty() && broken.is_none() {
        built.push(Building::new(""));
    }
    (name_objects(placement, built), broken)
}

/// A named decision group with its selectors.
struct Named<'s> {
    name: &'s str,
    labels: Selector,
    claims: Selector,
}

/// The named groups in spec order, up to the first whose selector is bad (and that one's
/// problem).
fn named_groups(strategy: &GroupStrategy) -> (Vec<Named<'_>>, Option<Status>) {
    let mut named = Vec::with_capacity(strategy.decision_groups.len());
    for g in &strategy.decision_groups {
        let s = &g.group_cluster_selector;
        let selectors = Selector::from_label_selector(&s.label_selector).and_then(|labels| {
            Ok((
                labels,
                Selector::from_requirements(&s.claim_selector.match_expressions)?,
            ))
        });
        match selectors {
            Ok((labels, claims)) => named.push(Named {
                name: g.group_name.as_str(),
                labels,
                claims,
            }),
            Err(e) => return (named, Some(Status::misconfigured("", e.to_string()))),
        }
    }
    (named, None)
}

/// Each cluster's class, in name order: the named group whose selectors it matches first,
/// else the unnamed rest (the last class).
fn classify<'c>(selected: &[&'c ClusterInfo], named: &[Named<'_>]) -> Vec<Vec<&'c ClusterInfo>> {
    let mut classes: Vec<Vec<&ClusterInfo>> = vec![Vec::new(); named.len() + 1];
    let mut ordered: Vec<&ClusterInfo> = selected.to_vec();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    for c in ordered {
        let class = named
            .iter()
            .position(|g| g.labels.matches(c.labels()) && g.claims.matches(&c.claims))
            .unwrap_or(named.len());
        classes[class].push(c);
    }
    classes
}

/// Names the objects: kept ones keep their names, new ones take the lowest free `k`; groups
/// are numbered in order.
fn name_objects(placement: &str, mut built: Vec<Building>) -> Vec<Group> {
    let mut used: HashSet<String> = HashSet::new();
    for b in &mut built {
        settle_objects(b);
        if b.objects.is_empty() {
            b.objects.push((None, Vec::new()));
        }
        used.extend(b.objects.iter().filter_map(|(d, _)| d.clone()));
    }
    let mut next = 1u32;
    let mut groups = Vec::with_capacity(built.len());
    for (index, b) in built.into_iter().enumerate() {
        let mut slices = Vec::with_capacity(b.objects.len());
        for (d, mut clusters) in b.objects {
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
        // In `k` order, as the next pass reads them back (and as upstream numbers them).
        slices.sort_by_key(|s| decision_number(placement, &s.name));
        groups.push(Group {
            index,
            name: b.name,
            slices,
        });
    }
    groups
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
