//! Events against the real apiserver: one object per published occurrence, repeats folded into
//! a series on one object (and a new object when it is gone), nothing from a standby, and
//! the queue dropping what it cannot hold.
#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use ocm_runtime::events::{self, EventMetrics, EventType, Occurrence, Reporting, Timing};
use ocm_runtime::leader::{LeaderElector, LeaderTimings, Leadership};

const SLACK: Duration = Duration::from_secs(20);

fn occurrence(ns: &str, name: &str, note: &str) -> Occurrence {
    Occurrence {
        namespace: ns.to_owned(),
        regarding: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        },
        related: None,
        type_: EventType::Normal,
        reason: Cow::Borrowed("Tested"),
        action: Cow::Borrowed("Test"),
        note: note.to_owned(),
        at: jiff::Timestamp::now(),
    }
}

/// The calls the recorder reports, by verb and outcome.
#[derive(Default)]
struct Counts {
    calls: parking_lot::Mutex<Vec<(&'static str, &'static str)>>,
    dropped: AtomicUsize,
    remembered: AtomicUsize,
}

impl Counts {
    fn calls(&self, verb: &str, outcome: &str) -> usize {
        let calls = self.calls.lock();
        calls.iter().filter(|c| **c == (verb, outcome)).count()
    }
}

impl EventMetrics for Counts {
    fn api_call(&self, verb: &'static str, outcome: &'static str) {
        self.calls.lock().push((verb, outcome));
    }
    fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
    fn remembered(&self, events: usize) {
        self.remembered.store(events, Ordering::Relaxed);
    }
}

/// The events regarding `name` in `ns`, once `done` holds for them.
async fn events_until(api: &Api<Event>, name: &str, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + SLACK;
    loop {
        let events: Vec<Event> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        if done(&events) {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events of {name}: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn series_count(e: &Event) -> Option<i32> {
    e.series.as_ref().map(|s| s.count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_makes_one_object_per_occurrence() {
    let cp = testenv::shared().await;
    let client = cp.client().unwrap();
    let ns = testenv::namespace(&client, "events-publish").await.unwrap();
    let reporting = Reporting::with_instance("test-controller", "test-pod");
    let o = occurrence(&ns, "cm", "once");
    let created = reporting.publish(&client, &o).await.unwrap();
    let name = format!("cm.{:x}", o.at.as_nanosecond());
    assert_eq!(created.metadata.name.as_deref(), Some(name.as_str()));
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let read = api.get(&name).await.unwrap();
    assert_eq!(
        read.reporting_controller.as_deref(),
        Some("test-controller")
    );
    assert_eq!(read.reporting_instance.as_deref(), Some("test-pod"));
    assert_eq!(read.reason.as_deref(), Some("Tested"));
    assert_eq!(read.action.as_deref(), Some("Test"));
    assert_eq!(read.type_.as_deref(), Some("Normal"));
    assert_eq!(read.note.as_deref(), Some("once"));
    assert_eq!(read.regarding, Some(o.regarding.clone()));
    assert!(read.series.is_none());
    // Microseconds, as events.k8s.io keeps them.
    let at = read.event_time.unwrap().0;
    assert_eq!(at.as_microsecond(), o.at.as_microsecond());
    // The same again, later: a second object (no aggregation here).
    let again = occurrence(&ns, "cm", "once");
    reporting.publish(&client, &again).await.unwrap();
    let both = events_until(&api, "cm", |e| e.len() == 2).await;
    assert!(both.iter().all(|e| e.series.is_none()));
    // A note over 1 kB is cut, not refused.
    let long = occurrence(&ns, "long", &"x".repeat(3000));
    let published = reporting.publish(&client, &long).await.unwrap();
    let note = published.note.unwrap_or_default();
    assert!(note.len() <= events::MAX_NOTE && note.ends_with("...(truncated)"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_become_a_series_on_one_object() {
    let cp = testenv::shared().await;
    let client = cp.client().unwrap();
    let ns = testenv::namespace(&client, "events-series").await.unwrap();
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let counts = Arc::new(Counts::default());
    let timing = Timing {
        refresh: Duration::from_millis(300),
        ..Timing::default()
    };
    let (events, recorder) = events::recorder(
        client.clone(),
        Reporting::with_instance("test-controller", "test-pod"),
        Leadership::always(),
        timing,
        counts.clone(),
    );
    let run = tokio::spawn(recorder.run());

    events.publish(occurrence(&ns, "cm", "again and again"));
    let first = events_until(&api, "cm", |e| e.len() == 1).await;
    assert_eq!(series_count(&first[0]), None);
    // The first repeat is written at once.
    events.publish(occurrence(&ns, "cm", "again and again"));
    events_until(&api, "cm", |e| {
        e.len() == 1 && series_count(&e[0]) == Some(2)
    })
    .await;
    // Later ones at the next refresh.
    events.publish(occurrence(&ns, "cm", "again and again"));
    events_until(&api, "cm", |e| {
        e.len() == 1 && series_count(&e[0]) == Some(3)
    })
    .await;
    // Another note is another event.
    events.publish(occurrence(&ns, "cm", "something else"));
    events_until(&api, "cm", |e| e.len() == 2).await;

    // The object is gone (the apiserver's event TTL): the series is published again as a new
    // object carrying it.
    let old = first[0].metadata.name.clone().unwrap();
    api.delete(&old, &DeleteParams::default()).await.unwrap();
    events.publish(occurrence(&ns, "cm", "again and again"));
    let after = events_until(&api, "cm", |e| {
        e.iter()
            .any(|e| e.metadata.name.as_deref() != Some(&old) && series_count(e) == Some(4))
    })
    .await;
    assert_eq!(after.len(), 2, "{after:#?}");

    drop(events);
    tokio::time::timeout(SLACK, run).await.unwrap().unwrap();
    assert_eq!(counts.remembered.load(Ordering::Relaxed), 2);
    assert_eq!(counts.calls("create", "success"), 3);
    assert_eq!(counts.calls("patch", "not_found"), 1);
    assert!(counts.calls("patch", "success") >= 2);
    assert_eq!(counts.calls("create", "error"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_publishes_nothing_and_a_full_queue_drops() {
    let cp = testenv::shared().await;
    let client = cp.client().unwrap();
    let ns = testenv::namespace(&client, "events-standby").await.unwrap();
    // An elector that never ran: this replica does not lead.
    let elector = LeaderElector::new(
        client.clone(),
        &ns,
        "standby",
        "me",
        LeaderTimings::default(),
    )
    .unwrap();
    let standby = elector.leadership();
    assert!(!standby.is_leader());
    let counts = Arc::new(Counts::default());
    let timing = Timing {
        queue: 2,
        ..Timing::default()
    };
    let (events, recorder) = events::recorder(
        client.clone(),
        Reporting::new("test-controller"),
        standby,
        timing,
        counts.clone(),
    );
    // The recorder is not running yet: two fit in the queue, the third is dropped.
    for note in ["a", "b", "c"] {
        events.publish(occurrence(&ns, "cm", note));
    }
    assert_eq!(counts.dropped.load(Ordering::Relaxed), 1);
    drop(events);
    tokio::time::timeout(SLACK, recorder.run()).await.unwrap();
    assert_eq!(counts.calls("create", "not_leader"), 2);
    let api: Api<Event> = Api::namespaced(client, &ns);
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    drop(elector);
}
