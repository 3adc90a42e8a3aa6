//! The OCM placement scheduler: a sans-IO scheduling core ([`core`]) and [`simulate`].

pub mod core;
pub mod simulate;
