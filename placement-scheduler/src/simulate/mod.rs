//! `simulate`: schedule every Placement found in YAML files, with no cluster at all, and
//! explain the result (decisions, per-prioritizer scores, why clusters were dropped), or print
//! the PlacementDecisions and Placement status the controller would write.

pub mod input;
pub mod report;

use jiff::Timestamp;

pub use input::{InputError, Objects, Source};
use placement_core::snapshot::MaxScoreValidity;
use placement_core::{Limits, Outcome};

/// One Placement's result (or why it was skipped).
pub struct Simulated {
    pub placement: ocm_api::Placement,
    pub outcome: Option<Outcome>,
    /// Where the scores it reads come from: each AddOnPlacementScore name its prioritizers
    /// read, with the ScoreDefinition that fills it, if the input has one. Documentation only:
    /// scheduling reads the AddOnPlacementScores themselves.
    pub sources: Vec<(String, Option<String>)>,
}

/// The AddOnPlacementScore names the placement's prioritizers read.
pub fn score_resources(p: &ocm_api::Placement) -> std::collections::BTreeSet<String> {
    p.spec
        .prioritizer_policy
        .configurations
        .iter()
        .filter_map(|c| c.score_coordinate.as_ref())
        // Any AddOn coordinate, whatever its type says: reading one more is harmless.
        .filter_map(|s| s.add_on.as_ref())
        .map(|a| a.resource_name.clone())
        .filter(|r| !r.is_empty())
        .collect()
}

/// Schedules every Placement of `objects` (optionally only `only`, as `ns/name`) at `now`.
/// Placements are scheduled independently against the same input.
///
/// `max_score_validity` is the controller's bound on `validUntil`. It counts from when the hub
/// last accepted a write of a score (its `managedFields` time, as `kubectl get -o yaml`
/// shows it, else its `creationTimestamp`); a file that carries neither makes it count from
/// `now`: it never ends such a score at the simulated instant, and a `validUntil` beyond it
/// is noted in the report.
///
/// `limits` are the controller's; each placement's CEL time budget counts from its own start.
pub fn run(
    objects: &Objects,
    now: Timestamp,
    only: &[String],
    max_score_validity: MaxScoreValidity,
    limits: Limits,
) -> Vec<Simulated> {
    let mut snapshot = objects.snapshot();
    snapshot.set_max_score_validity(max_score_validity);
    snapshot.set_limits(limits);
    let schedule = |p: &ocm_api::Placement| {
        let until = std::time::Instant::now() + limits.cel_time;
        let deadline = || std::time::Instant::now() >= until;
        placement_core::schedule_with(&snapshot, p, now, &mut (), &deadline)
    };
    objects
        .placements
        .iter()
        .filter(|((ns, name), _)| {
            only.is_empty() || only.iter().any(|o| *o == format!("{ns}/{name}"))
        })
        .map(|(_, (p, _))| Simulated {
            placement: p.clone(),
            outcome: (!placement_core::is_disabled(p)).then(|| schedule(p)),
            sources: score_resources(p)
                .into_iter()
                .map(|r| {
                    let def = objects.definition_filling(&r);
                    (r, def)
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INPUT: &str = r#"
apiVersion: cluster.open-cluster-management.io/v1
kind: ManagedCluster
metadata: {name: a, labels: {cluster.open-cluster-management.io/clusterset: s}}
spec: {hubAcceptsClient: true}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata: {name: s}
spec: {clusterSelector: {selectorType: ExclusiveClusterSetLabel}}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: s, namespace: ns}
spec: {clusterSet: s}
---
apiVersion: cluster.open-cluster-management.io/v1alpha1
kind: AddOnPlacementScore
metadata: {name: r, namespace: a}
status:
  scores: [{name: s, value: 40}]
  validUntil: "2036-01-01T00:00:00Z"
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: Placement
metadata: {name: p, namespace: ns}
spec:
  prioritizerPolicy:
    mode: Exact
    configurations:
    - {scoreCoordinate: {type: AddOn, addOn: {resourceName: r, scoreName: s}}, weight: 1}
"#;

    /// Files have no write time: the bound counts from `--now`, so the score still counts at
    /// that instant, and the report says the controller would cap it.
    #[test]
    fn a_far_future_valid_until_is_noted_not_expired() {
        let objects = Objects::load(&[Source {
            name: "input.yaml".into(),
            text: INPUT.into(),
        }])
        .expect("input");
        let now: Timestamp = "2026-06-01T12:00:00Z".parse().expect("now");
        let run_with = |bound| {
            let results = run(&objects, now, &[], bound, Limits::default());
            results[0].outcome.clone().expect("scheduled")
        };
        let o = run_with(MaxScoreValidity::default());
        assert_eq!(o.prioritizers[0].scores, [Some(40)]);
        assert_eq!(
            o.notes,
            [
                "AddOn/r/s: validity capped (10m after it was written): a/r (validUntil 2036-01-01T00:00:00Z) counts until 2026-06-01T12:10:00Z"
            ]
        );
        let off = run_with(MaxScoreValidity(None));
        assert_eq!(off.prioritizers[0].scores, [Some(40)]);
        assert!(off.notes.is_empty(), "{:?}", off.notes);
    }

    /// A held move is in the report, with its reason, and so is a file's write time: a score
    /// written 700 s before `--now` (its `managedFields`) with a far `validUntil` has been ended
    /// by the bound.
    #[test]
    fn held_moves_and_write_times_are_read_from_the_files() {
        let input = r#"
apiVersion: cluster.open-cluster-management.io/v1
kind: ManagedCluster
metadata: {name: a, labels: {cluster.open-cluster-management.io/clusterset: s}}
spec: {hubAcceptsClient: true}
---
apiVersion: cluster.open-cluster-management.io/v1
kind: ManagedCluster
metadata: {name: b, labels: {cluster.open-cluster-management.io/clusterset: s}}
spec: {hubAcceptsClient: true}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata: {name: s}
spec: {clusterSelector: {selectorType: ExclusiveClusterSetLabel}}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: s, namespace: ns}
spec: {clusterSet: s}
---
apiVersion: cluster.open-cluster-management.io/v1alpha1
kind: AddOnPlacementScore
metadata: {name: r, namespace: a}
status:
  scores: [{name: s, value: 10}]
---
apiVersion: cluster.open-cluster-management.io/v1alpha1
kind: AddOnPlacementScore
metadata:
  name: r
  namespace: b
  managedFields:
  - {manager: agent, operation: Update, subresource: status, time: "2026-06-01T11:48:20Z"}
status:
  scores: [{name: s, value: 30}]
  validUntil: "2036-01-01T00:00:00Z"
---
apiVersion: cluster.open-cluster-management.io/v1alpha1
kind: AddOnPlacementScore
metadata: {name: q, namespace: b}
status:
  scores: [{name: s, value: 30}]
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: PlacementDecision
metadata:
  name: p-decision-1
  namespace: ns
  labels: {cluster.open-cluster-management.io/placement: p, cluster.open-cluster-management.io/decision-group-index: "0", cluster.open-cluster-management.io/decision-group-name: ""}
status:
  decisions: [{clusterName: a, reason: "", score: 10}]
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: Placement
metadata:
  name: p
  namespace: ns
  annotations:
    scheduling.ocm-placement.io/stability: '{"minScoreGain": 30}'
spec:
  numberOfClusters: 1
  prioritizerPolicy:
    mode: Exact
    configurations:
    - {scoreCoordinate: {type: AddOn, addOn: {resourceName: q, scoreName: s}}, weight: 1}
    - {scoreCoordinate: {type: AddOn, addOn: {resourceName: r, scoreName: s}}, weight: 1}
"#;
        let objects = Objects::load(&[Source {
            name: "input.yaml".into(),
            text: input.into(),
        }])
        .expect("input");
        let now: Timestamp = "2026-06-01T12:00:00Z".parse().expect("now");
        let results = run(
            &objects,
            now,
            &[],
            MaxScoreValidity::default(),
            Limits::default(),
        );
        let o = results[0].outcome.clone().expect("scheduled");
        // b's r was written 700 s ago: the 10-minute bound ended it; its q counts (30).
        assert_eq!(o.validity_capped.len(), 1, "{:?}", o.validity_capped);
        assert_eq!(o.totals, [10, 30]);
        let text = super::report::text(&results);
        assert!(
            text.contains(
                "  held by the stability controls:\n    b would replace a: gain 20 < minScoreGain 30\n"
            ),
            "{text}"
        );
    }
}
