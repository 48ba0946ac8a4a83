//! The informer's cache: objects by key, plus an index by owner uid.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Change;
use crate::object::{Object, ObjectKey, meta};

/// Objects of one kind, as of one store revision.
#[derive(Default)]
pub struct Cache {
    objects: HashMap<ObjectKey, Arc<Object>>,
    by_owner: HashMap<String, HashSet<ObjectKey>>,
    revision: i64,
}

impl Cache {
    /// One object.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        self.objects.get(key).cloned()
    }

    /// Every object.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Object>> {
        self.objects.values()
    }

    /// Objects with an owner reference to `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<Object>> {
        self.by_owner
            .get(uid)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| self.objects.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The revision the cache reflects.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Insert or replace; returns the change unless the object is unchanged.
    pub fn upsert(&mut self, object: Arc<Object>, revision: i64) -> Option<Change> {
        self.revision = self.revision.max(revision);
        let key = ObjectKey::of(&object);
        if let Some(old) = self.objects.get(&key) {
            if meta::resource_version(old) == meta::resource_version(&object) {
                return None;
            }
            let old = old.clone();
            self.unindex(&key, &old);
        }
        self.index(&key, &object);
        self.objects.insert(key, object.clone());
        Some(Change::Applied(object))
    }

    /// Remove; returns the change if the object was cached.
    pub fn remove(&mut self, object: &Arc<Object>, revision: i64) -> Option<Change> {
        self.revision = self.revision.max(revision);
        let key = ObjectKey::of(object);
        let old = self.objects.remove(&key)?;
        self.unindex(&key, &old);
        Some(Change::Deleted(object.clone()))
    }

    /// Replace the whole content with a fresh list; returns what changed.
    pub fn replace(&mut self, items: Vec<Object>, revision: i64) -> Vec<Change> {
        let fresh: HashSet<ObjectKey> = items.iter().map(ObjectKey::of).collect();
        let gone: Vec<ObjectKey> = super::missing(&self.objects, &fresh)
            .into_iter()
            .cloned()
            .collect();
        let mut changes = Vec::new();
        for key in gone {
            if let Some(old) = self.objects.get(&key).cloned() {
                changes.extend(self.remove(&old, revision));
            }
        }
        for item in items {
            changes.extend(self.upsert(Arc::new(item), revision));
        }
        self.revision = revision;
        changes
    }

    fn index(&mut self, key: &ObjectKey, object: &Object) {
        for uid in meta::owner_uids(object) {
            self.by_owner
                .entry(uid.to_owned())
                .or_default()
                .insert(key.clone());
        }
    }

    fn unindex(&mut self, key: &ObjectKey, object: &Object) {
        for uid in meta::owner_uids(object) {
            if let Some(keys) = self.by_owner.get_mut(uid) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_owner.remove(uid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, rv: &str, owner: Option<&str>) -> Object {
        let mut o = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}});
        if let Some(uid) = owner {
            o["metadata"]["ownerReferences"] = json!([{"uid": uid}]);
        }
        o
    }

    #[test]
    fn owner_index_follows_upserts_and_removals() {
        let mut cache = Cache::default();
        cache.upsert(Arc::new(obj("a", "1", Some("o1"))), 1);
        cache.upsert(Arc::new(obj("b", "2", Some("o1"))), 2);
        assert_eq!(cache.owned_by("o1").len(), 2);
        cache.upsert(Arc::new(obj("b", "3", Some("o2"))), 3);
        assert_eq!(cache.owned_by("o1").len(), 1);
        assert_eq!(cache.owned_by("o2").len(), 1);
        cache.remove(&Arc::new(obj("a", "4", Some("o1"))), 4);
        assert!(cache.owned_by("o1").is_empty());
    }

    #[test]
    fn relist_reports_only_what_changed() {
        let mut cache = Cache::default();
        cache.replace(vec![obj("a", "1", None), obj("b", "2", None)], 2);
        let changes = cache.replace(vec![obj("a", "1", None), obj("c", "5", None)], 5);
        let summary: Vec<(bool, String)> = changes
            .iter()
            .map(|c| {
                (
                    matches!(c, Change::Deleted(_)),
                    meta::name(c.object()).to_owned(),
                )
            })
            .collect();
        assert_eq!(summary, [(true, "b".to_owned()), (false, "c".to_owned())]);
        assert_eq!(cache.revision(), 5);
    }

    #[test]
    fn an_unchanged_object_is_not_a_change() {
        let mut cache = Cache::default();
        assert!(cache.upsert(Arc::new(obj("a", "1", None)), 1).is_some());
        assert!(cache.upsert(Arc::new(obj("a", "1", None)), 1).is_none());
    }
}
