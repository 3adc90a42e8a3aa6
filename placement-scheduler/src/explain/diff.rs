//! How a Placement's live decisions differ from what the scheduler computes now: clusters it
//! would drop or add, clusters that would change decision group, and whether the live status
//! conditions agree. Plain data in, plain data out.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ocm_api::wellknown::label;
use ocm_api::{PlacementDecision, PlacementStatus};
use serde::Serialize;

/// A decision group as the PlacementDecision labels name it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GroupRef {
    pub index: String,
    pub name: String,
}

impl std::fmt::Display for GroupRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "group {} {:?}", self.index, self.name)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub cluster: String,
    pub live: GroupRef,
    pub now: GroupRef,
}

/// One condition type, live and now (`status (reason)`, or `None` when absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConditionDiff {
    #[serde(rename = "type")]
    pub type_: String,
    pub live: Option<String>,
    pub now: Option<String>,
    pub agree: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveDiff {
    /// The live PlacementDecision objects.
    pub live_decisions: usize,
    /// Clusters in the live decisions.
    pub live_clusters: usize,
    /// In the live decisions, and no longer picked.
    pub removed: Vec<String>,
    /// Picked now, not in the live decisions.
    pub added: Vec<String>,
    /// In both, in another decision group.
    pub moved: Vec<Moved>,
    pub conditions: Vec<ConditionDiff>,
    /// `status.numberOfSelectedClusters`, live and now.
    pub selected: (i32, i32),
}

impl LiveDiff {
    /// Whether the live decisions and status are what the scheduler computes now.
    pub fn agrees(&self) -> bool {
        self.removed.is_empty()
            && self.added.is_empty()
            && self.moved.is_empty()
            && self.selected.0 == self.selected.1
            && self.conditions.iter().all(|c| c.agree)
    }
}

/// Each decided cluster with its group, from PlacementDecisions' status and labels.
fn clusters(decisions: &[PlacementDecision]) -> BTreeMap<String, GroupRef> {
    let mut out = BTreeMap::new();
    for d in decisions {
        let labels = d.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
        let group = GroupRef {
            index: label(label::DECISION_GROUP_INDEX),
            name: label(label::DECISION_GROUP_NAME),
        };
        for c in d.status.iter().flat_map(|s| &s.decisions) {
            out.insert(c.cluster_name.clone(), group.clone());
        }
    }
    out
}

/// The difference between the live decisions and status and the computed ones.
pub fn diff(
    live: &[PlacementDecision],
    live_status: Option<&PlacementStatus>,
    now: &[PlacementDecision],
    now_status: &PlacementStatus,
) -> LiveDiff {
    let (was, will) = (clusters(live), clusters(now));
    let removed = was
        .keys()
        .filter(|c| !will.contains_key(*c))
        .cloned()
        .collect();
    let added = will
        .keys()
        .filter(|c| !was.contains_key(*c))
        .cloned()
        .collect();
    let moved = was
        .iter()
        .filter_map(|(c, g)| {
            let n = will.get(c)?;
            (n != g).then(|| Moved {
                cluster: c.clone(),
                live: g.clone(),
                now: n.clone(),
            })
        })
        .collect();
    let shown = |c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
        format!("{} ({})", c.status, c.reason)
    };
    let live_conditions = live_status
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut types: Vec<&str> = live_conditions
        .iter()
        .chain(&now_status.conditions)
        .map(|c| c.type_.as_str())
        .collect();
    types.sort_unstable();
    types.dedup();
    let conditions = types
        .into_iter()
        .map(|t| {
            let l = live_conditions.iter().find(|c| c.type_ == t);
            let n = now_status.conditions.iter().find(|c| c.type_ == t);
            let agree = match (l, n) {
                (Some(l), Some(n)) => l.status == n.status && l.reason == n.reason,
                _ => false,
            };
            ConditionDiff {
                type_: t.to_owned(),
                live: l.map(shown),
                now: n.map(shown),
                agree,
            }
        })
        .collect();
    LiveDiff {
        live_decisions: live.len(),
        live_clusters: was.len(),
        removed,
        added,
        moved,
        conditions,
        selected: (
            live_status.map_or(0, |s| s.number_of_selected_clusters),
            now_status.number_of_selected_clusters,
        ),
    }
}

/// The "live decisions vs now" section of the text report.
pub fn text(d: &LiveDiff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "  live decisions vs now:");
    let _ = writeln!(
        out,
        "    live: {} clusters in {} PlacementDecision(s), numberOfSelectedClusters {} (now {})",
        d.live_clusters, d.live_decisions, d.selected.0, d.selected.1
    );
    if !d.removed.is_empty() {
        let _ = writeln!(out, "    would remove: {}", d.removed.join(", "));
    }
    if !d.added.is_empty() {
        let _ = writeln!(out, "    would add: {}", d.added.join(", "));
    }
    for m in &d.moved {
        let _ = writeln!(
            out,
            "    would move: {} from {} to {}",
            m.cluster, m.live, m.now
        );
    }
    for c in &d.conditions {
        let _ = writeln!(
            out,
            "    condition {}: live {}, now {}: {}",
            c.type_,
            c.live.as_deref().unwrap_or("absent"),
            c.now.as_deref().unwrap_or("absent"),
            if c.agree { "agree" } else { "differ" }
        );
    }
    if d.removed.is_empty() && d.added.is_empty() && d.moved.is_empty() {
        let _ = writeln!(out, "    the live decisions are what it would pick now");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decision(index: &str, name: &str, clusters: &[&str]) -> PlacementDecision {
        let decisions: Vec<_> = clusters
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p-decision-1", "namespace": "ns", "labels": {
                label::DECISION_GROUP_INDEX: index, label::DECISION_GROUP_NAME: name}},
            "status": {"decisions": decisions}
        }))
        .expect("decision")
    }

    fn status(n: i32, satisfied: &str, reason: &str) -> PlacementStatus {
        serde_json::from_value(json!({
            "numberOfSelectedClusters": n,
            "conditions": [{"type": "PlacementSatisfied", "status": satisfied, "reason": reason,
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        }))
        .expect("status")
    }

    #[test]
    fn removed_added_moved_and_conditions() {
        let live = [
            decision("0", "canary", &["a"]),
            decision("1", "", &["b", "c"]),
        ];
        let now = [
            decision("0", "canary", &["b"]),
            decision("1", "", &["a", "d"]),
        ];
        let d = diff(
            &live,
            Some(&status(3, "True", "AllDecisionsScheduled")),
            &now,
            &status(3, "True", "AllDecisionsScheduled"),
        );
        assert_eq!(d.removed, ["c"]);
        assert_eq!(d.added, ["d"]);
        let moved: Vec<(&str, &str, &str)> = d
            .moved
            .iter()
            .map(|m| {
                (
                    m.cluster.as_str(),
                    m.live.index.as_str(),
                    m.now.index.as_str(),
                )
            })
            .collect();
        assert_eq!(moved, [("a", "0", "1"), ("b", "1", "0")]);
        assert!(d.conditions.iter().all(|c| c.agree));
        assert!(!d.agrees());
        let t = text(&d);
        assert!(t.contains("would remove: c\n"), "{t}");
        assert!(t.contains("would add: d\n"), "{t}");
        assert!(
            t.contains("would move: a from group 0 \"canary\" to group 1 \"\""),
            "{t}"
        );
    }

    #[test]
    fn the_same_decisions_agree_and_a_changed_condition_is_named() {
        let live = [decision("0", "", &["a", "b"])];
        let d = diff(
            &live,
            Some(&status(2, "True", "AllDecisionsScheduled")),
            &live,
            &status(2, "True", "AllDecisionsScheduled"),
        );
        assert!(d.agrees(), "{d:?}");
        assert!(text(&d).contains("the live decisions are what it would pick now"));
        let d = diff(
            &live,
            None,
            &live,
            &status(2, "False", "NotAllDecisionsScheduled"),
        );
        assert!(!d.agrees());
        assert!(
            text(&d).contains("condition PlacementSatisfied: live absent, now False (NotAllDecisionsScheduled): differ"),
            "{}",
            text(&d)
        );
    }
}
