//! Scenario: throughput. N clusters, M placements in upstream's benchmark shape: time until all
//! are decided, until settled, then idle.

use super::*;

pub(crate) struct ThroughputResult {
    pub(crate) kind: Kind,
    /// `--idle` after settled: nothing changed.
    pub(crate) idle: Option<Window>,
    pub(crate) placements: usize,
    pub(crate) clusters: usize,
    pub(crate) per_placement: usize,
    pub(crate) control_plane_start: Duration,
    pub(crate) fleet_setup: Duration,
    pub(crate) controller_ready: Duration,
    pub(crate) create: Duration,
    pub(crate) polls: u64,
    pub(crate) poll_interval: Duration,
    /// From the first Placement created until all are decided (None: timed out).
    pub(crate) decided: Option<Duration>,
    pub(crate) decided_count: usize,
    pub(crate) to_decided: Window,
    /// Until the controller made no write for `settle` (None: still writing at the limit).
    pub(crate) settled: Option<Duration>,
    pub(crate) to_settled: Window,
    pub(crate) peak_rss: u64,
    /// Decisions per cluster (min, max) when all were decided, and at the end.
    pub(crate) load_at_decided: (usize, usize),
    pub(crate) load_at_end: (usize, usize),
    pub(crate) concurrency: usize,
    pub(crate) total: Duration,
}

pub(crate) async fn throughput(
    env: &Env<'_>,
    kind: Kind,
    placements: usize,
    clusters: usize,
) -> Result<ThroughputResult> {
    let args = env.args;
    let run_started = Instant::now();
    let name = format!("throughput-{}-{placements}x{clusters}", kind.name());
    let hub = Hub::start(env, &name).await?;
    eprintln!(
        "[{name}] control plane up in {:.1?}; creating {clusters} clusters with AddOnPlacementScores",
        hub.started_in
    );
    let t = Instant::now();
    hub.create_fleet(clusters, args.concurrency, |_| BTreeMap::new(), |_| 80)
        .await?;
    let fleet_setup = t.elapsed();

    let t = Instant::now();
    let ctl = Controller::start(env, kind, &hub).await?;
    let controller_ready = t.elapsed();
    eprintln!(
        "[{name}] fleet in {fleet_setup:.1?}, controller (pid {}) ready in {controller_ready:.1?}; creating {placements} placements",
        ctl.pid
    );

    let per_placement = clusters.min(10);
    let spec = json!({
        "numberOfClusters": 10,
        "prioritizerPolicy": {"mode": "Exact", "configurations": [
            {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}, "weight": 1},
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Balance"}, "weight": 1},
        ]},
    });
    let p0 = Point::take(&hub, &ctl).await?;
    let t0 = Instant::now();
    hub.create_placements(placements, args.concurrency, |_| spec.clone())
        .await?;
    let create = t0.elapsed();
    eprintln!(
        "[{name}] {placements} placements created in {create:.1?}; waiting for their decisions"
    );

    let poll_interval = args.poll_interval.unwrap_or(if placements >= 5000 {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(1)
    });
    let pd_api: Api<PlacementDecision> = Api::namespaced(hub.client.clone(), &hub.ns);
    let mut polls = 0u64;
    let mut last_progress = Instant::now();
    let mut load_at_decided: (usize, usize);
    let (decided, decided_count) = loop {
        ctl.check_alive()?;
        // From the watch cache (resourceVersion=0): the cheapest complete list there is.
        let lp = ListParams::default().match_any();
        let list = retry(|| pd_api.list(&lp)).await?;
        polls += 1;
        hub.count("LIST", "placementdecisions", 1.0);
        let seen_at = t0.elapsed();
        let (per, spread) = decisions_load(&list.items, clusters);
        load_at_decided = spread;
        let complete = per.values().filter(|n| **n == per_placement).count();
        if complete >= placements {
            break (Some(seen_at), complete);
        }
        if seen_at > args.timeout {
            eprintln!("[{name}] timed out after {seen_at:.0?}: {complete}/{placements} decided");
            break (None, complete);
        }
        if last_progress.elapsed() >= Duration::from_secs(15) {
            last_progress = Instant::now();
            eprintln!(
                "[{name}] {seen_at:.0?}: {complete}/{placements} placements decided, {} PlacementDecisions, controller CPU {:.1?}",
                list.items.len(),
                procfs::cpu_time(ctl.pid).saturating_sub(p0.controller_cpu)
            );
        }
        tokio::time::sleep(poll_interval).await;
    };
    let p1 = Point::take(&hub, &ctl).await?;
    let to_decided = Window::between(&p0, &p1);
    if let Some(d) = decided {
        eprintln!(
            "[{name}] all {placements} decided {d:.1?} after the first Placement; controller CPU {:.1?} ({:.0}% of wall); waiting until it stops writing",
            to_decided.controller_cpu,
            to_decided.cpu_share()
        );
    }

    // Settled: no controller write for `settle`: the decisions (and statuses, events) stay as
    // they are. Scheduling passes that write nothing do not count (a Balance wave can
    // reschedule every Balance placement without changing anything); their CPU is in the
    // window all the same. (Not the queue depth either: it may count requeue timers.) Writes
    // are the apiserver's count (the harness writes nothing meanwhile), so that upstream's
    // controller, which does not count its own, settles the same way.
    let activity = |api: &[Sample], m: &[Sample]| {
        (
            api_writes(&apiserver_requests(api)),
            scrape::sum(m, "placement_scheduling_duration_seconds_count", |_| true)
                + scrape::sum(m, upstream::PASSES, |_| true),
        )
    };
    let mut last = activity(&p1.apiserver, &p1.controller);
    let mut last_change = p1.at;
    let mut reported = (p1.at, controller_writes(&p1.controller), last.1);
    let settle_deadline = Instant::now() + args.settle_timeout;
    let settled = loop {
        ctl.check_alive()?;
        let m = ctl.metrics().await?;
        let api = hub.apiserver_metrics().await?;
        let now = Instant::now();
        let current = activity(&api, &m);
        if now - reported.0 >= Duration::from_secs(15) {
            let writes = controller_writes(&m);
            let new: Vec<String> = scrape::delta(&writes, &reported.1)
                .iter()
                .map(|((verb, res), n)| format!("{verb} {res} {n}"))
                .collect();
            if !new.is_empty() || current.1 != reported.2 {
                eprintln!(
                    "[{name}] {:.0?}: in the last {:.0?}: {} passes, writes: {}; controller CPU {:.1?}",
                    now - t0,
                    now - reported.0,
                    current.1 - reported.2,
                    if new.is_empty() {
                        "none".to_owned()
                    } else {
                        new.join(", ")
                    },
                    procfs::cpu_time(ctl.pid).saturating_sub(p0.controller_cpu)
                );
            }
            reported = (now, writes, current.1);
        }
        if current.0 != last.0 {
            last = current;
            last_change = now;
        } else if now - last_change >= args.settle {
            break Some(last_change - t0);
        }
        if now > settle_deadline {
            eprintln!(
                "[{name}] still writing {:.0?} after the first Placement",
                now - t0
            );
            break None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let p2 = Point::take(&hub, &ctl).await?;
    let to_settled = Window::between(&p0, &p2);
    let idle = if args.idle.is_zero() {
        None
    } else {
        eprintln!("[{name}] settled; {:.0?} idle", args.idle);
        tokio::time::sleep(args.idle).await;
        ctl.check_alive()?;
        Some(Window::between(&p2, &Point::take(&hub, &ctl).await?))
    };
    let lp = ListParams::default().match_any();
    let list = retry(|| pd_api.list(&lp)).await?;
    hub.count("LIST", "placementdecisions", 1.0);
    let load_at_end = decisions_load(&list.items, clusters).1;
    let peak_rss = procfs::status_bytes(ctl.pid, "VmHWM");
    let hub_started_in = hub.started_in;
    drop(ctl);
    drop(hub);
    Ok(ThroughputResult {
        kind,
        idle,
        placements,
        clusters,
        per_placement,
        control_plane_start: hub_started_in,
        fleet_setup,
        controller_ready,
        create,
        polls,
        poll_interval,
        decided,
        decided_count,
        to_decided,
        settled,
        to_settled,
        peak_rss,
        load_at_decided,
        load_at_end,
        concurrency: args.concurrency,
        total: run_started.elapsed(),
    })
}

/// Clusters decided per placement, and (min, max) decisions per cluster over `clusters`
/// clusters (those named in no decision count 0).
pub(crate) fn decisions_load(
    items: &[PlacementDecision],
    clusters: usize,
) -> (HashMap<String, usize>, (usize, usize)) {
    let mut per: HashMap<String, usize> = HashMap::new();
    let mut load: HashMap<&str, usize> = HashMap::new();
    for d in items {
        let entries = d.status.as_ref().map_or(&[][..], |s| &s.decisions[..]);
        if let Some(p) = d
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PLACEMENT_LABEL))
        {
            *per.entry(p.clone()).or_insert(0) += entries.len();
        }
        for e in entries {
            *load.entry(e.cluster_name.as_str()).or_insert(0) += 1;
        }
    }
    let max = load.values().copied().max().unwrap_or(0);
    let min = if load.len() < clusters {
        0
    } else {
        load.values().copied().min().unwrap_or(0)
    };
    (per, (min, max))
}

impl ThroughputResult {
    pub(crate) fn size(&self) -> String {
        format!(
            "{} × {} ({})",
            num(self.placements as f64),
            num(self.clusters as f64),
            self.kind.name()
        )
    }

    /// Apiserver writes per Placement from the first Placement until settled, by verb.
    pub(crate) fn writes_per_placement(&self) -> (f64, String) {
        let w = &self.to_settled.apiserver;
        let n = self.placements.max(1) as f64;
        let by_verb: Vec<String> = w
            .iter()
            .filter(|((verb, _), _)| matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
            .map(|((verb, res), v)| format!("{verb} {res} {:.2}", v / n))
            .collect();
        (api_writes(w) / n, by_verb.join(", "))
    }

    /// This run's figures for `--json` (see data.rs).
    pub(crate) fn json(&self) -> Value {
        use crate::data::{mb_value, r2, s};
        let w = &self.to_decided;
        json!({
            "controller": self.kind.name(),
            "placements": self.placements,
            "clusters": self.clusters,
            "decided_s": self.decided.map(s),
            "decided_count": self.decided_count,
            "settled_s": self.settled.map(s),
            "controller_cpu_s": s(w.controller_cpu),
            "apiserver_cpu_s": s(w.apiserver_cpu),
            "other_cpu_s": s(w.other_cpu),
            "peak_rss_mb": mb_value(self.peak_rss),
            "writes_per_placement": r2(self.writes_per_placement().0),
            "idle_s": self.idle.as_ref().map(|i| s(i.wall)),
            "idle_cpu_s": self.idle.as_ref().map(|i| s(i.controller_cpu)),
            "idle_passes": self.idle.as_ref().map(|i| i.passes),
        })
    }

    pub(crate) fn summary_row(&self) -> String {
        let w = &self.to_decided;
        format!(
            "| {} | {} | {} | {} | {} ({:.0}%) | {} | {} / {} | {} | {} | {:.0}% |",
            self.size(),
            secs(self.create),
            self.decided.map_or_else(
                || format!("timeout ({}/{})", self.decided_count, self.placements),
                secs
            ),
            self.settled.map_or_else(
                || format!("still writing at {}", secs(self.to_settled.wall)),
                secs
            ),
            secs(w.controller_cpu),
            w.cpu_share(),
            mb(self.peak_rss),
            secs(w.apiserver_cpu),
            secs(w.etcd_cpu),
            num(w.total_writes()),
            num(w.requests),
            pct(w.other_cpu, w.wall * cpus()),
        )
    }

    pub(crate) fn section(&self) -> String {
        let mut s = String::new();
        let d = &self.to_decided;
        let st = &self.to_settled;
        let _ = writeln!(
            s,
            "### Throughput: {} placements × {} clusters, {} controller\n",
            num(self.placements as f64),
            num(self.clusters as f64),
            self.kind.name()
        );
        let _ = writeln!(
            s,
            "Each Placement: numberOfClusters 10, Exact, AddOn demo/demo + ResourceAllocatableCPU + Balance (weight 1 each); every cluster scores `demo` = 80. Done = every Placement's decisions hold {} clusters.\n",
            self.per_placement
        );
        let _ = writeln!(s, "| measure | to all decided | to settled |");
        let _ = writeln!(s, "| --- | --- | --- |");
        let _ = writeln!(
            s,
            "| wall time from the first Placement created | {} | {} |",
            self.decided.map_or_else(
                || format!(
                    "timeout ({}/{} decided)",
                    self.decided_count, self.placements
                ),
                secs
            ),
            self.settled
                .map_or_else(|| format!("still writing after {}", secs(st.wall)), secs),
        );
        let _ = writeln!(
            s,
            "| controller CPU | {} ({:.1}% of wall) | {} ({:.1}% of wall) |",
            secs(d.controller_cpu),
            d.cpu_share(),
            secs(st.controller_cpu),
            st.cpu_share()
        );
        let _ = writeln!(
            s,
            "| kube-apiserver CPU | {} ({:.0}%) | {} ({:.0}%) |",
            secs(d.apiserver_cpu),
            pct(d.apiserver_cpu, d.wall),
            secs(st.apiserver_cpu),
            pct(st.apiserver_cpu, st.wall)
        );
        let _ = writeln!(
            s,
            "| etcd CPU | {} ({:.0}%) | {} ({:.0}%) |",
            secs(d.etcd_cpu),
            pct(d.etcd_cpu, d.wall),
            secs(st.etcd_cpu),
            pct(st.etcd_cpu, st.wall)
        );
        let _ = writeln!(
            s,
            "| harness CPU (creates, polls, metrics) | {} | {} |",
            secs(d.harness_cpu),
            secs(st.harness_cpu)
        );
        let _ = writeln!(
            s,
            "| CPU of every other process on the machine (contention; ideally ~0) | {} ({:.0}% of the machine) | {} ({:.0}% of the machine) |",
            secs(d.other_cpu),
            pct(d.other_cpu, d.wall * cpus()),
            secs(st.other_cpu),
            pct(st.other_cpu, st.wall * cpus()),
        );
        let _ = writeln!(
            s,
            "| scheduling passes (core time) | {} ({}) | {} ({}) |",
            num(d.passes),
            secs(Duration::from_secs_f64(d.scheduling_seconds.max(0.0))),
            num(st.passes),
            secs(Duration::from_secs_f64(st.scheduling_seconds.max(0.0)))
        );
        let _ = writeln!(
            s,
            "| controller writes (failed) | {} ({}) | {} ({}) |",
            num(d.total_writes()),
            num(d.write_failures),
            num(st.total_writes()),
            num(st.write_failures)
        );
        let _ = writeln!(
            s,
            "| controller requests, all (client rate-limiter permits) | {} | {} |",
            num(d.requests),
            num(st.requests)
        );
        let _ = writeln!(
            s,
            "| controller write rate | {:.0}/s | {:.0}/s |",
            d.total_writes() / d.wall.as_secs_f64().max(1e-9),
            st.total_writes() / st.wall.as_secs_f64().max(1e-9)
        );
        let _ = writeln!(
            s,
            "| controller peak RSS (VmHWM, whole run) | {} | |",
            mb(self.peak_rss)
        );
        let _ = writeln!(
            s,
            "| decisions per cluster, min–max (Balance) | {}–{} | {}–{} (at the end) |",
            self.load_at_decided.0, self.load_at_decided.1, self.load_at_end.0, self.load_at_end.1
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "API requests from the first Placement until settled, by verb. *controller* is the controller's own count of its writes (one per call, retries included in the call); *apiserver* is `apiserver_request_total` for the OCM and events APIs with the harness's own requests ({} Placement creates, {} PlacementDecision lists) subtracted: the controller's requests as the apiserver saw them. The controller counts every event it publishes as a create; kube's event recorder PATCHes the existing event instead (an event series) when the same event repeats within 6 minutes.\n",
            num(st
                .harness
                .get(&("POST".into(), "placements".into()))
                .copied()
                .unwrap_or(0.0)),
            num(st
                .harness
                .get(&("LIST".into(), "placementdecisions".into()))
                .copied()
                .unwrap_or(0.0))
        );
        let _ = writeln!(s, "| verb | resource | controller | apiserver |");
        let _ = writeln!(s, "| --- | --- | --- | --- |");
        let keys: BTreeSet<&(String, String)> =
            st.writes.keys().chain(st.apiserver.keys()).collect();
        for k in keys {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                k.0,
                k.1,
                st.writes.get(k).map_or_else(|| "–".to_owned(), |v| num(*v)),
                st.apiserver
                    .get(k)
                    .map_or_else(|| "–".to_owned(), |v| num(*v)),
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Setup: control plane {}, {} clusters with namespaces and scores {}, controller ready (all watches listed) {}; {} Placements created in {} ({:.0}/s, {} at a time); decisions listed every {} ({} lists); whole run {}.\n",
            secs(self.control_plane_start),
            num(self.clusters as f64),
            secs(self.fleet_setup),
            secs(self.controller_ready),
            num(self.placements as f64),
            secs(self.create),
            self.placements as f64 / self.create.as_secs_f64().max(1e-9),
            self.concurrency,
            ms(self.poll_interval),
            self.polls,
            secs(self.total),
        );
        if let Some(w) = &self.idle {
            let _ = writeln!(
                s,
                "Idle, {} after settled with nothing changing: controller CPU {}, {} scheduling passes, {} apiserver writes{}.\n",
                secs(w.wall),
                secs(w.controller_cpu),
                num(w.passes),
                num(api_writes(&w.apiserver)),
                if w.apiserver.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({})",
                        w.apiserver
                            .iter()
                            .map(|((v, r), n)| format!("{v} {r} {}", num(*n)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            );
        }
        s
    }
}

/// The throughput table: one row per shape, ours / upstream side by side ("—" for one not run).
pub(crate) fn compare_throughput(results: &[ThroughputResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Throughput, ours / upstream\n\n| shape (placements × clusters) | wall ours / upstream | controller CPU ours / upstream | peak RSS ours / upstream | writes per Placement ours / upstream | CPU while idle ours / upstream | passes while idle ours / upstream |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut shapes: Vec<(usize, usize)> =
        results.iter().map(|r| (r.placements, r.clusters)).collect();
    shapes.dedup();
    let mut detail = String::new();
    for (p, c) in shapes {
        let of = |k: Kind| {
            results
                .iter()
                .find(|r| r.kind == k && r.placements == p && r.clusters == c)
        };
        let pair = |f: &dyn Fn(&ThroughputResult) -> String| {
            let one = |k| of(k).map_or_else(|| "—".to_owned(), f);
            format!("{} / {}", one(Kind::Ours), one(Kind::Upstream))
        };
        let _ = writeln!(
            s,
            "| {} × {} | {} | {} | {} | {} | {} | {} |",
            num(p as f64),
            num(c as f64),
            pair(&|r| r.decided.map_or_else(|| "timeout".to_owned(), secs)),
            pair(&|r| secs(r.to_decided.controller_cpu)),
            pair(&|r| mb(r.peak_rss)),
            pair(&|r| format!("{:.2}", r.writes_per_placement().0)),
            pair(&|r| r.idle.as_ref().map_or_else(
                || "—".to_owned(),
                |w| format!("{} in {}", secs(w.controller_cpu), secs(w.wall))
            )),
            pair(&|r| r
                .idle
                .as_ref()
                .map_or_else(|| "—".to_owned(), |w| num(w.passes))),
        );
        for k in [Kind::Ours, Kind::Upstream] {
            if let Some(r) = of(k) {
                let _ = writeln!(
                    detail,
                    "- {} × {} {}: writes per Placement until settled, by verb: {}; settled {}",
                    num(p as f64),
                    num(c as f64),
                    k.name(),
                    r.writes_per_placement().1,
                    r.settled.map_or_else(|| "never".to_owned(), secs),
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nWall: first Placement created → every Placement has its decisions (harness's list poll); controller CPU over the same window; writes: the apiserver's `apiserver_request_total` (OCM and event APIs, the harness's own subtracted) from the first Placement until settled; idle: after settled, `--idle` with nothing changing (upstream's passes from its `scheduling_scheduling_duration_seconds` histogram).\n\n{detail}"
    );
    s
}
