//! `resource-usage-hub`: the hub side of the resource-usage score provider.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::FutureExt;
use ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;
use resource_usage_hub::manager::controller::{self, AlwaysLeader, Handle, Leader, Options};
use resource_usage_hub::manager::plan::{HealthMode, Settings};
use resource_usage_hub::manager::render::AgentTemplate;

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
}

#[derive(clap::Args)]
struct ManagerArgs {
    #[command(flatten)]
    client: ocm_runtime::ClientArgs,
    #[command(flatten)]
    leader: ocm_runtime::LeaderArgs,
    #[command(flatten)]
    serve: ocm_runtime::ServeArgs,
    #[command(flatten)]
    log: ocm_runtime::LogArgs,
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
    #[arg(long, env = "RESYNC_PERIOD", default_value = "5m", value_parser = ocm_runtime::leader::parse_duration)]
    resync_period: Duration,
    /// Events within this long make one pass.
    #[arg(long, env = "EVENT_DEBOUNCE", default_value = "100ms", value_parser = ocm_runtime::leader::parse_duration)]
    event_debounce: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Manager(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(Into::into)
            .and_then(|rt| rt.block_on(manager(*args))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn manager(args: ManagerArgs) -> Result<(), Box<dyn std::error::Error>> {
    ocm_runtime::logging::init(&args.log)?;
    if args.agent_image.trim().is_empty() {
        return Err("--agent-image must name an image".into());
    }
    let shutdown = ocm_runtime::signal().shared();
    let user_agent = concat!("resource-usage-hub/", env!("CARGO_PKG_VERSION"));
    let config = ocm_runtime::client::load_config(args.client.kubeconfig.as_deref()).await?;
    let limiter = args.client.rate_limiter()?;
    let client = ocm_runtime::client::client_with(config, limiter.as_ref(), user_agent)?;

    let mut registry = prometheus_client::registry::Registry::default();
    if let Some(l) = &limiter {
        l.register(&mut registry);
    }
    let handle = Handle::new(&mut registry);
    let registry = Arc::new(registry);
    let health = ocm_runtime::Health::new();
    let listener = args.serve.bind().await?;
    tokio::spawn(ocm_runtime::serve_metrics(
        listener,
        registry,
        health.clone(),
        shutdown.clone(),
    ));

    let leader: Arc<dyn Leader> = match args
        .leader
        .elector(client.clone(), &format!("{}-manager", args.addon_name))?
    {
        Some(elector) => {
            let leadership = elector.leadership();
            tracing::info!(identity = elector.identity(), "leader election on");
            tokio::spawn(elector.run(shutdown.clone()));
            Arc::new(leadership)
        }
        None => Arc::new(AlwaysLeader),
    };
    // Ready once every watch has listed; a standby is ready too (it keeps warm stores).
    tokio::spawn({
        let handle = handle.clone();
        let health = health.clone();
        async move {
            while !handle.ready() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            health.set_ready(true);
        }
    });

    let agent = args
        .agent_name
        .unwrap_or_else(|| format!("{}-agent", args.addon_name));
    let settings = Settings {
        template: AgentTemplate {
            addon_name: args.addon_name.clone(),
            image: args.agent_image,
            default_install_namespace: args.agent_install_namespace,
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
        leader,
    };
    controller::run(client, handle, options, shutdown).await;
    Ok(())
}
