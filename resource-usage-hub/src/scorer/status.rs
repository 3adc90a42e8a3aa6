//! A ScoreDefinition's status from its admission and its last evaluation (sans IO). Written
//! only when it differs from what the object has, so a steady definition costs one status
//! write per evaluation at most (its `lastEvaluationTime`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ocm_api::conditions;
use ocm_api::scoring::{ScoreDefinitionStatus, condition};

use super::admit::Admission;

/// What one evaluation found, for the status.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Clusters rated (accepted, not another provider's).
    pub clusters: usize,
    pub scored: usize,
    /// Without fresh data.
    pub missing: usize,
    /// Withheld, with why.
    pub conflicts: BTreeMap<String, String>,
    /// Series for names that are no accepted ManagedCluster.
    pub unknown: u64,
    /// Series without the cluster label.
    pub unlabelled: u64,
}

/// An evaluation's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The definition's generation it ran.
    pub generation: i64,
    pub at: jiff::Timestamp,
    /// The summary, or the `Evaluated` reason and message of a failure.
    pub outcome: Result<Summary, (&'static str, String)>,
}

/// At most this many characters of a conflicting cluster's name in a message.
const NAME_SHOWN: usize = 63;

/// The status to have, from the current one (`lastTransitionTime`s carry over).
pub fn status(
    current: Option<&ScoreDefinitionStatus>,
    generation: Option<i64>,
    admission: &Admission,
    report: Option<&Report>,
    label: &str,
    now: jiff::Timestamp,
) -> Option<ScoreDefinitionStatus> {
    let mut s = current.cloned().unwrap_or_default();
    let c = &mut s.conditions;
    match admission {
        // The manager's to write.
        Admission::Agents => return None,
        Admission::Refused { reason, message } => {
            conditions::set(c, condition::ACCEPTED, "False", reason, message, now);
            // Nothing is evaluated: what an earlier evaluation said no longer holds.
            c.retain(|x| x.type_ == condition::ACCEPTED);
            s.last_evaluation_time = None;
            s.scored_clusters = None;
        }
        Admission::Admitted(def) => {
            let message = format!(
                "evaluated by the hub scorer every {:?} against the query API, by the cluster label {label:?}",
                def.period
            );
            conditions::set(
                c,
                condition::ACCEPTED,
                "True",
                condition::VALID,
                &message,
                now,
            );
            if let Some(r) = report.filter(|r| Some(r.generation) == generation) {
                evaluated(&mut s, r, label);
                keep_recent_time(&mut s, current, def.period);
            }
        }
    }
    s.observed_generation = generation;
    Some(s)
}

/// An evaluation that says nothing new moves `lastEvaluationTime` only once it is a minute (or
/// a period, if longer) old: a steady definition costs a status write a minute, not one per
/// evaluation.
fn keep_recent_time(
    s: &mut ScoreDefinitionStatus,
    current: Option<&ScoreDefinitionStatus>,
    period: std::time::Duration,
) {
    let Some(old) = current else { return };
    let (Some(old_at), Some(new_at)) = (&old.last_evaluation_time, &s.last_evaluation_time) else {
        return;
    };
    let window = jiff::SignedDuration::try_from(period.max(std::time::Duration::from_secs(60)))
        .unwrap_or(jiff::SignedDuration::MAX);
    let same = ScoreDefinitionStatus {
        last_evaluation_time: old.last_evaluation_time.clone(),
        ..s.clone()
    };
    if same == *old && new_at.0.duration_since(old_at.0) < window {
        s.last_evaluation_time = old.last_evaluation_time.clone();
    }
}

fn evaluated(s: &mut ScoreDefinitionStatus, r: &Report, label: &str) {
    let c = &mut s.conditions;
    let at = r.at;
    s.last_evaluation_time = Some(Time(at));
    let sum = match &r.outcome {
        Err((reason, message)) => {
            conditions::set(c, condition::EVALUATED, "False", reason, message, at);
            return;
        }
        Ok(sum) => sum,
    };
    s.scored_clusters = Some(i32::try_from(sum.scored).unwrap_or(i32::MAX));
    if sum.scored == 0 && sum.clusters > 0 && sum.conflicts.is_empty() {
        let mut message = format!(
            "the queries answered, but no series for any of the {} accepted clusters",
            sum.clusters
        );
        if sum.unknown > 0 || sum.unlabelled > 0 {
            message += &format!(
                "; {} series named no accepted ManagedCluster and {} had no {label:?} label: do the expressions aggregate by {{{{LABEL}}}}?",
                sum.unknown, sum.unlabelled
            );
        }
        conditions::set(
            c,
            condition::EVALUATED,
            "False",
            condition::NO_SERIES,
            &message,
            at,
        );
    } else {
        let message = format!(
            "scored {} of {} clusters; {} without fresh data, {} withheld for conflicting series",
            sum.scored,
            sum.clusters,
            sum.missing,
            sum.conflicts.len()
        );
        conditions::set(
            c,
            condition::EVALUATED,
            "True",
            condition::SCORED,
            &message,
            at,
        );
    }
    match sum.conflicts.iter().next() {
        None => conditions::set(
            c,
            condition::SERIES_CONSISTENT,
            "True",
            condition::CONSISTENT,
            "every cluster's series agree",
            at,
        ),
        Some((cluster, why)) => {
            let shown: String = cluster.chars().take(NAME_SHOWN).collect();
            let message = format!(
                "{} cluster(s) withheld because series under their name disagree; first {shown:?}: {why}",
                sum.conflicts.len()
            );
            conditions::set(
                c,
                condition::SERIES_CONSISTENT,
                "False",
                condition::CONFLICTING_SERIES,
                &message,
                at,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use score_provider::definition::{Caps, compile};

    fn admitted() -> Admission {
        let spec: ocm_api::scoring::ScoreDefinitionSpec =
            serde_json::from_value(serde_json::json!({
                "scoreName": "s", "refreshPeriod": "30s",
                "scores": [{"name": "a", "expression": "x", "normalise": {"type": "Rank"}}]
            }))
            .expect("spec");
        Admission::Admitted(Box::new(
            compile(&spec, "cluster", &Caps::default(), false).expect("valid"),
        ))
    }

    fn summary(scored: usize, conflicts: &[&str]) -> Summary {
        Summary {
            clusters: 3,
            scored,
            missing: 3 - scored - conflicts.len(),
            conflicts: conflicts
                .iter()
                .map(|c| ((*c).to_owned(), "values 1, 2".to_owned()))
                .collect(),
            unknown: 4,
            unlabelled: 0,
        }
    }

    fn cond<'a>(s: &'a ScoreDefinitionStatus, t: &str) -> (&'a str, &'a str, &'a str) {
        let c = conditions::find(&s.conditions, t).expect(t);
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn conditions_follow_admission_and_evaluation() {
        let t0 = jiff::Timestamp::from_second(1_000).expect("time");
        let t1 = jiff::Timestamp::from_second(1_060).expect("time");
        let a = admitted();
        let report = |outcome| Report {
            generation: 2,
            at: t0,
            outcome,
        };
        // Accepted, scored, consistent.
        let s = status(
            None,
            Some(2),
            &a,
            Some(&report(Ok(summary(3, &[])))),
            "cluster",
            t0,
        )
        .expect("ours");
        assert_eq!(cond(&s, condition::ACCEPTED).1, condition::VALID);
        assert_eq!(cond(&s, condition::EVALUATED).1, condition::SCORED);
        assert_eq!(cond(&s, condition::SERIES_CONSISTENT).0, "True");
        assert_eq!(
            (s.scored_clusters, s.observed_generation),
            (Some(3), Some(2))
        );
        // A conflict names the first cluster; the transition time moves, the other's not.
        let s2 = status(
            Some(&s),
            Some(2),
            &a,
            Some(&Report {
                at: t1,
                ..report(Ok(summary(2, &["b"])))
            }),
            "cluster",
            t1,
        )
        .expect("ours");
        let (st, reason, message) = cond(&s2, condition::SERIES_CONSISTENT);
        assert_eq!((st, reason), ("False", condition::CONFLICTING_SERIES));
        assert!(
            message.contains("\"b\"") && message.contains("values 1, 2"),
            "{message}"
        );
        let accepted = conditions::find(&s2.conditions, condition::ACCEPTED).expect("accepted");
        assert_eq!(accepted.last_transition_time.0, t0);
        // No series at all: the message points at the label.
        let s3 = status(
            Some(&s),
            Some(2),
            &a,
            Some(&report(Ok(summary(0, &[])))),
            "tenant",
            t0,
        )
        .expect("ours");
        let (st, reason, message) = cond(&s3, condition::EVALUATED);
        assert_eq!((st, reason), ("False", condition::NO_SERIES));
        assert!(
            message.contains("4 series") && message.contains("\"tenant\""),
            "{message}"
        );
        // A failed query.
        let s4 = status(
            Some(&s),
            Some(2),
            &a,
            Some(&report(Err((condition::LIMIT_EXCEEDED, "too many".into())))),
            "c",
            t0,
        )
        .expect("ours");
        assert_eq!(cond(&s4, condition::EVALUATED).1, condition::LIMIT_EXCEEDED);
        // The same outcome a little later writes nothing new; a minute later, the time.
        let again = |at| Report {
            at,
            ..report(Ok(summary(3, &[])))
        };
        let t30 = jiff::Timestamp::from_second(1_030).expect("time");
        let t70 = jiff::Timestamp::from_second(1_070).expect("time");
        assert_eq!(
            status(Some(&s), Some(2), &a, Some(&again(t30)), "cluster", t30).as_ref(),
            Some(&s)
        );
        let later = status(Some(&s), Some(2), &a, Some(&again(t70)), "cluster", t70).expect("ours");
        assert_eq!(later.last_evaluation_time.map(|t| t.0), Some(t70));
        // A report of an older generation says nothing about this one.
        let s5 = status(
            None,
            Some(3),
            &a,
            Some(&report(Ok(summary(3, &[])))),
            "c",
            t0,
        )
        .expect("ours");
        assert!(conditions::find(&s5.conditions, condition::EVALUATED).is_none());
        // Refused: only Accepted remains.
        let refused = Admission::Refused {
            reason: condition::SCORE_NAME_TAKEN,
            message: "older".into(),
        };
        let s6 = status(Some(&s2), Some(2), &refused, None, "c", t1).expect("ours");
        assert_eq!(s6.conditions.len(), 1);
        assert_eq!(
            cond(&s6, condition::ACCEPTED),
            ("False", condition::SCORE_NAME_TAKEN, "older")
        );
        assert_eq!(s6.scored_clusters, None);
        assert!(status(None, Some(1), &Admission::Agents, None, "c", t0).is_none());
    }
}
