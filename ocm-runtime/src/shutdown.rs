//! The stop signal: the kubelet sends SIGTERM and waits `terminationGracePeriodSeconds`, time
//! to release the Lease and finish in-flight writes; Ctrl-C (SIGINT) does the same by hand.

use std::future::Future;

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C) after the call. The handlers are installed
/// when `signal()` is called, not when the future is first polled, so a signal that arrives in
/// between is not lost (and no longer kills the process). Call it inside a tokio runtime.
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal as listen};
        async fn wait(signal: std::io::Result<Signal>, name: &'static str) -> &'static str {
            match signal {
                Ok(mut s) => {
                    s.recv().await;
                    name
                }
                Err(e) => {
                    // Only when no handler can be registered; the signal's default action
                    // (exit) then still stops the process.
                    tracing::error!(error = %e, signal = name, "cannot listen for the signal");
                    std::future::pending().await
                }
            }
        }
        let term = wait(listen(SignalKind::terminate()), "SIGTERM");
        let int = wait(listen(SignalKind::interrupt()), "SIGINT");
        async move {
            let name = tokio::select! {
                name = term => name,
                name = int => name,
            };
            tracing::info!(signal = name, "shutting down");
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!(signal = "Ctrl-C", "shutting down");
        } else {
            std::future::pending::<()>().await;
        }
    }
}
