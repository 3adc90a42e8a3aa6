//! The event recorder: publishes the scheduler's Events off the decision path, and folds an
//! event that repeats into a series on one Event object instead of a new object each time.
//!
//! Workers hand events to [`Events::publish`], which never waits: the events go through a
//! bounded channel to one [`Recorder`] task, and when the channel is full the event is dropped
//! and counted (`placement_events_dropped_total`). A decision write never waits for an event.
//! The recorder takes up to [`CREATES_IN_FLIGHT`] events at a time and creates the new ones
//! concurrently.
//!
//! Repeats, as client-go's events broadcaster (`k8s.io/client-go/tools/events`) does them: the
//! recorder remembers the events it published for [`Timing::window`]. The same event again
//! (same regarding, related, reason, action, type and note) is not a new object: the first
//! repeat patches the existing object's `series` (count 2) at once, so that a reader sees it
//! repeats; later repeats only count in memory and are written in one patch per series at the
//! next [`Timing::refresh`], or when the series ends (no repeat within the window) or is
//! evicted. The memory is bounded: at most [`Timing::capacity`] events, the oldest evicted
//! first; the size is exported as `placement_cache_entries{cache="event_series"}`. With no
//! event remembered the recorder has no timer: it only waits for the channel.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ocm_runtime::leader::is_not_leader;
use serde_json::json;

/// The longest note `events.k8s.io/v1` accepts (1 kB).
const MAX_NOTE: usize = 1024;
use tokio::sync::mpsc;

use super::Leader;
use super::metrics::{CacheLabels, Metrics};
use placement_core::plan::{Event, EventType};

/// One event to publish, as a worker saw it.
#[derive(Debug, Clone)]
pub(crate) struct Publish {
    pub(crate) namespace: String,
    /// The Placement.
    pub(crate) regarding: ObjectReference,
    /// The PlacementDecision, if the event names one.
    pub(crate) related: Option<ObjectReference>,
    pub(crate) event: Event,
    /// When it happened (the recorder may publish it a little later).
    pub(crate) at: jiff::Timestamp,
}

/// How the recorder batches and forgets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Events waiting to be published; more are dropped.
    pub(crate) queue: usize,
    /// How long a published event is remembered after its last occurrence: a repeat within
    /// this joins its series (client-go: 6 minutes).
    pub(crate) window: Duration,
    /// How often counted repeats are written (client-go refreshes every 30 minutes; a
    /// shorter period keeps `series.count` current at one patch per repeating series).
    pub(crate) refresh: Duration,
    /// Events remembered at most.
    pub(crate) capacity: usize,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            queue: 1000,
            window: Duration::from_secs(360),
            refresh: Duration::from_secs(60),
            capacity: 4096,
        }
    }
}

/// The workers' side: hands events to the recorder without waiting.
#[derive(Clone)]
pub(crate) struct Events {
    tx: mpsc::Sender<Publish>,
    metrics: Arc<Metrics>,
}

impl Events {
    pub(crate) fn publish(&self, p: Publish) {
        if let Err(e) = self.tx.try_send(p) {
            let reason = match &e {
                mpsc::error::TrySendError::Full(p) | mpsc::error::TrySendError::Closed(p) => {
                    p.event.reason
                }
            };
            tracing::debug!(reason, "event queue full or closed: event dropped");
            self.metrics.events_dropped.inc();
        }
    }
}

/// What makes two events the same (client-go's "isomorphic" events; the reporting controller
/// and instance are the recorder's own, so always equal).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    regarding: (Option<String>, Option<String>, Option<String>),
    related: Option<String>,
    reason: &'static str,
    action: &'static str,
    type_: EventType,
    note: String,
}

impl Key {
    fn of(p: &Publish) -> Self {
        let r = &p.regarding;
        Self {
            namespace: p.namespace.clone(),
            regarding: (r.kind.clone(), r.name.clone(), r.uid.clone()),
            related: p.related.as_ref().and_then(|r| r.name.clone()),
            reason: p.event.reason,
            action: p.event.action,
            type_: p.event.type_,
            note: p.event.note.clone(),
        }
    }
}

/// A published event and its repeats.
struct Entry {
    /// The object that holds it (a new one if it had to be re-created).
    name: String,
    /// To re-create the object if it is gone (the apiserver's event TTL).
    publish: Publish,
    /// Occurrences so far, and how many of them the object says.
    count: i32,
    written: i32,
    last_observed: jiff::Timestamp,
    /// Tells this entry from a newer one of the same key in the eviction order.
    seq: u64,
}

/// The recorder task: publishes, aggregates and forgets.
pub(crate) struct Recorder {
    rx: mpsc::Receiver<Publish>,
    client: Client,
    metrics: Arc<Metrics>,
    leader: Arc<dyn Leader>,
    /// `reportingInstance` of our events (the pod or host name).
    instance: String,
    timing: Timing,
    /// Boxed: an entry is about 500 bytes, and a table sized for `capacity` keeps room for
    /// about twice that many values inline (4 MB at 4,096).
    cache: HashMap<Arc<Key>, Box<Entry>>,
    /// Keys in the order they were first published (eviction order).
    order: VecDeque<(Arc<Key>, u64)>,
    seq: u64,
}

pub(crate) fn recorder(
    client: Client,
    metrics: Arc<Metrics>,
    leader: Arc<dyn Leader>,
    timing: Timing,
) -> (Events, Recorder) {
    let (tx, rx) = mpsc::channel(timing.queue.max(1));
    let instance = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| REPORTER.to_owned());
    (
        Events {
            tx,
            metrics: metrics.clone(),
        },
        Recorder {
            rx,
            client,
            metrics,
            leader,
            instance,
            timing,
            cache: HashMap::new(),
            order: VecDeque::new(),
            seq: 0,
        },
    )
}

fn since(now: jiff::Timestamp, then: jiff::Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

impl Recorder {
    /// Runs until every [`Events`] handle is dropped; then writes the counted repeats.
    pub(crate) async fn run(mut self) {
        // A timer only while something is remembered: nothing runs at rest.
        let mut next: Option<tokio::time::Instant> = None;
        let mut batch = Vec::with_capacity(CREATES_IN_FLIGHT);
        loop {
            next = match next {
                _ if self.cache.is_empty() => None,
                Some(at) => Some(at),
                None => Some(tokio::time::Instant::now() + self.timing.refresh),
            };
            let tick = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                n = self.rx.recv_many(&mut batch, CREATES_IN_FLIGHT) => match n {
                    0 => break,
                    _ => self.record(std::mem::take(&mut batch)).await,
                },
                () = tick => {
                    self.refresh(jiff::Timestamp::now()).await;
                    next = None;
                }
            }
        }
        let keys: Vec<Arc<Key>> = self.cache.keys().cloned().collect();
        for k in keys {
            self.write_series(&k).await;
        }
    }

    fn set_gauge(&self) {
        self.metrics
            .cache_entries
            .get_or_create(&CacheLabels {
                cache: "event_series",
            })
            .set(i64::try_from(self.cache.len()).unwrap_or(i64::MAX));
    }

    /// Publishes what the workers handed over together: new objects, created concurrently,
    /// and repeats of remembered events (or of a new one in the same batch).
    async fn record(&mut self, batch: Vec<Publish>) {
        if !self.leader.is_leader() {
            for p in &batch {
                tracing::debug!(
                    reason = p.event.reason,
                    "not the leader any more: event not published"
                );
                self.metrics.api_write("create", "events", "not_leader");
            }
            return;
        }
        // New events with how often they occur in the batch and when they last did.
        let mut fresh: Vec<(Arc<Key>, Publish, String, i32, jiff::Timestamp)> = Vec::new();
        let mut index: HashMap<Arc<Key>, usize> = HashMap::new();
        let mut series_now = Vec::new();
        let mut last_nanos = 0;
        for p in batch {
            let key = Arc::new(Key::of(&p));
            if let Some(e) = self.cache.get_mut(&key) {
                e.count = e.count.saturating_add(1);
                e.last_observed = p.at;
                // The first repeat is written at once (a reader learns that it repeats);
                // later ones at the next refresh.
                if e.count == 2 {
                    series_now.push(key);
                }
                continue;
            }
            if let Some(&i) = index.get(&key) {
                fresh[i].3 = fresh[i].3.saturating_add(1);
                fresh[i].4 = p.at;
                continue;
            }
            // Names from a strictly increasing clock: two creates in one batch never collide.
            last_nanos = jiff::Timestamp::now().as_nanosecond().max(last_nanos + 1);
            let name = event_name(&p, last_nanos);
            let at = p.at;
            index.insert(key.clone(), fresh.len());
            fresh.push((key, p, name, 1, at));
        }
        // One create at a time held the recorder to the apiserver's latency (about 30 events
        // a second on a busy hub): 10,000 new placements filled the queue and a third of
        // their events were dropped.
        let created: Vec<bool> = futures::future::join_all(
            fresh
                .iter()
                .map(|(_, p, name, _, _)| self.create(p, name, None)),
        )
        .await;
        for ((key, publish, name, count, last_observed), ok) in fresh.into_iter().zip(created) {
            if !ok {
                continue;
            }
            while self.cache.len() >= self.timing.capacity.max(1) {
                if !self.evict_oldest().await {
                    break;
                }
            }
            self.seq += 1;
            self.order.push_back((key.clone(), self.seq));
            if count >= 2 {
                series_now.push(key.clone());
            }
            self.cache.insert(
                key,
                Box::new(Entry {
                    name,
                    last_observed,
                    publish,
                    count,
                    written: 1,
                    seq: self.seq,
                }),
            );
        }
        for key in series_now {
            self.write_series(&key).await;
        }
        self.set_gauge();
    }

    /// Writes counted repeats, and forgets the events not seen within the window (a standby
    /// forgets them unwritten: the new leader reports its own).
    async fn refresh(&mut self, now: jiff::Timestamp) {
        let keys: Vec<Arc<Key>> = self.cache.keys().cloned().collect();
        let leader = self.leader.is_leader();
        for k in keys {
            self.write_series(&k).await;
            let ended = self.cache.get(&k).is_some_and(|e| {
                (e.count == e.written || !leader)
                    && since(now, e.last_observed) >= self.timing.window
            });
            if ended {
                self.cache.remove(&k);
            }
        }
        let cache = &self.cache;
        self.order
            .retain(|(k, seq)| cache.get(k).is_some_and(|e| e.seq == *seq));
        self.set_gauge();
    }

    /// Forgets the oldest remembered event, writing its counted repeats first. False when
    /// nothing is left to evict.
    async fn evict_oldest(&mut self) -> bool {
        while let Some((k, seq)) = self.order.pop_front() {
            if self.cache.get(&k).is_some_and(|e| e.seq == seq) {
                self.write_series(&k).await;
                self.cache.remove(&k);
                return true;
            }
        }
        false
    }

    /// Brings the object's `series` up to the counted repeats, if it is behind. A series whose
    /// object is gone is published again as a new object carrying the series.
    async fn write_series(&mut self, key: &Arc<Key>) {
        let Some(e) = self.cache.get(key) else {
            return;
        };
        if e.count == e.written {
            return;
        }
        if !self.leader.is_leader() {
            self.metrics.api_write("patch", "events", "not_leader");
            return;
        }
        let series = EventSeries {
            count: e.count,
            last_observed_time: MicroTime(e.last_observed),
        };
        let (count, name, publish) = (e.count, e.name.clone(), e.publish.clone());
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), &publish.namespace);
        let body = json!({"series": series});
        let result = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await;
        self.metrics.api_write("patch", "events", outcome(&result));
        let written = match result {
            Ok(_) => Some(name),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let fresh = event_name(&publish, jiff::Timestamp::now().as_nanosecond());
                self.create(&publish, &fresh, Some(series))
                    .await
                    .then_some(fresh)
            }
            Err(err) => {
                tracing::warn!(reason = publish.event.reason, error = %err, "updating an event series failed");
                None
            }
        };
        if let (Some(name), Some(e)) = (written, self.cache.get_mut(key)) {
            e.name = name;
            e.written = count;
        }
    }

    /// Creates the Event object; false (logged and counted) when that failed.
    async fn create(&self, p: &Publish, name: &str, series: Option<EventSeries>) -> bool {
        let event = KubeEvent {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(p.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(p.at)),
            series,
            type_: Some(p.event.type_.as_str().to_owned()),
            reason: Some(p.event.reason.to_owned()),
            action: Some(p.event.action.to_owned()),
            // events.k8s.io/v1 refuses a note over 1 kB (a long Warning's message would).
            note: Some(ocm_api::conditions::fit(&p.event.note, MAX_NOTE).into_owned()),
            regarding: Some(p.regarding.clone()),
            related: p.related.clone(),
            reporting_controller: Some(REPORTER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..KubeEvent::default()
        };
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), &p.namespace);
        let result = api.create(&PostParams::default(), &event).await;
        self.metrics.api_write("create", "events", outcome(&result));
        match result {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!(reason = p.event.reason, error = %err, "publishing an event failed");
                false
            }
        }
    }
}

fn outcome<T>(result: &Result<T, kube::Error>) -> &'static str {
    match result {
        Ok(_) => "success",
        Err(kube::Error::Api(s)) if s.code == 404 => "not_found",
        Err(e) if is_not_leader(e) => "not_leader",
        Err(_) => "error",
    }
}

/// `<placement>.<nanoseconds, hex>`, as client-go names events.
fn event_name(p: &Publish, nanos: i128) -> String {
    format!(
        "{}.{:x}",
        p.regarding.name.as_deref().unwrap_or(REPORTER),
        nanos
    )
}

/// Events the recorder takes from its queue at once, and so creates concurrently at most.
const CREATES_IN_FLIGHT: usize = 16;

const REPORTER: &str = ocm_api::wellknown::placement_event::REPORTING_CONTROLLER;
