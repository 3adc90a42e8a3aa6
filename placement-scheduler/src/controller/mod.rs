//! The placement controller: watches the hub into in-memory stores, reschedules the
//! placements each change can affect, and writes what the core planned.
//!
//! ```text
//! watches -> State (Snapshot + Placements + Index) -> affected keys -> Queue
//! workers: Queue -> placement_core::schedule (from an Arc<Snapshot>, on the blocking pool, no lock)
//!          -> Writer (ordered writes, events, status)
//! ```
//!
//! Only the leader's workers write; every replica keeps its stores warm. Each write is
//! checked against leadership and preconditioned on the objects it was computed from (see
//! [`writer`]); the binary exits when it loses the lease (see `main.rs`).

pub mod events;
mod listing;
pub mod metrics;
mod pass;
pub mod queue;
pub mod schema;
mod slim;
pub mod state;
pub mod triggers;
pub mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use jiff::Timestamp;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use serde::de::DeserializeOwned;

use listing::{Change, Lister, gone};
use metrics::Metrics;
use pass::{now_seconds, worker};
use placement_core::{Code, Laps};
use queue::Queue;
use state::{Shared, State};
use triggers::{Key, SlotSet};
use writer::Writer;

/// Who may write. The controller asks before every write.
pub trait Leader: Send + Sync + 'static {
    fn is_leader(&self) -> bool;

    /// Resolves once [`Leader::is_leader`] may no longer be `leading` (at once if it is not),
    /// so that the controller waits for leadership changes instead of polling them. The
    /// default polls every 200 ms.
    fn changes_from(&self, leading: bool) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            while self.is_leader() == leading {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }
}

impl Leader for ocm_runtime::Leadership {
    fn is_leader(&self) -> bool {
        ocm_runtime::Leadership::is_leader(self)
    }

    fn changes_from(&self, leading: bool) -> BoxFuture<'_, ()> {
        let mut l = self.clone();
        Box::pin(async move {
            if leading {
                l.lost().await;
            } else {
                l.wait_leader().await;
            }
        })
    }
}

/// Always the leader (leader election disabled, or a test).
pub struct AlwaysLeader;

impl Leader for AlwaysLeader {
    fn is_leader(&self) -> bool {
        true
    }

    fn changes_from(&self, leading: bool) -> BoxFuture<'_, ()> {
        if leading {
            Box::pin(std::future::pending())
        } else {
            Box::pin(std::future::ready(()))
        }
    }
}

/// The Balance turns, by namespace.
#[derive(Default)]
pub(crate) struct BalanceTurns(Mutex<HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>>);

impl BalanceTurns {
    /// The turn of `namespace` (namespaces whose turn nobody holds or waits for are forgotten
    /// when another is added, so the map holds the busy ones).
    pub(crate) fn of(&self, namespace: &Arc<str>) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = lock(&self.0);
        if let Some(t) = turns.get(namespace) {
            return t.clone();
        }
        turns.retain(|_, t| Arc::strong_count(t) > 1);
        turns.entry(namespace.clone()).or_default().clone()
    }
}

/// How the controller runs.
pub struct Options {
    /// Placements scheduled at once (each one's writes stay in order).
    pub workers: usize,
    /// Placements of one namespace scheduled at once while other namespaces' wait (`None`:
    /// half the workers, rounded up). See [`queue`].
    pub workers_per_namespace: Option<usize>,
    /// About this often (±10%), every placement whose inputs changed since its last pass
    /// without an event saying so is rescheduled: a safety net; at rest it schedules nothing.
    /// Zero: never.
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
    pub leader: Arc<dyn Leader>,
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
            leader: Arc::new(AlwaysLeader),
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

/// The number of watched kinds; the controller is ready when each has listed once.
const KINDS: usize = 6;

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

/// What a placement's last successful pass was computed from: a resync or a Balance wave
/// skips the placement while these are unchanged (its pass would change nothing).
struct Mark {
    /// [`Ctx::inputs`] before the pass took its snapshot.
    inputs: u64,
    /// [`placement_fingerprint`] of the Placement the pass scheduled.
    placement: u64,
    /// Balance users: [`triggers::balance_input`] as the pass saw it, and over which clusters
    /// (the ones that passed its filters).
    balance: Option<(u64, SlotSet)>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Ctx {
    /// A Balance wave is scheduled (see [`Ctx::balance_changed`]).
    balance_wave: AtomicBool,
    /// Counts the watch events of clusters, clustersets, bindings and scores: a placement
    /// whose last pass saw the current count has seen every such change.
    inputs: AtomicU64,
    /// Each placement's last successful pass (see [`Mark`]).
    marks: Mutex<HashMap<Key, Mark>>,
    /// Placements queued by a Balance wave or a resync (and by no event since): the moves
    /// their passes make do not start a Balance wave, so that waves converge.
    quiet: Mutex<HashSet<Key>>,
    /// One Balance turn per namespace (see `pass::process`): a tenant's long passes can make
    /// only its own namespace's Balance users wait.
    balance_turns: BalanceTurns,
    handle: Handle,
    queue: Queue,
    writer: Writer,
    options: Options,
}

impl Ctx {
    fn in_scope(&self, key: &Key) -> bool {
        self.options.namespaces.is_empty() || self.options.namespaces.iter().any(|n| **n == *key.0)
    }

    fn enqueue(&self, keys: BTreeSet<Key>) {
        let keys: Vec<Key> = keys.into_iter().filter(|k| self.in_scope(k)).collect();
        if !keys.is_empty() {
            // An event's pass is not quiet, whoever queued the key first.
            let mut quiet = lock(&self.quiet);
            if !quiet.is_empty() {
                for k in &keys {
                    quiet.remove(k);
                }
            }
        }
        self.queue.add_all(keys.iter());
    }

    /// Queues passes that are not an event's: their moves start no Balance wave.
    fn enqueue_quiet(&self, keys: Vec<Key>) {
        let keys: Vec<Key> = keys.into_iter().filter(|k| self.in_scope(k)).collect();
        lock(&self.quiet).extend(keys.iter().cloned());
        self.queue.add_all(keys.iter());
    }

    /// Decisions moved: after the delay, reschedule the Balance users whose Balance input
    /// changed (see [`Ctx::stale`]); changes meanwhile join the same wave.
    fn balance_changed(self: &Arc<Self>) {
        if self.options.balance_delay.is_zero() || self.balance_wave.swap(true, Ordering::SeqCst) {
            return;
        }
        let ctx = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ctx.options.balance_delay).await;
            ctx.balance_wave.store(false, Ordering::SeqCst);
            let of = ctx.clone();
            let keys = tokio::task::spawn_blocking(move || of.stale(true))
                .await
                .unwrap_or_default();
            tracing::debug!(placements = keys.len(), "Balance wave");
            ctx.enqueue_quiet(keys);
        });
    }

    /// The placements whose inputs changed since their last successful pass (or that have
    /// none): only the Balance users' Balance input when `balance_only` (a Balance wave),
    /// everything a pass reads otherwise (a resync).
    fn stale(&self, balance_only: bool) -> Vec<Key> {
        let inputs = self.inputs.load(Ordering::SeqCst);
        let (candidates, snapshot) = {
            let st = self.handle.state.read();
            let candidates: Vec<(Key, u64, bool)> = if balance_only {
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
        };
        let marks = lock(&self.marks);
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

    /// Remembers what a successful pass was computed from (see [`Mark`]).
    fn mark(
        &self,
        key: &Key,
        placement: &Placement,
        snapshot: &placement_core::Snapshot,
        outcome: &placement_core::Outcome,
        inputs: u64,
    ) {
        let balance = self.handle.state.read().index.uses_balance(key).then(|| {
            let over = triggers::slots_of(snapshot, &outcome.filtered);
            let input = triggers::balance_input(snapshot, &key.0, &key.1, &over);
            (input, over)
        });
        let mark = Mark {
            inputs,
            placement: placement_fingerprint(placement),
            balance,
        };
        lock(&self.marks).insert(key.clone(), mark);
    }

    /// Called first by every watch's apply: the Balance flag may still hold a move of our
    /// own writes (the writer goes through `State::apply_decision` too); those are counted
    /// by [`process`], exactly, so the watch reports only the moves it saw itself.
    fn watched(&self, st: &mut State, is_input: bool) {
        st.balance_dirty = false;
        if is_input {
            self.inputs.fetch_add(1, Ordering::SeqCst);
        }
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
    let (writer, recorder) = Writer::new(
        client.clone(),
        handle.metrics.clone(),
        options.leader.clone(),
    );
    let workers = options.workers.max(1);
    let fairness = match options.workers_per_namespace {
        Some(n) => queue::Fairness {
            workers,
            per_namespace: n.max(1),
        },
        None => queue::Fairness::halves(workers),
    };
    let queue = Queue::with_pacing(options.pacing)
        .with_fairness(fairness)
        .with_gauges(&handle.metrics.queue_depth, &handle.metrics.cache_entries);
    let ctx = Arc::new(Ctx {
        balance_wave: AtomicBool::new(false),
        inputs: AtomicU64::new(0),
        marks: Mutex::new(HashMap::new()),
        quiet: Mutex::new(HashSet::new()),
        balance_turns: BalanceTurns::default(),
        handle,
        queue,
        writer,
        options,
    });
    tracing::info!(workers = ctx.options.workers, resync = ?ctx.options.resync, namespaces = ?ctx.options.namespaces, "placement controller starting");

    let mut tasks = tokio::task::JoinSet::new();
    // Events are published by their own task: they never hold up a decision write.
    tasks.spawn(recorder.run());
    tasks.spawn(watch(
        Api::<ManagedCluster>::all(client.clone()),
        "ManagedCluster",
        ctx.clone(),
        watched(&ctx, true, |st, ch| match ch {
            Change::Apply(c) => st.apply_cluster(c),
            Change::Delete(c) => st.delete_cluster(c.metadata.name.as_deref().unwrap_or_default()),
            Change::Listed(listed) => {
                let existing = st
                    .snapshot
                    .clusters()
                    .map(|c| (String::new(), c.name.to_string()));
                let gone = gone(existing, &listed);
                gone.iter()
                    .flat_map(|(_, n)| st.delete_cluster(n))
                    .collect()
            }
        }),
    ));
    tasks.spawn(watch(
        Api::<ManagedClusterSet>::all(client.clone()),
        "ManagedClusterSet",
        ctx.clone(),
        watched(&ctx, true, |st, ch| match ch {
            Change::Apply(s) => st.apply_set(s),
            Change::Delete(s) => st.delete_set(s.metadata.name.as_deref().unwrap_or_default()),
            Change::Listed(listed) => {
                let existing = st
                    .snapshot
                    .set_names()
                    .into_iter()
                    .map(|n| (String::new(), n));
                let gone = gone(existing, &listed);
                gone.iter().flat_map(|(_, n)| st.delete_set(n)).collect()
            }
        }),
    ));
    tasks.spawn(watch(
        Api::<ManagedClusterSetBinding>::all(client.clone()),
        "ManagedClusterSetBinding",
        ctx.clone(),
        watched(&ctx, true, |st, ch| match ch {
            Change::Apply(b) => st.apply_binding(&b),
            Change::Delete(b) => st.delete_binding(
                b.metadata.namespace.as_deref().unwrap_or_default(),
                b.metadata.name.as_deref().unwrap_or_default(),
            ),
            Change::Listed(listed) => {
                let gone = gone(st.snapshot.binding_keys(), &listed);
                gone.iter()
                    .flat_map(|(ns, n)| st.delete_binding(ns, n))
                    .collect()
            }
        }),
    ));
    tasks.spawn(watch(
        Api::<AddOnPlacementScore>::all(client.clone()),
        "AddOnPlacementScore",
        ctx.clone(),
        watched(&ctx, true, |st, ch| match ch {
            Change::Apply(s) => st.apply_score(s),
            Change::Delete(s) => {
                let (ns, n) = ns_name(&s);
                st.delete_score(&ns, &n)
            }
            Change::Listed(listed) => {
                let gone = gone(st.snapshot.score_keys(), &listed);
                gone.iter()
                    .flat_map(|(ns, n)| st.delete_score(ns, n))
                    .collect()
            }
        }),
    ));
    tasks.spawn(watch(
        Api::<PlacementDecision>::all(client.clone()),
        "PlacementDecision",
        ctx.clone(),
        watched(&ctx, false, |st, ch| match ch {
            Change::Apply(d) => st.apply_decision(d),
            Change::Delete(d) => {
                let (ns, n) = ns_name(&d);
                st.delete_decision(&ns, &n)
            }
            Change::Listed(listed) => {
                let gone = gone(st.snapshot.decision_keys(), &listed);
                gone.iter()
                    .flat_map(|(ns, n)| st.delete_decision(ns, n))
                    .collect()
            }
        }),
    ));
    let queue_of = ctx.clone();
    tasks.spawn(watch(
        Api::<Placement>::all(client.clone()),
        "Placement",
        ctx.clone(),
        watched(&ctx, false, move |st, ch| match ch {
            Change::Apply(p) => st.apply_placement(p),
            Change::Delete(p) => {
                let key = triggers::key_of(&p);
                queue_of.queue.remove(&key);
                lock(&queue_of.marks).remove(&key);
                st.delete_placement(&key)
            }
            Change::Listed(listed) => {
                let stored = st
                    .placements
                    .keys()
                    .map(|(ns, name)| (ns.to_string(), name.to_string()));
                for (ns, name) in gone(stored, &listed) {
                    let k = triggers::key(&ns, &name);
                    queue_of.queue.remove(&k);
                    lock(&queue_of.marks).remove(&k);
                    st.delete_placement(&k);
                }
                BTreeSet::new()
            }
        }),
    ));
    for _ in 0..ctx.options.workers.max(1) {
        tasks.spawn(worker(ctx.clone()));
    }
    tasks.spawn(resync(ctx.clone()));
    tasks.spawn(leadership(ctx.clone()));

    shutdown.await;
    tracing::info!("placement controller stopping");
    tasks.shutdown().await;
}

/// A watch's `apply` behind [`Ctx::watched`].
fn watched<K>(
    ctx: &Arc<Ctx>,
    is_input: bool,
    apply: impl Fn(&mut State, Change<K>) -> BTreeSet<Key> + Send + 'static,
) -> impl Fn(&mut State, Change<K>) -> BTreeSet<Key> + Send + 'static {
    let ctx = ctx.clone();
    move |st, ch| {
        ctx.watched(st, is_input);
        apply(st, ch)
    }
}

fn ns_name<K: Resource>(o: &K) -> (String, String) {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

/// Runs one watch into the state. The initial list and every relist are applied object by
/// object as they arrive (see [`listing`]); the objects a list did not return are deleted
/// when it ends.
async fn watch<K, F>(api: Api<K>, kind: &'static str, ctx: Arc<Ctx>, apply: F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: Fn(&mut State, Change<K>) -> BTreeSet<Key> + Send + 'static,
{
    ctx.handle.sync.started(kind, api.resource_url());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .backoff(ocm_runtime::watch::backoff())
        .boxed();
    let mut lister = Lister::default();
    let mut synced = false;
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(event) => match lister.step(event) {
                Some(change) => change,
                None => continue,
            },
            Err(e) => {
                // The watcher retries with backoff; say so once per error.
                tracing::warn!(kind, error = %e, "watch failed; retrying");
                ctx.handle.sync.failed(kind, &e);
                ctx.handle
                    .metrics
                    .watch_errors
                    .get_or_create(&metrics::KindLabels { kind: kind.into() })
                    .inc();
                continue;
            }
        };
        let relist = change.ends_list();
        let (affected, balance) = {
            let mut st = ctx.handle.state.write();
            let out = apply(&mut st, change);
            let balance = std::mem::take(&mut st.balance_dirty);
            // Counted once a list ends, not at each of its objects.
            if !lister.listing() {
                for (k, n) in st.snapshot.counts() {
                    ctx.handle.metrics.store(k, n);
                }
                ctx.handle.metrics.store("Placement", st.placements.len());
            }
            (out, balance)
        };
        ctx.enqueue(affected);
        if balance {
            ctx.balance_changed();
        }
        if relist {
            if !synced {
                synced = true;
                ctx.handle.sync.synced(kind);
                tracing::info!(kind, "watch synced");
            }
            // A relist may have missed deletions and updates alike: reschedule everything.
            ctx.enqueue_all();
        }
    }
}

/// The safety net: about every `Options::resync` (±10%, so that replicas and restarts do
/// not line up), the placements whose inputs changed since their last pass without an
/// event queuing them (see [`Ctx::stale`]). At rest, nothing.
async fn resync(ctx: Arc<Ctx>) {
    if ctx.options.resync.is_zero() {
        return;
    }
    loop {
        tokio::time::sleep(jittered(ctx.options.resync)).await;
        let of = ctx.clone();
        let keys = tokio::task::spawn_blocking(move || of.stale(false))
            .await
            .unwrap_or_default();
        tracing::debug!(placements = keys.len(), "resync");
        ctx.enqueue_quiet(keys);
    }
}

/// `period` times a random factor in [0.9, 1.1).
fn jittered(period: Duration) -> Duration {
    let r = std::hash::RandomState::new().build_hasher().finish();
    period.mul_f64(0.9 + 0.2 * (r >> 11) as f64 / (1u64 << 53) as f64)
}

/// On becoming the leader, reschedule everything: a standby's queue knows nothing. Waits for
/// the changes instead of polling them.
async fn leadership(ctx: Arc<Ctx>) {
    let mut was = false;
    loop {
        let now = ctx.options.leader.is_leader();
        if now && !was {
            tracing::info!("became the leader");
            ctx.enqueue_all();
        } else if !now && was {
            tracing::warn!("lost the leadership; writes stop");
        }
        was = now;
        ctx.options.leader.changes_from(now).await;
    }
}
