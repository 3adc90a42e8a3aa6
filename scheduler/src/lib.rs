//! The OCM placement scheduler: a sans-IO scheduling core ([`core`]) and [`simulate`].

pub mod coexist;
pub mod controller;
pub mod core;
pub mod debug;
pub mod explain;
pub mod simulate;
pub mod upstream;
