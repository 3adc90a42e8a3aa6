//! `docs/flags.md` is what the binaries' `--help` says today (regenerate it with
//! `cargo run -p e2e --bin flags-reference`).

use e2e::flags_reference::{build_binaries, helps, render, repo_root};

#[test]
fn the_flags_reference_is_up_to_date() {
    let dir = build_binaries().expect("build the binaries");
    let page = render(&helps(&dir).expect("--help of every command"));
    let path = repo_root().join("docs/flags.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == page,
        "{} is out of date: run `cargo run -p e2e --bin flags-reference` and commit it",
        path.display()
    );
}
