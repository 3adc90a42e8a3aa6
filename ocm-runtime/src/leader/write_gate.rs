//! The write gate: a hub client that sends writes only while this replica leads.

use std::future::Future;

use thiserror::Error;

use super::Leadership;

/// A request refused by [`Leadership::write_gate`]: this replica does not lead.
#[derive(Debug, Error)]
#[error("not the leader: {method} {path} not sent")]
pub struct NotLeader {
    pub method: String,
    pub path: String,
}

/// Whether a client error is a [`NotLeader`] refusal (never worth a retry).
pub fn is_not_leader(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Service(inner) if inner.is::<NotLeader>())
}

/// See [`Leadership::write_gate`].
#[derive(Clone, Debug)]
pub struct WriteGateLayer {
    pub(super) leadership: Leadership,
}

impl<S> tower::Layer<S> for WriteGateLayer {
    type Service = WriteGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteGate {
            inner,
            leadership: self.leadership.clone(),
        }
    }
}

/// The service [`WriteGateLayer`] makes.
#[derive(Clone, Debug)]
pub struct WriteGate<S> {
    inner: S,
    leadership: Leadership,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for WriteGate<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: From<NotLeader> + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let reads = matches!(
            *req.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        if reads || self.leadership.is_leader() {
            return Box::pin(self.inner.call(req));
        }
        let refused = NotLeader {
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
        };
        tracing::warn!(method = %refused.method, path = %refused.path, "not the leader: write refused");
        Box::pin(std::future::ready(Err(refused.into())))
    }
}
