//! The resource-usage provider: one cluster's free CPU, memory, GPUs and TPUs from the `kube`
//! or `host` source, as scores.

use futures::StreamExt;
use futures::stream::BoxStream;

use super::host::HostSource;
use super::kube::KubeSource;
use ocm_api::score::resource_usage::{self, Bounds, Free};
use score_provider::provider::{Change, Computed, ProviderError, ScoreProvider, Scores};

/// Where the free amounts come from.
pub enum Source {
    /// Nodes' allocatable minus the requests of the pods bound to them.
    Kube(KubeSource),
    /// The machine the agent runs on.
    Host(Box<HostSource>),
}

pub struct ResourceUsage {
    cluster: String,
    source: Source,
    bounds: Bounds,
}

impl ResourceUsage {
    /// Scores for `cluster` (its namespace on the hub).
    pub fn new(cluster: impl Into<String>, source: Source, bounds: Bounds) -> Self {
        Self {
            cluster: cluster.into(),
            source,
            bounds,
        }
    }

    /// The free amounts now.
    pub async fn free(&mut self) -> Result<Free, ProviderError> {
        match &mut self.source {
            Source::Kube(k) => k.free(),
            Source::Host(h) => Ok(h.read().await.free()),
        }
    }

    /// The free amounts once the source is ready (its watches listed), for one-shot use
    /// without the framework's loop; gives up after `timeout`.
    pub async fn free_when_ready(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Free, ProviderError> {
        let mut changes = self.changes();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.free().await {
                Err(ProviderError::NotReady(why)) => {
                    match tokio::time::timeout_at(deadline, changes.next()).await {
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => {
                            return Err(ProviderError::Source(format!(
                                "not ready after {timeout:?}: {why}"
                            )));
                        }
                    }
                }
                other => return other,
            }
        }
    }
}

impl ScoreProvider for ResourceUsage {
    async fn compute(&mut self) -> Result<Computed, ProviderError> {
        let free = self.free().await?;
        let mut scores = Scores::new();
        for (name, value) in resource_usage::scores(&free, &self.bounds) {
            scores.insert(name, value.into())?;
        }
        tracing::debug!(?free, ?scores, "computed");
        Ok(Computed::single(self.cluster.clone(), scores))
    }

    fn changes(&mut self) -> BoxStream<'static, Change> {
        match &self.source {
            Source::Kube(k) => k.changes(),
            Source::Host(_) => Box::pin(futures::stream::pending()),
        }
    }
}
