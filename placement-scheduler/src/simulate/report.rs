//! Rendering simulate results: a human report, or the objects as YAML or JSON.

use std::fmt::Write as _;

use ocm_api::Placement;
use serde_json::{Value, json};

use super::Simulated;
use placement_core::{Code, Outcome};

/// The human-readable report of every placement.
pub fn text(results: &[Simulated]) -> String {
    let mut out = String::new();
    for (i, r) in results.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let ns = r
            .placement
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        let name = r.placement.metadata.name.as_deref().unwrap_or_default();
        let _ = writeln!(out, "Placement {ns}/{name}");
        match &r.outcome {
            None => {
                let _ = writeln!(
                    out,
                    "  skipped: annotation {} is \"true\"",
                    ocm_api::wellknown::annotation::PLACEMENT_DISABLE
                );
            }
            Some(o) => placement_text(&mut out, o),
        }
        sources_text(&mut out, &r.sources);
    }
    out
}

fn placement_text(out: &mut String, o: &Outcome) {
    status_text(out, o);
    selection_text(out, o);
    decisions_text(out, o);
    if !o.filtered.is_empty() {
        score_table(out, o);
    }
    filtered_out_text(out, o);
    spread_text(out, o);
    if let Some(t) = o.requeue_at {
        let _ = writeln!(out, "  reschedule at: {t}");
    }
}

/// The Placement's conditions, the warning the pass ended with, and the core's notes.
fn status_text(out: &mut String, o: &Outcome) {
    for c in &o.placement_status.conditions {
        let _ = writeln!(
            out,
            "  {}: {} ({}) {}",
            c.type_, c.status, c.reason, c.message
        );
    }
    if o.status.code == Code::Warning {
        let _ = writeln!(
            out,
            "  warning: {} (in {})",
            o.status.message, o.status.plugin
        );
    }
    for n in &o.notes {
        let _ = writeln!(out, "  note: {n}");
    }
}

/// How many were selected of how many wanted, and the moves the stability controls held.
fn selection_text(out: &mut String, o: &Outcome) {
    let wanted = o
        .placement_status
        .number_of_selected_clusters
        .saturating_add(o.unscheduled);
    let _ = writeln!(
        out,
        "  selected {} of {} wanted, from {} eligible clusters in sets [{}]",
        o.selected.len(),
        wanted,
        o.available.len() + o.terminating.len(),
        o.cluster_sets.join(", ")
    );
    if !o.held.is_empty() {
        let _ = writeln!(out, "  held by the stability controls:");
        for h in &o.held {
            let _ = writeln!(out, "    {h}");
        }
    }
}

/// Every decision group's slices (PlacementDecisions) and their clusters.
fn decisions_text(out: &mut String, o: &Outcome) {
    let _ = writeln!(out, "  decisions:");
    for g in &o.groups {
        for s in &g.slices {
            let names: Vec<&str> = s.clusters.iter().map(|c| &**c).collect();
            let _ = writeln!(
                out,
                "    group {} {:?}  {}  [{}]",
                g.index,
                g.name,
                s.name,
                names.join(", ")
            );
        }
    }
}

/// The clusters left out before scoring, and why.
fn filtered_out_text(out: &mut String, o: &Outcome) {
    let dropped: Vec<String> = o
        .terminating
        .iter()
        .map(|c| format!("{c}: terminating (deletionTimestamp set)"))
        .chain(o.filters.iter().flat_map(|f| {
            f.dropped
                .iter()
                .map(move |(c, why)| format!("{c}: {} filter: {why}", f.name))
        }))
        .collect();
    if !dropped.is_empty() {
        let _ = writeln!(out, "  filtered out:");
        for d in dropped {
            let _ = writeln!(out, "    {d}");
        }
    }
}

/// The spread constraints and each one's counts by domain.
fn spread_text(out: &mut String, o: &Outcome) {
    if let Some(s) = &o.spread {
        let _ = writeln!(out, "  spread: {}", s.constraints.join("; "));
        for (c, domains) in s.constraints.iter().zip(&s.domains) {
            let counts: Vec<String> = domains.iter().map(|(d, n)| format!("{d}={n}")).collect();
            let _ = writeln!(out, "    {c}: {}", counts.join(" "));
        }
        if let Some(why) = &s.stopped {
            let _ = writeln!(out, "    stopped: {why}");
        }
    }
}

/// Where the AddOn scores come from, when a ScoreDefinition fills any of them.
fn sources_text(out: &mut String, sources: &[(String, Option<String>)]) {
    if sources.iter().all(|(_, d)| d.is_none()) {
        return;
    }
    let _ = writeln!(out, "  score sources:");
    for (resource, def) in sources {
        match def {
            Some(d) => {
                let _ = writeln!(out, "    {resource}: ScoreDefinition {d}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "    {resource}: no ScoreDefinition (a score provider writes it)"
                );
            }
        }
    }
}

/// Every filtered cluster's score per prioritizer, weight and total; selected ones first.
fn score_table(out: &mut String, o: &Outcome) {
    let mut header: Vec<String> = vec!["CLUSTER".into()];
    header.extend(
        o.prioritizers
            .iter()
            .map(|p| format!("{} (x{})", p.name, p.weight)),
    );
    header.push("TOTAL".into());
    header.push("SELECTED".into());
    let mut order: Vec<usize> = (0..o.filtered.len()).collect();
    let rank = |i: usize| o.selected.iter().position(|s| *s == o.filtered[i]);
    order.sort_by_key(|&i| {
        (
            rank(i).unwrap_or(usize::MAX),
            std::cmp::Reverse(o.totals[i]),
            i,
        )
    });
    let mut rows = vec![header];
    for i in order {
        let mut row = vec![o.filtered[i].to_string()];
        row.extend(o.prioritizers.iter().map(|p| match p.scores[i] {
            Some(s) => s.to_string(),
            None => "-".into(),
        }));
        row.push(o.totals[i].to_string());
        row.push(rank(i).map_or(String::new(), |r| format!("#{}", r + 1)));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let _ = writeln!(out, "  scores:");
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        let _ = writeln!(out, "    {}", cells.join("  ").trim_end());
    }
}

/// The objects the controller would write: each Placement with its new status, then its
/// PlacementDecisions, as one `kind: List`.
pub fn objects(results: &[Simulated]) -> Value {
    let mut items = Vec::new();
    for r in results {
        let Some(o) = &r.outcome else { continue };
        let mut p: Placement = r.placement.clone();
        p.status = Some(o.placement_status.clone());
        items.push(json!(p));
        items.extend(o.decisions.iter().map(|d| json!(d)));
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}
