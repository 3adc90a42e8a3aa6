//! The placement controller: watches the hub into in-memory stores, reschedules the
//! placements each change can affect, and writes what the core planned.
//!
//! ```text
//! watches -> State (Snapshot + Placements + Index) -> affected keys -> Queue
//! workers: Queue -> placement_core::schedule (from an Arc<Snapshot>, on the blocking pool, no lock)
//!          -> Writer (ordered writes, events, status)
//! sweeps (resync, Balance waves) -> the placements whose inputs changed -> Queue
//! ```
//!
//! Only the leader's workers write; every replica keeps its stores warm. Each write is
//! checked against leadership and preconditioned on the objects it was computed from (see
//! `writer`); the binary exits when it loses the lease (see `main.rs`).

mod candidates;
mod events;
mod listing;
mod margins;
pub mod metrics;
mod pass;
pub mod queue;
pub mod schema;
mod slim;
mod spread;
pub mod state;
mod sweep;
mod triggers;
mod watch;
mod writer;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use ocm_runtime::Leadership;
use ocm_runtime::events::Recorder;
use tokio::task::JoinSet;

use metrics::Metrics;
use pass::{BalanceTurns, now_seconds};
use queue::Queue;
use state::Shared;
use sweep::Sweeps;
use triggers::Key;
use writer::Writer;

/// How the controller runs.
pub struct Options {
    /// Placements scheduled at once (each one's writes stay in order).
    pub workers: usize,
    /// Placements of one namespace scheduled at once while other namespaces' wait (`None`:
    /// half the workers, rounded up). See [`queue`].
    pub workers_per_namespace: Option<usize>,
    /// About this often, every placement whose last pass did not see the last event that
    /// queued it is rescheduled, looked at in slices spread over the period (see `sweep`): a
    /// safety net; at rest it schedules nothing. Zero: never.
    pub resync: Duration,
    /// Only placements in these namespaces (empty: all). Decisions in every namespace are
    /// still read (Balance counts them all).
    pub namespaces: Vec<String>,
    /// How each placement's passes are paced (see [`queue`]: leading edge, bursts spaced).
    pub pacing: queue::Pacing,
    /// How long placements using Balance wait after other placements' decisions moved; zero
    /// (the default): they do not, and are rescored at the resync, as upstream does.
    /// Balance is a spreading hint: rescheduling every Balance user on every move makes
    /// placements chase each other (with ties, Balance alone never settles). With a delay, a
    /// wave reschedules only the Balance users whose Balance input changed, and the moves such
    /// a wave (or a resync, or a requeue they asked for) makes do not start another one: they
    /// wait for the next resync.
    pub balance_delay: Duration,
    /// Who may write: the controller asks before every write
    /// ([`Leadership::always`] without election).
    pub leadership: Leadership,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 8,
            workers_per_namespace: None,
            resync: Duration::from_secs(600),
            namespaces: Vec::new(),
            pacing: queue::Pacing::DEFAULT,
            balance_delay: Duration::ZERO,
            leadership: Leadership::always(),
        }
    }
}

/// What the controller shares with its HTTP endpoints.
#[derive(Clone)]
pub struct Handle {
    pub state: Shared,
    pub metrics: Arc<Metrics>,
    /// Which watches have listed, and why not: what `/readyz` says.
    pub sync: ocm_runtime::WatchSync,
}

impl Handle {
    pub fn new(registry: &mut prometheus_client::registry::Registry) -> Self {
        Self {
            state: Shared::default(),
            metrics: Arc::new(Metrics::new(registry)),
            sync: ocm_runtime::WatchSync::new(KINDS),
        }
    }

    /// Every watch has listed once.
    pub fn ready(&self) -> bool {
        self.sync.not_ready().is_none()
    }
}

/// The debug endpoint schedules from the controller's stores.
impl crate::debug::DebugSource for Handle {
    fn placement(&self, namespace: &str, name: &str) -> Option<Arc<Placement>> {
        self.state
            .read()
            .placements
            .get(&triggers::key(namespace, name))
            .cloned()
    }

    fn schedule(&self, placement: &Placement) -> placement_core::Outcome {
        // Not under the lock: a long pass must not hold up the watches.
        let snapshot = self.state.read().snapshot.share();
        let until = std::time::Instant::now() + snapshot.limits().cel_time;
        let deadline = || std::time::Instant::now() >= until;
        placement_core::schedule_with(&snapshot, placement, now_seconds(), &mut (), &deadline)
    }
}

/// What the controller's tasks share.
struct Ctx {
    handle: Handle,
    queue: Queue,
    writer: Writer,
    /// Which placements the resync and the Balance waves reschedule (see [`sweep`]).
    sweeps: Sweeps,
    /// The requeue timers, spread (see [`spread`]).
    timers: parking_lot::Mutex<spread::Slots>,
    /// One Balance turn per namespace (see `pass::process`): a tenant's long passes can make
    /// only its own namespace's Balance users wait.
    balance_turns: BalanceTurns,
    options: Options,
}

impl Ctx {
    /// The context, and the event recorder its writer feeds (run it beside the workers).
    fn new(client: Client, handle: Handle, options: Options) -> (Arc<Self>, Recorder) {
        let (writer, recorder) =
            Writer::new(client, handle.metrics.clone(), options.leadership.clone());
        let queue = Queue::with_pacing(options.pacing)
            .with_fairness(fairness(&options))
            .with_gauges(&handle.metrics.queue_depth, &handle.metrics.cache_entries);
        let ctx = Ctx {
            handle,
            queue,
            writer,
            sweeps: Sweeps::default(),
            timers: parking_lot::Mutex::new(spread::Slots::new(tokio::time::Instant::now())),
            balance_turns: BalanceTurns::default(),
            options,
        };
        (Arc::new(ctx), recorder)
    }

    fn in_scope(&self, key: &Key) -> bool {
        self.options.namespaces.is_empty() || self.options.namespaces.iter().any(|n| **n == *key.0)
    }

    /// Queues an event's passes (the placements in scope).
    fn enqueue(&self, keys: BTreeSet<Key>) {
        let keys: Vec<Key> = keys.into_iter().filter(|k| self.in_scope(k)).collect();
        self.sweeps.on_event(&keys);
        self.queue.add_all(keys.iter());
    }

    /// Queues passes due at given times (score changes only the decisions' shown scores
    /// wait for), spread with the other timers.
    fn enqueue_later(&self, later: Vec<(Key, jiff::Timestamp)>) {
        if later.is_empty() {
            return;
        }
        let wall = jiff::Timestamp::now();
        for (key, at) in later.into_iter().filter(|(k, _)| self.in_scope(k)) {
            let wait = std::time::Duration::try_from(at.duration_since(wall)).unwrap_or_default();
            let at = self.spread(&key, wait);
            self.queue.add_at(key, at);
        }
    }

    /// When a timer for `key` due in `wait` fires: spread with the other timers, so that
    /// timers due together do not wake every placement at once (see [`spread`]).
    fn spread(&self, key: &Key, wait: std::time::Duration) -> tokio::time::Instant {
        let placements = self.handle.state.read().placements.len();
        let now = tokio::time::Instant::now();
        self.timers.lock().place(key, now + wait, placements, now)
    }

    fn enqueue_all(&self) {
        let keys: BTreeSet<Key> = self
            .handle
            .state
            .read()
            .placements
            .keys()
            .cloned()
            .collect();
        self.enqueue(keys);
    }

    /// The placement was deleted: its pending requeue, backoff and mark go too.
    fn forget(&self, key: &Key) {
        self.queue.remove(key);
        self.sweeps.forget(key);
        self.timers.lock().forget(key);
    }
}

/// How the workers are shared among namespaces (`Options::workers_per_namespace`).
fn fairness(options: &Options) -> queue::Fairness {
    let workers = options.workers.max(1);
    match options.workers_per_namespace {
        Some(n) => queue::Fairness {
            workers,
            per_namespace: n.max(1),
        },
        None => queue::Fairness::halves(workers),
    }
}

/// Runs the controller until `shutdown` completes.
pub async fn run(
    client: Client,
    handle: Handle,
    options: Options,
    shutdown: impl Future<Output = ()>,
) {
    // Before any pass: what the hub's CRDs keep decides what a pass compares.
    schema::learn_score_fields(&client, &handle).await;
    let (ctx, recorder) = Ctx::new(client.clone(), handle, options);
    tracing::info!(workers = ctx.options.workers, resync = ?ctx.options.resync, namespaces = ?ctx.options.namespaces, "placement controller starting");
    let mut tasks = JoinSet::new();
    // Events are published by their own task: they never hold up a decision write.
    tasks.spawn(recorder.run());
    spawn_watches(&mut tasks, &client, &ctx);
    spawn_workers(&mut tasks, &ctx);
    shutdown.await;
    tracing::info!("placement controller stopping");
    tasks.shutdown().await;
}

/// The number of watched kinds; the controller is ready when each has listed once.
const KINDS: usize = 6;

/// One watch per kind the stores keep ([`KINDS`] of them).
fn spawn_watches(tasks: &mut JoinSet<()>, client: &Client, ctx: &Arc<Ctx>) {
    watch::spawn::<ManagedCluster>(tasks, client, ctx);
    watch::spawn::<ManagedClusterSet>(tasks, client, ctx);
    watch::spawn::<ManagedClusterSetBinding>(tasks, client, ctx);
    watch::spawn::<AddOnPlacementScore>(tasks, client, ctx);
    watch::spawn::<PlacementDecision>(tasks, client, ctx);
    watch::spawn::<Placement>(tasks, client, ctx);
}

/// The workers, the resync and the leadership watch.
fn spawn_workers(tasks: &mut JoinSet<()>, ctx: &Arc<Ctx>) {
    for _ in 0..ctx.options.workers.max(1) {
        tasks.spawn(pass::worker(ctx.clone()));
    }
    tasks.spawn(sweep::resync(ctx.clone()));
    tasks.spawn(leadership(ctx.clone()));
}

/// On becoming the leader, reschedule everything: a standby's queue knows nothing. Waits for
/// the changes instead of polling them.
async fn leadership(ctx: Arc<Ctx>) {
    let mut was = false;
    loop {
        let now = ctx.options.leadership.is_leader();
        if now && !was {
            tracing::info!("became the leader");
            ctx.enqueue_all();
        } else if !now && was {
            tracing::warn!("lost the leadership; writes stop");
        }
        was = now;
        ctx.options.leadership.changes_from(now).await;
    }
}
