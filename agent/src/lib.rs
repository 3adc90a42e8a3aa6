//! The score-provider framework and the resource-usage agent. They land with their issue.
