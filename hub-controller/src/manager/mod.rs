//! `resource-usage-hub manager`: the add-on manager. The decisions (install set, rendering,
//! registration, health, rollout) are pure functions over a snapshot; `controller` watches,
//! feeds them and writes what they say.
pub mod controller;
pub mod csr;
pub mod health;
pub mod install;
pub mod plan;
pub mod registration;
pub mod render;
pub mod rollout;
