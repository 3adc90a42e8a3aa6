//! The run as JSON (`--json <path>`): the figures of the throughput, moves/burst and flap
//! scenarios with the run's date, commit and command, in the format `docs/figures/data/` keeps
//! and `tools/plots` draws from. Durations are seconds (`_s`) or milliseconds (`_ms`), memory
//! is MB (10^6 bytes), as in the markdown report.

use super::*;

/// The format's name and version: a reader refuses other versions.
pub(crate) const FORMAT: &str = "ocm-placement/scale-run/v1";

/// Seconds, to the millisecond.
pub(crate) fn s(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Milliseconds, to the tenth.
pub(crate) fn ms_value(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// MB (10^6 bytes), to the tenth.
pub(crate) fn mb_value(bytes: u64) -> f64 {
    (bytes as f64 / 1e5).round() / 10.0
}

/// To two decimals (a count that came out as -0.0 from subtracting the harness's own
/// requests is written as 0).
pub(crate) fn r2(v: f64) -> f64 {
    let r = (v * 100.0).round() / 100.0;
    if r == 0.0 { 0.0 } else { r }
}

/// This process's command line, quoted for a POSIX shell where needed.
pub(crate) fn command_line() -> String {
    std::env::args()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
            if plain {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) struct Runs<'a> {
    pub(crate) throughput: &'a [ThroughputResult],
    pub(crate) moves: &'a [moves::Outcome],
    pub(crate) flap: &'a [flap::Outcome],
}

pub(crate) fn document(args: &Args, started: jiff::Timestamp, rev: &str, runs: &Runs<'_>) -> Value {
    let mut doc = json!({
        "format": FORMAT,
        "harness": "placement-scheduler/examples/scale",
        "date": started.strftime("%Y-%m-%d").to_string(),
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "commit": rev,
        "command": command_line(),
        "machine": machine(),
        "throughput": runs.throughput.iter().map(ThroughputResult::json).collect::<Vec<_>>(),
        "moves": runs.moves.iter().map(moves::Outcome::json).collect::<Vec<_>>(),
        "flap": runs.flap.iter().map(flap::Outcome::json).collect::<Vec<_>>(),
    });
    if args.controller != Which::Ours {
        doc["upstream"] = json!(format!(
            "OCM placement controller {}",
            testenv::paths::version("OCM_VERSION").unwrap_or("?")
        ));
    }
    doc
}

pub(crate) fn write(path: &Path, doc: &Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(doc)?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    eprintln!("figures written to {}", path.display());
    Ok(())
}
