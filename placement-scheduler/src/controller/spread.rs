//! Timers spread over time, so that no instant wakes more than a bounded share of the
//! placements.
//!
//! Scores written together (agents started together, a provider that writes every cluster at
//! once) expire together, and each placement reading them asks to be scheduled again at that
//! instant: every placement at once. Here time is cut into slots of [`SLOT`]; each slot holds
//! at most `ceil(placements / SLOTS)` timers, and a timer whose slot is full takes the next
//! one with room. Each placement holds at most one timer here, so at most [`SLOTS`] slots in a
//! row can be full: a timer fires at most `SLOTS × SLOT` (10 s) after its time. A lone timer
//! fires at its time, rounded up to the next slot.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::triggers::Key;

/// The width of a slot.
pub(crate) const SLOT: Duration = Duration::from_millis(100);
/// The slots a full share of the placements fills: the longest delay is this many slots.
pub(crate) const SLOTS: usize = 100;

/// The timers of each slot (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Slots {
    /// Slot numbers count [`SLOT`]s from here.
    base: Instant,
    /// Timers per slot, from the current one on.
    taken: BTreeMap<u64, usize>,
    /// The slot of each key's timer.
    armed: HashMap<Key, u64>,
}

impl Slots {
    pub(crate) fn new(base: Instant) -> Self {
        Self {
            base,
            taken: BTreeMap::new(),
            armed: HashMap::new(),
        }
    }

    /// When `key`'s timer for `at` fires, among `placements`: the first slot at or after `at`
    /// with room. Replaces the key's previous timer here.
    pub(crate) fn place(
        &mut self,
        key: &Key,
        at: Instant,
        placements: usize,
        now: Instant,
    ) -> Instant {
        let slot_len = SLOT.as_nanos();
        let slot_of = |t: Instant| -> u64 {
            let n = t
                .saturating_duration_since(self.base)
                .as_nanos()
                .div_ceil(slot_len);
            u64::try_from(n).unwrap_or(u64::MAX)
        };
        // Slots in the past hold nothing that can still fire.
        let current = slot_of(now).saturating_sub(1);
        self.taken = self.taken.split_off(&current);
        if let Some(old) = self.armed.remove(key)
            && let Some(n) = self.taken.get_mut(&old)
        {
            *n = n.saturating_sub(1);
        }
        let cap = placements.div_ceil(SLOTS).max(1);
        let mut slot = slot_of(at.max(now));
        while self.taken.get(&slot).is_some_and(|&n| n >= cap) {
            slot += 1;
        }
        *self.taken.entry(slot).or_insert(0) += 1;
        self.armed.insert(key.clone(), slot);
        let offset = u32::try_from(slot).map_or(Duration::MAX, |s| SLOT.saturating_mul(s));
        self.base + offset
    }

    /// The placement is gone.
    pub(crate) fn forget(&mut self, key: &Key) {
        if let Some(old) = self.armed.remove(key)
            && let Some(n) = self.taken.get_mut(&old)
        {
            *n = n.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::controller::queue::Queue;
    use crate::controller::triggers::key;

    /// 10,000 placements whose scores all end at one instant: their timers fire over the 10 s
    /// after it, at most 1% of them in any slot; the queue hands out no more per slot. A lone
    /// timer later fires at its time.
    #[tokio::test(start_paused = true)]
    async fn timers_due_together_fire_spread() {
        let n = 10_000;
        let start = Instant::now();
        let mut slots = Slots::new(start);
        let queue = Queue::default();
        let due = start + Duration::from_secs(60);
        for i in 0..n {
            let k = key("ns", &format!("p{i}"));
            let at = slots.place(&k, due, n, Instant::now());
            queue.add_at(k, at);
        }
        tokio::time::advance(Duration::from_secs(59)).await;
        let mut per_slot: BTreeMap<u64, usize> = BTreeMap::new();
        let mut woken = 0;
        while woken < n {
            tokio::time::advance(SLOT).await;
            let mut this_slot = 0;
            // Everything due by now, without waiting for more.
            while let Ok(batch) =
                tokio::time::timeout(Duration::ZERO, queue.next_batch(usize::MAX)).await
            {
                for k in &batch {
                    queue.done(k);
                }
                this_slot += batch.len();
            }
            if this_slot > 0 {
                assert!(Instant::now() >= due, "a timer fired before its time");
                let since = (Instant::now() - due).as_millis();
                per_slot.insert(u64::try_from(since).unwrap_or(u64::MAX), this_slot);
            }
            woken += this_slot;
            assert!(
                Instant::now() <= due + SLOT * u32::try_from(SLOTS + 1).unwrap_or(u32::MAX),
                "all fired within the spread"
            );
        }
        let most = per_slot.values().max().copied().unwrap_or(0);
        assert!(most <= n / SLOTS, "{most} timers in one slot: {per_slot:?}");
        // The first slot is the instant itself: no delay while there is room.
        assert_eq!(per_slot.keys().next().copied(), Some(0));
        assert!(per_slot.len() <= SLOTS, "{} slots", per_slot.len());

        // A lone timer, later: at its time (rounded up to the slot).
        let k = key("ns", "lone");
        let at = Instant::now() + Duration::from_secs(30);
        let fires = slots.place(&k, at, n, Instant::now());
        assert!(fires >= at && fires < at + SLOT, "{:?}", fires - at);
    }

    #[test]
    fn a_key_holds_one_timer() {
        let start = Instant::now();
        let mut slots = Slots::new(start);
        let k = key("ns", "p");
        // One placement: each slot holds one timer; re-arming frees the old slot.
        let a = slots.place(&k, start + Duration::from_secs(1), 1, start);
        let b = slots.place(&k, start + Duration::from_secs(1), 1, start);
        assert_eq!(a, b);
        slots.forget(&k);
        assert_eq!(slots.place(&k, start + Duration::from_secs(1), 1, start), a);
        assert_eq!(slots.armed.len(), 1);
    }
}
