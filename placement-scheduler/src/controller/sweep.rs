//! The sweeps: passes that no event asked for. The resync (the safety net) and the Balance
//! wave (other placements' decisions moved) reschedule only the placements whose inputs
//! changed since their last successful pass, so that at rest they schedule nothing; and the
//! moves their passes make start no Balance wave, so that waves converge.
//!
//! [`Sweeps`] keeps what that takes: when events last queued each placement (an epoch that
//! only events which may change its schedule move: a score renewal that changes nothing, or a
//! change on a cluster that is not its candidate, queues nothing and moves nothing), each
//! placement's last pass ([`Mark`]), the placements a sweep queued (quiet), and whether a wave
//! is scheduled. The tasks below run the sweeps over it.
//!
//! The resync does not look at every placement at once: every `resync / RESYNC_SLICES` it
//! looks at the next `ceil(placements / RESYNC_SLICES)` of them in key order, so that each is
//! looked at about once per `resync` and no instant wakes more than that share.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ocm_api::Placement;
use parking_lot::Mutex;
use placement_core::{Outcome, Snapshot};

use super::Ctx;
use super::state::Shared;
use super::triggers::{self, Key, SlotSet};

/// What a placement's last successful pass was computed from: a resync or a Balance wave
/// skips the placement while these are unchanged (its pass would change nothing).
struct Mark {
    /// The event epoch ([`Sweeps::on_event`]) before the pass took its snapshot.
    inputs: u64,
    /// [`placement_fingerprint`] of the Placement the pass scheduled.
    placement: u64,
    /// Balance users: [`triggers::balance_input`] as the pass saw it, and over which clusters
    /// (the ones that passed its filters).
    balance: Option<(u64, SlotSet)>,
}

/// How a pass starts, as the sweeps see it ([`Sweeps::on_pass_start`]).
pub(super) struct PassStart {
    /// A sweep queued the placement (and no event since): its moves start no Balance wave.
    pub(super) quiet: bool,
    /// The event epoch before the pass took its snapshot.
    inputs: u64,
}

/// The sweeps' bookkeeping (see the module's documentation).
#[derive(Default)]
pub(super) struct Sweeps {
    /// A Balance wave is scheduled (see [`balance_changed`]).
    wave: AtomicBool,
    /// Counts the events that queued placements (see [`Sweeps::on_event`]).
    inputs: AtomicU64,
    /// The epoch of the last event that queued each placement: a placement whose last
    /// successful pass started at or after it has seen every change that may affect it.
    touched: Mutex<HashMap<Key, u64>>,
    /// Where the resync's last slice ended (see [`Sweeps::slice`]).
    cursor: Mutex<Option<Key>>,
    /// Each placement's last successful pass.
    marks: Mutex<HashMap<Key, Mark>>,
    /// Placements queued by a Balance wave or a resync (and by no event since): the moves
    /// their passes make do not start a Balance wave, so that waves converge.
    quiet: Mutex<HashSet<Key>>,
}

impl Sweeps {
    /// An event queued `keys`, after it changed the stores: their inputs changed at a new
    /// epoch, and their passes are not quiet, whoever queued them first. A pass that reads the
    /// epoch before it takes its snapshot and sees this one has seen the change.
    pub(super) fn on_event(&self, keys: &[Key]) {
        if keys.is_empty() {
            return;
        }
        let epoch = self.inputs.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let mut touched = self.touched.lock();
            for k in keys {
                touched.insert(k.clone(), epoch);
            }
        }
        let mut quiet = self.quiet.lock();
        if !quiet.is_empty() {
            for k in keys {
                quiet.remove(k);
            }
        }
    }

    /// A sweep queued `keys`: their passes are quiet.
    fn on_sweep(&self, keys: &[Key]) {
        self.quiet.lock().extend(keys.iter().cloned());
    }

    /// A pass of `key` starts (before it takes its snapshot).
    pub(super) fn on_pass_start(&self, key: &Key) -> PassStart {
        let quiet = self.quiet.lock().remove(key);
        // Read before the snapshot: a change after this makes the mark older than the store.
        let inputs = self.inputs.load(Ordering::SeqCst);
        PassStart { quiet, inputs }
    }

    /// A pass of `key` succeeded: remembers what it was computed from (see [`Mark`]).
    pub(super) fn on_pass(
        &self,
        key: &Key,
        start: &PassStart,
        state: &Shared,
        placement: &Placement,
        snapshot: &Snapshot,
        outcome: &Outcome,
    ) {
        let balance = state.read().index.uses_balance(key).then(|| {
            let over = triggers::slots_of(snapshot, &outcome.filtered);
            let input = triggers::balance_input(snapshot, &key.0, &key.1, &over);
            (input, over)
        });
        let mark = Mark {
            inputs: start.inputs,
            placement: placement_fingerprint(placement),
            balance,
        };
        self.marks.lock().insert(key.clone(), mark);
    }

    /// A quiet pass asked to be scheduled again (a score held back by `scoreRateLimit`,
    /// written when the window ends): that pass is still the sweep's, and its move must not
    /// start another wave.
    pub(super) fn stay_quiet(&self, key: &Key) {
        self.quiet.lock().insert(key.clone());
    }

    /// The placement is gone.
    pub(super) fn forget(&self, key: &Key) {
        self.marks.lock().remove(key);
        self.touched.lock().remove(key);
    }

    /// The resync's next slice: up to `size` placements in key order after the last slice's
    /// end; after the last key, from the first again.
    fn slice(&self, state: &Shared, size: usize) -> Vec<Key> {
        let st = state.read();
        let mut cursor = self.cursor.lock();
        let after = |c: &Key| {
            st.placements
                .range::<Key, _>((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                .take(size)
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        let mut out = cursor.as_ref().map(after).unwrap_or_default();
        if out.is_empty() {
            // The end: the next period starts from the first key.
            out = st.placements.keys().take(size).cloned().collect();
        }
        *cursor = out.last().cloned();
        out
    }

    /// The stale placements (see [`is_stale`]): among the resync's next slice of `slice`
    /// placements, or among every Balance user when `balance_only` (a Balance wave, which
    /// looks at their Balance input only).
    fn stale(&self, state: &Shared, balance_only: bool, slice: Option<usize>) -> Vec<Key> {
        let (candidates, snapshot) = match slice {
            Some(size) => {
                let keys = self.slice(state, size);
                candidates_of(state, &keys)
            }
            None => candidates(state, balance_only),
        };
        let marks = self.marks.lock();
        let touched = self.touched.lock();
        candidates
            .into_iter()
            .filter(|(key, placement, balance)| {
                is_stale(
                    marks.get(key),
                    touched.get(key).copied(),
                    (key, *placement, *balance),
                    balance_only,
                    &snapshot,
                )
            })
            .map(|(key, ..)| key)
            .collect()
    }

    /// Claims the next Balance wave: `false` when one is scheduled already (the moves join
    /// it).
    fn schedule_wave(&self) -> bool {
        !self.wave.swap(true, Ordering::SeqCst)
    }

    /// The scheduled wave starts: moves from now on schedule the next one.
    fn start_wave(&self) {
        self.wave.store(false, Ordering::SeqCst);
    }
}

/// Whether a placement (its key, [`placement_fingerprint`] and whether it uses Balance) is
/// stale: no last pass, an event queued it after its last pass started, or it changed; or,
/// for a Balance user, its Balance input changed (against `snapshot`). Only the last when
/// `balance_only`.
fn is_stale(
    mark: Option<&Mark>,
    touched: Option<u64>,
    (key, placement, balance): (&Key, u64, bool),
    balance_only: bool,
    snapshot: &Snapshot,
) -> bool {
    let Some(mark) = mark else {
        return true;
    };
    let inputs_moved = touched.is_some_and(|t| t > mark.inputs);
    if !balance_only && (inputs_moved || mark.placement != placement) {
        return true;
    }
    match (&mark.balance, balance) {
        (_, false) => false,
        (None, true) => true,
        (Some((input, over)), true) => {
            triggers::balance_input(snapshot, &key.0, &key.1, over) != *input
        }
    }
}

/// What [`Sweeps::stale`] looks at: the placements (all, or the Balance users), each with its
/// [`placement_fingerprint`] and whether it uses Balance, and the snapshot they are judged
/// against.
fn candidates(state: &Shared, balance_only: bool) -> (Vec<(Key, u64, bool)>, Arc<Snapshot>) {
    let st = state.read();
    let candidates = if balance_only {
        st.index
            .balance_users()
            .filter_map(|k| {
                let p = st.placements.get(k)?;
                Some((k.clone(), placement_fingerprint(p), true))
            })
            .collect()
    } else {
        st.placements
            .iter()
            .map(|(k, p)| {
                (
                    k.clone(),
                    placement_fingerprint(p),
                    st.index.uses_balance(k),
                )
            })
            .collect()
    };
    (candidates, st.snapshot.share())
}

/// [`candidates`] for the placements `keys` (those still in the store).
fn candidates_of(state: &Shared, keys: &[Key]) -> (Vec<(Key, u64, bool)>, Arc<Snapshot>) {
    let st = state.read();
    let out = keys
        .iter()
        .filter_map(|k| {
            let p = st.placements.get(k)?;
            Some((
                k.clone(),
                placement_fingerprint(p),
                st.index.uses_balance(k),
            ))
        })
        .collect();
    (out, st.snapshot.share())
}

/// The parts of a Placement its schedule depends on, beyond other objects: what makes
/// `State::apply_placement` reschedule it (the spec through `generation`).
fn placement_fingerprint(p: &Placement) -> u64 {
    let mut h = DefaultHasher::new();
    (
        &p.metadata.uid,
        p.metadata.generation,
        &p.metadata.annotations,
        &p.metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
    )
        .hash(&mut h);
    h.finish()
}

/// Decisions moved: after `Options::balance_delay`, reschedule the Balance users whose
/// Balance input changed (see [`Sweeps::stale`]); changes meanwhile join the same wave.
pub(super) fn balance_changed(ctx: &Arc<Ctx>) {
    if ctx.options.balance_delay.is_zero() || !ctx.sweeps.schedule_wave() {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ctx.options.balance_delay).await;
        ctx.sweeps.start_wave();
        let keys = stale(&ctx, true, None).await;
        tracing::debug!(placements = keys.len(), "Balance wave");
        enqueue_quiet(&ctx, keys);
    });
}

/// The resync looks at this share of the placements at a time (see the module's
/// documentation): with the default 10 minutes, a slice every 10 s.
pub(super) const RESYNC_SLICES: usize = 60;

/// The safety net: every placement about once per `Options::resync` (each slice's wait is
/// jittered ±10%, so that replicas and restarts do not line up), in slices (see the module's
/// documentation), rescheduling those whose last pass did not see the last event that
/// queued them (it failed, or was lost), or that have none. At rest, nothing.
pub(super) async fn resync(ctx: Arc<Ctx>) {
    if ctx.options.resync.is_zero() {
        return;
    }
    let every = ctx.options.resync / u32::try_from(RESYNC_SLICES).unwrap_or(u32::MAX);
    loop {
        tokio::time::sleep(jittered(every)).await;
        let size = ctx
            .handle
            .state
            .read()
            .placements
            .len()
            .div_ceil(RESYNC_SLICES);
        let keys = stale(&ctx, false, Some(size)).await;
        tracing::debug!(placements = keys.len(), "resync");
        enqueue_quiet(&ctx, keys);
    }
}

/// [`Sweeps::stale`] on the blocking pool (it may walk every placement).
async fn stale(ctx: &Arc<Ctx>, balance_only: bool, slice: Option<usize>) -> Vec<Key> {
    let of = ctx.clone();
    tokio::task::spawn_blocking(move || of.sweeps.stale(&of.handle.state, balance_only, slice))
        .await
        .unwrap_or_default()
}

/// Queues a sweep's passes: not an event's, so their moves start no Balance wave.
fn enqueue_quiet(ctx: &Ctx, keys: Vec<Key>) {
    let keys: Vec<Key> = keys.into_iter().filter(|k| ctx.in_scope(k)).collect();
    ctx.sweeps.on_sweep(&keys);
    ctx.queue.add_all(keys.iter());
}

/// `period` times a random factor in [0.9, 1.1).
fn jittered(period: Duration) -> Duration {
    let r = std::hash::RandomState::new().build_hasher().finish();
    period.mul_f64(0.9 + 0.2 * (r >> 11) as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use ocm_api::{
        AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding,
    };
    use serde_json::json;

    use super::*;

    fn placement(ns: &str, name: &str) -> Placement {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns, "uid": name},
            "spec": {"prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}}]}}}))
        .expect("a valid Placement")
    }

    /// What a successful pass leaves (the sweeps' side of `Sweeps::on_pass`).
    fn passed(sweeps: &Sweeps, state: &Shared, key: &Key) {
        let start = sweeps.on_pass_start(key);
        let p = state.read().placements.get(key).cloned().expect("stored");
        let mark = Mark {
            inputs: start.inputs,
            placement: placement_fingerprint(&p),
            balance: None,
        };
        sweeps.marks.lock().insert(key.clone(), mark);
    }

    #[test]
    fn the_resync_looks_at_a_bounded_slice_at_a_time_and_at_each_placement_once() {
        let state = Shared::default();
        let n: usize = 1000;
        for i in 0..n {
            let _ = state
                .write()
                .apply_placement(placement("ns", &format!("p{i:04}")));
        }
        let sweeps = Sweeps::default();
        let size = n.div_ceil(RESYNC_SLICES);
        let mut seen = Vec::new();
        for _ in 0..RESYNC_SLICES {
            // Nothing has passed yet: every placement looked at is stale.
            let keys = sweeps.stale(&state, false, Some(size));
            assert!(keys.len() <= size, "{} in one slice", keys.len());
            seen.extend(keys);
        }
        let distinct: BTreeSet<_> = seen.iter().cloned().collect();
        assert_eq!(distinct.len(), n, "each within a period");
        assert!(
            seen.len() <= n + size,
            "at most one slice into the next period"
        );
        // Placements come and go between slices: still bounded, and the walk goes on.
        for i in 0..50 {
            let _ = state
                .write()
                .apply_placement(placement("a-first", &format!("q{i}")));
        }
        let k = state
            .read()
            .placements
            .keys()
            .nth(10)
            .cloned()
            .expect("a key");
        state.write().delete_placement(&k);
        let size = state.read().placements.len().div_ceil(RESYNC_SLICES);
        let mut again = BTreeSet::new();
        for _ in 0..RESYNC_SLICES {
            let keys = sweeps.stale(&state, false, Some(size));
            assert!(keys.len() <= size);
            again.extend(keys);
        }
        assert_eq!(again.len(), state.read().placements.len());
    }

    /// Scores renewed without change (or changed on a cluster the placement cannot choose)
    /// queue nothing and leave its last pass current: the resync skips it. A real change it
    /// was not scheduled for since (its pass failed) makes it stale.
    #[test]
    fn only_changes_that_may_affect_a_placement_make_it_stale() {
        let state = Shared::default();
        {
            let mut st = state.write();
            let set: ManagedClusterSet = serde_json::from_value(json!({"metadata": {"name": "a"},
                "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}))
            .expect("a valid set");
            let _ = st.apply_set(set);
            let b: ManagedClusterSetBinding = serde_json::from_value(json!({
                "metadata": {"name": "a", "namespace": "ns"}, "spec": {"clusterSet": "a"}}))
            .expect("a valid binding");
            let _ = st.apply_binding(&b);
            for (c, set) in [("c1", "a"), ("other", "b")] {
                let cluster: ManagedCluster =
                    serde_json::from_value(json!({"metadata": {"name": c,
                    "labels": {"cluster.open-cluster-management.io/clusterset": set}}, "spec": {}}))
                    .expect("a valid cluster");
                let _ = st.apply_cluster(cluster);
            }
            let _ = st.apply_placement(placement("ns", "p"));
        }
        let score = |cluster: &str, value: i32, until: &str| -> AddOnPlacementScore {
            serde_json::from_value(json!({"metadata": {"name": "r", "namespace": cluster},
                "status": {"scores": [{"name": "s", "value": value}], "validUntil": until}}))
            .expect("a valid score")
        };
        let sweeps = Sweeps::default();
        // An event, as `Ctx::enqueue` reports it.
        let event = |changed: crate::controller::state::Changed| {
            sweeps.on_event(&changed.requeue.into_iter().collect::<Vec<_>>())
        };
        let key = state.read().key("ns", "p");
        event(
            state
                .write()
                .apply_score(score("c1", 1, "2099-01-01T00:00:00Z")),
        );
        event(
            state
                .write()
                .apply_score(score("other", 1, "2099-01-01T00:00:00Z")),
        );
        passed(&sweeps, &state, &key);
        let all = || sweeps.stale(&state, false, Some(usize::MAX));
        assert_eq!(all(), Vec::<Key>::new(), "just passed");
        // Renewals, later validity, same items.
        for until in ["2099-01-02T00:00:00Z", "2099-01-03T00:00:00Z"] {
            event(state.write().apply_score(score("c1", 1, until)));
        }
        assert_eq!(all(), Vec::<Key>::new(), "renewals change nothing");
        // A change on a cluster outside its sets.
        event(
            state
                .write()
                .apply_score(score("other", 9, "2099-01-03T00:00:00Z")),
        );
        assert_eq!(all(), Vec::<Key>::new(), "not its candidate");
        // A real change whose pass has not succeeded yet.
        event(
            state
                .write()
                .apply_score(score("c1", 2, "2099-01-03T00:00:00Z")),
        );
        assert_eq!(all(), vec![key.clone()]);
        passed(&sweeps, &state, &key);
        assert_eq!(all(), Vec::<Key>::new());
    }
}
