//! Applying an outcome to the hub: the planned PlacementDecision writes in order, their
//! events, and the Placement status when it changed. Each call is retried with backoff on
//! throttling and transient errors; a write that still fails is returned, never dropped.
//! What is written is put into the shared state at once (write-through), so a reschedule that
//! runs before the watch event arrives does not plan the same writes again.
//!
//! Only the leader writes, and only what it computed from the objects as they still are:
//!
//! - leadership is checked before every attempt, retries included, and by the event recorder
//!   before every event (the hub client checks it once more as each request goes out, after
//!   the rate limiter's wait);
//! - every patch and delete of an existing object carries the `resourceVersion` (deletes also
//!   the `uid`) of the object the outcome was computed from, or of our own write of it since.
//!   A 409 Conflict means someone else (a newer leader, a user) wrote it meanwhile: the write
//!   is not retried with the same body; the placement is scheduled again from the new state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use ocm_api::{Placement, PlacementDecision};
use ocm_runtime::Leadership;
use ocm_runtime::events::{Events, Recorder};
use ocm_runtime::leader::NotLeader;
use ocm_runtime::write::{
    self, is_already_exists, is_conflict, is_not_found, is_not_leader, is_unreachable,
};
use serde_json::json;
use thiserror::Error;

use super::events;
use super::metrics::Metrics;
use super::state::{OwnWrite, Shared};
use super::triggers::Key;
use placement_core::Outcome;
use placement_core::plan::{Event, PlannedWrite, Write};

#[derive(Debug, Error)]
pub(crate) enum WriteError {
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

pub(crate) struct Writer {
    client: Client,
    events: Events,
    metrics: Arc<Metrics>,
    leadership: Leadership,
}

/// The `resourceVersion` and `uid` of the PlacementDecisions an outcome was computed from, by
/// name; our own writes update it. Taken from the same snapshot as the schedule.
#[derive(Clone, Debug, Default)]
pub(crate) struct Versions(BTreeMap<String, (String, String)>);

impl Versions {
    /// The versions of the decisions `outcome` writes, as `snapshot` has them.
    pub(crate) fn of(snapshot: &placement_core::Snapshot, outcome: &Outcome) -> Self {
        let mut out = BTreeMap::new();
        for pw in &outcome.writes {
            let name = pw.write.decision_name();
            if let Some(d) = snapshot.decision(&outcome.namespace, name)
                && let (Some(rv), Some(uid)) = (&d.metadata.resource_version, &d.metadata.uid)
            {
                out.insert(name.to_owned(), (rv.clone(), uid.clone()));
            }
        }
        Self(out)
    }

    fn resource_version(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|(rv, _)| rv.as_str())
    }

    fn wrote(&mut self, d: &PlacementDecision) {
        if let (Some(name), Some(rv), Some(uid)) = (
            &d.metadata.name,
            &d.metadata.resource_version,
            &d.metadata.uid,
        ) {
            self.0.insert(name.clone(), (rv.clone(), uid.clone()));
        }
    }

    /// Delete parameters: only the object we computed from, not one re-created or changed
    /// since (unconditional when we know none).
    fn delete_params(&self, name: &str) -> kube::api::DeleteParams {
        let (rv, uid) = self
            .0
            .get(name)
            .map(|(rv, uid)| (rv.as_str(), uid.as_str()))
            .unzip();
        write::delete_params(uid, rv)
    }
}

/// What `write` leaves on its object, so that its watch event is known for ours.
fn own_write(write: &Write) -> OwnWrite {
    match write {
        Write::Create(d) => OwnWrite {
            labels: d.metadata.labels.clone(),
            // The create shows no decisions; the status patch after it shows them.
            entries: vec![
                Vec::new(),
                d.status
                    .as_ref()
                    .map(|s| s.decisions.clone())
                    .unwrap_or_default(),
            ],
            delete: false,
        },
        Write::Status { status, .. } => OwnWrite {
            entries: vec![status.decisions.clone()],
            ..OwnWrite::default()
        },
        Write::Labels { labels, .. } => OwnWrite {
            labels: Some(labels.clone()),
            ..OwnWrite::default()
        },
        Write::Annotations { .. } => OwnWrite::default(),
        Write::Delete { .. } => OwnWrite {
            delete: true,
            ..OwnWrite::default()
        },
    }
}

/// Our patches ask the apiserver to drop fields its CRD does not know without a warning
/// (`fieldValidation=Ignore`). With the default (`Warn`) it sends one `Warning` header per
/// dropped field, and a hundred of them (a score per decision, on an OCM 1.2 hub whose schema
/// `schema::learn_score_fields` has not read yet) exceed the HTTP client's header limit: the
/// write of a full PlacementDecision failed.
fn patch_params() -> PatchParams {
    PatchParams::default().validation_ignore()
}

fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(5))
        .with_max_times(6)
        .with_jitter()
}

impl Writer {
    /// The writer, and the event recorder it feeds: run [`Recorder::run`] beside the workers.
    pub(crate) fn new(
        client: Client,
        metrics: Arc<Metrics>,
        leadership: Leadership,
    ) -> (Self, Recorder) {
        let (events, recorder) = events::recorder(client.clone(), &metrics, leadership.clone());
        let writer = Self {
            client,
            events,
            metrics,
            leadership,
        };
        (writer, recorder)
    }

    fn check_leader(&self, what: &str) -> Result<(), WriteError> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(WriteError::NotLeader(what.to_owned()))
        }
    }

    /// Runs one API call with retries, counting it by verb and result. Leadership is checked
    /// before every attempt: a retry after the lease ran out is not sent.
    async fn call<T, F, Fut>(
        &self,
        verb: &'static str,
        resource: &'static str,
        what: &str,
        mut f: F,
    ) -> Result<T, WriteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let attempt = || {
            let call = self.leadership.is_leader().then(&mut f);
            async move {
                match call {
                    Some(call) => call.await,
                    None => Err(kube::Error::Service(Box::new(NotLeader {
                        method: verb.to_owned(),
                        path: what.to_owned(),
                    }))),
                }
            }
        };
        // Throttling, server errors and connection failures are worth another try. A conflict
        // is not: our precondition failed, so the body was computed from an outdated object.
        let result = attempt
            .retry(backoff())
            .when(is_unreachable)
            .notify(|e, d| tracing::debug!(verb, what, error = %e, after = ?d, "retrying"))
            .await;
        let outcome = match &result {
            Ok(_) => "success",
            Err(e) if is_not_found(e) => "not_found",
            Err(e) if is_already_exists(e) => "already_exists",
            Err(e) if is_conflict(e) => "conflict",
            Err(e) if is_not_leader(e) => "not_leader",
            Err(_) => "error",
        };
        self.metrics.api_write(verb, resource, outcome);
        result.map_err(|source| {
            if is_not_leader(&source) {
                WriteError::NotLeader(what.to_owned())
            } else {
                WriteError::Api {
                    verb,
                    what: what.to_owned(),
                    source,
                }
            }
        })
    }

    /// Applies the outcome's writes and the Placement status. Returns the placements to
    /// schedule again: the Placement read back from the status write may carry a spec change
    /// whose own watch event is then no news to the cache.
    ///
    /// `versions` are the decisions' versions the outcome was computed from
    /// ([`Versions::of`]); the Placement's is `placement`'s.
    pub(crate) async fn apply(
        &self,
        state: &Shared,
        placement: &Placement,
        outcome: &Outcome,
        mut versions: Versions,
    ) -> Result<BTreeSet<Key>, WriteError> {
        let ns = &outcome.namespace;
        let decisions: Api<PlacementDecision> = Api::namespaced(self.client.clone(), ns);
        for pw in &outcome.writes {
            self.write_through(state, &decisions, ns, pw, &mut versions)
                .await?;
            self.emit(placement, &pw.events);
        }
        if placement.status.as_ref() == Some(&outcome.placement_status) {
            return Ok(BTreeSet::new());
        }
        self.write_status(state, placement, outcome).await
    }

    /// One planned write, and the object as written into the cache (write-through). Its
    /// watch event, which may come first, is known for ours while it is in flight.
    async fn write_through(
        &self,
        state: &Shared,
        api: &Api<PlacementDecision>,
        ns: &str,
        pw: &PlannedWrite,
        versions: &mut Versions,
    ) -> Result<(), WriteError> {
        let name = pw.write.decision_name();
        let what = format!("PlacementDecision {ns}/{name}");
        self.check_leader(&what)?;
        state.write().own_write(ns, name, own_write(&pw.write));
        let written = match self.write(api, pw, &what, versions).await {
            Ok(w) => w,
            Err(e) => {
                state.write().own_write_done(ns, name);
                return Err(e);
            }
        };
        let mut st = state.write();
        // What this moved is not acted on here: its placement is the one being scheduled,
        // and the pass counts its own move against the snapshot it was computed from
        // (`pass::moves`).
        let _moved = match written {
            Some(d) => {
                versions.wrote(&d);
                st.apply_decision(d)
            }
            None => st.delete_decision(ns, name),
        };
        st.own_write_done(ns, name);
        Ok(())
    }

    /// The Placement's status, preconditioned on the Placement the outcome was computed
    /// from; returns the placements to schedule again (see [`Writer::apply`]).
    async fn write_status(
        &self,
        state: &Shared,
        placement: &Placement,
        outcome: &Outcome,
    ) -> Result<BTreeSet<Key>, WriteError> {
        let ns = &outcome.namespace;
        let what = format!("Placement {ns}/{}", outcome.name);
        self.check_leader(&what)?;
        let placements: Api<Placement> = Api::namespaced(self.client.clone(), ns);
        let body = write::preconditioned(
            json!({"status": outcome.placement_status}),
            placement.metadata.resource_version.as_deref(),
        );
        let (pp, patch) = (patch_params(), Patch::Merge(&body));
        let patched = self
            .call("patch", "placements/status", &what, || {
                placements.patch_status(&outcome.name, &pp, &patch)
            })
            .await;
        match patched {
            Ok(p) => Ok(state.write().apply_placement(p)),
            // Deleted meanwhile: its decisions go with it (owner references).
            Err(WriteError::Api { source, .. }) if is_not_found(&source) => Ok(BTreeSet::new()),
            Err(e) => Err(e),
        }
    }

    /// One planned write; returns the object as written, `None` once deleted.
    async fn write(
        &self,
        api: &Api<PlacementDecision>,
        pw: &PlannedWrite,
        what: &str,
        versions: &Versions,
    ) -> Result<Option<PlacementDecision>, WriteError> {
        let rv = |name: &str| versions.resource_version(name);
        let written = match &pw.write {
            Write::Create(d) => self.create(api, pw.write.decision_name(), d, what).await?,
            // A merge patch replaces the decisions list as a whole.
            Write::Status { name, status } => {
                let body = json!({"status": status});
                self.patch_status(api, name, body, rv(name), what).await?
            }
            Write::Labels { name, labels } => {
                let body = json!({"metadata": {"labels": labels}});
                self.patch(api, name, body, rv(name), what).await?
            }
            Write::Annotations { name, annotations } => {
                let body = json!({"metadata": {"annotations": annotations}});
                self.patch(api, name, body, rv(name), what).await?
            }
            Write::Delete { name } => {
                self.delete(api, name, versions, what).await?;
                return Ok(None);
            }
        };
        Ok(Some(written))
    }

    /// Creates the decision, then writes its status (the apiserver drops status on create).
    async fn create(
        &self,
        api: &Api<PlacementDecision>,
        name: &str,
        d: &PlacementDecision,
        what: &str,
    ) -> Result<PlacementDecision, WriteError> {
        let mut body = d.clone();
        let status = body.status.take();
        let (current, created) = self.create_or_adopt(api, name, &body, what).await?;
        // An empty status needs no write.
        let empty = status.as_ref().is_none_or(|s| s.decisions.is_empty());
        if created && empty {
            return Ok(current);
        }
        // The status goes onto the object just written, not onto a newer one.
        let rv = current.metadata.resource_version.as_deref();
        self.patch_status(api, name, json!({"status": status}), rv, what)
            .await
    }

    /// Creates `body`; returns the object as it is now, and whether we created it.
    async fn create_or_adopt(
        &self,
        api: &Api<PlacementDecision>,
        name: &str,
        body: &PlacementDecision,
        what: &str,
    ) -> Result<(PlacementDecision, bool), WriteError> {
        let post = PostParams::default();
        let created = self
            .call("create", "placementdecisions", what, || {
                api.create(&post, body)
            })
            .await;
        match created {
            Ok(c) => Ok((c, true)),
            // Our cache was behind: the object exists; make its labels and status ours.
            Err(WriteError::Api { source, .. }) if is_already_exists(&source) => {
                let mut labels = json!({"metadata": {"labels": body.metadata.labels}});
                // Ours only, and only when we set some (null would remove them all).
                if let Some(a) = &body.metadata.annotations {
                    labels["metadata"]["annotations"] = json!(a);
                }
                let patched = self.patch(api, name, labels, None, what).await?;
                Ok((patched, false))
            }
            Err(e) => Err(e),
        }
    }

    /// A merge patch of the decision's status, applied only to version `rv` when given.
    async fn patch_status(
        &self,
        api: &Api<PlacementDecision>,
        name: &str,
        body: serde_json::Value,
        rv: Option<&str>,
        what: &str,
    ) -> Result<PlacementDecision, WriteError> {
        let (pp, body) = (patch_params(), write::preconditioned(body, rv));
        let patch = Patch::Merge(&body);
        self.call("patch", "placementdecisions/status", what, || {
            api.patch_status(name, &pp, &patch)
        })
        .await
    }

    /// A merge patch of the decision's metadata, applied only to version `rv` when given.
    async fn patch(
        &self,
        api: &Api<PlacementDecision>,
        name: &str,
        body: serde_json::Value,
        rv: Option<&str>,
        what: &str,
    ) -> Result<PlacementDecision, WriteError> {
        let (pp, body) = (patch_params(), write::preconditioned(body, rv));
        let patch = Patch::Merge(&body);
        self.call("patch", "placementdecisions", what, || {
            api.patch(name, &pp, &patch)
        })
        .await
    }

    /// Deletes the decision the outcome was computed from, not one re-created since (one
    /// already gone counts as deleted).
    async fn delete(
        &self,
        api: &Api<PlacementDecision>,
        name: &str,
        versions: &Versions,
        what: &str,
    ) -> Result<(), WriteError> {
        let dp = versions.delete_params(name);
        let deleted = self
            .call("delete", "placementdecisions", what, || {
                api.delete(name, &dp)
            })
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(WriteError::Api { source, .. }) if is_not_found(&source) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands events (regarding the Placement, related to their decision if they name one)
    /// to the recorder ([`super::events`]) without waiting: an event never delays a write,
    /// and one that cannot be published never fails it.
    pub(crate) fn emit(&self, placement: &Placement, to_emit: &[Event]) {
        let regarding: ObjectReference = placement.object_ref(&());
        let namespace = placement.metadata.namespace.clone().unwrap_or_default();
        let at = jiff::Timestamp::now();
        for e in to_emit {
            let related = (!e.decision.is_empty()).then(|| ObjectReference {
                api_version: Some(PlacementDecision::api_version(&()).into_owned()),
                kind: Some(PlacementDecision::kind(&()).into_owned()),
                name: Some(e.decision.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectReference::default()
            });
            self.events
                .publish(events::occurrence(&namespace, &regarding, related, e, at));
        }
    }
}
