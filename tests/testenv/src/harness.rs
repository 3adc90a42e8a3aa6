//! The `main` of a scale harness: a runtime, its scenario, and a clean stop on Ctrl-C or
//! SIGTERM (the scenario is dropped, so the processes and control planes it owns are killed by
//! their `Drop`).

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

/// What a harness's scenario fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// [`main`] for a scenario that returns its report: printed to stdout at the end.
pub fn main_printing<F>(stopping: &str, scenario: F) -> ExitCode
where
    F: Future<Output = Result<String, BoxError>>,
{
    main(stopping, async {
        println!("{}", scenario.await?);
        Ok(())
    })
}

/// Runs `scenario` to its end: exit 0, or 1 with the error printed; 130 on Ctrl-C, 143 on
/// SIGTERM, after saying that `stopping` ("the controller, kube-apiserver and etcd") stops.
pub fn main<F>(stopping: &str, scenario: F) -> ExitCode
where
    F: Future<Output = Result<(), BoxError>>,
{
    // Children get their parent-death signal from testenv's spawner thread (see
    // [`crate::process`]), so the runtime's threads may come and go.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: cannot listen for SIGTERM: {e}");
                    return ExitCode::FAILURE;
                }
            };
        tokio::select! {
            r = scenario => match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: stopping {stopping}");
                ExitCode::from(130)
            }
            _ = term.recv() => {
                eprintln!("terminated: stopping {stopping}");
                ExitCode::from(143)
            }
        }
    });
    // Do not wait for blocking tasks (a stuck request) longer than this.
    rt.shutdown_timeout(Duration::from_secs(5));
    code
}
