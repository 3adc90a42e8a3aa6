//! Applying an outcome to the hub: the planned PlacementDecision writes in order, their
//! events, and the Placement status when it changed. Each call is retried with backoff on
//! conflicts and transient errors; a write that still fails is returned, never dropped.
//! What is written is put into the shared state at once (write-through), so a reschedule that
//! runs before the watch event arrives does not plan the same writes again.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use ocm_api::{Placement, PlacementDecision};
use serde_json::json;
use thiserror::Error;

use std::collections::BTreeSet;

use super::Leader;
use super::metrics::Metrics;
use super::state::Shared;
use super::triggers::Key;
use crate::core::Outcome;
use crate::core::plan::{Event, EventType, PlannedWrite, Write};

#[derive(Debug, Error)]
pub enum WriteError {
    #[error("not the leader any more: {0} not written")]
    NotLeader(String),
    #[error("{verb} {what}: {source}")]
    Api {
        verb: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Writer {
    client: Client,
    /// `reportingInstance` of our events (the pod or host name).
    instance: String,
    metrics: Arc<Metrics>,
    leader: Arc<dyn Leader>,
}

/// Conflicts, throttling, server errors and connection failures are worth another try.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 409 || s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(5))
        .with_max_times(6)
        .with_jitter()
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

impl Writer {
    pub fn new(client: Client, metrics: Arc<Metrics>, leader: Arc<dyn Leader>) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| REPORTER.to_owned());
        Self {
            client,
            instance,
            metrics,
            leader,
        }
    }

    fn check_leader(&self, what: &str) -> Result<(), WriteError> {
        if self.leader.is_leader() {
            Ok(())
        } else {
            Err(WriteError::NotLeader(what.to_owned()))
        }
    }

    /// Runs one API call with retries, counting it by verb and result.
    async fn call<T, F, Fut>(
        &self,
        verb: &'static str,
        resource: &'static str,
        what: &str,
        f: F,
    ) -> Result<T, WriteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let result = f
            .retry(backoff())
            .when(|e| transient(e) && !already_exists(e))
            .notify(|e, d| tracing::debug!(verb, what, error = %e, after = ?d, "retrying"))
            .await;
        let outcome = match &result {
            Ok(_) => "success",
            Err(e) if not_found(e) => "not_found",
            Err(e) if already_exists(e) => "already_exists",
            Err(_) => "error",
        };
        self.metrics.api_write(verb, resource, outcome);
        result.map_err(|source| WriteError::Api {
            verb,
            what: what.to_owned(),
            source,
        })
    }

    /// Applies the outcome's writes and the Placement status. Returns the placements to
    /// schedule again: the Placement read back from the status write may carry a spec change
    /// whose own watch event is then no news to the cache.
    pub async fn apply(
        &self,
        state: &Shared,
        placement: &Placement,
        outcome: &Outcome,
    ) -> Result<BTreeSet<Key>, WriteError> {
        let mut again = BTreeSet::new();
        let ns = &outcome.namespace;
        let decisions: Api<PlacementDecision> = Api::namespaced(self.client.clone(), ns);
        for pw in &outcome.writes {
            let name = pw.write.decision_name().to_owned();
            let what = format!("PlacementDecision {ns}/{name}");
            self.check_leader(&what)?;
            let written = self.write(&decisions, pw, &what).await?;
            {
                let mut st = state.write();
                // Through the same path as a watch event, so that Balance users hear of it.
                match written {
                    Some(d) => {
                        st.apply_decision(d);
                    }
                    None => {
                        st.delete_decision(ns, &name);
                    }
                }
            }
            self.emit(placement, &pw.events).await;
        }
        if placement.status.as_ref() != Some(&outcome.placement_status) {
            let what = format!("Placement {ns}/{}", outcome.name);
            self.check_leader(&what)?;
            let placements: Api<Placement> = Api::namespaced(self.client.clone(), ns);
            let body = json!({"status": outcome.placement_status});
            let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
            let patched = self
                .call("patch", "placements/status", &what, || {
                    placements.patch_status(&outcome.name, &pp, &patch)
                })
                .await;
            match patched {
                Ok(p) => {
                    again.extend(state.write().apply_placement(p));
                }
                // Deleted meanwhile: its decisions go with it (owner references).
                Err(WriteError::Api { source, .. }) if not_found(&source) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(again)
    }

    /// One planned write; returns the object as written, `None` once deleted.
    async fn write(
        &self,
        api: &Api<PlacementDecision>,
        pw: &PlannedWrite,
        what: &str,
    ) -> Result<Option<PlacementDecision>, WriteError> {
        let pp = PatchParams::default();
        match &pw.write {
            Write::Create(d) => {
                let name = pw.write.decision_name();
                let mut body = (**d).clone();
                let status = body.status.take();
                let post = PostParams::default();
                let created = match self
                    .call("create", "placementdecisions", what, || {
                        api.create(&post, &body)
                    })
                    .await
                {
                    Ok(c) => Some(c),
                    // Our cache was behind: the object exists; make its labels and status ours.
                    Err(WriteError::Api { source, .. }) if already_exists(&source) => {
                        let labels = json!({"metadata": {"labels": body.metadata.labels}});
                        let patch = Patch::Merge(&labels);
                        self.call("patch", "placementdecisions", what, || {
                            api.patch(name, &pp, &patch)
                        })
                        .await?;
                        None
                    }
                    Err(e) => return Err(e),
                };
                // The apiserver drops status on create; an empty one needs no write.
                let empty = status.as_ref().is_none_or(|s| s.decisions.is_empty());
                if let (Some(c), true) = (&created, empty) {
                    return Ok(Some(c.clone()));
                }
                let status = json!({"status": status});
                let patch = Patch::Merge(&status);
                let written = self
                    .call("patch", "placementdecisions/status", what, || {
                        api.patch_status(name, &pp, &patch)
                    })
                    .await?;
                Ok(Some(written))
            }
            Write::Status { name, status } => {
                // A merge patch replaces the decisions list as a whole.
                let body = json!({"status": status});
                let patch = Patch::Merge(&body);
                let written = self
                    .call("patch", "placementdecisions/status", what, || {
                        api.patch_status(name, &pp, &patch)
                    })
                    .await?;
                Ok(Some(written))
            }
            Write::Labels { name, labels } => {
                let body = json!({"metadata": {"labels": labels}});
                let patch = Patch::Merge(&body);
                let written = self
                    .call("patch", "placementdecisions", what, || {
                        api.patch(name, &pp, &patch)
                    })
                    .await?;
                Ok(Some(written))
            }
            Write::Delete { name } => {
                let dp = DeleteParams::default();
                match self
                    .call("delete", "placementdecisions", what, || {
                        api.delete(name, &dp)
                    })
                    .await
                {
                    Ok(_) => Ok(None),
                    Err(WriteError::Api { source, .. }) if not_found(&source) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Publishes events (regarding the Placement, related to their decision if they name
    /// one). An event that cannot be published is logged and counted; it never fails the
    /// write.
    pub async fn emit(&self, placement: &Placement, to_emit: &[Event]) {
        // Written directly (events.k8s.io/v1), one object per event, as client-go's event
        // recorder does. kube-runtime's Recorder keeps every event of the last minutes in a
        // cache it scans on each publish, which costs O(events) CPU and memory per event at
        // scale (a 10,000-placement run spent most of its CPU there).
        let regarding: ObjectReference = placement.object_ref(&());
        let ns = placement.metadata.namespace.clone().unwrap_or_default();
        let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), &ns);
        for e in to_emit {
            let now = jiff::Timestamp::now();
            let related = (!e.decision.is_empty()).then(|| ObjectReference {
                api_version: Some(PlacementDecision::api_version(&()).into_owned()),
                kind: Some(PlacementDecision::kind(&()).into_owned()),
                name: Some(e.decision.clone()),
                namespace: Some(ns.clone()),
                ..ObjectReference::default()
            });
            let event = KubeEvent {
                metadata: ObjectMeta {
                    name: Some(format!(
                        "{}.{:x}",
                        placement.metadata.name.as_deref().unwrap_or(REPORTER),
                        now.as_nanosecond()
                    )),
                    namespace: Some(ns.clone()),
                    ..ObjectMeta::default()
                },
                event_time: Some(MicroTime(now)),
                type_: Some(
                    match e.type_ {
                        EventType::Normal => "Normal",
                        EventType::Warning => "Warning",
                    }
                    .to_owned(),
                ),
                reason: Some(e.reason.to_owned()),
                action: Some(e.action.to_owned()),
                note: Some(e.note.clone()),
                regarding: Some(regarding.clone()),
                related,
                reporting_controller: Some(REPORTER.to_owned()),
                reporting_instance: Some(self.instance.clone()),
                ..KubeEvent::default()
            };
            let result = events.create(&PostParams::default(), &event).await;
            self.metrics.api_write(
                "create",
                "events",
                if result.is_ok() { "success" } else { "error" },
            );
            if let Err(err) = result {
                tracing::warn!(reason = e.reason, error = %err, "publishing an event failed");
            }
        }
    }
}

const REPORTER: &str = ocm_api::wellknown::placement_event::REPORTING_CONTROLLER;
