//! One scheduling pass: a worker takes a placement from the queue, runs the core on the
//! current snapshot (timing its steps), hands the outcome to the writer and the event
//! recorder, and queues what the pass asks for (requeue times, moved placements).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use ocm_api::Placement;
use parking_lot::Mutex;
use placement_core::{Code, Laps, Outcome, Snapshot};
use tokio::sync::OwnedMutexGuard;

use super::Ctx;
use super::metrics::{self, Metrics};
use super::sweep::{self, PassStart};
use super::triggers::Key;
use super::writer::{self, Versions, WriteError};

/// The longest a Balance user's pass waits for the previous one's writes (see `process`).
const BALANCE_TURN_WAIT: Duration = Duration::from_secs(1);

/// Times the core's steps for the plugin duration metric.
struct Stopwatch<'a> {
    last: std::time::Instant,
    metrics: &'a Metrics,
}

/// One scheduling pass, from a snapshot taken without holding the lock during the pass. It is
/// CPU-bound and may be long (an expensive `celSelector` over many clusters), so it runs on
/// the blocking pool: the runtime's threads stay free for the watches, the lease and HTTP.
/// At most `Options::workers` passes run at once (each worker awaits its own).
async fn schedule_pass(
    metrics: Arc<Metrics>,
    snapshot: Arc<placement_core::Snapshot>,
    placement: Arc<Placement>,
    now: Timestamp,
) -> Result<(placement_core::Outcome, writer::Versions), tokio::task::JoinError> {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let mut laps = Stopwatch {
            last: started,
            metrics: &metrics,
        };
        let until = started + snapshot.limits().cel_time;
        let deadline = || std::time::Instant::now() >= until;
        let outcome =
            placement_core::schedule_with(&snapshot, &placement, now, &mut laps, &deadline);
        metrics
            .scheduling_duration
            .observe(started.elapsed().as_secs_f64());
        // The writes are preconditioned on what this outcome was computed from.
        let versions = writer::Versions::of(&snapshot, &outcome);
        (outcome, versions)
    })
    .await
}

impl Laps for Stopwatch<'_> {
    fn lap(&mut self, step_type: &'static str, step: &str) {
        let now = std::time::Instant::now();
        self.metrics.plugin(step_type, step, now - self.last);
        self.last = now;
    }
}

/// The Balance turns, by namespace.
#[derive(Default)]
pub(super) struct BalanceTurns(Mutex<HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>>);

impl BalanceTurns {
    /// The turn of `namespace` (namespaces whose turn nobody holds or waits for are forgotten
    /// when another is added, so the map holds the busy ones).
    pub(super) fn of(&self, namespace: &Arc<str>) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.0.lock();
        if let Some(t) = turns.get(namespace) {
            return t.clone();
        }
        turns.retain(|_, t| Arc::strong_count(t) > 1);
        turns.entry(namespace.clone()).or_default().clone()
    }
}

/// The time as the API stores it (whole seconds), so that a status computed now compares
/// equal to the same status read back.
pub(super) fn now_seconds() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

pub(super) async fn worker(ctx: Arc<Ctx>) {
    loop {
        while !ctx.options.leadership.is_leader() {
            ctx.options.leadership.changes_from(false).await;
        }
        let batch = ctx.queue.next_batch(1).await;
        for key in batch {
            process(&ctx, &key).await;
            ctx.queue.done(&key);
        }
    }
}

async fn process(ctx: &Arc<Ctx>, key: &Key) {
    if !ctx.handle.ready() {
        // Scheduling from half-listed stores could delete good decisions: wait for the lists.
        ctx.queue.add_at(
            key.clone(),
            tokio::time::Instant::now() + Duration::from_millis(200),
        );
        return;
    }
    let balance_turn = balance_turn(ctx, key).await;
    let start = ctx.sweeps.on_pass_start(key);
    let now = now_seconds();
    let Some((placement, snapshot, taken)) = take(ctx, key) else {
        return;
    };
    let Some((outcome, versions)) = schedule(ctx, key, &placement, &snapshot, now).await else {
        ctx.handle.state.write().margins.forget(key);
        return;
    };
    let written = ctx
        .writer
        .apply(&ctx.handle.state, &placement, &outcome, versions)
        .await;
    // The decisions are written through: the next Balance user's snapshot holds them.
    drop(balance_turn);
    // This pass's own move is what the outcome changed from its snapshot (other Balance
    // users' input); a sweep's pass starts no wave.
    if !start.quiet && moves(&snapshot, key, &outcome) {
        sweep::balance_changed(ctx);
    }
    let pass = Pass {
        ctx,
        key,
        placement: &placement,
        snapshot: &snapshot,
        outcome: &outcome,
        start: &start,
        taken,
        now,
    };
    match written {
        Ok(again) => pass.written(again),
        Err(e) => pass.not_written(e),
    }
}

/// Balance scores a cluster by the other placements' decisions. Passes that run at once read
/// them from the same snapshot: placements woken by one event (a score every one of them
/// reads) all see the same counts, move together onto the same least-used clusters and back
/// at the next event. Upstream runs one worker, so each pass sees the decisions of the passes
/// before it. Here too: a Balance user's pass waits its turn and takes its snapshot after the
/// previous one's decisions were written through; the others stay parallel. The wait is
/// bounded: a pass that holds the turn for long (an expensive celSelector) must not stall
/// every other Balance user, so after BALANCE_TURN_WAIT a pass goes ahead without it. The
/// turn is per namespace: a tenant's long passes delay only its own namespace's Balance
/// users, never another tenant's.
async fn balance_turn(ctx: &Ctx, key: &Key) -> Option<OwnedMutexGuard<()>> {
    if ctx.handle.state.read().index.uses_balance(key) {
        tokio::time::timeout(BALANCE_TURN_WAIT, ctx.balance_turns.of(&key.0).lock_owned())
            .await
            .ok()
    } else {
        None
    }
}

/// The placement and the snapshot to schedule it from, and where the margins stood then
/// ([`super::margins::Margins::taken`]); `None`: nothing to schedule.
fn take(ctx: &Ctx, key: &Key) -> Option<(Arc<Placement>, Arc<Snapshot>, u64)> {
    let taken = {
        let st = ctx.handle.state.read();
        st.placements
            .get(key)
            .cloned()
            .map(|p| (p, st.snapshot.share(), st.margins.taken()))
    };
    let Some((placement, snapshot, seq)) = taken else {
        // Deleted while its requeue or backoff was pending.
        ctx.queue.remove(key);
        return None;
    };
    if placement.metadata.deletion_timestamp.is_some() || placement_core::is_disabled(&placement) {
        return None;
    }
    Some((placement, snapshot, seq))
}

/// Runs the pass ([`schedule_pass`]); `None` when there is nothing to write: the core
/// panicked or failed for a transient reason (the decisions and status stay), and the
/// placement is retried with backoff.
async fn schedule(
    ctx: &Ctx,
    key: &Key,
    placement: &Arc<Placement>,
    snapshot: &Arc<Snapshot>,
    now: Timestamp,
) -> Option<(Outcome, Versions)> {
    let scheduled = schedule_pass(
        ctx.handle.metrics.clone(),
        snapshot.clone(),
        placement.clone(),
        now,
    );
    let (outcome, versions) = match scheduled.await {
        Ok(done) => done,
        Err(e) => {
            // A panic in the core: this placement only, retried with backoff.
            tracing::error!(namespace = &*key.0, name = &*key.1, error = %e, "scheduling failed");
            ctx.queue.add_rate_limited(key.clone());
            return None;
        }
    };
    if outcome.status.code == Code::Transient {
        tracing::warn!(
            namespace = &*key.0,
            name = &*key.1,
            plugin = outcome.status.plugin,
            message = outcome.status.message,
            "scheduling failed for a transient reason; decisions kept, retrying with backoff"
        );
        count(ctx, "transient");
        ctx.queue.add_rate_limited(key.clone());
        return None;
    }
    Some((outcome, versions))
}

/// Counts a pass by its result.
fn count(ctx: &Ctx, result: &str) {
    ctx.handle
        .metrics
        .schedules
        .get_or_create(&metrics::ResultLabels {
            result: result.into(),
        })
        .inc();
}

/// A pass whose outcome was handed to the writer: what follows the write.
struct Pass<'a> {
    ctx: &'a Ctx,
    key: &'a Key,
    placement: &'a Placement,
    snapshot: &'a Snapshot,
    outcome: &'a Outcome,
    start: &'a PassStart,
    /// Where the margins stood when the snapshot was taken.
    taken: u64,
    now: Timestamp,
}

impl Pass<'_> {
    /// Everything was written: remember the pass, say what changed, and queue what it asks
    /// for.
    fn written(&self, mut again: BTreeSet<Key>) {
        let Pass {
            ctx,
            key,
            placement,
            snapshot,
            outcome,
            start,
            taken,
            ..
        } = *self;
        let state = &ctx.handle.state;
        let kept = state
            .write()
            .margins
            .store(key, outcome.margin.clone(), taken);
        if !kept {
            // A score change was judged against the margin before this one after this pass
            // took its snapshot: this pass may not have seen it.
            again.insert(key.clone());
        }
        ctx.sweeps
            .on_pass(key, start, state, placement, snapshot, outcome);
        warn_capped_validity(ctx, key, placement, outcome);
        say_held(ctx, key, placement, outcome);
        if let Some(e) = placement_core::plan::limit_event(placement.status.as_ref(), outcome) {
            ctx.writer.emit(placement, &[e]);
        }
        ctx.enqueue(again);
        ctx.queue.forget(key);
        count(ctx, result(outcome.status.code));
        if outcome.status.code != Code::Success {
            tracing::info!(namespace = &*key.0, name = &*key.1, code = ?outcome.status.code, plugin = outcome.status.plugin, message = outcome.status.message, "scheduled with a problem");
        }
        self.requeue();
    }

    /// The placement again when the outcome asks (a toleration or a score's validity ends),
    /// spread with the other timers (see [`super::spread`]).
    fn requeue(&self) {
        let Some(at) = self.outcome.requeue_at else {
            return;
        };
        let wait = at.duration_since(self.now);
        let wait = Duration::try_from(wait).unwrap_or_default() + Duration::from_millis(100);
        if self.start.quiet {
            // Still the sweep's pass (see `Sweeps::stay_quiet`).
            self.ctx.sweeps.stay_quiet(self.key);
        }
        let at = self.ctx.spread(self.key, wait);
        self.ctx.queue.replace_at(self.key.clone(), at);
    }

    /// A write failed: retried with backoff, unless this replica stopped leading.
    fn not_written(&self, e: WriteError) {
        let key = self.key;
        self.ctx.handle.state.write().margins.forget(key);
        match e {
            WriteError::NotLeader(what) => {
                // The new leader schedules everything when it takes over.
                tracing::info!(
                    namespace = &*key.0,
                    name = &*key.1,
                    what,
                    "not the leader any more; writes stopped"
                );
            }
            e => {
                count(self.ctx, "write_error");
                tracing::warn!(namespace = &*key.0, name = &*key.1, error = %e, "writing the decisions failed; retrying with backoff");
                self.ctx.queue.add_rate_limited(key.clone());
            }
        }
    }
}

/// The `result` label of a written pass.
fn result(code: Code) -> &'static str {
    match code {
        Code::Success => "success",
        Code::Warning => "warning",
        Code::Error | Code::Transient => "error",
        Code::Misconfigured => "misconfigured",
        Code::Exceeded(_) => "limit_exceeded",
    }
}

/// The `ScoreValidityCapped` Warning, when the set of scores the validity bound has ended for
/// this placement changed since the last one (not at every pass).
fn warn_capped_validity(
    ctx: &Ctx,
    key: &Key,
    placement: &Placement,
    outcome: &placement_core::Outcome,
) {
    let changed = ctx
        .handle
        .state
        .write()
        .capped_changed(key, &outcome.validity_capped);
    if changed
        && let Some(event) = placement_core::plan::validity_capped_event(&outcome.validity_capped)
    {
        tracing::warn!(
            namespace = &*key.0,
            name = &*key.1,
            note = event.note,
            "scores ended by the validity bound"
        );
        ctx.writer.emit(placement, &[event]);
    }
}

/// The `DecisionHeld` event and counter, when the moves the placement's stability controls
/// hold changed since its last pass (not at every pass: noise holds the same move again and
/// again, and a placement at rest must cost no write).
fn say_held(ctx: &Ctx, key: &Key, placement: &Placement, outcome: &placement_core::Outcome) {
    let policy = placement
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(placement_core::stability::ANNOTATION))
        .and_then(|text| placement_core::stability::parse(Some(text)).ok().flatten());
    let news = ctx
        .handle
        .state
        .write()
        .held_changed(key, policy.is_some(), &outcome.held);
    let (Some(n), Some(policy)) = (news, policy) else {
        return;
    };
    ctx.handle.metrics.moves_held.inc_by(n as u64);
    if let Some(event) = placement_core::plan::held_event(&policy.to_string(), &outcome.held) {
        tracing::info!(
            namespace = &*key.0,
            name = &*key.1,
            note = event.note,
            "moves held by the stability controls"
        );
        ctx.writer.emit(placement, &[event]);
    }
}

/// Whether the outcome moves the placement's decision entries from what `snapshot` holds
/// (other Balance users' input).
fn moves(
    snapshot: &placement_core::Snapshot,
    key: &Key,
    outcome: &placement_core::Outcome,
) -> bool {
    let mut before: BTreeMap<&str, i64> = BTreeMap::new();
    for d in snapshot.decisions_of(&key.0, &key.1) {
        for e in placement_core::snapshot::decision_entries(d) {
            *before.entry(e.cluster_name.as_str()).or_insert(0) += 1;
        }
    }
    for d in &outcome.decisions {
        for e in placement_core::snapshot::decision_entries(d) {
            *before.entry(e.cluster_name.as_str()).or_insert(0) -= 1;
        }
    }
    before.values().any(|&n| n != 0)
}
