//! `resource-usage-agent`: publishes a managed cluster's free CPU, memory, GPUs and TPUs as the
//! AddOnPlacementScore `resource-usage-score` in its namespace on the hub, and the scores of
//! the ScoreDefinitions the add-on manager ships to it, from the cluster's own Prometheus.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use ocm_api::score::BoundsError;
use ocm_api::score::resource_usage::{Bounds, Resource};
use ocm_api::selector::{Selector, SelectorError};
use ocm_api::wellknown::score::{RESOURCE_USAGE_ADDON, RESOURCE_USAGE_SCORE};
use ocm_runtime::app::{self, App, AppError, Drain};
use ocm_runtime::client::ClientError;
use resource_usage_agent::definition_metrics::DefinitionMetrics;
use resource_usage_agent::definition_runners::{DefinitionRunners, Shared};
use resource_usage_agent::local_prometheus::PrometheusArgs;
use resource_usage_agent::usage::host::HostSource;
use resource_usage_agent::usage::index::NodeFilter;
use resource_usage_agent::usage::kube::KubeSource;
use resource_usage_agent::usage::provider::{ResourceUsage, Source};
use score_provider::ProviderError;
use score_provider::ScoreProvider;
use score_provider::cli::{CliError, parse_range};
use score_provider::lease::LeaseSettings;
use score_provider::prom::PromError;
use thiserror::Error;

/// The name the agent writes as (field manager, user agent, managed-by label).
const MANAGER: &str = "resource-usage-agent";

/// Publishes a managed cluster's resource headroom as AddOnPlacementScores on the hub.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Keep the cluster's scores current on the hub (what the add-on's Deployment runs).
    Run(Box<RunArgs>),
    /// Compute the scores once and print them as JSON, without a hub.
    Print(Box<PrintArgs>),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The managed cluster's name: the scores go to this namespace on the hub.
    #[arg(long, env = "CLUSTER_NAME")]
    cluster_name: String,
    /// The agent's namespace on the managed cluster (its health Lease lives there).
    #[arg(
        long,
        env = "ADDON_NAMESPACE",
        default_value = "open-cluster-management-agent-addon"
    )]
    addon_namespace: String,
    /// The add-on's name, which names the health Lease.
    #[arg(long, env = "ADDON_NAME", default_value = RESOURCE_USAGE_ADDON)]
    addon_name: String,
    /// The AddOnPlacementScore's name.
    #[arg(long, env = "SCORE_NAME", default_value = RESOURCE_USAGE_SCORE)]
    score_name: String,
    /// Renew the add-on health Lease (OCM's Lease health check). Off for providers whose
    /// add-on is health-checked another way.
    #[arg(long, env = "HEALTH_LEASE", default_value_t = true, action = clap::ArgAction::Set)]
    health_lease: bool,
    /// The ScoreDefinitions the add-on manager ships (the ConfigMap `<addon>-definitions`,
    /// mounted): read again as often as the hub kubeconfig is checked; a missing file is no
    /// definitions.
    #[arg(long, env = "DEFINITIONS_FILE", default_value = ocm_api::scoring::shipped::DEFAULT_FILE)]
    definitions_file: PathBuf,
    #[command(flatten)]
    prometheus: PrometheusArgs,
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    provider: score_provider::ProviderArgs,
}

#[derive(clap::Args)]
struct PrintArgs {
    /// The cluster name to print the scores under.
    #[arg(long, env = "CLUSTER_NAME", default_value = "local")]
    cluster_name: String,
    #[command(flatten)]
    source: SourceArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum SourceKind {
    /// Nodes' allocatable minus the requests of the pods bound to them.
    Kube,
    /// The machine the agent runs on (single-node and edge clusters, demos).
    Host,
}

#[derive(clap::Args)]
struct SourceArgs {
    #[arg(long, env = "SOURCE", value_enum, default_value_t = SourceKind::Kube)]
    source: SourceKind,
    /// Only nodes with these labels count (`key=value,...`), e.g. the pool OCM workloads use.
    #[arg(long, env = "NODE_SELECTOR")]
    node_selector: Option<String>,
    /// Nodes with a NoSchedule or NoExecute taint of these keys do not count.
    #[arg(
        long,
        env = "EXCLUDE_NODE_TAINTS",
        value_delimiter = ',',
        default_value = "node.kubernetes.io/not-ready,node.kubernetes.io/unreachable"
    )]
    exclude_node_taints: Vec<String>,
    /// Free CPU cores mapped to -100 and 100 (`min:max`; quantities allowed).
    #[arg(long, env = "CPU_RANGE", value_parser = parse_range)]
    cpu_range: Option<(f64, f64)>,
    /// Free memory mapped to -100 and 100, e.g. `0:512Gi`.
    #[arg(long, env = "MEMORY_RANGE", value_parser = parse_range)]
    memory_range: Option<(f64, f64)>,
    /// Free NVIDIA GPUs mapped to -100 and 100.
    #[arg(long, env = "GPU_RANGE", value_parser = parse_range)]
    gpu_range: Option<(f64, f64)>,
    /// Free TPUs mapped to -100 and 100.
    #[arg(long, env = "TPU_RANGE", value_parser = parse_range)]
    tpu_range: Option<(f64, f64)>,
    /// Node-scope bounds (the freest single node), when they should differ from the above.
    #[arg(long, env = "NODE_CPU_RANGE", value_parser = parse_range)]
    node_cpu_range: Option<(f64, f64)>,
    #[arg(long, env = "NODE_MEMORY_RANGE", value_parser = parse_range)]
    node_memory_range: Option<(f64, f64)>,
    #[arg(long, env = "NODE_GPU_RANGE", value_parser = parse_range)]
    node_gpu_range: Option<(f64, f64)>,
    #[arg(long, env = "NODE_TPU_RANGE", value_parser = parse_range)]
    node_tpu_range: Option<(f64, f64)>,
    /// The managed cluster's client (in-cluster by default).
    #[command(flatten)]
    client: ocm_runtime::ClientArgs,
}

/// `key=value,...` as a label map.
fn parse_selector(s: &str) -> Result<BTreeMap<String, String>, AgentError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| AgentError::NotKeyValue(pair.to_owned()))?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

impl SourceArgs {
    fn bounds(&self) -> Result<Bounds, AgentError> {
        let mut b = Bounds::default();
        let all = [
            (Resource::Cpu, self.cpu_range, self.node_cpu_range),
            (Resource::Memory, self.memory_range, self.node_memory_range),
            (Resource::Gpu, self.gpu_range, self.node_gpu_range),
            (Resource::Tpu, self.tpu_range, self.node_tpu_range),
        ];
        for (r, both, node) in all {
            if let Some((lo, hi)) = both {
                b.set(r, lo, hi)?;
            }
            if let Some((lo, hi)) = node {
                b.set_node(r, lo, hi)?;
            }
        }
        Ok(b)
    }

    async fn source(&self) -> Result<Source, AgentError> {
        match self.source {
            SourceKind::Host => HostSource::new()
                .map(|h| Source::Host(Box::new(h)))
                .map_err(AgentError::Host),
            SourceKind::Kube => {
                let labels = match &self.node_selector {
                    Some(s) => parse_selector(s)?,
                    None => BTreeMap::new(),
                };
                let selector = if labels.is_empty() {
                    None
                } else {
                    let ls = LabelSelector {
                        match_labels: Some(labels.clone()),
                        match_expressions: None,
                    };
                    Some(Selector::from_label_selector(&ls).map_err(AgentError::NodeSelector)?)
                };
                let filter = NodeFilter {
                    selector,
                    excluded_taints: self.exclude_node_taints.clone(),
                };
                let selector = (!labels.is_empty()).then(|| {
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                });
                let user_agent = format!("{MANAGER}/{}", env!("CARGO_PKG_VERSION"));
                let client = ocm_runtime::client(&self.client, &user_agent).await?;
                Ok(Source::Kube(KubeSource::new(client, selector, filter)))
            }
        }
    }
}

/// Why a command could not start or stopped; printed as `resource-usage-agent: <this>`.
#[derive(Debug, Error)]
enum AgentError {
    #[error("--node-selector: {0:?} is not key=value")]
    NotKeyValue(String),
    #[error("--node-selector: {0}")]
    NodeSelector(#[source] SelectorError),
    #[error("cannot read this machine: {0}")]
    Host(#[source] sysinfo::Error),
    #[error(transparent)]
    Bounds(#[from] BoundsError),
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Boxed: the provider's flag errors are large, and every result carries the largest.
    #[error(transparent)]
    Provider(Box<CliError>),
    #[error(transparent)]
    Compute(#[from] ProviderError),
    #[error("--prometheus-url: {0}")]
    Prometheus(#[source] PromError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    App(#[from] AppError),
}

impl From<CliError> for AgentError {
    fn from(e: CliError) -> Self {
        Self::Provider(Box::new(e))
    }
}

fn main() -> ExitCode {
    app::main("resource-usage-agent: ", || {
        let command = Cli::parse().command;
        let work = async move {
            match command {
                Command::Run(args) => run(*args).await,
                Command::Print(args) => print(*args).await,
            }
        };
        app::block_on(work, Drain::Wait)
    })
}

async fn run(args: RunArgs) -> Result<(), AgentError> {
    let user_agent = format!("{MANAGER}/{}", env!("CARGO_PKG_VERSION"));
    // The one startup path: logging, then the stop signal, before anything can take long.
    let mut app = App::start(&args.provider.log, &user_agent)?;
    // Flags first: a bad setting is reported before any connection is tried.
    args.provider.settings(&args.score_name, MANAGER)?;
    let prom = args.prometheus.client().map_err(AgentError::Prometheus)?;
    let bounds = args.source.bounds()?;
    let source = args.source.source().await?;
    let lease = if args.health_lease {
        let client = ocm_runtime::client(&args.source.client, &user_agent).await?;
        Some((
            client,
            LeaseSettings {
                namespace: args.addon_namespace.clone(),
                name: args.addon_name.clone(),
                period: Duration::from_secs(60),
            },
        ))
    } else {
        None
    };
    let provider = ResourceUsage::new(&args.cluster_name, source, bounds);
    // The shipped definitions' runners, beside the built-in provider, on their own hub client
    // from the same kubeconfig (serve reports a missing one).
    let definitions = match &args.provider.hub_kubeconfig {
        Some(path) => {
            let hub = score_provider::HubClient::load(path, &user_agent)
                .await
                .map_err(CliError::from)?;
            let metrics = DefinitionMetrics::default();
            metrics.register(app.registry());
            let shared = Shared {
                cluster: args.cluster_name.clone(),
                hub,
                prom,
                caps: args.prometheus.caps(),
                reserved: vec![RESOURCE_USAGE_SCORE.to_owned(), args.score_name.clone()],
                manager: MANAGER.to_owned(),
                hysteresis: args.provider.hysteresis,
                debounce: args.provider.debounce,
                hub_check_interval: args.provider.hub_kubeconfig_check_interval,
                metrics,
            };
            let runners = DefinitionRunners::new(shared, app.shutdown());
            Some(tokio::spawn(runners.run(
                args.definitions_file.clone(),
                args.provider.hub_kubeconfig_check_interval,
            )))
        }
        None => None,
    };
    tracing::info!(cluster = %args.cluster_name, "resource-usage agent starting");
    let served = score_provider::serve(
        app,
        provider,
        &args.provider,
        &args.score_name,
        MANAGER,
        lease,
    )
    .await;
    if let Some(task) = definitions {
        // Stops at the same signal; an early serve error stops it here.
        if served.is_err() {
            task.abort();
        }
        let _ = task.await;
    }
    served?;
    Ok(())
}

async fn print(args: PrintArgs) -> Result<(), AgentError> {
    let bounds = args.source.bounds()?;
    let source = args.source.source().await?;
    let mut provider = ResourceUsage::new(&args.cluster_name, source, bounds);
    let free = provider.free_when_ready(Duration::from_secs(60)).await?;
    let computed = provider.compute().await?;
    let scores: BTreeMap<&str, BTreeMap<&str, i32>> = computed
        .iter()
        .filter_map(|(cluster, outcome)| match outcome {
            score_provider::Outcome::Scores(s) => Some((cluster, s.iter().collect())),
            score_provider::Outcome::Unavailable { .. } => None,
        })
        .collect();
    let free: BTreeMap<&str, serde_json::Value> = Resource::ALL
        .into_iter()
        .filter_map(|r| {
            let f = free.get(r)?;
            Some((
                r.name(),
                serde_json::json!({ "cluster": f.cluster, "node": f.node }),
            ))
        })
        .collect();
    let out = serde_json::json!({ "free": free, "scores": scores });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
