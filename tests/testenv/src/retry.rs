//! Retrying Kubernetes API calls that failed for a passing reason: a busy apiserver on a small
//! machine throttles (429), fails (5xx) or drops connections under a harness's load.

use std::future::Future;
use std::time::Duration;

/// Throttling, a server error or a connection failure.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// [`transient`], or an optimistic-concurrency conflict (409 `Conflict`, not `AlreadyExists`).
pub fn transient_or_conflict(e: &kube::Error) -> bool {
    transient(e) || matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict")
}

/// Calls `f` until it succeeds or fails with an error `retry_on` rejects; up to 8 retries,
/// backing off from 50 ms, doubling, at most 5 s. Returns the last error.
pub async fn with<T, F, Fut>(retry_on: fn(&kube::Error) -> bool, mut f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(50);
    let mut attempt = 0;
    loop {
        match f().await {
            Err(e) if attempt < 8 && retry_on(&e) => {
                attempt += 1;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// [`with`] [`transient`].
pub async fn api<T, F, Fut>(f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    with(transient, f).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str) -> kube::Error {
        let mut s = kube::core::Status::failure("", reason);
        s.code = code;
        kube::Error::Api(s.boxed())
    }

    #[test]
    fn what_is_transient() {
        assert!(transient(&status(429, "TooManyRequests")));
        assert!(transient(&status(503, "ServiceUnavailable")));
        assert!(!transient(&status(404, "NotFound")));
        assert!(!transient(&status(409, "Conflict")));
        assert!(transient_or_conflict(&status(409, "Conflict")));
        assert!(!transient_or_conflict(&status(409, "AlreadyExists")));
    }

    // Paused time: the backoff's sleeps advance the clock instantly.
    #[tokio::test(start_paused = true)]
    async fn retries_transient_then_gives_up() {
        let mut calls = 0;
        let r: Result<(), _> = with(transient, || {
            calls += 1;
            async { Err(status(500, "InternalError")) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls, 9, "one call and 8 retries");
        let mut calls = 0;
        let r: Result<(), _> = api(|| {
            calls += 1;
            async { Err(status(404, "NotFound")) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls, 1, "a permanent error is not retried");
    }
}
