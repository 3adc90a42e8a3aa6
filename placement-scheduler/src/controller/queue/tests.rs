use super::*;

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
