//! Regenerates the values table of `charts/ocm-placement/README.md` from the chart's
//! `values.schema.json` and `values.yaml` (see `e2e::chart_readme`).
//!
//! ```sh
//! cargo run -p e2e --bin chart-readme
//! ```

use std::process::ExitCode;

use e2e::chart_readme::{Inputs, chart_dir};

fn main() -> ExitCode {
    let chart = chart_dir();
    let result = Inputs::read(&chart).and_then(|i| i.generate());
    match result {
        Ok(readme) => match std::fs::write(chart.join("README.md"), readme) {
            Ok(()) => {
                println!("wrote {}", chart.join("README.md").display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("chart-readme: write README.md: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("chart-readme: {e}");
            ExitCode::FAILURE
        }
    }
}
