//! `placement-scheduler`: the OCM placement scheduler.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use placement_scheduler::simulate::{self, Objects, report};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate(args) => match simulate_cmd(args) {
            Ok(out) => {
                print!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn simulate_cmd(args: SimulateArgs) -> Result<String, Box<dyn std::error::Error>> {
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
            return Err(format!("no Placement {only} in the input").into());
        }
    }
    let now = args.now.unwrap_or_else(jiff::Timestamp::now);
    let results = simulate::run(&objects, now, &args.placements);
    Ok(match args.output {
        Output::Text => report::text(&results),
        Output::Json => format!("{:#}\n", report::objects(&results)),
        Output::Yaml => serde_saphyr::to_string(&report::objects(&results))?,
    })
}
