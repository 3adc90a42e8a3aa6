//! The ScoreDefinitions the add-on manager ships to the agents: the `Agent` definitions that
//! compile, rendered into the ConfigMap `<addon>-definitions` of the agent's ManifestWork under
//! [`KEY`], which the agent's pod mounts at [`MOUNT_DIR`].

use serde::{Deserialize, Serialize};

use super::ScoreDefinitionSpec;

/// The ConfigMap key (and file name) holding the list.
pub const KEY: &str = "definitions.yaml";
/// Where the agent's pod mounts the ConfigMap.
pub const MOUNT_DIR: &str = "/etc/resource-usage/definitions";
/// The file the agent reads by default.
pub const DEFAULT_FILE: &str = "/etc/resource-usage/definitions/definitions.yaml";

/// One shipped definition; the file is a YAML list of these, sorted by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShippedDefinition {
    /// The ScoreDefinition's name.
    pub name: String,
    /// Its `metadata.generation` when rendered (0 when the API server gave none).
    #[serde(default)]
    pub generation: i64,
    pub spec: ScoreDefinitionSpec,
}
