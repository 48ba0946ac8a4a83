//! The garbage collector's picture of the store: for every object its key,
//! owner references and deletion state, and the owner index (owner uid →
//! the uids of the objects whose `ownerReferences` name it), so that a
//! deletion finds its dependents without scanning. Pure bookkeeping fed
//! from list and watch; deciding what to do is `gc`'s.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::api::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use crate::object::{Object, meta};

/// One owner reference, as far as the collector cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OwnerRef {
    /// The owner's uid.
    pub uid: String,
    /// Whether the owner's foreground deletion waits for this dependent.
    pub block: bool,
}

/// One object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    /// Its store key.
    pub key: String,
    /// Its owners.
    pub owners: Vec<OwnerRef>,
    /// Being deleted with the `foregroundDeletion` finalizer.
    pub foreground: bool,
    /// Being deleted with the `orphan` finalizer.
    pub orphan: bool,
}

impl Node {
    fn of(key: &str, object: &Object) -> Self {
        let deleting = meta::deletion_timestamp(object).is_some();
        let finalizers = meta::finalizers(object);
        Self {
            key: key.to_owned(),
            owners: meta::owner_references(object)
                .iter()
                .filter_map(|r| {
                    Some(OwnerRef {
                        uid: r.get("uid")?.as_str()?.to_owned(),
                        block: r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true),
                    })
                })
                .collect(),
            foreground: deleting && finalizers.contains(&FOREGROUND_FINALIZER),
            orphan: deleting && finalizers.contains(&ORPHAN_FINALIZER),
        }
    }
}

/// Every object by uid, and the owner index.
#[derive(Debug, Default)]
pub(super) struct Graph {
    nodes: HashMap<String, Node>,
    /// Owner uid → dependent uids. Kept for owners that do not exist too:
    /// their dependents are exactly the ones to collect.
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// Record an object's current state; returns its previous one.
    pub fn upsert(&mut self, key: &str, object: &Object) -> Option<Node> {
        let uid = meta::uid(object);
        if uid.is_empty() {
            return None;
        }
        let node = Node::of(key, object);
        let current: HashSet<String> = node.owners.iter().map(|o| o.uid.clone()).collect();
        for owner in &current {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert(uid.to_owned());
        }
        let previous = self.nodes.insert(uid.to_owned(), node);
        if let Some(previous) = &previous {
            for gone in previous.owners.iter().filter(|o| !current.contains(&o.uid)) {
                self.unlink(&gone.uid, uid);
            }
        }
        previous
    }

    /// Forget an object; returns its last state. Its own dependents stay
    /// indexed under its uid.
    pub fn remove(&mut self, uid: &str) -> Option<Node> {
        let node = self.nodes.remove(uid)?;
        for owner in &node.owners {
            self.unlink(&owner.uid, uid);
        }
        Some(node)
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    /// An object by uid.
    pub fn node(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// The uids of the objects that name `owner` in their owner references.
    pub fn dependents_of(&self, owner: &str) -> Vec<String> {
        self.dependents
            .get(owner)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether any object names `owner`.
    pub fn has_dependents(&self, owner: &str) -> bool {
        self.dependents.contains_key(owner)
    }

    /// How many dependents of `owner` block its foreground deletion.
    pub fn blocking_dependents(&self, owner: &str) -> usize {
        self.dependents
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|d| self.nodes.get(d))
            .filter(|d| d.owners.iter().any(|o| o.uid == owner && o.block))
            .count()
    }

    /// Every object, by uid.
    pub fn nodes(&self) -> impl Iterator<Item = (&String, &Node)> {
        self.nodes.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, owners: Value) -> Object {
        json!({"metadata": {"uid": uid, "ownerReferences": owners}})
    }

    #[test]
    fn the_owner_index_follows_owner_references_as_they_change() {
        let mut graph = Graph::default();
        graph.upsert("/k/a", &object("a", json!([])));
        graph.upsert("/k/b", &object("b", json!([{"uid": "a"}])));
        graph.upsert(
            "/k/c",
            &object(
                "c",
                json!([{"uid": "a", "blockOwnerDeletion": true}, {"uid": "x"}]),
            ),
        );
        let mut deps = graph.dependents_of("a");
        deps.sort();
        assert_eq!(deps, ["b", "c"]);
        assert_eq!(graph.blocking_dependents("a"), 1);
        assert_eq!(
            graph.dependents_of("x"),
            ["c"],
            "owners that do not exist are indexed too"
        );

        graph.upsert("/k/c", &object("c", json!([{"uid": "x"}])));
        assert_eq!(graph.dependents_of("a"), ["b"]);
        assert_eq!(graph.blocking_dependents("a"), 0);

        let gone = graph.remove("b").unwrap();
        assert_eq!(gone.key, "/k/b");
        assert!(!graph.has_dependents("a"));
        assert!(graph.node("b").is_none());
        assert!(graph.node("a").is_some());
    }

    #[test]
    fn removing_an_owner_keeps_its_dependents_indexed() {
        let mut graph = Graph::default();
        graph.upsert("/k/a", &object("a", json!([])));
        graph.upsert("/k/b", &object("b", json!([{"uid": "a"}])));
        graph.remove("a");
        assert_eq!(graph.dependents_of("a"), ["b"]);
    }

    #[test]
    fn deletion_state_comes_from_the_timestamp_and_the_policy_finalizers() {
        let mut graph = Graph::default();
        graph.upsert(
            "/k/f",
            &json!({"metadata": {"uid": "f", "deletionTimestamp": "t",
            "finalizers": ["foregroundDeletion"]}}),
        );
        graph.upsert(
            "/k/o",
            &json!({"metadata": {"uid": "o", "deletionTimestamp": "t",
            "finalizers": ["orphan", "other"]}}),
        );
        graph.upsert(
            "/k/p",
            &json!({"metadata": {"uid": "p", "finalizers": ["foregroundDeletion"]}}),
        );
        assert!(graph.node("f").unwrap().foreground);
        assert!(graph.node("o").unwrap().orphan);
        assert!(!graph.node("p").unwrap().foreground, "not deleting yet");
        assert_eq!(graph.nodes().count(), 3);
        assert!(graph.upsert("/k/none", &json!({"metadata": {}})).is_none());
        assert_eq!(
            graph.nodes().count(),
            3,
            "objects without a uid are ignored"
        );
    }
}
