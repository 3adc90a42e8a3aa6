//! The agent under measurement: its binary, its process, waiting for its scores, its heap.

use super::*;

/// `target/<profile>/resource-usage-agent` next to this example, built first (in the same
/// profile) unless told not to.
pub(crate) fn agent_binary(no_build: bool) -> Result<PathBuf> {
    Ok(testenv::build::workspace_binary(
        "resource-usage-agent",
        "resource-usage-agent",
        testenv::build::Profile::OfThisExecutable,
        !no_build,
    )?)
}

/// The agent as a child process; killed and reaped on drop.
pub(crate) struct Agent {
    process: ChildProcess,
    pub(crate) pid: u32,
    metrics: SocketAddr,
    pub(crate) log: PathBuf,
}

impl Agent {
    /// Starts `bin` with `args` and only the environment `env` (`KEY=VALUE` each).
    pub(crate) fn start(
        bin: &Path,
        args: &[String],
        env: &[String],
        log: PathBuf,
        metrics: SocketAddr,
    ) -> Result<Agent> {
        let mut cmd = Command::new(bin);
        // Only what we pass: no KUBECONFIG, CLUSTER_NAME, ... from the caller's shell.
        cmd.env_clear();
        for kv in env {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--agent-env {kv:?}: not KEY=VALUE"))?;
            cmd.env(k, v);
        }
        cmd.args(args);
        let process = ChildProcess::start("the agent", cmd, &log)?;
        Ok(Agent {
            pid: process.pid(),
            process,
            metrics,
            log,
        })
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        Ok(self.process.check_alive()?)
    }

    /// `/metrics`, parsed.
    pub(crate) async fn metrics(&self) -> Result<Vec<Sample>> {
        Ok(scrape::parse(&scrape::get(self.metrics).await?))
    }
}

/// Polls the score object until its cpu/mem items equal `want`; errors if the agent exits or
/// `limit` passes (with what it saw last).
pub(crate) async fn wait_scores(
    api: &Api<AddOnPlacementScore>,
    agent: &Agent,
    want: &BTreeMap<String, i32>,
    limit: Duration,
) -> Result<BTreeMap<String, i32>> {
    let seen = Mutex::new(BTreeMap::new());
    let matched = testenv::wait::poll_fallible(limit, Duration::from_millis(100), || async {
        agent.check_alive()?;
        if let Ok(Some(s)) = api.get_opt(RESOURCE_USAGE_SCORE).await {
            let now: BTreeMap<String, i32> = s
                .status
                .map(|st| st.scores.into_iter().map(|i| (i.name, i.value)).collect())
                .unwrap_or_default();
            let done = want.iter().all(|(k, v)| now.get(k) == Some(v));
            *seen.lock() = now.clone();
            return Ok::<_, BoxError>(done.then_some(now));
        }
        Ok(None)
    })
    .await?;
    matched.ok_or_else(|| {
        let seen = seen.lock();
        format!(
            "no matching scores within {limit:?}: want {want:?}, last seen {seen:?}; agent log {}",
            agent.log.display()
        )
        .into()
    })
}

/// glibc's totals for the agent's heap (held from the system, in use), from `malloc_stats()`
/// called through gdb (it prints to the agent's stderr, i.e. its log); then `malloc_trim(0)`.
pub(crate) fn heap_probe(pid: u32, log: &Path) -> Result<(u64, u64)> {
    let skip = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
    let out = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-nx"])
        .args([
            "-ex",
            "call (void)malloc_stats()",
            "-ex",
            "call (int)malloc_trim(0)",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("--heap-probe needs gdb: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("gdb failed ({}): {err}", out.status).into());
    }
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let total = text
        .get(skip..)
        .and_then(|t| t.split("Total (incl. mmap):").nth(1))
        .ok_or("no malloc_stats() output in the agent's log (not glibc?)")?;
    let value = |key: &str| -> Option<u64> {
        let line = total.lines().find(|l| l.trim_start().starts_with(key))?;
        line.split('=').nth(1)?.trim().parse().ok()
    };
    match (value("system bytes"), value("in use bytes")) {
        (Some(held), Some(used)) => Ok((held, used)),
        _ => Err("cannot read malloc_stats() totals".into()),
    }
}
