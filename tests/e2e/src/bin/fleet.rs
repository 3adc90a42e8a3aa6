//! `fleet`: a local hub with a few clusters, the placement scheduler, the add-on manager and
//! one resource-usage agent per cluster as local processes; two Placements that prefer free
//! CPU; and load that moves. Prints the decisions and the scores as they change. Ctrl-C stops
//! everything.
//!
//! Each cluster is a real one (its own apiserver, upstream OCM's klusterlet registering it and
//! applying the agent's ManifestWork); `--simulated` plays the clusters on the hub instead.
//!
//! One command on a fresh clone: what the fleet runs and the cache lacks is built first, once
//! (kube-apiserver, etcd and the OCM CRDs with tests/control-plane/build.sh; for real clusters
//! kube-controller-manager too and OCM's agents with tests/ocm/build.sh; for `--thanos`
//! Prometheus and Thanos), with a progress line and the expected time. Measured on this
//! project's 2-core machine from empty caches (Go's module and build caches too): the control
//! plane 8.7 min, OCM's agents 5 min, and the first `cargo run` itself (this crate and the three
//! binaries, debug) 3.6 min.
//!
//! ```sh
//! cargo run -p e2e --bin fleet
//! cargo run -p e2e --bin fleet -- --simulated
//! cargo run -p e2e --bin fleet -- --check-deps      # what is missing, and the commands
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use e2e::fleet::{Fleet, Options, binaries};
use e2e::prereqs::{self, Mode};
use serde_json::json;

/// A local fleet whose decisions follow the clusters' free CPU.
#[derive(Parser)]
#[command(about)]
struct Args {
    /// Seconds between load changes (a burst of pods on the chosen cluster, or its removal).
    #[arg(long, default_value_t = 20)]
    every: u64,
    /// Stop after this many load changes (0: until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    rounds: u32,
    /// Where the processes' logs go (default: a temporary directory, printed).
    #[arg(long)]
    logs: Option<std::path::PathBuf>,
    /// The Thanos mode: instead of the agents, per cluster a Prometheus with its Thanos sidecar
    /// (external labels `cluster`, `replica`), Thanos Query on the hub, and the hub scorer
    /// writing the scores from it (Prometheus and Thanos are built on first use, with
    /// tests/prometheus/build.sh and tests/thanos/build.sh).
    #[arg(long, env = "FLEET_THANOS")]
    thanos: bool,
    /// Simulate the managed clusters on the hub (their nodes and pods are hub objects, no
    /// klusterlet, the agents use the hub admin's credentials) instead of running upstream
    /// OCM's klusterlet with an apiserver per cluster: starts in seconds and costs a few MB per
    /// cluster rather than ~400 MB. The Thanos mode is always simulated.
    #[arg(long, env = "FLEET_SIMULATED")]
    simulated: bool,
    /// Only say what this fleet needs that the cache lacks, and the commands that build it;
    /// exit with status 1 when something is missing.
    #[arg(long)]
    check_deps: bool,
    /// Fail at once, naming the commands, instead of building what the cache lacks.
    #[arg(long)]
    no_build_deps: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), e2e::fleet::Error> {
    let logs = args.logs.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ocm-fleet-logs-{}", std::process::id()))
    });
    // Ctrl-C from the start: during the setup it stops the fleet once it is up (and drops it).
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = stop_tx.send(true);
        }
    });
    let mode = if args.thanos {
        Mode::Thanos
    } else if args.simulated {
        Mode::Simulated
    } else {
        Mode::Real
    };
    let needed = prereqs::missing(mode);
    if args.check_deps {
        if needed.is_empty() {
            println!(
                "nothing missing: {} holds what this fleet runs",
                prereqs::cache_root().display()
            );
            return Ok(());
        }
        print!("{}", prereqs::report(&needed));
        return Err(format!("{} build(s) missing", needed.len()).into());
    }
    if !needed.is_empty() {
        if args.no_build_deps {
            return Err(format!("{}(--no-build-deps)", prereqs::report(&needed)).into());
        }
        prereqs::build(&needed, &logs)?;
    }
    eprintln!("building the binaries (scheduler, add-on manager, agent)...");
    let bin_dir = binaries(true)?;
    let opts = Options {
        clusters: vec![
            ("cluster-east".into(), 16),
            ("cluster-west".into(), 24),
            ("cluster-south".into(), 32),
        ],
        refresh: Duration::from_secs(5),
        debounce: Duration::from_secs(1),
        bin_dir,
        log_dir: logs.clone(),
        leader_elect: false,
    };
    eprintln!(
        "starting a hub control plane and the fleet (logs in {})...",
        logs.display()
    );
    let mut fleet = if args.thanos {
        Fleet::start_without_agents(&opts).await?
    } else if args.simulated {
        Fleet::start(&opts).await?
    } else {
        Fleet::start_real(&opts).await?
    };
    // Dropped after the fleet's processes (declared after `fleet`, dropped before it: the
    // scorer is the fleet's child, the stores are the mode's).
    let thanos = if args.thanos {
        let mode = e2e::thanos::start(&mut fleet, &opts).await?;
        println!(
            "Thanos mode: Query at {} over {} sidecars; the hub scorer writes the scores (no agents)",
            mode.query.url(),
            mode.stores.len()
        );
        Some(mode)
    } else {
        None
    };
    let prefer_cpu = |n: u32| {
        json!({"numberOfClusters": n, "clusterSets": ["fleet"],
               "prioritizerPolicy": {"mode": "Exact", "configurations": [
                   {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 1}]}})
    };
    fleet.placement("most-free-cpu", prefer_cpu(1)).await?;
    fleet.placement("two-most-free", prefer_cpu(2)).await?;
    println!(
        "Placements in namespace fleet: most-free-cpu (1 cluster), two-most-free (2); load moves every {} s. Ctrl-C stops.",
        args.every
    );

    let mut last = String::new();
    let mut loaded: Option<String> = None;
    let mut next_change = tokio::time::Instant::now() + Duration::from_secs(args.every);
    let mut rounds = 0;
    // The last load change and the decision before it: how soon the decision follows is this
    // binary's figure (the fleet test asserts only that it follows).
    let mut change: Option<(tokio::time::Instant, Vec<String>)> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        fleet.check()?;
        let mut scores = BTreeMap::new();
        for c in &fleet.clusters {
            scores.insert(c.clone(), fleet.cpu_score(c).await);
        }
        let best = fleet.decisions("most-free-cpu").await?;
        let two = fleet.decisions("two-most-free").await?;
        let line = format!(
            "most-free-cpu -> {best:?}   two-most-free -> {two:?}   cpuAvailable {}",
            scores
                .iter()
                .map(|(c, s)| format!("{c}={}", s.map_or("-".into(), |v| v.to_string())))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if let Some((at, before)) = &change
            && best != *before
        {
            println!(
                "-- most-free-cpu moved {:.1} s after the load change",
                at.elapsed().as_secs_f64()
            );
            change = None;
        }
        if line != last {
            println!("{} {line}", jiff::Timestamp::now().strftime("%H:%M:%S"));
            last = line;
        }
        if tokio::time::Instant::now() >= next_change && !best.is_empty() {
            next_change = tokio::time::Instant::now() + Duration::from_secs(args.every);
            change = Some((tokio::time::Instant::now(), best.clone()));
            match loaded.take() {
                Some(c) => {
                    println!("-- load leaves {c}");
                    fleet.unload(&c).await?;
                }
                None => {
                    let c = best[0].clone();
                    println!("-- a burst of 20 pods (1.2 cores each) lands on {c}");
                    fleet.load(&c, 20, 1200).await?;
                    loaded = Some(c);
                }
            }
            rounds += 1;
            if args.rounds > 0 && rounds >= args.rounds {
                // Let the last change show before stopping.
                tokio::time::sleep(Duration::from_secs(8)).await;
                for c in &fleet.clusters {
                    println!("{c}: cpuAvailable {:?}", fleet.cpu_score(c).await);
                }
                println!(
                    "most-free-cpu -> {:?}",
                    fleet.decisions("most-free-cpu").await?
                );
                break;
            }
        }
    }
    println!("stopping the fleet");
    drop(fleet);
    drop(thanos);
    Ok(())
}
