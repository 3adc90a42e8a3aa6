//! The work queue: a coalescing set of dirty placements, timers for requeues, and per-key
//! backoff for failed writes. A key is never handed to two workers at once; a key that
//! becomes dirty while it is being processed is handed out again when it is done.
//!
//! Pacing (leading edge): the first event for an idle placement is made ready at once.
//! Events that arrive while it is queued or being scheduled coalesce into one more pass. A
//! placement is in a burst when two or more further events arrived since its last pass
//! started, or while it waited for a worker (more than one pass can absorb). In a burst its
//! next pass waits until its events pause for the spacing (and starts no sooner than the
//! spacing after the last one started), but no longer than the burst's longest delay after
//! the first event it waits for; so a thousand score updates in a second cost a placement
//! its leading pass and one after the burst, and a placement that was still waiting for a
//! worker when the burst began costs one. A burst goes on until two spaced passes in a row
//! absorbed a single event each. A lone change, or changes one pass apart (a user, or a
//! benchmark, that waits for each to land), are scheduled at once; right after a burst, only
//! the first two of them wait out the spacing. Passes are never more than events. An
//! optional trailing debounce holds every event back for a fixed delay instead (the old
//! behaviour, for operators who prefer fewer passes to latency).
//!
//! Fairness between namespaces (tenants): a namespace whose placements hold their share of the
//! workers ([`Fairness`]) lets the keys of other namespaces go first, in queue order; beyond
//! its share it takes a worker only when no other namespace's key is ready and another worker
//! stays free, so a namespace that arrives later always finds one. A tenant who creates many
//! expensive placements holds at most its share while others wait, never every worker.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::{CacheLabels, QueueLabels};
use super::triggers::Key;

/// Why a timer holds a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The key is queued and waits out the debounce or the burst spacing.
    Deferred,
    /// A requeue (a toleration expiry, a backoff): add the key when due.
    Requeue,
}

/// How the queue paces the passes of one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pacing {
    /// Every event waits this long before its pass (0: none, the leading edge).
    pub debounce: Duration,
    /// In a burst, passes of one key start at least this far apart, and a pass waits for the
    /// key's events to pause this long (0: no spacing, no burst).
    pub spacing: Duration,
    /// In a burst, the longest a pass waits for the events to pause, from the first event it
    /// waits for: a storm that never pauses still gets a pass this often.
    pub max_delay: Duration,
}

impl Pacing {
    /// The controller's default (`--event-debounce=0s --min-pass-interval=100ms
    /// --max-burst-delay=2s`): no added latency for a lone event; a burst costs no more passes
    /// than the old 100 ms debounce did.
    pub const DEFAULT: Pacing = Pacing {
        debounce: Duration::ZERO,
        spacing: Duration::from_millis(100),
        max_delay: Duration::from_secs(2),
    };
}

/// How the workers are shared among namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fairness {
    /// The workers taking keys.
    pub(crate) workers: usize,
    /// Keys of one namespace processed at once while other namespaces' keys wait.
    pub(crate) per_namespace: usize,
}

impl Fairness {
    /// Half the workers each (rounded up), the controller's default.
    pub(crate) fn halves(workers: usize) -> Self {
        Self {
            workers,
            per_namespace: workers.div_ceil(2).max(1),
        }
    }
}

/// A key's last pass, kept while it can still space the next one.
struct LastPass {
    started: Instant,
    /// Events for the key since the pass started.
    events: u32,
    /// The pass was held back by the spacing and the burst goes on: the next pass is spaced
    /// even after a single event.
    burst: bool,
    /// Spaced passes in a row, up to this one, that absorbed a single event each.
    lone: u8,
}

/// A queued key held back by the burst spacing.
struct Spaced {
    /// The events its pass will absorb.
    absorbed: u32,
    /// The `lone` count of the pass before.
    lone: u8,
    /// The first event it waits for (the longest delay counts from here).
    since: Instant,
    /// The latest event for it.
    last_event: Instant,
    /// Events came after the one that deferred it: the burst goes on, wait for a pause.
    more: bool,
}

/// A key in `ready`, waiting for a worker.
struct ReadyWait {
    /// The first event it waits for.
    since: Instant,
    /// Events after the one that made it ready.
    events: u32,
    last_event: Instant,
}

#[derive(Default)]
struct Inner {
    ready: VecDeque<Key>,
    /// Keys waiting, in `ready` or in a deferred timer (never both).
    queued: HashSet<Key>,
    processing: HashSet<Key>,
    dirty_while_processing: HashSet<Key>,
    timers: BTreeMap<Instant, Vec<(Key, Due)>>,
    /// The earliest requeue time of each key with one: later requeues of a key are dropped,
    /// and timer entries that no longer match are stale (so timers never pile up).
    requeues: HashMap<Key, Instant>,
    failures: HashMap<Key, u32>,
    /// Keys removed (their object deleted) while a worker had them: the worker's requeue or
    /// backoff for them is dropped. Cleared when the key is done or added again.
    removed: HashSet<Key>,
    /// Queued keys held back by the spacing.
    spaced: HashMap<Key, Spaced>,
    /// Keys in `ready` (with spacing on): a key that a burst reaches while it waits for a
    /// worker waits for the burst instead.
    waiting_worker: HashMap<Key, ReadyWait>,
    /// Keys whose last pass started less than the spacing ago (or are still processing).
    last: HashMap<Key, LastPass>,
    /// When each `last` entry stops mattering, in the order the passes started: entries are
    /// dropped from the front without walking the map.
    last_expiry: VecDeque<(Instant, Key)>,
    pacing: Pacing,
    /// The share of workers per namespace (`None`: first come, first served).
    fairness: Option<Fairness>,
    /// Keys being processed, by namespace.
    busy: HashMap<Arc<str>, usize>,
}

impl Inner {
    /// An event for the key.
    fn add(&mut self, key: Key, debounce: bool, now: Instant) {
        self.removed.remove(&key);
        if let Some(last) = self.last.get_mut(&key) {
            last.events = last.events.saturating_add(1);
        }
        if let Some(s) = self.spaced.get_mut(&key) {
            s.absorbed = s.absorbed.saturating_add(1);
            s.last_event = now;
            s.more = true;
        }
        if let Some(w) = self.waiting_worker.get_mut(&key) {
            w.events = w.events.saturating_add(1);
            w.last_event = now;
        }
        if self.processing.contains(&key) {
            self.dirty_while_processing.insert(key);
        } else if !self.queued.contains(&key) {
            self.enqueue(key, debounce, now);
        }
    }

    /// Queues an idle key: at once, or after the debounce or the burst spacing.
    fn enqueue(&mut self, key: Key, debounce: bool, now: Instant) {
        let last = self.last.get(&key);
        let spaced_until = last
            .filter(|l| l.burst || l.events >= 2)
            .map(|l| l.started + self.pacing.spacing)
            .filter(|at| *at > now);
        let debounced =
            (debounce && !self.pacing.debounce.is_zero()).then(|| now + self.pacing.debounce);
        if spaced_until.is_some() {
            // The events since the last pass started that this one absorbs (the last pass
            // had not seen them: they came during it or after).
            let (absorbed, lone) = last.map_or((1, 0), |l| (l.events.max(1), l.lone));
            self.spaced.insert(
                key.clone(),
                Spaced {
                    absorbed,
                    lone,
                    since: now,
                    last_event: now,
                    more: false,
                },
            );
        }
        self.queued.insert(key.clone());
        match spaced_until.max(debounced) {
            Some(at) => self.timer(at, key, Due::Deferred),
            None => self.make_ready(key, now),
        }
    }

    /// Sets a timer. Most instants hold one key (each requeue time is its own): a vector
    /// for one, not the default four.
    fn timer(&mut self, at: Instant, key: Key, why: Due) {
        self.timers
            .entry(at)
            .or_insert_with(|| Vec::with_capacity(1))
            .push((key, why));
    }

    fn make_ready(&mut self, key: Key, since: Instant) {
        if !self.pacing.spacing.is_zero() {
            self.waiting_worker.insert(
                key.clone(),
                ReadyWait {
                    since,
                    events: 0,
                    last_event: since,
                },
            );
        }
        self.ready.push_back(key);
    }

    /// When a key held back by a burst may go: its events paused for the spacing, or it has
    /// waited the longest delay. `None`: now.
    fn burst_wait(&self, since: Instant, last_event: Instant, now: Instant) -> Option<Instant> {
        let at = (last_event + self.pacing.spacing).min(since + self.pacing.max_delay);
        (at > now).then_some(at)
    }

    /// A ready key that a burst reached while it waited for a worker (two or more further
    /// events) waits for the burst to pause instead; `true` when it was held back.
    fn hold_for_burst(&mut self, key: &Key, now: Instant) -> bool {
        let Some(w) = self.waiting_worker.remove(key) else {
            return false;
        };
        if w.events < 2 {
            return false;
        }
        let Some(at) = self.burst_wait(w.since, w.last_event, now) else {
            return false;
        };
        self.spaced.insert(
            key.clone(),
            Spaced {
                absorbed: w.events.saturating_add(1),
                lone: 0,
                since: w.since,
                last_event: w.last_event,
                more: true,
            },
        );
        self.timer(at, key.clone(), Due::Deferred);
        true
    }

    /// The next ready key a worker may take: the first in queue order whose namespace holds
    /// less than its share; else the first of any, when no namespace is below its share and
    /// a worker stays free for one that comes later; else none.
    fn pop_ready(&mut self) -> Option<Key> {
        let Some(fair) = self.fairness else {
            return self.ready.pop_front();
        };
        let held = |ns: &Arc<str>| self.busy.get(ns).copied().unwrap_or(0);
        let mut beyond = None;
        let mut at = None;
        for (n, key) in self.ready.iter().enumerate() {
            if held(&key.0) < fair.per_namespace {
                at = Some(n);
                break;
            }
            beyond = beyond.or(Some(n));
        }
        let at = at.or(beyond.filter(|_| self.processing.len() + 1 < fair.workers))?;
        self.ready.remove(at)
    }

    /// Hands the key to a worker.
    fn start(&mut self, key: Key, now: Instant) {
        *self.busy.entry(key.0.clone()).or_default() += 1;
        self.queued.remove(&key);
        self.waiting_worker.remove(&key);
        let (burst, lone) = match self.spaced.remove(&key) {
            None => (false, 0),
            Some(Spaced { absorbed, .. }) if absorbed >= 2 => (true, 0),
            Some(Spaced { lone, .. }) => {
                let lone = lone.saturating_add(1);
                (lone < LONE_PASSES_END_A_BURST, lone)
            }
        };
        if !self.pacing.spacing.is_zero() {
            self.last.insert(
                key.clone(),
                LastPass {
                    started: now,
                    events: 0,
                    burst,
                    lone,
                },
            );
            self.last_expiry
                .push_back((now + self.pacing.spacing, key.clone()));
        }
        self.processing.insert(key);
    }

    /// Drops the `last` entries that can no longer space anything.
    fn expire_last(&mut self, now: Instant) {
        while let Some((at, _)) = self.last_expiry.front()
            && *at <= now
        {
            let Some((_, key)) = self.last_expiry.pop_front() else {
                break;
            };
            // A key still processing keeps its entry (its `done` drops it); a later pass of
            // the key has an expiry of its own further back.
            if !self.processing.contains(&key)
                && self
                    .last
                    .get(&key)
                    .is_some_and(|l| l.started + self.pacing.spacing <= now)
            {
                self.last.remove(&key);
            }
        }
    }

    fn promote_due(&mut self, now: Instant) {
        self.expire_last(now);
        let later = self.timers.split_off(&(now + Duration::from_nanos(1)));
        let due = std::mem::replace(&mut self.timers, later);
        for (key, why) in due.into_values().flatten() {
            match why {
                Due::Deferred => {
                    if !self.queued.contains(&key) {
                        continue;
                    }
                    // A burst that goes on: wait for its events to pause (within the longest
                    // delay).
                    let later = self
                        .spaced
                        .get(&key)
                        .filter(|s| s.more)
                        .and_then(|s| self.burst_wait(s.since, s.last_event, now));
                    match later {
                        Some(at) => self.timer(at, key, Due::Deferred),
                        None => {
                            let since = self.spaced.get(&key).map_or(now, |s| s.since);
                            self.make_ready(key, since);
                        }
                    }
                }
                Due::Requeue => {
                    if self.requeues.get(&key).is_some_and(|at| *at <= now) {
                        self.requeues.remove(&key);
                        self.add(key, false, now);
                    }
                }
            }
        }
    }

    /// The next time something is due: a timer, or a `last` entry to drop.
    fn next_wakeup(&self) -> Option<Instant> {
        let timer = self.timers.keys().next().copied();
        let expiry = self.last_expiry.front().map(|(at, _)| *at);
        match (timer, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Spaced passes in a row that absorb a single event each end a burst: events come one pass
/// apart again. Two, not one: a burst whose events trickle in may leave one such pass at a
/// lull (between the chunks of a client's concurrent writes) and go on.
const LONE_PASSES_END_A_BURST: u8 = 2;

/// Backoff after failures: 5 ms doubling up to this cap (upstream: 1000 s; a placement whose
/// writes keep failing is retried at least every 5 minutes here).
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The queue's gauges, resolved once (a set is an atomic store, no label lookup).
struct Gauges {
    /// `placement_queue_depth` by state.
    ready: Gauge,
    deferred: Gauge,
    waiting: Gauge,
    processing: Gauge,
    /// `placement_cache_entries` of the per-key maps.
    failures: Gauge,
    requeues: Gauge,
    last_passes: Gauge,
}

impl Gauges {
    fn set(&self, i: &Inner) {
        let n = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.ready.set(n(i.ready.len()));
        self.deferred
            .set(n(i.queued.len().saturating_sub(i.ready.len())));
        self.waiting.set(n(i.requeues.len()));
        self.processing.set(n(i.processing.len()));
        self.failures.set(n(i.failures.len()));
        self.requeues.set(n(i.requeues.len()));
        self.last_passes.set(n(i.last.len()));
    }
}

#[derive(Default)]
pub(crate) struct Queue {
    inner: Mutex<Inner>,
    notify: Notify,
    gauges: Option<Gauges>,
}

/// The `cache` label values of the queue's per-key maps.
const FAILURES: &str = "queue_failures";
const REQUEUES: &str = "queue_requeues";
const LAST_PASSES: &str = "queue_last_passes";

/// The `state` label values of `placement_queue_depth`.
pub const READY: &str = "ready";
pub const DEFERRED: &str = "deferred";
pub const WAITING: &str = "waiting";
pub const PROCESSING: &str = "processing";

impl Queue {
    /// A queue that paces each key's passes as `pacing` says.
    pub(crate) fn with_pacing(pacing: Pacing) -> Self {
        let q = Queue::default();
        q.with(|i| i.pacing = pacing);
        q
    }

    /// Shares the workers among namespaces as `fairness` says.
    pub(crate) fn with_fairness(self, fairness: Fairness) -> Self {
        self.with(|i| i.fairness = Some(fairness));
        self
    }

    /// Reports its depth by state into `depth` (`state` label) and the sizes of its per-key
    /// maps into `caches` (`cache` label), after every change.
    pub(crate) fn with_gauges(
        mut self,
        depth: &Family<QueueLabels, Gauge>,
        caches: &Family<CacheLabels, Gauge>,
    ) -> Self {
        let state = |state| depth.get_or_create(&QueueLabels { state }).clone();
        let cache = |cache| caches.get_or_create(&CacheLabels { cache }).clone();
        self.gauges = Some(Gauges {
            ready: state(READY),
            deferred: state(DEFERRED),
            waiting: state(WAITING),
            processing: state(PROCESSING),
            failures: cache(FAILURES),
            requeues: cache(REQUEUES),
            last_passes: cache(LAST_PASSES),
        });
        self.with(|_| ());
        self
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut guard = self.inner.lock();
        let out = f(&mut guard);
        if let Some(g) = &self.gauges {
            g.set(&guard);
        }
        out
    }

    /// An event for the key: it is scheduled as the pacing says.
    #[cfg(test)]
    pub(crate) fn add(&self, key: Key) {
        let now = Instant::now();
        self.with(|i| i.add(key, true, now));
        self.notify.notify_one();
    }

    pub(crate) fn add_all<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) {
        let mut any = false;
        let now = Instant::now();
        self.with(|i| {
            for k in keys {
                i.add(k.clone(), true, now);
                any = true;
            }
        });
        if any {
            self.notify.notify_one();
        }
    }

    /// Adds the key at `at` (earlier timers for it are kept; the key is scheduled once when due).
    pub(crate) fn add_at(&self, key: Key, at: Instant) {
        self.with(|i| {
            if i.removed.contains(&key) {
                return;
            }
            // Within a second of the one already set is the same requeue (requeue times come
            // from whole-second timestamps); so a key adds at most one timer per second.
            if i.requeues
                .get(&key)
                .is_some_and(|t| *t <= at + Duration::from_secs(1))
            {
                return;
            }
            i.requeues.insert(key.clone(), at);
            i.timer(at, key, Due::Requeue);
        });
        self.notify.notify_one();
    }

    /// The key's requeue is now `at`, whether earlier or later than the one set: a pass's
    /// outcome says when it must run again, and a pending requeue from an earlier pass is
    /// stale (else a timer set before a renewal would still fire at the old expiry).
    pub(crate) fn replace_at(&self, key: Key, at: Instant) {
        self.with(|i| {
            if i.removed.contains(&key) {
                return;
            }
            if let Some(old) = i.requeues.insert(key.clone(), at)
                && let Some(due) = i.timers.get_mut(&old)
            {
                due.retain(|(k, why)| !(*k == key && *why == Due::Requeue));
                if due.is_empty() {
                    i.timers.remove(&old);
                }
            }
            i.timer(at, key, Due::Requeue);
        });
        self.notify.notify_one();
    }

    /// Adds the key after its backoff, which doubles with each failure until [`Queue::forget`].
    pub(crate) fn add_rate_limited(&self, key: Key) {
        let delay = self.with(|i| {
            if i.removed.contains(&key) {
                return None;
            }
            let n = i.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            let exp = (*n - 1).min(30);
            Some(
                Duration::from_millis(5)
                    .saturating_mul(1u32 << exp)
                    .min(MAX_BACKOFF),
            )
        });
        if let Some(delay) = delay {
            self.add_at(key, Instant::now() + delay);
        }
    }

    pub(crate) fn forget(&self, key: &Key) {
        self.with(|i| i.failures.remove(key));
    }

    /// The key's object is gone: its backoff and pending requeue go too (else a placement
    /// deleted while failing, or with a far toleration requeue, stays here). A key queued or
    /// being processed finishes normally (it finds nothing to schedule).
    pub(crate) fn remove(&self, key: &Key) {
        self.with(|i| {
            i.failures.remove(key);
            if i.processing.contains(key) {
                i.removed.insert(key.clone());
            }
            if let Some(at) = i.requeues.remove(key)
                && let Some(due) = i.timers.get_mut(&at)
            {
                due.retain(|(k, why)| !(k == key && *why == Due::Requeue));
                if due.is_empty() {
                    i.timers.remove(&at);
                }
            }
            if !i.processing.contains(key) {
                i.last.remove(key);
            }
        });
    }

    /// Entries in the per-key maps: (backoff counters, requeues, timers, last passes).
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize, usize, usize) {
        self.with(|i| {
            (
                i.failures.len(),
                i.requeues.len(),
                i.timers.values().map(Vec::len).sum(),
                i.last.len(),
            )
        })
    }

    /// Marks a key handed out by [`Queue::next_batch`] as done.
    pub(crate) fn done(&self, key: &Key) {
        let now = Instant::now();
        let again = self.with(|i| {
            if i.processing.remove(key)
                && let Some(n) = i.busy.get_mut(&key.0)
            {
                *n -= 1;
                if *n == 0 {
                    i.busy.remove(&key.0);
                }
            }
            i.removed.remove(key);
            // A pass that outlasted the spacing: its entry's expiry went by while it ran.
            if i.last
                .get(key)
                .is_some_and(|l| l.started + i.pacing.spacing <= now)
            {
                i.last.remove(key);
            }
            if i.dirty_while_processing.remove(key) {
                // Its events were counted when they came (they decide the spacing).
                i.enqueue(key.clone(), true, now);
                true
            } else {
                // A ready key of this namespace may have waited for its share.
                i.fairness.is_some() && !i.ready.is_empty()
            }
        });
        if again {
            self.notify.notify_one();
        }
    }

    /// Keys waiting: queued (ready or deferred) or with a requeue time.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.with(|i| i.queued.len() + i.requeues.len())
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for work and hands out every ready key (at most `max`), marking them processing.
    pub(crate) async fn next_batch(&self, max: usize) -> Vec<Key> {
        loop {
            let notified = self.notify.notified();
            let (batch, next_timer) = self.with(|i| {
                let now = Instant::now();
                i.promote_due(now);
                let mut batch = Vec::new();
                while batch.len() < max
                    && let Some(k) = i.pop_ready()
                {
                    if !i.hold_for_burst(&k, now) {
                        i.start(k.clone(), now);
                        batch.push(k);
                    }
                }
                (batch, i.next_wakeup())
            });
            if !batch.is_empty() {
                return batch;
            }
            match next_timer {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// Leading-edge pacing, bursts spaced, the depth by state.
#[cfg(test)]
mod pacing;
