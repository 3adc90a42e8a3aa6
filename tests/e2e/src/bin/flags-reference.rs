//! Regenerates `docs/flags.md` from the binaries' `--help` (see `e2e::flags_reference`).
//!
//! ```sh
//! cargo run -p e2e --bin flags-reference
//! ```

use std::process::ExitCode;

use e2e::flags_reference::{build_binaries, helps, render, repo_root};

fn main() -> ExitCode {
    let page = build_binaries()
        .and_then(|dir| helps(&dir))
        .map(|h| render(&h));
    let path = repo_root().join("docs/flags.md");
    match page {
        Ok(page) => match std::fs::write(&path, page) {
            Ok(()) => {
                println!("wrote {}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("flags-reference: write {}: {e}", path.display());
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("flags-reference: {e}");
            ExitCode::FAILURE
        }
    }
}
