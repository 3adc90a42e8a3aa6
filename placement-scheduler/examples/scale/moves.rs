//! Reaction shapes: N clusters with an AddOnPlacementScore each, M Placements
//! (numberOfClusters 1, Exact, one AddOn prioritizer) that all read the same scores.
//!
//! - Moves: one score write makes another cluster the best; latency from that write's response
//!   to the PlacementDecision watch event that shows the new cluster, for the last of the M
//!   placements to move; `--moves` of them, one at a time.
//! - Burst: `--burst-writes` score writes as fast as the harness can send them (every
//!   cluster's, round robin), the last state making one known cluster the best: passes per
//!   placement (the controller's histogram), decision writes per placement (the apiserver's
//!   count: upstream counts nothing else we can read), and the time from the first write until
//!   every decision shows the final best.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::api::{Patch, PatchParams};
use ocm_api::AddOnPlacementScore;
use serde_json::json;

use crate::{
    Controller, DecisionWatch, Env, Hub, Kind, Point, Result, Window, cluster_name, mb, ms, num,
    percentile, placement_name, retry, score_valid_until, secs,
};

/// Scores at setup: cluster 0 is every placement's first choice.
const FIRST_BEST: i64 = 50;
const OTHERS: i64 = 10;
/// How long the apiserver must see no write for the burst to count as over.
const QUIET: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Moves,
    Burst,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Moves => "moves",
            Shape::Burst => "burst",
        }
    }
}

pub struct Outcome {
    kind: Kind,
    shape: Shape,
    clusters: usize,
    placements: usize,
    /// Moves: per move, write response -> the last placement's decision event.
    latencies: Vec<Duration>,
    timeouts: usize,
    /// Burst: first write sent -> every decision shows the final best; the burst's own span.
    final_after: Option<Duration>,
    burst_span: Duration,
    /// Moves: from before the first move until after the last; burst: until quiet.
    window: Window,
    peak_rss: u64,
}

pub async fn run(
    env: &Env<'_>,
    kind: Kind,
    shape: Shape,
    clusters: usize,
    placements: usize,
) -> Result<Outcome> {
    let args = env.args;
    if clusters < 2 || placements == 0 {
        return Err("moves/burst: at least 2 clusters and 1 placement".into());
    }
    if shape == Shape::Moves && FIRST_BEST + args.moves as i64 > 100 {
        return Err(format!(
            "moves: at most {} moves (scores top out at 100)",
            100 - FIRST_BEST
        )
        .into());
    }
    let name = format!("{}-{}-{clusters}x{placements}", shape.name(), kind.name());
    let hub = Hub::start(env, &name).await?;
    eprintln!(
        "[{name}] control plane up in {:.1?}; creating {clusters} clusters with scores",
        hub.started_in
    );
    hub.create_fleet(
        clusters,
        args.concurrency,
        |_| Default::default(),
        |i| if i == 0 { FIRST_BEST } else { OTHERS },
    )
    .await?;
    let valid_until = score_valid_until();
    let ctl = Controller::start(env, kind, &hub).await?;
    let mut watch = DecisionWatch::start(&hub.client, &hub.ns);
    hub.create_placements(placements, args.concurrency, |_| {
        json!({
            "numberOfClusters": 1,
            "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "demo", "scoreName": "demo"}}, "weight": 1},
            ]},
        })
    })
    .await?;
    let first = BTreeSet::from([cluster_name(0)]);
    let deadline = Instant::now() + args.timeout;
    for i in 0..placements {
        if watch
            .wait_for(&placement_name(i), &first, deadline)
            .await
            .is_none()
        {
            return Err(format!(
                "[{name}] {} was not decided within {:?}",
                placement_name(i),
                args.timeout
            )
            .into());
        }
    }
    eprintln!("[{name}] {placements} placements decided; waiting for the writes to stop");
    wait_quiet(&hub, QUIET, args.timeout).await?;
    let p0 = Point::take(&hub, &ctl).await?;
    let scores = |cluster: String| {
        let api = Api::<AddOnPlacementScore>::namespaced(hub.client.clone(), &cluster);
        (api, cluster)
    };

    let mut out = Outcome {
        kind,
        shape,
        clusters,
        placements,
        latencies: Vec::new(),
        timeouts: 0,
        final_after: None,
        burst_span: Duration::ZERO,
        window: Window::between(&p0, &p0),
        peak_rss: 0,
    };
    match shape {
        Shape::Moves => {
            for k in 0..args.moves {
                ctl.check_alive()?;
                let (api, cluster) = scores(cluster_name((k + 1) % clusters));
                let body = json!({"status": {"scores": [{"name": "demo", "value": FIRST_BEST + 1 + k as i64}], "validUntil": valid_until}});
                let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
                retry(|| api.patch_status("demo", &pp, &patch)).await?;
                let answered = Instant::now();
                hub.count("PATCH", "addonplacementscores/status", 1.0);
                let want = BTreeSet::from([cluster.clone()]);
                let deadline = answered + args.change_timeout;
                let last = watch.wait_all(placements, &want, deadline, answered).await;
                match last {
                    Some(at) => out.latencies.push(at.saturating_duration_since(answered)),
                    None => {
                        out.timeouts += 1;
                        eprintln!(
                            "[{name}] move {k}: not every placement moved to {cluster} within {:?}",
                            args.change_timeout
                        );
                    }
                }
            }
            // The last move's trailing writes (status, events) belong to the moves.
            wait_quiet(&hub, QUIET, args.timeout).await?;
        }
        Shape::Burst => {
            // Cluster `target` ends the best; the rest end between 20 and 79.
            let target = clusters / 2;
            let value = |i: usize| {
                if i == target {
                    90
                } else {
                    20 + ((i * 37) % 60) as i64
                }
            };
            let started = Instant::now();
            futures::stream::iter(0..args.burst_writes.max(1))
                .map(|w| {
                    // Round robin, the target written last so its final value lands last.
                    let i = (w + target + 1) % clusters;
                    let (api, _) = scores(cluster_name(i));
                    let body = json!({"status": {"scores": [{"name": "demo", "value": value(i)}], "validUntil": valid_until}});
                    async move {
                        let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
                        retry(|| api.patch_status("demo", &pp, &patch)).await
                    }
                })
                .buffer_unordered(64)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            out.burst_span = started.elapsed();
            hub.count(
                "PATCH",
                "addonplacementscores/status",
                args.burst_writes.max(1) as f64,
            );
            // The target's own write is the last of its round (w = burst_writes - 1 when the
            // count is a multiple of the clusters); write it once more to be sure it is last.
            let (api, target_name) = scores(cluster_name(target));
            let body = json!({"status": {"scores": [{"name": "demo", "value": value(target)}], "validUntil": valid_until}});
            let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
            retry(|| api.patch_status("demo", &pp, &patch)).await?;
            hub.count("PATCH", "addonplacementscores/status", 1.0);
            let want = BTreeSet::from([target_name]);
            let deadline = Instant::now() + args.timeout;
            let last = watch.wait_all(placements, &want, deadline, started).await;
            out.final_after = last.map(|at| at.saturating_duration_since(started));
            wait_quiet(&hub, QUIET, args.timeout).await?;
        }
    }
    let p1 = Point::take(&hub, &ctl).await?;
    out.window = Window::between(&p0, &p1);
    out.peak_rss = testenv::procfs::status_bytes(ctl.pid, "VmHWM");
    drop(watch);
    drop(ctl);
    drop(hub);
    Ok(out)
}

/// Waits until the apiserver has counted no write (OCM and event APIs) for `quiet`.
pub(crate) async fn wait_quiet(hub: &Hub, quiet: Duration, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let writes = async || -> Result<f64> {
        Ok(crate::measure::api_writes(
            &crate::measure::apiserver_requests(&hub.apiserver_metrics().await?),
        ))
    };
    let mut last = writes().await?;
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        if Instant::now() > deadline {
            return Err(format!("the controller kept writing for {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = writes().await?;
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Ok(())
}

impl Outcome {
    fn moves(&self) -> usize {
        (self.latencies.len() + self.timeouts).max(1)
    }

    fn shape_label(&self) -> String {
        let base = format!(
            "{} × {}",
            num(self.clusters as f64),
            num(self.placements as f64)
        );
        match (self.shape, self.placements) {
            (Shape::Burst, _) => format!("burst {base}"),
            (Shape::Moves, 1) => base,
            (Shape::Moves, m) => format!("{base}, last of the {m} placements"),
        }
    }

    /// "p50 / p99 ms" (moves) or the time until every decision is final (burst).
    fn latency(&self) -> String {
        match self.shape {
            Shape::Moves => {
                let mut v = self.latencies.clone();
                v.sort();
                let t = if self.timeouts > 0 {
                    format!(" ({} timed out)", self.timeouts)
                } else {
                    String::new()
                };
                format!(
                    "{} / {}{t}",
                    ms(percentile(&v, 50.0)),
                    ms(percentile(&v, 99.0))
                )
            }
            Shape::Burst => self.final_after.map_or_else(
                || "timeout".to_owned(),
                |d| format!("final after {}", ms(d)),
            ),
        }
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

    /// This run's figures for `--json` (see data.rs): moves' p50/p99, the burst's time until
    /// final, and for both the controller's CPU, the writes per move and passes per placement.
    pub fn json(&self) -> serde_json::Value {
        use crate::data::{mb_value, ms_value, r2, s};
        let mut v = self.latencies.clone();
        v.sort();
        let moves = matches!(self.shape, Shape::Moves);
        json!({
            "controller": self.kind.name(),
            "shape": self.shape.name(),
            "clusters": self.clusters,
            "placements": self.placements,
            "moves": moves.then_some(self.latencies.len()),
            "timeouts": moves.then_some(self.timeouts),
            "p50_ms": moves.then(|| ms_value(percentile(&v, 50.0))),
            "p99_ms": moves.then(|| ms_value(percentile(&v, 99.0))),
            "final_after_s": self.final_after.filter(|_| !moves).map(s),
            "controller_cpu_s": s(self.window.controller_cpu),
            "other_cpu_s": s(self.window.other_cpu),
            "writes_per_move": moves.then(|| r2(crate::measure::api_writes(&self.window.apiserver) / self.moves() as f64)),
            "passes_per_placement": r2(self.window.passes / self.placements as f64),
            "peak_rss_mb": mb_value(self.peak_rss),
        })
    }

    /// One line for the log and the details list.
    pub fn detail_row(&self) -> String {
        let w = &self.window;
        let per = match self.shape {
            Shape::Moves => format!(
                "{:.2} apiserver writes per move ({} decision writes)",
                crate::measure::api_writes(&w.apiserver) / self.moves() as f64,
                num(self.decision_writes())
            ),
            Shape::Burst => format!(
                "burst of {} writes sent in {}; {} passes per placement, {:.2} decision writes per placement, {} apiserver writes",
                num(self.burst_writes_sent()),
                ms(self.burst_span),
                num(w.passes / self.placements as f64),
                self.decision_writes() / self.placements as f64,
                num(crate::measure::api_writes(&w.apiserver))
            ),
        };
        format!(
            "- {} {}: {}; controller CPU {} in {}; {per}; peak RSS {}; other processes' CPU {}",
            self.shape_label(),
            self.kind.name(),
            self.latency(),
            secs(w.controller_cpu),
            secs(w.wall),
            mb(self.peak_rss),
            secs(w.other_cpu),
        )
    }

    fn burst_writes_sent(&self) -> f64 {
        self.window
            .harness
            .get(&("PATCH".to_owned(), "addonplacementscores/status".to_owned()))
            .copied()
            .unwrap_or(0.0)
    }
}

/// The reaction table: one row per shape, ours and upstream side by side ("—" for one not run),
/// then every run's details.
pub fn section(results: &[Outcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Reaction to a score change, ours / upstream\n\n| shape (clusters × placements) | ours p50 / p99 ms | upstream p50 / p99 ms | controller CPU ours / upstream | apiserver writes per move ours / upstream | passes per placement ours / upstream |\n| --- | --- | --- | --- | --- | --- |"
    );
    let mut shapes: Vec<(Shape, usize, usize)> = results
        .iter()
        .map(|r| (r.shape, r.clusters, r.placements))
        .collect();
    shapes.dedup();
    for (shape, c, p) in shapes {
        let of = |k: Kind| {
            results
                .iter()
                .find(|r| r.kind == k && r.shape == shape && r.clusters == c && r.placements == p)
        };
        let pair = |f: &dyn Fn(&Outcome) -> String| {
            let one = |k| of(k).map_or_else(|| "—".to_owned(), f);
            format!("{} / {}", one(Kind::Ours), one(Kind::Upstream))
        };
        let label = of(Kind::Ours)
            .or(of(Kind::Upstream))
            .map(Outcome::shape_label)
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} | {} | {} |",
            of(Kind::Ours).map_or_else(|| "—".to_owned(), Outcome::latency),
            of(Kind::Upstream).map_or_else(|| "—".to_owned(), Outcome::latency),
            pair(&|r| secs(r.window.controller_cpu)),
            pair(&|r| format!(
                "{:.2}",
                crate::measure::api_writes(&r.window.apiserver) / r.moves() as f64
            )),
            pair(&|r| format!("{:.2}", r.window.passes / r.placements as f64)),
        );
    }
    let _ = writeln!(
        s,
        "\nMoves: one AddOnPlacementScore status write at a time makes another cluster the best for every placement; latency from that write's response to the PlacementDecision watch event that shows the new cluster, for the last placement to move. Burst: the score writes sent 64 at a time, then the time from the first write until every placement's decision shows the final best. Writes: the apiserver's count (OCM and event APIs), the harness's own subtracted, until 3 s without a write after the last change; passes: the controller's scheduling histogram (ours `placement_scheduling_duration_seconds`, upstream's `scheduling_scheduling_duration_seconds`), per placement over the same window.\n"
    );
    for r in results {
        let _ = writeln!(s, "{}", r.detail_row());
    }
    s
}
