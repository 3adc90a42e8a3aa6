//! From groups to writes: the PlacementDecision objects that should exist, the ordered writes
//! that get there without a kept cluster ever vanishing, and the events for each write.
//!
//! Upstream writes the objects one after another, so a cluster moving between objects can be
//! in none of them for a moment (`open-cluster-management-io/ocm#1346`). Here a write that
//! would drop a kept cluster from an object waits until the cluster is in its new object. When
//! objects wait on each other in a cycle, one of them first grows to hold both its old and new
//! clusters (if that fits in 100), or, failing that, the clusters in transit are parked in a
//! temporary object that is deleted at the end.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use ocm_api::cluster::v1beta1::PlacementDecisionStatus;
use ocm_api::wellknown::{
    label, limits::MAX_DECISIONS_PER_OBJECT, placement_condition as pc, placement_event as ev,
};
use ocm_api::{ClusterDecision, Placement, PlacementDecision, PlacementStatus};

use super::groups::{Group, decision_name, decision_number};
use super::snapshot::decision_entries;

/// Decision entries for cluster names (no score: intermediate and parking objects).
fn entries<'a>(names: impl IntoIterator<Item = &'a String>) -> Vec<ClusterDecision> {
    names
        .into_iter()
        .map(|c| ClusterDecision {
            cluster_name: c.clone(),
            reason: String::new(),
            score: 0,
        })
        .collect()
}

/// Equal decisions, a missing status counting as an empty one (upstream's semantic DeepEqual
/// treats a nil and an empty list alike).
fn same_status(a: &PlacementDecision, b: &PlacementDecision) -> bool {
    decision_entries(a).eq(decision_entries(b))
}

/// One write to the hub, in the order planned.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Create the object (labels, owner), then write its status (a subresource: the apiserver
    /// drops status sent with a create).
    Create(Box<PlacementDecision>),
    Status {
        name: String,
        status: PlacementDecisionStatus,
    },
    Labels {
        name: String,
        labels: BTreeMap<String, String>,
    },
    /// Set these annotations (ours; others on the object stay).
    Annotations {
        name: String,
        annotations: BTreeMap<String, String>,
    },
    Delete {
        name: String,
    },
}

impl Write {
    pub fn decision_name(&self) -> &str {
        match self {
            Write::Create(d) => d.metadata.name.as_deref().unwrap_or_default(),
            Write::Status { name, .. }
            | Write::Labels { name, .. }
            | Write::Annotations { name, .. }
            | Write::Delete { name } => name,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An event about the Placement, related to one PlacementDecision (none when `decision` is
/// empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub type_: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    pub decision: String,
}

/// A write and the events to emit once it succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedWrite {
    pub write: Write,
    pub events: Vec<Event>,
}

/// What the events say about a status write.
pub(crate) struct EventContext<'a> {
    pub placement: &'a str,
    pub namespace: &'a str,
    /// `Some((message, plugin))` when the schedule ended with a Warning.
    pub warning: Option<(&'a str, &'a str)>,
    /// The ScoreUpdate note, `None` without scores.
    pub score_note: Option<String>,
}

/// The ScoreUpdate note: `<cluster>:<total> ` for every cluster in name order, cut before
/// 1000 characters with `......`, as upstream's `createOrUpdatePlacementDecision` cuts it.
pub(crate) fn score_note<'a>(totals: impl Iterator<Item = (&'a str, i64)>) -> Option<String> {
    const MAX: usize = 1000;
    let mut note = String::new();
    let mut any = false;
    for (name, total) in totals {
        any = true;
        let piece = format!("{name}:{total} ");
        if note.len() + piece.len() > MAX {
            note.push_str("......");
            break;
        }
        note.push_str(&piece);
    }
    any.then_some(note)
}

/// The `DecisionHeld` event about the moves the stability controls hold (`None` when they
/// hold none): `held by the stability controls (<policy>): <incoming> would replace
/// <outgoing>: <reason>; ...`, cut before 1000 characters with `......`.
pub fn held_event(policy: &str, held: &[super::HeldMove]) -> Option<Event> {
    const MAX: usize = 1000;
    if held.is_empty() {
        return None;
    }
    let mut note = format!("held by the stability controls ({policy}): ");
    for (i, h) in held.iter().enumerate() {
        let piece = format!("{}{h}", if i == 0 { "" } else { "; " });
        if note.len() + piece.len() > MAX {
            note.push_str("......");
            break;
        }
        note.push_str(&piece);
    }
    Some(Event {
        type_: EventType::Normal,
        reason: ev::DECISION_HELD,
        action: ev::DECISION_HELD_ACTION,
        note,
        decision: String::new(),
    })
}

/// The `ScoreValidityCapped` Warning about `capped`, the scores the validity bound has ended
/// (not related to a decision), `None` when there are none. Its note lists each score as
/// `<cluster>/<score> (validUntil <t>) counts until <t>`, cut before 1000 characters with
/// `......` like the ScoreUpdate note.
pub fn validity_capped_event(capped: &[super::CappedScore]) -> Option<Event> {
    const MAX: usize = 1000;
    if capped.is_empty() {
        return None;
    }
    let mut note = String::from(
        "scores ended by the scheduler's bound (--max-score-validity) before their validUntil: ",
    );
    for (i, c) in capped.iter().enumerate() {
        let piece = format!("{}{c}", if i == 0 { "" } else { "; " });
        if note.len() + piece.len() > MAX {
            note.push_str("......");
            break;
        }
        note.push_str(&piece);
    }
    Some(Event {
        type_: EventType::Warning,
        reason: ev::SCORE_VALIDITY_CAPPED,
        action: ev::SCORE_VALIDITY_CAPPED_ACTION,
        note,
        decision: String::new(),
    })
}

/// The Warning for a pass a limit stopped (`CELBudgetExceeded`, `ListLimitExceeded`), when
/// `outcome`'s `PlacementSatisfied` differs from the one in `previous` (once per change, not at
/// every pass).
pub fn limit_event(previous: Option<&PlacementStatus>, outcome: &super::Outcome) -> Option<Event> {
    let super::Code::Exceeded(limit) = outcome.status.code else {
        return None;
    };
    let satisfied = |s: Option<&PlacementStatus>| {
        s?.conditions
            .iter()
            .find(|c| c.type_ == pc::SATISFIED)
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    (satisfied(previous) != satisfied(Some(&outcome.placement_status))).then(|| Event {
        type_: EventType::Warning,
        reason: limit.reason(),
        action: ev::SCHEDULING_SKIPPED_ACTION,
        note: outcome.status.message.clone(),
        decision: String::new(),
    })
}

/// The labels of a decision object of `group`.
pub(crate) fn labels(placement: &str, group: &Group) -> BTreeMap<String, String> {
    BTreeMap::from([
        (label::PLACEMENT.to_owned(), placement.to_owned()),
        (
            label::DECISION_GROUP_INDEX.to_owned(),
            group.index.to_string(),
        ),
        (label::DECISION_GROUP_NAME.to_owned(), group.name.clone()),
    ])
}

/// The controller owner reference to the Placement (only when it has a uid, i.e. was read
/// from a hub).
pub(crate) fn owner(placement: &Placement) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: format!("{}/v1beta1", ocm_api::wellknown::group::CLUSTER),
        kind: "Placement".to_owned(),
        name: placement.metadata.name.clone()?,
        uid: placement.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

pub(crate) fn desired_object(
    placement: &Placement,
    namespace: &str,
    name: &str,
    labels: BTreeMap<String, String>,
    decisions: Vec<ClusterDecision>,
) -> PlacementDecision {
    PlacementDecision {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            owner_references: owner(placement).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Default::default(),
        status: Some(PlacementDecisionStatus { decisions }),
    }
}

fn status_events(ctx: &EventContext<'_>, decision: &str) -> Vec<Event> {
    let base = format!(
        "Decision {decision} is updated with placement {} in namespace {}",
        ctx.placement, ctx.namespace
    );
    let mut out = vec![match ctx.warning {
        Some((message, plugin)) => Event {
            type_: EventType::Warning,
            reason: ev::DECISION_UPDATE,
            action: ev::DECISION_UPDATED,
            note: format!("{base}: {message} in plugin {plugin}"),
            decision: decision.to_owned(),
        },
        None => Event {
            type_: EventType::Normal,
            reason: ev::DECISION_UPDATE,
            action: ev::DECISION_UPDATED,
            note: base,
            decision: decision.to_owned(),
        },
    }];
    if let Some(note) = &ctx.score_note {
        out.push(Event {
            type_: EventType::Normal,
            reason: ev::SCORE_UPDATE,
            action: ev::SCORE_UPDATED,
            note: note.clone(),
            decision: decision.to_owned(),
        });
    }
    out
}

/// The annotations of ours (the stability state) that `desired` sets and `existing` lacks or
/// holds otherwise. One that `desired` does not set is left as it is: nothing to write.
fn ours_to_annotate(
    existing: &PlacementDecision,
    desired: &PlacementDecision,
) -> BTreeMap<String, String> {
    let get = |d: &PlacementDecision, k: &str| {
        d.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
    };
    [crate::stability::STATE_ANNOTATION]
        .into_iter()
        .filter_map(|k| {
            let want = get(desired, k)?;
            (get(existing, k).as_ref() != Some(&want)).then(|| (k.to_owned(), want))
        })
        .collect()
}

/// Plans the writes from the `existing` objects (this placement's, by name) to `desired`.
pub(crate) fn writes(
    placement: &Placement,
    namespace: &str,
    existing: &[&PlacementDecision],
    desired: &[PlacementDecision],
    ctx: &EventContext<'_>,
) -> Vec<PlannedWrite> {
    let mut plan = Planner::new(placement, namespace, existing, desired, ctx);
    let mut pending = plan.pending(desired);
    while !pending.is_empty() {
        if let Some(i) = plan.ready(&pending) {
            plan.final_write(pending.remove(i));
        } else if let Some(i) = plan.growable(&pending) {
            plan.grow(pending[i]);
        } else if !plan.park(pending[0]) {
            break; // cannot happen: the object would have been ready
        }
    }
    plan.delete_leftovers(desired);
    let mut out = plan.out;
    one_event_per_change(&mut out);
    out
}

fn name_of(d: &PlacementDecision) -> String {
    d.metadata.name.clone().unwrap_or_default()
}

fn members(d: &PlacementDecision) -> BTreeSet<String> {
    decision_entries(d)
        .map(|e| e.cluster_name.clone())
        .collect()
}

/// The writes planned so far, and the hub as they leave it.
struct Planner<'a> {
    placement: &'a Placement,
    namespace: &'a str,
    ctx: &'a EventContext<'a>,
    /// The objects before the pass, by name.
    old: BTreeMap<String, &'a PlacementDecision>,
    /// Clusters selected before and after: each must stay in some object throughout.
    kept: BTreeSet<String>,
    /// The hub as the writes leave it: object -> clusters.
    state: BTreeMap<String, BTreeSet<String>>,
    /// Objects grown to hold their old and new clusters at once, to break a cycle.
    grown: BTreeSet<String>,
    /// Temporary objects parking clusters in transit, deleted at the end.
    spills: Vec<String>,
    /// The highest `k` of `<placement>-decision-<k>` in use: a spill takes the next one.
    spill_k: u32,
    out: Vec<PlannedWrite>,
}

impl<'a> Planner<'a> {
    fn new(
        placement: &'a Placement,
        namespace: &'a str,
        existing: &[&'a PlacementDecision],
        desired: &[PlacementDecision],
        ctx: &'a EventContext<'a>,
    ) -> Self {
        let old: BTreeMap<String, &PlacementDecision> =
            existing.iter().map(|d| (name_of(d), *d)).collect();
        let old_all: BTreeSet<String> = old.values().flat_map(|d| members(d)).collect();
        let new_all: BTreeSet<String> = desired.iter().flat_map(members).collect();
        let kept = old_all
            .into_iter()
            .filter(|c| new_all.contains(c))
            .collect();
        let state = old.iter().map(|(n, d)| (n.clone(), members(d))).collect();
        let spill_k = desired
            .iter()
            .chain(old.values().copied())
            .filter_map(|d| decision_number(ctx.placement, d.metadata.name.as_deref()?))
            .max()
            .unwrap_or(0);
        Planner {
            placement,
            namespace,
            ctx,
            old,
            kept,
            state,
            grown: BTreeSet::new(),
            spills: Vec::new(),
            spill_k,
            out: Vec::new(),
        }
    }

    /// The desired objects whose final write is due: new ones, and those whose decisions,
    /// labels or annotations of ours differ from the hub's.
    fn pending<'d>(&self, desired: &'d [PlacementDecision]) -> Vec<&'d PlacementDecision> {
        desired
            .iter()
            .filter(|d| match self.old.get(&name_of(d)) {
                None => true,
                Some(o) => {
                    !same_status(o, d)
                        || o.metadata.labels != d.metadata.labels
                        || !ours_to_annotate(o, d).is_empty()
                }
            })
            .collect()
    }

    /// Whether a cluster is in some object other than `not`.
    fn present_elsewhere(&self, c: &str, not: &str) -> bool {
        self.state.iter().any(|(n, cs)| n != not && cs.contains(c))
    }

    /// The kept clusters `d`'s final write would take out of its object and that are in no
    /// other object yet (none while the object does not exist).
    fn stranded<'s>(&'s self, d: &PlacementDecision) -> impl Iterator<Item = &'s String> + 's {
        let name = name_of(d);
        let target = members(d);
        let current = self.state.get(&name).into_iter().flatten();
        current.filter(move |c| {
            !target.contains(*c) && self.kept.contains(*c) && !self.present_elsewhere(c, &name)
        })
    }

    /// The first pending object whose final write strands no kept cluster.
    fn ready(&self, pending: &[&PlacementDecision]) -> Option<usize> {
        pending
            .iter()
            .position(|d| self.stranded(d).next().is_none())
    }

    /// The object's final write: created, or its status, labels and annotations of ours.
    fn final_write(&mut self, d: &PlacementDecision) {
        let name = name_of(d);
        let grown = self.grown.contains(&name);
        match self.old.get(&name).copied() {
            None if !grown => self.create(d.clone()),
            prev => {
                if grown || prev.is_none_or(|o| !same_status(o, d)) {
                    let decisions = d.status.clone().unwrap_or_default().decisions;
                    self.status_write(&name, decisions);
                }
                // A grown object that did not exist was created with its final labels.
                if let Some(o) = prev {
                    self.relabel(o, d, &name);
                    self.annotate(o, d, &name);
                }
            }
        }
        self.state.insert(name, members(d));
    }

    /// A pending object that may grow to hold its old and new clusters at once (at most
    /// 100), to break a cycle of objects waiting on each other.
    fn growable(&self, pending: &[&PlacementDecision]) -> Option<usize> {
        pending.iter().position(|d| {
            let name = name_of(d);
            !self.grown.contains(&name)
                && self.state.get(&name).map_or(0, |c| c.len()) + members(d).len()
                    <= MAX_DECISIONS_PER_OBJECT
        })
    }

    fn grow(&mut self, d: &PlacementDecision) {
        let name = name_of(d);
        let mut union: BTreeSet<String> = self.state.get(&name).cloned().unwrap_or_default();
        union.extend(members(d));
        let decisions = entries(&union);
        if self.old.contains_key(&name) {
            self.status_write(&name, decisions);
        } else {
            let mut obj = d.clone();
            obj.status = Some(PlacementDecisionStatus { decisions });
            self.create(obj);
        }
        self.grown.insert(name.clone());
        self.state.insert(name, union);
    }

    /// Parks the kept clusters `d`'s final write would strand in new temporary objects;
    /// `false` when there are none.
    fn park(&mut self, d: &PlacementDecision) -> bool {
        let transit: Vec<String> = self.stranded(d).cloned().collect();
        for chunk in transit.chunks(MAX_DECISIONS_PER_OBJECT) {
            self.spill_k = self.spill_k.saturating_add(1);
            let spill = decision_name(self.ctx.placement, self.spill_k);
            let labels = d.metadata.labels.clone().unwrap_or_default();
            let object = desired_object(
                self.placement,
                self.namespace,
                &spill,
                labels,
                entries(chunk),
            );
            self.create(object);
            self.state
                .insert(spill.clone(), chunk.iter().cloned().collect());
            self.spills.push(spill);
        }
        !transit.is_empty()
    }

    /// Leftovers (and parked clusters) go last, once every kept cluster is in its new object.
    fn delete_leftovers(&mut self, desired: &[PlacementDecision]) {
        let wanted: BTreeSet<String> = desired.iter().map(name_of).collect();
        let spills = std::mem::take(&mut self.spills);
        let leftovers = self.old.keys().filter(|n| !wanted.contains(*n)).cloned();
        for name in leftovers.chain(spills) {
            self.out.push(PlannedWrite {
                events: vec![Event {
                    type_: EventType::Normal,
                    reason: ev::DECISION_DELETE,
                    action: ev::DECISION_DELETED,
                    note: format!(
                        "Decision {name} is deleted with placement {} in namespace {}",
                        self.ctx.placement, self.ctx.namespace
                    ),
                    decision: name.clone(),
                }],
                write: Write::Delete { name },
            });
        }
    }

    fn create(&mut self, d: PlacementDecision) {
        let name = name_of(&d);
        let ctx = self.ctx;
        let mut events = vec![Event {
            type_: EventType::Normal,
            reason: ev::DECISION_CREATE,
            action: ev::DECISION_CREATED,
            note: format!(
                "Decision {name} is created with placement {} in namespace {}",
                ctx.placement, ctx.namespace
            ),
            decision: name.clone(),
        }];
        // Creating an object and filling its status is one change: DecisionCreate says it
        // (upstream adds DecisionUpdate and ScoreUpdate for the status write that completes
        // the create). Only a Warning is still said, as upstream's Warning DecisionUpdate: it
        // is news (expired scores) that DecisionCreate does not carry. An empty status is not
        // written at all (the apiserver already holds one).
        if decision_entries(&d).next().is_some() && ctx.warning.is_some() {
            events.extend(
                status_events(ctx, &name)
                    .into_iter()
                    .filter(|e| e.reason == ev::DECISION_UPDATE),
            );
        }
        self.out.push(PlannedWrite {
            write: Write::Create(Box::new(d)),
            events,
        });
    }

    fn status_write(&mut self, name: &str, decisions: Vec<ClusterDecision>) {
        // Only the scores (or their order) change: the decision itself did not, so no
        // DecisionUpdate (but a Warning still says its news); ScoreUpdate says it.
        let scores_only = self.old.get(name).is_some_and(|o| {
            members(o) == decisions.iter().map(|e| e.cluster_name.clone()).collect()
        });
        let mut events = status_events(self.ctx, name);
        if scores_only {
            events.retain(|e| e.reason != ev::DECISION_UPDATE || e.type_ == EventType::Warning);
        }
        self.out.push(PlannedWrite {
            write: Write::Status {
                name: name.to_owned(),
                status: PlacementDecisionStatus { decisions },
            },
            events,
        });
    }

    fn relabel(&mut self, old: &PlacementDecision, d: &PlacementDecision, name: &str) {
        if old.metadata.labels == d.metadata.labels {
            return;
        }
        self.out.push(PlannedWrite {
            write: Write::Labels {
                name: name.to_owned(),
                labels: d.metadata.labels.clone().unwrap_or_default(),
            },
            events: Vec::new(),
        });
    }

    fn annotate(&mut self, old: &PlacementDecision, d: &PlacementDecision, name: &str) {
        let annotations = ours_to_annotate(old, d);
        if annotations.is_empty() {
            return;
        }
        self.out.push(PlannedWrite {
            write: Write::Annotations {
                name: name.to_owned(),
                annotations,
            },
            events: Vec::new(),
        });
    }
}

/// Keeps one event per real change in a pass's writes:
///
/// - an object created in this pass has its DecisionCreate; the status writes that follow
///   (a cycle grew it, then shrank it to its final clusters) are part of that creation;
/// - an existing object says DecisionUpdate once, however many writes it took to get there;
/// - ScoreUpdate is said once per pass, with the first status write of an existing object
///   (upstream repeats the same placement-wide note for every object it patched), and not
///   in a pass that only created objects (the scores stay visible in the debug endpoint).
fn one_event_per_change(out: &mut [PlannedWrite]) {
    let mut created: BTreeSet<String> = BTreeSet::new();
    let mut updated: BTreeSet<String> = BTreeSet::new();
    let mut scored = false;
    for pw in out.iter_mut() {
        let creating = matches!(pw.write, Write::Create(_));
        let name = pw.write.decision_name().to_owned();
        if creating {
            created.insert(name.clone());
            continue;
        }
        let part_of_create = created.contains(&name);
        pw.events.retain(|e| match e.reason {
            ev::DECISION_UPDATE => !part_of_create && updated.insert(e.decision.clone()),
            ev::SCORE_UPDATE => {
                let keep = !part_of_create && !scored;
                scored |= keep;
                keep
            }
            _ => true,
        });
    }
}

/// The hub's PlacementDecisions as a sequence of writes leaves them: object -> clusters.
#[cfg(test)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Replay(pub BTreeMap<String, BTreeSet<String>>);

#[cfg(test)]
impl Replay {
    pub(crate) fn new(existing: &[&PlacementDecision]) -> Self {
        Self(
            existing
                .iter()
                .map(|d| {
                    let members = decision_entries(d)
                        .map(|e| e.cluster_name.clone())
                        .collect();
                    (d.metadata.name.clone().unwrap_or_default(), members)
                })
                .collect(),
        )
    }

    pub(crate) fn apply(&mut self, write: &Write) {
        let names = |ds: &[ClusterDecision]| ds.iter().map(|e| e.cluster_name.clone()).collect();
        match write {
            Write::Create(d) => {
                let members = d
                    .status
                    .as_ref()
                    .map(|s| names(&s.decisions))
                    .unwrap_or_default();
                self.0.insert(write.decision_name().to_owned(), members);
            }
            Write::Status { name, status } => {
                self.0.insert(name.clone(), names(&status.decisions));
            }
            Write::Labels { .. } | Write::Annotations { .. } => {}
            Write::Delete { name } => {
                self.0.remove(name);
            }
        }
    }

    /// Every cluster in some object.
    pub(crate) fn clusters(&self) -> BTreeSet<String> {
        self.0.values().flatten().cloned().collect()
    }
}

/// Replays `writes` over `existing` and checks that every cluster in both `existing` and the
/// final state is in some object after every write, and no object holds more than 100.
#[cfg(test)]
pub(crate) fn never_drops_kept(
    existing: &[&PlacementDecision],
    writes: &[PlannedWrite],
) -> Result<(), String> {
    let mut state = Replay::new(existing);
    let before = state.clusters();
    let mut states = Vec::with_capacity(writes.len());
    for w in writes {
        state.apply(&w.write);
        if let Some((n, cs)) = state
            .0
            .iter()
            .find(|(_, cs)| cs.len() > MAX_DECISIONS_PER_OBJECT)
        {
            return Err(format!("{n} holds {} clusters", cs.len()));
        }
        states.push(state.clusters());
    }
    let after = states.last().cloned().unwrap_or_else(|| before.clone());
    for (i, s) in states.iter().enumerate() {
        for c in before.intersection(&after) {
            if !s.contains(c) {
                return Err(format!("kept cluster {c} missing after write {i}"));
            }
        }
    }
    Ok(())
}

/// A one-line summary of a write (`create <name>`, `status <name> <n>`, ...), for the tests.
#[cfg(test)]
pub(crate) fn summary(w: &Write) -> String {
    match w {
        Write::Create(_) => format!("create {}", w.decision_name()),
        Write::Status { name, status } => format!("status {name} {}", status.decisions.len()),
        Write::Labels { name, .. } => format!("labels {name}"),
        Write::Annotations { name, .. } => format!("annotations {name}"),
        Write::Delete { name } => format!("delete {name}"),
    }
}
