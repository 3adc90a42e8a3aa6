//! The hub side of the resource-usage score provider: the add-on manager (`manager`) that
//! installs the agent on managed clusters through ManifestWorks, and the metrics-backed hub
//! scorer (`scorer`).

pub mod manager;
pub mod scorer;
