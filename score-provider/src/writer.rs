//! Keeping one `AddOnPlacementScore` per cluster on the hub: create it when missing, then
//! patch its status in the same pass (the CRD has a status subresource, so a create drops the
//! status: upstream's agent shows no scores until its next sync); set `validUntil` and the
//! `AddOnPlacementScoreUpdated` condition; write only when the scores moved (by the
//! hysteresis or more), the condition changed, or `validUntil` is due for renewal.
//!
//! Times (`validUntil`, the condition's `lastTransitionTime`) are the hub's ([`HubClock`]): the
//! scheduler reads them against its own clock. `validUntil` counts from the earliest the hub's
//! clock can read as the write is sent, and renewals are timed by the monotonic clock, so a
//! step of the local wall clock moves neither. A `validUntil` further ahead than one TTL by
//! the hub's clock (written by a clock that was wrong, or before the hub's clock was stepped
//! back) is written again at the next pass. Each status patch carries the
//! `resourceVersion` it was decided on, so a writer that is behind (a second replica, a
//! deposed one) cannot overwrite a newer status: on a conflict it reads the object and
//! decides once more.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use ocm_api::cluster::v1alpha1::AddOnPlacementScoreFields;
use ocm_api::wellknown::score::{CONDITION_UPDATED, MESSAGE_UPDATED, REASON_UPDATED};
use ocm_api::{AddOnPlacementScore, conditions};
use ocm_runtime::write::{
    is_already_exists, is_conflict, is_not_found, is_unauthorized, is_unreachable, preconditioned,
};
use serde_json::json;
use thiserror::Error;

use futures::StreamExt;
use tokio::time::Instant;

use crate::hub::HubClock;
use crate::provider::{Computed, Outcome, Scores};

/// How far a `validUntil` may be beyond one TTL from the hub's now before it is written again:
/// the estimate of the hub's time may move by up to the header's second and a round trip.
const AHEAD_SLACK: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);

/// How the writer writes.
#[derive(Clone, Debug)]
pub struct WriteSettings {
    /// The object's name in each cluster namespace (`resource-usage-score`).
    pub score_name: String,
    /// `validUntil` is set this far ahead at every write.
    pub ttl: Duration,
    /// The refresh period: with `renew_every` equal to it, `validUntil` is renewed once half a
    /// period has passed (by the monotonic clock) since it was written, or less than
    /// `ttl - period/2` of it is left by the hub's clock, so that every periodic refresh renews
    /// it and a change-triggered recompute in between does not.
    pub period: Duration,
    /// How often `validUntil` is renewed when nothing else changed: the period for most
    /// providers; a longer `ttl` allows more (at most `ttl` minus two periods), so that a
    /// steady score costs a write per `renew_every`, not per period. The renewal happens at
    /// the first periodic refresh at least `renew_every - period/2` after the last write, or
    /// once less than `ttl - renew_every + period/2` is left by the hub's clock.
    pub renew_every: Duration,
    /// Score moves smaller than this many points are not written (0: every move is).
    pub hysteresis: u32,
    /// Field manager of the writes and `app.kubernetes.io/managed-by` label of the objects.
    pub manager: String,
}

/// A write that did not happen.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The hub is unreachable or failing (transport errors, 5xx, 429) or refuses our
    /// credentials (401): retry the whole pass later, with backoff.
    #[error("hub unavailable: {0}")]
    Hub(#[source] kube::Error),
    /// The hub refused this cluster's object (403 forbidden, 404 namespace missing, 422
    /// invalid): other clusters go on; this one is tried again at the next refresh.
    #[error("hub refused the write: {0}")]
    Refused(#[source] kube::Error),
}

impl WriteError {
    fn from_kube(e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(_) if is_unauthorized(&e) || is_unreachable(&e) => WriteError::Hub(e),
            kube::Error::Api(_) => WriteError::Refused(e),
            _ => WriteError::Hub(e),
        }
    }

    /// Whether the hub said our credentials are not (or no longer) valid.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, WriteError::Hub(e) if is_unauthorized(e))
    }
}

/// What a write pass did for one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Created the object, then wrote its status.
    Created,
    /// Patched the status.
    Updated,
    /// Nothing to write.
    Unchanged,
}

/// The status as last written (or read), per cluster.
#[derive(Clone, Debug, Default)]
struct Known {
    scores: Scores,
    valid_until: Option<jiff::Timestamp>,
    conditions: Vec<Condition>,
    generation: Option<i64>,
    /// The object's version these values were read or written at: the precondition of the
    /// next patch.
    resource_version: Option<String>,
    /// When `validUntil` is due for renewal on the monotonic clock (`None`: not written by
    /// this process; its renewal goes by the hub's clock alone).
    renew_at: Option<Instant>,
}

/// A write's time: the hub's (best estimate, and the earliest it can be) and the monotonic.
#[derive(Clone, Copy, Debug)]
struct Now {
    hub: jiff::Timestamp,
    earliest: jiff::Timestamp,
    mono: Instant,
}

impl Now {
    fn read(clock: &HubClock) -> Self {
        let mono = Instant::now();
        Self {
            hub: clock.now_at(mono),
            earliest: clock.earliest_at(mono),
            mono,
        }
    }
}

/// The writer and what it knows of each cluster's object.
pub struct ScoreWriter {
    settings: WriteSettings,
    known: BTreeMap<String, Known>,
    /// After [`ScoreWriter::forget`]: the next pass renews every object it writes.
    renew_all: bool,
}

impl ScoreWriter {
    pub fn new(settings: WriteSettings) -> Self {
        Self {
            settings,
            known: BTreeMap::new(),
            renew_all: false,
        }
    }

    /// Forgets what is known of every object, so the next pass reads them again (after the
    /// hub was away: someone may have changed or deleted them meanwhile), and renews every one
    /// it writes: after an outage, validity has run low everywhere at once.
    pub fn forget(&mut self) {
        self.known.clear();
        self.renew_all = true;
    }

    /// Clusters whose object is known (the `writer_known` cache).
    pub fn known_len(&self) -> usize {
        self.known.len()
    }

    /// Writes every cluster of `computed`, `concurrency` at a time, timed by `clock`, and
    /// returns each result in cluster order. What is known of a cluster not in `computed`
    /// (deleted, or not scored this time) is forgotten: its object is read again if it comes
    /// back, and a fleet's churn does not pile up here.
    pub async fn write_all(
        &mut self,
        client: &kube::Client,
        computed: &Computed,
        clock: &HubClock,
        concurrency: usize,
    ) -> Vec<(String, Result<Written, WriteError>)> {
        let renew_all = std::mem::take(&mut self.renew_all);
        // Each job takes what is known of its cluster; what is left belongs to clusters not
        // scored this time, forgotten (their objects are read again if they come back).
        // Owned inputs per job: futures borrowing from a closure's arguments are not `Send`
        // for every lifetime, which the provider's task needs.
        let jobs: Vec<_> = computed
            .iter()
            .map(|(cluster, outcome)| {
                write_owned(
                    self.settings.clone(),
                    client.clone(),
                    cluster.to_owned(),
                    self.known.remove(cluster),
                    renew_all,
                    outcome.clone(),
                    clock.clone(),
                )
            })
            .collect();
        self.known.clear();
        // What each finished job learnt is kept at once: a pass cut short (the runner's write
        // timeout drops this future) loses only its unfinished clusters, so a fleet larger
        // than one pass can write still converges over the following passes.
        let mut stream = futures::stream::iter(jobs).buffer_unordered(concurrency.max(1));
        let mut results = Vec::with_capacity(computed.len());
        while let Some((cluster, known, result)) = stream.next().await {
            if let Some(k) = known {
                self.known.insert(cluster.clone(), k);
            }
            results.push((cluster, result));
        }
        results.sort_by(|a, b| a.0.cmp(&b.0));
        results
    }
}

async fn write_owned(
    settings: WriteSettings,
    client: kube::Client,
    cluster: String,
    known: Option<Known>,
    renew: bool,
    outcome: Outcome,
    clock: HubClock,
) -> (String, Option<Known>, Result<Written, WriteError>) {
    let (known, result) =
        write_one(&settings, &client, &cluster, known, renew, &outcome, &clock).await;
    (cluster, known, result)
}

/// One cluster's write; returns what is known of its object afterwards (`None`: read it again
/// next time).
async fn write_one(
    settings: &WriteSettings,
    client: &kube::Client,
    cluster: &str,
    mut known: Option<Known>,
    renew: bool,
    outcome: &Outcome,
    clock: &HubClock,
) -> (Option<Known>, Result<Written, WriteError>) {
    let api: Api<AddOnPlacementScore> = Api::namespaced(client.clone(), cluster);
    let mut created = false;
    if !clock.synced() {
        // No hub time yet: the read brings it (a response's `Date`) before anything is timed.
        known = None;
    }
    // Two rounds at most: an object deleted under us is created again once, and a status
    // changed under us (409) is read and decided on once more.
    for _ in 0..2 {
        let mut current = match known.take() {
            Some(k) => k,
            None => match read_or_create(settings, &api).await {
                Ok((k, c)) => {
                    created |= c;
                    k
                }
                Err(e) => return (None, Err(e)),
            },
        };
        if renew {
            // Due now (see `ScoreWriter::forget`).
            current.renew_at = Some(Now::read(clock).mono);
        }
        let Some((mut patch, next)) = plan(settings, &current, outcome, Now::read(clock)) else {
            let written = if created {
                Written::Created
            } else {
                Written::Unchanged
            };
            return (Some(current), Ok(written));
        };
        patch = preconditioned(patch, current.resource_version.as_deref());
        let params = PatchParams::apply(&settings.manager);
        match api
            .patch_status(&settings.score_name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(obj) => {
                let mut next = next;
                next.generation = obj.metadata.generation;
                next.resource_version = obj.metadata.resource_version;
                let written = if created {
                    Written::Created
                } else {
                    Written::Updated
                };
                return (Some(next), Ok(written));
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) if is_conflict(&e) => {
                tracing::debug!(
                    cluster,
                    "the status changed since it was read; reading it again"
                );
            }
            // The object may have moved on meanwhile: read it again next time.
            Err(e) => return (None, Err(WriteError::from_kube(e))),
        }
    }
    let gone = kube::core::Status::failure(
        "the AddOnPlacementScore was deleted or changed by another writer twice while being written",
        "Conflict",
    )
    .with_code(409)
    .boxed();
    (None, Err(WriteError::Refused(kube::Error::Api(gone))))
}

/// Reads the object, or creates it (without status: the apiserver would drop it) when
/// missing.
async fn read_or_create(
    settings: &WriteSettings,
    api: &Api<AddOnPlacementScore>,
) -> Result<(Known, bool), WriteError> {
    let name = &settings.score_name;
    if let Some(obj) = api.get_opt(name).await.map_err(WriteError::from_kube)? {
        return Ok((known_from(&obj), false));
    }
    let obj = AddOnPlacementScore {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    settings.manager.clone(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: AddOnPlacementScoreFields {},
        status: None,
    };
    let params = PostParams {
        field_manager: Some(settings.manager.clone()),
        ..PostParams::default()
    };
    match api.create(&params, &obj).await {
        Ok(obj) => Ok((known_from(&obj), true)),
        // Created by someone else meanwhile (a second replica during a rollout).
        Err(e) if is_already_exists(&e) => {
            let obj = api.get(name).await.map_err(WriteError::from_kube)?;
            Ok((known_from(&obj), false))
        }
        Err(e) => Err(WriteError::from_kube(e)),
    }
}

/// The status patch to send, with what will be known after it; `None` when nothing needs
/// writing.
fn plan(
    s: &WriteSettings,
    known: &Known,
    outcome: &Outcome,
    now: Now,
) -> Option<(serde_json::Value, Known)> {
    let mut next = known.clone();
    let (status, reason, message) = match outcome {
        Outcome::Scores(_) => ("True", REASON_UPDATED, MESSAGE_UPDATED),
        Outcome::Unavailable { reason, message } => ("False", reason.as_str(), message.as_str()),
    };
    conditions::set(
        &mut next.conditions,
        CONDITION_UPDATED,
        status,
        reason,
        message,
        now.hub,
    );
    if let Some(c) = next
        .conditions
        .iter_mut()
        .find(|c| c.type_ == CONDITION_UPDATED)
    {
        c.observed_generation = known.generation;
    }
    let condition_changed = next.conditions != known.conditions;
    let Outcome::Scores(scores) = outcome else {
        // Only the condition: the last scores stay until their validUntil.
        return condition_changed.then(|| {
            (
                json!({ "status": { "conditions": next.conditions } }),
                next.clone(),
            )
        });
    };
    let moved = scores.moved_from(&known.scores, s.hysteresis);
    if moved {
        next.scores = scores.clone();
    }
    let ttl = jiff::SignedDuration::try_from(s.ttl).unwrap_or(jiff::SignedDuration::MAX);
    // Never less often than each period, never so seldom that two missed refreshes lapse it.
    let every = s
        .renew_every
        .min(s.ttl.saturating_sub(s.period * 2))
        .max(s.period);
    let renew_below =
        jiff::SignedDuration::try_from(s.ttl.saturating_sub(every).saturating_add(s.period / 2))
            .unwrap_or(jiff::SignedDuration::MAX);
    let renew = known.renew_at.is_some_and(|at| now.mono >= at)
        || known.valid_until.is_none_or(|vu| {
            let left = vu.duration_since(now.hub);
            left < renew_below || left > ttl.saturating_add(AHEAD_SLACK)
        });
    if !(moved || renew || condition_changed) {
        return None;
    }
    let valid_until = valid_until(now.earliest, s.ttl);
    next.valid_until = Some(valid_until);
    next.renew_at = Some(now.mono + every.saturating_sub(s.period / 2));
    let items: Vec<serde_json::Value> = next
        .scores
        .iter()
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect();
    Some((
        json!({ "status": {
            "scores": items,
            "validUntil": valid_until.to_string(),
            "conditions": next.conditions,
        }}),
        next,
    ))
}

/// `now + ttl`, to the second (metav1.Time's precision).
fn valid_until(now: jiff::Timestamp, ttl: Duration) -> jiff::Timestamp {
    let secs = now
        .as_second()
        .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::MAX)
}

fn known_from(obj: &AddOnPlacementScore) -> Known {
    let status = obj.status.clone().unwrap_or_default();
    Known {
        scores: status
            .scores
            .iter()
            .map(|i| (i.name.as_str(), i.value))
            .collect(),
        valid_until: status.valid_until.map(|t| t.0),
        conditions: status.conditions,
        generation: obj.metadata.generation,
        resource_version: obj.metadata.resource_version.clone(),
        renew_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(hysteresis: u32) -> ScoreWriter {
        ScoreWriter::new(WriteSettings {
            score_name: "s".into(),
            ttl: Duration::from_secs(180),
            period: Duration::from_secs(60),
            renew_every: Duration::from_secs(60),
            hysteresis,
            manager: "test".into(),
        })
    }

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).expect("timestamp")
    }

    fn scores(v: i32) -> Outcome {
        Outcome::Scores([("cpu", v)].into_iter().collect())
    }

    /// `s` seconds into the test, with the hub's clock and the monotonic clock agreeing.
    fn now(s: u64) -> Now {
        static BASE: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
        let hub = at(i64::try_from(s).expect("seconds"));
        Now {
            hub,
            earliest: hub,
            mono: *BASE + Duration::from_secs(s),
        }
    }

    /// Applies a plan as the hub would, returning whether something was written.
    fn step(w: &ScoreWriter, known: &mut Known, outcome: &Outcome, now: Now) -> bool {
        match plan(&w.settings, known, outcome, now) {
            Some((_, next)) => {
                *known = next;
                true
            }
            None => false,
        }
    }

    #[test]
    fn first_write_then_renewal_only_at_the_period() {
        let w = writer(0);
        let mut k = Known::default();
        assert!(step(&w, &mut k, &scores(10), now(0)));
        assert_eq!(k.valid_until, Some(at(180)));
        // A change-triggered recompute with the same scores 20 s later: nothing to write.
        assert!(!step(&w, &mut k, &scores(10), now(20)));
        // The periodic refresh a period later renews validUntil.
        assert!(step(&w, &mut k, &scores(10), now(60)));
        assert_eq!(k.valid_until, Some(at(240)));
        // A real move is written at once.
        assert!(step(&w, &mut k, &scores(11), now(61)));
        assert_eq!(k.scores.get("cpu"), Some(11));
    }

    /// A long validity is renewed seldom: a steady score costs a write per `renew_every`
    /// (clamped to leave two periods), not per period.
    #[test]
    fn a_long_validity_is_renewed_at_its_own_pace() {
        let mut w = writer(0);
        w.settings.ttl = Duration::from_secs(600);
        w.settings.renew_every = Duration::from_secs(600);
        let mut k = Known::default();
        assert!(step(&w, &mut k, &scores(10), now(0)));
        for t in (60..=420).step_by(60) {
            assert!(!step(&w, &mut k, &scores(10), now(t)), "no renewal at {t}");
        }
        // 600 - 2 periods: the periodic refresh at 480 renews.
        assert!(step(&w, &mut k, &scores(10), now(480)));
        assert_eq!(k.valid_until, Some(at(1080)));
        // A move is written at once, whatever the renewal pace.
        assert!(step(&w, &mut k, &scores(12), now(500)));
    }

    #[test]
    fn hysteresis_holds_small_moves_but_renews_with_the_held_values() {
        let w = writer(5);
        let mut k = Known::default();
        assert!(step(&w, &mut k, &scores(10), now(0)));
        assert!(!step(&w, &mut k, &scores(14), now(10)));
        assert!(step(&w, &mut k, &scores(14), now(60)), "renewal is due");
        assert_eq!(k.scores.get("cpu"), Some(10), "held value renewed");
        assert!(step(&w, &mut k, &scores(15), now(61)));
        assert_eq!(k.scores.get("cpu"), Some(15));
    }

    #[test]
    fn unavailable_sets_the_condition_and_keeps_scores() {
        let w = writer(0);
        let mut k = Known::default();
        assert!(step(&w, &mut k, &scores(10), now(0)));
        let down = Outcome::Unavailable {
            reason: "NoMetrics".into(),
            message: "no samples".into(),
        };
        let (patch, _) = plan(&w.settings, &k, &down, now(5)).expect("condition changes");
        assert!(patch["status"].get("scores").is_none());
        assert_eq!(patch["status"]["conditions"][0]["status"], "False");
        assert!(step(&w, &mut k, &down, now(5)));
        assert!(
            !step(&w, &mut k, &down, now(65)),
            "no renewal while unavailable"
        );
        assert_eq!(k.valid_until, Some(at(180)));
        // Back: True again with a new transition time.
        assert!(step(&w, &mut k, &scores(10), now(70)));
        let c = &k.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.0),
            ("True", at(70))
        );
    }

    #[test]
    fn the_patch_lists_every_score_and_clears_removed_ones() {
        let w = writer(0);
        let k = Known {
            scores: [("cpu", 1), ("gpu", 2)].into_iter().collect(),
            valid_until: Some(at(100)),
            ..Known::default()
        };
        let (patch, _) = plan(&w.settings, &k, &scores(1), now(0)).expect("gpu went away");
        assert_eq!(
            patch["status"]["scores"],
            json!([{ "name": "cpu", "value": 1 }])
        );
        assert_eq!(patch["status"]["validUntil"], "2027-01-15T08:03:00Z");
        assert_eq!(
            patch["status"]["conditions"][0]["reason"],
            "AddOnPlacementScoreUpdated"
        );
    }

    /// Renewal goes by the monotonic clock: a period later it is due even if the hub's time,
    /// as estimated, has not moved (a step of the hub's clock back, say).
    #[test]
    fn renewal_is_timed_by_the_monotonic_clock() {
        let w = writer(0);
        let mut k = Known::default();
        assert!(step(&w, &mut k, &scores(10), now(0)));
        let later = Now {
            mono: now(60).mono,
            ..now(0)
        };
        assert!(
            step(&w, &mut k, &scores(10), later),
            "due by the monotonic clock"
        );
        // Within half a period of that write, nothing is due.
        let soon = Now {
            mono: later.mono + Duration::from_secs(20),
            ..now(20)
        };
        assert!(!step(&w, &mut k, &scores(10), soon));
    }

    /// A `validUntil` read from the hub that is further ahead than one TTL (written by a
    /// clock that was wrong) is written again, counted from the earliest the hub's time can
    /// be.
    #[test]
    fn a_valid_until_beyond_one_ttl_is_written_again() {
        let w = writer(0);
        let mut k = Known {
            scores: [("cpu", 10)].into_iter().collect(),
            valid_until: Some(at(400 * 86_400)),
            ..Known::default()
        };
        let (_, written) = plan(&w.settings, &k, &scores(10), now(0)).expect("the condition");
        k.conditions = written.conditions;
        let t = Now {
            hub: at(10) + jiff::SignedDuration::from_millis(700),
            earliest: at(10),
            mono: now(10).mono,
        };
        assert!(step(&w, &mut k, &scores(10), t), "400 days ahead");
        assert_eq!(k.valid_until, Some(at(190)));
        // Within one TTL (and the slack): left alone.
        k.renew_at = None;
        k.valid_until = Some(at(10 + 181));
        assert!(!step(&w, &mut k, &scores(10), t));
    }
}
