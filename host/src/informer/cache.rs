//! The informer's cache: objects by key, plus indexes by owner uid, by namespace and by label
//! (`key=value`), kept in step with every upsert and removal.
//!
//! Over a store that reads single versions cheaply (the embedded store,
//! [`Backend::version_reader`](crate::store::Backend::version_reader)) the
//! cache keeps no copy of an object: only its key, index entries and the
//! revision its text is stored at, read back from the store when someone
//! asks ([`Source`]). An object a watch event brings is held decoded until
//! the store can read it (writes are acknowledged a little before the
//! database holds them), then let go ([`Cache::shed`]). Over other stores
//! (memory, etcd) each object is kept as its JSON text, a tenth of the
//! decoded object (every JSON object is a `BTreeMap` node of 640 bytes).
//!
//! A reader gets the decoded object that someone still holds (the watch
//! hub keeps recent changes decoded, so an object being reconciled usually
//! is), or one decoded from the text. A list fills the cache from the
//! store's text without decoding it: what the indexes need of an object is
//! read from its `metadata` alone ([`Terms`]). Each object has a numbered
//! slot (`table.rs`); the indexes are bitmaps of slot numbers.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use super::Change;
use super::terms::{NotReady, Terms};
use crate::object::{Object, ObjectKey};

mod indexes;
pub(super) mod saved;
mod source;
mod table;
mod version;

use indexes::Indexes;
use roaring::RoaringBitmap;
pub(super) use saved::Saved;
pub(super) use source::Source;
use table::{SlotNumber, Table};
use version::Version;

/// Where a cached object's content is.
pub(super) enum Text {
    /// Here, as JSON (`metadata.resourceVersion` included): caches without
    /// a [`Source`].
    Held(Box<[u8]>),
    /// Here, decoded, from a watch event, until the store reads it back
    /// ([`Cache::shed`]).
    Recent(Arc<Object>),
    /// In the [`Source`], written at this revision.
    Stored(i64),
}

/// One cached object.
struct Entry {
    text: Text,
    /// Its resource version, to tell an unchanged object at a glance.
    version: Option<Version>,
    /// The decoded object, while anyone holds it.
    live: Mutex<Weak<Object>>,
}

impl Entry {
    fn new(text: Text, version: Option<Version>) -> Self {
        Self {
            text,
            version,
            live: Mutex::new(Weak::new()),
        }
    }

    /// An entry holding `object` as its text, and decoded while anyone
    /// holds it.
    fn held_as_text(object: &Arc<Object>, version: Option<Version>) -> Self {
        Self {
            // Encoding a JSON value cannot fail (its keys are strings).
            text: Text::Held(
                serde_json::to_vec(&**object)
                    .expect("a JSON value encodes")
                    .into_boxed_slice(),
            ),
            version,
            live: Mutex::new(Arc::downgrade(object)),
        }
    }

    /// Whether the content is held here, not in the store.
    fn holds(&self) -> bool {
        !matches!(self.text, Text::Stored(_))
    }

    fn held(&self) -> Option<Arc<Object>> {
        if let Text::Recent(object) = &self.text {
            return Some(object.clone());
        }
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }

    /// What a listing tells of the object: the whole object if someone
    /// holds it decoded, else only its `metadata` and `status.conditions`
    /// (decoding those skips the rest, a fraction of a whole decode; see
    /// [`Change::Listed`]).
    fn head(&self, key: &ObjectKey, source: Option<&Source>) -> Option<Arc<Object>> {
        if let Some(object) = self.held() {
            return Some(object);
        }
        let text = match &self.text {
            Text::Held(json) => Cow::Borrowed(&json[..]),
            Text::Stored(revision) => Cow::Owned(source?.text(key, *revision)?),
            Text::Recent(_) => unreachable!("held, answered above"),
        };
        crate::object::codec::decode_head(&text)
            .map(Arc::new)
            .ok()
            .or_else(|| self.object(key, source))
    }

    /// The object, decoded again only if nobody holds it; `None` only if
    /// the source lost this version (see [`Source::read`]).
    fn object(&self, key: &ObjectKey, source: Option<&Source>) -> Option<Arc<Object>> {
        if let Text::Recent(object) = &self.text {
            return Some(object.clone());
        }
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(object) = live.upgrade() {
            return Some(object);
        }
        let object = match &self.text {
            // It was encoded from a JSON value, so it decodes: deeper than
            // the parser's default limit only if an earlier version stored
            // it so (read as the store reads it, `codec`).
            Text::Held(json) => serde_json::from_slice(json)
                .ok()
                .or_else(|| crate::object::codec::decode_deep(json))
                .expect("cached JSON decodes"),
            Text::Stored(revision) => source?.object(key, *revision)?,
            Text::Recent(_) => unreachable!("answered above"),
        };
        let object = Arc::new(object);
        *live = Arc::downgrade(&object);
        Some(object)
    }

    /// What the indexes hold of it: from the decoded object if someone
    /// holds it, else from the text's `metadata`; `None` only if the
    /// source lost it.
    fn terms(&self, key: &ObjectKey, source: Option<&Source>) -> Option<Terms> {
        if let Some(object) = self.held() {
            return Some(Terms::of(&object));
        }
        match &self.text {
            Text::Held(json) => Terms::of_json(json),
            Text::Stored(revision) => source?.terms(key, *revision),
            Text::Recent(_) => unreachable!("held, answered above"),
        }
    }
}

/// A change [`Cache::replace_read`] found: ready, or an object that is
/// decoded only when someone is told about it ([`Cache::change`]).
pub(super) enum Pending {
    Ready(Change),
    Applied(Arc<ObjectKey>),
}

/// The cache's maps: with a seeded fast hasher rather than SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

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
    objects: Table,
    indexes: Indexes,
    revision: i64,
    /// Where objects are read back from; `None`: each is held as text.
    source: Option<Source>,
    /// Objects held decoded ([`Text::Recent`]) with their revisions,
    /// oldest first, for [`Cache::shed`].
    recent: VecDeque<(Arc<ObjectKey>, i64)>,
    /// Entries whose content is held here ([`Text::Held`], [`Text::Recent`]).
    held: usize,
}

impl Cache {
    /// An empty cache that keeps no objects, only where `source` stores
    /// them.
    pub(super) fn reading_from(source: Source) -> Self {
        Self {
            source: Some(source),
            ..Self::default()
        }
    }

    /// Whether objects are read back from the store rather than held.
    pub(super) fn reads_back(&self) -> bool {
        self.source.is_some()
    }

    /// The object `entry` caches: its version, or, if the store lost that
    /// (replaced and compacted before the watch told the change), the
    /// live one, newer than the cache's revision for a moment.
    fn read(&self, key: &ObjectKey, entry: &Entry) -> Option<Arc<Object>> {
        let source = self.source.as_ref();
        entry.object(key, source).or_else(|| source?.live(key))
    }

    /// What a listing tells of the object `entry` caches ([`Entry::head`]),
    /// the live object if the store lost that version ([`Cache::read`]).
    fn head(&self, key: &ObjectKey, entry: &Entry) -> Option<Arc<Object>> {
        let source = self.source.as_ref();
        entry.head(key, source).or_else(|| source?.live(key))
    }

    /// How many objects' content the cache holds itself: every object
    /// over a store without version reads, else those a watch event told
    /// that the store cannot read back yet.
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Takes `key`'s entry out of the table: its slot, its key, the entry.
    fn take(&mut self, key: &ObjectKey) -> Option<(SlotNumber, Arc<ObjectKey>, Entry)> {
        let (n, key, entry) = self.objects.remove(key)?;
        self.held -= usize::from(entry.holds());
        Some((n, key, entry))
    }

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
        let (_, key, entry) = self.objects.get(key)?;
        self.read(key, entry)
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
        self.objects
            .iter()
            .filter_map(|(_, key, entry)| self.read(key, entry))
    }

    /// Every object as a listing tells it ([`Change::Listed`]): its
    /// `metadata` and `status.conditions`, or the whole object where one is
    /// held decoded anyway.
    pub(super) fn heads(&self) -> impl Iterator<Item = Arc<Object>> + '_ {
        self.objects
            .iter()
            .filter_map(|(_, key, entry)| self.head(key, entry))
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
        self.indexes
            .by_owner
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
        self.indexes
            .by_namespace
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
        self.indexes
            .by_label
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

    fn resolve(&self, slots: &RoaringBitmap) -> Vec<Arc<Object>> {
        slots
            .iter()
            .filter_map(|n| {
                let (key, entry) = self.objects.at(n)?;
                self.read(key, entry)
            })
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
        let version = Version::of(terms.version.as_deref());
        let recent = parse_revision(&terms).filter(|_| self.source.is_some());
        let entry = match recent {
            Some(_) => Entry::new(Text::Recent(object.clone()), version),
            None => Entry::held_as_text(&object, version),
        };
        let key = self.put(terms, entry);
        // The map's key, shared: let go of by `shed` once stored.
        if let Some(revision) = recent {
            self.recent.push_back((key, revision));
        }
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
        let (n, key, old) = self.take(&ObjectKey::of(object))?;
        // The watch tells the deletion with the object as it was last, the
        // version cached: its terms are the ones indexed.
        let terms = if Version::same(old.version.as_ref(), meta_version(object)) {
            Some(Terms::of(object))
        } else {
            old.terms(&key, self.source.as_ref())
        };
        self.unindex_terms(n, &key, terms.as_ref());
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
        let items = items
            .into_iter()
            .map(|text| match self.reads_back() {
                true => Listed::Stored(text.into(), revision),
                false => Listed::Text(text),
            })
            .collect();
        let read = read_terms(items);
        self.replace_read(read, revision)
    }

    /// Replace the cache with a list's texts at `revision`, each with its
    /// terms read already ([`read_terms`], done before the cache is
    /// locked); returns the changes against what was cached.
    pub(super) fn replace_read(
        &mut self,
        items: Vec<(Terms, Text)>,
        revision: i64,
    ) -> Vec<Pending> {
        // Nothing to remove from an empty cache (the first list): no set
        // of a million keys to build for that.
        let mut pending: Vec<Pending> = if self.objects.is_empty() {
            self.objects.reserve(items.len());
            Vec::with_capacity(items.len())
        } else {
            let fresh: HashSet<ObjectKey> = items.iter().map(|(t, _)| t.key.clone()).collect();
            self.remove_missing(&fresh, revision)
                .into_iter()
                .map(Pending::Ready)
                .collect()
        };
        for (terms, text) in items {
            if self.unchanged(&terms) {
                continue;
            }
            pending.push(Pending::Applied(self.put_text(terms, text)));
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
                let (_, _, entry) = self.objects.get(&key)?;
                Some(if first_list {
                    Change::Listed(self.head(&key, entry)?)
                } else {
                    Change::Applied(self.read(&key, entry)?)
                })
            }
        }
    }

    /// Every object, as the changes a first list into an empty cache gives.
    pub(super) fn all_pending(&self) -> Vec<Pending> {
        self.objects
            .keys()
            .map(|key| Pending::Applied(key.clone()))
            .collect()
    }

    /// Caches the object `terms` describe as `text` (listed, or a change
    /// from the store's history applied to a restored cache); returns its
    /// key.
    pub(super) fn put_text(&mut self, terms: Terms, text: Text) -> Arc<ObjectKey> {
        let version = Version::of(terms.version.as_deref());
        self.put(terms, Entry::new(text, version))
    }

    /// A deletion from the store's history applied to a restored cache.
    pub(super) fn catch_up_delete(&mut self, key: &ObjectKey) {
        if let Some((n, key, old)) = self.take(key) {
            let terms = old.terms(&key, self.source.as_ref());
            self.unindex_terms(n, &key, terms.as_ref());
        }
    }

    /// A restored cache caught up with the store's history to `revision`.
    pub(super) fn caught_up_to(&mut self, revision: i64) {
        self.revision = self.revision.max(revision);
    }

    /// Whether the object `terms` describe is cached at that version.
    fn unchanged(&self, terms: &Terms) -> bool {
        self.objects.get(&terms.key).is_some_and(|(_, _, old)| {
            Version::same(old.version.as_ref(), terms.version.as_deref())
        })
    }

    /// Removes the objects whose keys are not in `fresh`, returning their deletions.
    fn remove_missing(&mut self, fresh: &HashSet<ObjectKey>, revision: i64) -> Vec<Change> {
        let gone: Vec<Arc<ObjectKey>> = self
            .objects
            .keys()
            .filter(|key| !fresh.contains(&***key))
            .cloned()
            .collect();
        self.revision = self.revision.max(revision);
        let mut changes = Vec::new();
        for key in gone {
            let Some((n, _, old)) = self.take(&key) else {
                continue;
            };
            let source = self.source.as_ref();
            let (terms, last) = (old.terms(&key, source), old.object(&key, source));
            self.unindex_terms(n, &key, terms.as_ref());
            // A stored version compacted away after its deletion: only its
            // key is known (client-go's `DeletedFinalStateUnknown`).
            let last = last.unwrap_or_else(|| Arc::new(self.key_only(&key, &old)));
            changes.push(Change::Deleted(last));
        }
        changes
    }

    /// Caches `entry` under `terms`' key (an object already held keeps its
    /// key and slot; its entry is replaced in place) and indexes it;
    /// returns the key.
    fn put(&mut self, mut terms: Terms, entry: Entry) -> Arc<ObjectKey> {
        self.held += usize::from(entry.holds());
        let (n, key) = match self.objects.get_slot_mut(&terms.key) {
            Some((n, key, held)) => {
                let (key, old) = (key.clone(), std::mem::replace(held, entry));
                self.held -= usize::from(old.holds());
                let old_terms = old.terms(&key, self.source.as_ref());
                self.unindex_terms(n, &key, old_terms.as_ref());
                (n, key)
            }
            None => {
                // The terms' own key, not a copy.
                let key = Arc::new(std::mem::replace(&mut terms.key, ObjectKey::new(None, "")));
                (self.objects.insert(key.clone(), entry), key)
            }
        };
        self.indexes.add(n, &key.namespace, &terms);
        key
    }

    /// Takes the object in slot `n` out of the indexes `terms` put it in;
    /// out of every index if its terms are lost (its stored version
    /// compacted away before the watch told the change; rare, and a walk
    /// of the indexes).
    fn unindex_terms(&mut self, n: SlotNumber, key: &ObjectKey, terms: Option<&Terms>) {
        match terms {
            Some(terms) => self.indexes.remove(n, &key.namespace, terms),
            None => self.indexes.remove_everywhere(n, &key.namespace),
        }
    }

    /// An object of which only `key` and its version are known.
    fn key_only(&self, key: &ObjectKey, entry: &Entry) -> Object {
        let mut metadata = serde_json::json!({"name": key.name});
        if let Some(namespace) = &key.namespace {
            metadata["namespace"] = namespace.clone().into();
        }
        if let Some(version) = &entry.version {
            metadata["resourceVersion"] = version.to_string().into();
        }
        let mut object = serde_json::json!({"metadata": metadata});
        if let Some(source) = &self.source {
            object["apiVersion"] = source.kind().api_version().into();
            object["kind"] = source.kind().kind.clone().into();
        }
        object
    }

    /// Lets go of objects held decoded since a watch event told them, now
    /// that the store reads them back: what the cache holds of an object
    /// stays its key, index entries and revision.
    pub(super) fn shed(&mut self) {
        let Some(source) = &self.source else {
            return;
        };
        let readable = source.readable();
        while let Some((key, revision)) = self.recent.front() {
            if *revision > readable {
                break;
            }
            if let Some(entry) = self.objects.get_mut(key)
                && let Text::Recent(object) = &entry.text
                && entry.version.as_ref().and_then(Version::revision) == Some(*revision)
            {
                *entry.live.get_mut().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(object);
                entry.text = Text::Stored(*revision);
                self.held -= 1;
            }
            self.recent.pop_front();
        }
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
        self.indexes
            .not_ready
            .iter()
            .filter_map(|(n, not_ready)| Some(((**self.objects.at(*n)?.0).clone(), *not_ready)))
            .collect()
    }
}

/// One object of a list.
pub(super) enum Listed {
    /// Its text as the API writes it (`metadata.resourceVersion` in), to
    /// be kept ([`Text::Held`]).
    Text(Vec<u8>),
    /// Its bytes as stored and the revision they were written at, for a
    /// cache that reads objects back ([`Text::Stored`]): only its terms are
    /// read, and nothing is copied.
    Stored(Arc<[u8]>, i64),
}

/// Each listed object with its terms and what the cache keeps of it, read
/// on as many threads as there are cores for a long list: a list of a
/// million objects spent most of an informer's fill here
/// (docs/benchmarks/scale.md, "Restarts without a storm").
pub(super) fn read_terms(items: Vec<Listed>) -> Vec<(Terms, Text)> {
    // Only the store's own encoding comes here, and that decodes.
    let read = |items: Vec<Listed>| -> Vec<(Terms, Text)> {
        items
            .into_iter()
            .map(|listed| match listed {
                Listed::Text(text) => {
                    let terms = Terms::of_json(&text).expect("stored JSON decodes");
                    (terms, Text::Held(text.into_boxed_slice()))
                }
                Listed::Stored(bytes, revision) => {
                    let terms = Terms::of_stored(&bytes, revision).expect("stored JSON decodes");
                    (terms, Text::Stored(revision))
                }
            })
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

/// The store revision a resource version names, if it names one.
fn parse_version(version: Option<&str>) -> Option<i64> {
    version?.parse().ok()
}

/// The revision an object's terms say it was written at.
fn parse_revision(terms: &Terms) -> Option<i64> {
    parse_version(terms.version.as_deref())
}

/// An object's `metadata.resourceVersion`.
fn meta_version(object: &Object) -> Option<&str> {
    crate::object::meta::resource_version(object)
}

#[cfg(test)]
mod tests;
