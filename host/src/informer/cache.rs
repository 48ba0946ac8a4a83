//! The informer's cache: objects by key, plus indexes by owner uid, by namespace and by label
//! (`key=value`), kept in step with every upsert and removal.
//!
//! Objects are kept as their JSON text, not decoded: a decoded 1 KiB
//! object takes about 10 KiB (every JSON object is a `BTreeMap` node of 640
//! bytes), the text a tenth of that. A reader gets the decoded object that
//! someone still holds (the watch hub keeps recent changes decoded, so an
//! object being reconciled usually is), or one decoded from the text. A
//! list fills the cache from the store's text as it is (no decode, no
//! encode, [`Cache::replace_read`]); what the indexes need of an object is
//! read from its `metadata` alone ([`Terms`]). Each key is held once, shared
//! by the map and every index.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use super::Change;
use super::terms::{NotReady, Terms};
use crate::object::{Object, ObjectKey};

/// One cached object.
struct Entry {
    /// The object as JSON, `metadata.resourceVersion` included.
    json: Box<[u8]>,
    /// Its resource version, to tell an unchanged object at a glance.
    version: Option<Box<str>>,
    /// The decoded object, while anyone holds it.
    live: Mutex<Weak<Object>>,
}

impl Entry {
    fn new(object: &Arc<Object>, version: Option<Box<str>>) -> Self {
        Self {
            // Encoding a JSON value cannot fail (its keys are strings).
            json: serde_json::to_vec(&**object)
                .expect("a JSON value encodes")
                .into_boxed_slice(),
            version,
            live: Mutex::new(Arc::downgrade(object)),
        }
    }

    /// The entry for `json`, which nobody holds decoded yet.
    fn from_json(json: Vec<u8>, version: Option<Box<str>>) -> Self {
        Self {
            json: json.into_boxed_slice(),
            version,
            live: Mutex::new(Weak::new()),
        }
    }

    fn held(&self) -> Option<Arc<Object>> {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }

    /// What a listing tells of the object: the whole object if someone
    /// holds it decoded, else only its `metadata` and `status.conditions`
    /// (decoding those skips the rest, a fraction of a whole decode; see
    /// [`Change::Listed`]).
    fn head(&self) -> Arc<Object> {
        if let Some(object) = self.held() {
            return object;
        }
        crate::object::codec::decode_head(&self.json)
            .map(Arc::new)
            .unwrap_or_else(|_| self.object())
    }

    /// The object, decoded again only if nobody holds it.
    fn object(&self) -> Arc<Object> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(object) = live.upgrade() {
            return object;
        }
        // It was encoded from a JSON value, so it decodes: deeper than the
        // parser's default limit only if an earlier version stored it so
        // (read as the store reads it, `codec`).
        let object = serde_json::from_slice(&self.json)
            .ok()
            .or_else(|| crate::object::codec::decode_deep(&self.json))
            .expect("cached JSON decodes");
        let object = Arc::new(object);
        *live = Arc::downgrade(&object);
        object
    }

    /// What the indexes hold of it: from the decoded object if someone
    /// holds it, else from the text's `metadata`.
    fn terms(&self) -> Terms {
        match self.held() {
            Some(object) => Terms::of(&object),
            None => Terms::of_json(&self.json).expect("cached JSON decodes"),
        }
    }
}

/// A change [`Cache::replace_read`] found: ready, or an object that is
/// decoded only when someone is told about it ([`Cache::change`]).
pub(super) enum Pending {
    Ready(Change),
    Applied(Arc<ObjectKey>),
}

/// Keys, each held once and shared by the map and the indexes.
type Keys = HashSet<Arc<ObjectKey>>;

/// Objects of one kind, as of one store revision.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use setpoint::informer::Cache;
/// use setpoint::object::ObjectKey;
///
/// let mut cache = Cache::default();
/// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
///
/// cache.upsert(pod("web-0", "1"), 1);
/// cache.upsert(pod("web-1", "2"), 2);
/// assert_eq!((cache.len(), cache.revision()), (2, 2));
/// assert_eq!(cache.owned_by("rs-1").len(), 2);
/// ```
#[derive(Default)]
pub struct Cache {
    objects: HashMap<Arc<ObjectKey>, Entry>,
    by_owner: HashMap<String, Keys>,
    by_namespace: HashMap<Option<String>, Keys>,
    by_label: HashMap<(String, String), Keys>,
    /// Objects whose `Ready` condition is not `True` (the console counts
    /// and lists them without decoding every object).
    not_ready: HashMap<Arc<ObjectKey>, NotReady>,
    revision: i64,
}

impl Cache {
    /// One object.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// cache.upsert(pod("web-0", "1"), 1);
    /// assert!(cache.get(&ObjectKey::new(Some("default"), "web-0")).is_some());
    /// assert!(cache.get(&ObjectKey::new(Some("other"), "web-0")).is_none());
    /// ```
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        self.objects.get(key).map(Entry::object)
    }

    /// Every object.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// cache.upsert(pod("web-0", "1"), 1);
    /// assert_eq!(cache.iter().count(), 1);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = Arc<Object>> + '_ {
        self.objects.values().map(Entry::object)
    }

    /// Every object as a listing tells it ([`Change::Listed`]): its
    /// `metadata` and `status.conditions`, or the whole object where one is
    /// held decoded anyway.
    pub(super) fn heads(&self) -> impl Iterator<Item = Arc<Object>> + '_ {
        self.objects.values().map(Entry::head)
    }

    /// Objects with an owner reference to `uid`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// cache.upsert(pod("web-0", "1"), 1);
    /// assert_eq!(cache.owned_by("rs-1").len(), 1);
    /// assert!(cache.owned_by("someone-else").is_empty());
    /// ```
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<Object>> {
        self.by_owner
            .get(uid)
            .map(|keys| self.resolve(keys))
            .unwrap_or_default()
    }

    /// Objects in `namespace` (`None`: cluster-scoped objects).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// cache.upsert(pod("web-0", "1"), 1);
    /// assert_eq!(cache.in_namespace(Some("default")).len(), 1);
    /// assert!(cache.in_namespace(None).is_empty(), "no cluster-scoped objects");
    /// ```
    pub fn in_namespace(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        self.by_namespace
            .get(&namespace.map(str::to_owned))
            .map(|keys| self.resolve(keys))
            .unwrap_or_default()
    }

    /// Objects carrying the label `key=value`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// cache.upsert(pod("web-0", "1"), 1);
    /// assert_eq!(cache.with_label("app", "web").len(), 1);
    /// assert!(cache.with_label("app", "db").is_empty());
    /// ```
    pub fn with_label(&self, key: &str, value: &str) -> Vec<Arc<Object>> {
        self.by_label
            .get(&(key.to_owned(), value.to_owned()))
            .map(|keys| self.resolve(keys))
            .unwrap_or_default()
    }

    /// How many objects are cached.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// assert_eq!(cache.len(), 0);
    /// cache.upsert(pod("web-0", "1"), 1);
    /// assert_eq!(cache.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is cached.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// assert!(cache.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    fn resolve(&self, keys: &Keys) -> Vec<Arc<Object>> {
        keys.iter()
            .filter_map(|k| self.objects.get(k).map(Entry::object))
            .collect()
    }

    /// The revision the cache reflects.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// cache.upsert(pod("web-0", "5"), 5);
    /// assert_eq!(cache.revision(), 5);
    /// ```
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Insert or replace; returns the change unless the object is unchanged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// assert!(cache.upsert(pod("web-0", "1"), 1).is_some());
    /// assert!(cache.upsert(pod("web-0", "1"), 1).is_none(), "same resourceVersion: no change");
    /// assert!(cache.upsert(pod("web-0", "2"), 2).is_some());
    /// ```
    pub fn upsert(&mut self, object: Arc<Object>, revision: i64) -> Option<Change> {
        self.revision = self.revision.max(revision);
        let terms = Terms::of(&object);
        if self.unchanged(&terms) {
            return None;
        }
        let entry = Entry::new(&object, terms.version.clone());
        self.put(terms, entry);
        Some(Change::Applied(object))
    }

    /// Remove; returns the change if the object was cached.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// let web = pod("web-0", "1");
    /// cache.upsert(web.clone(), 1);
    /// assert!(cache.remove(&web, 2).is_some());
    /// assert!(cache.remove(&web, 3).is_none(), "already gone");
    /// assert!(cache.owned_by("rs-1").is_empty(), "the indexes follow");
    /// ```
    pub fn remove(&mut self, object: &Arc<Object>, revision: i64) -> Option<Change> {
        self.revision = self.revision.max(revision);
        let (key, old) = self.objects.remove_entry(&ObjectKey::of(object))?;
        self.unindex(&key, &old.terms());
        Some(Change::Deleted(object.clone()))
    }

    /// Replace the whole content with a fresh list; returns what changed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    /// use setpoint::object::ObjectKey;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str| Arc::new(json!({"metadata": {"name": name, "namespace": "default",
    ///     "resourceVersion": rv, "labels": {"app": "web"}, "ownerReferences": [{"uid": "rs-1"}]}}));
    ///
    /// use setpoint::informer::Change;
    /// cache.upsert(pod("stays", "1"), 1);
    /// cache.upsert(pod("goes", "2"), 2);
    /// let fresh = vec![(*pod("stays", "1")).clone(), (*pod("new", "3")).clone()];
    /// let changes = cache.replace(fresh, 3);
    /// let names: Vec<_> = changes.iter().map(|c| match c {
    ///     Change::Applied(o) => format!("applied {}", o["metadata"]["name"]),
    ///     Change::Deleted(o) => format!("deleted {}", o["metadata"]["name"]),
    ///     Change::Listed(o) => format!("listed {}", o["metadata"]["name"]),
    /// }).collect();
    /// assert_eq!(names, [r#"deleted "goes""#, r#"applied "new""#], "unchanged objects are not reported");
    /// ```
    pub fn replace(&mut self, items: Vec<Object>, revision: i64) -> Vec<Change> {
        let fresh: HashSet<ObjectKey> = items.iter().map(ObjectKey::of).collect();
        let mut changes = self.remove_missing(&fresh, revision);
        for item in items {
            changes.extend(self.upsert(Arc::new(item), revision));
        }
        self.revision = revision;
        changes
    }

    /// [`Cache::replace`] with objects given as JSON text (as
    /// `serde_json::to_vec` writes them, `metadata.resourceVersion`
    /// included), kept as they are: nothing is decoded but `metadata`.
    /// Objects applied are named, not decoded ([`Cache::change`] does that
    /// for whoever is told about them).
    #[cfg(test)]
    pub(super) fn replace_json(&mut self, items: Vec<Vec<u8>>, revision: i64) -> Vec<Pending> {
        self.replace_read(read_terms(items), revision)
    }

    /// Replace the cache with a list's texts at `revision`, each with its
    /// terms read already ([`read_terms`], done before the cache is
    /// locked); returns the changes against what was cached.
    pub(super) fn replace_read(
        &mut self,
        items: Vec<(Terms, Vec<u8>)>,
        revision: i64,
    ) -> Vec<Pending> {
        // Nothing to remove from an empty cache (the first list): no set
        // of a million keys to build for that.
        let mut pending: Vec<Pending> = if self.objects.is_empty() {
            Vec::new()
        } else {
            let fresh: HashSet<ObjectKey> = items.iter().map(|(t, _)| t.key.clone()).collect();
            self.remove_missing(&fresh, revision)
                .into_iter()
                .map(Pending::Ready)
                .collect()
        };
        for (terms, json) in items {
            if self.unchanged(&terms) {
                continue;
            }
            let entry = Entry::from_json(json, terms.version.clone());
            pending.push(Pending::Applied(self.put(terms, entry)));
        }
        self.revision = revision;
        pending
    }

    /// The change `pending` stands for, its object decoded if it has to be;
    /// objects applied by the first list are [`Change::Listed`].
    pub(super) fn change(&self, pending: Pending, first_list: bool) -> Option<Change> {
        match pending {
            Pending::Ready(change) => Some(change),
            Pending::Applied(key) => {
                let entry = self.objects.get(&key)?;
                Some(if first_list {
                    Change::Listed(entry.head())
                } else {
                    Change::Applied(entry.object())
                })
            }
        }
    }

    /// Whether the object `terms` describe is cached at that version.
    fn unchanged(&self, terms: &Terms) -> bool {
        self.objects
            .get(&terms.key)
            .is_some_and(|old| old.version == terms.version)
    }

    /// Removes the objects whose keys are not in `fresh`, returning their deletions.
    fn remove_missing(&mut self, fresh: &HashSet<ObjectKey>, revision: i64) -> Vec<Change> {
        let gone: Vec<Arc<ObjectKey>> = super::missing(&self.objects, fresh)
            .into_iter()
            .cloned()
            .collect();
        let mut changes = Vec::new();
        for key in gone {
            if let Some(old) = self.objects.get(&key).map(Entry::object) {
                changes.extend(self.remove(&old, revision));
            }
        }
        changes
    }

    /// Caches `entry` under `terms`' key (the key already held, if any, is
    /// kept) and indexes it; returns the key.
    fn put(&mut self, terms: Terms, entry: Entry) -> Arc<ObjectKey> {
        let key = match self.objects.remove_entry(&terms.key) {
            Some((key, old)) => {
                self.unindex(&key, &old.terms());
                key
            }
            None => Arc::new(terms.key.clone()),
        };
        self.index(&key, &terms);
        self.objects.insert(key.clone(), entry);
        key
    }

    fn index(&mut self, key: &Arc<ObjectKey>, terms: &Terms) {
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

    fn unindex(&mut self, key: &ObjectKey, terms: &Terms) {
        for uid in &terms.owners {
            remove_from(&mut self.by_owner, uid, key);
        }
        remove_from(&mut self.by_namespace, &key.namespace, key);
        for label in &terms.labels {
            remove_from(&mut self.by_label, label, key);
        }
        self.not_ready.remove(key);
    }

    /// The objects whose `Ready` condition is not `True`, with what it says.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::informer::Cache;
    ///
    /// let mut cache = Cache::default();
    /// let pod = |name: &str, rv: &str, ready: &str| Arc::new(json!({"metadata": {"name": name,
    ///     "namespace": "default", "resourceVersion": rv},
    ///     "status": {"conditions": [{"type": "Ready", "status": ready}]}}));
    /// cache.upsert(pod("a", "1", "True"), 1);
    /// cache.upsert(pod("b", "2", "False"), 2);
    /// assert_eq!(cache.not_ready().len(), 1);
    /// cache.upsert(pod("b", "3", "True"), 3);
    /// assert!(cache.not_ready().is_empty(), "the index follows the object");
    /// ```
    pub fn not_ready(&self) -> Vec<(ObjectKey, NotReady)> {
        self.not_ready
            .iter()
            .map(|(key, n)| ((**key).clone(), *n))
            .collect()
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
            index.insert(entry.clone(), Keys::from([key.clone()]));
        }
    }
}

/// Each text with its terms, read on as many threads as there are cores
/// for a long list: a list of a million objects spent most of an
/// informer's fill here (docs/benchmarks/scale.md, "Restarts without a
/// storm").
pub(super) fn read_terms(items: Vec<Vec<u8>>) -> Vec<(Terms, Vec<u8>)> {
    // Only the store's own encoding comes here, and that decodes.
    let read = |items: Vec<Vec<u8>>| -> Vec<(Terms, Vec<u8>)> {
        items
            .into_iter()
            .map(|json| (Terms::of_json(&json).expect("stored JSON decodes"), json))
            .collect()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || items.len() < 8192 {
        return read(items);
    }
    let per_thread = items.len().div_ceil(threads);
    let mut chunks = Vec::with_capacity(threads);
    let mut rest = items;
    while rest.len() > per_thread {
        let tail = rest.split_off(per_thread);
        chunks.push(std::mem::replace(&mut rest, tail));
    }
    chunks.push(rest);
    std::thread::scope(|scope| {
        let readers: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || read(chunk)))
            .collect();
        readers
            .into_iter()
            .flat_map(|reader| {
                reader
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
            .collect()
    })
}

/// Removes `key` from the index entry `entry`, dropping the entry once empty.
fn remove_from<I: std::hash::Hash + Eq>(index: &mut HashMap<I, Keys>, entry: &I, key: &ObjectKey) {
    if let Some(keys) = index.get_mut(entry) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(entry);
        }
    }
}

#[cfg(test)]
mod tests;
