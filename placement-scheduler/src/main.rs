//! `placement-scheduler`: the OCM placement scheduler.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use ocm_runtime::Leadership;
use ocm_runtime::app::{self, App, AppArgs, AppError, Drain, Hub, Running, Stopped};
use ocm_runtime::client::ClientError;
use ocm_runtime::tls::TlsError;
use placement_core::Limits;
use placement_core::limits;
use placement_core::snapshot::MaxScoreValidity;
use placement_scheduler::coexist::CoexistError;
use placement_scheduler::controller::{self, Handle, Options};
use placement_scheduler::debug::{self, DebugMetrics, DebugSource, Debugger};
use placement_scheduler::explain::ExplainError;
use placement_scheduler::simulate::input::InputError;
use placement_scheduler::simulate::{self, Objects, report};
use placement_scheduler::upstream::{self, Invocation, ProbesError, UpstreamArgs};
use thiserror::Error;

/// The OCM placement scheduler.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Schedule the Placements in YAML files (as `kubectl get -o yaml` exports them) without
    /// a cluster, and explain the decisions. With no path, runs on the built-in example fleet.
    Simulate(SimulateArgs),
    /// Run the placement controller against a hub: watch, schedule, write PlacementDecisions
    /// and Placement status; serve /metrics, /healthz, /readyz and the debug endpoint. Also
    /// takes the command line OCM's cluster-manager operator gives its placement image
    /// (`/placement controller ...`); started so, it serves only upstream's HTTPS port (see
    /// --listen) unless --metrics-bind-address or --debug-bind-address is given.
    Controller(Box<ControllerArgs>),
    /// Explain a Placement on a live hub: read it and everything it depends on (reads only),
    /// print the `simulate` report, and how its live decisions differ from what it would pick
    /// now. Also `kubectl placement explain NAMESPACE/NAME` (this binary as `kubectl-placement`).
    Explain(ExplainArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    /// A report per Placement: conditions, decisions, scores, filtered clusters.
    Text,
    /// The Placements with their new status and their PlacementDecisions, as YAML.
    Yaml,
    /// The same as JSON.
    Json,
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// Files or directories (their *.yaml files, in name order). A later object with the same
    /// kind, namespace and name replaces an earlier one.
    paths: Vec<PathBuf>,
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The time to schedule at (RFC 3339); default now. Decides score expiry and tolerations.
    #[arg(long, env = "SIMULATE_NOW")]
    now: Option<jiff::Timestamp>,
    /// Only these placements (`namespace/name`), repeatable.
    #[arg(long = "placement")]
    placements: Vec<String>,
    #[command(flatten)]
    validity: ValidityArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// The limits of one Placement's pass, shared by `simulate` and `controller` (and the debug
/// endpoint). A Placement past one is not scheduled: its decisions are kept and
/// `PlacementSatisfied=False` (`CELBudgetExceeded`, `ListLimitExceeded`) says why.
#[derive(clap::Args)]
struct LimitArgs {
    /// CEL cost units one Placement's pass may spend over all clusters (upstream's units: each
    /// expression may spend 1,000,000 per cluster, each cluster 10,000,000).
    #[arg(long, env = "CEL_COST_BUDGET", default_value_t = limits::DEFAULT_CEL_COST_BUDGET)]
    cel_cost_budget: u64,
    /// Wall time one Placement's pass may spend evaluating CEL selectors.
    #[arg(long, env = "CEL_TIME_BUDGET", default_value = "5s", value_parser = ocm_runtime::flags::parse_duration)]
    cel_time_budget: Duration,
    /// List items a Placement's spec may hold in all (predicates, their expressions and
    /// values, prioritizer configurations, tolerations, decision groups, ...).
    #[arg(long, env = "MAX_LIST_ITEMS", default_value_t = limits::DEFAULT_MAX_LIST_ITEMS)]
    max_list_items: usize,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            cel_cost: self.cel_cost_budget,
            cel_time: self.cel_time_budget,
            list_items: self.max_list_items,
        }
    }
}

/// The bound on score validity, shared by `simulate` and `controller`.
#[derive(clap::Args)]
struct ValidityArgs {
    /// A score that sets `validUntil` counts for at most this long after the hub last
    /// accepted a write of it (its managedFields time), however far ahead its `validUntil`
    /// lies; a Warning event `ScoreValidityCapped` names the scores the bound has ended. An
    /// unset `validUntil` never expires, as upstream. 0 turns the bound off. `simulate` counts
    /// from a file's managedFields or creationTimestamp, else from --now.
    #[arg(long, env = "MAX_SCORE_VALIDITY", default_value = "10m", value_parser = ocm_runtime::flags::parse_duration)]
    max_score_validity: Duration,
}

impl ValidityArgs {
    fn bound(&self) -> MaxScoreValidity {
        MaxScoreValidity::from_duration(self.max_score_validity)
    }
}

#[derive(clap::Args)]
struct ExplainArgs {
    /// The Placement, as NAMESPACE/NAME.
    placement: String,
    /// The kubeconfig (default: $KUBECONFIG, the in-cluster service account, ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(flatten)]
    validity: ValidityArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(clap::Args)]
struct ControllerArgs {
    #[command(flatten)]
    app: AppArgs,
    /// Placements scheduled at once (each placement's writes stay in order).
    #[arg(long, env = "WORKERS", default_value_t = 8)]
    workers: usize,
    /// Placements of one namespace scheduled at once while other namespaces' placements wait
    /// (default: half the workers, rounded up). Beyond it a namespace takes a worker only when
    /// no other namespace's placement is waiting and another worker stays free.
    #[arg(long, env = "MAX_WORKERS_PER_NAMESPACE", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_workers_per_namespace: Option<usize>,
    /// Over about this long, in 60 slices (each ±10%), look at every placement and reschedule
    /// those an event queued since their last pass started, that changed, or that never
    /// passed (a safety net: at rest it schedules nothing; e.g. 10m; 0s: never).
    #[arg(long, env = "RESYNC_PERIOD", default_value = "10m", value_parser = ocm_runtime::flags::parse_duration)]
    resync_period: Duration,
    /// A trailing delay for every event before its placements are scheduled (e.g. 100ms:
    /// fewer passes, that much more latency). 0s, the default: the first event for an idle
    /// placement schedules it at once (bursts are spaced by --min-pass-interval).
    #[arg(long, env = "EVENT_DEBOUNCE", default_value = "0s", value_parser = ocm_runtime::flags::parse_duration)]
    event_debounce: Duration,
    /// In a burst (two or more events for a placement since its last pass started, or while
    /// it waited for a worker), its next pass waits until its events pause this long, and
    /// starts no sooner than this after the last one started: a thousand score updates in a
    /// second cost a placement about two passes. A lone event is never delayed by it. 0s: no
    /// spacing (events that arrive while a placement is queued or being scheduled still
    /// coalesce into one more pass).
    #[arg(long, env = "MIN_PASS_INTERVAL", default_value = "100ms", value_parser = ocm_runtime::flags::parse_duration)]
    min_pass_interval: Duration,
    /// In a burst, the longest a placement's pass waits for its events to pause, from the
    /// first event it waits for: a storm that never pauses still gets a pass this often.
    #[arg(long, env = "MAX_BURST_DELAY", default_value = "2s", value_parser = ocm_runtime::flags::parse_duration)]
    max_burst_delay: Duration,
    /// 0s (the default): placements using Balance are rescored when their own inputs change
    /// and at the resync, as upstream does; other placements' moves do not wake them. A
    /// duration (e.g. 5m): that long after other placements' decisions moved, the Balance
    /// users whose Balance input changed are rescheduled once; the moves of that wave start
    /// no other (they wait for the resync), so placements do not chase each other.
    #[arg(long, env = "BALANCE_DELAY", default_value = "0s", value_parser = ocm_runtime::flags::parse_duration)]
    balance_delay: Duration,
    #[command(flatten)]
    validity: ValidityArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// Only schedule Placements in these namespaces (comma separated; default all).
    #[arg(long, env = "NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Where the debug endpoint listens; empty to turn it off. It serves HTTPS: with
    /// --tls-cert-file and --tls-key-file, else with a self-signed certificate made at start
    /// (its SHA-256 fingerprint is logged, for clients to pin). Started as `placement` (as OCM's
    /// placement controller), off unless given (so is --metrics-bind-address's port).
    #[arg(long, env = "DEBUG_BIND_ADDRESS", default_value = "0.0.0.0:9443")]
    debug_bind_address: String,
    /// Serve the debug endpoint over plain HTTP instead: only on a loopback
    /// --debug-bind-address (its callers' bearer tokens must not cross the network in clear).
    #[arg(
        long,
        env = "DEBUG_INSECURE_LOOPBACK",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    debug_insecure_loopback: bool,
    /// TLS certificate chain (PEM) for the debug endpoint, with --tls-key-file. Both files are
    /// read again when they change; new connections get the new certificate.
    #[arg(long, env = "TLS_CERT_FILE", requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    #[arg(long, env = "TLS_KEY_FILE", requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    #[command(flatten)]
    debug_limits: placement_scheduler::debug::DebugLimits,
    /// Start without checking whether OCM's own placement controller is active on the hub.
    /// Without it the scheduler first looks for it (its Lease `placement-lock` held, or its
    /// Deployment `cluster-manager-placement-controller` ready, in --ocm-hub-namespace) and
    /// refuses to start when it is, rather than fight it over the same PlacementDecisions.
    /// Not checked when started as `placement` (as OCM's placement controller itself).
    #[arg(
        long,
        env = "TAKE_OVER",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    take_over: bool,
    /// Where OCM's hub components (its placement controller) run.
    #[arg(
        long,
        env = "OCM_HUB_NAMESPACE",
        default_value = "open-cluster-management-hub"
    )]
    ocm_hub_namespace: String,
    #[command(flatten)]
    upstream: UpstreamArgs,
}

/// Why a command failed: printed as `error: <message>`.
#[derive(Debug, Error)]
enum CliError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("no Placement {0} in the input")]
    NoPlacement(String),
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::SerializeError),
    #[error(transparent)]
    Explain(#[from] ExplainError),
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Coexist(#[from] CoexistError),
    #[error(transparent)]
    Probes(#[from] ProbesError),
    #[error("--debug-bind-address {address}: {source}")]
    DebugBind {
        address: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    DebugAddress(std::io::Error),
    #[error("--debug-insecure-loopback and --tls-cert-file: choose one")]
    DebugTransport,
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("--debug-insecure-loopback: {0}")]
    DebugServe(#[source] debug::ServeError),
}

fn main() -> ExitCode {
    app::main("error: ", || {
        let (invocation, args) = upstream::invocation(std::env::args_os().collect());
        let name = invocation.display_name();
        let matches = Cli::command()
            .name(name)
            .bin_name(name)
            .get_matches_from(args);
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        match cli.command {
            Command::Simulate(args) => simulate_cmd(args).map(|out| print!("{out}")),
            Command::Explain(args) => {
                app::block_on(explain_cmd(args), Drain::Wait).map(|out| print!("{out}"))
            }
            Command::Controller(args) => {
                let own = matches
                    .subcommand_matches("controller")
                    .map(|m| own_listeners(m, invocation))
                    .unwrap_or_default();
                app::block_on(controller_cmd(*args, invocation, own), Drain::Background)
            }
        }
    })
}

/// Which of the scheduler's own listeners to open, besides upstream's HTTPS port (`--listen`):
/// the plain-HTTP metrics port and the debug endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct OwnListeners {
    metrics: bool,
    debug: bool,
}

/// Started as itself, both (where their flags say); started as `placement`, only those whose
/// flag or environment variable is given, so that OCM's placement pod listens where upstream's
/// controller does and nowhere else.
fn own_listeners(controller: &ArgMatches, invocation: Invocation) -> OwnListeners {
    let given = |id: &str| {
        controller
            .value_source(id)
            .is_some_and(|s| s != ValueSource::DefaultValue)
    };
    OwnListeners {
        metrics: upstream::opens_own_listener(invocation, given("metrics_bind_address")),
        debug: upstream::opens_own_listener(invocation, given("debug_bind_address")),
    }
}

fn simulate_cmd(args: SimulateArgs) -> Result<String, CliError> {
    let sources = if args.paths.is_empty() {
        simulate::input::embedded_fleet()
    } else {
        let mut all = Vec::new();
        for p in &args.paths {
            all.extend(simulate::input::read_path(p)?);
        }
        all
    };
    let objects = Objects::load(&sources)?;
    objects.check_references()?;
    for only in &args.placements {
        if !objects
            .placements
            .keys()
            .any(|(ns, n)| format!("{ns}/{n}") == *only)
        {
            return Err(CliError::NoPlacement(only.clone()));
        }
    }
    let now = args.now.unwrap_or_else(jiff::Timestamp::now);
    let results = simulate::run(
        &objects,
        now,
        &args.placements,
        args.validity.bound(),
        args.limits.limits(),
    );
    Ok(match args.output {
        Output::Text => report::text(&results),
        Output::Json => format!("{:#}\n", report::objects(&results)),
        Output::Yaml => serde_saphyr::to_string(&report::objects(&results))?,
    })
}

async fn explain_cmd(args: ExplainArgs) -> Result<String, CliError> {
    use placement_scheduler::explain;
    let (namespace, name) = explain::parse_key(&args.placement)?;
    let user_agent = concat!("placement-scheduler-explain/", env!("CARGO_PKG_VERSION"));
    let config = ocm_runtime::client::load_config(args.kubeconfig.as_deref()).await?;
    let client = ocm_runtime::client::client_with(config, None, user_agent)?;
    let objects = explain::read_hub(&client, &namespace, &name).await?;
    let key = format!("{namespace}/{name}");
    let results = simulate::run(
        &objects,
        jiff::Timestamp::now(),
        std::slice::from_ref(&key),
        args.validity.bound(),
        args.limits.limits(),
    );
    let diff = results.first().and_then(|r| {
        Some(explain::live_diff(
            &objects,
            &r.placement,
            r.outcome.as_ref()?,
        ))
    });
    Ok(match args.output {
        Output::Text => {
            let mut out = report::text(&results);
            if let Some(d) = &diff {
                out.push_str(&explain::diff::text(d));
            }
            out
        }
        Output::Json | Output::Yaml => {
            let value = serde_json::json!({
                "placement": key,
                "computed": report::objects(&results),
                "live": diff,
            });
            match args.output {
                Output::Json => format!("{value:#}\n"),
                _ => serde_saphyr::to_string(&value)?,
            }
        }
    })
}

async fn controller_cmd(
    mut args: ControllerArgs,
    invocation: Invocation,
    own: OwnListeners,
) -> Result<(), CliError> {
    let mut app = App::start(
        &args.app.log,
        concat!("placement-scheduler/", env!("CARGO_PKG_VERSION")),
    )?;
    upstream_flags(&mut args, invocation);
    let hub = app.connect(&args.app.client).await?;
    // The debug endpoint's reviews have a rate limiter of their own (same settings), so that
    // callers of the endpoint never spend the controller's (its client, below, sends writes
    // only while this replica leads).
    let review_client = hub.limited_apart()?;
    let handle = Handle::new(app.registry());
    let debug_metrics = DebugMetrics::new(app.registry());
    bound_passes(&handle, &args);
    say_listeners(invocation, own);
    let running = app
        .serve_optional(own.metrics.then_some(&args.app.serve))
        .await?;
    serve_upstream_port(&args, invocation, &running).await?;
    if own.debug && !args.debug_bind_address.is_empty() {
        let debugger = debugger(&args, &handle, review_client, debug_metrics);
        let server = debug_endpoint(&args, debugger, running.shutdown()).await?;
        tokio::spawn(server);
    }
    // Probes answer (not ready) while the hub cannot be reached; the stop signal ends the wait.
    let server = hub.server();
    let Ok(()) = running.wait_for_hub(&hub.unlimited()?, &server).await else {
        return Ok(());
    };
    let Ok(()) = check_alone(&args, invocation, &hub, &running, &server).await? else {
        return Ok(());
    };
    let leadership = running.elect(&args.app.leader, &hub, upstream::lease_name(invocation))?;
    let writes = hub.writer(&leadership)?;
    // Ready once every watch has listed; until then /readyz names the watches that have not
    // and their last error (a missing CRD). A standby is ready too (it keeps warm stores).
    tokio::spawn(handle.sync.clone().report_to(running.health()));
    let options = controller_options(args, leadership.clone());
    // A replica deposed by another holder exits (client-go's `OnStoppedLeading`) and comes
    // back as a standby when restarted; one that only missed its renewals (the apiserver
    // down) stops writing and leads again when it renews (see `Leadership::deposed`).
    let run = controller::run(writes, handle, options, running.shutdown());
    running.run_until_deposed(run, leadership).await?;
    Ok(())
}

/// The bounds of every pass: the score validity bound and the limits.
fn bound_passes(handle: &Handle, args: &ControllerArgs) {
    let mut state = handle.state.write();
    state.snapshot.set_max_score_validity(args.validity.bound());
    state.snapshot.set_limits(args.limits.limits());
}

/// Started as `placement` without both of its own listeners: says which it opens.
fn say_listeners(invocation: Invocation, own: OwnListeners) {
    if invocation == Invocation::Upstream && !(own.metrics && own.debug) {
        tracing::info!(
            metrics_port = own.metrics,
            debug_endpoint = own.debug,
            "started as OCM's placement controller: only the listeners upstream's has, and those asked for (--metrics-bind-address, --debug-bind-address)"
        );
    }
}

/// Upstream's HTTPS port (probes and metrics), when it is to be opened.
async fn serve_upstream_port(
    args: &ControllerArgs,
    invocation: Invocation,
    running: &Running,
) -> Result<(), CliError> {
    if let Some(addr) = args.upstream.listen_address(invocation) {
        let probes = upstream::serve_probes(
            addr,
            running.registry(),
            running.health(),
            args.app.serve.limits.clone(),
            running.shutdown(),
        )
        .await?;
        tokio::spawn(probes);
    }
    Ok(())
}

/// The debug endpoint's handler, scheduling from the controller's stores.
fn debugger(
    args: &ControllerArgs,
    handle: &Handle,
    review_client: kube::Client,
    metrics: DebugMetrics,
) -> Debugger {
    let source: Arc<dyn DebugSource> = Arc::new(handle.clone());
    Debugger::new(review_client, source, args.debug_limits.clone(), metrics)
}

/// Refuses to fight OCM's own placement controller (see `coexist`), unless this is it or
/// --take-over says it is scaled down. `Err(Stopped)` inside: the stop signal came first.
async fn check_alone(
    args: &ControllerArgs,
    invocation: Invocation,
    hub: &Hub,
    running: &Running,
    server: &str,
) -> Result<Result<(), Stopped>, CliError> {
    if invocation == Invocation::Upstream {
        // It *is* OCM's placement controller: nothing to check.
        return Ok(Ok(()));
    }
    if args.take_over {
        tracing::info!(
            "--take-over: not checking whether OCM's placement controller is active; scale it down, or both will write the same PlacementDecisions"
        );
        return Ok(Ok(()));
    }
    let client = hub.unlimited()?;
    let namespace = &args.ocm_hub_namespace;
    let check = || placement_scheduler::coexist::check(&client, namespace);
    match running.retry_while_unreachable(server, check).await {
        Ok(checked) => Ok(Ok(checked?)),
        Err(stopped) => Ok(Err(stopped)),
    }
}

/// The controller's options, from its flags.
fn controller_options(args: ControllerArgs, leadership: Leadership) -> Options {
    Options {
        workers: args.workers,
        workers_per_namespace: args.max_workers_per_namespace,
        resync: args.resync_period,
        namespaces: args.namespaces,
        pacing: controller::queue::Pacing {
            debounce: args.event_debounce,
            spacing: args.min_pass_interval,
            max_delay: args.max_burst_delay,
        },
        balance_delay: args.balance_delay,
        leadership,
    }
}

/// Upstream's flags that map onto ours (OCM's operator command line, `placement controller`).
fn upstream_flags(args: &mut ControllerArgs, invocation: Invocation) {
    let (up, app) = (&args.upstream, &mut args.app);
    up.log_ignored();
    if up.disable_leader_election {
        app.leader.leader_elect = false;
    }
    app.leader.leader_election_namespace =
        up.lease_namespace(invocation, &app.leader.leader_election_namespace);
    if let Some(qps) = up.kube_api_qps {
        app.client.client_qps = qps;
    }
    if let Some(burst) = up.kube_api_burst {
        app.client.client_burst = burst;
    }
}

/// The debug endpoint, bound and checked, ready to spawn: HTTPS with the given or a
/// self-signed certificate, or plain HTTP on loopback when asked for.
async fn debug_endpoint(
    args: &ControllerArgs,
    debugger: Debugger,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, CliError> {
    use placement_scheduler::debug::Transport;
    let listener = tokio::net::TcpListener::bind(&args.debug_bind_address)
        .await
        .map_err(|source| CliError::DebugBind {
            address: args.debug_bind_address.clone(),
            source,
        })?;
    let addr = listener.local_addr().map_err(CliError::DebugAddress)?;
    let transport = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(_), _) if args.debug_insecure_loopback => {
            return Err(CliError::DebugTransport);
        }
        _ if args.debug_insecure_loopback => Transport::PlainLoopback,
        (Some(cert), Some(key)) => Transport::Tls(ocm_runtime::tls::server_config(cert, key)?),
        _ => {
            let names = ocm_runtime::tls::self_signed_names(addr);
            let generated = ocm_runtime::tls::self_signed(&names)?;
            tracing::info!(
                fingerprint = %generated.fingerprint,
                ?names,
                "no --tls-cert-file: the debug endpoint serves a self-signed certificate made at start (kept in memory only)"
            );
            Transport::Tls(generated.config)
        }
    };
    // The same connection limits as the metrics port, counted separately.
    let listener = ocm_runtime::Listener::new(listener, args.app.serve.limits.clone());
    debug::serve(listener, transport, debugger, shutdown).map_err(CliError::DebugServe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The listeners `argv` opens besides upstream's HTTPS port.
    fn own(argv: &[&str]) -> OwnListeners {
        let (invocation, args) =
            upstream::invocation(argv.iter().map(std::ffi::OsString::from).collect());
        let matches = Cli::command()
            .try_get_matches_from(args)
            .expect("a valid command line");
        let controller = matches
            .subcommand_matches("controller")
            .expect("the controller");
        own_listeners(controller, invocation)
    }

    /// Started as itself the scheduler opens both its own listeners, as before; started as
    /// `placement`, only those given (an empty debug address still turns that one off).
    #[test]
    fn own_listeners_are_opt_in_only_as_upstream() {
        let both = OwnListeners {
            metrics: true,
            debug: true,
        };
        assert_eq!(own(&["placement-scheduler", "controller"]), both);
        assert_eq!(own(&["/placement", "controller"]), OwnListeners::default());
        assert_eq!(
            own(&["/placement-scheduler", "/placement", "controller"]),
            OwnListeners::default()
        );
        assert_eq!(
            own(&[
                "/placement",
                "controller",
                "--metrics-bind-address=127.0.0.1:8080"
            ]),
            OwnListeners {
                metrics: true,
                debug: false
            }
        );
        assert_eq!(
            own(&[
                "/placement",
                "controller",
                "--debug-bind-address=0.0.0.0:9443"
            ]),
            OwnListeners {
                metrics: false,
                debug: true
            }
        );
    }

    /// The arguments OCM's cluster-manager operator gives its placement container (its
    /// `placement/deployment.yaml`, every optional part rendered), as the image runs them.
    #[test]
    fn upstreams_command_line_parses() {
        let (invocation, args) = upstream::invocation(
            [
                "/placement",
                "controller",
                "--feature-gates=Foo=true",
                "--feature-gates=Bar=false",
                "--kubeconfig=/var/run/secrets/hub/kubeconfig",
                "--tls-min-version=VersionTLS12",
                "--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384",
                "--disable-leader-election",
                "--leader-election-lease-duration=137s",
                "--namespace=open-cluster-management-hub",
                "--kube-api-qps=50",
                "--kube-api-burst=100",
            ]
            .map(std::ffi::OsString::from)
            .to_vec(),
        );
        assert_eq!(invocation, Invocation::Upstream);
        let cli = Cli::try_parse_from(args).expect("upstream's command line");
        let Command::Controller(c) = cli.command else {
            panic!("not the controller");
        };
        assert_eq!(c.upstream.feature_gates, ["Foo=true", "Bar=false"]);
        assert!(c.upstream.disable_leader_election);
        assert_eq!(c.upstream.kube_api_burst, Some(100));
        assert_eq!(
            c.app.leader.leader_election_lease_duration,
            Duration::from_secs(137)
        );
        assert!(!c.take_over);
    }
}
