//! `crdgen`: prints the CRDs generated from `ocm-api`'s types as one multi-document YAML
//! stream, for `kubectl apply -f -` or for comparing with upstream's.

use std::process::ExitCode;

use clap::Parser;

/// Print the CRDs of every OCM kind this project defines, generated from its Rust types.
#[derive(Parser)]
#[command(name = "crdgen", version)]
struct Cli {
    /// Print only the CRDs whose kind is one of these (for example `Placement`); all when empty.
    #[arg(long = "kind", env = "CRDGEN_KINDS", value_delimiter = ',')]
    kinds: Vec<String>,
    /// Print this project's own kinds instead (ScoreDefinition: the chart's `crds/`).
    #[arg(long)]
    ours: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut crds = if cli.ours {
        ocm_api::crds::ours()
    } else {
        ocm_api::crds::all()
    };
    if !cli.kinds.is_empty() {
        let unknown: Vec<&String> = cli
            .kinds
            .iter()
            .filter(|k| !crds.iter().any(|c| &c.spec.names.kind == *k))
            .collect();
        if !unknown.is_empty() {
            eprintln!("crdgen: unknown kind(s): {unknown:?}");
            return ExitCode::FAILURE;
        }
        crds.retain(|c| cli.kinds.contains(&c.spec.names.kind));
    }
    match ocm_api::crds::to_yaml(&crds) {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("crdgen: cannot serialize the CRDs: {err}");
            ExitCode::FAILURE
        }
    }
}
