//! `signal()` against real signals sent to this test process (its own binary, so that no other
//! test sees them). Once `signal()` has been called, the signals no longer kill the process.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

fn send(signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal}");
}

/// One test, so that the signals it sends cannot reach another test's `signal()`.
#[tokio::test]
async fn sigterm_and_sigint_end_the_wait_and_nothing_else_does() {
    for signal in ["TERM", "INT"] {
        let stop = ocm_runtime::signal();
        tokio::pin!(stop);
        // Pending until a signal comes (one poll, no clock).
        assert!(futures::poll!(&mut stop).is_pending());
        send(signal);
        tokio::time::timeout(Duration::from_secs(30), stop)
            .await
            .unwrap_or_else(|_| panic!("signal() did not resolve on SIG{signal}"));
    }
}
