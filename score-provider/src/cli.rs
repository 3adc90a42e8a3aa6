//! The flags every provider binary shares, and [`serve`]: a provider's whole `main` after
//! parsing (hub client, metrics and health server, the loop, the stop signal).

use std::path::PathBuf;
use std::time::Duration;

use ocm_runtime::app::{App, AppError};
use ocm_runtime::flags::parse_duration;
use thiserror::Error;

use crate::hub::HubClient;
use crate::lease::LeaseSettings;
use crate::provider::ScoreProvider;
use crate::runner::{Runner, Settings};
use crate::writer::WriteSettings;
use ocm_runtime::client::follow::FollowError;

/// Flags of a score provider.
#[derive(clap::Args, Clone, Debug)]
pub struct ProviderArgs {
    /// The hub kubeconfig (OCM mounts the add-on's at /managed/hub-kubeconfig/kubeconfig).
    /// Relative certificate paths in it are resolved against its folder; it is reloaded when
    /// it or the files it names change. Agents need it; a provider that runs on the hub may
    /// leave it out and use its own client.
    #[arg(long, env = "HUB_KUBECONFIG")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// Recompute and renew `validUntil` this often.
    #[arg(long, env = "REFRESH_PERIOD", default_value = "60s", value_parser = parse_duration)]
    pub refresh_period: Duration,
    /// How long written scores stay valid (`validUntil = now + ttl`); default three refresh
    /// periods (at least two), so a dead provider's scores expire and placements read 0.
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

/// A normalisation range `min:max` in quantities (`0:64`, `0:512Gi`, `500m:8`).
pub fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let (lo, hi) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not a range like 0:100"))?;
    let q = |v: &str| ocm_api::quantity::parse(v.trim()).map_err(|e| e.to_string());
    let (lo, hi) = (q(lo)?, q(hi)?);
    ocm_api::score::Normaliser::new(lo, hi).map_err(|e| e.to_string())?;
    Ok((lo, hi))
}

#[derive(Debug, Error)]
pub enum CliError {
    #[error("--refresh-period must be between 1s and 24h, got {0:?}")]
    Period(Duration),
    #[error(
        "--score-ttl ({ttl:?}) must be between twice --refresh-period ({period:?}) and 30 days: a shorter one lets scores expire between renewals"
    )]
    Ttl { ttl: Duration, period: Duration },
    #[error("{flag} must be between {min:?} and {max:?}, got {got:?}")]
    Range {
        flag: &'static str,
        min: Duration,
        max: Duration,
        got: Duration,
    },
    #[error("--hub-kubeconfig is required: the provider writes to the hub with it")]
    NoHubKubeconfig,
    #[error(transparent)]
    Hub(#[from] FollowError),
    #[error(transparent)]
    Serve(#[from] ocm_runtime::ServeError),
    #[error(transparent)]
    Log(#[from] ocm_runtime::LogError),
    #[error(transparent)]
    App(#[from] AppError),
}

impl ProviderArgs {
    /// The loop's settings for the score object `score_name`, written as `manager`.
    pub fn settings(&self, score_name: &str, manager: &str) -> Result<Settings, CliError> {
        const DAY: Duration = Duration::from_secs(24 * 3600);
        let period = self.refresh_period;
        if !(Duration::from_secs(1)..=DAY).contains(&period) {
            return Err(CliError::Period(period));
        }
        // validUntil is renewed once less than ttl - period/2 is left, at the periodic
        // refreshes; from two periods up it never lapses between them.
        let ttl = self.score_ttl.unwrap_or(period * 3);
        if !(period * 2..=DAY * 30).contains(&ttl) {
            return Err(CliError::Ttl { ttl, period });
        }
        let within = |flag, got: Duration, min, max| {
            if (min..=max).contains(&got) {
                Ok(())
            } else {
                Err(CliError::Range {
                    flag,
                    min,
                    max,
                    got,
                })
            }
        };
        within("--debounce", self.debounce, Duration::ZERO, period)?;
        within(
            "--hub-kubeconfig-check-interval",
            self.hub_kubeconfig_check_interval,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )?;
        let mut settings = Settings::new(WriteSettings {
            score_name: score_name.to_owned(),
            ttl,
            period,
            renew_every: period,
            hysteresis: self.hysteresis,
            manager: manager.to_owned(),
        });
        settings.debounce = self.debounce;
        settings.hub_check_interval = self.hub_kubeconfig_check_interval;
        Ok(settings)
    }
}

/// Runs `provider` as `args` say until SIGTERM or Ctrl-C, on `app`, which the caller started the
/// way every binary starts ([`App::start`]: logging from `args.log`, the stop signal), with the
/// metrics it registered on [`App::registry`]: loads the hub kubeconfig (`app`'s user agent
/// names the hub client), serves `/metrics`, `/healthz` and `/readyz`, waits for the hub while
/// it cannot be reached ([`ocm_runtime::app::Running::wait_for_hub`]), renews `lease` when
/// given, and refreshes the scores object `score_name`. `manager` names the writes (field
/// manager, label). The checks of `args` come first: a bad setting is reported before any
/// connection is tried.
///
/// ```no_run
/// # use score_provider::{cli::{self, CliError, ProviderArgs}, ScoreProvider};
/// # async fn f(provider: impl ScoreProvider, args: ProviderArgs) -> Result<(), CliError> {
/// let app = ocm_runtime::app::App::start(&args.log, "my-provider/0.1.0")?;
/// cli::serve(app, provider, &args, "my-score", "my-provider", None).await
/// # }
/// ```
pub async fn serve<P: ScoreProvider>(
    app: App,
    provider: P,
    args: &ProviderArgs,
    score_name: &str,
    manager: &str,
    lease: Option<(kube::Client, LeaseSettings)>,
) -> Result<(), CliError> {
    let settings = args.settings(score_name, manager)?;
    let path = args
        .hub_kubeconfig
        .as_ref()
        .ok_or(CliError::NoHubKubeconfig)?;
    let hub = HubClient::load(path, app.user_agent()).await?;
    run(app, hub, provider, settings, args, lease).await
}

/// What [`serve`] does once the hub client is loaded.
async fn run<P: ScoreProvider>(
    app: App,
    hub: HubClient,
    provider: P,
    settings: Settings,
    args: &ProviderArgs,
    lease: Option<(kube::Client, LeaseSettings)>,
) -> Result<(), CliError> {
    let (score_name, manager) = (
        settings.write.score_name.clone(),
        settings.write.manager.clone(),
    );
    let mut runner = Runner::new(provider, hub.clone(), settings);
    if let Some((client, lease)) = lease {
        runner = runner.with_lease(client, lease);
    }
    // A provider elects no leader: one runs per cluster (or per hub, with its own scheme).
    let mut app = app.with_health(runner.health()).without_leader_election();
    runner.metrics().register(app.registry());
    let running = app.serve(&args.serve).await?;
    // Probes answer (not ready) while the hub cannot be reached; the stop signal ends the wait.
    if running
        .wait_for_hub(&hub.client(), &hub.server())
        .await
        .is_err()
    {
        running.server_stopped().await;
        return Ok(());
    }
    tracing::info!(
        score_name = score_name.as_str(),
        manager = manager.as_str(),
        period = ?args.refresh_period,
        "score provider running"
    );
    runner.run(running.shutdown()).await;
    running.server_stopped().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProviderArgs,
    }

    fn settings(extra: &[&str]) -> Result<Settings, CliError> {
        let argv = ["provider", "--hub-kubeconfig=k"]
            .into_iter()
            .chain(extra.iter().copied());
        Cli::try_parse_from(argv)
            .expect("flags parse")
            .args
            .settings("s", "m")
    }

    #[test]
    fn durations_are_checked_before_anything_runs() {
        let ok = settings(&["--refresh-period=10s"]).expect("valid");
        assert_eq!(ok.write.ttl, Duration::from_secs(30), "three periods");
        assert!(matches!(
            settings(&["--refresh-period=0s"]),
            Err(CliError::Period(_))
        ));
        assert!(matches!(
            settings(&["--refresh-period=48h"]),
            Err(CliError::Period(_))
        ));
        assert!(matches!(
            settings(&["--refresh-period=60s", "--score-ttl=90s"]),
            Err(CliError::Ttl { .. })
        ));
        assert!(settings(&["--refresh-period=60s", "--score-ttl=120s"]).is_ok());
        assert!(matches!(
            settings(&["--hub-kubeconfig-check-interval=0s"]),
            Err(CliError::Range {
                flag: "--hub-kubeconfig-check-interval",
                ..
            })
        ));
        assert!(matches!(
            settings(&["--debounce=2m"]),
            Err(CliError::Range {
                flag: "--debounce",
                ..
            })
        ));
        assert!(Cli::try_parse_from(["p", "--hub-kubeconfig=k", "--refresh-period=1e30"]).is_err());
    }
}
