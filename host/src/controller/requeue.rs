//! A floor and a per-key rate on the requeues a reconciler asks for, so
//! that `requeue-after 0` (or any short delay, answered again and again
//! with nothing to do) is not a hot loop nobody stops.
//!
//! # Rule
//!
//! - No requeue comes sooner than [`RequeueConfig::floor`].
//! - A reconcile that asked for a requeue and wrote nothing is *idle*.
//!   After [`RequeueConfig::free`] idle requeues of one key in a row, with
//!   the object and its children unchanged in between, each further one
//!   waits twice as long as the last (from the floor), up to
//!   [`RequeueConfig::ceiling`]. A delay the reconciler asked for is never
//!   shortened, and one at or above the ceiling is never lengthened.
//! - A reconcile that created, changed or deleted a child, or that saw
//!   the object changed by others (its generation, labels, annotations or
//!   deletion) or its children changed since the last idle one, starts the
//!   count again. Its own status writes do not: a plugin that requeues at
//!   once and writes a small status every few calls is idle as far as the
//!   world is concerned, and was a loop of 150 % CPU nobody stopped.
//!   Reconciles that keep changing children are the hot-loop breaker's
//!   business (`breaker`).
//!
//! The controller reports the moment a key starts being slowed (a warning
//! event, `RequeueThrottled`). Time-based reconcilers (podsim waiting for a
//! pod's start-up delay) requeue once per wait, so they never meet the rule.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::object::ObjectKey;

/// Limits on requested requeues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequeueConfig {
    /// The shortest delay a requeue gets. Default 10 ms.
    pub floor: Duration,
    /// Idle requeues of one key in a row taken at the requested delay.
    /// Default 5.
    pub free: u32,
    /// The longest the rate stretches a delay to. Default 5 s.
    pub ceiling: Duration,
}

impl Default for RequeueConfig {
    fn default() -> Self {
        Self {
            floor: Duration::from_millis(10),
            free: 5,
            ceiling: Duration::from_secs(5),
        }
    }
}

/// What the object looked like to an idle reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// A hash of the object's resource version and its children's.
    pub fingerprint: u64,
}

#[derive(Debug)]
struct Idle {
    seen: Seen,
    count: u32,
}

/// The delay a requeue gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Delay {
    /// How long until the key is reconciled again.
    pub after: Duration,
    /// This requeue is the first one slowed down for the key (report it).
    pub started_throttling: bool,
    /// The delay is longer than the reconciler asked for.
    pub stretched: bool,
}

/// Per-key idle-requeue bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Requeues {
    config: RequeueConfig,
    idle: Mutex<HashMap<ObjectKey, Idle>>,
}

impl Requeues {
    pub(super) fn new(config: RequeueConfig) -> Self {
        Self {
            config,
            idle: Mutex::default(),
        }
    }

    /// The delay for a requeue of `key` the reconciler asked for after
    /// `requested`; `wrote` says whether the reconcile changed a child and
    /// `seen` what others could change of what it was shown.
    pub(super) fn delay(
        &self,
        key: &ObjectKey,
        requested: Duration,
        wrote: bool,
        seen: Seen,
    ) -> Delay {
        let floor = requested.max(self.config.floor);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if wrote {
            idle.remove(key);
            return Delay {
                after: floor,
                started_throttling: false,
                stretched: floor > requested,
            };
        }
        let entry = idle.entry(key.clone()).or_insert(Idle { seen, count: 0 });
        if entry.seen != seen {
            *entry = Idle { seen, count: 0 };
        }
        entry.count = entry.count.saturating_add(1);
        let over = entry.count.saturating_sub(self.config.free);
        if over == 0 || requested >= self.config.ceiling {
            return Delay {
                after: floor,
                started_throttling: false,
                stretched: floor > requested,
            };
        }
        let stretched = self
            .config
            .floor
            .saturating_mul(1u32 << over.min(20))
            .min(self.config.ceiling);
        let after = requested.max(stretched);
        Delay {
            after,
            started_throttling: over == 1,
            stretched: after > requested,
        }
    }

    /// The longest delay the rate stretches a requeue to.
    pub(super) fn ceiling(&self) -> Duration {
        self.config.ceiling
    }

    /// Forget `key`: its reconcile ended without a requeue, or it is gone.
    pub(super) fn forget(&self, key: &ObjectKey) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ObjectKey::new(Some("default"), "spin")
    }

    const SAME: Seen = Seen { fingerprint: 7 };

    #[test]
    fn no_requeue_comes_sooner_than_the_floor() {
        let r = Requeues::new(RequeueConfig::default());
        let d = r.delay(&key(), Duration::ZERO, true, SAME);
        assert_eq!(d.after, Duration::from_millis(10));
        assert!(d.stretched);
        let d = r.delay(&key(), Duration::from_millis(300), true, SAME);
        assert_eq!(d.after, Duration::from_millis(300));
        assert!(!d.stretched);
    }

    #[test]
    fn idle_requeues_in_a_row_slow_down_to_the_ceiling_and_are_reported_once() {
        let r = Requeues::new(RequeueConfig::default());
        let delays: Vec<Delay> = (0..20)
            .map(|_| r.delay(&key(), Duration::ZERO, false, SAME))
            .collect();
        assert!(
            delays[..5]
                .iter()
                .all(|d| d.after == Duration::from_millis(10))
        );
        assert_eq!(delays[5].after, Duration::from_millis(20));
        assert_eq!(delays[6].after, Duration::from_millis(40));
        assert_eq!(delays[19].after, Duration::from_secs(5));
        let reported: Vec<usize> = (0..20).filter(|&i| delays[i].started_throttling).collect();
        assert_eq!(reported, [5]);
        // Over any number of idle calls, the total rate stays bounded.
        let total: Duration = delays.iter().map(|d| d.after).sum();
        assert!(total > Duration::from_secs(30), "{total:?}");
    }

    #[test]
    fn a_write_or_a_change_starts_the_count_again() {
        let r = Requeues::new(RequeueConfig::default());
        for _ in 0..10 {
            r.delay(&key(), Duration::ZERO, false, SAME);
        }
        let changed = Seen { fingerprint: 8 };
        assert_eq!(
            r.delay(&key(), Duration::ZERO, false, changed).after,
            Duration::from_millis(10)
        );
        for _ in 0..10 {
            r.delay(&key(), Duration::ZERO, false, changed);
        }
        r.delay(&key(), Duration::ZERO, true, changed);
        assert_eq!(
            r.delay(&key(), Duration::ZERO, false, changed).after,
            Duration::from_millis(10)
        );
    }

    #[test]
    fn requested_delays_are_never_shortened_nor_long_ones_stretched() {
        let r = Requeues::new(RequeueConfig::default());
        for _ in 0..30 {
            let d = r.delay(&key(), Duration::from_secs(60), false, SAME);
            assert_eq!(d.after, Duration::from_secs(60));
            assert!(!d.started_throttling);
        }
        for _ in 0..30 {
            let d = r.delay(&key(), Duration::from_millis(700), false, SAME);
            assert!(d.after >= Duration::from_millis(700));
            assert!(d.after <= Duration::from_secs(5));
        }
    }
}
