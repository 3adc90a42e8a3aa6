//! The OCM placement scheduler: the hub [`controller`], the [`debug`] endpoint, [`explain`],
//! [`simulate`] and the CLI around the sans-IO scheduling core (crate `placement_core`).

pub mod coexist;
pub mod controller;
pub mod debug;
pub mod explain;
pub mod simulate;
pub mod upstream;
