//! Who may take the endpoint's time, and how much of it. The model is the apiserver's
//! priority and fairness, cut down to what one small endpoint needs:
//!
//! - [`Slots`]: requests being worked on after their caller is known (a POST body read,
//!   an uncached SubjectAccessReview, scheduling). At most `capacity` in all, and one user
//!   at most its fair share: `capacity` divided among the users holding slots (itself
//!   counted), never more than `per_user`. A user who floods takes only its share; the slots
//!   it cannot take stay free for the others.
//! - [`ReviewGate`]: TokenReviews of tokens the cache does not know, which anyone can cause
//!   by sending random tokens. At most `capacity` at once and `per_source` per second from one
//!   client address (a token bucket); a token the apiserver accepted before goes through a
//!   lane of its own, so a flood of strangers does not keep a known caller from being
//!   reviewed again when its cache entry ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How many client addresses the per-source buckets remember (the full ones are forgotten
/// first; a forgotten address starts full again, which costs at most one burst).
const MAX_SOURCES: usize = 4096;

/// Work slots shared fairly among users.
#[derive(Debug)]
pub struct Slots {
    capacity: usize,
    per_user: usize,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// A slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    user: String,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.lock();
        if let Some(n) = held.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}

/// Why a slot was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot is taken.
    Full,
    /// The user holds its share.
    Share(usize),
}

impl Slots {
    pub fn new(capacity: usize, per_user: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            per_user: per_user.max(1),
            held: Arc::default(),
        }
    }

    /// A slot for `user`, or why not. Never waits.
    pub fn try_take(&self, user: &str) -> Result<Slot, Refusal> {
        let mut held = self.held.lock();
        let mine = held.get(user).copied().unwrap_or(0);
        let users = held.len() + usize::from(mine == 0);
        let share = (self.capacity / users).clamp(1, self.per_user);
        if held.values().sum::<usize>() >= self.capacity {
            return Err(Refusal::Full);
        }
        if mine >= share {
            return Err(Refusal::Share(share));
        }
        *held.entry(user.to_owned()).or_default() += 1;
        Ok(Slot {
            user: user.to_owned(),
            held: self.held.clone(),
        })
    }
}

/// A review the gate let through; its place is given back when dropped.
#[derive(Debug)]
pub struct ReviewPass {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Why a review was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewRefusal {
    /// Every review place is taken.
    Busy,
    /// The client address spent its reviews for now.
    Source,
}

/// A token bucket: `rate` per second, holding at most `burst`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Bounds the TokenReviews of unknown tokens.
#[derive(Debug)]
pub struct ReviewGate {
    strangers: Arc<tokio::sync::Semaphore>,
    known: Arc<tokio::sync::Semaphore>,
    rate: f64,
    burst: f64,
    sources: Mutex<HashMap<IpAddr, Bucket>>,
}

impl ReviewGate {
    /// `capacity` reviews at once in each lane; `per_source` reviews of strangers per second
    /// from one address, in bursts of twice that (0: no per-source bound).
    pub fn new(capacity: usize, per_source: u32) -> Self {
        let rate = f64::from(per_source);
        Self {
            strangers: Arc::new(tokio::sync::Semaphore::new(capacity.max(1))),
            known: Arc::new(tokio::sync::Semaphore::new(capacity.max(1))),
            rate,
            burst: 2.0 * rate,
            sources: Mutex::default(),
        }
    }

    /// A place for one review: `known` says the token was accepted before (its own lane, no
    /// per-source bound); a stranger's review spends one of `source`'s. Never waits.
    pub fn try_pass(
        &self,
        known: bool,
        source: IpAddr,
        now: Instant,
    ) -> Result<ReviewPass, ReviewRefusal> {
        let lane = if known { &self.known } else { &self.strangers };
        let permit = lane
            .clone()
            .try_acquire_owned()
            .map_err(|_| ReviewRefusal::Busy)?;
        if !known && !self.spend(source, now) {
            return Err(ReviewRefusal::Source);
        }
        Ok(ReviewPass { _permit: permit })
    }

    /// Takes one token from `source`'s bucket, if it has one.
    fn spend(&self, source: IpAddr, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        let mut sources = self.sources.lock();
        let (rate, burst) = (self.rate, self.burst);
        let refill = |b: &Bucket| {
            let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
            (b.tokens + elapsed * rate).min(burst)
        };
        if sources.len() >= MAX_SOURCES && !sources.contains_key(&source) {
            sources.retain(|_, b| refill(b) < burst);
            if sources.len() >= MAX_SOURCES {
                // Every remembered address is spending: forget one (it starts full again).
                if let Some(any) = sources.keys().next().copied() {
                    sources.remove(&any);
                }
            }
        }
        let bucket = sources.entry(source).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let tokens = refill(bucket);
        if tokens < 1.0 {
            *bucket = Bucket { tokens, at: now };
            return false;
        }
        *bucket = Bucket {
            tokens: tokens - 1.0,
            at: now,
        };
        true
    }
}

/// How long a TokenReview's answer is reused: an accepted token for half the review cache's
/// TTL (kube-apiserver may itself vouch for a revoked token for up to 10 s from its own token
/// cache, and the two add up), a refused one briefly (a flood of distinct random tokens must
/// not crowd the accepted ones out of the cache, and a token may become valid).
pub fn token_ttls(review_ttl: Duration) -> (Duration, Duration) {
    (review_ttl / 2, review_ttl.min(NEGATIVE_TOKEN_TTL))
}

/// The most a refused token's answer is reused.
pub const NEGATIVE_TOKEN_TTL: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_takes_its_share_and_leaves_the_rest() {
        let slots = Slots::new(4, 2);
        // Alone, a user may take its per-user bound, not every slot.
        let a1 = slots.try_take("a").unwrap();
        let _a2 = slots.try_take("a").unwrap();
        assert_eq!(slots.try_take("a").unwrap_err(), Refusal::Share(2));
        // Another user finds the rest free.
        let _b1 = slots.try_take("b").unwrap();
        let b2 = slots.try_take("b").unwrap();
        // Every slot taken: full, whoever asks.
        assert_eq!(slots.try_take("b").unwrap_err(), Refusal::Full);
        assert_eq!(slots.try_take("c").unwrap_err(), Refusal::Full);
        drop(b2);
        // A third user takes the freed slot: three users hold four slots.
        let _c1 = slots.try_take("c").unwrap();
        drop(a1);
        // With a slot free, a user holding its share of three (one) waits for the others.
        assert_eq!(slots.try_take("a").unwrap_err(), Refusal::Share(1));
        assert_eq!(slots.try_take("b").unwrap_err(), Refusal::Share(1));
        assert!(slots.try_take("d").is_ok(), "a newcomer is served");
    }

    #[test]
    fn slots_come_back_when_dropped() {
        let slots = Slots::new(1, 1);
        let s = slots.try_take("a").unwrap();
        assert_eq!(slots.try_take("b").unwrap_err(), Refusal::Full);
        drop(s);
        let b = slots.try_take("b").unwrap();
        drop(b);
        assert!(
            slots.held.lock().is_empty(),
            "no user is remembered without a slot"
        );
    }

    #[test]
    fn one_slot_and_one_user_per_slot_still_serves() {
        let slots = Slots::new(1, 4);
        let s = slots.try_take("a").unwrap();
        assert_eq!(slots.try_take("a").unwrap_err(), Refusal::Full);
        drop(s);
        assert!(slots.try_take("a").is_ok());
    }

    #[tokio::test]
    async fn strangers_spend_their_address_budget_known_tokens_do_not() {
        let gate = ReviewGate::new(100, 5);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        // A burst of twice the rate, then nothing until the bucket refills.
        for _ in 0..10 {
            gate.try_pass(false, a, t0).unwrap();
        }
        assert_eq!(
            gate.try_pass(false, a, t0).unwrap_err(),
            ReviewRefusal::Source
        );
        // Another address, and a known token from the same one, are not affected.
        gate.try_pass(false, b, t0).unwrap();
        gate.try_pass(true, a, t0).unwrap();
        // A second later, five more.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..5 {
            gate.try_pass(false, a, t1).unwrap();
        }
        assert_eq!(
            gate.try_pass(false, a, t1).unwrap_err(),
            ReviewRefusal::Source
        );
    }

    #[tokio::test]
    async fn each_lane_holds_its_capacity_at_once() {
        let gate = ReviewGate::new(2, 0);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let now = Instant::now();
        let _s1 = gate.try_pass(false, ip, now).unwrap();
        let s2 = gate.try_pass(false, ip, now).unwrap();
        assert_eq!(
            gate.try_pass(false, ip, now).unwrap_err(),
            ReviewRefusal::Busy
        );
        // The known lane is its own.
        let _k = gate.try_pass(true, ip, now).unwrap();
        drop(s2);
        assert!(gate.try_pass(false, ip, now).is_ok());
    }

    #[test]
    fn the_source_table_stays_bounded() {
        let gate = ReviewGate::new(1, 1);
        let now = Instant::now();
        for i in 0..(MAX_SOURCES as u32 + 100) {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i));
            assert!(gate.spend(ip, now));
        }
        assert!(gate.sources.lock().len() <= MAX_SOURCES);
    }

    #[test]
    fn accepted_tokens_are_reused_for_half_the_ttl_refused_ones_briefly() {
        assert_eq!(
            token_ttls(Duration::from_secs(10)),
            (Duration::from_secs(5), Duration::from_secs(2))
        );
        assert_eq!(
            token_ttls(Duration::from_secs(1)),
            (Duration::from_millis(500), Duration::from_secs(1))
        );
        assert_eq!(token_ttls(Duration::ZERO), (Duration::ZERO, Duration::ZERO));
    }
}
