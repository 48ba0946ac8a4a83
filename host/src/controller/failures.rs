//! Keys whose last reconcile failed permanently, and what the reconciler saw
//! then. A permanent error waits for a change: such a key is not handed to
//! the reconciler again while the object is the version it failed on (or the
//! version the host's own `Ready=False` write made of it) and its children
//! are the same. Without this, the host's own condition write came back as a
//! change and the plugin was called, and failed, a second time.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::object::ObjectKey;

/// What a reconciler saw when it was called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    /// The object's `resourceVersion`.
    pub resource_version: String,
    /// A fingerprint of the owned children (`worker::fingerprint`).
    pub children: u64,
}

#[derive(Debug)]
struct Failed {
    seen: Seen,
    /// The version of the host's `Ready=False` write on top of `seen`.
    reported: Option<String>,
}

/// The keys waiting for a change after a permanent error.
#[derive(Debug, Default)]
pub(super) struct Failures(Mutex<HashMap<ObjectKey, Failed>>);

impl Failures {
    /// `key` failed permanently on `seen`; the host's report of it wrote
    /// `reported` (only when that write was made on top of `seen` itself: a
    /// write on a newer version carries someone else's change too).
    pub fn record(&self, key: &ObjectKey, seen: Seen, reported: Option<String>) {
        self.lock().insert(key.clone(), Failed { seen, reported });
    }

    /// Whether `key` is still as it failed: the object at the version it
    /// failed on or at the host's report, and the same children. Anything
    /// else ends the wait (the key is forgotten), so the reconciler runs.
    pub fn unchanged(&self, key: &ObjectKey, resource_version: &str, children: u64) -> bool {
        let mut failed = self.lock();
        let Some(entry) = failed.get(key) else {
            return false;
        };
        let same_object = entry.seen.resource_version == resource_version
            || entry.reported.as_deref() == Some(resource_version);
        if same_object && entry.seen.children == children {
            return true;
        }
        failed.remove(key);
        false
    }

    /// Every key waiting for a change.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.lock().keys().cloned().collect()
    }

    /// `key` is gone.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// A new reconciler (or a changed grant) deserves a try at every
    /// failed key.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// What the keys of `namespace` may use changed (a Secret there): they
    /// deserve a try.
    pub fn forget_namespace(&self, namespace: Option<&str>) {
        self.lock()
            .retain(|key, _| key.namespace.as_deref() != namespace);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Failed>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(version: &str, children: u64) -> Seen {
        Seen {
            resource_version: version.into(),
            children,
        }
    }

    #[test]
    fn a_failed_key_waits_while_only_the_hosts_own_report_changed_it() {
        let failures = Failures::default();
        let key = ObjectKey::new(Some("default"), "broken");
        assert!(!failures.unchanged(&key, "5", 0), "nothing recorded");
        failures.record(&key, seen("5", 7), Some("6".into()));
        assert!(failures.unchanged(&key, "5", 7), "the version it failed on");
        assert!(failures.unchanged(&key, "6", 7), "the host's own report");
        assert!(failures.unchanged(&key, "6", 7), "still waiting");
    }

    #[test]
    fn any_other_change_ends_the_wait_for_good() {
        let failures = Failures::default();
        let key = ObjectKey::new(Some("default"), "broken");
        failures.record(&key, seen("5", 7), Some("6".into()));
        assert!(!failures.unchanged(&key, "9", 7), "the object changed");
        assert!(!failures.unchanged(&key, "5", 7), "forgotten once changed");

        failures.record(&key, seen("5", 7), None);
        assert!(!failures.unchanged(&key, "5", 8), "a child changed");
        assert!(!failures.unchanged(&key, "5", 7));

        // Without a report on top of what failed, a newer version is a change.
        failures.record(&key, seen("5", 7), None);
        assert!(!failures.unchanged(&key, "6", 7));
    }

    #[test]
    fn forget_and_clear_end_the_wait() {
        let failures = Failures::default();
        let (a, b) = (ObjectKey::new(None, "a"), ObjectKey::new(None, "b"));
        failures.record(&a, seen("1", 0), None);
        failures.record(&b, seen("1", 0), None);
        failures.forget(&a);
        assert!(!failures.unchanged(&a, "1", 0));
        failures.clear();
        assert!(!failures.unchanged(&b, "1", 0));
    }
}
