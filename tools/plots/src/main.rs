//! `plots`: draws docs/figures/*.svg from the scale harness's JSON in docs/figures/data/.
//!
//! ```sh
//! cargo run -p plots                 # rewrite docs/figures/*.svg
//! cargo run -p plots -- --check      # fail when a committed SVG differs from a fresh render
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Draws the performance figures (ours against upstream) from the scale harness's JSON.
#[derive(Parser)]
#[command(about)]
struct Args {
    /// The folder of the harness's JSON files (`scale --json <path>`).
    #[arg(long, default_value_os_t = repo().join("docs/figures/data"))]
    data: PathBuf,
    /// Where the SVGs go.
    #[arg(long, default_value_os_t = repo().join("docs/figures"))]
    out: PathBuf,
    /// Write nothing; fail when a file in --out differs from what the data renders to.
    #[arg(long)]
    check: bool,
}

/// The repository root (this crate is tools/plots).
fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let figures = match plots::render_all(&args.data) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.check {
        let mut stale = 0;
        for f in &figures {
            let path = args.out.join(f.name);
            match std::fs::read_to_string(&path) {
                Ok(old) if old == f.svg => println!("up to date: {}", path.display()),
                Ok(_) => {
                    stale += 1;
                    eprintln!("differs from the data: {}", path.display());
                }
                Err(e) => {
                    stale += 1;
                    eprintln!("cannot read {}: {e}", path.display());
                }
            }
        }
        if stale > 0 {
            eprintln!("error: {stale} figure(s) out of date: run `cargo run -p plots`");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    if let Err(e) = plots::write_all(&figures, &args.out) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    for f in &figures {
        println!("wrote {}", args.out.join(f.name).display());
    }
    ExitCode::SUCCESS
}
