//! The sweeps: passes that no event asked for. The resync (the safety net) and the Balance
//! wave (other placements' decisions moved) reschedule only the placements whose inputs
//! changed since their last successful pass, so that at rest they schedule nothing; and the
//! moves their passes make start no Balance wave, so that waves converge.
//!
//! [`Sweeps`] keeps what that takes: a count of input events, each placement's last pass
//! ([`Mark`]), the placements a sweep queued (quiet), and whether a wave is scheduled. The
//! tasks below run the sweeps over it.

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
    /// The input event count ([`Sweeps::on_input_event`]) before the pass took its snapshot.
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
    /// The input event count before the pass took its snapshot.
    inputs: u64,
}

/// The sweeps' bookkeeping (see the module's documentation).
#[derive(Default)]
pub(super) struct Sweeps {
    /// A Balance wave is scheduled (see [`balance_changed`]).
    wave: AtomicBool,
    /// Counts the watch events of clusters, clustersets, bindings and scores: a placement
    /// whose last pass saw the current count has seen every such change.
    inputs: AtomicU64,
    /// Each placement's last successful pass.
    marks: Mutex<HashMap<Key, Mark>>,
    /// Placements queued by a Balance wave or a resync (and by no event since): the moves
    /// their passes make do not start a Balance wave, so that waves converge.
    quiet: Mutex<HashSet<Key>>,
}

impl Sweeps {
    /// A watch event of a kind every pass reads (clusters, clustersets, bindings, scores),
    /// counted before the stores change.
    pub(super) fn on_input_event(&self) {
        self.inputs.fetch_add(1, Ordering::SeqCst);
    }

    /// An event queued `keys`: their passes are not quiet, whoever queued them first.
    pub(super) fn on_event(&self, keys: &[Key]) {
        if keys.is_empty() {
            return;
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
    }

    /// The placements whose inputs changed since their last successful pass (or that have
    /// none): only the Balance users' Balance input when `balance_only` (a Balance wave),
    /// everything a pass reads otherwise (a resync).
    fn stale(&self, state: &Shared, balance_only: bool) -> Vec<Key> {
        let inputs = self.inputs.load(Ordering::SeqCst);
        let (candidates, snapshot) = candidates(state, balance_only);
        let marks = self.marks.lock();
        candidates
            .into_iter()
            .filter(|(key, placement, balance)| {
                let Some(mark) = marks.get(key) else {
                    return true;
                };
                if !balance_only && (mark.inputs != inputs || mark.placement != *placement) {
                    return true;
                }
                match (&mark.balance, balance) {
                    (_, false) => false,
                    (None, true) => true,
                    (Some((input, over)), true) => {
                        triggers::balance_input(&snapshot, &key.0, &key.1, over) != *input
                    }
                }
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
        let keys = stale(&ctx, true).await;
        tracing::debug!(placements = keys.len(), "Balance wave");
        enqueue_quiet(&ctx, keys);
    });
}

/// The safety net: about every `Options::resync` (±10%, so that replicas and restarts do
/// not line up), the placements whose inputs changed since their last pass without an
/// event queuing them (see [`Sweeps::stale`]). At rest, nothing.
pub(super) async fn resync(ctx: Arc<Ctx>) {
    if ctx.options.resync.is_zero() {
        return;
    }
    loop {
        tokio::time::sleep(jittered(ctx.options.resync)).await;
        let keys = stale(&ctx, false).await;
        tracing::debug!(placements = keys.len(), "resync");
        enqueue_quiet(&ctx, keys);
    }
}

/// [`Sweeps::stale`] on the blocking pool (it walks every placement).
async fn stale(ctx: &Arc<Ctx>, balance_only: bool) -> Vec<Key> {
    let of = ctx.clone();
    tokio::task::spawn_blocking(move || of.sweeps.stale(&of.handle.state, balance_only))
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
