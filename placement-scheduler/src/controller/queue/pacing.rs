#![allow(clippy::unwrap_used)]
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::super::metrics::{CacheLabels, QueueLabels};
use super::{DEFERRED, Key, LAST_PASSES, PROCESSING, Pacing, Queue, READY, WAITING};

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

/// An event for each of `keys` every millisecond for `lasting`, then ten quiet seconds while
/// the worker catches up (stopped then): the last event's time and the passes' starts.
async fn storm(
    q: &Arc<Queue>,
    keys: &[Key],
    lasting: Duration,
    (task, starts): (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<Instant>>>),
) -> (Instant, Vec<Instant>) {
    let begin = Instant::now();
    let mut last_event = begin;
    while last_event - begin < lasting {
        q.add_all(keys);
        last_event = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    task.abort();
    let starts = starts.lock().unwrap().clone();
    (last_event, starts)
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

/// A thousand events over a second, while a worker's passes take 2 ms: the leading pass, and
/// one when the events have paused for the spacing (it sees the final state).
#[tokio::test(start_paused = true)]
async fn a_burst_over_a_second_costs_two_passes() {
    let q = queue();
    let passes = worker(&q, Duration::from_millis(2));
    let (last_event, starts) = storm(&q, &[k("a")], Duration::from_secs(1), passes).await;
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[1], last_event + SPACING);
    // Every key of the burst is forgotten once it is over.
    assert_eq!(q.sizes(), (0, 0, 0, 0));
}

/// A storm that never pauses still gets a pass every `max_delay` (the first at once, and one
/// after the storm).
#[tokio::test(start_paused = true)]
async fn a_storm_that_never_pauses_gets_a_pass_every_max_delay() {
    let q = queue();
    let max_delay = Pacing::DEFAULT.max_delay;
    let passes = worker(&q, Duration::from_millis(2));
    let (last_event, starts) = storm(&q, &[k("a")], Duration::from_secs(5), passes).await;
    // 0, about 2 s, about 4 s, and after the storm.
    assert_eq!(starts.len(), 4, "{starts:?}");
    for pair in starts.windows(2) {
        assert!(
            pair[1] - pair[0] <= max_delay + Duration::from_millis(5),
            "{starts:?}"
        );
    }
    assert_eq!(starts[3], last_event + SPACING);
    assert_eq!(q.sizes(), (0, 0, 0, 0));
}

/// Placements that a burst reaches while they wait for a busy worker (a score written
/// a thousand times under a hundred placements) wait for the burst to pause: one pass each,
/// after it. The one the worker had taken at once costs its leading pass and one more.
#[tokio::test(start_paused = true)]
async fn placements_a_burst_reaches_in_the_queue_cost_one_pass_each() {
    let q = queue();
    let passes = worker(&q, Duration::from_millis(5));
    let keys: Vec<Key> = (0..10).map(|i| k(&format!("p{i}"))).collect();
    let (last_event, starts) = storm(&q, &keys, Duration::from_secs(1), passes).await;
    // p0: at once and after the burst; p1..p9: after the burst only (the worker passes
    // one at a time, 5 ms each).
    assert_eq!(starts.len(), 11, "{starts:?}");
    assert!(
        starts[1..].iter().all(|s| *s >= last_event + SPACING),
        "{starts:?}"
    );
    assert_eq!(q.sizes(), (0, 0, 0, 0));
}

/// A burst whose events trickle in one at a time, each after the pass before it is done
/// (a busy apiserver sending a thousand watch events a few ms apart), still costs two
/// passes: while a burst goes on, events wait for it to pause.
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
    // 300 events over 0.9 s: the first pass at once, then one when they pause.
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[1], last_event + SPACING);
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
