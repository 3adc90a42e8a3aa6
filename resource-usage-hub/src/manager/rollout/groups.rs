//! Decision groups: a placement's clusters by (group index, group name).

use super::*;

/// A decision group: its index and name labels (ordered by index, then name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub index: i32,
    pub name: String,
}

impl GroupKey {
    pub fn new(index: i32, name: impl Into<String>) -> GroupKey {
        GroupKey {
            index,
            name: name.into(),
        }
    }
}

/// A placement's clusters by decision group (ordered by group index), built from its
/// PlacementDecisions (labels decision-group-index / decision-group-name; a decision without a
/// parsable index label is group 0). A group may be empty: upstream keeps the group of a
/// decision without clusters, and that matters for mandatory groups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Groups {
    pub(super) groups: BTreeMap<GroupKey, BTreeSet<String>>,
}

impl Groups {
    pub fn from_decisions<'a>(
        decisions: impl IntoIterator<Item = &'a PlacementDecision>,
    ) -> Groups {
        let mut groups = Groups::default();
        for decision in decisions {
            let labels = decision.metadata.labels.as_ref();
            let label_of = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
            let name = label_of(label::DECISION_GROUP_NAME).unwrap_or_default();
            // Go's strconv.Atoi then int32(): 64-bit parse, wrapping conversion.
            let index = label_of(label::DECISION_GROUP_INDEX)
                .and_then(|v| v.parse::<i64>().ok())
                .map_or(0, |i| i as i32);
            let key = GroupKey::new(index, name);
            groups.insert_group(key.clone());
            let clusters = decision.status.iter().flat_map(|s| &s.decisions);
            for decision in clusters {
                groups.insert(key.clone(), decision.cluster_name.clone());
            }
        }
        groups
    }

    /// Adds `cluster` to group `key` (creating the group).
    pub fn insert(&mut self, key: GroupKey, cluster: impl Into<String>) {
        self.groups.entry(key).or_default().insert(cluster.into());
    }

    /// Adds group `key` without clusters (as a PlacementDecision with no decisions does).
    pub fn insert_group(&mut self, key: GroupKey) {
        self.groups.entry(key).or_default();
    }

    /// All clusters, whatever their group.
    pub fn clusters(&self) -> BTreeSet<&str> {
        self.groups.values().flatten().map(String::as_str).collect()
    }

    /// The (lowest) group `cluster` is in.
    pub fn group_of(&self, cluster: &str) -> Option<&GroupKey> {
        self.groups
            .iter()
            .find(|(_, clusters)| clusters.contains(cluster))
            .map(|(key, _)| key)
    }

    /// The number of distinct clusters.
    pub fn len(&self) -> usize {
        self.clusters().len()
    }

    /// No clusters (there may still be empty groups).
    pub fn is_empty(&self) -> bool {
        self.groups.values().all(BTreeSet::is_empty)
    }

    /// The number of groups, empty ones included.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The groups in order with their clusters.
    pub fn iter(&self) -> impl Iterator<Item = (&GroupKey, &BTreeSet<String>)> {
        self.groups.iter()
    }

    /// The groups the selectors name (upstream's `ExistingClusterGroups`), or all the others
    /// (`ExistingClusterGroupsBesides`).
    pub(super) fn subset(&self, selectors: &[GroupSelector], selected: bool) -> Subset<'_> {
        let chosen = |key: &GroupKey| {
            selectors.iter().any(|s| match s {
                GroupSelector::Name(name) => key.name == *name,
                GroupSelector::Index(index) => key.index == *index,
            })
        };
        let groups = self
            .groups
            .iter()
            .filter(|(key, _)| chosen(key) == selected)
            .collect();
        Subset { groups }
    }

    pub(super) fn all(&self) -> Subset<'_> {
        self.subset(&[], false)
    }
}

/// Some groups of a [`Groups`], in order.
pub(super) struct Subset<'a> {
    pub(super) groups: Vec<(&'a GroupKey, &'a BTreeSet<String>)>,
}

impl Subset<'_> {
    pub(super) fn clusters(&self) -> BTreeSet<&str> {
        self.groups
            .iter()
            .flat_map(|(_, clusters)| clusters.iter())
            .map(String::as_str)
            .collect()
    }

    pub(super) fn group_of(&self, cluster: &str) -> Option<&GroupKey> {
        self.groups
            .iter()
            .find(|(_, clusters)| clusters.contains(cluster))
            .map(|(key, _)| *key)
    }
}
