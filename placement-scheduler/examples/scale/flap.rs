//! Scenario: flap. N clusters whose AddOnPlacementScores wander around fixed true values, M
//! placements of `numberOfClusters: 3` with one AddOn prioritizer, in upstream's `Additive`
//! defaults (Balance 1 + Steady 1 + the AddOn's 1) or `Exact` (the AddOn's alone): how often
//! the decisions change while nothing but noise changes, and what that buys.
//!
//! - Truth: cluster `i`'s true value is one of N values spread evenly over [-80, 80], the
//!   values dealt to the clusters in an order drawn from `--seed` (so that names, which break
//!   ties, say nothing about the values).
//! - Noise: at setup (step 0) and at each of `--steps` steps, `--step-interval` apart, every
//!   cluster's score is rewritten as its true value + uniform integer noise in
//!   [-`--noise`, `--noise`], clamped to [-100, 100], `validUntil` 5 minutes on (an agent's
//!   renewal). The whole sequence is drawn from `--seed` before the first run: every
//!   controller and mode sees the same values.
//! - Settle: the scores of step 0 are written before the controller starts; the placements
//!   are created, every one must have 3 clusters and the apiserver must have seen no OCM or
//!   event write for 3 s before step 1. After the last step, the run waits until no
//!   placement's set of clusters has changed for `--flap-quiet` (at most 5 minutes).
//! - A decision change: a placement's set of clusters (its PlacementDecisions as a watch
//!   sees them) differs from its previous non-empty set, from the start of step 1 until
//!   settled. Changes before step 1 (the first decision and any move while settling) are
//!   counted apart.
//! - Regret: per placement and step, the mean true value of the 3 truly best clusters minus
//!   the mean true value of the placement's clusters at the end of that step (just before the
//!   next step's writes; after settling for the last one), averaged over placements and steps.
//!
//! Every run leaves `<run>.flap.json` in the work dir (the truth, every step's values, the
//! step times and every decision change) and `<run>.events.json` (the controller's Events in
//! the namespace), for reading the history after the run.

use super::*;

/// Clusters per placement.
pub(crate) const PICK: usize = 3;
/// The AddOnPlacementScore (`resourceName`) and its item (`scoreName`) every placement reads.
const SCORE: &str = "demo";
/// The spread of the true values.
const TRUE_MIN: f64 = -80.0;
const TRUE_MAX: f64 = 80.0;
/// Score validity written with each step, as an agent renewing its score.
const VALIDITY: jiff::SignedDuration = jiff::SignedDuration::from_mins(5);
/// How long the apiserver must see no write before step 1.
const QUIET_BEFORE: Duration = Duration::from_secs(3);
/// The longest wait for the decisions to settle after the last step.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

/// Which prioritizer policy the placements use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum FlapMode {
    /// Upstream's defaults: Balance 1 + Steady 1, plus the AddOn prioritizer (weight 1).
    Additive,
    /// The AddOn prioritizer alone.
    Exact,
    /// Additive, then Exact, each on fresh control planes.
    Both,
}

impl FlapMode {
    pub(crate) fn modes(self) -> &'static [FlapMode] {
        match self {
            FlapMode::Additive => &[FlapMode::Additive],
            FlapMode::Exact => &[FlapMode::Exact],
            FlapMode::Both => &[FlapMode::Additive, FlapMode::Exact],
        }
    }

    fn policy(self) -> &'static str {
        match self {
            FlapMode::Additive | FlapMode::Both => "Additive",
            FlapMode::Exact => "Exact",
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood): a small deterministic generator, enough for noise. The
/// workspace's `rand` comes only through proptest, a dev-dependency of other crates; taking it
/// here would mean a new dependency of this package.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` ≥ 1; the modulo bias is below 2^-50 for the ranges used here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform integer in `[-a, a]`.
    pub(crate) fn symmetric(&mut self, a: i64) -> i64 {
        let a = a.max(0);
        i64::try_from(self.below(2 * a.unsigned_abs() + 1)).unwrap_or(0) - a
    }
}

/// The truth and every score a run writes, drawn once from the seed.
pub(crate) struct Plan {
    pub(crate) truth: Vec<i64>,
    /// `values[step][cluster]`; step 0 is written at setup.
    pub(crate) values: Vec<Vec<i64>>,
    pub(crate) noise: i64,
    pub(crate) seed: u64,
}

impl Plan {
    pub(crate) fn new(clusters: usize, steps: usize, noise: i64, seed: u64) -> Plan {
        let mut rng = SplitMix64::new(seed);
        let mut truth: Vec<i64> = (0..clusters)
            .map(|i| {
                let f = if clusters > 1 {
                    i as f64 / (clusters - 1) as f64
                } else {
                    0.5
                };
                (TRUE_MIN + f * (TRUE_MAX - TRUE_MIN)).round() as i64
            })
            .collect();
        // Fisher-Yates: which cluster gets which value.
        for i in (1..truth.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            truth.swap(i, j);
        }
        let values = (0..=steps)
            .map(|_| {
                truth
                    .iter()
                    .map(|t| (t + rng.symmetric(noise)).clamp(-100, 100))
                    .collect()
            })
            .collect();
        Plan {
            truth,
            values,
            noise,
            seed,
        }
    }

    fn steps(&self) -> usize {
        self.values.len().saturating_sub(1)
    }

    /// The `PICK` best clusters by `key` (higher first, then the lower name: upstream's order).
    fn top(&self, key: &[i64]) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..key.len()).collect();
        idx.sort_by(|&a, &b| key[b].cmp(&key[a]).then(a.cmp(&b)));
        idx.truncate(PICK);
        idx
    }

    fn mean_truth(&self, clusters: &[usize]) -> f64 {
        if clusters.is_empty() {
            return f64::NAN;
        }
        clusters.iter().map(|&c| self.truth[c] as f64).sum::<f64>() / clusters.len() as f64
    }

    /// The mean true value of the `PICK` truly best clusters.
    pub(crate) fn best(&self) -> f64 {
        self.mean_truth(&self.top(&self.truth))
    }

    /// Regret of a scheduler that always holds the top 3 by the current scores (Exact without
    /// delay): the price of the noise itself.
    pub(crate) fn follow_regret(&self) -> f64 {
        let best = self.best();
        let s = self.steps().max(1);
        (1..=self.steps())
            .map(|k| best - self.mean_truth(&self.top(&self.values[k])))
            .sum::<f64>()
            / s as f64
    }

    /// Regret of a scheduler that keeps the top 3 of step 0 for good.
    pub(crate) fn hold_regret(&self) -> f64 {
        self.best() - self.mean_truth(&self.top(&self.values[0]))
    }

    /// The number of steps (of all) in which the top 3 by the current scores differ from the
    /// step before: how often an Exact scheduler that follows every write would move.
    pub(crate) fn follow_moves(&self) -> usize {
        (1..=self.steps())
            .filter(|&k| {
                let mut a = self.top(&self.values[k]);
                let mut b = self.top(&self.values[k - 1]);
                a.sort_unstable();
                b.sort_unstable();
                a != b
            })
            .count()
    }
}

/// One decision change as the watch saw it.
struct Record {
    at: Instant,
    placement: String,
    clusters: BTreeSet<String>,
}

/// The PlacementDecisions of the namespace and every change of a placement's set of clusters.
#[derive(Default)]
struct History {
    seen: Seen,
    records: Vec<Record>,
}

struct FlapWatch {
    history: Arc<Mutex<History>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FlapWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FlapWatch {
    fn start(client: &Client, ns: &str) -> FlapWatch {
        let api: Api<PlacementDecision> = Api::namespaced(client.clone(), ns);
        let history = Arc::new(Mutex::new(History::default()));
        let task = tokio::spawn({
            let history = history.clone();
            async move {
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(ev) = stream.next().await {
                    let at = Instant::now();
                    let (d, deleted) = match ev {
                        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => (d, false),
                        Ok(watcher::Event::Delete(d)) => (d, true),
                        Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                        Err(e) => {
                            eprintln!("PlacementDecision watch: {e}; retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    let Some(placement) = d
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(PLACEMENT_LABEL))
                        .cloned()
                    else {
                        continue;
                    };
                    let mut h = history.lock();
                    let set = |h: &History| -> BTreeSet<String> {
                        h.seen
                            .clusters_of(&placement)
                            .into_iter()
                            .map(str::to_owned)
                            .collect()
                    };
                    let before = set(&h);
                    h.seen.apply(&d, deleted, at);
                    let clusters = set(&h);
                    if clusters != before {
                        h.records.push(Record {
                            at,
                            placement,
                            clusters,
                        });
                    }
                }
            }
        });
        FlapWatch { history, task }
    }

    fn with<T>(&self, f: impl FnOnce(&History) -> T) -> T {
        f(&self.history.lock())
    }

    /// Each placement's current set of clusters.
    fn current(&self, placements: usize) -> Vec<BTreeSet<String>> {
        self.with(|h| {
            (0..placements)
                .map(|i| {
                    h.seen
                        .clusters_of(&placement_name(i))
                        .into_iter()
                        .map(str::to_owned)
                        .collect()
                })
                .collect()
        })
    }

    /// When the last change of any placement's set was seen.
    fn last_change(&self) -> Option<Instant> {
        self.with(|h| h.records.last().map(|r| r.at))
    }
}

/// What one run measured.
pub(crate) struct Outcome {
    pub(crate) kind: Kind,
    pub(crate) mode: FlapMode,
    pub(crate) stability: Option<String>,
    pub(crate) placements: usize,
    pub(crate) steps: usize,
    /// Changes from the start of step 1 until settled.
    pub(crate) changes: usize,
    /// Of those, how many fell in each step (the last one's count includes the settling).
    pub(crate) changes_by_step: Vec<usize>,
    /// Placements that changed at least once.
    pub(crate) moved: usize,
    /// Changes that were, in the same step, the same move (the same clusters out and in) as
    /// another placement's: placements moving as a herd.
    pub(crate) herded: usize,
    /// Set changes after each placement's first non-empty set and before step 1.
    pub(crate) initial_moves: usize,
    pub(crate) regret: f64,
    /// Last change after the last step's writes (None: still changing at the limit).
    pub(crate) settled_after: Option<Duration>,
    /// Decisions per cluster (min, max) at step 1 and at the end.
    pub(crate) load_before: (usize, usize),
    pub(crate) load_after: (usize, usize),
    /// From the start of step 1 until settled.
    pub(crate) window: Window,
    pub(crate) history_file: PathBuf,
}

impl Outcome {
    pub(crate) fn label(&self) -> String {
        let mut s = self.kind.name().to_owned();
        if let Some(st) = &self.stability {
            let _ = write!(s, " + stability `{st}`");
        }
        s
    }

    /// Decision changes per placement per 100 steps.
    pub(crate) fn rate(&self) -> f64 {
        100.0 * self.changes as f64 / (self.placements.max(1) * self.steps.max(1)) as f64
    }

    fn decision_writes(&self) -> f64 {
        self.window
            .apiserver
            .iter()
            .filter(|((verb, res), _)| {
                matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
                    && res.starts_with("placementdecisions")
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// This run's figures for `--json` (see data.rs).
    pub(crate) fn json(&self) -> Value {
        json!({
            "controller": self.kind.name(),
            "stability": self.stability,
            "mode": self.mode.policy(),
            "placements": self.placements,
            "steps": self.steps,
            "changes_per_100_steps": crate::data::r2(self.rate()),
            "regret": (self.regret * 10.0).round() / 10.0,
            "decision_writes": crate::data::r2(self.decision_writes()),
        })
    }

    pub(crate) fn row(&self) -> String {
        format!(
            "| {} | {} | {:.2} | {:.1} | {} / {} | {} of {} | {} | {:.2} | {} | {} | {} |",
            self.label(),
            self.mode.policy(),
            self.rate(),
            self.regret,
            self.moved,
            self.placements,
            self.herded,
            self.changes,
            self.initial_moves,
            self.window.passes / (self.placements.max(1) * self.steps.max(1)) as f64,
            num(self.decision_writes()),
            self.settled_after.map_or_else(|| "no".to_owned(), secs),
            format_args!(
                "{}–{} → {}–{}",
                self.load_before.0, self.load_before.1, self.load_after.0, self.load_after.1
            ),
        )
    }

    pub(crate) fn detail(&self) -> String {
        let busiest: Vec<String> = self
            .changes_by_step
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{}:{n}", k + 1))
            .collect();
        format!(
            "- {} {}: {} changes in {} steps (by step, `step:changes`: {}); controller CPU {} in {}; history {}",
            self.label(),
            self.mode.policy(),
            self.changes,
            self.steps,
            if busiest.is_empty() {
                "none".to_owned()
            } else {
                busiest.join(" ")
            },
            secs(self.window.controller_cpu),
            secs(self.window.wall),
            self.history_file.display(),
        )
    }
}

fn placement_spec(mode: FlapMode) -> Value {
    json!({
        "numberOfClusters": PICK,
        "prioritizerPolicy": {"mode": mode.policy(), "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": SCORE, "scoreName": SCORE}}, "weight": 1},
        ]},
    })
}

async fn write_scores(hub: &Hub, values: &[i64], concurrency: usize) -> Result<()> {
    let valid_until = rfc3339(jiff::Timestamp::now() + VALIDITY);
    futures::stream::iter(values.iter().enumerate())
        .map(|(i, &v)| {
            let valid_until = &valid_until;
            async move { set_score(&hub.client, &cluster_name(i), v, Some(valid_until)).await }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await?;
    hub.count("PATCH", "addonplacementscores/status", values.len() as f64);
    Ok(())
}

/// Decisions per cluster (min, max over the clusters) in `sets`.
fn load(sets: &[BTreeSet<String>], clusters: usize) -> (usize, usize) {
    let mut n: HashMap<&str, usize> = HashMap::new();
    for s in sets {
        for c in s {
            *n.entry(c.as_str()).or_insert(0) += 1;
        }
    }
    let counts: Vec<usize> = (0..clusters)
        .map(|i| n.get(cluster_name(i).as_str()).copied().unwrap_or(0))
        .collect();
    (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    )
}

pub(crate) async fn run(
    env: &Env<'_>,
    plan: &Plan,
    kind: Kind,
    mode: FlapMode,
    stability: Option<&str>,
) -> Result<Outcome> {
    let args = env.args;
    let clusters = plan.truth.len();
    let placements = args.placements.unwrap_or(50);
    let steps = plan.steps();
    if clusters < PICK || placements == 0 || steps == 0 {
        return Err(format!(
            "flap: at least {PICK} clusters, 1 placement and 1 step (--clusters {clusters}, --placements {placements}, --steps {steps})"
        )
        .into());
    }
    let name = format!(
        "flap-{}{}-{}",
        kind.name(),
        if stability.is_some() { "-stable" } else { "" },
        mode.policy().to_lowercase()
    );
    let hub = Hub::start(env, &name).await?;
    eprintln!(
        "[{name}] control plane up in {:.1?}; {clusters} clusters with scores",
        hub.started_in
    );
    hub.create_fleet(
        clusters,
        args.concurrency,
        |_| Default::default(),
        |i| plan.values[0][i],
    )
    .await?;
    // Step 0 again with an agent's validity (the fleet's own is 1,000 minutes).
    write_scores(&hub, &plan.values[0], args.concurrency).await?;
    let ctl = Controller::start(env, kind, &hub).await?;
    let watch = FlapWatch::start(&hub.client, &hub.ns);
    let t_zero = Instant::now();
    let annotations: BTreeMap<String, String> = stability
        .map(|s| {
            BTreeMap::from([(
                "scheduling.ocm-placement.io/stability".to_owned(),
                s.to_owned(),
            )])
        })
        .unwrap_or_default();
    hub.create_placements_annotated(placements, args.concurrency, &annotations, |_| {
        placement_spec(mode)
    })
    .await?;
    let deadline = Instant::now() + args.timeout;
    loop {
        ctl.check_alive()?;
        let decided = watch
            .current(placements)
            .iter()
            .filter(|s| s.len() == PICK)
            .count();
        if decided == placements {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "[{name}] {decided}/{placements} placements had {PICK} clusters after {:?}",
                args.timeout
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "[{name}] {placements} placements decided in {:.1?}; waiting for the writes to stop",
        t_zero.elapsed()
    );
    crate::moves::wait_quiet(&hub, QUIET_BEFORE, args.timeout).await?;
    let start_sets = watch.current(placements);
    let load_before = load(&start_sets, clusters);
    let p0 = Point::take(&hub, &ctl).await?;
    let first_step = Instant::now();
    eprintln!(
        "[{name}] settled; {steps} steps every {:?}",
        args.step_interval
    );

    let mut samples: Vec<Vec<BTreeSet<String>>> = Vec::with_capacity(steps);
    let mut step_starts = Vec::with_capacity(steps);
    for k in 1..=steps {
        let at = first_step + args.step_interval * (k as u32 - 1);
        tokio::time::sleep_until(at.into()).await;
        ctl.check_alive()?;
        if k > 1 {
            samples.push(watch.current(placements));
        }
        step_starts.push(Instant::now());
        write_scores(&hub, &plan.values[k], args.concurrency).await?;
    }
    tokio::time::sleep_until((first_step + args.step_interval * steps as u32).into()).await;
    let last_writes = *step_starts.last().unwrap_or(&first_step);
    // Settled: no set changed for `--flap-quiet`.
    let settle_deadline = Instant::now() + SETTLE_LIMIT;
    let settled_after = loop {
        let last = watch.last_change().unwrap_or(first_step).max(last_writes);
        if last.elapsed() >= args.flap_quiet {
            break Some(last.saturating_duration_since(last_writes));
        }
        if Instant::now() > settle_deadline {
            eprintln!("[{name}] still changing {SETTLE_LIMIT:?} after the last step");
            break None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    samples.push(watch.current(placements));
    let p1 = Point::take(&hub, &ctl).await?;
    let end = Instant::now();

    // Count.
    let index: HashMap<String, usize> = (0..clusters).map(|i| (cluster_name(i), i)).collect();
    let best = plan.best();
    let mut regret_sum = 0.0;
    let mut regret_n = 0usize;
    for step in &samples {
        for set in step {
            let idx: Vec<usize> = set.iter().filter_map(|c| index.get(c).copied()).collect();
            let m = plan.mean_truth(&idx);
            if m.is_finite() {
                regret_sum += best - m;
                regret_n += 1;
            }
        }
    }
    let mut changes = 0;
    let mut changes_by_step = vec![0usize; steps];
    let mut moved = BTreeSet::new();
    let mut initial_moves = 0;
    // (step, clusters out, clusters in) -> changes.
    let mut same_move: HashMap<(usize, Vec<String>, Vec<String>), usize> = HashMap::new();
    let mut json_history = Vec::new();
    watch.with(|h| {
        let mut previous: HashMap<&str, &BTreeSet<String>> = HashMap::new();
        for r in &h.records {
            json_history.push(json!({
                "t": r.at.saturating_duration_since(t_zero).as_secs_f64(),
                "placement": r.placement,
                "clusters": r.clusters,
            }));
            if r.clusters.is_empty() || r.at > end {
                continue;
            }
            let prev = previous.insert(&r.placement, &r.clusters);
            let Some(prev) = prev else { continue };
            if prev == &r.clusters {
                continue;
            }
            if r.at < first_step {
                initial_moves += 1;
                continue;
            }
            changes += 1;
            moved.insert(r.placement.clone());
            let k = step_starts.partition_point(|s| *s <= r.at).max(1) - 1;
            changes_by_step[k] += 1;
            let out = prev.difference(&r.clusters).cloned().collect();
            let into = r.clusters.difference(prev).cloned().collect();
            *same_move.entry((k, out, into)).or_insert(0) += 1;
        }
    });
    let end_sets = watch.current(placements);
    let history_file = env.work_dir.join(format!("{name}.flap.json"));
    let secs_of = |t: Instant| t.saturating_duration_since(t_zero).as_secs_f64();
    let doc = json!({
        "run": name,
        "controller": kind.name(),
        "mode": mode.policy(),
        "stability": stability,
        "seed": plan.seed,
        "noise": plan.noise,
        "truth": plan.truth.iter().enumerate().map(|(i, t)| (cluster_name(i), *t)).collect::<BTreeMap<_, _>>(),
        "values": plan.values,
        "first_step": secs_of(first_step),
        "step_starts": step_starts.iter().map(|t| secs_of(*t)).collect::<Vec<_>>(),
        "end": secs_of(end),
        "history": json_history,
    });
    std::fs::write(&history_file, serde_json::to_string(&doc)?)
        .map_err(|e| format!("write {}: {e}", history_file.display()))?;
    dump_events(&hub, &env.work_dir.join(format!("{name}.events.json"))).await;
    drop(watch);
    drop(ctl);
    drop(hub);
    let out = Outcome {
        kind,
        mode,
        stability: stability.map(str::to_owned),
        placements,
        steps,
        changes,
        changes_by_step,
        moved: moved.len(),
        herded: same_move.values().filter(|n| **n > 1).sum(),
        initial_moves,
        regret: if regret_n == 0 {
            f64::NAN
        } else {
            regret_sum / regret_n as f64
        },
        settled_after,
        load_before,
        load_after: load(&end_sets, clusters),
        window: Window::between(&p0, &p1),
        history_file,
    };
    eprintln!("{}", out.row());
    Ok(out)
}

/// The Events in the run's namespace (both APIs: ours writes events.k8s.io/v1, upstream's
/// recorder too, and library-go's core/v1), for reading after the run; failures only warn.
async fn dump_events(hub: &Hub, path: &Path) {
    let lp = ListParams::default();
    let new: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(hub.client.clone(), &hub.ns);
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(hub.client.clone(), &hub.ns);
    let doc = json!({
        "events.k8s.io/v1": new.list(&lp).await.map(|l| l.items).unwrap_or_default(),
        "v1": core.list(&lp).await.map(|l| l.items).unwrap_or_default(),
    });
    if let Err(e) = std::fs::write(path, doc.to_string()) {
        eprintln!("warning: write {}: {e}", path.display());
    }
}

/// The table: one row per run, then what the figures mean and every run's details.
pub(crate) fn section(plan: &Plan, args: &Args, results: &[Outcome]) -> String {
    let mut s = String::new();
    let clusters = plan.truth.len();
    let _ = writeln!(
        s,
        "### Flap: {clusters} clusters whose scores wander, {} placements of {PICK}\n",
        results.first().map_or(0, |r| r.placements)
    );
    let _ = writeln!(
        s,
        "{} steps every {:?}; each step every cluster's AddOnPlacementScore is its true value (spread evenly over [{TRUE_MIN}, {TRUE_MAX}]) + uniform noise in [-{n}, {n}] (seed {}). The {PICK} truly best average {:.1}. For reference: holding the top {PICK} by the scores of step 0 has regret {:.1}; following the current top {PICK} at every step has regret {:.1} and moves on {} of the {} steps.\n",
        plan.steps(),
        args.step_interval,
        plan.seed,
        plan.best(),
        plan.hold_regret(),
        plan.follow_regret(),
        plan.follow_moves(),
        plan.steps(),
        n = plan.noise,
    );
    let _ = writeln!(
        s,
        "| controller | mode | decision changes per placement per 100 steps | regret | placements that moved | changes made as a herd | moves before step 1 | passes per placement per step | decision writes | last change after the last step | decisions per cluster, step 1 → end (min–max) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in results {
        let _ = writeln!(s, "{}", r.row());
    }
    let _ = writeln!(
        s,
        "\nA decision change: a placement's set of clusters differs from its previous one (the first decision, and moves while settling before step 1, are not counted). A change made as a herd: in the same step, another placement made the same move (the same clusters out and in); in Exact mode every placement reads the same scores, so they all move alike, while in Additive mode Balance should spread them. Regret: the mean true value of the {PICK} truly best clusters minus the mean true value of a placement's clusters at the end of each step, averaged over placements and steps. Passes: the controller's scheduling histogram; decision writes: the apiserver's count; both from step 1 until settled. Upstream ignores the stability annotation, so it runs without one.\n"
    );
    for r in results {
        let _ = writeln!(s, "{}", r.detail());
    }
    s
}
