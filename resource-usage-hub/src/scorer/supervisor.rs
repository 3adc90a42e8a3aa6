//! The hub scorer's loop over ScoreDefinitions: admit them, run one score-provider runner per
//! admitted definition (its own period, validity and writer), restart a runner when its
//! definition changes, stop it when the definition goes, remove the scores no definition
//! fills any more, and keep each definition's status. Create, change and delete take effect
//! without a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use ocm_api::AddOnPlacementScore;
use ocm_api::scoring::ScoreDefinition;
use ocm_api::selector::Selector;
use ocm_runtime::{Health, Leadership};
use score_provider::definition::Compiled;
use score_provider::prom::PromClient;
use score_provider::{HubClient, Runner, Settings};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::admit::{Admission, Policy, admit};
use super::fleet::Fleet;
use super::metrics::ScorerMetrics;
use super::provider::DefinitionScorer;
use super::status::{Report, status};

/// How often health is summed up and the definitions looked at again without an event (a
/// failed status write or deletion is retried then).
const TICK: Duration = Duration::from_secs(5);
/// Definition events within this long make one reconcile.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// What the supervisor needs.
pub struct Supervisor {
    pub fleet: Arc<Fleet>,
    /// Writes scores (the runners), definition status and deletions.
    pub hub: HubClient,
    pub prom: PromClient,
    pub policy: Policy,
    /// Which definitions this scorer evaluates (`--definition-selector`).
    pub selector: Selector,
    /// The runners' settings but for each definition's score name, period and validity.
    pub base: Settings,
    /// Writes only while this leads (`None`: always).
    pub leadership: Option<Leadership>,
    pub metrics: ScorerMetrics,
    pub runner_metrics: score_provider::metrics::Metrics,
    /// The process's health: ready once the definitions are listed and every runner is.
    pub health: Health,
}

/// The status last written, by definition uid.
type Written = BTreeMap<String, ocm_api::scoring::ScoreDefinitionStatus>;

struct Running {
    generation: i64,
    def: Arc<Compiled>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    health: Health,
}

impl Supervisor {
    fn manager(&self) -> &str {
        &self.base.write.manager
    }

    /// Runs until `shutdown` completes; stops every runner before it returns.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<(String, Report)>();
        let mut running: BTreeMap<String, Running> = BTreeMap::new();
        let mut reports: BTreeMap<String, Report> = BTreeMap::new();
        // What this scorer last wrote of each definition's status (by uid): the store lags
        // behind its own writes, and comparing with it would write the same status again.
        let mut written: Written = BTreeMap::new();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let changed = self.fleet.definitions_changed.clone();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = changed.notified() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    self.reconcile(&mut running, &reports, &mut written, &tx).await;
                }
                Some((name, report)) = rx.recv() => {
                    reports.insert(name.clone(), report);
                    if let Some(d) = self.fleet.definition(&name) {
                        let admissions = self.admissions();
                        self.write_status(&d, admissions.get(&name), reports.get(&name), &mut written).await;
                    }
                }
                _ = tick.tick() => {
                    self.reconcile(&mut running, &reports, &mut written, &tx).await;
                    self.sum_health(&running);
                }
            }
        }
        for (_, r) in std::mem::take(&mut running) {
            stop(r).await;
        }
    }

    /// Every selected definition's admission.
    fn admissions(&self) -> BTreeMap<String, Admission> {
        let defs = self.fleet.definitions();
        let selected: Vec<&ScoreDefinition> = defs
            .iter()
            .map(Arc::as_ref)
            .filter(|d| self.selector.matches(&d.labels()))
            .collect();
        admit(&selected, &self.policy)
    }

    async fn reconcile(
        &self,
        running: &mut BTreeMap<String, Running>,
        reports: &BTreeMap<String, Report>,
        written: &mut Written,
        tx: &mpsc::UnboundedSender<(String, Report)>,
    ) {
        if !self.fleet.definitions_listed() {
            return;
        }
        let admissions = self.admissions();
        // Stop what is no longer admitted as it runs.
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, r)| {
                let generation = self
                    .fleet
                    .definition(name)
                    .and_then(|d| d.metadata.generation);
                !matches!(admissions.get(*name), Some(Admission::Admitted(c))
                    if **c == *r.def && generation == Some(r.generation))
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(r) = running.remove(&name) {
                tracing::info!(definition = %name, "definition changed or gone: its runner stops");
                stop(r).await;
                self.metrics.forget(&name);
            }
        }
        // Start what is admitted and not running.
        for (name, a) in &admissions {
            let Admission::Admitted(c) = a else { continue };
            if running.contains_key(name) {
                continue;
            }
            let Some(d) = self.fleet.definition(name) else {
                continue;
            };
            let generation = d.metadata.generation.unwrap_or(0);
            running.insert(
                name.clone(),
                self.start(name, generation, Arc::new((**c).clone()), tx.clone()),
            );
            tracing::info!(definition = %name, score = %c.score_name, period = ?c.period, "evaluating the definition");
        }
        self.metrics
            .definitions
            .set(i64::try_from(running.len()).unwrap_or(i64::MAX));
        if self.leads() {
            for d in self.fleet.definitions() {
                if self.selector.matches(&d.labels()) {
                    let name = d.name_any();
                    self.write_status(&d, admissions.get(&name), reports.get(&name), written)
                        .await;
                }
            }
            // Forget the definitions that are gone.
            let uids: BTreeSet<String> = self
                .fleet
                .definitions()
                .iter()
                .filter_map(|d| d.metadata.uid.clone())
                .collect();
            written.retain(|uid, _| uids.contains(uid));
            self.remove_orphans().await;
        }
    }

    fn start(
        &self,
        name: &str,
        generation: i64,
        def: Arc<Compiled>,
        reports: mpsc::UnboundedSender<(String, Report)>,
    ) -> Running {
        let provider = DefinitionScorer {
            name: name.to_owned(),
            generation,
            def: def.clone(),
            client: self.prom.clone(),
            fleet: self.fleet.clone(),
            label: self.policy.label.clone(),
            manager: self.manager().to_owned(),
            reports,
            metrics: self.metrics.clone(),
            conflicted: BTreeSet::new(),
        };
        let mut settings = self.base.clone();
        settings.write.score_name = def.score_name.clone();
        settings.write.period = def.period;
        settings.write.ttl = def.valid_for;
        // A steady score is renewed as seldom as its validity allows (the writer keeps two
        // periods of margin): a long validFor makes the writes follow the changes.
        settings.write.renew_every = def.valid_for;
        settings.debounce = settings.debounce.min(def.period);
        let mut runner = Runner::new(provider, self.hub.clone(), settings)
            .with_metrics(self.runner_metrics.clone());
        if let Some(l) = &self.leadership {
            runner = runner.with_leadership(l.clone());
        }
        let health = runner.health();
        let (stop, stopped) = oneshot::channel::<()>();
        let span = tracing::info_span!("definition", name = %name);
        let task = tokio::spawn(tracing::Instrument::instrument(
            runner.run(async move {
                let _ = stopped.await;
            }),
            span,
        ));
        Running {
            generation,
            def,
            stop,
            task,
            health,
        }
    }

    fn leads(&self) -> bool {
        self.leadership.as_ref().is_none_or(Leadership::is_leader)
    }

    /// Writes `d`'s status when it differs from what the object has.
    async fn write_status(
        &self,
        d: &ScoreDefinition,
        admission: Option<&Admission>,
        report: Option<&Report>,
        written: &mut Written,
    ) {
        let Some(admission) = admission else {
            return;
        };
        let now = jiff::Timestamp::now();
        let uid = d.metadata.uid.clone().unwrap_or_default();
        // What the object has: what this scorer wrote last, unless the store holds a newer
        // generation's (someone reset it, or the definition changed).
        let current = match written.get(&uid) {
            Some(w) if w.observed_generation == d.metadata.generation => Some(w),
            _ => d.status.as_ref(),
        };
        let Some(new) = status(
            current,
            d.metadata.generation,
            admission,
            report,
            &self.policy.label,
            now,
        ) else {
            return;
        };
        if current == Some(&new) || !self.leads() {
            return;
        }
        let api: Api<ScoreDefinition> = Api::all(self.hub.client());
        let patch = serde_json::json!({
            "apiVersion": "scoring.ocm-placement.io/v1alpha1",
            "kind": "ScoreDefinition",
            "status": new,
        });
        let params = PatchParams::apply(self.manager()).force();
        match api
            .patch_status(&d.name_any(), &params, &Patch::Apply(&patch))
            .await
        {
            Ok(_) => {
                written.insert(uid, new);
            }
            Err(e) if ocm_runtime::write::is_not_found(&e) => {}
            Err(e) => {
                tracing::warn!(definition = %d.name_any(), error = %e, "cannot write the definition's status; retrying");
            }
        }
    }

    /// Removes the score objects this scorer wrote whose name no ScoreDefinition fills any
    /// more (its definition was deleted, or now fills another name). Definitions of every
    /// evaluator and selector count: another scorer's definition keeps its objects. A restart
    /// loses nothing: the objects, not memory, say what to remove.
    async fn remove_orphans(&self) {
        if !self.fleet.listed() {
            return;
        }
        let filled: BTreeSet<String> = self
            .fleet
            .definitions()
            .iter()
            .map(|d| d.spec.score_name.clone())
            .collect();
        let orphans = self.fleet.written_by_except(&filled, self.manager());
        for (namespace, name, uid) in orphans {
            let api: Api<AddOnPlacementScore> = Api::namespaced(self.hub.client(), &namespace);
            let params = ocm_runtime::write::delete_params(uid.as_deref(), None);
            match api.delete(&name, &params).await {
                Ok(_) => {
                    tracing::info!(%namespace, score = %name, "no definition fills this score any more: removed")
                }
                Err(e)
                    if ocm_runtime::write::is_not_found(&e)
                        || ocm_runtime::write::is_conflict(&e) => {}
                Err(e) => {
                    tracing::warn!(%namespace, score = %name, error = %e, "cannot remove an orphaned score; retrying")
                }
            }
        }
    }

    /// Ready once the definitions are listed and every runner is; alive while every runner is.
    fn sum_health(&self, running: &BTreeMap<String, Running>) {
        if !self.fleet.definitions_listed() {
            self.health
                .set_not_ready("ScoreDefinitions not listed yet (is the CRD installed?)");
            return;
        }
        let not_ready = running.iter().find_map(|(name, r)| {
            r.health
                .not_ready()
                .map(|why| format!("definition {name}: {why}"))
        });
        match not_ready {
            // A runner that has not written yet is starting, not failing.
            Some(why) if !why.ends_with("starting") => self.health.set_not_ready(why),
            _ => self.health.set_ready(true),
        }
        match running.iter().find(|(_, r)| !r.health.is_healthy()) {
            Some((name, _)) => self
                .health
                .set_unhealthy(format!("definition {name}: the refresh loop is stuck")),
            None => self.health.set_healthy(true),
        }
    }
}

/// Stops a runner and waits for it (its writes end before the next one starts).
async fn stop(r: Running) {
    drop(r.stop);
    if let Err(e) = r.task.await {
        tracing::warn!(error = %e, "a definition's runner ended abnormally");
    }
}

/// Parses `--definition-selector`: `key=value` pairs, comma-separated (all must match).
pub fn parse_selector(s: &str) -> Result<Selector, String> {
    let mut labels = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not key=value"))?;
        labels.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let selector = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    };
    Selector::from_label_selector(&selector).map_err(|e| e.to_string())
}
