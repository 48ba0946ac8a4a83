//! The last few reconcile results of each object, kept by the host so that a
//! user can see why a chain of controllers is stuck without reading logs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::object::ObjectKey;

/// How many results are kept per object.
pub const KEPT_PER_OBJECT: usize = 10;

/// How one reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The response was applied.
    Success,
    /// Failed; retried with backoff.
    TransientError(String),
    /// Failed; not retried until the object changes.
    PermanentError(String),
}

/// One reconcile, as the host saw it.
#[derive(Debug, Clone)]
pub struct ReconcileRecord {
    /// When it started.
    pub started: SystemTime,
    /// How long it took, plugin call and writes included.
    pub duration: Duration,
    /// The reconciler's version.
    pub version: String,
    /// How it ended.
    pub outcome: Outcome,
    /// When the object will be looked at again, if scheduled.
    pub next_in: Option<Duration>,
}

/// How many objects whose last reconcile succeeded keep their results: the
/// ones reconciled most recently. An object whose last reconcile failed
/// keeps them however long ago that was, until it succeeds or goes: that is
/// the history one looks for. Holding every object's results cost more
/// memory at a million objects than their keys (see BENCHMARKS.md, "Scale").
pub const KEPT_SUCCEEDED_OBJECTS: usize = 16_384;

/// One object's results and when they were last added to.
struct Entry {
    records: VecDeque<ReconcileRecord>,
    /// The [`Records::clock`] of the last push.
    stamp: u64,
}

#[derive(Default)]
struct Records {
    objects: HashMap<ObjectKey, Entry>,
    /// Keys in the order results were pushed, each with the stamp it got;
    /// an older stamp than the entry's is a stale place, skipped.
    order: VecDeque<(ObjectKey, u64)>,
    clock: u64,
    /// Entries whose last result is a success.
    succeeded: usize,
}

impl Records {
    /// Let go of the least recently reconciled objects whose last result is
    /// a success, down to [`KEPT_SUCCEEDED_OBJECTS`].
    fn trim(&mut self, keep: usize) {
        while self.succeeded > keep {
            let Some((key, stamp)) = self.order.pop_front() else {
                break;
            };
            let current = self
                .objects
                .get(&key)
                .is_some_and(|e| e.stamp == stamp && last_succeeded(&e.records));
            if current {
                self.objects.remove(&key);
                self.succeeded -= 1;
            }
        }
        // Stale places of failed or recently touched keys: let the queue
        // hold at most two per kept object.
        if self.order.len() > 2 * self.objects.len() + 64 {
            let objects = &self.objects;
            self.order
                .retain(|(key, stamp)| objects.get(key).is_some_and(|e| e.stamp == *stamp));
        }
    }
}

fn last_succeeded(records: &VecDeque<ReconcileRecord>) -> bool {
    records
        .back()
        .is_some_and(|r| r.outcome == Outcome::Success)
}

/// Recent results per object; cheap to clone. Bounded: see
/// [`KEPT_SUCCEEDED_OBJECTS`].
#[derive(Clone)]
pub struct History {
    records: Arc<Mutex<Records>>,
    keep_succeeded: usize,
}

impl Default for History {
    fn default() -> Self {
        Self::keeping(KEPT_SUCCEEDED_OBJECTS)
    }
}

impl History {
    /// A history that keeps the results of at most `objects` objects whose
    /// last reconcile succeeded (and of every object whose last one failed).
    pub fn keeping(objects: usize) -> Self {
        Self {
            records: Arc::default(),
            keep_succeeded: objects,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember a result.
    pub fn push(&self, key: &ObjectKey, record: ReconcileRecord) {
        let mut records = self.lock();
        records.clock += 1;
        let stamp = records.clock;
        let succeeds = record.outcome == Outcome::Success;
        // Look up before inserting: `entry` would copy the key on every call.
        let succeeded_before = match records.objects.get_mut(key) {
            Some(entry) => {
                let before = last_succeeded(&entry.records);
                if entry.records.len() == KEPT_PER_OBJECT {
                    entry.records.pop_front();
                } else {
                    // Grown one record at a time: a list grown by doubling
                    // would hold room for four records after the first (see
                    // docs/benchmarks/scale.md#a-million-pods-2026-11-26).
                    entry.records.reserve_exact(1);
                }
                entry.records.push_back(record);
                entry.stamp = stamp;
                before
            }
            None => {
                let mut list = VecDeque::with_capacity(1);
                list.push_back(record);
                records.objects.insert(
                    key.clone(),
                    Entry {
                        records: list,
                        stamp,
                    },
                );
                false
            }
        };
        match (succeeded_before, succeeds) {
            (false, true) => records.succeeded += 1,
            (true, false) => records.succeeded -= 1,
            _ => {}
        }
        records.order.push_back((key.clone(), stamp));
        let keep = self.keep_succeeded;
        records.trim(keep);
    }

    /// The recent results of one object, oldest first.
    pub fn of(&self, key: &ObjectKey) -> Vec<ReconcileRecord> {
        self.lock()
            .objects
            .get(key)
            .map(|e| e.records.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forget an object (it was deleted).
    pub fn forget(&self, key: &ObjectKey) {
        let mut records = self.lock();
        if let Some(entry) = records.objects.remove(key)
            && last_succeeded(&entry.records)
        {
            records.succeeded -= 1;
        }
    }

    /// How many objects have results kept.
    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    /// Whether no object has results kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> ReconcileRecord {
        ReconcileRecord {
            started: SystemTime::UNIX_EPOCH + Duration::from_secs(n),
            duration: Duration::from_millis(n),
            version: "1.0.0".into(),
            outcome: Outcome::Success,
            next_in: None,
        }
    }

    #[test]
    fn an_object_keeps_its_last_records_oldest_first_in_no_more_room_than_they_take() {
        let history = History::default();
        let key = ObjectKey::new(Some("default"), "a");
        for n in 0..3 {
            history.push(&key, record(n));
        }
        let capacity = |h: &History| h.lock().objects[&key].records.capacity();
        assert_eq!(capacity(&history), 3, "grown one record at a time");
        for n in 3..(KEPT_PER_OBJECT as u64 + 5) {
            history.push(&key, record(n));
        }
        let kept: Vec<u64> = history
            .of(&key)
            .iter()
            .map(|r| r.duration.as_millis() as u64)
            .collect();
        assert_eq!(kept, (5..KEPT_PER_OBJECT as u64 + 5).collect::<Vec<_>>());
        assert_eq!(capacity(&history), KEPT_PER_OBJECT);
        history.forget(&key);
        assert!(history.of(&key).is_empty());
    }

    fn failed(n: u64) -> ReconcileRecord {
        ReconcileRecord {
            outcome: Outcome::TransientError(format!("failure {n}")),
            ..record(n)
        }
    }

    fn key(i: usize) -> ObjectKey {
        ObjectKey::new(Some("default"), &format!("o{i}"))
    }

    #[test]
    fn only_the_most_recently_reconciled_objects_that_succeeded_keep_their_results() {
        let history = History::keeping(3);
        for i in 0..5 {
            history.push(&key(i), record(i as u64));
        }
        assert_eq!(history.len(), 3);
        assert!(history.of(&key(0)).is_empty() && history.of(&key(1)).is_empty());
        // Reconciled again, o2 is the most recent: o3 goes next.
        history.push(&key(2), record(9));
        history.push(&key(5), record(10));
        assert_eq!(history.of(&key(2)).len(), 2);
        assert!(history.of(&key(3)).is_empty());
        assert_eq!(history.len(), 3);
    }

    #[test]
    fn an_object_whose_last_reconcile_failed_keeps_its_results_until_it_succeeds_or_goes() {
        let history = History::keeping(2);
        history.push(&key(0), failed(0));
        for i in 1..100 {
            history.push(&key(i), record(i as u64));
        }
        assert_eq!(history.of(&key(0)).len(), 1, "a failure is kept");
        assert_eq!(history.len(), 3, "the failed one and the last two");
        // It succeeds: now it is one of the successes, the oldest of which go.
        history.push(&key(0), record(100));
        assert_eq!(history.of(&key(0)).len(), 2);
        assert_eq!(history.len(), 2);
        history.push(&key(0), failed(101));
        history.forget(&key(0));
        assert!(history.of(&key(0)).is_empty());
        for i in 200..210 {
            history.push(&key(i), record(i as u64));
        }
        assert_eq!(
            history.len(),
            2,
            "forgetting a failed key left the count right"
        );
    }

    #[test]
    fn the_order_queue_does_not_grow_with_repeated_results_of_kept_objects() {
        let history = History::keeping(4);
        history.push(&key(0), failed(0));
        for n in 0..10_000 {
            history.push(&key(n % 3), record(n as u64));
            history.push(&key(7), failed(n as u64));
        }
        let records = history.lock();
        assert!(
            records.order.len() <= 2 * records.objects.len() + 64 + 1,
            "{}",
            records.order.len()
        );
    }
}
