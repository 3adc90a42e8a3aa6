//! Steady (upstream `plugins/steady`): 100 for clusters already in this placement's
//! decisions, 0 for the rest.

pub(crate) fn score(in_decision: &[bool]) -> Vec<Option<i64>> {
    in_decision
        .iter()
        .map(|&d| Some(if d { 100 } else { 0 }))
        .collect()
}
