//! The local fleet (`fleet`: a hub control plane, the scheduler, the add-on manager and one
//! agent per cluster as local processes) and, in `tests/`, the cross-crate tests: the Helm chart
//! with the real helm and apiserver, and the whole loop on the fleet; the chart README's values
//! table (`chart-readme`); the flags reference `docs/flags.md` (`flags-reference`); the
//! Markdown and `--help` readers of the docs tests (`docs`).

pub mod agents;
pub mod chart;
pub mod chart_readme;
pub mod docs;
pub mod flags_reference;
pub mod fleet;
pub mod prereqs;
pub mod thanos;
