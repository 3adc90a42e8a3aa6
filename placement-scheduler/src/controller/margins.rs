//! Each placement's margin from its last written pass ([`placement_core::margin`]): a score
//! change on one of its candidate clusters that cannot move its decisions costs no pass.
//! Sans IO.
//!
//! A margin is only as good as the inputs of the pass that left it. It is dropped whenever a
//! pass is due anyway (a change judged a pass, an edit of the placement, a failed pass), so it
//! never judges a change against a selection that is about to be recomputed. One race is
//! left: a change judged while a pass is running, against the margin of the pass before. That
//! pass may have read the snapshot before the change, so when it stores its margin, a change
//! judged after its snapshot was taken schedules it once more ([`Margins::store`]).

use std::collections::HashMap;

use jiff::Timestamp;
use ocm_api::AddOnPlacementScore;
use placement_core::snapshot::MaxScoreValidity;
use placement_core::{Margin, Verdict};

use super::triggers::Key;

struct Kept {
    margin: Margin,
    /// The sequence number of the last change judged against it without a pass.
    spared: u64,
}

/// What a score change asked of the placements it woke.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Judged {
    /// Schedule now.
    pub(crate) now: Vec<Key>,
    /// Schedule when their `scoreRateLimit` window ends (only the scores they show moved).
    pub(crate) later: Vec<(Key, Timestamp)>,
    /// Woken, but nothing they write can change.
    pub(crate) spared: usize,
}

#[derive(Default)]
pub(crate) struct Margins {
    kept: HashMap<Key, Kept>,
    /// Counts the score changes judged.
    seq: u64,
}

impl Margins {
    /// Judges the change of `cluster`'s AddOnPlacementScore `resource` for each placement it
    /// may affect (see `State::apply_score`).
    pub(crate) fn judge(
        &mut self,
        affected: impl IntoIterator<Item = Key>,
        change: &ScoreChange<'_>,
    ) -> Judged {
        self.seq += 1;
        let mut out = Judged::default();
        for key in affected {
            let verdict = self.kept.get_mut(&key).map_or(Verdict::Pass, |kept| {
                kept.margin.judge(
                    change.cluster,
                    change.resource,
                    change.old,
                    change.new,
                    change.bound,
                    change.now,
                )
            });
            match verdict {
                Verdict::Pass => {
                    self.kept.remove(&key);
                    out.now.push(key);
                }
                Verdict::PassAt(at) => {
                    self.spare(&key);
                    out.later.push((key, at));
                }
                Verdict::Nothing => {
                    self.spare(&key);
                    out.spared += 1;
                }
            }
        }
        out
    }

    fn spare(&mut self, key: &Key) {
        if let Some(kept) = self.kept.get_mut(key) {
            kept.spared = self.seq;
        }
    }

    /// Where a pass starts: pass it to [`Margins::store`] with its outcome's margin.
    pub(crate) fn taken(&self) -> u64 {
        self.seq
    }

    /// Keeps the margin of `key`'s written pass, which took its snapshot at `taken`. Returns
    /// `false` when a change was judged against the margin before it after that (the pass
    /// may not have seen it): the margin is dropped and the placement must be scheduled again.
    pub(crate) fn store(&mut self, key: &Key, margin: Option<Margin>, taken: u64) -> bool {
        let missed = self.kept.get(key).is_some_and(|k| k.spared > taken);
        match margin {
            Some(margin) if !missed => {
                self.kept.insert(key.clone(), Kept { margin, spared: 0 });
            }
            _ => {
                self.kept.remove(key);
            }
        }
        !missed
    }

    /// The placement changed, was deleted, or its pass failed: every change is a pass until
    /// its next written one.
    pub(crate) fn forget(&mut self, key: &Key) {
        self.kept.remove(key);
    }

    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }
}

/// One score change, as [`Margins::judge`] reads it.
pub(crate) struct ScoreChange<'a> {
    pub(crate) cluster: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) old: Option<&'a AddOnPlacementScore>,
    pub(crate) new: Option<&'a AddOnPlacementScore>,
    pub(crate) bound: MaxScoreValidity,
    pub(crate) now: Timestamp,
}

#[cfg(test)]
mod tests {
    //! The bookkeeping around the core's margins: no margin is a pass, a pass drops the
    //! margin, and a change judged while a pass ran schedules it once more.

    use std::sync::Arc;

    use ocm_api::{Placement, cluster::v1alpha1::AddOnPlacementScore};
    use placement_core::Snapshot;
    use serde_json::json;

    use super::*;
    use crate::controller::triggers::key;

    fn score(cluster: &str, value: i32) -> AddOnPlacementScore {
        serde_json::from_value(json!({"metadata": {"name": "r", "namespace": cluster},
            "status": {"scores": [{"name": "s", "value": value}]}}))
        .expect("a valid score")
    }

    /// c1 (90) and c2 (10); a placement of one cluster, c1. Its margin.
    fn margin() -> Margin {
        let mut s = Snapshot::new();
        s.upsert_set(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "set"}, "spec": {}}))
                .expect("a valid set"),
        ));
        s.upsert_binding(
            &serde_json::from_value(json!({"metadata": {"name": "set", "namespace": "ns"},
                "spec": {"clusterSet": "set"}}))
            .expect("a valid binding"),
        );
        for (c, v) in [("c1", 90), ("c2", 10)] {
            s.upsert_cluster(Arc::new(
                serde_json::from_value(json!({"metadata": {"name": c, "labels":
                    {"cluster.open-cluster-management.io/clusterset": "set"}}, "spec": {}}))
                .expect("a valid cluster"),
            ));
            s.upsert_score(Arc::new(score(c, v)));
        }
        let p: Placement = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact", "configurations": [
                {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "r", "scoreName": "s"}}, "weight": 1}]}}}))
        .expect("a valid placement");
        let out = placement_core::schedule(&s, &p, jiff::Timestamp::now());
        assert_eq!(out.selected.len(), 1);
        out.margin.expect("a margin")
    }

    fn judge(m: &mut Margins, cluster: &str, from: i32, to: i32) -> Judged {
        let (old, new) = (score(cluster, from), score(cluster, to));
        m.judge(
            [key("ns", "p")],
            &ScoreChange {
                cluster,
                resource: "r",
                old: Some(&old),
                new: Some(&new),
                bound: MaxScoreValidity::default(),
                now: jiff::Timestamp::now(),
            },
        )
    }

    #[test]
    fn the_margin_of_the_last_written_pass_decides() {
        let k = key("ns", "p");
        let mut m = Margins::default();
        // No margin: a pass.
        assert_eq!(judge(&mut m, "c2", 10, 20).now, std::slice::from_ref(&k));
        assert!(m.store(&k, Some(margin()), m.taken()));
        assert_eq!(m.len(), 1);
        // c2 stays below c1: spared.
        let j = judge(&mut m, "c2", 10, 20);
        assert_eq!((j.now.len(), j.spared), (0, 1));
        // c2 passes c1: a pass, and the margin goes until the next one.
        assert_eq!(judge(&mut m, "c2", 20, 95).now, std::slice::from_ref(&k));
        assert_eq!(m.len(), 0);
        assert_eq!(judge(&mut m, "c2", 95, 96).now, std::slice::from_ref(&k));
        m.forget(&k);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn a_change_judged_while_a_pass_ran_schedules_it_again() {
        let k = key("ns", "p");
        let mut m = Margins::default();
        assert!(m.store(&k, Some(margin()), m.taken()));
        // A pass takes its snapshot; then a change is judged against the margin before it.
        let taken = m.taken();
        assert_eq!(judge(&mut m, "c2", 10, 20).spared, 1);
        assert!(
            !m.store(&k, Some(margin()), taken),
            "it may not have seen it"
        );
        assert_eq!(m.len(), 0);
        // A pass that took its snapshot after the change keeps its margin.
        assert!(m.store(&k, Some(margin()), m.taken()));
        assert_eq!(m.len(), 1);
        // A pass with no margin leaves none.
        assert!(m.store(&k, None, m.taken()));
        assert_eq!(m.len(), 0);
    }
}
