//! The per-object circuit breaker against hot loops: an object whose
//! reconciles keep writing while its spec stays the same is stopped and
//! reported, until its spec changes. Owns the bookkeeping only; the
//! controller decides what "wrote" means and how a trip is reported.
//!
//! # Rule
//!
//! A reconcile that wrote something (a child, the status, a finalizer, an
//! event) at generation `g`, and saw no change among the owned children
//! that someone else made since the previous one, counts towards the
//! object's streak; one that wrote nothing, a new generation or a change
//! among the children made by another writer ends the streak. So progress
//! driven by children (Pods becoming ready one by one) never trips it; a
//! reconcile fed only by its own writes, to the object or to its children
//! (a desired child that flips between two states on every call), does.
//! A child's change is the reconciler's own when the child is at a revision
//! one of the streak's reconciles wrote. When a streak holds more than
//! [`HotLoopConfig::max_writes`] writing reconciles within
//! [`HotLoopConfig::window`], the breaker opens for generation `g`: the
//! object is not reconciled again until its generation moves on (a spec
//! change), which closes the breaker. Time is [`tokio::time`]'s, so paused
//! test time works.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use std::sync::Arc;

use crate::object::{Object, ObjectKey, meta};

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
    /// A fingerprint of the owned children the last reconcile saw, leaving
    /// out those at a revision the streak wrote itself.
    children: Option<u64>,
    /// Store revisions the streak's reconciles wrote (bounded by
    /// [`MAX_OWN_REVISIONS`]).
    own: HashSet<i64>,
    writes: VecDeque<Instant>,
    /// The breaker is open for `generation`.
    open: bool,
}

/// The most revisions a streak remembers as its own; past that it forgets
/// them all and children changes count as progress again (a reconcile that
/// writes thousands of children per call is not a fast loop).
const MAX_OWN_REVISIONS: usize = 4096;

/// A child's uid and revision.
fn uid_and_revision(child: &Object) -> (&str, i64) {
    (
        meta::uid(child),
        meta::resource_version(child)
            .and_then(|rv| rv.parse().ok())
            .unwrap_or_default(),
    )
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
    /// `children` and wrote the store revisions `written` (`wrote` is also
    /// true for writes without a revision to wait for, such as events);
    /// returns `true` when this reconcile opened the breaker.
    pub(super) fn record(
        &self,
        key: &ObjectKey,
        generation: i64,
        children: &[Arc<Object>],
        written: &[i64],
        wrote: bool,
    ) -> bool {
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        if !wrote {
            streaks.remove(key);
            return false;
        }
        let now = Instant::now();
        let streak = streaks.entry(key.clone()).or_default();
        if streak.generation != generation {
            *streak = Streak {
                generation,
                ..Streak::default()
            };
        }
        let foreign = fingerprint(
            children
                .iter()
                .map(|c| uid_and_revision(c))
                .filter(|(_, rv)| !streak.own.contains(rv)),
        );
        if streak.children != Some(foreign) {
            streak.children = Some(foreign);
            streak.writes.clear();
        }
        if streak.own.len() + written.len() > MAX_OWN_REVISIONS {
            streak.own.clear();
        }
        streak.own.extend(written);
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

    /// Forgets the streaks that can no longer trip: closed, with every
    /// write older than the window. A converged object's bookkeeping thus
    /// does not outlive its use (at a million objects it would be ~0.4 GB).
    /// The revisions such a streak wrote go with it, so a child it wrote
    /// then counts as someone else's change once more: that can only end a
    /// later streak sooner, never trip one. Returns how many went.
    pub(super) fn sweep(&self) -> usize {
        let now = Instant::now();
        let window = self.config.window;
        let mut streaks = self.streaks.lock().unwrap_or_else(|p| p.into_inner());
        let before = streaks.len();
        streaks.retain(|_, streak| {
            streak.open
                || streak
                    .writes
                    .back()
                    .is_some_and(|t| now.saturating_duration_since(*t) <= window)
        });
        if streaks.capacity() > 4 * streaks.len().max(64) {
            streaks.shrink_to_fit();
        }
        before - streaks.len()
    }

    /// Forgets `key` (it was deleted).
    pub(super) fn forget(&self, key: &ObjectKey) {
        self.streaks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

fn fingerprint<'a>(children: impl Iterator<Item = (&'a str, i64)>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut seen: Vec<(&str, i64)> = children.collect();
    seen.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    seen.hash(&mut hasher);
    hasher.finish()
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

    fn child(uid: &str, revision: i64) -> Arc<Object> {
        Arc::new(serde_json::json!({
            "metadata": {"uid": uid, "resourceVersion": revision.to_string()}
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn more_writing_reconciles_than_allowed_at_one_generation_open_the_breaker() {
        let b = breaker(3);
        for _ in 0..3 {
            assert!(!b.record(&key(), 1, &[], &[], true));
        }
        assert!(!b.is_open(&key(), 1));
        assert!(
            b.record(&key(), 1, &[], &[], true),
            "the fourth write trips it"
        );
        assert!(b.is_open(&key(), 1));
        assert!(!b.record(&key(), 1, &[], &[], true), "it trips once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_spec_change_closes_the_breaker() {
        let b = breaker(1);
        b.record(&key(), 1, &[], &[], true);
        assert!(b.record(&key(), 1, &[], &[], true));
        assert!(b.is_open(&key(), 1));
        assert!(!b.is_open(&key(), 2), "a new generation closes it");
        assert!(!b.record(&key(), 2, &[], &[], true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_that_writes_nothing_ends_the_streak() {
        let b = breaker(2);
        b.record(&key(), 1, &[], &[], true);
        b.record(&key(), 1, &[], &[], true);
        b.record(&key(), 1, &[], &[], false);
        assert!(!b.record(&key(), 1, &[], &[], true));
        assert!(!b.record(&key(), 1, &[], &[], true));
        assert!(!b.is_open(&key(), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_among_the_children_never_trips_it() {
        let b = breaker(2);
        for revision in 0..50 {
            let children = [child("pod-0", revision)];
            assert!(!b.record(&key(), 1, &children, &[1000 + revision], true));
        }
        assert!(!b.is_open(&key(), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_forgets_closed_streaks_whose_writes_left_the_window() {
        let b = breaker(1);
        let other = ObjectKey::new(Some("default"), "hot");
        b.record(&key(), 1, &[], &[], true);
        b.record(&other, 1, &[], &[], true);
        assert!(b.record(&other, 1, &[], &[], true), "tripped");
        assert_eq!(b.sweep(), 0, "both wrote within the window");
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(b.sweep(), 1, "the quiet one goes");
        assert!(b.is_open(&other, 1), "an open breaker stays open");
        // A forgotten streak starts afresh: one write is within the limit.
        assert!(!b.record(&key(), 1, &[], &[], true));
        assert!(b.record(&key(), 1, &[], &[], true), "and counts again");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_spread_wider_than_the_window_do_not_trip_it() {
        let b = breaker(2);
        for _ in 0..10 {
            assert!(!b.record(&key(), 1, &[], &[], true));
            tokio::time::advance(Duration::from_secs(6)).await;
        }
        assert!(!b.is_open(&key(), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn children_changed_only_by_its_own_writes_are_no_progress() {
        let b = breaker(3);
        // A desired child that flips on every call: each reconcile sees the
        // revision the previous one wrote, and writes the next.
        let tripped: Vec<bool> = (0..6)
            .map(|i| b.record(&key(), 1, &[child("child", 10 + i)], &[11 + i], true))
            .collect();
        assert!(tripped.contains(&true), "{tripped:?}");
        assert!(b.is_open(&key(), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn children_changed_by_another_writer_between_own_writes_are_progress() {
        let b = breaker(3);
        for i in 0..20 {
            // Each call sees the child at a revision someone else wrote
            // (even numbers), and writes the status (odd numbers).
            let children = [child("pod", 2 * i)];
            assert!(!b.record(&key(), 1, &children, &[2 * i + 1], true));
        }
        assert!(!b.is_open(&key(), 1));
    }
}
