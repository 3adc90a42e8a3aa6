//! The hub side of the resource-usage score provider: the add-on manager (`manager`) that
//! installs the agent on managed clusters through ManifestWorks, and the metrics-backed hub
//! scorer (`scorer`).
//!
//! The manager is a pipeline: `manager::controller` watches and takes a snapshot (with the
//! pass's time), `manager::plan` runs one pure pass over it (with `render`, `rollout`,
//! `registration` and `health`) and returns the writes, which the controller executes.
//! `manager::testing` (tests, and the `test-support` feature) applies writes in memory.

pub mod manager;
pub mod scorer;
