//! The work queue: a coalescing set of dirty placements, timers for requeues, and per-key
//! backoff for failed writes. A key is never handed to two workers at once; a key that
//! becomes dirty while it is being processed is handed out again when it is done. However
//! many events hit one placement while it waits, it is scheduled once; an event waits a short
//! debounce first, so that a burst (a thousand score updates in a second) costs a handful of
//! passes, not a thousand.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::CacheLabels;
use super::triggers::Key;

/// Why a timer holds a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The key is queued and waits out the debounce.
    Debounced,
    /// A requeue (a toleration expiry, a backoff): add the key when due.
    Requeue,
}

#[derive(Default)]
struct Inner {
    ready: VecDeque<Key>,
    /// Keys waiting, in `ready` or in a debounce timer (never both).
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
    debounce: Duration,
}

impl Inner {
    fn add(&mut self, key: Key, debounce: bool, now: Instant) {
        self.removed.remove(&key);
        if self.processing.contains(&key) {
            self.dirty_while_processing.insert(key);
        } else if self.queued.insert(key.clone()) {
            if debounce && !self.debounce.is_zero() {
                self.timers
                    .entry(now + self.debounce)
                    .or_default()
                    .push((key, Due::Debounced));
            } else {
                self.ready.push_back(key);
            }
        }
    }

    fn promote_due(&mut self, now: Instant) {
        let later = self.timers.split_off(&(now + Duration::from_nanos(1)));
        let due = std::mem::replace(&mut self.timers, later);
        for (key, why) in due.into_values().flatten() {
            match why {
                Due::Debounced => {
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
}

/// Backoff after failures: 5 ms doubling up to this cap (upstream: 1000 s; a placement whose
/// writes keep failing is retried at least every 5 minutes here).
const MAX_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Default)]
pub struct Queue {
    inner: Mutex<Inner>,
    notify: Notify,
    /// The sizes of the per-key maps (`cache_entries`), set after every change.
    gauges: Option<Family<CacheLabels, Gauge>>,
}

/// The `cache` label values of the queue's per-key maps.
const FAILURES: &str = "queue_failures";
const REQUEUES: &str = "queue_requeues";

impl Queue {
    /// A queue whose events wait `debounce` before they are handed out.
    pub fn with_debounce(debounce: Duration) -> Self {
        let q = Queue::default();
        q.with(|i| i.debounce = debounce);
        q
    }

    /// Reports the sizes of its per-key maps into `gauges` (by `cache` label).
    pub fn with_gauges(mut self, gauges: Family<CacheLabels, Gauge>) -> Self {
        self.gauges = Some(gauges);
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
        // (Not the timers: counting them walks the map. A removed key's stale timer entries
        // are dropped when due.)
        if let Some(g) = &self.gauges {
            for (cache, n) in [
                (FAILURES, guard.failures.len()),
                (REQUEUES, guard.requeues.len()),
            ] {
                g.get_or_create(&CacheLabels { cache })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        out
    }

    /// Adds a key after the debounce.
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
        });
    }

    /// Entries in the per-key maps: (backoff counters, requeues, timers).
    pub fn sizes(&self) -> (usize, usize, usize) {
        self.with(|i| {
            (
                i.failures.len(),
                i.requeues.len(),
                i.timers.values().map(Vec::len).sum(),
            )
        })
    }

    /// Marks a key handed out by [`Queue::next_batch`] as done.
    pub fn done(&self, key: &Key) {
        let now = Instant::now();
        let again = self.with(|i| {
            i.processing.remove(key);
            i.removed.remove(key);
            if i.dirty_while_processing.remove(key) {
                i.add(key.clone(), true, now);
                true
            } else {
                false
            }
        });
        if again {
            self.notify.notify_one();
        }
    }

    /// Keys waiting: queued (ready or debouncing) or with a requeue time.
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
                i.promote_due(Instant::now());
                let n = i.ready.len().min(max);
                let batch: Vec<Key> = i.ready.drain(..n).collect();
                for k in &batch {
                    i.queued.remove(k);
                    i.processing.insert(k.clone());
                }
                (batch, i.timers.keys().next().copied())
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
        let q = Queue::with_debounce(Duration::from_millis(100));
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
        assert_eq!(q.sizes(), (100, 100, 100));
        for n in 0..100 {
            q.remove(&k(&n.to_string()));
        }
        assert_eq!(q.sizes(), (0, 0, 0));
        assert!(q.is_empty());
        // Removed while a worker has it: the worker's backoff for it is dropped.
        q.add(k("w"));
        assert_eq!(q.next_batch(10).await, [k("w")]);
        q.remove(&k("w"));
        q.add_rate_limited(k("w"));
        q.done(&k("w"));
        assert_eq!(q.sizes(), (0, 0, 0));
        // A key that is back later starts afresh.
        let before = Instant::now();
        q.add_rate_limited(k("0"));
        assert_eq!(q.next_batch(10).await, [k("0")]);
        assert_eq!(Instant::now() - before, Duration::from_millis(5));
    }
}
