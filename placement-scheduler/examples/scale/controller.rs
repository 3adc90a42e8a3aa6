//! The controller under measurement (ours or upstream's): its binary and its process.

use super::*;

/// Ours: `target/<profile>/placement-scheduler` next to this example, built first with cargo
/// unless `--no-build`; `--controller-bin` names another.
pub(crate) fn controller_binary(args: &Args) -> Result<PathBuf> {
    if let Some(p) = &args.controller_bin {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(format!("--controller-bin {}: no such file", p.display()).into())
        };
    }
    Ok(testenv::build::workspace_binary(
        "placement-scheduler",
        "placement-scheduler",
        testenv::build::Profile::OfThisExecutable,
        !args.no_build,
    )?)
}

/// A placement controller (ours or upstream's) as a child process; killed and reaped on drop.
pub(crate) struct Controller {
    process: ChildProcess,
    pub(crate) pid: u32,
    /// Ours: its plain-HTTP metrics port. Upstream: its HTTPS server's.
    metrics: SocketAddr,
    /// Upstream: a client for its HTTPS server.
    https: Option<Client>,
}

impl Controller {
    /// Starts it on `hub`, its log `<hub's name>.controller.log` in the work dir; waits until
    /// it is ready.
    pub(crate) async fn start(env: &Env<'_>, kind: Kind, hub: &Hub) -> Result<Self> {
        let args = env.args;
        let log = env.work_dir.join(format!("{}.controller.log", hub.ns));
        let bin = env.binary(kind)?;
        let metrics = SocketAddr::from(([127, 0, 0, 1], testenv::ports::free()?));
        let mut cmd = Command::new(bin);
        // Only what we pass: no KUBECONFIG, NAMESPACES, WORKERS... from the caller's shell.
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        let mut https = None;
        match kind {
            Kind::Ours => {
                cmd.env("RUST_LOG", &args.controller_log);
                cmd.arg("controller")
                    .arg("--kubeconfig")
                    .arg(&hub.kubeconfig)
                    .arg(format!("--client-qps={}", args.client_qps))
                    .arg(format!("--client-burst={}", args.client_burst))
                    .arg("--leader-elect=false")
                    .arg(format!("--metrics-bind-address={metrics}"))
                    .arg("--debug-bind-address=")
                    .arg(format!("--workers={}", args.workers))
                    .args(
                        (!args.event_debounce.is_empty())
                            .then(|| format!("--event-debounce={}", args.event_debounce)),
                    )
                    .arg(format!("--namespaces={}", hub.scope.join(",")))
                    .args(&args.controller_args);
            }
            Kind::Upstream => {
                // Its library writes a self-signed serving certificate under $TMPDIR.
                if let Some(tmp) = std::env::var_os("TMPDIR") {
                    cmd.env("TMPDIR", tmp);
                }
                upstream::command(&mut cmd, args, &hub.kubeconfig, &hub.ns, metrics);
                https = Some(upstream::metrics_client(&hub.cp, metrics)?);
            }
        }
        let process = ChildProcess::start("the controller", cmd, &log)?;
        let c = Controller {
            pid: process.pid(),
            process,
            metrics,
            https,
        };
        c.wait_ready(Duration::from_secs(120)).await?;
        Ok(c)
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        Ok(self.process.check_alive()?)
    }

    async fn wait_ready(&self, limit: Duration) -> Result<()> {
        let ready = testenv::wait::poll_fallible(limit, Duration::from_millis(100), || async {
            self.check_alive()?;
            let up = match &self.https {
                Some(c) => upstream::is_up(c).await,
                None => matches!(
                    testenv::http::get(self.metrics, "/readyz").await,
                    Ok((200, _))
                ),
            };
            Ok::<_, BoxError>(up.then_some(()))
        })
        .await?;
        ready.ok_or_else(|| {
            let log = self.process.log().map(Path::display);
            format!("the controller was not ready within {limit:?}; log {log:?}").into()
        })
    }

    pub(crate) async fn metrics(&self) -> Result<Vec<Sample>> {
        if let Some(c) = &self.https {
            return Ok(upstream::metrics(c).await);
        }
        Ok(scrape::parse(&scrape::get(self.metrics).await?))
    }
}
