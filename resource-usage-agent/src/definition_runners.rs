//! The runners of the shipped ScoreDefinitions: one [`score_provider::Runner`] per definition
//! (its own writer, period and validity from the compiled definition), started, restarted when
//! its definition changes and stopped when it goes, as the definitions file says. A stopped
//! definition's scores are not deleted (the agent's hub permission has no delete): they expire
//! at their `validUntil`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ocm_api::scoring::ShippedDefinition;
use ocm_runtime::app::Shutdown;
use score_provider::definition::{Caps, compile};
use score_provider::prom::PromClient;
use score_provider::{HubClient, Runner, Settings, WriteSettings};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::definition_metrics::{DefinitionMetrics, StateLabel};
use crate::definition_provider::DefinitionProvider;
use crate::shipped_definitions;

/// The label the compiled expressions carry for `{{LABEL}}` (an agent's series are all its
/// own, so no query needs it; the manager compiles with the same).
pub const LABEL: &str = "cluster";

/// How a stopped runner is waited for before its replacement starts (one writer per score).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// What every definition's runner shares.
pub struct Shared {
    pub cluster: String,
    pub hub: HubClient,
    pub prom: Option<PromClient>,
    pub caps: Caps,
    /// Score names the agent writes itself (its built-in provider): a definition naming one
    /// is refused.
    pub reserved: Vec<String>,
    /// The field manager of the writes.
    pub manager: String,
    pub hysteresis: u32,
    pub debounce: Duration,
    pub hub_check_interval: Duration,
    pub metrics: DefinitionMetrics,
}

struct Running {
    shipped: ShippedDefinition,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// The definitions' runners.
pub struct DefinitionRunners {
    shared: Shared,
    running: BTreeMap<String, Running>,
    shutdown: Shutdown,
}

/// Why a shipped definition is not run.
#[derive(Debug, PartialEq)]
enum Skipped {
    Invalid(String),
    Refused(String),
}

impl DefinitionRunners {
    pub fn new(shared: Shared, shutdown: Shutdown) -> Self {
        Self {
            shared,
            running: BTreeMap::new(),
            shutdown,
        }
    }

    /// Reads `file` every `interval` and runs what it holds, until the shutdown.
    pub async fn run(mut self, file: PathBuf, interval: Duration) {
        let mut last: Option<Option<String>> = None;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.shutdown.clone();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                _ = tick.tick() => {}
            }
            let text = match shipped_definitions::read_text(&file) {
                Ok(t) => t,
                Err(e) => {
                    self.shared.metrics.file_errors.inc();
                    tracing::warn!(error = %e, "cannot read the shipped definitions; keeping the last ones");
                    continue;
                }
            };
            if last.as_ref() == Some(&text) {
                continue;
            }
            let defs = match text.as_deref() {
                None => Ok(Vec::new()),
                Some(t) => shipped_definitions::parse(&file, t),
            };
            match defs {
                Ok(defs) => {
                    tracing::info!(file = %file.display(), definitions = defs.len(), "shipped definitions read");
                    self.apply(defs).await;
                }
                Err(e) => {
                    self.shared.metrics.file_errors.inc();
                    tracing::warn!(error = %e, "the shipped definitions do not parse; keeping the last ones");
                }
            }
            last = Some(text);
        }
        for (_, r) in std::mem::take(&mut self.running) {
            let _ = r.stop.send(());
            let _ = tokio::time::timeout(STOP_TIMEOUT, r.task).await;
        }
    }

    /// Runs `defs` (sorted by name): starts what is new, restarts what changed, stops what
    /// went.
    pub async fn apply(&mut self, defs: Vec<ShippedDefinition>) {
        let mut wanted: BTreeMap<
            String,
            (ShippedDefinition, Arc<score_provider::definition::Compiled>),
        > = BTreeMap::new();
        let mut taken: BTreeMap<String, String> = BTreeMap::new();
        let (mut invalid, mut refused) = (0i64, 0i64);
        for d in defs {
            match self.check(&d, &taken) {
                Ok(compiled) => {
                    taken.insert(compiled.score_name.clone(), d.name.clone());
                    wanted.insert(d.name.clone(), (d, Arc::new(compiled)));
                }
                Err(Skipped::Invalid(why)) => {
                    invalid += 1;
                    tracing::warn!(definition = %d.name, error = %why, "a shipped definition is invalid; not run");
                }
                Err(Skipped::Refused(why)) => {
                    refused += 1;
                    tracing::warn!(definition = %d.name, score_name = %d.spec.score_name, reason = %why, "a shipped definition is refused; not run");
                }
            }
        }
        // Stop what went or changed first: one writer per score at a time.
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            let same = match (self.running.get(&name), wanted.get(&name)) {
                (Some(r), Some((d, _))) => r.shipped == *d,
                _ => false,
            };
            if same {
                wanted.remove(&name);
                continue;
            }
            if let Some(r) = self.running.remove(&name) {
                tracing::info!(definition = %name, score_name = %r.shipped.spec.score_name, "stopping a definition's runner; its last scores expire at their validUntil");
                let _ = r.stop.send(());
                if tokio::time::timeout(STOP_TIMEOUT, r.task).await.is_err() {
                    tracing::warn!(definition = %name, "a definition's runner did not stop in time");
                }
            }
        }
        for (name, (shipped, compiled)) in wanted {
            tracing::info!(definition = %name, score_name = %compiled.score_name, generation = shipped.generation, period = ?compiled.period, valid_for = ?compiled.valid_for, "running a shipped definition");
            let running = self.start(shipped, compiled);
            self.running.insert(name, running);
        }
        let set = |state: &'static str, n: i64| {
            self.shared
                .metrics
                .definitions
                .get_or_create(&StateLabel { state })
                .set(n);
        };
        set(
            "running",
            i64::try_from(self.running.len()).unwrap_or(i64::MAX),
        );
        set("invalid", invalid);
        set("refused", refused);
    }

    fn check(
        &self,
        d: &ShippedDefinition,
        taken: &BTreeMap<String, String>,
    ) -> Result<score_provider::definition::Compiled, Skipped> {
        let compiled = compile(&d.spec, LABEL, &self.shared.caps, true)
            .map_err(|e| Skipped::Invalid(e.to_string()))?;
        if self.shared.reserved.contains(&compiled.score_name) {
            return Err(Skipped::Refused(format!(
                "{:?} is the agent's built-in score: a definition would fight its writer",
                compiled.score_name
            )));
        }
        if let Some(other) = taken.get(&compiled.score_name) {
            return Err(Skipped::Refused(format!(
                "the definition {other:?} already fills {:?}",
                compiled.score_name
            )));
        }
        Ok(compiled)
    }

    fn start(
        &self,
        shipped: ShippedDefinition,
        compiled: Arc<score_provider::definition::Compiled>,
    ) -> Running {
        let s = &self.shared;
        let mut settings = Settings::new(WriteSettings {
            score_name: compiled.score_name.clone(),
            ttl: compiled.valid_for,
            period: compiled.period,
            // As seldom as the validity allows (the writer keeps two periods of margin).
            renew_every: compiled.valid_for,
            hysteresis: s.hysteresis,
            manager: s.manager.clone(),
        });
        settings.debounce = s.debounce.min(compiled.period);
        settings.hub_check_interval = s.hub_check_interval;
        let provider =
            DefinitionProvider::new(&s.cluster, compiled, s.prom.clone(), s.metrics.clone());
        let runner = Runner::new(provider, s.hub.clone(), settings);
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = self.shutdown.clone();
        let until = futures::future::select(stopped.map(|_| ()), shutdown).map(|_| ());
        let task = tokio::spawn(runner.run(until));
        Running {
            shipped,
            stop,
            task,
        }
    }
}
