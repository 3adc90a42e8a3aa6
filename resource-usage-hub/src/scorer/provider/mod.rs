//! The hub scorer as a provider on the score-provider framework: each compute runs the fleet
//! queries once, and rates every ManagedCluster from the answers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use ocm_api::score::fleet_relative;
use ocm_api::score::resource_usage::{self, Bounds, Free, Resource};
use ocm_api::wellknown::score::names;
use ocm_api::{AddOnPlacementScore, ManagedCluster};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use score_provider::{Change, Computed, Outcome, ProviderError, ScoreProvider, Scores};

use super::queries::{Assembled, ClusterData, Dropped, Metric, Queries, Query, assemble};
use score_provider::prom::{PromClient, PromError, Sample, named_in};

/// How scores are normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Normalise {
    /// Between absolute bounds in real units, as the agent does (same flags, same defaults).
    Absolute,
    /// Relative to the fleet: the least free cluster -100, the most free 100, per score.
    Fleet,
}

/// Headroom score names (usage-based, optional).
pub const CPU_HEADROOM: &str = "cpuHeadroom";
pub const MEMORY_HEADROOM: &str = "memHeadroom";

/// What the scorer needs besides the query client.
#[derive(Clone, Debug)]
pub struct ScorerSettings {
    pub queries: Queries,
    pub normalise: Normalise,
    pub bounds: Bounds,
    /// A cluster whose newest sample is older than this is not rated (its scores expire).
    pub max_data_age: std::time::Duration,
    /// The AddOnPlacementScore written, and who writes it.
    pub score_name: String,
    pub manager: String,
    /// A compute gives up after this long (all queries, retries included), so that a slow
    /// query API never holds the loop past a period.
    pub deadline: std::time::Duration,
}

/// Every label of the scorer's metrics is a `&'static str` from a closed set: never a value
/// from a series, a cluster or a setting. Clusters are counted, never named (conditions and
/// logs name them).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricLabels {
    /// [`Metric::name`].
    pub metric: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// [`Metric::name`].
    pub metric: &'static str,
    /// One of [`score_provider::prom::FAILURE_REASONS`].
    pub reason: &'static str,
}

/// `reason` is one of [`Dropped`]'s names.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    pub reason: &'static str,
}

/// The flag that sets [`score_provider::prom::PromSettings::max_response_bytes`], named in the log.
pub const MAX_RESPONSE_FLAG: &str = "--prometheus-max-response-size";

/// The condition reason of a cluster whose series disagree.
pub const REASON_CONFLICT: &str = "ConflictingSeries";

/// The condition reason of a cluster without (usable) metrics: none in the answers, or a
/// partial answer's warning names its store.
pub const REASON_NO_METRICS: &str = "NoMetrics";

/// At most this much of a warning is repeated in a condition message or a log line.
const WARNING_SHOWN: usize = 300;

/// `scorer_*` metrics.
#[derive(Clone, Default)]
pub struct ScorerMetrics {
    pub query_errors: Family<FailureLabels, Counter>,
    pub query_seconds: Family<MetricLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub rated: Gauge,
    pub stale: Gauge,
    pub skipped: Gauge,
    pub conflicting: Gauge,
    pub dropped_series: Family<DroppedLabels, Counter>,
    pub query_warnings: Family<MetricLabels, Counter>,
    pub partial: Gauge,
}

impl ScorerMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let r = registry.sub_registry_with_prefix("scorer");
        r.register(
            "query_errors",
            "Failed fleet queries by metric and reason (setup, transport, timeout, status, query, decode, too_large)",
            self.query_errors.clone(),
        );
        r.register(
            "query_seconds",
            "Duration of the last fleet query by metric",
            self.query_seconds.clone(),
        );
        r.register(
            "rated_clusters",
            "Clusters rated by the last compute",
            self.rated.clone(),
        );
        r.register(
            "stale_clusters",
            "Clusters whose metrics are missing or older than --max-data-age",
            self.stale.clone(),
        );
        r.register(
            "skipped_clusters",
            "Clusters whose score object another provider writes",
            self.skipped.clone(),
        );
        r.register(
            "conflicting_clusters",
            "Clusters whose scores the last compute withheld because series under their name disagree",
            self.conflicting.clone(),
        );
        r.register(
            "query_warnings",
            "Warnings of partial query answers (a store that failed) by metric",
            self.query_warnings.clone(),
        );
        r.register(
            "partial_clusters",
            "Clusters the last compute counted as missing because a partial answer's warning names their store",
            self.partial.clone(),
        );
        r.register(
            "dropped_series",
            "Answer series not used, by reason (unlabelled, unknown_cluster, bad_value)",
            self.dropped_series.clone(),
        );
    }
}

/// The provider.
pub struct PromScorer {
    client: PromClient,
    settings: ScorerSettings,
    queries: Vec<Query>,
    clusters: Store<ManagedCluster>,
    scores: Store<AddOnPlacementScore>,
    /// Taken once by the framework (a Mutex so that the scorer is Sync while it awaits).
    watches: parking_lot::Mutex<Option<BoxStream<'static, Change>>>,
    metrics: ScorerMetrics,
    /// The clusters withheld by the last compute: a conflict is logged when it starts and
    /// when it ends, not every period.
    conflicted: BTreeSet<String>,
}

impl PromScorer {
    /// Watches ManagedClusters and the score objects through `hub`.
    pub fn new(
        client: PromClient,
        settings: ScorerSettings,
        hub: Client,
        metrics: ScorerMetrics,
    ) -> Self {
        let (clusters, clusters_w) = reflector::store::<ManagedCluster>();
        let (scores, scores_w) = reflector::store::<AddOnPlacementScore>();
        // Metrics change once per push; a cluster's status updates are no reason to query.
        // Only a change of the set of rated clusters is.
        let mut rated: std::collections::BTreeSet<String> = Default::default();
        let cluster_events = reflector::reflector(
            clusters_w,
            watcher::watcher(
                Api::<ManagedCluster>::all(hub.clone()),
                watcher::Config::default(),
            ),
        )
        .backoff(ocm_runtime::watch::backoff())
        .filter_map(move |r| {
            let change = match r {
                Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                    let name = c.name_any();
                    if rateable(&c) {
                        rated.insert(name)
                    } else {
                        rated.remove(&name)
                    }
                }
                Ok(watcher::Event::Delete(c)) => rated.remove(&c.name_any()),
                Ok(watcher::Event::InitDone) => true,
                Ok(watcher::Event::Init) => false,
                Err(e) => {
                    tracing::warn!(error = %e, "ManagedCluster watch failed; retrying");
                    false
                }
            };
            futures::future::ready(change.then_some(Change {
                what: "ManagedCluster",
            }))
        });
        let score_events = reflector::reflector(
            scores_w,
            watcher::watcher(
                Api::<AddOnPlacementScore>::all(hub),
                watcher::Config::default()
                    .fields(&format!("metadata.name={}", settings.score_name)),
            ),
        )
        .backoff(ocm_runtime::watch::backoff())
        .touched_objects()
        // Score writes (ours included) are no reason to query again: drive the store only.
        .filter_map(|r| async move {
            if let Err(e) = r {
                tracing::warn!(error = %e, "AddOnPlacementScore watch failed; retrying");
            }
            None::<Change>
        });
        let queries = settings.queries.build();
        Self {
            client,
            settings,
            queries,
            clusters,
            scores,
            watches: parking_lot::Mutex::new(Some(
                futures::stream::select(cluster_events, score_events).boxed(),
            )),
            metrics,
            conflicted: BTreeSet::new(),
        }
    }

    /// Counts and logs what [`assemble`] dropped and withheld.
    fn report(&mut self, assembled: &Assembled) {
        for (why, n) in &assembled.dropped {
            self.metrics
                .dropped_series
                .get_or_create(&DroppedLabels { reason: why.name() })
                .inc_by(*n);
        }
        if let Some(n) = assembled.dropped.get(&Dropped::UnknownCluster) {
            // Names from series are anyone's: not logged, only counted.
            tracing::debug!(
                series = n,
                "series for clusters that are no accepted ManagedCluster dropped"
            );
        }
        for (cluster, conflict) in &assembled.conflicts {
            if !self.conflicted.contains(cluster) {
                tracing::warn!(%cluster, %conflict, "series disagree: scores withheld");
            }
        }
        for cluster in &self.conflicted {
            if !assembled.conflicts.contains_key(cluster) {
                tracing::info!(%cluster, "series agree again");
            }
        }
        self.conflicted = assembled.conflicts.keys().cloned().collect();
    }

    /// Whether another provider keeps `cluster`'s score object: its `managed-by` label (the
    /// framework's writers set it) or a field manager of its status is not ours, and its
    /// scores are live (`validUntil` ahead; a new object without one for 10 minutes). An
    /// abandoned object (an uninstalled agent's) is taken over.
    fn foreign(&self, cluster: &str, now: jiff::Timestamp) -> bool {
        let key = reflector::ObjectRef::new(&self.settings.score_name).within(cluster);
        let Some(score) = self.scores.get(&key) else {
            return false;
        };
        let label = score.labels().get("app.kubernetes.io/managed-by");
        let label_foreign = label.is_some_and(|m| *m != self.settings.manager);
        let field_foreign = score.managed_fields().iter().any(|f| {
            f.subresource.as_deref() == Some("status")
                && f.manager
                    .as_deref()
                    .is_some_and(|m| m != self.settings.manager)
        });
        let live = match score.status.as_ref().and_then(|s| s.valid_until.as_ref()) {
            Some(t) => t.0 > now,
            None => score
                .metadata
                .creation_timestamp
                .as_ref()
                .is_none_or(|t| now.duration_since(t.0) < jiff::SignedDuration::from_mins(10)),
        };
        (label_foreign || field_foreign) && live
    }

    /// The answers by metric, and every distinct warning of them.
    async fn run_queries(
        &self,
    ) -> Result<(BTreeMap<Metric, Vec<Sample>>, BTreeSet<String>), ProviderError> {
        let runs = self.queries.iter().map(|q| async move {
            let started = Instant::now();
            let r = self.client.query(&q.promql).await;
            let metric = q.metric.name();
            self.metrics
                .query_seconds
                .get_or_create(&MetricLabels { metric })
                .set(started.elapsed().as_secs_f64());
            if let Err(e) = &r {
                self.metrics
                    .query_errors
                    .get_or_create(&FailureLabels {
                        metric,
                        reason: e.reason(),
                    })
                    .inc();
            }
            if let Err(PromError::TooLarge { limit, length }) = &r {
                tracing::warn!(
                    query = metric,
                    limit_bytes = limit,
                    content_length = length,
                    flag = MAX_RESPONSE_FLAG,
                    "the query's answer is over the size limit: the query failed, the scores it feeds are not renewed and expire"
                );
            }
            (q.metric, r)
        });
        let mut out = BTreeMap::new();
        let mut warnings = BTreeSet::new();
        for (metric, r) in futures::future::join_all(runs).await {
            match r {
                Ok(answer) => {
                    if !answer.warnings.is_empty() {
                        self.metrics
                            .query_warnings
                            .get_or_create(&MetricLabels {
                                metric: metric.name(),
                            })
                            .inc_by(answer.warnings.len() as u64);
                    }
                    warnings.extend(answer.warnings);
                    out.insert(metric, answer.samples);
                }
                // Headroom is optional: without it the resource scores still stand.
                Err(e) if matches!(metric, Metric::CpuHeadroom | Metric::MemoryHeadroom) => {
                    tracing::warn!(metric = metric.name(), error = %e, "headroom query failed");
                }
                Err(e) => {
                    return Err(ProviderError::Source(format!(
                        "query {}: {e}",
                        metric.name()
                    )));
                }
            }
        }
        Ok((out, warnings))
    }

    /// The clusters the warnings name (each with the first warning naming it), logged: a
    /// partial answer lacks what their stores hold, so they count as missing this round.
    fn partial(&self, warnings: &BTreeSet<String>) -> BTreeMap<String, String> {
        let mut named = BTreeMap::new();
        for w in warnings {
            let shown = shorten(w);
            let clusters = named_in(w, &self.settings.queries.label);
            // Names from a store's labels are whoever runs it: logged, never metric labels.
            tracing::warn!(
                warning = %shown,
                clusters = ?clusters,
                "partial answer: the query API lacks a store; the clusters it names count as missing"
            );
            for c in clusters {
                named.entry(c).or_insert_with(|| shown.clone());
            }
        }
        named
    }
}

/// `w` cut to [`WARNING_SHOWN`] bytes at a character boundary.
fn shorten(w: &str) -> String {
    if w.len() <= WARNING_SHOWN {
        return w.to_owned();
    }
    let mut end = WARNING_SHOWN;
    while !w.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &w[..end])
}

impl ScoreProvider for PromScorer {
    async fn compute(&mut self) -> Result<Computed, ProviderError> {
        // Both lists first: before the score objects are listed, an agent's would look free
        // to take.
        if !listed(&self.clusters) || !listed(&self.scores) {
            return Err(ProviderError::NotReady(
                "ManagedClusters and AddOnPlacementScores not listed yet".into(),
            ));
        }
        let (answers, warnings) = tokio::time::timeout(self.settings.deadline, self.run_queries())
            .await
            .map_err(|_| {
                ProviderError::Source(format!(
                    "the queries took longer than {:?}",
                    self.settings.deadline
                ))
            })??;
        let names: BTreeSet<String> = self
            .clusters
            .state()
            .iter()
            .filter(|c| rateable(c))
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        // Series for anyone else are dropped before they are looked at.
        let assembled = assemble(&self.settings.queries.label, &answers, |c| {
            names.contains(c)
        });
        self.report(&assembled);
        let partial = self.partial(&warnings);
        let names: Vec<String> = names.into_iter().collect();
        let ts = jiff::Timestamp::now();
        let now = ts.as_millisecond() as f64 / 1000.0;
        let (computed, counts) = rate(&self.settings, &names, &assembled, &partial, now, |c| {
            self.foreign(c, ts)
        })?;
        self.metrics.partial.set(counts.partial as i64);
        self.metrics.rated.set(counts.rated as i64);
        self.metrics.stale.set(counts.stale as i64);
        self.metrics.skipped.set(counts.skipped as i64);
        self.metrics.conflicting.set(counts.conflicting as i64);
        Ok(computed)
    }

    fn changes(&mut self) -> BoxStream<'static, Change> {
        self.watches
            .get_mut()
            .take()
            .unwrap_or_else(|| futures::stream::pending().boxed())
    }
}

/// The store has listed once (an empty list is a list too).
fn listed<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// A cluster the scorer rates: accepted by the hub (it has its namespace) and not going.
fn rateable(c: &ManagedCluster) -> bool {
    c.metadata.deletion_timestamp.is_none() && c.spec.hub_accepts_client
}

/// How a compute went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub rated: usize,
    pub stale: usize,
    pub skipped: usize,
    pub conflicting: usize,
    /// Named by a partial answer's warning (also counted in `stale`).
    pub partial: usize,
}

/// Rates `clusters` from `assembled` at `now` (Unix seconds), sans IO: series that disagree,
/// stale or missing data, or a store that failed (`partial`: the clusters a partial answer's
/// warnings name, with the warning) make a cluster `Unavailable` (its scores are not renewed
/// and expire, never zeroed), a cluster another provider writes is left out. The others are
/// rated as usual: one cluster's dead store never holds back the fleet.
pub fn rate(
    settings: &ScorerSettings,
    clusters: &[String],
    assembled: &Assembled,
    partial: &BTreeMap<String, String>,
    now: f64,
    foreign: impl Fn(&str) -> bool,
) -> Result<(Computed, Counts), ProviderError> {
    let mut out = Computed::new();
    let mut counts = Counts::default();
    let fresh = triage(
        settings,
        clusters,
        assembled,
        partial,
        now,
        foreign,
        &mut out,
        &mut counts,
    );
    counts.rated = fresh.len();
    match settings.normalise {
        Normalise::Absolute => rate_absolute(settings, &fresh, &mut out)?,
        Normalise::Fleet => rate_fleet(&fresh, &mut out)?,
    }
    Ok((out, counts))
}

/// The clusters with fresh data, in order; the others get their `Unavailable` outcome (or
/// are skipped, when another provider writes them) and are counted.
#[allow(clippy::too_many_arguments)]
fn triage<'a>(
    settings: &ScorerSettings,
    clusters: &'a [String],
    assembled: &'a Assembled,
    partial: &BTreeMap<String, String>,
    now: f64,
    foreign: impl Fn(&str) -> bool,
    out: &mut Computed,
    counts: &mut Counts,
) -> Vec<(&'a str, &'a ClusterData)> {
    let max_age = settings.max_data_age.as_secs_f64();
    let mut fresh: Vec<(&str, &ClusterData)> = Vec::new();
    for name in clusters {
        if foreign(name) {
            counts.skipped += 1;
            continue;
        }
        if let Some(conflict) = assembled.conflicts.get(name) {
            counts.conflicting += 1;
            out.insert(
                name.clone(),
                Outcome::Unavailable {
                    reason: REASON_CONFLICT.to_owned(),
                    message: conflict.to_string(),
                },
            );
            continue;
        }
        if let Some(warning) = partial.get(name) {
            counts.stale += 1;
            counts.partial += 1;
            out.insert(
                name.clone(),
                Outcome::Unavailable {
                    reason: REASON_NO_METRICS.to_owned(),
                    message: format!(
                        "the query API answered without this cluster's store: {warning}"
                    ),
                },
            );
            continue;
        }
        let d = assembled.clusters.get(name);
        let outcome = match d {
            None => Some((REASON_NO_METRICS, "no metrics for this cluster".to_owned())),
            Some(d) => match d.newest {
                None => Some((
                    REASON_NO_METRICS,
                    "no sample time for this cluster".to_owned(),
                )),
                Some(t) if now - t > max_age => Some((
                    "MetricsStale",
                    format!(
                        "the newest sample is {:.0}s old (limit {max_age:.0}s)",
                        now - t
                    ),
                )),
                Some(_) => None,
            },
        };
        match (outcome, d) {
            (Some((reason, message)), _) => {
                counts.stale += 1;
                out.insert(
                    name.clone(),
                    Outcome::Unavailable {
                        reason: reason.to_owned(),
                        message,
                    },
                );
            }
            (None, Some(d)) => fresh.push((name, d)),
            (None, None) => {}
        }
    }
    fresh
}

/// Absolute scores from each cluster's free resources.
fn rate_absolute(
    settings: &ScorerSettings,
    fresh: &[(&str, &ClusterData)],
    out: &mut Computed,
) -> Result<(), ProviderError> {
    for (name, d) in fresh {
        // Fresh data without a counted node: nothing is schedulable, as the agent says
        // (-100, not an expired score that placements would read as 0).
        let mut free = Free::default();
        let (cpu, cpu_node) = d.cpu.map_or((0.0, None), |(c, n)| (c, Some(n)));
        free.set(Resource::Cpu, cpu, cpu_node);
        let (mem, mem_node) = d.memory.map_or((0.0, None), |(c, n)| (c, Some(n)));
        free.set(Resource::Memory, mem, mem_node);
        let mut s = Scores::new();
        for (name, value) in resource_usage::scores(&free, &settings.bounds) {
            s.insert(name, value.into())?;
        }
        headroom(&mut s, d)?;
        out.insert(*name, Outcome::Scores(s));
    }
    Ok(())
}

/// Scores relative to the fleet's: each column normalised over the fresh clusters.
fn rate_fleet(fresh: &[(&str, &ClusterData)], out: &mut Computed) -> Result<(), ProviderError> {
    let column = |f: &dyn Fn(&ClusterData) -> Option<f64>| {
        fleet_relative(&fresh.iter().map(|(_, d)| f(d)).collect::<Vec<_>>())
    };
    // No counted node is nothing free.
    let cpu_cluster = column(&|d| Some(d.cpu.map_or(0.0, |c| c.0)));
    let cpu_node = column(&|d| Some(d.cpu.map_or(0.0, |c| c.1)));
    let mem_cluster = column(&|d| Some(d.memory.map_or(0.0, |c| c.0)));
    let mem_node = column(&|d| Some(d.memory.map_or(0.0, |c| c.1)));
    for (i, (name, d)) in fresh.iter().enumerate() {
        let mut s = Scores::new();
        let items = [
            (names::CPU_CLUSTER, cpu_cluster[i]),
            (names::CPU, cpu_cluster[i]),
            (names::CPU_NODE, cpu_node[i]),
            (names::MEM_CLUSTER, mem_cluster[i]),
            (names::MEM, mem_cluster[i]),
            (names::MEM_NODE, mem_node[i]),
        ];
        for (n, v) in items {
            if let Some(v) = v {
                s.insert(n, i64::from(v))?;
            }
        }
        headroom(&mut s, d)?;
        out.insert(*name, Outcome::Scores(s));
    }
    Ok(())
}

/// Headroom fractions in [0, 1] as scores in [-100, 100].
fn headroom(s: &mut Scores, d: &ClusterData) -> Result<(), ProviderError> {
    for (name, v) in [
        (CPU_HEADROOM, d.cpu_headroom),
        (MEMORY_HEADROOM, d.memory_headroom),
    ] {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            s.insert(name, (v.clamp(0.0, 1.0) * 200.0 - 100.0).round() as i64)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
