use super::*;
use std::sync::Arc;

#[tokio::test(start_paused = true)]
async fn a_burst_within_the_debounce_is_one_pass() {
    let q = Queue::with_pacing(Pacing {
        debounce: Duration::from_millis(100),
        spacing: Duration::ZERO,
        max_delay: Duration::ZERO,
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

fn nk(ns: &str, n: &str) -> Key {
    (ns.into(), n.into())
}

/// A tenant with many placements queued first holds its share of the workers; another
/// namespace's key, queued behind all of them, is handed out next.
#[tokio::test(start_paused = true)]
async fn a_namespace_at_its_share_lets_another_go_first() {
    let q = Queue::default().with_fairness(Fairness {
        workers: 4,
        per_namespace: 2,
    });
    for n in 0..16 {
        q.add(nk("tenant", &n.to_string()));
    }
    q.add(nk("victim", "web"));
    // Workers take one key at a time, as the controller's do.
    assert_eq!(q.next_batch(1).await, [nk("tenant", "0")]);
    assert_eq!(q.next_batch(1).await, [nk("tenant", "1")]);
    assert_eq!(q.next_batch(1).await, [nk("victim", "web")]);
    // Three of four workers busy: the tenant is at its share, and the last free worker is
    // kept for a namespace that comes later.
    let waited = tokio::time::timeout(Duration::from_secs(1), q.next_batch(1)).await;
    assert!(waited.is_err(), "the last free worker is kept: {waited:?}");
    // A newcomer gets it at once, ahead of the tenant's queue.
    q.add(nk("other", "api"));
    assert_eq!(q.next_batch(1).await, [nk("other", "api")]);
    // Once the others are done and nobody else waits, the tenant may go beyond its share,
    // as long as one worker stays free.
    q.done(&nk("victim", "web"));
    q.done(&nk("other", "api"));
    assert_eq!(q.next_batch(1).await, [nk("tenant", "2")]);
    let waited = tokio::time::timeout(Duration::from_secs(1), q.next_batch(1)).await;
    assert!(waited.is_err(), "{waited:?}");
    q.done(&nk("tenant", "0"));
    assert_eq!(q.next_batch(1).await, [nk("tenant", "3")]);
}

/// Without another namespace, the only tenant may use every worker but one; with one worker
/// in all, it takes that worker.
#[tokio::test(start_paused = true)]
async fn alone_a_namespace_uses_the_workers_but_one() {
    let q = Queue::default().with_fairness(Fairness::halves(8));
    for n in 0..10 {
        q.add(nk("only", &n.to_string()));
    }
    let mut got = Vec::new();
    for _ in 0..7 {
        got.extend(q.next_batch(1).await);
    }
    assert_eq!(got.len(), 7);
    let waited = tokio::time::timeout(Duration::from_secs(1), q.next_batch(1)).await;
    assert!(waited.is_err(), "{waited:?}");

    let one = Queue::default().with_fairness(Fairness::halves(1));
    one.add(nk("only", "a"));
    one.add(nk("only", "b"));
    assert_eq!(one.next_batch(1).await, [nk("only", "a")]);
    one.done(&nk("only", "a"));
    assert_eq!(one.next_batch(1).await, [nk("only", "b")]);
}

/// A worker waiting because the ready keys' namespace held its share is woken when one of
/// that namespace's passes ends.
#[tokio::test(start_paused = true)]
async fn a_pass_that_ends_wakes_a_worker_for_its_namespace() {
    let q = Arc::new(Queue::default().with_fairness(Fairness {
        workers: 2,
        per_namespace: 1,
    }));
    q.add(nk("t", "a"));
    q.add(nk("t", "b"));
    assert_eq!(q.next_batch(1).await, [nk("t", "a")]);
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.next_batch(1).await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "the last worker stays free");
    q.done(&nk("t", "a"));
    assert_eq!(waiting.await.unwrap(), [nk("t", "b")]);
}

#[test]
fn halves_round_up_and_never_reach_zero() {
    assert_eq!(Fairness::halves(8).per_namespace, 4);
    assert_eq!(Fairness::halves(3).per_namespace, 2);
    assert_eq!(Fairness::halves(1).per_namespace, 1);
    assert_eq!(Fairness::halves(0).per_namespace, 1);
}

/// A pass's requeue replaces the one an earlier pass set, later or not; `add_at` keeps the
/// earliest.
#[tokio::test(start_paused = true)]
async fn a_requeue_replaced_fires_at_its_new_time_only() {
    let q = Queue::default();
    let start = Instant::now();
    q.replace_at(k("a"), start + Duration::from_secs(10));
    q.replace_at(k("a"), start + Duration::from_secs(20));
    assert_eq!(q.sizes().2, 1, "one timer");
    assert_eq!(q.next_batch(10).await, [k("a")]);
    assert_eq!(Instant::now() - start, Duration::from_secs(20));
    q.done(&k("a"));
    q.replace_at(k("a"), Instant::now() + Duration::from_secs(10));
    q.replace_at(k("a"), Instant::now() + Duration::from_secs(5));
    assert_eq!(q.next_batch(10).await, [k("a")]);
    assert_eq!(Instant::now() - start, Duration::from_secs(25));
    q.done(&k("a"));
    assert_eq!(q.sizes().1, 0, "no requeue left");
}
