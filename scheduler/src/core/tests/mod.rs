//! Table tests of the core: upstream's worked vectors and unit scenarios, the seeds'
//! examples, groups, write ordering, and property tests.

mod fixtures;
mod groups;
mod limits;
mod plan;
mod properties;
mod scenarios;
mod seeds;
mod spread;
mod validity;
mod vectors;
