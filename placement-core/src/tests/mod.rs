//! Table tests of the core: upstream's worked vectors and unit scenarios, the seeds'
//! examples, groups (and regrouping when the spec changes), write ordering, and property tests.

mod decisions;
mod fixtures;
mod groups;
mod limits;
mod plan;
mod properties;
mod regroup;
mod scenarios;
mod seeds;
mod spread;
mod stability;
mod validity;
mod vectors;
