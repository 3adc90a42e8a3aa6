//! Review answers kept for a while, bounded in size, keyed by token digests.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

/// A SHA-256 of a bearer token: what the caches keep instead of the token.
pub type Digest = [u8; 32];

pub fn digest(token: &str) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    out
}

/// Values that expire `ttl` after they were put in; at most `capacity` of them (when full,
/// the expired ones go, then the one expiring soonest). A zero `ttl` or `capacity` keeps
/// nothing.
pub struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<K, (Instant, V)>> {
        self.entries.lock()
    }

    /// The value for `key` unless it expired by `now` (an expired one is forgotten).
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut entries = self.entries();
        match entries.get(key) {
            Some((until, value)) if *until > now => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn insert(&self, key: K, value: V, now: Instant) {
        if self.ttl.is_zero() || self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (until, _)| *until > now);
            if entries.len() >= self.capacity
                && let Some(soonest) = entries
                    .iter()
                    .min_by_key(|(_, (until, _))| *until)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&soonest);
            }
        }
        entries.insert(key, (now + self.ttl, value));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_expire_and_the_size_stays_bounded() {
        let c = TtlCache::new(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        for i in 0..3u32 {
            c.insert(i, i, t0 + Duration::from_secs(u64::from(i)));
        }
        assert_eq!(c.get(&0, t0 + Duration::from_secs(9)), Some(0));
        assert_eq!(c.get(&0, t0 + Duration::from_secs(10)), None, "expired");
        assert_eq!(c.len(), 2, "the expired entry is forgotten");
        // Full of live entries: the one expiring soonest (1) makes room.
        c.insert(3, 3, t0 + Duration::from_secs(5));
        c.insert(4, 4, t0 + Duration::from_secs(5));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&1, t0 + Duration::from_secs(5)), None);
        assert_eq!(c.get(&4, t0 + Duration::from_secs(5)), Some(4));
        // A thousand distinct keys later, still three.
        for i in 10..1010u32 {
            c.insert(i, i, t0 + Duration::from_secs(6));
        }
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let c = TtlCache::new(Duration::ZERO, 3);
        c.insert(1, 1, Instant::now());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn digests_are_sha256_not_the_token() {
        let d = digest("secret");
        assert_ne!(&d[..6], b"secret");
        assert_eq!(
            d[..4],
            [0x2b, 0xb8, 0x0d, 0x53],
            "sha256(\"secret\") starts 2bb80d53"
        );
    }
}
