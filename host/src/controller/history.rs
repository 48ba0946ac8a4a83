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

/// Recent results per object; cheap to clone.
#[derive(Clone, Default)]
pub struct History {
    records: Arc<Mutex<HashMap<ObjectKey, VecDeque<ReconcileRecord>>>>,
}

impl History {
    /// Remember a result.
    pub fn push(&self, key: &ObjectKey, record: ReconcileRecord) {
        let mut map = self.records.lock().unwrap_or_else(|p| p.into_inner());
        // Look up before inserting: `entry` would copy the key on every call.
        if !map.contains_key(key) {
            map.insert(key.clone(), Default::default());
        }
        let list = map.get_mut(key).expect("inserted above");
        if list.len() == KEPT_PER_OBJECT {
            list.pop_front();
        } else {
            // Grown one record at a time: held for every object, a list
            // grown by doubling would hold room for four records after
            // the first (see docs/benchmarks/scale.md#a-million-pods-2026-11-26).
            list.reserve_exact(1);
        }
        list.push_back(record);
    }

    /// The recent results of one object, oldest first.
    pub fn of(&self, key: &ObjectKey) -> Vec<ReconcileRecord> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forget an object (it was deleted).
    pub fn forget(&self, key: &ObjectKey) {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
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
        let capacity = |h: &History| h.records.lock().unwrap()[&key].capacity();
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
}
