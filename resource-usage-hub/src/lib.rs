//! The hub side of the resource-usage score provider, the `resource-usage-hub` binary's two
//! subcommands: the add-on manager (`manager`) that installs the agent on managed clusters
//! through ManifestWorks (it holds the agent's manifests), and the metrics-backed hub scorer
//! (`scorer`). The two share no code; the scorer's formula is the agent's, from
//! `ocm_api::score::resource_usage`, so the hub depends on neither the agent nor its sources.
//!
//! The manager is a pipeline: `manager::controller` watches and takes a snapshot (with the
//! pass's time), `manager::plan` runs one pure pass over it (with `render`, `rollout`,
//! `registration` and `health`) and returns the writes, which the controller executes.
//! `manager::testing` (tests, and the `test-support` feature) applies writes in memory.

pub mod manager;
pub mod scorer;
