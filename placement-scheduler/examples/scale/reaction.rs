//! Scenario: reaction. Latency from a score update, and from a taint, to the moved
//! PlacementDecision, as a watch sees it; optionally with a hostile Placement being scheduled.

use super::*;

/// The PlacementDecisions of one namespace as a watch shows them, with the client-side time at
/// which each placement's set of clusters last changed.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) pds: HashMap<String, (String, Vec<String>)>,
    pub(crate) changed: HashMap<String, Instant>,
}

impl Seen {
    pub(crate) fn clusters_of(&self, placement: &str) -> BTreeSet<&str> {
        self.pds
            .values()
            .filter(|(p, _)| p == placement)
            .flat_map(|(_, cs)| cs.iter().map(String::as_str))
            .collect()
    }

    pub(crate) fn apply(&mut self, d: &PlacementDecision, deleted: bool, at: Instant) {
        let name = d.metadata.name.clone().unwrap_or_default();
        let Some(placement) = d
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PLACEMENT_LABEL))
            .cloned()
        else {
            return;
        };
        let before = self
            .clusters_of(&placement)
            .into_iter()
            .map(str::to_owned)
            .collect::<BTreeSet<_>>();
        if deleted {
            self.pds.remove(&name);
        } else {
            let clusters = d
                .status
                .as_ref()
                .map(|s| s.decisions.iter().map(|c| c.cluster_name.clone()).collect())
                .unwrap_or_default();
            self.pds.insert(name, (placement.clone(), clusters));
        }
        let after = self
            .clusters_of(&placement)
            .into_iter()
            .map(str::to_owned)
            .collect::<BTreeSet<_>>();
        if before != after {
            self.changed.insert(placement, at);
        }
    }
}

pub(crate) struct DecisionWatch {
    pub(crate) seen: Arc<Mutex<Seen>>,
    pub(crate) rx: tokio::sync::watch::Receiver<u64>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for DecisionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DecisionWatch {
    pub(crate) fn start(client: &Client, ns: &str) -> DecisionWatch {
        let api: Api<PlacementDecision> = Api::namespaced(client.clone(), ns);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                let mut n = 0u64;
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
                    seen.lock().apply(&d, deleted, at);
                    n += 1;
                    let _ = tx.send(n);
                }
            }
        });
        DecisionWatch { seen, rx, task }
    }

    /// Waits until each of the placements `p-00000`... `p-<n-1>` has decisions exactly `want`;
    /// returns the latest time the watch saw one of them get there, or `floor` if later (None:
    /// not all by `deadline`).
    pub(crate) async fn wait_all(
        &mut self,
        n: usize,
        want: &BTreeSet<String>,
        deadline: Instant,
        floor: Instant,
    ) -> Option<Instant> {
        let mut last = floor;
        for i in 0..n {
            last = last.max(self.wait_for(&placement_name(i), want, deadline).await?);
        }
        Some(last)
    }

    /// Waits until the placement's decisions are exactly `want`; returns when the watch saw
    /// that (None: not by `deadline`).
    pub(crate) async fn wait_for(
        &mut self,
        placement: &str,
        want: &BTreeSet<String>,
        deadline: Instant,
    ) -> Option<Instant> {
        loop {
            {
                let s = self.seen.lock();
                let have = s.clusters_of(placement);
                if have.len() == want.len() && want.iter().all(|w| have.contains(w.as_str())) {
                    return s.changed.get(placement).copied();
                }
            }
            match tokio::time::timeout_at(deadline.into(), self.rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Latencies {
    /// Change request sent -> watch shows the moved decision.
    pub(crate) samples: Vec<Duration>,
    /// How long the change's own API call took.
    pub(crate) write: Vec<Duration>,
    pub(crate) timeouts: usize,
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Latencies {
    pub(crate) fn row(&self, what: &str) -> String {
        let mut v = self.samples.clone();
        v.sort();
        let mut w = self.write.clone();
        w.sort();
        let mean = if v.is_empty() {
            Duration::ZERO
        } else {
            v.iter().sum::<Duration>() / v.len() as u32
        };
        format!(
            "| {what} | {} | {} | {} | {} | {} | {} | {} | {} |",
            v.len(),
            ms(percentile(&v, 50.0)),
            ms(percentile(&v, 99.0)),
            ms(v.last().copied().unwrap_or_default()),
            ms(mean),
            ms(v.first().copied().unwrap_or_default()),
            ms(percentile(&w, 50.0)),
            self.timeouts,
        )
    }
}

pub(crate) struct ReactionResult {
    pub(crate) clusters: usize,
    pub(crate) placements: usize,
    pub(crate) group: usize,
    pub(crate) control_plane_start: Duration,
    pub(crate) fleet_setup: Duration,
    pub(crate) initial: Option<Duration>,
    pub(crate) score: Latencies,
    pub(crate) taint: Latencies,
    /// The score updates again with the hostile Placement being scheduled (`--hostile`).
    pub(crate) hostile: Option<Latencies>,
    pub(crate) changes: Window,
    pub(crate) peak_rss: u64,
    pub(crate) debounce: String,
    pub(crate) total: Duration,
}

pub(crate) async fn reaction(
    env: &Env<'_>,
    kind: Kind,
    clusters: usize,
    placements: usize,
) -> Result<ReactionResult> {
    let args = env.args;
    let run_started = Instant::now();
    if placements == 0 || clusters / placements < 2 {
        return Err(format!("reaction needs at least 2 clusters per placement ({clusters} clusters, {placements} placements)").into());
    }
    let group = clusters / placements;
    if group > 80 {
        return Err(
            "reaction: at most 80 clusters per placement (scores start at 10 + index)".into(),
        );
    }
    let per_group_changes = args.changes.div_ceil(placements);
    if per_group_changes >= group {
        return Err(format!("reaction: {} changes over {placements} placements would taint every cluster of a group; use more clusters or fewer changes", args.changes).into());
    }
    let name = format!("reaction-{}-{clusters}x{placements}", kind.name());
    let hub = Hub::start(env, &name).await?;
    eprintln!(
        "[{name}] control plane up in {:.1?}; {clusters} clusters in {placements} groups of {group}",
        hub.started_in
    );

    // Group g holds clusters g*group .. g*group+group-1; member j scores 10 + j, so the last
    // member is each placement's first choice.
    let t = Instant::now();
    hub.create_fleet(
        clusters,
        args.concurrency,
        |i| {
            let mut l = BTreeMap::new();
            if i / group < placements {
                l.insert(GROUP_LABEL.to_owned(), format!("g-{:05}", i / group));
            }
            l
        },
        |i| 10 + (i % group) as i64,
    )
    .await?;
    let fleet_setup = t.elapsed();
    let valid_until = score_valid_until();

    let ctl = Controller::start(env, kind, &hub).await?;
    let mut watch = DecisionWatch::start(&hub.client, &hub.ns);
    let mut scores: Vec<Vec<i64>> = (0..placements)
        .map(|_| (0..group).map(|j| 10 + j as i64).collect())
        .collect();
    let mut tainted: Vec<Vec<bool>> = vec![vec![false; group]; placements];
    let best = |scores: &[i64], tainted: &[bool]| -> Option<usize> {
        // Highest score, then the lower name (lower index).
        (0..scores.len())
            .filter(|j| !tainted[*j])
            .max_by(|a, b| scores[*a].cmp(&scores[*b]).then(b.cmp(a)))
    };
    let member = |g: usize, j: usize| cluster_name(g * group + j);
    let want_one = |c: String| BTreeSet::from([c]);

    let t0 = Instant::now();
    hub.create_placements(placements, args.concurrency, |g| {
        json!({
            "numberOfClusters": 1,
            "predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {GROUP_LABEL: format!("g-{g:05}")}}}}],
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
            ]},
        })
    })
    .await?;
    let mut initial = Some(Duration::ZERO);
    for g in 0..placements {
        let want = want_one(member(g, group - 1));
        match watch
            .wait_for(&placement_name(g), &want, Instant::now() + args.timeout)
            .await
        {
            Some(at) => initial = initial.map(|i| i.max(at.saturating_duration_since(t0))),
            None => {
                initial = None;
                break;
            }
        }
    }
    let Some(initial_d) = initial else {
        return Err(format!(
            "[{name}] the placements were not all decided within {:?}",
            args.timeout
        )
        .into());
    };
    eprintln!(
        "[{name}] {placements} placements decided {initial_d:.1?} after the first was created; {} score updates follow",
        args.changes
    );
    // Let the initial writes (status, events) finish before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p0 = Point::take(&hub, &ctl).await?;

    let rounds = ScoreRounds {
        hub: &hub,
        ctl: &ctl,
        args,
        valid_until: &valid_until,
        group,
    };
    let score_lat = rounds
        .measure(&mut watch, &name, "", &mut scores, &tainted)
        .await?;

    let clusters_api: Api<ManagedCluster> = Api::all(hub.client.clone());
    let mut taint_lat = Latencies::default();
    for k in 0..args.changes {
        ctl.check_alive()?;
        let g = k % placements;
        let current = best(&scores[g], &tainted[g]).ok_or("no candidate left")?;
        tainted[g][current] = true;
        let next = best(&scores[g], &tainted[g]).ok_or("no candidate left after the taint")?;
        let cluster = member(g, current);
        let expected = member(g, next);
        let taints: Vec<Value> = vec![
            json!({"key": TAINT_KEY, "effect": "NoSelect", "timeAdded": rfc3339(jiff::Timestamp::now())}),
        ];
        let body = json!({"spec": {"taints": taints}});
        let sent = Instant::now();
        let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
        retry(|| clusters_api.patch(&cluster, &pp, &patch)).await?;
        hub.count("PATCH", "managedclusters", 1.0);
        taint_lat.write.push(sent.elapsed());
        match watch
            .wait_for(
                &placement_name(g),
                &want_one(expected.clone()),
                sent + args.change_timeout,
            )
            .await
        {
            Some(at) => taint_lat.samples.push(at.saturating_duration_since(sent)),
            None => {
                taint_lat.timeouts += 1;
                eprintln!(
                    "[{name}] taint {k}: {} did not move from {cluster} to {expected} within {:?}",
                    placement_name(g),
                    args.change_timeout
                );
            }
        }
        if (k + 1) % 25 == 0 {
            eprintln!("[{name}] {} taints measured", k + 1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let p1 = Point::take(&hub, &ctl).await?;
    let changes = Window::between(&p0, &p1);
    let peak_rss = procfs::status_bytes(ctl.pid, "VmHWM");

    // Last, so that the unloaded rows above are not disturbed by a pass still running.
    let hostile = if args.hostile {
        let busy = HostilePlacement::start(&hub).await?;
        eprintln!(
            "[{name}] hostile placement created; {} score updates follow while it is scheduled",
            args.changes
        );
        let lat = rounds
            .measure(&mut watch, &name, " (hostile)", &mut scores, &tainted)
            .await?;
        eprintln!(
            "[{name}] the hostile placement was re-triggered {} times",
            busy.stop().await
        );
        Some(lat)
    } else {
        None
    };
    drop(watch);
    drop(ctl);
    let control_plane_start = hub.started_in;
    drop(hub);
    Ok(ReactionResult {
        clusters,
        placements,
        group,
        control_plane_start,
        fleet_setup,
        initial,
        score: score_lat,
        taint: taint_lat,
        hostile,
        changes,
        peak_rss,
        debounce: if args.event_debounce.is_empty() {
            "the controller's default".to_owned()
        } else {
            args.event_debounce.clone()
        },
        total: run_started.elapsed(),
    })
}

impl ReactionResult {
    pub(crate) fn section(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "### Reaction: {} clusters × {} placements\n",
            num(self.clusters as f64),
            num(self.placements as f64)
        );
        let _ = writeln!(
            s,
            "Each Placement selects its own {} clusters by label (numberOfClusters 1, Exact, AddOn demo/demo weight 1). One change at a time: a score update that makes another cluster of the group the best, or a NoSelect taint on the chosen cluster. Latency: from sending the change (client clock) until a watch on the PlacementDecisions shows the placement's decision moved. The controller's --event-debounce is {}.\n",
            self.group, self.debounce
        );
        let _ = writeln!(
            s,
            "| change | n | p50 | p99 | max | mean | min | the change's own API call, p50 | timeouts |"
        );
        let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        let _ = writeln!(s, "{}", self.score.row("AddOnPlacementScore update"));
        let _ = writeln!(s, "{}", self.taint.row("NoSelect taint"));
        if let Some(h) = &self.hostile {
            let _ = writeln!(
                s,
                "{}",
                h.row("AddOnPlacementScore update, hostile Placement being scheduled")
            );
        }
        let _ = writeln!(s);
        if let Some(h) = &self.hostile {
            let p99 = |l: &Latencies| {
                let mut v = l.samples.clone();
                v.sort();
                percentile(&v, 99.0)
            };
            let (base, loaded) = (p99(&self.score), p99(h));
            let _ = writeln!(
                s,
                "Hostile Placement: one more Placement whose celSelector spends the whole per-expression CEL budget on every one of the {} clusters, re-triggered every {} so that a pass of it is always running or queued. Score-update p99 {} unloaded, {} with it ({:.2}×; the target is at most 2×).\n",
                num(self.clusters as f64),
                ms(HOSTILE_RETRIGGER),
                ms(base),
                ms(loaded),
                loaded.as_secs_f64() / base.as_secs_f64().max(1e-9),
            );
        }
        let c = &self.changes;
        let _ = writeln!(
            s,
            "During the {} changes ({}): other processes on the machine used {} CPU ({:.0}% of the machine); controller CPU {} ({:.1}% of wall), {} scheduling passes, {} writes ({} failed), {} requests in all; controller peak RSS (VmHWM) {}. Setup: control plane {}, fleet {}, the {} placements decided {} after the first was created; whole run {}.\n",
            self.score.samples.len()
                + self.taint.samples.len()
                + self.score.timeouts
                + self.taint.timeouts,
            secs(c.wall),
            secs(c.other_cpu),
            pct(c.other_cpu, c.wall * cpus()),
            secs(c.controller_cpu),
            c.cpu_share(),
            num(c.passes),
            num(c.total_writes()),
            num(c.write_failures),
            num(c.requests),
            mb(self.peak_rss),
            secs(self.control_plane_start),
            secs(self.fleet_setup),
            self.placements,
            self.initial.map_or_else(|| "—".into(), secs),
            secs(self.total),
        );
        s
    }
}

/// What one measured change came to.
pub(crate) enum Measured {
    /// Send -> seen by the watch, and the change's own API call.
    Moved(Duration, Duration),
    /// Not seen within `--change-timeout`; what was expected.
    TimedOut(Duration, String),
}

impl Measured {
    pub(crate) fn record(self, into: &mut Latencies, what: &str) {
        match self {
            Measured::Moved(lat, write) => {
                into.samples.push(lat);
                into.write.push(write);
            }
            Measured::TimedOut(write, expected) => {
                into.write.push(write);
                into.timeouts += 1;
                eprintln!("{what}: {expected}");
            }
        }
    }
}

/// One score update in group `g` that makes another cluster of the group its best, measured
/// until the watch shows the placement's decision moved there.
/// `--changes` score updates, one placement after the other, each measured.
struct ScoreRounds<'a> {
    hub: &'a Hub,
    ctl: &'a Controller,
    args: &'a Args,
    valid_until: &'a str,
    group: usize,
}

impl ScoreRounds<'_> {
    /// `scores` and `tainted` hold each placement's group (`suffix` marks the log lines).
    async fn measure(
        &self,
        watch: &mut DecisionWatch,
        name: &str,
        suffix: &str,
        scores: &mut [Vec<i64>],
        tainted: &[Vec<bool>],
    ) -> Result<Latencies> {
        let mut lat = Latencies::default();
        for k in 0..self.args.changes {
            self.ctl.check_alive()?;
            let g = k % scores.len();
            self.update(watch, g, &mut scores[g], &tainted[g])
                .await?
                .record(&mut lat, &format!("[{name}] score update {k}{suffix}"));
            if (k + 1) % 25 == 0 {
                eprintln!("[{name}] {} score updates measured{suffix}", k + 1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(lat)
    }

    /// One score update for placement `g` (its group's `scores`, `tainted`): another cluster of
    /// the group made the best; measured until the watch shows the decision moved.
    async fn update(
        &self,
        watch: &mut DecisionWatch,
        g: usize,
        scores: &mut [i64],
        tainted: &[bool],
    ) -> Result<Measured> {
        let (hub, args, valid_until, group) = (self.hub, self.args, self.valid_until, self.group);
        let best = (0..group)
            .filter(|j| !tainted[*j])
            .max_by(|a, b| scores[*a].cmp(&scores[*b]).then(b.cmp(a)))
            .ok_or("no candidate left")?;
        let target = (1..group)
            .map(|d| (best + d) % group)
            .find(|j| !tainted[*j])
            .ok_or("no other candidate")?;
        let value = scores[best] + 1;
        if value > 100 {
            return Err("reaction: scores would exceed 100; use fewer changes".into());
        }
        scores[target] = value;
        let cluster = cluster_name(g * group + target);
        let body = json!({"status": {"scores": [{"name": "demo", "value": value}], "validUntil": valid_until}});
        let api = Api::<AddOnPlacementScore>::namespaced(hub.client.clone(), &cluster);
        let sent = Instant::now();
        let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
        retry(|| api.patch_status("demo", &pp, &patch)).await?;
        hub.count("PATCH", "addonplacementscores/status", 1.0);
        let write = sent.elapsed();
        let want = BTreeSet::from([cluster.clone()]);
        Ok(
            match watch
                .wait_for(&placement_name(g), &want, sent + args.change_timeout)
                .await
            {
                Some(at) => Measured::Moved(at.saturating_duration_since(sent), write),
                None => Measured::TimedOut(
                    write,
                    format!(
                        "{} did not move to {cluster} within {:?}",
                        placement_name(g),
                        args.change_timeout
                    ),
                ),
            },
        )
    }
}

/// How often the hostile placement is touched (an annotation) so that it is scheduled again.
pub(crate) const HOSTILE_RETRIGGER: Duration = Duration::from_millis(500);

/// A `celSelector` expression that spends the whole per-expression CEL budget on every
/// cluster: nested comprehensions of 10^7 iterations, stopped by the budget (false).
pub(crate) fn hostile_cel_expression() -> String {
    let mut e = "true".to_owned();
    for v in ["a", "b", "c", "d", "e", "f", "g"] {
        e = format!("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].all({v}, {e})");
    }
    e
}

/// One hostile Placement over every cluster of the hub, kept busy: an annotation bump every
/// [`HOSTILE_RETRIGGER`] reschedules it (a pass already running finishes first; the queue
/// holds at most one more).
pub(crate) struct HostilePlacement {
    pub(crate) stop: tokio::sync::oneshot::Sender<()>,
    pub(crate) task: tokio::task::JoinHandle<u64>,
}

impl HostilePlacement {
    pub(crate) const NAME: &'static str = "hostile";

    pub(crate) async fn start(hub: &Hub) -> Result<HostilePlacement> {
        let api: Api<Placement> = Api::namespaced(hub.client.clone(), &hub.ns);
        let p: Placement = serde_json::from_value(json!({
            "metadata": {"name": Self::NAME, "namespace": hub.ns},
            "spec": {"predicates": [{"requiredClusterSelector": {"celSelector": {
                "celExpressions": [hostile_cel_expression()]}}}]},
        }))?;
        let post = PostParams::default();
        retry(|| api.create(&post, &p)).await?;
        hub.count("POST", "placements", 1.0);
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = &mut stopped => return n,
                    _ = tokio::time::sleep(HOSTILE_RETRIGGER) => {}
                }
                let body = json!({"metadata": {"annotations": {"scale.ocm-placement.io/poke": n.to_string()}}});
                let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
                if let Err(e) = api.patch(Self::NAME, &pp, &patch).await {
                    eprintln!("hostile placement: poke failed: {e}");
                }
                n += 1;
            }
        });
        Ok(HostilePlacement { stop, task })
    }

    /// Stops re-triggering; returns how many times it did.
    pub(crate) async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}
