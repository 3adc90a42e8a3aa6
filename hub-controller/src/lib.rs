//! The hub side of the resource-usage score provider: the add-on manager (`manager`) that
//! installs the agent on managed clusters through ManifestWorks.

pub mod manager;
