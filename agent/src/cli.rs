//! The flags every provider binary shares, and [`serve`]: a provider's whole `main` after
//! parsing (hub client, metrics and health server, the loop, the stop signal).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ocm_runtime::leader::parse_duration;
use prometheus_client::registry::Registry;
use thiserror::Error;

use crate::hub::{HubClient, HubError};
use crate::lease::LeaseSettings;
use crate::provider::ScoreProvider;
use crate::runner::{Runner, Settings};
use crate::writer::WriteSettings;

/// Flags of a score provider.
#[derive(clap::Args, Clone, Debug)]
pub struct ProviderArgs {
    /// The hub kubeconfig (OCM mounts the add-on's at /managed/hub-kubeconfig/kubeconfig).
    /// Relative certificate paths in it are resolved against its folder; it is reloaded when
    /// it or the files it names change.
    #[arg(long, env = "HUB_KUBECONFIG")]
    pub hub_kubeconfig: PathBuf,
    /// Recompute and renew `validUntil` this often.
    #[arg(long, env = "REFRESH_PERIOD", default_value = "60s", value_parser = parse_duration)]
    pub refresh_period: Duration,
    /// How long written scores stay valid (`validUntil = now + ttl`); default three refresh
    /// periods, so a dead provider's scores expire and placements read 0 for them.
    #[arg(long, env = "SCORE_TTL", value_parser = parse_duration)]
    pub score_ttl: Option<Duration>,
    /// A change (node, pod, ...) is reflected after about this long; bursts coalesce.
    #[arg(long, env = "DEBOUNCE", default_value = "2s", value_parser = parse_duration)]
    pub debounce: Duration,
    /// Ignore score moves smaller than this many points (against decision churn); 0 writes
    /// every move.
    #[arg(long, env = "HYSTERESIS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=200))]
    pub hysteresis: u32,
    /// How often the hub kubeconfig and its files are checked for rotation.
    #[arg(long, env = "HUB_KUBECONFIG_CHECK_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub hub_kubeconfig_check_interval: Duration,
    #[command(flatten)]
    pub serve: ocm_runtime::ServeArgs,
    #[command(flatten)]
    pub log: ocm_runtime::LogArgs,
}

#[derive(Debug, Error)]
pub enum CliError {
    #[error("--refresh-period must be at least 1s, got {0:?}")]
    Period(Duration),
    #[error(
        "--score-ttl ({ttl:?}) must be at least --refresh-period ({period:?}): scores would expire between refreshes"
    )]
    Ttl { ttl: Duration, period: Duration },
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error(transparent)]
    Serve(#[from] ocm_runtime::ServeError),
    #[error(transparent)]
    Log(#[from] ocm_runtime::LogError),
}

impl ProviderArgs {
    /// The loop's settings for the score object `score_name`, written as `manager`.
    pub fn settings(&self, score_name: &str, manager: &str) -> Result<Settings, CliError> {
        let period = self.refresh_period;
        if period < Duration::from_secs(1) {
            return Err(CliError::Period(period));
        }
        let ttl = self.score_ttl.unwrap_or(period * 3);
        if ttl < period {
            return Err(CliError::Ttl { ttl, period });
        }
        let mut settings = Settings::new(WriteSettings {
            score_name: score_name.to_owned(),
            ttl,
            period,
            hysteresis: self.hysteresis,
            manager: manager.to_owned(),
        });
        settings.debounce = self.debounce;
        settings.hub_check_interval = self.hub_kubeconfig_check_interval;
        Ok(settings)
    }
}

/// Runs `provider` as `args` say until SIGTERM or Ctrl-C: loads the hub kubeconfig, serves
/// `/metrics`, `/healthz` and `/readyz`, renews `lease` when given, and refreshes the scores
/// object `score_name`. `manager` names the writes (field manager, user agent, label).
/// Logging must be set up by the caller (see [`ocm_runtime::logging::init`]).
pub async fn serve<P: ScoreProvider>(
    provider: P,
    args: &ProviderArgs,
    score_name: &str,
    manager: &str,
    lease: Option<(kube::Client, LeaseSettings)>,
    registry: Registry,
) -> Result<(), CliError> {
    let settings = args.settings(score_name, manager)?;
    let user_agent = format!("{manager}/{}", env!("CARGO_PKG_VERSION"));
    let hub = HubClient::load(&args.hub_kubeconfig, &user_agent).await?;
    let listener = args.serve.bind().await?;
    let mut runner = Runner::new(provider, hub, settings);
    if let Some((client, lease)) = lease {
        runner = runner.with_lease(client, lease);
    }
    let mut registry = registry;
    runner.metrics().register(&mut registry);
    let registry = Arc::new(registry);
    let health = runner.health();
    let shutdown = futures::FutureExt::shared(ocm_runtime::signal());
    let server = tokio::spawn(ocm_runtime::serve_metrics(
        listener,
        registry,
        health,
        shutdown.clone(),
    ));
    tracing::info!(score_name, manager, period = ?args.refresh_period, "score provider running");
    runner.run(shutdown).await;
    let _ = server.await;
    Ok(())
}
