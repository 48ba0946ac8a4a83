//! The per-object circuit breaker against hot loops: an object whose
//! reconciles keep writing while its spec stays the same is stopped and
//! reported, until its spec changes. Owns the bookkeeping only; the
//! controller decides what "wrote" means and how a trip is reported.
//!
//! # Rule
//!
//! A reconcile that wrote something (a child, the status, a finalizer) at
//! generation `g`, and saw the same owned children as the previous one,
//! counts towards the object's streak; one that wrote nothing, a new
//! generation or a change among the children ends the streak. So progress
//! driven by children (Pods becoming ready one by one) never trips it; a
//! reconcile fed only by its own writes to the object does. When a streak holds more than
//! [`HotLoopConfig::max_writes`] writing reconciles within
//! [`HotLoopConfig::window`], the breaker opens for generation `g`: the
//! object is not reconciled again until its generation moves on (a spec
//! change), which closes the breaker. Time is [`tokio::time`]'s, so paused
//! test time works.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::object::ObjectKey;

/// When the breaker opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotLoopConfig {
    /// More writing reconciles than this of one object at one generation,
    /// within `window`, open the breaker. Default 100.
    pub max_writes: usize,
    /// The sliding window. Default 10 s.
    pub window: Duration,
}

impl Default for HotLoopConfig {
    fn default() -> Self {
        Self {
            max_writes: 100,
            window: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Default)]
struct Streak {
    generation: i64,
    /// A fingerprint of the owned children the reconciles saw.
    children: u64,
    writes: VecDeque<Instant>,
    /// The breaker is open for `generation`.
    open: bool,
}

/// Per-object hot-loop bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Breaker {
    config: HotLoopConfig,
    streaks: Mutex<HashMap<ObjectKey, Streak>>,
}

impl Breaker {
    pub(super) fn new(config: HotLoopConfig) -> Self {
        Self {
            config,
            streaks: Mutex::default(),
        }
    }

    /// Whether `key` at `generation` is stopped. A new generation closes the
    /// breaker and starts a fresh streak.
    pub(super) fn is_open(&self, key: &ObjectKey, generation: i64) -> bool {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        match streaks.get_mut(key) {
            Some(streak) if streak.generation == generation => streak.open,
            Some(_) => {
                streaks.remove(key);
                false
            }
            None => false,
        }
    }

    /// Records the end of a reconcile of `key` at `generation` that saw
    /// children with fingerprint `children`; returns `true` when this
    /// reconcile opened the breaker.
    pub(super) fn record(
        &self,
        key: &ObjectKey,
        generation: i64,
        children: u64,
        wrote: bool,
    ) -> bool {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        if !wrote {
            streaks.remove(key);
            return false;
        }
        let now = Instant::now();
        let streak = streaks.entry(key.clone()).or_default();
        if streak.generation != generation || streak.children != children {
            *streak = Streak {
                generation,
                children,
                ..Streak::default()
            };
        }
        streak.writes.push_back(now);
        while streak
            .writes
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.config.window)
        {
            streak.writes.pop_front();
        }
        if !streak.open && streak.writes.len() > self.config.max_writes {
            streak.open = true;
            return true;
        }
        false
    }

    /// Forgets `key` (it was deleted).
    pub(super) fn forget(&self, key: &ObjectKey) {
        self.streaks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(max_writes: usize) -> Breaker {
        Breaker::new(HotLoopConfig {
            max_writes,
            window: Duration::from_secs(10),
        })
    }

    fn key() -> ObjectKey {
        ObjectKey::new(Some("default"), "web")
    }

    #[tokio::test(start_paused = true)]
    async fn more_writing_reconciles_than_allowed_at_one_generation_open_the_breaker() {
        let b = breaker(3);
        for _ in 0..3 {
            assert!(!b.record(&key(), 1, 0, true));
        }
        assert!(!b.is_open(&key(), 1));
        assert!(b.record(&key(), 1, 0, true), "the fourth write trips it");
        assert!(b.is_open(&key(), 1));
        assert!(!b.record(&key(), 1, 0, true), "it trips once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_spec_change_closes_the_breaker() {
        let b = breaker(1);
        b.record(&key(), 1, 0, true);
        assert!(b.record(&key(), 1, 0, true));
        assert!(b.is_open(&key(), 1));
        assert!(!b.is_open(&key(), 2), "a new generation closes it");
        assert!(!b.record(&key(), 2, 0, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_that_writes_nothing_ends_the_streak() {
        let b = breaker(2);
        b.record(&key(), 1, 0, true);
        b.record(&key(), 1, 0, true);
        b.record(&key(), 1, 0, false);
        assert!(!b.record(&key(), 1, 0, true));
        assert!(!b.record(&key(), 1, 0, true));
        assert!(!b.is_open(&key(), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_among_the_children_never_trips_it() {
        let b = breaker(2);
        for children in 0..50 {
            assert!(!b.record(&key(), 1, children, true));
        }
        assert!(!b.is_open(&key(), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_spread_wider_than_the_window_do_not_trip_it() {
        let b = breaker(2);
        for _ in 0..10 {
            assert!(!b.record(&key(), 1, 0, true));
            tokio::time::advance(Duration::from_secs(6)).await;
        }
        assert!(!b.is_open(&key(), 1));
    }
}
