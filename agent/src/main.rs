//! `resource-usage-agent`: publishes a managed cluster's CPU and memory headroom as AddOnPlacementScores.

use clap::{Parser, Subcommand};

/// Publishes a managed cluster's resource headroom as AddOnPlacementScores on the hub.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {}

fn main() {
    // Subcommands and the agent's flags land with their issues.
    let _ = Cli::parse();
}
