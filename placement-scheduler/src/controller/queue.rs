//! The work queue: a coalescing set of dirty placements, timers for requeues, and per-key
//! backoff for failed writes. A key is never handed to two workers at once; a key that
//! becomes dirty while it is being processed is handed out again when it is done.
//!
//! Pacing (leading edge): the first event for an idle placement is handed out at once.
//! Events that arrive while it is queued or being scheduled coalesce into one more pass. A
//! placement is in a burst when two or more events arrived since its last pass started (more
//! than one pass can absorb): its next pass then starts no sooner than the spacing after the
//! last one started, and so does every pass after it until two spaced passes in a row
//! absorbed a single event each. So a thousand score updates in a second cost about one pass
//! per spacing (a burst that trickles in also: its events wait for the spaced pass), while a
//! lone change, or changes one pass apart (a user, or a benchmark, that waits for each to
//! land), are scheduled at once; right after a burst, only the first two of them wait out
//! the spacing. Passes are never more than events. An optional trailing debounce holds every event back for a fixed delay instead
//! (the old behaviour, for operators who prefer fewer passes to latency).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

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
    /// In a burst, passes of one key start at least this far apart (0: no spacing).
    pub spacing: Duration,
}

impl Pacing {
    /// The controller's default (`--event-debounce=0s --min-pass-interval=100ms`): no added
    /// latency; a burst costs about as many passes as the old 100 ms debounce did.
    pub const DEFAULT: Pacing = Pacing {
        debounce: Duration::ZERO,
        spacing: Duration::from_millis(100),
    };
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
    /// Queued keys held back by the spacing, with the events their pass will absorb and the
    /// `lone` count of the pass before.
    spaced: HashMap<Key, (u32, u8)>,
    /// Keys whose last pass started less than the spacing ago (or are still processing).
    last: HashMap<Key, LastPass>,
    /// When each `last` entry stops mattering, in the order the passes started: entries are
    /// dropped from the front without walking the map.
    last_expiry: VecDeque<(Instant, Key)>,
    pacing: Pacing,
}

impl Inner {
    /// An event for the key.
    fn add(&mut self, key: Key, debounce: bool, now: Instant) {
        self.removed.remove(&key);
        if let Some(last) = self.last.get_mut(&key) {
            last.events = last.events.saturating_add(1);
        }
        if let Some((n, _)) = self.spaced.get_mut(&key) {
            *n = n.saturating_add(1);
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
            self.spaced.insert(key.clone(), (absorbed, lone));
        }
        self.queued.insert(key.clone());
        match spaced_until.max(debounced) {
            Some(at) => self
                .timers
                .entry(at)
                .or_default()
                .push((key, Due::Deferred)),
            None => self.ready.push_back(key),
        }
    }

    /// Hands the key to a worker.
    fn start(&mut self, key: Key, now: Instant) {
        self.queued.remove(&key);
        let (burst, lone) = match self.spaced.remove(&key) {
            None => (false, 0),
            Some((absorbed, _)) if absorbed >= 2 => (true, 0),
            Some((_, lone)) => {
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
                    if self.queued.contains(&key) {
                        self.ready.push_back(key);
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
pub struct Queue {
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
    pub fn with_pacing(pacing: Pacing) -> Self {
        let q = Queue::default();
        q.with(|i| i.pacing = pacing);
        q
    }

    /// Reports its depth by state into `depth` (`state` label) and the sizes of its per-key
    /// maps into `caches` (`cache` label), after every change.
    pub fn with_gauges(
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
        let mut guard = match self.inner.lock() {
            Ok(g) => g,
            // A panic elsewhere while holding the lock cannot leave the sets inconsistent in
            // a way that matters more than losing the queue: keep going.
            Err(poisoned) => poisoned.into_inner(),
        };
        let out = f(&mut guard);
        if let Some(g) = &self.gauges {
            g.set(&guard);
        }
        out
    }

    /// An event for the key: it is scheduled as the pacing says.
    pub fn add(&self, key: Key) {
        let now = Instant::now();
        self.with(|i| i.add(key, true, now));
        self.notify.notify_one();
    }

    pub fn add_all<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) {
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
    pub fn add_at(&self, key: Key, at: Instant) {
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
            i.timers.entry(at).or_default().push((key, Due::Requeue));
        });
        self.notify.notify_one();
    }

    /// Adds the key after its backoff, which doubles with each failure until [`Queue::forget`].
    pub fn add_rate_limited(&self, key: Key) {
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

    pub fn forget(&self, key: &Key) {
        self.with(|i| i.failures.remove(key));
    }

    /// The key's object is gone: its backoff and pending requeue go too (else a placement
    /// deleted while failing, or with a far toleration requeue, stays here). A key queued or
    /// being processed finishes normally (it finds nothing to schedule).
    pub fn remove(&self, key: &Key) {
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
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
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
    pub fn done(&self, key: &Key) {
        let now = Instant::now();
        let again = self.with(|i| {
            i.processing.remove(key);
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
                false
            }
        });
        if again {
            self.notify.notify_one();
        }
    }

    /// Keys waiting: queued (ready or deferred) or with a requeue time.
    pub fn len(&self) -> usize {
        self.with(|i| i.queued.len() + i.requeues.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for work and hands out every ready key (at most `max`), marking them processing.
    pub async fn next_batch(&self, max: usize) -> Vec<Key> {
        loop {
            let notified = self.notify.notified();
            let (batch, next_timer) = self.with(|i| {
                let now = Instant::now();
                i.promote_due(now);
                let n = i.ready.len().min(max);
                let batch: Vec<Key> = i.ready.drain(..n).collect();
                for k in &batch {
                    i.start(k.clone(), now);
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
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_within_the_debounce_is_one_pass() {
        let q = Queue::with_pacing(Pacing {
            debounce: Duration::from_millis(100),
            spacing: Duration::ZERO,
        });
        let start = Instant::now();
        for _ in 0..1000 {
            q.add(k("a"));
        }
        assert_eq!(q.next_batch(10).await, [k("a")]);
        assert_eq!(Instant::now() - start, Duration::from_millis(100));
        // A requeue is not debounced.
        q.done(&k("a"));
        let at = Instant::now() + Duration::from_secs(1);
        q.add_at(k("b"), at);
        assert_eq!(q.next_batch(10).await, [k("b")]);
        assert_eq!(Instant::now(), at);
    }

    fn k(n: &str) -> Key {
        ("ns".into(), n.into())
    }

    #[tokio::test(start_paused = true)]
    async fn coalesces_and_never_hands_out_a_key_twice() {
        let q = Queue::default();
        for _ in 0..1000 {
            q.add(k("a"));
        }
        q.add(k("b"));
        let batch = q.next_batch(100).await;
        assert_eq!(batch, [k("a"), k("b")]);
        // Dirty while processing: not handed out again until done.
        q.add(k("a"));
        q.add(k("c"));
        assert_eq!(q.next_batch(100).await, [k("c")]);
        q.done(&k("a"));
        assert_eq!(q.next_batch(100).await, [k("a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn timers_and_backoff() {
        let q = Queue::default();
        let start = Instant::now();
        q.add_at(k("t"), start + Duration::from_secs(10));
        assert_eq!(q.next_batch(10).await, [k("t")]);
        assert!(Instant::now() >= start + Duration::from_secs(10));
        q.done(&k("t"));
        for expected_ms in [5, 10, 20, 40] {
            let before = Instant::now();
            q.add_rate_limited(k("f"));
            assert_eq!(q.next_batch(10).await, [k("f")]);
            assert_eq!(Instant::now() - before, Duration::from_millis(expected_ms));
            q.done(&k("f"));
        }
        q.forget(&k("f"));
        let before = Instant::now();
        q.add_rate_limited(k("f"));
        q.next_batch(10).await;
        assert_eq!(Instant::now() - before, Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_key_leaves_nothing_behind() {
        let q = Queue::default();
        for n in 0..100 {
            let key = k(&n.to_string());
            q.add_rate_limited(key.clone());
            q.add_rate_limited(key.clone());
            q.add_at(key, Instant::now() + Duration::from_secs(3600));
        }
        assert_eq!(q.sizes(), (100, 100, 100, 0));
        for n in 0..100 {
            q.remove(&k(&n.to_string()));
        }
        assert_eq!(q.sizes(), (0, 0, 0, 0));
        assert!(q.is_empty());
        // Removed while a worker has it: the worker's backoff for it is dropped.
        q.add(k("w"));
        assert_eq!(q.next_batch(10).await, [k("w")]);
        q.remove(&k("w"));
        q.add_rate_limited(k("w"));
        q.done(&k("w"));
        assert_eq!(q.sizes(), (0, 0, 0, 0));
        // A key that is back later starts afresh.
        let before = Instant::now();
        q.add_rate_limited(k("0"));
        assert_eq!(q.next_batch(10).await, [k("0")]);
        assert_eq!(Instant::now() - before, Duration::from_millis(5));
    }
}

/// Issue 22: leading-edge pacing, bursts spaced, the depth by state.
#[cfg(test)]
mod pacing {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    const SPACING: Duration = Duration::from_millis(100);

    fn k(n: &str) -> Key {
        ("ns".into(), n.into())
    }

    fn queue() -> Arc<Queue> {
        Arc::new(Queue::with_pacing(Pacing::DEFAULT))
    }

    /// Nothing is handed out within an hour.
    async fn nothing_due(q: &Queue) {
        let next = tokio::time::timeout(Duration::from_secs(3600), q.next_batch(10)).await;
        assert!(next.is_err(), "handed out {next:?}");
    }

    /// A worker whose passes take `took`: the start time of each pass.
    fn worker(
        q: &Arc<Queue>,
        took: Duration,
    ) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<Instant>>>) {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let (q, out) = (q.clone(), starts.clone());
        let task = tokio::spawn(async move {
            loop {
                let batch = q.next_batch(1).await;
                out.lock().unwrap().push(Instant::now());
                tokio::time::sleep(took).await;
                for key in batch {
                    q.done(&key);
                }
            }
        });
        (task, starts)
    }

    #[test]
    fn the_default_adds_no_latency() {
        assert_eq!(Pacing::DEFAULT.debounce, Duration::ZERO);
        assert_eq!(Pacing::DEFAULT.spacing, SPACING);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_event_for_an_idle_key_is_handed_out_at_once() {
        let q = queue();
        let start = Instant::now();
        q.add(k("a"));
        assert_eq!(q.next_batch(10).await, [k("a")]);
        assert_eq!(Instant::now(), start);
        q.done(&k("a"));
        // Right after its pass, the next lone event is not held back either.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let again = Instant::now();
        q.add(k("a"));
        assert_eq!(q.next_batch(10).await, [k("a")]);
        assert_eq!(Instant::now(), again);
        q.done(&k("a"));
        nothing_due(&q).await;
    }

    #[tokio::test(start_paused = true)]
    async fn events_during_a_pass_make_exactly_one_more() {
        let q = queue();
        // One event during the pass: one more pass, at once.
        q.add(k("a"));
        assert_eq!(q.next_batch(10).await, [k("a")]);
        q.add(k("a"));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let done = Instant::now();
        q.done(&k("a"));
        assert_eq!(q.next_batch(10).await, [k("a")]);
        assert_eq!(Instant::now(), done);
        // A thousand during the pass: one more pass, the spacing after this one started.
        let started = Instant::now();
        for _ in 0..1000 {
            q.add(k("a"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        q.done(&k("a"));
        assert_eq!(q.next_batch(10).await, [k("a")]);
        assert_eq!(Instant::now(), started + SPACING);
        q.done(&k("a"));
        nothing_due(&q).await;
    }

    /// A thousand events over a second, while a worker's passes take 2 ms: about one pass per
    /// spacing, and the last pass starts after the last event (it sees the final state).
    #[tokio::test(start_paused = true)]
    async fn a_burst_over_a_second_costs_a_bounded_number_of_passes() {
        let q = queue();
        let (task, starts) = worker(&q, Duration::from_millis(2));
        let mut last_event = Instant::now();
        for _ in 0..1000 {
            q.add(k("a"));
            last_event = Instant::now();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        task.abort();
        let starts = starts.lock().unwrap().clone();
        // The first at once, then one per 100 ms over the second, and the one after the end.
        assert!(starts.len() <= 13, "{} passes", starts.len());
        assert!(starts.len() >= 10, "{} passes", starts.len());
        assert!(*starts.last().unwrap() >= last_event);
        for pair in starts.windows(2).skip(1) {
            assert!(pair[1] - pair[0] >= SPACING, "{starts:?}");
        }
        // Every key of the burst is forgotten once it is over.
        assert_eq!(q.sizes(), (0, 0, 0, 0));
    }

    /// A burst whose events trickle in one at a time, each after the pass before it is done
    /// (a busy apiserver sending a thousand watch events a few ms apart), still costs about
    /// one pass per spacing: while a burst goes on, events wait for the spaced pass.
    #[tokio::test(start_paused = true)]
    async fn a_trickling_burst_costs_a_bounded_number_of_passes() {
        let q = queue();
        let (task, starts) = worker(&q, Duration::from_millis(1));
        // It starts as a burst: two events arrive during the first pass.
        q.add(k("a"));
        tokio::time::sleep(Duration::from_micros(500)).await;
        assert_eq!(starts.lock().unwrap().len(), 1, "the first pass runs");
        q.add(k("a"));
        q.add(k("a"));
        let mut last_event = Instant::now();
        for _ in 0..300 {
            tokio::time::sleep(Duration::from_millis(3)).await;
            q.add(k("a"));
            last_event = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        task.abort();
        let starts = starts.lock().unwrap().clone();
        // 300 events over 0.9 s: the first pass at once, then one per 100 ms.
        assert!(starts.len() <= 12, "{} passes: {starts:?}", starts.len());
        assert!(*starts.last().unwrap() >= last_event);
    }

    /// Changes one pass apart (a user who waits for each to land) are each scheduled at once,
    /// for as long as they come; the spacing is only between the passes of a burst, and a
    /// key whose burst is over is scheduled at once again.
    #[tokio::test(start_paused = true)]
    async fn spacing_applies_between_passes_of_a_burst_only() {
        let q = queue();
        for _ in 0..50 {
            let sent = Instant::now();
            q.add(k("a"));
            assert_eq!(q.next_batch(10).await, [k("a")]);
            assert_eq!(Instant::now(), sent);
            tokio::time::sleep(Duration::from_millis(3)).await;
            q.done(&k("a"));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The same, each change arriving while the pass of the previous one still runs.
        q.add(k("b"));
        assert_eq!(q.next_batch(10).await, [k("b")]);
        for _ in 0..50 {
            q.add(k("b"));
            tokio::time::sleep(Duration::from_millis(3)).await;
            let done = Instant::now();
            q.done(&k("b"));
            assert_eq!(q.next_batch(10).await, [k("b")]);
            assert_eq!(Instant::now(), done);
        }
        q.done(&k("b"));
        // A burst: the next pass is spaced and absorbs both events; the burst goes on, so
        // the pass after it is spaced too, even for one event that comes after it is done.
        let first = Instant::now();
        q.add(k("c"));
        q.next_batch(10).await;
        q.add(k("c"));
        q.add(k("c"));
        q.done(&k("c"));
        assert_eq!(q.next_batch(10).await, [k("c")]);
        let second = Instant::now();
        assert_eq!(second, first + SPACING);
        q.done(&k("c"));
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.add(k("c"));
        assert_eq!(q.next_batch(10).await, [k("c")]);
        let third = Instant::now();
        assert_eq!(third, second + SPACING);
        q.done(&k("c"));
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.add(k("c"));
        assert_eq!(q.next_batch(10).await, [k("c")]);
        assert_eq!(Instant::now(), third + SPACING);
        q.done(&k("c"));
        // Two spaced passes in a row absorbed a single event each: the burst is over.
        // Changes one pass apart go at once again, within the spacing of the last pass (a
        // user waiting for each change to land pays the spacing twice after a burst, not at
        // every change).
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let lone = Instant::now();
            q.add(k("c"));
            assert_eq!(q.next_batch(10).await, [k("c")]);
            assert_eq!(Instant::now(), lone);
            tokio::time::sleep(Duration::from_millis(1)).await;
            q.done(&k("c"));
        }
        // Quiet for the spacing: the next event goes at once.
        tokio::time::sleep(SPACING).await;
        let quiet = Instant::now();
        q.add(k("c"));
        assert_eq!(q.next_batch(10).await, [k("c")]);
        assert_eq!(Instant::now(), quiet);
        q.done(&k("c"));
        // Spacing never holds back another key, nor a requeue's own time by more than it.
        nothing_due(&q).await;
    }

    /// Without spacing, events during a pass still coalesce into one more pass.
    #[tokio::test(start_paused = true)]
    async fn no_spacing_still_coalesces() {
        let q = Arc::new(Queue::with_pacing(Pacing::default()));
        q.add(k("a"));
        q.next_batch(10).await;
        for _ in 0..1000 {
            q.add(k("a"));
        }
        let done = Instant::now();
        q.done(&k("a"));
        assert_eq!(q.next_batch(10).await, [k("a")]);
        assert_eq!(Instant::now(), done);
        q.done(&k("a"));
        nothing_due(&q).await;
        assert_eq!(q.sizes(), (0, 0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn depth_by_state() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = super::super::metrics::Metrics::new(&mut registry);
        let q = Queue::with_pacing(Pacing::DEFAULT)
            .with_gauges(&metrics.queue_depth, &metrics.cache_entries);
        let depth = |state: &'static str| {
            metrics
                .queue_depth
                .get_or_create(&QueueLabels { state })
                .get()
        };
        let all = || [READY, DEFERRED, WAITING, PROCESSING].map(depth);
        assert_eq!(all(), [0, 0, 0, 0]);
        // A score's expiry an hour away: waiting, and nothing else.
        q.add_at(k("w"), Instant::now() + Duration::from_secs(3600));
        assert_eq!(all(), [0, 0, 1, 0]);
        q.add(k("a"));
        q.add(k("b"));
        assert_eq!(all(), [2, 0, 1, 0]);
        assert_eq!(q.next_batch(1).await, [k("a")]);
        assert_eq!(all(), [1, 0, 1, 1]);
        // A burst on a: deferred by the spacing once its pass is done.
        q.add(k("a"));
        q.add(k("a"));
        assert_eq!(all(), [1, 0, 1, 1]);
        q.done(&k("a"));
        assert_eq!(all(), [1, 1, 1, 0]);
        assert_eq!(q.next_batch(1).await, [k("b")]);
        q.done(&k("b"));
        assert_eq!(q.next_batch(1).await, [k("a")]);
        q.done(&k("a"));
        // Settled: only the far requeue is left.
        assert_eq!(all(), [0, 0, 1, 0]);
        q.remove(&k("w"));
        assert_eq!(all(), [0, 0, 0, 0]);
        let last = metrics
            .cache_entries
            .get_or_create(&CacheLabels { cache: LAST_PASSES })
            .get();
        assert!(last <= 2, "{last}");
    }
}
