//! The scheduler's Events, published by `ocm_runtime`'s recorder (off the decision path,
//! repeats folded into series; see [`ocm_runtime::events`]) as `placement-controller`, with
//! the recorder's calls and memory in the scheduler's metrics:
//! `placement_api_writes_total{resource="events"}`, `placement_events_dropped_total` and
//! `placement_cache_entries{cache="event_series"}`.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use ocm_api::wellknown::placement_event::REPORTING_CONTROLLER;
use ocm_runtime::Leadership;
use ocm_runtime::events::{self, EventMetrics, Events, Occurrence, Recorder, Reporting, Timing};
use placement_core::plan::{Event, EventType};

use super::metrics::{CacheLabels, Metrics};

impl EventMetrics for Metrics {
    fn api_call(&self, verb: &'static str, outcome: &'static str) {
        self.api_write(verb, "events", outcome);
    }

    fn dropped(&self) {
        self.events_dropped.inc();
    }

    fn remembered(&self, events: usize) {
        self.cache_entries
            .get_or_create(&CacheLabels {
                cache: "event_series",
            })
            .set(i64::try_from(events).unwrap_or(i64::MAX));
    }
}

/// The recorder the writer feeds (run [`Recorder::run`] beside the workers), publishing
/// while `leadership` leads.
pub(crate) fn recorder(
    client: Client,
    metrics: &Arc<Metrics>,
    leadership: Leadership,
) -> (Events, Recorder) {
    events::recorder(
        client,
        Reporting::new(REPORTING_CONTROLLER),
        leadership,
        Timing::default(),
        metrics.clone(),
    )
}

/// The core's event `e` about the Placement `regarding` (and the PlacementDecision `related`),
/// as the recorder publishes it.
pub(crate) fn occurrence(
    namespace: &str,
    regarding: &ObjectReference,
    related: Option<ObjectReference>,
    e: &Event,
    at: jiff::Timestamp,
) -> Occurrence {
    Occurrence {
        namespace: namespace.to_owned(),
        regarding: regarding.clone(),
        related,
        type_: match e.type_ {
            EventType::Normal => events::EventType::Normal,
            EventType::Warning => events::EventType::Warning,
        },
        reason: Cow::Borrowed(e.reason),
        action: Cow::Borrowed(e.action),
        note: e.note.clone(),
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The Event object is the one the scheduler's own recorder made: `placement-controller`,
    /// the core's type, reason, action and note, the decision as `related`.
    #[test]
    fn a_core_event_becomes_the_same_object() {
        let regarding = ObjectReference {
            api_version: Some("cluster.open-cluster-management.io/v1beta1".into()),
            kind: Some("Placement".into()),
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            ..ObjectReference::default()
        };
        let related = ObjectReference {
            name: Some("p-decision-1".into()),
            ..ObjectReference::default()
        };
        let e = Event {
            type_: EventType::Warning,
            reason: "DecisionUpdate",
            action: "DecisionUpdate",
            note: "n".into(),
            decision: "p-decision-1".into(),
        };
        let o = occurrence(
            "ns",
            &regarding,
            Some(related),
            &e,
            jiff::Timestamp::UNIX_EPOCH,
        );
        let reporting = Reporting::with_instance(REPORTING_CONTROLLER, "pod-1");
        let name = reporting.event_name(&o.regarding, 255);
        let object = serde_json::to_value(reporting.event(&o, name, None)).unwrap_or_default();
        assert_eq!(
            object,
            json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "p.ff", "namespace": "ns"},
                "eventTime": "1970-01-01T00:00:00.000000Z",
                "type": "Warning",
                "reason": "DecisionUpdate",
                "action": "DecisionUpdate",
                "note": "n",
                "regarding": {
                    "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                    "kind": "Placement",
                    "name": "p",
                    "namespace": "ns",
                    "uid": "u"
                },
                "related": {"name": "p-decision-1"},
                "reportingController": "placement-controller",
                "reportingInstance": "pod-1"
            })
        );
    }
}
