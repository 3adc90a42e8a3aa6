//! Stability controls (ours; upstream has none): a score-driven placement need not move each
//! time its scores wander. Opt-in, per Placement, in the annotation [`ANNOTATION`] (JSON):
//!
//! ```json
//! {"minScoreGain": 20, "minSelectedDuration": "10m", "maxScoreMovesPerHour": 4}
//! ```
//!
//! - `minScoreGain`: a selected cluster is replaced by an unselected one only when the
//!   newcomer's total (as in `decisions[].score`) exceeds the incumbent's by at least this.
//! - `minSelectedDuration` (`<n>s`, `<n>m` or `<n>h`): a cluster stays selected at least this
//!   long before a score alone may replace it.
//! - `maxScoreMovesPerHour`: at most this many score-driven replacements (one per cluster
//!   replaced) per placement in any hour.
//!
//! They hold back only replacements: a selected cluster that is still feasible giving way to
//! a better-scored one. Everything else applies at once, as without them: a cluster a
//! predicate, taint, clusterset, binding or spread constraint excludes (it is not feasible,
//! so it is no incumbent here), a deleted cluster, more or fewer `numberOfClusters`, groups.
//!
//! How: selection runs on keys in which each incumbent carries a bonus: `minScoreGain` (so a
//! newcomer must beat it by that much, ties to the incumbent), or a pin larger than any
//! total while it is inside `minSelectedDuration` or the hour's budget is spent. The totals
//! the decisions carry are unchanged. What would have moved without the controls and did not
//! is reported as [`HeldMove`]s, each with its reason.
//!
//! The state the time-based controls need (when each cluster was selected, when the last
//! score-driven moves happened) is kept on the hub, in the annotation [`STATE_ANNOTATION`] of
//! the placement's first PlacementDecision, and written only in a pass that selects a new
//! cluster. A restarted scheduler reads it back and decides as the old one would have; a
//! placement at rest costs no write.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use ocm_api::PlacementDecision;
use serde::{Deserialize, Serialize};

use crate::select::SpreadReport;
use crate::snapshot::Name;
use crate::status::Status;

/// The Placement annotation that turns the controls on.
pub const ANNOTATION: &str = "scheduling.ocm-placement.io/stability";
/// The PlacementDecision annotation that keeps their state (ours to write).
pub const STATE_ANNOTATION: &str = "scheduling.ocm-placement.io/stability-state";
pub(crate) const PLUGIN: &str = "Stability";

const HOUR: SignedDuration = SignedDuration::from_hours(1);
/// A bonus larger than any total: prioritizer weights are at most 10 in magnitude and
/// scores at most 100, so a total stays far below this for any list the limits allow.
const PIN: i64 = 1 << 40;
/// The largest `minScoreGain` accepted (it is added to totals; a larger gain means "never").
const MAX_GAIN: i64 = 1 << 30;
/// The longest `minSelectedDuration` accepted.
const MAX_SELECTED_DURATION: SignedDuration = SignedDuration::from_hours(24 * 7);
/// Clusters whose selection time the state keeps at most (the most recent ones): a placement
/// that selects thousands at once would otherwise grow the annotation past what an object
/// holds. A cluster without an entry counts as selected long ago.
const MAX_TRACKED: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicySpec {
    #[serde(default)]
    min_score_gain: Option<i64>,
    #[serde(default)]
    min_selected_duration: Option<String>,
    #[serde(default)]
    max_score_moves_per_hour: Option<u32>,
}

/// A validated stability policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    pub min_score_gain: i64,
    pub min_selected: SignedDuration,
    pub max_moves_per_hour: Option<u32>,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.min_score_gain > 0 {
            parts.push(format!("minScoreGain {}", self.min_score_gain));
        }
        if !self.min_selected.is_zero() {
            parts.push(format!("minSelectedDuration {:#}", self.min_selected));
        }
        if let Some(m) = self.max_moves_per_hour {
            parts.push(format!("maxScoreMovesPerHour {m}"));
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// The Placement's policy: `None` without the annotation; a clear error for a bad one.
pub fn parse(text: Option<&str>) -> Result<Option<Policy>, Status> {
    let Some(text) = text else {
        return Ok(None);
    };
    let bad = |m: String| Status::misconfigured(PLUGIN, format!("annotation {ANNOTATION}: {m}"));
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if !value.is_object() {
        return Err(bad(format!("must be a JSON object, not {text:?}")));
    }
    let spec: PolicySpec = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
    let min_score_gain = spec.min_score_gain.unwrap_or(0);
    if !(0..=MAX_GAIN).contains(&min_score_gain) {
        return Err(bad(format!(
            "minScoreGain must be between 0 and {MAX_GAIN}, not {min_score_gain}"
        )));
    }
    let min_selected = match spec.min_selected_duration.as_deref() {
        None => SignedDuration::ZERO,
        Some(d) => duration(d)
            .filter(|d| *d <= MAX_SELECTED_DURATION)
            .ok_or_else(|| {
                bad(format!(
                    "minSelectedDuration must be <n>s, <n>m or <n>h and at most 168h, not {d:?}"
                ))
            })?,
    };
    Ok(Some(Policy {
        min_score_gain,
        min_selected,
        max_moves_per_hour: spec.max_score_moves_per_hour,
    }))
}

/// `<n>s`, `<n>m` or `<n>h`.
fn duration(text: &str) -> Option<SignedDuration> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    let secs = match unit {
        's' => Some(n),
        'm' => n.checked_mul(60),
        'h' => n.checked_mul(3600),
        _ => None,
    }?;
    Some(SignedDuration::from_secs(secs))
}

/// The controls' state on the hub ([`STATE_ANNOTATION`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct State {
    /// Cluster -> when it was selected, for clusters selected within `minSelectedDuration`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selected_since: BTreeMap<String, Timestamp>,
    /// When each score-driven replacement of the last hour happened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub score_moves: Vec<Timestamp>,
}

impl State {
    /// The state from this placement's PlacementDecisions: the annotation of the lowest
    /// numbered one that carries it. An unreadable one is no state (it only makes the
    /// controls forget, never move anything).
    pub(crate) fn read(existing: &[&PlacementDecision]) -> State {
        raw(existing)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default()
    }

    fn moves_in_hour(&self, now: Timestamp) -> impl Iterator<Item = Timestamp> + '_ {
        self.score_moves
            .iter()
            .copied()
            .filter(move |t| now.duration_since(*t) < HOUR && *t <= now)
    }

    pub(crate) fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The state annotation as the hub holds it: that of the lowest numbered PlacementDecision
/// that carries one.
pub(crate) fn raw<'d>(existing: &[&'d PlacementDecision]) -> Option<&'d str> {
    existing
        .iter()
        .filter_map(|d| {
            let v = d.metadata.annotations.as_ref()?.get(STATE_ANNOTATION)?;
            Some((d.metadata.name.as_deref().unwrap_or_default(), v.as_str()))
        })
        .min_by_key(|(name, _)| (name.len(), *name))
        .map(|(_, v)| v)
}

/// A replacement the controls held back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldMove {
    /// The cluster that would have come in.
    pub incoming: Name,
    /// The selected cluster it would have replaced, kept.
    pub outgoing: Name,
    pub reason: String,
}

impl fmt::Display for HeldMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} would replace {}: {}",
            self.incoming, self.outgoing, self.reason
        )
    }
}

/// Why an incumbent may not be replaced by score at all in this pass.
#[derive(Debug, Clone, Copy)]
enum Pin {
    /// Selected at this time, within `minSelectedDuration`.
    Selected(Timestamp),
    /// The hour's budget is spent.
    Budget,
}

/// What selection with the controls produced.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    pub picked: Vec<usize>,
    pub spread: Option<SpreadReport>,
    pub held: Vec<HeldMove>,
    /// The state to write, when this pass selected a new cluster (`None`: leave it).
    pub state: Option<State>,
    /// When a held move may go ahead on time alone.
    pub requeue_at: Option<Timestamp>,
}

/// A selection run: keys (totals with the incumbents' bonuses), and the factor by which the
/// keys scale the totals (the spread benefit is weighed against totals and must scale too).
pub(crate) type Select<'s> = dyn FnMut(&[i64], i64) -> (Vec<usize>, Option<SpreadReport>) + 's;

/// Selection under `policy`. `names`, `incumbent` (in this placement's decisions) and
/// `totals` are aligned with the feasible clusters; `select` is the placement's selection
/// (top N or spread).
pub(crate) fn select(
    policy: &Policy,
    state: &State,
    names: &[&Name],
    incumbent: &[bool],
    totals: &[i64],
    now: Timestamp,
    select: &mut Select<'_>,
) -> Selection {
    let feasible = Feasible {
        names,
        incumbent,
        totals,
    };
    let (free, _) = select(totals, 1);
    let used = state.moves_in_hour(now).count();
    let budget_left = policy
        .max_moves_per_hour
        .map(|m| (m as usize).saturating_sub(used));
    let mut pins = pins(policy, state, &feasible, budget_left, now);
    let (mut picked, mut spread) = select(&keys(policy, &feasible, &pins), 2);
    if let Some(left) = budget_left
        && replacements(&picked, incumbent) > left
    {
        spend_budget(left, &feasible, &picked, &mut pins);
        (picked, spread) = select(&keys(policy, &feasible, &pins), 2);
    }
    // The score moves of the last hour, this pass's included.
    let moves_after: Vec<Timestamp> = state
        .moves_in_hour(now)
        .chain(std::iter::repeat_n(now, replacements(&picked, incumbent)))
        .collect();
    let (held, requeue_at) =
        held_moves(policy, &feasible, &pins, &free, &picked, &moves_after, now);
    let newcomers: Vec<usize> = picked.iter().copied().filter(|i| !incumbent[*i]).collect();
    let state = (!newcomers.is_empty())
        .then(|| next_state(policy, state, names, &picked, &newcomers, moves_after, now))
        .filter(|next| next != state);
    Selection {
        picked,
        spread,
        held,
        state,
        requeue_at,
    }
}

/// The feasible clusters as the controls see them, aligned.
struct Feasible<'a> {
    names: &'a [&'a Name],
    /// In this placement's decisions.
    incumbent: &'a [bool],
    totals: &'a [i64],
}

/// Each incumbent that may not be replaced by score at all in this pass, and why.
fn pins(
    policy: &Policy,
    state: &State,
    f: &Feasible<'_>,
    budget_left: Option<usize>,
    now: Timestamp,
) -> Vec<Option<Pin>> {
    (0..f.totals.len())
        .map(|i| {
            if !f.incumbent[i] {
                return None;
            }
            let since = state.selected_since.get(f.names[i].as_ref()).copied();
            if let Some(since) = since.filter(|s| plus(*s, policy.min_selected) > now) {
                Some(Pin::Selected(since))
            } else if budget_left == Some(0) {
                Some(Pin::Budget)
            } else {
                None
            }
        })
        .collect()
}

/// What selection weighs: totals (doubled, so that a gain of exactly `minScoreGain` can beat
/// an incumbent's bonus of `2 × minScoreGain − 1`), each incumbent with its bonus.
fn keys(policy: &Policy, f: &Feasible<'_>, pins: &[Option<Pin>]) -> Vec<i64> {
    f.totals
        .iter()
        .zip(f.incumbent)
        .zip(pins)
        .map(|((t, inc), pin)| {
            2 * t
                + match (inc, pin) {
                    (false, _) => 0,
                    (true, Some(_)) => PIN,
                    // Ties go to the incumbent: a newcomer wins at a gain of exactly min.
                    (true, None) if policy.min_score_gain > 0 => 2 * policy.min_score_gain - 1,
                    (true, None) => 0,
                }
        })
        .collect()
}

/// More replacements than the hour's budget has `left`: only the `left` weakest dropped
/// incumbents may go; the rest are pinned.
fn spend_budget(left: usize, f: &Feasible<'_>, picked: &[usize], pins: &mut [Option<Pin>]) {
    let is_picked = as_set(picked);
    let mut dropped: Vec<usize> = (0..f.totals.len())
        .filter(|i| f.incumbent[*i] && !is_picked.contains(i))
        .collect();
    dropped.sort_by_key(|&i| (f.totals[i], f.names[i].clone()));
    let may_go: BTreeSet<usize> = dropped.iter().take(left).copied().collect();
    for (i, pin) in pins.iter_mut().enumerate() {
        if f.incumbent[i] && pin.is_none() && !may_go.contains(&i) {
            *pin = Some(Pin::Budget);
        }
    }
}

/// What would have moved without the controls and did not: newcomers kept out, paired
/// best first with the incumbents kept in, weakest first; and when a held move may go ahead
/// on time alone.
fn held_moves(
    policy: &Policy,
    f: &Feasible<'_>,
    pins: &[Option<Pin>],
    free: &[usize],
    picked: &[usize],
    moves_after: &[Timestamp],
    now: Timestamp,
) -> (Vec<HeldMove>, Option<Timestamp>) {
    let (picked_set, free_set) = (as_set(picked), as_set(free));
    let mut held_in: Vec<usize> = free
        .iter()
        .copied()
        .filter(|i| !picked_set.contains(i))
        .collect();
    let mut held_out: Vec<usize> = picked
        .iter()
        .copied()
        .filter(|i| !free_set.contains(i))
        .collect();
    held_in.sort_by_key(|&i| (std::cmp::Reverse(f.totals[i]), f.names[i].clone()));
    held_out.sort_by_key(|&i| (f.totals[i], f.names[i].clone()));
    let mut requeue_at: Option<Timestamp> = None;
    let mut held = Vec::with_capacity(held_in.len().min(held_out.len()));
    for (&i, &o) in held_in.iter().zip(&held_out) {
        let (reason, free_at) = hold_reason(policy, f, pins[o], (i, o), moves_after, now);
        // Look again a second after the move may go ahead.
        if let Some(t) = free_at.map(|t| plus(t, SignedDuration::from_secs(1))) {
            requeue_at = Some(requeue_at.map_or(t, |r| r.min(t)));
        }
        held.push(HeldMove {
            incoming: f.names[i].clone(),
            outgoing: f.names[o].clone(),
            reason,
        });
    }
    (held, requeue_at)
}

/// Why incumbent `o` stays although `i` would replace it, and when time alone lets the move
/// go ahead (`None`: only a better score will).
fn hold_reason(
    policy: &Policy,
    f: &Feasible<'_>,
    pin: Option<Pin>,
    (i, o): (usize, usize),
    moves_after: &[Timestamp],
    now: Timestamp,
) -> (String, Option<Timestamp>) {
    match pin {
        Some(Pin::Selected(since)) => (
            format!(
                "{} selected {:#} ago, less than minSelectedDuration {:#}",
                f.names[o],
                now.duration_since(since),
                policy.min_selected
            ),
            Some(plus(since, policy.min_selected)),
        ),
        Some(Pin::Budget) => (
            format!(
                "{} score moves in the last hour, maxScoreMovesPerHour {}",
                moves_after.len(),
                policy.max_moves_per_hour.unwrap_or(0)
            ),
            moves_after.iter().min().map(|oldest| plus(*oldest, HOUR)),
        ),
        None => (
            format!(
                "gain {} < minScoreGain {}",
                f.totals[i] - f.totals[o],
                policy.min_score_gain
            ),
            None,
        ),
    }
}

/// `t + d`, saturating: times come from an annotation anyone with write access may edit.
fn plus(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

fn as_set(v: &[usize]) -> BTreeSet<usize> {
    v.iter().copied().collect()
}

/// Newcomers that took a still-feasible incumbent's place.
fn replacements(picked: &[usize], incumbent: &[bool]) -> usize {
    let picked_set = as_set(picked);
    let newcomers = picked.iter().filter(|i| !incumbent[**i]).count();
    let dropped = (0..incumbent.len())
        .filter(|i| incumbent[*i] && !picked_set.contains(i))
        .count();
    newcomers.min(dropped)
}

/// The state after a pass that selected `newcomers`: their selection time (when the policy
/// has a `minSelectedDuration`), this pass's replacements (when it has a budget), without
/// what no longer matters.
fn next_state(
    policy: &Policy,
    old: &State,
    names: &[&Name],
    picked: &[usize],
    newcomers: &[usize],
    moves: Vec<Timestamp>,
    now: Timestamp,
) -> State {
    let mut next = State::default();
    if !policy.min_selected.is_zero() {
        let picked_names: BTreeSet<&str> = picked.iter().map(|&i| names[i].as_ref()).collect();
        next.selected_since = old
            .selected_since
            .iter()
            .filter(|(c, since)| {
                picked_names.contains(c.as_str()) && plus(**since, policy.min_selected) > now
            })
            .map(|(c, t)| (c.clone(), *t))
            .collect();
        for &i in newcomers {
            next.selected_since.insert(names[i].to_string(), now);
        }
        if next.selected_since.len() > MAX_TRACKED {
            let mut by_age: Vec<(Timestamp, String)> = next
                .selected_since
                .iter()
                .map(|(c, t)| (*t, c.clone()))
                .collect();
            by_age.sort();
            for (_, c) in by_age.iter().take(by_age.len() - MAX_TRACKED) {
                next.selected_since.remove(c);
            }
        }
    }
    if policy.max_moves_per_hour.is_some() {
        next.score_moves = moves;
        next.score_moves.sort();
    }
    next
}
