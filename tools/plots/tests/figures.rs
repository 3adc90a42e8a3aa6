//! The committed figures are what the committed data draws, byte for byte; bad data fails with
//! a message that names the file and what is wrong.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A new, empty folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plots-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The committed data files, copied into `dir`.
fn copy_data(dir: &Path) {
    for entry in std::fs::read_dir(repo().join("docs/figures/data")).expect("data dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
    }
}

#[test]
fn committed_svgs_are_what_the_committed_data_draws() {
    let figures = plots::render_all(&repo().join("docs/figures/data")).expect("render");
    let names: Vec<&str> = figures.iter().map(|f| f.name).collect();
    assert_eq!(names, ["throughput.svg", "reaction.svg", "memory.svg"]);
    for f in &figures {
        let path = repo().join("docs/figures").join(f.name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run `cargo run -p plots`)", path.display()));
        assert!(
            committed == f.svg,
            "{} differs from a fresh render of docs/figures/data: run `cargo run -p plots` and commit the result",
            path.display()
        );
    }
    // Rendering again gives the same bytes (nothing depends on time, fonts or the machine).
    let again = plots::render_all(&repo().join("docs/figures/data")).expect("render again");
    for (a, b) in figures.iter().zip(&again) {
        assert_eq!(a.svg, b.svg, "{} is not deterministic", a.name);
    }
}

/// Whether `svg` has a text element whose whole text is `text` (plotters writes it on a line
/// of its own).
fn has_text(svg: &str, text: &str) -> bool {
    svg.contains(&format!(">\n{text}\n</text>"))
}

#[test]
fn every_figure_shows_its_provenance_and_units() {
    let figures = plots::render_all(&repo().join("docs/figures/data")).expect("render");
    let svg = |name: &str| &figures.iter().find(|f| f.name == name).expect("figure").svg;
    let t = svg("throughput.svg");
    assert!(t.contains("commit 0a34bf6"), "throughput provenance");
    assert!(t.contains("--scenario throughput --placements 1000 --clusters 1000"));
    assert!(
        has_text(t, "13.4 s") && has_text(t, "44.3 s"),
        "the bars' values"
    );
    assert!(has_text(t, "seconds"), "the axis unit");
    let r = svg("reaction.svg");
    assert!(r.contains("Measured in 2 runs, 2026-11-26, commit 0a34bf6"));
    assert!(r.contains("--scenario react"));
    for v in ["427", "640", "1,712", "2,278"] {
        assert!(has_text(r, v), "reaction value {v}");
    }
    assert!(has_text(r, "milliseconds (log scale)"));
    let m = svg("memory.svg");
    assert!(m.contains("commit 0a34bf6") && m.contains("commit 9b7dfb9"));
    for v in ["40 MB", "116 MB", "111 MB"] {
        assert!(has_text(m, v), "memory value {v}");
    }
    assert!(has_text(m, "not measured"), "upstream at 10,000 x 1,000");
}

#[test]
fn malformed_json_fails_naming_the_file_and_the_place() {
    let dir = scratch("malformed");
    copy_data(&dir);
    let bad = dir.join(plots::THROUGHPUT_1000);
    std::fs::write(
        &bad,
        "{\n  \"format\": \"ocm-placement/scale-run/v1\",\n  \"date\": \n}\n",
    )
    .expect("write");
    let err = plots::render_all(&dir).err().expect("an error").to_string();
    assert!(err.contains(&bad.display().to_string()), "{err}");
    assert!(err.contains("not a scale run's JSON"), "{err}");
    assert!(err.contains("line 4 column 1"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn data_without_provenance_or_of_another_format_is_refused() {
    let dir = scratch("provenance");
    copy_data(&dir);
    let path = dir.join(plots::REACT_RUNS[1]);
    let original = std::fs::read_to_string(&path).expect("read");
    let mut doc: serde_json::Value = serde_json::from_str(&original).expect("json");

    doc.as_object_mut().expect("object").remove("commit");
    std::fs::write(&path, doc.to_string()).expect("write");
    let err = plots::render_all(&dir).err().expect("an error").to_string();
    assert!(err.contains("missing field `commit`"), "{err}");

    doc["commit"] = "".into();
    std::fs::write(&path, doc.to_string()).expect("write");
    let err = plots::render_all(&dir).err().expect("an error").to_string();
    assert!(err.contains("empty \"commit\""), "{err}");

    doc["commit"] = "abc1234".into();
    doc["format"] = "ocm-placement/scale-run/v2".into();
    std::fs::write(&path, doc.to_string()).expect("write");
    let err = plots::render_all(&dir).err().expect("an error").to_string();
    assert!(
        err.contains("format \"ocm-placement/scale-run/v2\""),
        "{err}"
    );

    std::fs::remove_file(&path).expect("remove");
    let err = plots::render_all(&dir).err().expect("an error").to_string();
    assert!(
        err.contains("cannot read") && err.contains("react-run2.json"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_row_is_named() {
    let dir = scratch("row");
    copy_data(&dir);
    let path = dir.join(plots::THROUGHPUT_1000);
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    doc["throughput"]
        .as_array_mut()
        .expect("rows")
        .retain(|r| r["controller"] != "upstream");
    std::fs::write(&path, doc.to_string()).expect("write");
    let err = plots::render_all(&dir).err().expect("an error").to_string();
    assert!(
        err.contains("no throughput row for upstream at 1000 x 1000"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// tests/data/harness-run.json is what `scale --json` wrote for a small run (ours and
/// upstream, 20 Placements x 5 clusters, a debug build): the harness's format is this tool's.
#[test]
fn the_harness_output_is_what_the_tool_reads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/harness-run.json");
    let src = plots::Source::read(&path).expect("the harness's JSON");
    let run = &src.run;
    assert!(run.command.contains("--json"), "{}", run.command);
    assert_eq!(run.throughput.len(), 2);
    for (row, controller) in run
        .throughput
        .iter()
        .zip([plots::Controller::Ours, plots::Controller::Upstream])
    {
        assert_eq!(row.controller, controller);
        assert_eq!((row.placements, row.clusters), (20, 5));
        assert!(row.decided_s.is_some_and(|s| s > 0.0));
        assert!(row.peak_rss_mb.is_some_and(|mb| mb > 0.0));
        assert!(row.writes_per_placement.is_some());
    }
}
