//! `resource-usage-hub manager`: the add-on manager, as a pipeline. The decisions are pure
//! functions over a snapshot (no client, no clock: the pass's time is in the snapshot):
//! `plan` runs one pass over what `render` renders (from the agent's `manifests`), `rollout`
//! allows, `registration` grants and approves and `health` reports; `controller` watches,
//! takes the snapshot, feeds the pass and writes what it planned. `definitions` ships the
//! ScoreDefinitions the agents evaluate and sets their status.
pub mod controller;
pub mod definitions;
pub mod health;
pub mod manifests;
pub mod plan;
pub mod registration;
pub mod render;
pub mod rollout;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
