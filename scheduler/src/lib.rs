//! The placement scheduler. The scheduling core, controller, debug endpoint and `simulate` land with their issues.
