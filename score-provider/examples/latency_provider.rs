//! A third-party score provider on the framework: rates each cluster by the
//! round-trip time of an HTTP endpoint it serves, probed from where this runs (the hub).
//! Writes the AddOnPlacementScore `latency-score` with the item `latency` in each cluster's
//! namespace: 100 for an instant answer, -100 at `--max-latency` or worse; a cluster whose
//! endpoint does not answer gets the condition `AddOnPlacementScoreUpdated=False`, and its
//! last score expires.
//!
//! ```text
//! cargo run -p score-provider --example latency_provider -- \
//!   --hub-kubeconfig hub.kubeconfig --target cluster1=http://10.0.0.1:8080/healthz
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use ocm_api::score::Normaliser;
use ocm_runtime::app::{self, App, Drain};
use score_provider::cli::CliError;
use score_provider::{Computed, Outcome, ProviderError, ScoreProvider};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Args {
    /// `cluster=http://host:port/path`, repeatable.
    #[arg(long = "target", value_parser = parse_target, required = true)]
    targets: Vec<(String, hyper::Uri)>,
    /// This latency or worse scores -100.
    #[arg(long, default_value = "1s", value_parser = ocm_runtime::flags::parse_duration)]
    max_latency: Duration,
    #[command(flatten)]
    provider: score_provider::ProviderArgs,
}

fn parse_target(s: &str) -> Result<(String, hyper::Uri), String> {
    let (cluster, url) = s.split_once('=').ok_or("expected cluster=url")?;
    Ok((cluster.to_owned(), url.parse().map_err(text)?))
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub struct Latency {
    pub targets: Vec<(String, hyper::Uri)>,
    pub max_latency: Duration,
}

impl ScoreProvider for Latency {
    async fn compute(&mut self) -> Result<Computed, ProviderError> {
        // Lower is better: score the negated milliseconds between -max and 0.
        let max_ms = self.max_latency.as_secs_f64() * 1000.0;
        let normaliser =
            Normaliser::new(-max_ms, 0.0).map_err(|e| ProviderError::Source(text(e)))?;
        let probes = self
            .targets
            .clone()
            .into_iter()
            .map(|(cluster, uri)| async move {
                let rtts = [probe(&uri).await, probe(&uri).await, probe(&uri).await];
                // The fastest of three: the least noisy estimate of the path's latency.
                let best = rtts.iter().filter_map(|r| r.as_ref().ok()).min().copied();
                let first_error = || rtts[0].clone().err().unwrap_or_default();
                (cluster, best.ok_or_else(first_error))
            });
        let mut computed = Computed::new();
        for (cluster, rtt) in futures::future::join_all(probes).await {
            let outcome = match rtt {
                Ok(rtt) => {
                    let score = normaliser.normalise(-rtt.as_secs_f64() * 1000.0);
                    Outcome::Scores([("latency", score)].into_iter().collect())
                }
                Err(message) => Outcome::Unavailable {
                    reason: "ProbeFailed".into(),
                    message,
                },
            };
            computed.insert(cluster, outcome);
        }
        Ok(computed)
    }
}

/// One HTTP/1.0 GET on a fresh connection, within 2 s; any status below 500 counts.
async fn probe(uri: &hyper::Uri) -> Result<Duration, String> {
    let started = Instant::now();
    let host = uri.host().ok_or("no host")?;
    let get = async {
        let mut conn = tokio::net::TcpStream::connect((host, uri.port_u16().unwrap_or(80))).await?;
        conn.write_all(format!("GET {} HTTP/1.0\r\nHost: {host}\r\n\r\n", uri.path()).as_bytes())
            .await?;
        let mut status_line = [0u8; 12];
        conn.read_exact(&mut status_line).await.map(|_| status_line)
    };
    let status_line = tokio::time::timeout(Duration::from_secs(2), get)
        .await
        .map_err(text)?
        .map_err(text)?;
    // "HTTP/1.1 200": the status code is the last three bytes.
    let code = String::from_utf8_lossy(&status_line[9..]).into_owned();
    (code.as_str() < "500")
        .then(|| started.elapsed())
        .ok_or(format!("answered {code}"))
}

fn main() -> ExitCode {
    app::main("latency_provider: ", || {
        // Boxed: the framework's error is large, and only read once, here.
        app::block_on(run(Args::parse()), Drain::Wait).map_err(Box::new)
    })
}

/// Starts like every binary of the project ([`App::start`]: logging, the stop signal), then
/// the framework does the rest.
async fn run(args: Args) -> Result<(), CliError> {
    let app = App::start(
        &args.provider.log,
        concat!("latency-provider/", env!("CARGO_PKG_VERSION")),
    )?;
    let provider = Latency {
        targets: args.targets,
        max_latency: args.max_latency,
    };
    score_provider::cli::serve(
        app,
        provider,
        &args.provider,
        "latency-score",
        "latency-provider",
        None,
    )
    .await
}

#[cfg(test)]
#[path = "latency_provider/tests.rs"]
mod tests;
