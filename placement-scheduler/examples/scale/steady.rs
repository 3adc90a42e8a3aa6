//! Steady state: what a fleet costs all day. Clusters in `--steady-sets` exclusive sets, each
//! bound in a namespace of its own; every cluster's agent renews its score every period
//! (`--step-interval`, a compressed minute) with `validUntil` ten periods ahead, and a share of
//! them (`--change-percent`) writes a new value. Placements of 3 clusters (AddOn only, Exact,
//! as the flap scenario) are spread over the namespaces: one in five reads its whole set, the
//! others a region of it (a label predicate: a tenth of the set).
//!
//! Per period: the controller's passes beside the placements whose candidate clusters had a
//! changed score (what the harness wrote, computed from the placements' sets and regions),
//! its CPU, its writes, and the decision changes a watch of every PlacementDecision saw; and
//! its peak RSS.
//!
//! `floor`: the same hub with no controller; the harness makes the writes a controller makes
//! (a PlacementDecision created and its status written, the Placement's status; then a
//! decision change: one status patch), as fast as the apiserver takes them: the rate any
//! controller is bounded by on this machine.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;

use super::*;
use crate::flap::SplitMix64;

const REGION_LABEL: &str = "scale.ocm-placement.io/region";
const REGIONS: usize = 10;
/// A score's `validUntil`, in periods after it is written, and at least [`MIN_VALIDITY`]: on
/// 2 cores the apiserver takes a renewal of 1,000 scores in seconds, so a period often lasts
/// longer than asked; the scores must not expire between renewals (nor before the first
/// period, while the harness waits for the controller to settle).
const VALIDITY_PERIODS: u32 = 10;
const MIN_VALIDITY: Duration = Duration::from_secs(600);
const PICK: usize = 3;

/// Where placement `j` of a namespace looks: its whole set (one in five), or one region.
fn region_of_placement(j: usize) -> Option<usize> {
    (!j.is_multiple_of(5)).then_some(j % REGIONS)
}

fn set_of_cluster(i: usize, sets: usize) -> usize {
    i % sets
}

fn region_of_cluster(i: usize, sets: usize) -> usize {
    (i / sets) % REGIONS
}

fn namespace(hub: &Hub, k: usize) -> String {
    format!("{}-n{k}", hub.ns)
}

fn set_name(hub: &Hub, k: usize) -> String {
    format!("{}-s{k}", hub.ns)
}

pub(crate) struct Outcome {
    pub(crate) kind: Kind,
    pub(crate) clusters: usize,
    pub(crate) placements: usize,
    pub(crate) sets: usize,
    pub(crate) periods: usize,
    pub(crate) period: Duration,
    /// Placements whose candidate clusters had a changed score, summed over the periods.
    pub(crate) affected: usize,
    /// Scores whose value changed, summed over the periods.
    pub(crate) changed: usize,
    /// Periods whose score writes took longer than the period.
    pub(crate) overran: usize,
    pub(crate) decision_changes: usize,
    pub(crate) peak_rss: u64,
    pub(crate) window: Window,
}

impl Outcome {
    fn per(&self, v: f64) -> f64 {
        v / self.periods.max(1) as f64
    }

    pub(crate) fn row(&self) -> String {
        let w = &self.window;
        format!(
            "| {} | {} × {} ({} sets) | {} × {:?} ({:.1} s each) | {} | {} | {} | {} ms | {:.1}% | {} | {} | {} |",
            self.kind.name(),
            self.placements,
            self.clusters,
            self.sets,
            self.periods,
            self.period,
            self.window.wall.as_secs_f64() / self.periods.max(1) as f64,
            num(self.per(self.changed as f64)),
            num(self.per(w.passes)),
            num(self.per(self.affected as f64)),
            num(self.per(w.controller_cpu.as_secs_f64() * 1000.0)),
            w.cpu_share(),
            num(self.per(w.total_writes())),
            num(self.per(self.decision_changes as f64)),
            mb(self.peak_rss),
        )
    }
}

pub(crate) fn section(results: &[Outcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "### Steady state\n");
    let _ = writeln!(
        s,
        "Every cluster renews its score each period ({VALIDITY_PERIODS} periods of validity, at least {MIN_VALIDITY:?}); the changed share writes a new value. A period lasts at least what was asked, and as long as the apiserver takes to accept the renewals (the time each took on average is given). Per period: scores changed, the controller's passes, the placements whose candidate clusters had a changed score, its CPU (and share of one core), its writes, the decision changes seen, then its peak RSS. A run whose score writes overran the period says so below.\n"
    );
    let _ = writeln!(
        s,
        "| controller | placements × clusters | periods | changed scores | passes | placements with a changed candidate | CPU | CPU share | writes | decision changes | peak RSS |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let _ = writeln!(s, "{}", r.row());
    }
    for r in results {
        if r.overran > 0 {
            let _ = writeln!(
                s,
                "\n{}: the score writes of {} of {} periods took longer than the period.",
                r.kind.name(),
                r.overran,
                r.periods
            );
        }
        let _ = writeln!(
            s,
            "\n{}: writes by verb over the run {:?}; other processes used {:.0}% of one core meanwhile.",
            r.kind.name(),
            r.window.writes,
            pct(r.window.other_cpu, r.window.wall)
        );
    }
    if let [a, b] = results
        && a.window.controller_cpu > Duration::ZERO
    {
        let _ = writeln!(
            s,
            "\nCPU per period, {} / {}: {:.3}.",
            a.kind.name(),
            b.kind.name(),
            a.window.controller_cpu.as_secs_f64() / b.window.controller_cpu.as_secs_f64()
        );
    }
    s
}

/// The sets, namespaces and bindings, the clusters (labelled with set and region, with a
/// score each, valid for 1,000 minutes until the periods start).
async fn create_hub(
    hub: &Hub,
    sets: usize,
    clusters: usize,
    values: &[i64],
    concurrency: usize,
) -> Result<()> {
    for k in 0..sets {
        let set = set_name(hub, k);
        hub.apply_all::<ManagedClusterSet>(
            &set,
            json!({"spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        )
        .await?;
        let ns = namespace(hub, k);
        let api: Api<Namespace> = Api::all(hub.client.clone());
        let body: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap_or_default();
        let post = PostParams::default();
        match retry(|| api.create(&post, &body)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        hub.apply_ns::<ManagedClusterSetBinding>(&ns, &set, json!({"spec": {"clusterSet": set}}))
            .await?;
    }
    let valid_until = score_valid_until();
    futures::stream::iter(0..clusters)
        .map(|i| {
            let valid_until = valid_until.clone();
            async move {
                let name = cluster_name(i);
                let labels = json!({
                    CLUSTERSET_LABEL: set_name(hub, set_of_cluster(i, sets)),
                    REGION_LABEL: format!("r{}", region_of_cluster(i, sets)),
                });
                hub.apply_all::<ManagedCluster>(
                    &name,
                    json!({"metadata": {"labels": labels}, "spec": {"hubAcceptsClient": true}}),
                )
                .await?;
                let ns_api: Api<Namespace> = Api::all(hub.client.clone());
                let ns: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap_or_default();
                let post = PostParams::default();
                match retry(|| ns_api.create(&post, &ns)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(BoxError::from(e)),
                }
                hub.apply_ns::<AddOnPlacementScore>(&name, "demo", json!({}))
                    .await?;
                set_score(&hub.client, &name, values[i], Some(&valid_until)).await?;
                Ok::<(), BoxError>(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
}

fn placement_spec(j: usize) -> Value {
    let mut spec = json!({
        "numberOfClusters": PICK,
        "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
        ]},
    });
    if let Some(r) = region_of_placement(j) {
        spec["predicates"] = json!([{"requiredClusterSelector": {"labelSelector": {"matchLabels": {REGION_LABEL: format!("r{r}")}}}}]);
    }
    spec
}

/// Placement `j` of namespace `k` for `j` in `0..per_ns`.
async fn create_placements(
    hub: &Hub,
    sets: usize,
    per_ns: usize,
    concurrency: usize,
) -> Result<()> {
    futures::stream::iter((0..sets).flat_map(|k| (0..per_ns).map(move |j| (k, j))))
        .map(|(k, j)| async move {
            let ns = namespace(hub, k);
            let api: Api<Placement> = Api::namespaced(hub.client.clone(), &ns);
            let p: Placement = serde_json::from_value(json!({
                "metadata": {"name": placement_name(j), "namespace": ns},
                "spec": placement_spec(j),
            }))?;
            let post = PostParams::default();
            retry(|| api.create(&post, &p)).await?;
            hub.count("POST", "placements", 1.0);
            Ok::<(), BoxError>(())
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
}

/// The clusters of each PlacementDecision, by namespace and name.
type Decided = HashMap<(String, String), BTreeSet<String>>;

/// Every PlacementDecision's clusters, and how many times a known one's set changed while
/// `counting`.
struct DecisionWatch {
    current: Arc<Mutex<Decided>>,
    changes: Arc<AtomicU64>,
    counting: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DecisionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DecisionWatch {
    fn start(client: &Client) -> Self {
        let api: Api<PlacementDecision> = Api::all(client.clone());
        let current: Arc<Mutex<Decided>> = Arc::default();
        let changes = Arc::new(AtomicU64::new(0));
        let counting = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (current, changes, counting) = (current.clone(), changes.clone(), counting.clone());
            async move {
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(ev) = stream.next().await {
                    let d = match ev {
                        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => d,
                        Ok(_) => continue,
                        Err(e) => {
                            eprintln!("PlacementDecision watch: {e}; retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    let key = (
                        d.metadata.namespace.clone().unwrap_or_default(),
                        d.metadata.name.clone().unwrap_or_default(),
                    );
                    let set: BTreeSet<String> = d
                        .status
                        .iter()
                        .flat_map(|s| s.decisions.iter().map(|e| e.cluster_name.clone()))
                        .collect();
                    let before = current.lock().insert(key, set.clone());
                    if counting.load(Ordering::Relaxed) && before.is_some_and(|b| b != set) {
                        changes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        DecisionWatch {
            current,
            changes,
            counting,
            task,
        }
    }

    /// PlacementDecisions holding `PICK` clusters.
    fn decided(&self) -> usize {
        self.current
            .lock()
            .values()
            .filter(|s| s.len() == PICK)
            .count()
    }
}

/// One period's plan: the clusters whose value changes, and the new values.
fn step(rng: &mut SplitMix64, values: &mut [i64], share_percent: u64) -> HashSet<usize> {
    let n = values.len();
    let want = (n as u64 * share_percent).div_ceil(100) as usize;
    let mut changed = HashSet::new();
    while changed.len() < want.min(n) {
        let i = rng.below(n as u64) as usize;
        if changed.insert(i) {
            let old = values[i];
            let mut v = old;
            while v == old {
                v = rng.below(101) as i64;
            }
            values[i] = v;
        }
    }
    changed
}

/// The placements whose candidate clusters include a changed one.
fn affected(changed: &HashSet<usize>, sets: usize, per_ns: usize) -> usize {
    let mut hit = vec![[false; REGIONS]; sets];
    for &i in changed {
        hit[set_of_cluster(i, sets)][region_of_cluster(i, sets)] = true;
    }
    let mut n = 0;
    for row in &hit {
        for j in 0..per_ns {
            let yes = match region_of_placement(j) {
                None => row.iter().any(|h| *h),
                Some(r) => row[r],
            };
            n += usize::from(yes);
        }
    }
    n
}

async fn write_scores(
    hub: &Hub,
    values: &[i64],
    period: Duration,
    concurrency: usize,
) -> Result<()> {
    let until = jiff::Timestamp::now()
        + jiff::SignedDuration::try_from((period * VALIDITY_PERIODS).max(MIN_VALIDITY))
            .unwrap_or_default();
    let valid_until = rfc3339(until);
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

pub(crate) async fn run(env: &Env<'_>, kind: Kind) -> Result<Outcome> {
    let args = env.args;
    let clusters = args.clusters.unwrap_or(1000);
    let sets = args.steady_sets.max(1);
    let per_ns = args.placements.unwrap_or(10_000) / sets;
    let placements = per_ns * sets;
    let periods = args.steps;
    let period = args.step_interval;
    let name = format!("steady-{}", kind.name());
    let mut hub = Hub::start(env, &name).await?;
    hub.scope = (0..sets).map(|k| namespace(&hub, k)).collect();
    let mut rng = SplitMix64::new(args.seed);
    let mut values: Vec<i64> = (0..clusters).map(|_| rng.below(101) as i64).collect();
    create_hub(&hub, sets, clusters, &values, args.concurrency).await?;
    eprintln!("[{name}] {clusters} clusters in {sets} sets with scores");
    let watch = DecisionWatch::start(&hub.client);
    let ctl = Controller::start(env, kind, &hub).await?;
    let t = Instant::now();
    create_placements(&hub, sets, per_ns, args.concurrency).await?;
    let deadline = Instant::now() + args.timeout;
    loop {
        ctl.check_alive()?;
        let decided = watch.decided();
        if decided >= placements {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "[{name}] {decided}/{placements} decided after {:?}",
                args.timeout
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "[{name}] {placements} placements decided in {:.1?}",
        t.elapsed()
    );
    // The agents' first renewal with a period's validity, then rest.
    write_scores(&hub, &values, period, args.concurrency).await?;
    crate::moves::wait_quiet(&hub, Duration::from_secs(10), args.timeout).await?;
    let p0 = Point::take(&hub, &ctl).await?;
    watch.counting.store(true, Ordering::Relaxed);
    let first = Instant::now();
    let (mut affected_sum, mut changed_sum, mut overran) = (0, 0, 0);
    for k in 0..periods {
        let at = first + period * u32::try_from(k).unwrap_or(u32::MAX);
        tokio::time::sleep_until(at.into()).await;
        ctl.check_alive()?;
        let changed = step(&mut rng, &mut values, args.change_percent);
        changed_sum += changed.len();
        affected_sum += affected(&changed, sets, per_ns);
        let started = Instant::now();
        write_scores(&hub, &values, period, args.concurrency).await?;
        if started.elapsed() > period {
            overran += 1;
        }
    }
    // The last period's passes: until the controller has written nothing for 3 s.
    crate::moves::wait_quiet(&hub, Duration::from_secs(3), args.timeout).await?;
    let p1 = Point::take(&hub, &ctl).await?;
    watch.counting.store(false, Ordering::Relaxed);
    let peak_rss = procfs::status_bytes(ctl.pid, "VmHWM");
    let out = Outcome {
        kind,
        clusters,
        placements,
        sets,
        periods,
        period,
        affected: affected_sum,
        changed: changed_sum,
        overran,
        decision_changes: watch.changes.load(Ordering::Relaxed) as usize,
        peak_rss,
        window: Window::between(&p0, &p1),
    };
    drop(watch);
    drop(ctl);
    drop(hub);
    eprintln!("{}", out.row());
    Ok(out)
}

/// The floor: no controller; the harness makes a controller's writes for `--placements`
/// placements (a decision created, its status, the placement's status), then one decision
/// change each (a status patch), `--concurrency` at a time. Returns the section.
pub(crate) async fn floor(env: &Env<'_>) -> Result<String> {
    let args = env.args;
    let m = args.placements.unwrap_or(1000);
    let hub = Hub::start(env, "floor").await?;
    hub.create_placements(m, args.concurrency, |_| json!({"numberOfClusters": PICK}))
        .await?;
    let pd_api: Api<PlacementDecision> = Api::namespaced(hub.client.clone(), &hub.ns);
    let p_api: Api<Placement> = Api::namespaced(hub.client.clone(), &hub.ns);
    let decisions = |k: usize| -> Value {
        let entries: Vec<Value> = (0..PICK)
            .map(|c| json!({"clusterName": cluster_name(k + c), "reason": ""}))
            .collect();
        json!({"status": {"decisions": entries}})
    };
    let p0 = (
        Instant::now(),
        hub.apiserver_metrics().await?,
        hub.cp.pids(),
    );
    let cpu = |pids: [u32; 2]| procfs::cpu_time(pids[0]) + procfs::cpu_time(pids[1]);
    let cpu0 = cpu(p0.2);
    futures::stream::iter(0..m)
        .map(|i| {
            let (pd_api, p_api) = (pd_api.clone(), p_api.clone());
            let ns = hub.ns.clone();
            async move {
                let p = placement_name(i);
                let pd: PlacementDecision = serde_json::from_value(json!({"metadata": {
                    "name": format!("{p}-decision-1"), "namespace": ns,
                    "labels": {PLACEMENT_LABEL: p,
                        "cluster.open-cluster-management.io/decision-group-index": "0",
                        "cluster.open-cluster-management.io/decision-group-name": ""}}}))?;
                let (post, pp) = (PostParams::default(), PatchParams::default());
                let pd_name = format!("{p}-decision-1");
                retry(|| pd_api.create(&post, &pd)).await?;
                let body = decisions(i);
                let patch = Patch::Merge(&body);
                retry(|| pd_api.patch_status(&pd_name, &pp, &patch)).await?;
                let status = json!({"status": {"numberOfSelectedClusters": PICK}});
                let patch = Patch::Merge(&status);
                retry(|| p_api.patch_status(&p, &pp, &patch)).await?;
                Ok::<(), BoxError>(())
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .try_collect::<()>()
        .await?;
    let created = p0.0.elapsed();
    let cpu1 = cpu(p0.2);
    let t1 = Instant::now();
    futures::stream::iter(0..m)
        .map(|i| {
            let pd_api = pd_api.clone();
            async move {
                let body = decisions(i + 1);
                let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
                let pd_name = format!("{}-decision-1", placement_name(i));
                retry(|| pd_api.patch_status(&pd_name, &pp, &patch)).await?;
                Ok::<(), BoxError>(())
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .try_collect::<()>()
        .await?;
    let changed = t1.elapsed();
    let cpu2 = cpu(p0.2);
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let mut s = String::new();
    let _ = writeln!(s, "### Floor: the writes with no scheduling\n");
    let _ = writeln!(
        s,
        "No controller; the harness writes what a controller writes, {} at a time, for {m} placements.\n",
        args.concurrency
    );
    let _ = writeln!(
        s,
        "| writes | count | wall | writes/s | apiserver + etcd CPU per write |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    let _ = writeln!(
        s,
        "| new placement: decision create, its status, placement status | {} | {} | {} | {:.2} ms |",
        3 * m,
        secs(created),
        num(rate(3 * m, created)),
        (cpu1 - cpu0).as_secs_f64() * 1000.0 / (3 * m) as f64
    );
    let _ = writeln!(
        s,
        "| decision change: decision status | {m} | {} | {} | {:.2} ms |",
        secs(changed),
        num(rate(m, changed)),
        (cpu2 - cpu1).as_secs_f64() * 1000.0 / m as f64
    );
    eprintln!("{s}");
    Ok(s)
}
