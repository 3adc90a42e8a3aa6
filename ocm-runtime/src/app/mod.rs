//! One startup path for every binary: the process ([`main`], [`block_on`]), then an [`App`]
//! that sets up what every controller needs in the same order and the same way (logging, the
//! stop signal, the metrics registry, the hub connection ([`App::connect`] from the client
//! flags, or [`App::follow_kubeconfig`] for an agent's mounted hub kubeconfig), `/metrics` +
//! `/healthz` + `/readyz`, the wait for an unreachable hub, leader election with its gauge),
//! so that each `main.rs` holds only its own flags and its controllers. The builder composes
//! [`client`](mod@crate::client), [`leader`](crate::leader), [`metrics`](crate::metrics),
//! [`logging`](crate::logging), [`shutdown`](crate::shutdown) and [`memory`];
//! it adds no behaviour of its own.
//!
//! ```no_run
//! use clap::Parser;
//! use ocm_runtime::app::{self, App, AppArgs, Drain};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     app: AppArgs,
//! }
//!
//! async fn controller(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
//!     let mut app = App::start(&cli.app.log, "my-controller/0.1.0")?;
//!     let hub = app.connect(&cli.app.client).await?; // registers the rate limiter's metrics
//!     // ... register the controller's metrics on app.registry() ...
//!     let running = app.serve(&cli.app.serve).await?;
//!     // Up and probed, not ready, until the hub answers; the stop signal ends the wait.
//!     let Ok(()) = running.wait_for_hub(&hub.unlimited()?, &hub.server()).await else {
//!         return Ok(());
//!     };
//!     let leadership = running.elect(&cli.app.leader, &hub, "my-controller")?;
//!     let writes = hub.writer(&leadership)?; // refuses writes while this replica does not lead
//!     let work = async move { let _ = writes; /* the controllers, until running.shutdown() */ };
//!     Ok(running.run_until_deposed(work, leadership).await?)
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     app::main("error: ", || app::block_on(controller(Cli::parse()), Drain::Background))
//! }
//! ```

mod builder;
mod elected;
mod wait;

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;

use thiserror::Error;

pub use builder::{App, Hub, Running};
pub use wait::{Stopped, caused_by_unreachable, error_chain, unreachable};

use crate::client::follow::FollowError;
use crate::{ClientArgs, ClientError, LeaderArgs, LeaderError, LogArgs, LogError, ServeArgs};
use crate::{ServeError, memory};

/// The flags every controller binary shares: the hub client, leader election, the metrics and
/// health server, logging. Flatten it into the binary's own flags (`#[command(flatten)]`).
#[derive(clap::Args, Clone, Debug)]
pub struct AppArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// The stop signal, resolved on SIGTERM or SIGINT; clones resolve together.
pub type Shutdown = futures::future::Shared<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// What can stop a binary from starting.
#[derive(Debug, Error)]
pub enum AppError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Follow(#[from] FollowError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// A binary's whole `main`: limits the allocator's arenas before any thread starts, runs
/// `body` (which parses the flags and runs the command), and turns its result into the exit
/// code, printing an error as `{prefix}{error}` on stderr.
pub fn main<E: Display>(prefix: &str, body: impl FnOnce() -> Result<(), E>) -> ExitCode {
    memory::limit_arenas();
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{prefix}{e}");
            ExitCode::FAILURE
        }
    }
}

/// What happens, once the work has ended, to tasks still running on the blocking pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    /// Wait for them (a command that must finish what it started).
    Wait,
    /// Do not: a controller's scheduling pass still running must not hold up the exit.
    Background,
}

/// Runs `work` on a multi-threaded tokio runtime (all drivers on) until it ends.
pub fn block_on<T, E>(work: impl Future<Output = Result<T, E>>, drain: Drain) -> Result<T, E>
where
    E: From<AppError>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| E::from(AppError::Runtime(e)))?;
    let result = rt.block_on(work);
    if drain == Drain::Background {
        rt.shutdown_background();
    }
    result
}

#[cfg(test)]
mod tests;
