//! Waiting for the hub at start: a binary started while its hub apiserver cannot be reached
//! (a blip during a rollout, the hub's own restart) stays up and waits for it, instead of
//! exiting into a crash loop whose back-off outlasts the blip. Its probes answer meanwhile:
//! `/healthz` 200 (alive: nothing to restart), `/readyz` 503 `waiting for the hub apiserver at
//! <server>: <last error>`. It tries again as every watch does ([`crate::watch::backoff`]),
//! and the stop signal ends the wait at once.
//!
//! Only a hub that cannot answer is waited for: a connection that fails (refused, reset, timed
//! out, the TLS handshake), or an answer 5xx or 429. Bad input is not: a kubeconfig that does
//! not parse or names no cluster fails [`App::connect`](super::App::connect) before any wait,
//! and any other answer of the apiserver (401, 403, 404, ...) ends the wait, the binary then
//! handling it as it always does.

use std::error::Error as StdError;
use std::future::Future;

use thiserror::Error;

use super::Running;
use crate::leader::NotLeader;

/// The stop signal came while the binary waited for the hub: it exits cleanly.
#[derive(Debug, Error)]
#[error("stopped while waiting for the hub apiserver")]
pub struct Stopped;

/// Whether `e` says the hub cannot answer now (worth waiting for): the connection failed
/// (refused, reset, timed out, the TLS handshake), or the apiserver answered 5xx or 429. Any
/// other answer, a request refused before it was sent (this replica does not lead) or an
/// authentication the client could not make is not.
pub fn unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) => true,
        kube::Error::Service(inner) => !inner.is::<NotLeader>(),
        _ => false,
    }
}

/// [`unreachable()`] for the first Kubernetes client error in `e`'s chain (`e` itself or one of
/// its sources); `false` when there is none.
pub fn caused_by_unreachable(e: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(c) = current {
        if let Some(k) = c.downcast_ref::<kube::Error>() {
            return unreachable(k);
        }
        current = c.source();
    }
    false
}

/// `e` and its sources, `: `-separated, each once (kube's errors repeat their source).
pub fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

impl Running {
    /// Waits until the hub apiserver at `server` answers `client` (`GET /version`), as the
    /// module says; then `/readyz` says `starting` until the binary reports otherwise. Call it
    /// after [`App::serve`](super::App::serve), before the work: [`Stopped`] when the stop
    /// signal came first (exit cleanly then).
    pub async fn wait_for_hub(&self, client: &kube::Client, server: &str) -> Result<(), Stopped> {
        match self
            .retry_while_unreachable(server, || client.apiserver_version())
            .await?
        {
            Ok(version) => {
                tracing::info!(%server, version = %version.git_version, "the hub apiserver answers");
            }
            Err(e) => {
                tracing::warn!(%server, error = %error_chain(&e), "the hub apiserver answers, with an error: starting anyway");
            }
        }
        Ok(())
    }

    /// Calls `op` until it ends with anything but an unreachable hub (an error whose chain
    /// holds a Kubernetes client error [`unreachable()`] accepts), and returns that. Meanwhile
    /// `/readyz` answers 503 `waiting for the hub apiserver at <server>: <last error>`, each
    /// failed attempt is a warning with its number, and the waits between attempts are the
    /// watches' ([`crate::watch::backoff`]: at most [`crate::watch::MAX_WAIT`]). For start-up
    /// steps: `/readyz` says `starting` when it returns. [`Stopped`] when the stop signal came
    /// first (an attempt under way is dropped).
    pub async fn retry_while_unreachable<T, E, F, Fut>(
        &self,
        server: &str,
        mut op: F,
    ) -> Result<Result<T, E>, Stopped>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: StdError + 'static,
    {
        let mut waits = crate::watch::backoff();
        let mut attempt: u64 = 0;
        self.health
            .set_not_ready(format!("waiting for the hub apiserver at {server}"));
        let result = loop {
            attempt += 1;
            let result = tokio::select! {
                biased;
                _ = self.shutdown() => return Err(Stopped),
                r = op() => r,
            };
            match result {
                Err(e) if caused_by_unreachable(&e) => {
                    let error = error_chain(&e);
                    let wait = waits.next().unwrap_or(crate::watch::MAX_WAIT);
                    tracing::warn!(%server, attempt, retry_in = ?wait, %error, "the hub apiserver is unreachable: waiting for it");
                    self.health.set_not_ready(format!(
                        "waiting for the hub apiserver at {server}: {error}"
                    ));
                    tokio::select! {
                        biased;
                        _ = self.shutdown() => return Err(Stopped),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                other => break other,
            }
        };
        if attempt > 1 {
            tracing::info!(%server, attempts = attempt, "the hub apiserver answers: done waiting");
        }
        self.health.set_not_ready("starting");
        Ok(result)
    }
}
