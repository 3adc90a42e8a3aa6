//! Kubernetes Events (`events.k8s.io/v1`), published the same way by every controller: the
//! same object for the same occurrence, the same `reportingController` and
//! `reportingInstance`, the same names.
//!
//! - [`Reporting`] is who reports and how an occurrence ([`Occurrence`]) becomes an Event
//!   object ([`Reporting::event`]); [`Reporting::publish`] creates one object per occurrence,
//!   awaited, for a controller that reports rarely and decides itself what is news (the hub's
//!   refusals).
//! - [`recorder`] starts a recorder task for a controller that reports often (the scheduler):
//!   publishing never waits, and an occurrence that repeats becomes a series on one object.
//!
//! The recorder, in detail. Workers hand occurrences to [`Events::publish`], which never
//! waits: they go through a bounded channel to one [`Recorder`] task, and when the channel is
//! full the occurrence is dropped and counted ([`EventMetrics::dropped`]). The recorder takes
//! up to [`CREATES_IN_FLIGHT`] occurrences at a time and creates the new objects
//! concurrently. It publishes only while its [`Leadership`] leads: a standby's occurrences are
//! counted as `not_leader` and forgotten.
//!
//! Repeats, as client-go's events broadcaster (`k8s.io/client-go/tools/events`) does them: the
//! recorder remembers the events it published for [`Timing::window`]. The same occurrence
//! again (same namespace, regarding, related, reason, action, type and note) is not a new
//! object: the first repeat patches the existing object's `series` (count 2) at once, so that
//! a reader sees it repeats; later repeats only count in memory and are written in one patch
//! per series at the next [`Timing::refresh`], or when the series ends (no repeat within the
//! window) or is evicted. An object gone meanwhile (the apiserver's event TTL) is created
//! again, carrying the series. The memory is bounded: at most [`Timing::capacity`] events, the
//! oldest evicted first ([`EventMetrics::remembered`] follows its size). With no event
//! remembered the recorder has no timer: it only waits for the channel.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;

use crate::leader::Leadership;
use crate::write::{is_not_found, is_not_leader};

/// The longest note `events.k8s.io/v1` accepts (1 kB): a longer one makes the apiserver
/// refuse the whole event.
pub const MAX_NOTE: usize = 1024;

/// Occurrences the recorder takes from its queue at once, and so creates concurrently at most.
pub const CREATES_IN_FLIGHT: usize = 16;

/// An event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Something that happened, to publish as an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    /// Where the Event object goes: the regarding object's namespace, or `default` for a
    /// cluster-scoped one (as client-go's recorder does).
    pub namespace: String,
    /// The object it is about; its name also names the Event object.
    pub regarding: ObjectReference,
    /// A second object it involves, if any.
    pub related: Option<ObjectReference>,
    pub type_: EventType,
    /// Why, in UpperCamelCase (`DecisionUpdate`, `CSRNotApproved`).
    pub reason: Cow<'static, str>,
    /// What was done or failed, in UpperCamelCase (`Scheduled`, `NotApproved`).
    pub action: Cow<'static, str>,
    /// For people; cut to [`MAX_NOTE`] bytes in the object.
    pub note: String,
    /// When it happened (`eventTime`); it may be published a little later.
    pub at: jiff::Timestamp,
}

/// Who reports: `reportingController` and `reportingInstance` of every event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporting {
    controller: String,
    instance: String,
}

impl Reporting {
    /// `controller` (e.g. `placement-controller`), from the instance this process is: the
    /// pod's name (`POD_NAME`, set from the downward API), else the host name (`HOSTNAME`,
    /// which a pod's is), else `controller` itself.
    pub fn new(controller: impl Into<String>) -> Self {
        let controller = controller.into();
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| controller.clone());
        Self::with_instance(controller, instance)
    }

    /// With an instance named by the caller (tests, a process with several identities).
    pub fn with_instance(controller: impl Into<String>, instance: impl Into<String>) -> Self {
        Self {
            controller: controller.into(),
            instance: instance.into(),
        }
    }

    pub fn controller(&self) -> &str {
        &self.controller
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The name of an event object about `regarding`, made at `nanos` (nanoseconds since the
    /// epoch): `<regarding's name>.<nanos in hex>`, as client-go names them (this
    /// controller's name when the reference has none).
    pub fn event_name(&self, regarding: &ObjectReference, nanos: i128) -> String {
        format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            nanos
        )
    }

    /// The Event object for `o`, named `name`, with `series` when it repeats.
    pub fn event(&self, o: &Occurrence, name: String, series: Option<EventSeries>) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(o.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(o.at)),
            series,
            type_: Some(o.type_.as_str().to_owned()),
            reason: Some(o.reason.clone().into_owned()),
            action: Some(o.action.clone().into_owned()),
            note: Some(fit_note(&o.note).into_owned()),
            regarding: Some(o.regarding.clone()),
            related: o.related.clone(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }

    /// Creates one Event object for `o`, named after when it happened
    /// ([`Self::event_name`] of `o.at`), and returns it as created. No aggregation, no
    /// leadership check, no retry: for a controller that reports rarely and decides itself
    /// what is news (use [`recorder`] otherwise).
    pub async fn publish(&self, client: &Client, o: &Occurrence) -> Result<Event, kube::Error> {
        let name = self.event_name(&o.regarding, o.at.as_nanosecond());
        let event = self.event(o, name, None);
        let api: Api<Event> = Api::namespaced(client.clone(), &o.namespace);
        api.create(&PostParams::default(), &event).await
    }
}

/// `note` cut to [`MAX_NOTE`] bytes at a character boundary, ending with `...(truncated)`
/// when cut (the same cut as the conditions' messages get in `ocm-api`).
fn fit_note(note: &str) -> Cow<'_, str> {
    const MARK: &str = "...(truncated)";
    if note.len() <= MAX_NOTE {
        return Cow::Borrowed(note);
    }
    let mut end = MAX_NOTE - MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{MARK}", &note[..end]))
}

/// What the recorder reports to the controller's metrics. Every argument is one of the
/// recorder's constants, never a value read from an object.
pub trait EventMetrics: Send + Sync {
    /// An API call on Events: `verb` `create` or `patch`; `outcome` `success`, `not_found`,
    /// `not_leader` (also counted, per occurrence, when a standby does not publish) or
    /// `error`.
    fn api_call(&self, verb: &'static str, outcome: &'static str);
    /// An occurrence dropped: the queue was full, or the recorder has stopped.
    fn dropped(&self);
    /// Events remembered for their series, now.
    fn remembered(&self, events: usize);
}

/// No metrics.
impl EventMetrics for () {
    fn api_call(&self, _: &'static str, _: &'static str) {}
    fn dropped(&self) {}
    fn remembered(&self, _: usize) {}
}

/// How the recorder batches and forgets.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Occurrences waiting to be published; more are dropped.
    pub queue: usize,
    /// How long a published event is remembered after its last occurrence: a repeat within
    /// this joins its series (client-go: 6 minutes).
    pub window: Duration,
    /// How often counted repeats are written (client-go refreshes every 30 minutes; a
    /// shorter period keeps `series.count` current at one patch per repeating series).
    pub refresh: Duration,
    /// Events remembered at most.
    pub capacity: usize,
}

impl Default for Timing {
    /// A queue of 1,000, a window of 6 minutes, a refresh every minute, 4,096 events.
    fn default() -> Self {
        Self {
            queue: 1000,
            window: Duration::from_secs(360),
            refresh: Duration::from_secs(60),
            capacity: 4096,
        }
    }
}

/// The workers' side: hands occurrences to the recorder without waiting. Clones feed the
/// same recorder, which stops once every clone is dropped.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<Occurrence>,
    metrics: Arc<dyn EventMetrics>,
}

impl Events {
    /// Queues `o` for the recorder; drops it (counted) when the queue is full.
    pub fn publish(&self, o: Occurrence) {
        if let Err(e) = self.tx.try_send(o) {
            let (mpsc::error::TrySendError::Full(o) | mpsc::error::TrySendError::Closed(o)) = &e;
            tracing::debug!(
                reason = &*o.reason,
                "event queue full or closed: event dropped"
            );
            self.metrics.dropped();
        }
    }
}

/// What makes two occurrences the same (client-go's "isomorphic" events; the reporting
/// controller and instance are the recorder's own, so always equal).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    regarding: (Option<String>, Option<String>, Option<String>),
    related: Option<String>,
    reason: Cow<'static, str>,
    action: Cow<'static, str>,
    type_: EventType,
    note: String,
}

impl Key {
    fn of(o: &Occurrence) -> Self {
        let r = &o.regarding;
        Self {
            namespace: o.namespace.clone(),
            regarding: (r.kind.clone(), r.name.clone(), r.uid.clone()),
            related: o.related.as_ref().and_then(|r| r.name.clone()),
            reason: o.reason.clone(),
            action: o.action.clone(),
            type_: o.type_,
            note: o.note.clone(),
        }
    }
}

/// A published event and its repeats.
struct Entry {
    /// The object that holds it (a new one if it had to be re-created).
    name: String,
    /// To re-create the object if it is gone (the apiserver's event TTL).
    occurrence: Occurrence,
    /// Occurrences so far, and how many of them the object says.
    count: i32,
    written: i32,
    last_observed: jiff::Timestamp,
    /// Tells this entry from a newer one of the same key in the eviction order.
    seq: u64,
}

/// The recorder task: publishes, aggregates and forgets. Run [`Recorder::run`] beside the
/// workers that hold its [`Events`].
pub struct Recorder {
    rx: mpsc::Receiver<Occurrence>,
    client: Client,
    reporting: Reporting,
    metrics: Arc<dyn EventMetrics>,
    leadership: Leadership,
    timing: Timing,
    /// Boxed: an entry is about 500 bytes, and a table sized for `capacity` keeps room for
    /// about twice that many values inline (4 MB at 4,096).
    cache: HashMap<Arc<Key>, Box<Entry>>,
    /// Keys in the order they were first published (eviction order).
    order: VecDeque<(Arc<Key>, u64)>,
    seq: u64,
}

/// A recorder publishing through `client` as `reporting` while `leadership` leads, and the
/// handle the workers publish with.
pub fn recorder(
    client: Client,
    reporting: Reporting,
    leadership: Leadership,
    timing: Timing,
    metrics: Arc<dyn EventMetrics>,
) -> (Events, Recorder) {
    let (tx, rx) = mpsc::channel(timing.queue.max(1));
    (
        Events {
            tx,
            metrics: metrics.clone(),
        },
        Recorder {
            rx,
            client,
            reporting,
            metrics,
            leadership,
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
    pub async fn run(mut self) {
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
        self.metrics.remembered(self.cache.len());
    }

    /// Publishes what the workers handed over together: new objects, created concurrently,
    /// and repeats of remembered events (or of a new one in the same batch).
    async fn record(&mut self, batch: Vec<Occurrence>) {
        if !self.leadership.is_leader() {
            for o in &batch {
                tracing::debug!(
                    reason = &*o.reason,
                    "not the leader any more: event not published"
                );
                self.metrics.api_call("create", "not_leader");
            }
            return;
        }
        // New events with how often they occur in the batch and when they last did.
        let mut fresh: Vec<(Arc<Key>, Occurrence, String, i32, jiff::Timestamp)> = Vec::new();
        let mut index: HashMap<Arc<Key>, usize> = HashMap::new();
        let mut series_now = Vec::new();
        let mut last_nanos = 0;
        for o in batch {
            let key = Arc::new(Key::of(&o));
            if let Some(e) = self.cache.get_mut(&key) {
                e.count = e.count.saturating_add(1);
                e.last_observed = o.at;
                // The first repeat is written at once (a reader learns that it repeats);
                // later ones at the next refresh.
                if e.count == 2 {
                    series_now.push(key);
                }
                continue;
            }
            if let Some(&i) = index.get(&key) {
                fresh[i].3 = fresh[i].3.saturating_add(1);
                fresh[i].4 = o.at;
                continue;
            }
            // Names from a strictly increasing clock: two creates in one batch never collide.
            last_nanos = jiff::Timestamp::now().as_nanosecond().max(last_nanos + 1);
            let name = self.reporting.event_name(&o.regarding, last_nanos);
            let at = o.at;
            index.insert(key.clone(), fresh.len());
            fresh.push((key, o, name, 1, at));
        }
        // One create at a time held the recorder to the apiserver's latency (about 30 events
        // a second on a busy hub): 10,000 new placements filled the queue and a third of
        // their events were dropped.
        let created: Vec<bool> = futures::future::join_all(
            fresh
                .iter()
                .map(|(_, o, name, _, _)| self.create(o, name, None)),
        )
        .await;
        for ((key, occurrence, name, count, last_observed), ok) in fresh.into_iter().zip(created) {
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
                    occurrence,
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
        let leader = self.leadership.is_leader();
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
        if !self.leadership.is_leader() {
            self.metrics.api_call("patch", "not_leader");
            return;
        }
        let series = EventSeries {
            count: e.count,
            last_observed_time: MicroTime(e.last_observed),
        };
        let (count, name, occurrence) = (e.count, e.name.clone(), e.occurrence.clone());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &occurrence.namespace);
        let body = json!({"series": series});
        let result = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await;
        self.metrics.api_call("patch", outcome(&result));
        let written = match result {
            Ok(_) => Some(name),
            Err(e) if is_not_found(&e) => {
                let fresh = self.reporting.event_name(
                    &occurrence.regarding,
                    jiff::Timestamp::now().as_nanosecond(),
                );
                self.create(&occurrence, &fresh, Some(series))
                    .await
                    .then_some(fresh)
            }
            Err(err) => {
                tracing::warn!(reason = &*occurrence.reason, error = %err, "updating an event series failed");
                None
            }
        };
        if let (Some(name), Some(e)) = (written, self.cache.get_mut(key)) {
            e.name = name;
            e.written = count;
        }
    }

    /// Creates the Event object; false (logged and counted) when that failed.
    async fn create(&self, o: &Occurrence, name: &str, series: Option<EventSeries>) -> bool {
        let event = self.reporting.event(o, name.to_owned(), series);
        let api: Api<Event> = Api::namespaced(self.client.clone(), &o.namespace);
        let result = api.create(&PostParams::default(), &event).await;
        self.metrics.api_call("create", outcome(&result));
        match result {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!(reason = &*o.reason, error = %err, "publishing an event failed");
                false
            }
        }
    }
}

fn outcome<T>(result: &Result<T, kube::Error>) -> &'static str {
    match result {
        Ok(_) => "success",
        Err(e) if is_not_found(e) => "not_found",
        Err(e) if is_not_leader(e) => "not_leader",
        Err(_) => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occurrence() -> Occurrence {
        Occurrence {
            namespace: "ns".into(),
            regarding: ObjectReference {
                api_version: Some("cluster.open-cluster-management.io/v1beta1".into()),
                kind: Some("Placement".into()),
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectReference::default()
            },
            related: None,
            type_: EventType::Warning,
            reason: "R".into(),
            action: Cow::Owned("A".to_owned()),
            note: "n".into(),
            at: jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn the_object_says_who_reports_what() {
        let r = Reporting::with_instance("placement-controller", "pod-1");
        let o = occurrence();
        let name = r.event_name(&o.regarding, 255);
        assert_eq!(name, "p.ff");
        let e = r.event(&o, name, None);
        let json = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            json,
            json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "p.ff", "namespace": "ns"},
                "eventTime": "2027-01-15T08:00:00.000000Z",
                "type": "Warning",
                "reason": "R",
                "action": "A",
                "note": "n",
                "regarding": {
                    "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                    "kind": "Placement",
                    "name": "p",
                    "namespace": "ns",
                    "uid": "u"
                },
                "reportingController": "placement-controller",
                "reportingInstance": "pod-1"
            })
        );
        let unnamed = ObjectReference::default();
        assert_eq!(r.event_name(&unnamed, 16), "placement-controller.10");
    }

    #[test]
    fn a_long_note_is_cut_to_what_the_apiserver_takes() {
        assert_eq!(fit_note("short"), "short");
        let exact = "x".repeat(MAX_NOTE);
        assert_eq!(fit_note(&exact), exact);
        // A two-byte character across the cut: cut before it.
        let long = format!("{}é{}", "x".repeat(MAX_NOTE - 15), "y".repeat(100));
        let cut = fit_note(&long);
        assert!(cut.len() <= MAX_NOTE, "{}", cut.len());
        assert!(cut.ends_with("x...(truncated)"), "{cut}");
    }

    #[test]
    fn the_same_occurrence_is_the_same_key() {
        let a = occurrence();
        let mut b = occurrence();
        b.reason = Cow::Owned("R".to_owned());
        b.at = jiff::Timestamp::UNIX_EPOCH;
        assert_eq!(Key::of(&a), Key::of(&b), "borrowed or owned, at any time");
        b.note = "other".into();
        assert_ne!(Key::of(&a), Key::of(&b));
    }
}
