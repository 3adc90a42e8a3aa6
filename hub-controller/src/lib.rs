//! The hub add-on manager and the Thanos-backed scorer. They land with their issues.
