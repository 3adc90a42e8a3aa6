//! A watch's events as changes to the stores, sans IO.
//!
//! The initial list and every relist (after a `410 Gone`) are streamed into the stores object
//! by object, as the watcher pages them in, rather than buffered until the list ends: with
//! 10,000 Placements or PlacementDecisions a buffered list held a second full copy of them
//! beside the stores. Only the listed keys are kept until the list ends, when every object
//! the list did not return is deleted (it was deleted while the watch was down).
//!
//! Objects a relist has not reached yet stay as they were: as stale as before the relist,
//! never staler, and the controller reschedules everything once the list ends.

use std::collections::HashSet;

use kube::Resource;
use kube::runtime::watcher::Event;

/// An object's `(namespace, name)`, owned (see [`key_of`]).
pub(crate) type ObjectKey = (String, String);

/// An object's namespace and name: the one way the controller keys an object (the namespace
/// is empty for a cluster-scoped kind; a name the API always sets is empty when missing).
pub(crate) fn key_of<K: Resource>(o: &K) -> (&str, &str) {
    (
        o.meta().namespace.as_deref().unwrap_or_default(),
        o.meta().name.as_deref().unwrap_or_default(),
    )
}

/// A change to apply to the stores.
#[derive(Debug, PartialEq)]
pub(crate) enum Change<K> {
    Apply(K),
    Delete(K),
    /// A list ended: the objects it did not return are gone.
    Listed(HashSet<ObjectKey>),
}

impl<K> Change<K> {
    /// Whether this ends a list (the watch is synced).
    pub(crate) fn ends_list(&self) -> bool {
        matches!(self, Change::Listed(_))
    }
}

/// Turns watcher events into [`Change`]s, remembering the keys of a list in progress.
#[derive(Debug, Default)]
pub(crate) struct Lister {
    /// `Some` while a list is in progress: the keys it returned so far.
    listing: Option<HashSet<ObjectKey>>,
}

impl Lister {
    /// The change an event makes, if any (`Init` only starts a list).
    pub(crate) fn step<K: Resource>(&mut self, event: Event<K>) -> Option<Change<K>> {
        match event {
            Event::Apply(o) => Some(Change::Apply(o)),
            Event::Delete(o) => Some(Change::Delete(o)),
            Event::Init => {
                self.listing = Some(HashSet::new());
                None
            }
            Event::InitApply(o) => {
                let (namespace, name) = key_of(&o);
                self.listing
                    .get_or_insert_with(HashSet::new)
                    .insert((namespace.to_owned(), name.to_owned()));
                Some(Change::Apply(o))
            }
            Event::InitDone => Some(Change::Listed(self.listing.take().unwrap_or_default())),
        }
    }

    /// A list is in progress (its objects are being applied one by one).
    pub(crate) fn listing(&self) -> bool {
        self.listing.is_some()
    }
}

/// The keys of `existing` that a list did not return.
pub(crate) fn gone(
    existing: impl IntoIterator<Item = ObjectKey>,
    listed: &HashSet<ObjectKey>,
) -> Vec<ObjectKey> {
    existing
        .into_iter()
        .filter(|k| !listed.contains(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use ocm_api::Placement;

    use super::*;

    fn placement(ns: &str, name: &str) -> Placement {
        let mut p = Placement::new(name, Default::default());
        p.metadata.namespace = Some(ns.to_owned());
        p
    }

    fn key(ns: &str, name: &str) -> ObjectKey {
        (ns.to_owned(), name.to_owned())
    }

    #[test]
    fn a_list_is_applied_as_it_comes_and_ends_with_its_keys() {
        let mut l = Lister::default();
        assert_eq!(l.step::<Placement>(Event::Init), None);
        assert!(l.listing());
        assert_eq!(
            l.step(Event::InitApply(placement("a", "p"))),
            Some(Change::Apply(placement("a", "p")))
        );
        l.step(Event::InitApply(placement("b", "p")));
        assert_eq!(
            l.step::<Placement>(Event::InitDone),
            Some(Change::Listed(HashSet::from([
                key("a", "p"),
                key("b", "p")
            ])))
        );
        assert!(!l.listing());
        // Events after the list pass through.
        assert_eq!(
            l.step(Event::Delete(placement("a", "p"))),
            Some(Change::Delete(placement("a", "p")))
        );
    }

    #[test]
    fn a_restarted_list_forgets_what_the_broken_one_listed() {
        let mut l = Lister::default();
        l.step::<Placement>(Event::Init);
        l.step(Event::InitApply(placement("a", "old")));
        // The list failed and started again: "old" is not in the new one.
        l.step::<Placement>(Event::Init);
        l.step(Event::InitApply(placement("a", "new")));
        let Some(Change::Listed(listed)) = l.step::<Placement>(Event::InitDone) else {
            panic!("the list did not end");
        };
        assert_eq!(listed, HashSet::from([key("a", "new")]));
        let existing = [key("a", "old"), key("a", "new"), key("b", "x")];
        assert_eq!(gone(existing, &listed), [key("a", "old"), key("b", "x")]);
    }

    #[test]
    fn an_empty_list_removes_everything() {
        let mut l = Lister::default();
        l.step::<Placement>(Event::Init);
        let Some(Change::Listed(listed)) = l.step::<Placement>(Event::InitDone) else {
            panic!("the list did not end");
        };
        assert_eq!(gone([key("a", "p")], &listed), [key("a", "p")]);
    }
}
