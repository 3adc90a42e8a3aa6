//! Table tests of the core: upstream's worked vectors and unit scenarios, the examples of
//! upstream's proposals, groups (and regrouping when the spec changes), write ordering, and
//! property tests.

mod decisions;
mod enhancements;
mod fixtures;
mod groups;
mod limits;
mod margin;
mod plan;
mod properties;
mod regroup;
mod scenarios;
mod spread;
mod stability;
mod validity;
mod vectors;
