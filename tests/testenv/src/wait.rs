//! Waiting for an outcome: a poll with a deadline, never a bare sleep.

use std::future::Future;
use std::time::{Duration, Instant};

/// Calls `f` every `every` until it returns `Some`; `None` once `deadline` has passed (after
/// one last try). [`crate::eventually`] is this with a panic for tests.
pub async fn poll<T, F, Fut>(deadline: Duration, every: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`poll`] for checks that can fail outright (a process that exited): the first error ends
/// the wait; `Ok(None)` once `deadline` has passed.
pub async fn poll_fallible<T, E, F, Fut>(
    deadline: Duration,
    every: Duration,
    mut f: F,
) -> Result<Option<T>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await? {
            return Ok(Some(v));
        }
        if start.elapsed() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn polls_until_some_or_deadline() {
        let mut n = 0;
        let got = poll(Duration::from_secs(5), Duration::from_millis(1), || {
            n += 1;
            let v = (n == 3).then_some(n);
            async move { v }
        })
        .await;
        assert_eq!(got, Some(3));
        let never: Option<()> =
            poll(Duration::ZERO, Duration::from_millis(1), || async { None }).await;
        assert_eq!(never, None);
        let failed: Result<Option<()>, &str> =
            poll_fallible(Duration::from_secs(5), Duration::from_millis(1), || async {
                Err("gone")
            })
            .await;
        assert_eq!(failed, Err("gone"));
    }
}
