//! `placement-scheduler`: the OCM placement scheduler.

use clap::{Parser, Subcommand};

/// The OCM placement scheduler.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {}

fn main() {
    // Subcommands (`simulate`, `controller`, `debug`) land with their issues.
    let _ = Cli::parse();
}
