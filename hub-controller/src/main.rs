//! `resource-usage-hub`: the hub add-on manager and the Thanos-backed scorer.

use clap::{Parser, Subcommand};

/// The hub side of the resource-usage score provider.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {}

fn main() {
    // Subcommands (`manager`, `scorer`) land with their issues.
    let _ = Cli::parse();
}
