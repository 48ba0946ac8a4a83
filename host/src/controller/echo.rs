//! Echo suppression: the watch event that carries a controller's own write
//! to the object it reconciles (its status, say) does not queue that object
//! again. The reconciler computed that write from the version it saw; the
//! echo shows it nothing new, and calling it again only to write nothing
//! was half of a converging loop's work.
//!
//! # Rule
//!
//! The controller remembers, per key, the resource version its own last
//! write of the object produced, and the reconciled kind's handler drops
//! the one [`Change::Applied`] event that carries exactly that version.
//! Every other change still queues the key: another writer's change has a
//! version of its own, a deletion always queues, and
//! [`Change::Listed`] (first list, relist, periodic resync) is never
//! dropped.
//!
//! The event can arrive before the write's answer does (the watch is
//! fast). So while a write is in flight the key's events are *held*; when
//! the answer comes, a held event of any other version (someone else's
//! change that landed meanwhile) queues the key, and the echo, if it was
//! among them, is dropped. A failed write releases whatever was held. A
//! remembered version whose echo never comes (a relist replaced it) is
//! forgotten at the key's next event.
//!
//! Only writes whose echo the reconciler has no use for are registered
//! (the status patch of a response). Adding the finalizer relies on its
//! echo to reconcile the object with the finalizer in place.
//!
//! [`Change::Applied`]: crate::informer::Change::Applied
//! [`Change::Listed`]: crate::informer::Change::Listed

use std::collections::HashMap;
use std::sync::Mutex;

use crate::object::{Object, ObjectKey, meta};
use crate::queue::WorkQueue;

/// Where a key's own write stands.
#[derive(Debug)]
enum Own {
    /// A write is in flight; the versions of the events seen meanwhile,
    /// and the version an earlier own write made whose echo had not come
    /// when this one started (two writes in a row: a status patch, then
    /// the host's own condition).
    Writing(Vec<Option<i64>>, Option<i64>),
    /// The write made this version (and, when it followed an earlier own
    /// write whose echo had not come, that one's too); their events have
    /// not come yet.
    Wrote(i64, Option<i64>),
}

/// The controller's own writes whose echoes are to be dropped, per key.
/// Entries live from a write until its echo (or the key's next event), so
/// the map holds about as many keys as there are writes in flight.
#[derive(Debug)]
pub(crate) struct Echoes {
    queue: WorkQueue<ObjectKey>,
    keys: Mutex<HashMap<ObjectKey, Own>>,
}

/// The version an object carries, as the store's revision.
fn revision(object: &Object) -> Option<i64> {
    meta::resource_version(object).and_then(|rv| rv.parse().ok())
}

impl Echoes {
    /// Echoes of keys queued on `queue`.
    pub fn new(queue: WorkQueue<ObjectKey>) -> Self {
        Self {
            queue,
            keys: Mutex::default(),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Own>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a change event (created or modified) of `key`, now at
    /// `object`, should queue the key: `false` for the echo of the
    /// controller's own write, and while a write of the key is in flight
    /// (the event is held until the write's answer decides).
    pub fn admit(&self, key: &ObjectKey, object: &Object) -> bool {
        let mut keys = self.keys();
        if keys.is_empty() {
            return true;
        }
        let Some(own) = keys.get_mut(key) else {
            return true;
        };
        let version = revision(object);
        match own {
            Own::Writing(held, _) => {
                held.push(version);
                false
            }
            Own::Wrote(ours, earlier) => {
                if version.is_some() && version == *earlier {
                    // The earlier write's echo, late: the latest's is still to come.
                    *earlier = None;
                    return false;
                }
                let echo = version == Some(*ours);
                keys.remove(key);
                !echo
            }
        }
    }

    /// A write of `key` is about to be made: hold its events until the
    /// returned guard says what the write made.
    pub fn writing<'a>(&'a self, key: &'a ObjectKey) -> Writing<'a> {
        let mut keys = self.keys();
        let earlier = match keys.get(key) {
            Some(Own::Wrote(version, _)) => Some(*version),
            _ => None,
        };
        keys.insert(key.clone(), Own::Writing(Vec::new(), earlier));
        drop(keys);
        Writing {
            echoes: self,
            key,
            settled: false,
        }
    }

    /// The write of `key` made `version` (`None`: it failed, or made
    /// nothing). Held events of any other version queue the key.
    fn settle(&self, key: &ObjectKey, version: Option<i64>) {
        let mut keys = self.keys();
        let (held, earlier) = match keys.remove(key) {
            Some(Own::Writing(held, earlier)) => (held, earlier),
            // Not ours to settle (a later write took over): leave it.
            Some(other) => {
                keys.insert(key.clone(), other);
                return;
            }
            None => (Vec::new(), None),
        };
        let echo_seen = version.is_some() && held.contains(&version);
        let other_change = held
            .iter()
            .any(|v| (version.is_none() || *v != version) && (earlier.is_none() || *v != earlier));
        let earlier = earlier.filter(|e| !held.contains(&Some(*e)));
        match (version, echo_seen, earlier) {
            (Some(version), false, earlier) => {
                keys.insert(key.clone(), Own::Wrote(version, earlier));
            }
            // Only the earlier write's echo is still to come.
            (_, _, Some(earlier)) => {
                keys.insert(key.clone(), Own::Wrote(earlier, None));
            }
            _ => {}
        }
        drop(keys);
        if other_change {
            self.queue.add(key.clone());
        }
    }

    /// Keys with a write in flight or an echo still expected (for tests).
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.keys().len()
    }
}

/// A write of one key in flight. [`Writing::wrote`] settles it with the
/// version written; dropped unsettled (a failed write, a cancelled task),
/// it releases what it held.
pub(crate) struct Writing<'a> {
    echoes: &'a Echoes,
    key: &'a ObjectKey,
    settled: bool,
}

impl Writing<'_> {
    /// The write, made on top of `seen`, returned `object`. A write that
    /// changed nothing (the same version) has no echo to expect.
    pub fn wrote(mut self, seen: &Object, object: &Object) {
        self.settled = true;
        let version = revision(object).filter(|v| Some(*v) != revision(seen));
        self.echoes.settle(self.key, version);
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.echoes.settle(self.key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::queue::Config;

    fn at(version: i64) -> Object {
        json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": version.to_string()}})
    }

    fn setup() -> (Echoes, WorkQueue<ObjectKey>, ObjectKey) {
        let queue = WorkQueue::new(Config::named("echo-test"));
        (
            Echoes::new(queue.clone()),
            queue,
            ObjectKey::new(Some("ns"), "a"),
        )
    }

    #[test]
    fn the_echo_of_an_own_write_is_dropped_once_and_later_changes_pass() {
        let (echoes, queue, key) = setup();
        echoes.writing(&key).wrote(&at(10), &at(11));
        assert!(!echoes.admit(&key, &at(11)), "the echo");
        assert!(echoes.admit(&key, &at(12)), "someone else's change");
        assert!(echoes.admit(&key, &at(11)), "only once");
        assert_eq!(queue.len(), 0, "admit never queues by itself");
        assert_eq!(echoes.pending(), 0);
    }

    #[test]
    fn an_echo_that_comes_before_the_write_answers_is_dropped() {
        let (echoes, queue, key) = setup();
        let write = echoes.writing(&key);
        assert!(!echoes.admit(&key, &at(11)), "held while the write is out");
        write.wrote(&at(10), &at(11));
        assert_eq!(queue.len(), 0, "it was the echo");
        assert_eq!(echoes.pending(), 0, "nothing left to expect");
    }

    #[test]
    fn two_own_writes_in_a_row_queue_nothing_when_the_first_echo_comes_during_the_second() {
        let (echoes, queue, key) = setup();
        echoes.writing(&key).wrote(&at(10), &at(11));
        let second = echoes.writing(&key);
        assert!(!echoes.admit(&key, &at(11)), "the first write's echo, late");
        assert!(!echoes.admit(&key, &at(12)), "the second's");
        second.wrote(&at(11), &at(12));
        assert_eq!(queue.len(), 0, "both were ours");
        assert_eq!(echoes.pending(), 0);
    }

    #[test]
    fn the_first_of_two_own_writes_echoing_after_the_second_answered_queues_nothing() {
        let (echoes, queue, key) = setup();
        echoes.writing(&key).wrote(&at(10), &at(11));
        echoes.writing(&key).wrote(&at(11), &at(12));
        assert!(!echoes.admit(&key, &at(11)), "the first write's echo, late");
        assert!(!echoes.admit(&key, &at(12)), "the second's");
        assert!(echoes.admit(&key, &at(13)), "then someone else's change");
        assert_eq!(queue.len(), 0);
        assert_eq!(echoes.pending(), 0);
    }

    #[test]
    fn another_change_held_during_the_write_queues_the_key() {
        let (echoes, queue, key) = setup();
        let write = echoes.writing(&key);
        assert!(!echoes.admit(&key, &at(11)));
        assert!(
            !echoes.admit(&key, &at(12)),
            "someone else's, right after ours"
        );
        write.wrote(&at(10), &at(11));
        assert_eq!(queue.len(), 1, "the other change queues the key");
    }

    #[test]
    fn a_failed_write_releases_what_it_held() {
        let (echoes, queue, key) = setup();
        {
            let _write = echoes.writing(&key);
            assert!(!echoes.admit(&key, &at(12)));
        }
        assert_eq!(queue.len(), 1);
        assert_eq!(echoes.pending(), 0);
        assert!(echoes.admit(&key, &at(13)));
    }

    #[test]
    fn a_change_that_replaces_the_awaited_echo_passes_and_clears_it() {
        let (echoes, _queue, key) = setup();
        echoes.writing(&key).wrote(&at(10), &at(11));
        // A relist showed a newer version instead of our echo.
        assert!(echoes.admit(&key, &at(14)));
        assert_eq!(echoes.pending(), 0);
        assert!(echoes.admit(&key, &at(11)));
    }

    #[test]
    fn a_write_that_changed_nothing_expects_no_echo() {
        let (echoes, queue, key) = setup();
        echoes.writing(&key).wrote(&at(10), &at(10));
        assert_eq!(echoes.pending(), 0);
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn other_keys_are_untouched() {
        let (echoes, _queue, key) = setup();
        echoes.writing(&key).wrote(&at(10), &at(11));
        let other = ObjectKey::new(Some("ns"), "b");
        assert!(echoes.admit(&other, &at(11)));
        assert!(!echoes.admit(&key, &at(11)));
    }
}
