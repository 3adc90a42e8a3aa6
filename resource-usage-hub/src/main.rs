//! `resource-usage-hub`: the hub side of the resource-usage score provider.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use ocm_runtime::app::{self, App, AppArgs, AppError, Drain};
use ocm_runtime::client::ClientError;
use ocm_runtime::client::follow::FollowError;
use std::path::PathBuf;
use thiserror::Error;

use std::sync::Arc;

use ocm_api::selector::Selector;
use ocm_api::wellknown::score::{RESOURCE_USAGE_ADDON, RESOURCE_USAGE_SCORE};
use resource_usage_hub::manager::controller::{self, Handle, Options};
use resource_usage_hub::manager::plan::{HealthMode, Settings};
use resource_usage_hub::manager::render::AgentTemplate;
use resource_usage_hub::scorer::admit::Policy;
use resource_usage_hub::scorer::fleet::Fleet;
use resource_usage_hub::scorer::metrics::ScorerMetrics;
use resource_usage_hub::scorer::supervisor::{Supervisor, parse_selector};
use score_provider::definition::Caps;
use score_provider::prom::{PromClient, PromError, PromSettings, ThanosParams};

/// The hub side of the resource-usage score provider.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The add-on manager: installs the agent on the clusters the ClusterManagementAddOn
    /// selects (ManagedClusterAddOns, hub RBAC, CSR approval, ManifestWorks), reports health,
    /// and rolls new renderings out by the placements' decision groups.
    Manager(Box<ManagerArgs>),
    /// The hub scorer: AddOnPlacementScores for every ManagedCluster from fleet metrics in a
    /// Prometheus-compatible query API (a Thanos Querier), with no agent on the clusters.
    Scorer(Box<ScorerArgs>),
}

#[derive(clap::Args)]
struct ScorerArgs {
    #[command(flatten)]
    provider: score_provider::ProviderArgs,
    /// The hub client when --hub-kubeconfig is not given (in the cluster: its service account).
    #[command(flatten)]
    client: ocm_runtime::ClientArgs,
    #[command(flatten)]
    leader: ocm_runtime::LeaderArgs,
    /// The query API root: a Thanos Querier, or any Prometheus-compatible one.
    #[arg(long, env = "PROMETHEUS_URL")]
    prometheus_url: String,
    /// A file holding a bearer token for the query API (read for every query, so a rotated
    /// service-account token is picked up).
    #[arg(long, env = "PROMETHEUS_TOKEN_FILE")]
    prometheus_token_file: Option<PathBuf>,
    /// A PEM CA bundle for the query API (default: the system's roots).
    #[arg(long, env = "PROMETHEUS_CA_FILE")]
    prometheus_ca_file: Option<PathBuf>,
    /// An extra request header `Name=value` (repeatable), e.g. a tenant header.
    #[arg(long = "prometheus-header", value_parser = parse_header)]
    prometheus_headers: Vec<(String, String)>,
    /// Per query attempt.
    #[arg(long, env = "PROMETHEUS_TIMEOUT", default_value = "30s", value_parser = ocm_runtime::flags::parse_duration)]
    prometheus_timeout: Duration,
    /// Attempts per query (backoff in between) before the compute fails.
    #[arg(long, env = "PROMETHEUS_ATTEMPTS", default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=10))]
    prometheus_attempts: u8,
    /// The largest query answer read (a quantity: `8Mi`, `50M`); a larger one fails that query
    /// (`scorer_query_errors_total{reason="too_large"}` and a warning), and the scores it feeds
    /// expire. Between 64Ki and 1Gi; 8Mi holds the by-node answers of about 70,000 nodes.
    #[arg(long, env = "PROMETHEUS_MAX_RESPONSE_SIZE", default_value = "8Mi", value_parser = parse_size)]
    prometheus_max_response_size: usize,
    /// Send Thanos' `dedup` and `partial_response` parameters (Prometheus ignores them).
    #[arg(long, env = "THANOS_PARAMS", default_value_t = true, action = clap::ArgAction::Set)]
    thanos_params: bool,
    /// Thanos `dedup`: merge an HA pair's replicas (series that differ only in Query's
    /// `--query.replica-label`).
    #[arg(long, env = "THANOS_DEDUP", default_value_t = true, action = clap::ArgAction::Set)]
    thanos_dedup: bool,
    /// Thanos `partial_response`: accept an answer without the stores that failed. The
    /// clusters its warnings name, and those whose series are absent, count as missing
    /// (`NoMetrics`; their scores expire, never zeroed); the others are renewed. With `false`
    /// one dead store fails every query and no cluster is renewed.
    #[arg(long, env = "THANOS_PARTIAL_RESPONSE", default_value_t = true, action = clap::ArgAction::Set)]
    thanos_partial_response: bool,
    /// The series label that holds the ManagedCluster's name, filled into every definition's
    /// expressions for `{{LABEL}}`. Trust follows whoever sets it: prefer one the hub side sets
    /// from the sender's authenticated identity (Thanos Receive's tenant label); one the spoke
    /// sets lets a spoke speak for another cluster (its series that disagree with the
    /// victim's withhold the victim's scores).
    #[arg(long, env = "CLUSTER_LABEL", default_value = "cluster")]
    cluster_label: String,
    /// Evaluate only the ScoreDefinitions with these labels (`key=value,...`), e.g. one scorer
    /// per query API. Empty: every `Hub` definition.
    #[arg(long, env = "DEFINITION_SELECTOR", default_value = "", value_parser = parse_selector)]
    definition_selector: Selector,
    /// The most definitions evaluated (oldest first); the others say `TooManyDefinitions`. It
    /// also bounds the `definition` label of the scorer's metrics.
    #[arg(long, env = "MAX_DEFINITIONS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    max_definitions: u32,
    /// The most series one query of a definition may answer (a definition's
    /// `limits.maxSeries` may ask for less); more fails that definition alone.
    #[arg(long, env = "DEFINITION_MAX_SERIES", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    definition_max_series: u32,
    /// The longest a definition's queries may take, retries included (a definition's
    /// `limits.queryTimeout` may ask for less).
    #[arg(long, env = "DEFINITION_QUERY_TIMEOUT", default_value = "30s", value_parser = ocm_runtime::flags::parse_duration)]
    definition_query_timeout: Duration,
    /// The shortest refresh period a definition gets (one asking for less is run this often).
    #[arg(long, env = "DEFINITION_MIN_PERIOD", default_value = "10s", value_parser = ocm_runtime::flags::parse_duration)]
    definition_min_period: Duration,
}

/// The scorer's field manager and `managed-by` label.
const SCORER: &str = "resource-usage-hub-scorer";

/// A byte size as a quantity, within what `--prometheus-max-response-size` allows.
fn parse_size(s: &str) -> Result<usize, String> {
    const MIN: f64 = (64 << 10) as f64;
    const MAX: f64 = (1 << 30) as f64;
    let bytes = ocm_api::quantity::parse(s.trim()).map_err(|e| e.to_string())?;
    if !(MIN..=MAX).contains(&bytes) {
        return Err(format!("{s:?} is not between 64Ki and 1Gi"));
    }
    Ok(bytes as usize)
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not Name=value"))
}

#[derive(clap::Args)]
struct ManagerArgs {
    #[command(flatten)]
    app: AppArgs,
    /// The add-on's name: the ClusterManagementAddOn, every ManagedClusterAddOn, the work
    /// `addon-<name>-deploy-0` and the registration subject.
    #[arg(long, env = "ADDON_NAME", default_value = RESOURCE_USAGE_ADDON)]
    addon_name: String,
    /// The agent's name in its registration subject (default `<addon>-agent`).
    #[arg(long, env = "AGENT_NAME")]
    agent_name: Option<String>,
    /// The agent image the ManifestWorks run (AddOnDeploymentConfig registries rewrite it).
    #[arg(long, env = "AGENT_IMAGE")]
    agent_image: String,
    /// Where the agent runs on managed clusters unless an AddOnDeploymentConfig says otherwise.
    #[arg(
        long,
        env = "AGENT_INSTALL_NAMESPACE",
        default_value = "open-cluster-management-agent-addon"
    )]
    agent_install_namespace: String,
    /// How `Available` is decided: `work` (the Deployment's feedback, set here) or `lease`
    /// (the agent's Lease, set by the klusterlet).
    #[arg(long, env = "HEALTH_MODE", value_enum, default_value_t = HealthMode::Work)]
    health_mode: HealthMode,
    /// Create the ClusterManagementAddOn when it is missing (`false` when the chart owns it).
    #[arg(long, env = "MANAGE_CMA", default_value_t = true, action = clap::ArgAction::Set)]
    manage_cma: bool,
    /// A pass at least this often even without events.
    #[arg(long, env = "RESYNC_PERIOD", default_value = "5m", value_parser = ocm_runtime::flags::parse_duration)]
    resync_period: Duration,
    /// Events within this long make one pass.
    #[arg(long, env = "EVENT_DEBOUNCE", default_value = "100ms", value_parser = ocm_runtime::flags::parse_duration)]
    event_debounce: Duration,
}

/// Why a command could not start or stopped; printed as `error: <this>`.
#[derive(Debug, Error)]
enum HubError {
    #[error("--agent-image must name an image")]
    NoAgentImage,
    #[error(
        "--cluster-label {0:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not reserved)"
    )]
    Label(String),
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// Boxed: the provider's flag errors are large, and every result carries the largest.
    #[error(transparent)]
    Provider(Box<score_provider::cli::CliError>),
    #[error(transparent)]
    Prom(#[from] PromError),
}

impl From<score_provider::cli::CliError> for HubError {
    fn from(e: score_provider::cli::CliError) -> Self {
        Self::Provider(Box::new(e))
    }
}

fn main() -> ExitCode {
    app::main("error: ", || match Cli::parse().command {
        Command::Manager(args) => app::block_on(manager(*args), Drain::Wait),
        Command::Scorer(args) => app::block_on(scorer(*args), Drain::Wait),
    })
}

async fn manager(args: ManagerArgs) -> Result<(), HubError> {
    let mut app = App::start(
        &args.app.log,
        concat!("resource-usage-hub/", env!("CARGO_PKG_VERSION")),
    )?;
    if args.agent_image.trim().is_empty() {
        return Err(HubError::NoAgentImage);
    }
    let hub = app.connect(&args.app.client).await?;
    let handle = Handle::new(app.registry());
    let running = app.serve(&args.app.serve).await?;
    // Probes answer (not ready) while the hub cannot be reached; the stop signal ends the wait.
    let Ok(()) = running.wait_for_hub(&hub.unlimited()?, &hub.server()).await else {
        return Ok(());
    };
    let lease = format!("{}-manager", args.addon_name);
    let leadership = running.elect(&args.app.leader, &hub, &lease)?;
    // The manager's client sends writes only while leading.
    let client = hub.writer(&leadership)?;
    // Ready once every watch has listed; until then /readyz names the watches that have not
    // and their last error (a missing CRD). A standby is ready too (it keeps warm stores).
    tokio::spawn(handle.sync.clone().report_to(running.health()));

    let agent = args
        .agent_name
        .unwrap_or_else(|| format!("{}-agent", args.addon_name));
    let settings = Settings {
        template: AgentTemplate {
            addon_name: args.addon_name.clone(),
            image: args.agent_image,
            default_install_namespace: args.agent_install_namespace,
            definitions: String::new(),
        },
        addon: args.addon_name,
        agent,
        health: args.health_mode,
        manage_cma: args.manage_cma,
    };
    let options = Options {
        settings,
        debounce: args.event_debounce,
        resync: args.resync_period,
        leadership: leadership.clone(),
    };
    // A replica deposed by another holder exits (client-go's `OnStoppedLeading`) and comes
    // back as a standby when restarted; one that only missed its renewals (the apiserver
    // down) stops writing and leads again when it renews (see `Leadership::deposed`).
    let run = controller::run(client, handle, options, running.shutdown());
    running.run_until_deposed(run, leadership).await?;
    Ok(())
}

async fn scorer(args: ScorerArgs) -> Result<(), HubError> {
    let user_agent = concat!("resource-usage-hub-scorer/", env!("CARGO_PKG_VERSION"));
    let app = App::start(&args.provider.log, user_agent)?;
    // The shared flags' checks; each definition brings its own period and validity.
    let base = args.provider.settings(RESOURCE_USAGE_SCORE, SCORER)?;
    check_label(&args.cluster_label)?;
    // The elector gets a client of its own, outside the writes' rate limit, so that renewals
    // never queue behind a round's writes (a kubeconfig-following hub client has no limit).
    let (hub, elector_client, server) = match &args.provider.hub_kubeconfig {
        Some(path) => {
            let hub = score_provider::HubClient::load(path, user_agent).await?;
            let elector_client = hub.client();
            let server = hub.server();
            (hub, elector_client, server)
        }
        None => {
            let config =
                ocm_runtime::client::load_config(args.client.kubeconfig.as_deref()).await?;
            let server = config.cluster_url.to_string();
            let limiter = args.client.rate_limiter()?;
            let writes =
                ocm_runtime::client::client_with(config.clone(), limiter.as_ref(), user_agent)?;
            let elector_client = ocm_runtime::client::client_with(config, None, user_agent)?;
            (
                score_provider::HubClient::fixed(writes),
                elector_client,
                server,
            )
        }
    };
    let prom = prom_client(&args)?;
    let policy = Policy {
        label: args.cluster_label.clone(),
        caps: Caps {
            max_series: args.definition_max_series as usize,
            query_timeout: args.definition_query_timeout,
            min_period: args.definition_min_period,
            default_period: args.provider.refresh_period,
            default_valid_for: args.provider.score_ttl,
        },
        max_definitions: args.max_definitions as usize,
    };
    let metrics = ScorerMetrics::default();
    let runner_metrics = score_provider::metrics::Metrics::default();
    let mut app = app;
    metrics.register(app.registry());
    runner_metrics.register(app.registry());
    let health = app.health();
    let running = app.serve(&args.provider.serve).await?;
    // Probes answer (not ready) while the hub cannot be reached; the stop signal ends the wait.
    let Ok(()) = running.wait_for_hub(&elector_client, &server).await else {
        return Ok(());
    };

    // Only the leader queries and writes. A replica that loses the lease drops its pass at
    // once (racing the runners) and exits, to come back as a standby, as client-go
    // controllers do. The Lease is released only after the runners stopped, so a standby
    // never writes alongside.
    let shutdown = running.shutdown();
    let selector = args.definition_selector.clone();
    let work = |leadership: Option<ocm_runtime::Leadership>| async move {
        tracing::info!(url = %args.prometheus_url, label = %args.cluster_label, "hub scorer running");
        let fleet = Arc::new(Fleet::start(hub.client()));
        let supervisor = Supervisor {
            fleet,
            hub,
            prom,
            policy,
            selector,
            base,
            leadership,
            metrics,
            runner_metrics,
            health,
        };
        supervisor.run(shutdown).await;
    };
    running
        .run_elected(&args.leader, elector_client, SCORER, work)
        .await?;
    Ok(())
}

/// The query-API client from the scorer's flags.
fn prom_client(args: &ScorerArgs) -> Result<PromClient, HubError> {
    Ok(PromClient::new(PromSettings {
        url: args.prometheus_url.clone(),
        bearer_token: None,
        bearer_token_file: args.prometheus_token_file.clone(),
        ca_file: args.prometheus_ca_file.clone(),
        headers: args.prometheus_headers.clone(),
        timeout: args.prometheus_timeout,
        attempts: usize::from(args.prometheus_attempts),
        thanos: args.thanos_params.then_some(ThanosParams {
            dedup: args.thanos_dedup,
            partial_response: args.thanos_partial_response,
        }),
        max_response_bytes: args.prometheus_max_response_size,
    })?)
}

/// The cluster label must be a plain label name: it is pasted into every expression, and the
/// conflict label would shadow it.
fn check_label(l: &str) -> Result<(), HubError> {
    let plain = l
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain || l.starts_with("__") || l == score_provider::definition::CONFLICT_LABEL {
        return Err(HubError::Label(l.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_response_size_flag() {
        assert_eq!(parse_size("8Mi"), Ok(8 << 20));
        assert_eq!(parse_size("64Ki"), Ok(64 << 10));
        assert_eq!(parse_size("1Gi"), Ok(1 << 30));
        for bad in ["1Ki", "2Gi", "-8Mi", "lots", ""] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["x", "scorer", "--prometheus-url=http://p:9090"])
            .expect("defaults");
        let Command::Scorer(args) = cli.command else {
            panic!("scorer");
        };
        assert_eq!(
            args.prometheus_max_response_size,
            score_provider::prom::DEFAULT_MAX_RESPONSE_BYTES
        );
        // Partial answers accepted, replicas merged: one dead store never blinds the fleet.
        assert!(args.thanos_params && args.thanos_dedup && args.thanos_partial_response);
    }
}
