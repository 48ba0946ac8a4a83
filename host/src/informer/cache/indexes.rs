//! The informer cache's indexes, each entry a set of the cache's shared
//! keys: by owner uid, by namespace, by label, and of the objects that are
//! not `Ready`.

use std::sync::Arc;

use super::super::terms::{NotReady, Terms};
use super::{HashMap, Keys};
use crate::object::ObjectKey;

/// The cache's indexes: by owner uid, by namespace, by label, and of the
/// objects that are not `Ready`.
#[derive(Default)]
pub(super) struct Indexes {
    pub(super) by_owner: HashMap<String, Keys>,
    pub(super) by_namespace: HashMap<Option<String>, Keys>,
    pub(super) by_label: HashMap<(String, String), Keys>,
    /// Objects whose `Ready` condition is not `True` (the console counts
    /// and lists them without decoding every object).
    pub(super) not_ready: HashMap<Arc<ObjectKey>, NotReady>,
}

impl Indexes {
    pub(super) fn add(&mut self, key: &Arc<ObjectKey>, terms: &Terms) {
        // Looked up before an entry is made: most objects share their
        // owner, namespace and labels with others, and a key copied for
        // `entry` would be an allocation per index per object.
        for uid in &terms.owners {
            add_to(&mut self.by_owner, uid, key);
        }
        add_to(&mut self.by_namespace, &key.namespace, key);
        for label in &terms.labels {
            add_to(&mut self.by_label, label, key);
        }
        if let Some(not_ready) = terms.not_ready {
            self.not_ready.insert(key.clone(), not_ready);
        }
    }

    pub(super) fn remove(&mut self, key: &ObjectKey, terms: &Terms) {
        for uid in &terms.owners {
            remove_from(&mut self.by_owner, uid, key);
        }
        remove_from(&mut self.by_namespace, &key.namespace, key);
        for label in &terms.labels {
            remove_from(&mut self.by_label, label, key);
        }
        self.not_ready.remove(key);
    }

    /// Makes room in each index entry for the objects `terms` describe,
    /// before they are added to an empty cache: a set grown a key at a
    /// time to a million members rehashes every key it holds at each
    /// doubling, and hashing a key is a walk to its name (the informer
    /// fill at a million objects, docs/benchmarks/scale.md).
    pub(super) fn reserve_for<'a>(&mut self, terms: impl Iterator<Item = &'a Terms>) {
        let mut owners: HashMap<&str, usize> = HashMap::default();
        let mut namespaces: HashMap<Option<&str>, usize> = HashMap::default();
        let mut labels: HashMap<(&str, &str), usize> = HashMap::default();
        for terms in terms {
            for uid in &terms.owners {
                *owners.entry(uid).or_default() += 1;
            }
            *namespaces
                .entry(terms.key.namespace.as_deref())
                .or_default() += 1;
            for (name, value) in &terms.labels {
                *labels.entry((name, value)).or_default() += 1;
            }
        }
        for (uid, count) in owners {
            reserve_in(&mut self.by_owner, uid.to_owned(), count);
        }
        for (namespace, count) in namespaces {
            reserve_in(&mut self.by_namespace, namespace.map(str::to_owned), count);
        }
        for ((name, value), count) in labels {
            reserve_in(
                &mut self.by_label,
                (name.to_owned(), value.to_owned()),
                count,
            );
        }
    }

    /// Takes `key` out of every index entry, its terms unknown.
    pub(super) fn remove_everywhere(&mut self, key: &ObjectKey) {
        for keys in self.by_owner.values_mut().chain(self.by_label.values_mut()) {
            keys.remove(key);
        }
        self.by_owner.retain(|_, keys| !keys.is_empty());
        self.by_label.retain(|_, keys| !keys.is_empty());
        remove_from(&mut self.by_namespace, &key.namespace, key);
        self.not_ready.remove(key);
    }
}

/// Adds `key` to the index entry `entry`, made if it is the first.
fn add_to<I: std::hash::Hash + Eq + Clone>(
    index: &mut HashMap<I, Keys>,
    entry: &I,
    key: &Arc<ObjectKey>,
) {
    match index.get_mut(entry) {
        Some(keys) => {
            keys.insert(key.clone());
        }
        None => {
            index.insert(entry.clone(), Keys::from_iter([key.clone()]));
        }
    }
}

/// Room for `count` more keys in the index entry `entry`; worth it only
/// for large entries (a set of a few keys is made as it fills).
fn reserve_in<I: std::hash::Hash + Eq>(index: &mut HashMap<I, Keys>, entry: I, count: usize) {
    if count >= RESERVE_FROM {
        index.entry(entry).or_default().reserve(count);
    }
}

/// The size from which an index entry's room is made ahead.
const RESERVE_FROM: usize = 64;

/// Removes `key` from the index entry `entry`, dropping the entry once empty.
fn remove_from<I: std::hash::Hash + Eq>(index: &mut HashMap<I, Keys>, entry: &I, key: &ObjectKey) {
    if let Some(keys) = index.get_mut(entry) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(entry);
        }
    }
}
