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
