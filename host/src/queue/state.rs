//! The queue's lock-protected bookkeeping: ready FIFO, dirty and processing sets, delayed keys
//! and lifecycle, as plain synchronous logic driven by the caller's clock reading.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::delay::Delayed;
use super::metrics::{Gauges, Metrics};

/// Where the queue is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Accepting adds.
    Running,
    /// `shutdown_with_drain`: no new adds; pending keys are still handed out.
    Draining,
    /// `shutdown`: no new adds, nothing more handed out.
    Stopped,
}

/// The outcome of trying to take the next key.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Take<K> {
    /// A key, now marked as processing.
    Key(K),
    /// Nothing ready yet; wait for a notification or until the deadline, if any.
    Wait(Option<Instant>),
    /// Shut down and nothing more will become ready.
    Closed,
}

/// Invariants:
/// - `ready` holds distinct keys, each also in `dirty` and never in `processing`;
/// - `low_pending` holds the keys waiting in the low-priority lane, each also in `dirty`, never
///   in `ready` nor `processing`; `low` holds them in FIFO order plus stale entries (keys that
///   were promoted to `ready` or handed out since), skipped when popped;
/// - `dirty` = `ready` ∪ `low_pending` ∪ (keys in `processing` that were re-added meanwhile),
///   so `dirty.len() - ready.len() - low_pending.len()` keys await their `done` to be requeued;
/// - `by_event` ⊆ `dirty` ∪ `processing`: pending or processing keys whose latest add came
///   from [`add`](State::add) (a new event) rather than from a delayed (retry) add;
/// - a key is in `processing` from `get` until `done`, so it is never handed out twice at once.
#[derive(Debug)]
pub(super) struct State<K> {
    ready: VecDeque<K>,
    /// The low-priority lane (initial lists, resyncs): handed out only when `ready` is empty.
    low: VecDeque<K>,
    low_pending: HashSet<K>,
    /// Pending keys whose latest add came from a new event.
    by_event: HashSet<K>,
    /// Processing keys that were handed out because of a new event.
    processing_event: HashSet<K>,
    /// Processing keys re-added only at low priority: `done` requeues them in the low lane.
    low_after_done: HashSet<K>,
    /// Keys that need processing, with the time they became pending (for queue latency).
    dirty: HashMap<K, Instant>,
    /// Keys handed out and not yet done, with the time they were handed out.
    processing: HashMap<K, Instant>,
    delayed: Delayed<K>,
    lifecycle: Lifecycle,
}

impl<K: Clone + Eq + Hash> State<K> {
    pub(super) fn new() -> Self {
        Self {
            ready: VecDeque::new(),
            low: VecDeque::new(),
            low_pending: HashSet::new(),
            by_event: HashSet::new(),
            processing_event: HashSet::new(),
            low_after_done: HashSet::new(),
            dirty: HashMap::new(),
            processing: HashMap::new(),
            delayed: Delayed::new(),
            lifecycle: Lifecycle::Running,
        }
    }

    pub(super) fn is_shutting_down(&self) -> bool {
        self.lifecycle != Lifecycle::Running
    }

    /// Adds `key` now. Returns `true` if it was appended to the ready queue (wake a getter).
    pub(super) fn add(&mut self, key: K, now: Instant, metrics: &Metrics) -> bool {
        if self.lifecycle != Lifecycle::Running {
            return false;
        }
        self.by_event.insert(key.clone());
        self.low_after_done.remove(&key);
        if self.low_pending.remove(&key) {
            // Promote from the low lane; its stale entry there is skipped later.
            self.ready.push_back(key);
            return true;
        }
        self.enqueue(key, now, metrics)
    }

    /// Adds `key` to the low-priority lane unless it is already pending (at either priority).
    /// Returns `true` if it was queued (wake a getter).
    pub(super) fn add_low(&mut self, key: K, now: Instant, metrics: &Metrics) -> bool {
        if self.lifecycle != Lifecycle::Running || self.dirty.contains_key(&key) {
            return false;
        }
        metrics.record_add();
        self.dirty.insert(key.clone(), now);
        if self.processing.contains_key(&key) {
            self.low_after_done.insert(key);
            return false;
        }
        self.low_pending.insert(key.clone());
        self.low.push_back(key);
        true
    }

    /// Whether `key` is being processed because of a new event (an [`add`](Self::add)) rather
    /// than only because of a delayed retry.
    pub(super) fn processing_for_event(&self, key: &K) -> bool {
        self.processing_event.contains(key)
    }

    /// Adds `key` at `ready_at`. Returns `true` if the next deadline moved earlier (re-arm waiters).
    pub(super) fn add_after(&mut self, key: K, ready_at: Instant) -> bool {
        self.lifecycle == Lifecycle::Running && self.delayed.insert(key, ready_at)
    }

    /// Marks `key` dirty and queues it unless it is already pending or being processed.
    fn enqueue(&mut self, key: K, now: Instant, metrics: &Metrics) -> bool {
        if self.dirty.contains_key(&key) {
            return false;
        }
        metrics.record_add();
        if self.processing.contains_key(&key) {
            self.dirty.insert(key, now);
            return false;
        }
        self.dirty.insert(key.clone(), now);
        self.ready.push_back(key);
        true
    }

    /// Moves delayed keys whose time has come into the ready queue; returns how many were queued.
    pub(super) fn promote_due(&mut self, now: Instant, metrics: &Metrics) -> usize {
        let mut queued = 0;
        while let Some(key) = self.delayed.pop_due(now) {
            if self.enqueue(key, now, metrics) {
                queued += 1;
            }
        }
        queued
    }

    /// Hands out the next ready key (promoting due delayed keys first), or says what to wait for.
    pub(super) fn take(&mut self, now: Instant, metrics: &Metrics) -> Take<K> {
        self.promote_due(now, metrics);
        let next = self.ready.pop_front().or_else(|| {
            while let Some(key) = self.low.pop_front() {
                if self.low_pending.remove(&key) {
                    return Some(key);
                }
            }
            None
        });
        if let Some(key) = next {
            if let Some(pending_since) = self.dirty.remove(&key) {
                metrics
                    .queue_duration
                    .observe(now.saturating_duration_since(pending_since));
            }
            if self.by_event.remove(&key) {
                self.processing_event.insert(key.clone());
            }
            self.processing.insert(key.clone(), now);
            return Take::Key(key);
        }
        match self.lifecycle {
            Lifecycle::Running => Take::Wait(self.delayed.next_deadline()),
            // With `ready` empty, `dirty` holds exactly the keys awaiting requeue on `done`.
            Lifecycle::Draining if !self.dirty.is_empty() => Take::Wait(None),
            Lifecycle::Draining | Lifecycle::Stopped => Take::Closed,
        }
    }

    /// Finishes processing `key`. Returns `None` if it was not being processed, otherwise
    /// whether it was requeued because it had been re-added meanwhile.
    pub(super) fn done(&mut self, key: &K, now: Instant, metrics: &Metrics) -> Option<bool> {
        let (key, started) = self.processing.remove_entry(key)?;
        self.processing_event.remove(&key);
        let low = self.low_after_done.remove(&key);
        metrics
            .work_duration
            .observe(now.saturating_duration_since(started));
        if self.lifecycle != Lifecycle::Stopped && self.dirty.contains_key(&key) {
            if low {
                self.low_pending.insert(key.clone());
                self.low.push_back(key);
            } else {
                self.ready.push_back(key);
            }
            Some(true)
        } else {
            if self.dirty.is_empty() {
                self.give_back_room();
            }
            Some(false)
        }
    }

    /// With nothing pending, gives back the room a burst grew the
    /// containers to: a queue that once held every key of a large kind
    /// (a first list, a resync) would otherwise keep room for all of them
    /// for good (docs/benchmarks/scale.md#a-million-pods-2026-11-26). Only a
    /// container far larger than what it holds is shrunk, so a steady
    /// trickle of keys does not reallocate on every `done`.
    fn give_back_room(&mut self) {
        const KEPT: usize = 1024;
        let oversized = |capacity: usize, len: usize| capacity > KEPT && capacity > 4 * len;
        // Nothing is pending, so every entry left in the low lane is stale.
        if self.low_pending.is_empty() {
            self.low.clear();
        }
        macro_rules! shrink {
            ($($field:ident),*) => {$(
                if oversized(self.$field.capacity(), self.$field.len()) {
                    self.$field.shrink_to(KEPT.max(2 * self.$field.len()));
                }
            )*};
        }
        shrink!(
            ready,
            low,
            low_pending,
            by_event,
            processing_event,
            low_after_done,
            dirty,
            processing
        );
    }

    /// At most as many as [`State::owed`] lists, counted without a copy
    /// (each of its three sets holds distinct keys; a key may be in two).
    pub(super) fn owed_at_least(&self) -> usize {
        self.dirty
            .len()
            .max(self.processing.len())
            .max(self.delayed.len())
    }

    /// Every key the queue still owes a hand-out: pending or processing
    /// (`None`: now), or delayed (its ready time). A key both pending and
    /// delayed is told once, as pending.
    pub(super) fn owed(&self) -> Vec<(K, Option<Instant>)> {
        let mut owed: Vec<(K, Option<Instant>)> = self
            .dirty
            .keys()
            .chain(
                self.processing
                    .keys()
                    .filter(|k| !self.dirty.contains_key(*k)),
            )
            .map(|k| (k.clone(), None))
            .collect();
        owed.extend(
            self.delayed
                .iter()
                .filter(|(k, _)| !self.dirty.contains_key(*k) && !self.processing.contains_key(*k))
                .map(|(k, at)| (k.clone(), Some(at))),
        );
        owed
    }

    /// Room held by the containers, in keys (for tests).
    #[cfg(test)]
    pub(super) fn room(&self) -> usize {
        self.ready.capacity()
            + self.low.capacity()
            + self.low_pending.capacity()
            + self.by_event.capacity()
            + self.dirty.capacity()
    }

    /// Stops accepting adds and drops delayed keys. Without `drain`, also drops pending keys so
    /// nothing more is handed out; with `drain` (and not already stopped) pending keys remain.
    pub(super) fn shutdown(&mut self, drain: bool) {
        self.delayed.clear();
        if drain {
            if self.lifecycle == Lifecycle::Running {
                self.lifecycle = Lifecycle::Draining;
            }
        } else {
            self.lifecycle = Lifecycle::Stopped;
            self.ready.clear();
            self.low.clear();
            self.low_pending.clear();
            self.by_event.clear();
            self.low_after_done.clear();
            self.dirty.clear();
        }
    }

    /// Nothing is ready and nothing is being processed.
    pub(super) fn is_drained(&self) -> bool {
        self.ready.is_empty() && self.low_pending.is_empty() && self.processing.is_empty()
    }

    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || !self.low_pending.is_empty()
    }

    pub(super) fn ready_len(&self) -> usize {
        self.ready.len() + self.low_pending.len()
    }

    pub(super) fn gauges(&self, now: Instant) -> Gauges {
        let (unfinished_work, longest_running_processor) = self.processing.values().fold(
            (Duration::ZERO, Duration::ZERO),
            |(sum, longest), &started| {
                let running = now.saturating_duration_since(started);
                (sum.saturating_add(running), longest.max(running))
            },
        );
        Gauges {
            depth: self.dirty.len(),
            delayed: self.delayed.len(),
            in_flight: self.processing.len(),
            unfinished_work,
            longest_running_processor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_queue_gives_back_the_room_a_burst_grew_it_to() {
        let metrics = Metrics::default();
        let now = Instant::now();
        let mut state = State::new();
        const BURST: u32 = 100_000;
        for key in 0..BURST {
            // Half from events, half from a list or resync.
            if key % 2 == 0 {
                state.add(key, now, &metrics);
            } else {
                state.add_low(key, now, &metrics);
            }
        }
        let grown = state.room();
        assert!(grown >= BURST as usize, "{grown}");
        let mut handed_out = 0;
        let mut re_added = false;
        while let Take::Key(key) = state.take(now, &metrics) {
            // A key re-added while processed is handed out again afterwards.
            if key == 7 && !re_added {
                state.add(key, now, &metrics);
                re_added = true;
            }
            state.done(&key, now, &metrics);
            handed_out += 1;
        }
        assert_eq!(handed_out, BURST + 1);
        assert!(state.is_drained());
        let room = state.room();
        assert!(room <= 5 * 2048, "drained, yet room for {room} keys");
        // And it still works as a queue afterwards.
        state.add(1, now, &metrics);
        assert_eq!(state.take(now, &metrics), Take::Key(1));
    }
}
