//! The placement controller: watches the hub into in-memory stores, reschedules the
//! placements each change can affect, and writes what the core planned.
//!
//! ```text
//! watches -> State (Snapshot + Placements + Index) -> affected keys -> Queue
//! workers: Queue -> core::schedule (from an Arc<Snapshot>, on the blocking pool, no lock)
//!          -> Writer (ordered writes, events, status)
//! ```
//!
//! Only the leader's workers write; every replica keeps its stores warm. Each write is
//! checked against leadership and preconditioned on the objects it was computed from (see
//! [`writer`]); the binary exits when it loses the lease (see `main.rs`).

pub mod events;
pub mod metrics;
pub mod queue;
pub mod state;
pub mod triggers;
pub mod writer;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use serde::de::DeserializeOwned;

use crate::core::{self, Code, Laps};
use metrics::Metrics;
use queue::Queue;
use state::{Shared, State};
use triggers::Key;
use writer::Writer;

/// Who may write. The controller asks before every write.
pub trait Leader: Send + Sync + 'static {
    fn is_leader(&self) -> bool;
}

impl Leader for ocm_runtime::Leadership {
    fn is_leader(&self) -> bool {
        ocm_runtime::Leadership::is_leader(self)
    }
}

/// Always the leader (leader election disabled, or a test).
pub struct AlwaysLeader;

impl Leader for AlwaysLeader {
    fn is_leader(&self) -> bool {
        true
    }
}

/// How the controller runs.
pub struct Options {
    /// Placements scheduled at once (each one's writes stay in order).
    pub workers: usize,
    /// Every placement is rescheduled this often even without events.
    pub resync: Duration,
    /// Only placements in these namespaces (empty: all). Decisions in every namespace are
    /// still read (Balance counts them all).
    pub namespaces: Vec<String>,
    /// How long an event waits before its placements are scheduled (bursts coalesce).
    pub debounce: Duration,
    /// How long placements using Balance wait after other placements' decisions moved.
    /// Balance is a spreading hint: rescheduling every Balance user on every move makes
    /// placements chase each other (with ties, Balance alone never settles); upstream only
    /// looks again at its 10-minute resync. Here it is at most once per this delay.
    pub balance_delay: Duration,
    pub leader: Arc<dyn Leader>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 8,
            resync: Duration::from_secs(600),
            namespaces: Vec::new(),
            debounce: Duration::from_millis(100),
            balance_delay: Duration::from_secs(300),
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
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn schedule(&self, placement: &Placement) -> core::Outcome {
        // Not under the lock: a long pass must not hold up the watches.
        let snapshot = self.state.read().snapshot.share();
        let until = std::time::Instant::now() + snapshot.limits().cel_time;
        let deadline = || std::time::Instant::now() >= until;
        core::schedule_with(&snapshot, placement, now_seconds(), &mut (), &deadline)
    }
}

struct Ctx {
    /// A Balance wave is scheduled (see [`Ctx::balance_changed`]).
    balance_wave: AtomicBool,
    handle: Handle,
    queue: Queue,
    writer: Writer,
    options: Options,
}

impl Ctx {
    fn in_scope(&self, key: &Key) -> bool {
        self.options.namespaces.is_empty() || self.options.namespaces.contains(&key.0)
    }

    fn enqueue(&self, keys: BTreeSet<Key>) {
        let keys: Vec<Key> = keys.into_iter().filter(|k| self.in_scope(k)).collect();
        self.queue.add_all(keys.iter());
        self.handle
            .metrics
            .queue_depth
            .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
    }

    /// Other placements' decisions moved: reschedule every Balance user once, after the
    /// delay; changes meanwhile join the same wave.
    fn balance_changed(self: &Arc<Self>) {
        if self.balance_wave.swap(true, Ordering::SeqCst) {
            return;
        }
        let ctx = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ctx.options.balance_delay).await;
            ctx.balance_wave.store(false, Ordering::SeqCst);
            let keys: BTreeSet<Key> = ctx
                .handle
                .state
                .read()
                .index
                .balance_users()
                .cloned()
                .collect();
            ctx.enqueue(keys);
        });
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

/// A change a watch reports, after the initial list has been buffered.
enum Change<K> {
    Apply(K),
    Delete(K),
    /// A complete list: objects not in it are gone.
    Replace(Vec<K>),
}

/// Runs the controller until `shutdown` completes.
pub async fn run(
    client: Client,
    handle: Handle,
    options: Options,
    shutdown: impl Future<Output = ()>,
) {
    let (writer, recorder) = Writer::new(
        client.clone(),
        handle.metrics.clone(),
        options.leader.clone(),
    );
    let queue =
        Queue::with_debounce(options.debounce).with_gauges(handle.metrics.cache_entries.clone());
    let ctx = Arc::new(Ctx {
        balance_wave: AtomicBool::new(false),
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
        |st, ch| match ch {
            Change::Apply(c) => st.apply_cluster(c),
            Change::Delete(c) => st.delete_cluster(c.metadata.name.as_deref().unwrap_or_default()),
            Change::Replace(all) => {
                let keep: BTreeSet<String> =
                    all.iter().filter_map(|c| c.metadata.name.clone()).collect();
                let gone: Vec<String> = st
                    .snapshot
                    .clusters()
                    .map(|c| c.name.to_string())
                    .filter(|n| !keep.contains(n))
                    .collect();
                let mut out: BTreeSet<Key> =
                    gone.iter().flat_map(|n| st.delete_cluster(n)).collect();
                for c in all {
                    out.extend(st.apply_cluster(c));
                }
                out
            }
        },
    ));
    tasks.spawn(watch(
        Api::<ManagedClusterSet>::all(client.clone()),
        "ManagedClusterSet",
        ctx.clone(),
        |st, ch| match ch {
            Change::Apply(s) => st.apply_set(s),
            Change::Delete(s) => st.delete_set(s.metadata.name.as_deref().unwrap_or_default()),
            Change::Replace(all) => {
                let keep: BTreeSet<String> =
                    all.iter().filter_map(|s| s.metadata.name.clone()).collect();
                let mut out = BTreeSet::new();
                for n in st
                    .snapshot
                    .set_names()
                    .into_iter()
                    .filter(|n| !keep.contains(n))
                {
                    out.extend(st.delete_set(&n));
                }
                for s in all {
                    out.extend(st.apply_set(s));
                }
                out
            }
        },
    ));
    tasks.spawn(watch(
        Api::<ManagedClusterSetBinding>::all(client.clone()),
        "ManagedClusterSetBinding",
        ctx.clone(),
        |st, ch| match ch {
            Change::Apply(b) => st.apply_binding(&b),
            Change::Delete(b) => st.delete_binding(
                b.metadata.namespace.as_deref().unwrap_or_default(),
                b.metadata.name.as_deref().unwrap_or_default(),
            ),
            Change::Replace(all) => {
                let keep: BTreeSet<(String, String)> = all.iter().map(ns_name).collect();
                let mut out = BTreeSet::new();
                for (ns, n) in st
                    .snapshot
                    .binding_keys()
                    .into_iter()
                    .filter(|k| !keep.contains(k))
                {
                    out.extend(st.delete_binding(&ns, &n));
                }
                for b in &all {
                    out.extend(st.apply_binding(b));
                }
                out
            }
        },
    ));
    tasks.spawn(watch(
        Api::<AddOnPlacementScore>::all(client.clone()),
        "AddOnPlacementScore",
        ctx.clone(),
        |st, ch| match ch {
            Change::Apply(s) => st.apply_score(s),
            Change::Delete(s) => {
                let (ns, n) = ns_name(&s);
                st.delete_score(&ns, &n)
            }
            Change::Replace(all) => {
                let keep: BTreeSet<(String, String)> = all.iter().map(ns_name).collect();
                let mut out = BTreeSet::new();
                for (ns, n) in st
                    .snapshot
                    .score_keys()
                    .into_iter()
                    .filter(|k| !keep.contains(k))
                {
                    out.extend(st.delete_score(&ns, &n));
                }
                for s in all {
                    out.extend(st.apply_score(s));
                }
                out
            }
        },
    ));
    tasks.spawn(watch(
        Api::<PlacementDecision>::all(client.clone()),
        "PlacementDecision",
        ctx.clone(),
        |st, ch| match ch {
            Change::Apply(d) => st.apply_decision(d),
            Change::Delete(d) => {
                let (ns, n) = ns_name(&d);
                st.delete_decision(&ns, &n)
            }
            Change::Replace(all) => {
                let keep: BTreeSet<(String, String)> = all.iter().map(ns_name).collect();
                let mut out = BTreeSet::new();
                for (ns, n) in st
                    .snapshot
                    .decision_keys()
                    .into_iter()
                    .filter(|k| !keep.contains(k))
                {
                    out.extend(st.delete_decision(&ns, &n));
                }
                for d in all {
                    out.extend(st.apply_decision(d));
                }
                out
            }
        },
    ));
    let queue_of = ctx.clone();
    tasks.spawn(watch(
        Api::<Placement>::all(client.clone()),
        "Placement",
        ctx.clone(),
        move |st, ch| match ch {
            Change::Apply(p) => st.apply_placement(p),
            Change::Delete(p) => {
                queue_of.queue.remove(&ns_name(&p));
                st.delete_placement(&ns_name(&p))
            }
            Change::Replace(all) => {
                let keep: BTreeSet<Key> = all.iter().map(ns_name).collect();
                let gone: Vec<Key> = st
                    .placements
                    .keys()
                    .filter(|k| !keep.contains(*k))
                    .cloned()
                    .collect();
                for k in &gone {
                    queue_of.queue.remove(k);
                    st.delete_placement(k);
                }
                let mut out = BTreeSet::new();
                for p in all {
                    out.extend(st.apply_placement(p));
                }
                out
            }
        },
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

fn ns_name<K: Resource>(o: &K) -> (String, String) {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

/// Runs one watch into the state; the initial list (and every relist) is applied as a whole.
async fn watch<K, F>(api: Api<K>, kind: &'static str, ctx: Arc<Ctx>, apply: F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: Fn(&mut State, Change<K>) -> BTreeSet<Key> + Send + 'static,
{
    ctx.handle.sync.started(kind, api.resource_url());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .backoff(ocm_runtime::watch::backoff())
        .boxed();
    let mut buffer: Vec<K> = Vec::new();
    let mut synced = false;
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(Event::Apply(o)) => Change::Apply(o),
            Ok(Event::Delete(o)) => Change::Delete(o),
            Ok(Event::Init) => {
                buffer.clear();
                continue;
            }
            Ok(Event::InitApply(o)) => {
                buffer.push(o);
                continue;
            }
            Ok(Event::InitDone) => Change::Replace(std::mem::take(&mut buffer)),
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
        let relist = matches!(change, Change::Replace(_));
        let (affected, balance) = {
            let mut st = ctx.handle.state.write();
            let out = apply(&mut st, change);
            let balance = std::mem::take(&mut st.balance_dirty);
            for (k, n) in st.snapshot.counts() {
                ctx.handle.metrics.store(k, n);
            }
            ctx.handle.metrics.store("Placement", st.placements.len());
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
    snapshot: Arc<core::Snapshot>,
    placement: Arc<Placement>,
    now: Timestamp,
) -> Result<(core::Outcome, writer::Versions), tokio::task::JoinError> {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let mut laps = Stopwatch {
            last: started,
            metrics: &metrics,
        };
        let until = started + snapshot.limits().cel_time;
        let deadline = || std::time::Instant::now() >= until;
        let outcome = core::schedule_with(&snapshot, &placement, now, &mut laps, &deadline);
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

/// The time as the API stores it (whole seconds), so that a status computed now compares
/// equal to the same status read back.
fn now_seconds() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

async fn worker(ctx: Arc<Ctx>) {
    loop {
        while !ctx.options.leader.is_leader() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let batch = ctx.queue.next_batch(1).await;
        for key in batch {
            process(&ctx, &key).await;
            ctx.queue.done(&key);
        }
        ctx.handle
            .metrics
            .queue_depth
            .set(i64::try_from(ctx.queue.len()).unwrap_or(i64::MAX));
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
    let now = now_seconds();
    let taken = {
        let st = ctx.handle.state.read();
        st.placements
            .get(key)
            .cloned()
            .map(|p| (p, st.snapshot.share()))
    };
    let Some((placement, snapshot)) = taken else {
        // Deleted while its requeue or backoff was pending.
        ctx.queue.remove(key);
        return;
    };
    if placement.metadata.deletion_timestamp.is_some() || core::is_disabled(&placement) {
        return;
    }
    let scheduled = schedule_pass(ctx.handle.metrics.clone(), snapshot, placement.clone(), now);
    let (outcome, versions) = match scheduled.await {
        Ok(done) => done,
        Err(e) => {
            // A panic in the core: this placement only, retried with backoff.
            tracing::error!(namespace = key.0, name = key.1, error = %e, "scheduling failed");
            ctx.queue.add_rate_limited(key.clone());
            return;
        }
    };
    if outcome.status.code == Code::Transient {
        // Nothing to write (the decisions and status stay); try again with backoff.
        tracing::warn!(
            namespace = key.0,
            name = key.1,
            plugin = outcome.status.plugin,
            message = outcome.status.message,
            "scheduling failed for a transient reason; decisions kept, retrying with backoff"
        );
        ctx.handle
            .metrics
            .schedules
            .get_or_create(&metrics::ResultLabels {
                result: "transient".into(),
            })
            .inc();
        ctx.queue.add_rate_limited(key.clone());
        return;
    }
    let result = match outcome.status.code {
        Code::Success => "success",
        Code::Warning => "warning",
        Code::Error | Code::Transient => "error",
        Code::Misconfigured => "misconfigured",
        Code::Exceeded(_) => "limit_exceeded",
    };
    let written = ctx
        .writer
        .apply(&ctx.handle.state, &placement, &outcome, versions)
        .await;
    // Decisions written through the cache may have moved other placements' Balance.
    if std::mem::take(&mut ctx.handle.state.write().balance_dirty) {
        ctx.balance_changed();
    }
    match written {
        Ok(again) => {
            warn_capped_validity(ctx, key, &placement, &outcome);
            if let Some(e) = core::plan::limit_event(placement.status.as_ref(), &outcome) {
                ctx.writer.emit(&placement, &[e]);
            }
            ctx.enqueue(again);
            ctx.queue.forget(key);
            ctx.handle
                .metrics
                .schedules
                .get_or_create(&metrics::ResultLabels {
                    result: result.into(),
                })
                .inc();
            if outcome.status.code != Code::Success {
                tracing::info!(namespace = key.0, name = key.1, code = ?outcome.status.code, plugin = outcome.status.plugin, message = outcome.status.message, "scheduled with a problem");
            }
            if let Some(at) = outcome.requeue_at {
                let wait = at.duration_since(now);
                let wait =
                    Duration::try_from(wait).unwrap_or_default() + Duration::from_millis(100);
                ctx.queue
                    .add_at(key.clone(), tokio::time::Instant::now() + wait);
            }
        }
        Err(writer::WriteError::NotLeader(what)) => {
            // The new leader schedules everything when it takes over.
            tracing::info!(
                namespace = key.0,
                name = key.1,
                what,
                "not the leader any more; writes stopped"
            );
        }
        Err(e) => {
            ctx.handle
                .metrics
                .schedules
                .get_or_create(&metrics::ResultLabels {
                    result: "write_error".into(),
                })
                .inc();
            tracing::warn!(namespace = key.0, name = key.1, error = %e, "writing the decisions failed; retrying with backoff");
            ctx.queue.add_rate_limited(key.clone());
        }
    }
}

/// The `ScoreValidityCapped` Warning, when the placement's capped scores changed since the
/// last one (a placement that keeps using a capped score is not warned at every pass).
fn warn_capped_validity(ctx: &Ctx, key: &Key, placement: &Placement, outcome: &core::Outcome) {
    let changed = {
        let mut st = ctx.handle.state.write();
        let last = st.validity_warned.get(key).map_or(&[][..], Vec::as_slice);
        if last == outcome.validity_capped.as_slice() {
            false
        } else if outcome.validity_capped.is_empty() {
            st.validity_warned.remove(key);
            false
        } else {
            st.validity_warned
                .insert(key.clone(), outcome.validity_capped.clone());
            true
        }
    };
    if changed && let Some(event) = core::plan::validity_capped_event(&outcome.validity_capped) {
        tracing::warn!(
            namespace = key.0,
            name = key.1,
            note = event.note,
            "scores valid beyond the bound"
        );
        ctx.writer.emit(placement, &[event]);
    }
}

async fn resync(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(ctx.options.resync);
    tick.tick().await;
    loop {
        tick.tick().await;
        ctx.enqueue_all();
    }
}

/// On becoming the leader, reschedule everything: a standby's queue knows nothing.
async fn leadership(ctx: Arc<Ctx>) {
    let was = AtomicBool::new(false);
    loop {
        let now = ctx.options.leader.is_leader();
        if now && !was.swap(true, Ordering::SeqCst) {
            tracing::info!("became the leader");
            ctx.enqueue_all();
        } else if !now && was.swap(false, Ordering::SeqCst) {
            tracing::warn!("lost the leadership; writes stop");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
