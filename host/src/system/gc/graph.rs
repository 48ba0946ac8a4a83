//! The garbage collector's picture of the store: for every object with
//! owners or a deletion policy to carry out its key, owner references and
//! deletion state; for every other object only that it exists (an owner's
//! presence is all the collector asks of those); and the owner index
//! (owner uid → the uids of the objects whose `ownerReferences` name it),
//! so that a deletion finds its dependents without scanning. Pure
//! bookkeeping fed from list and watch; deciding what to do is `gc`'s.
//!
//! Most objects are plain (no owners, not being deleted by a policy): at a
//! million Pods and as many Events, nodes with keys for all of them were
//! the host's largest single holding (docs/benchmarks/scale.md, "Informers
//! that read back"). A plain object's uid is kept in 16 bytes when it is a
//! UUID as the host assigns them, as text otherwise.

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

    /// Whether only the object's existence matters: no owners and no
    /// deletion policy to carry out.
    fn is_plain(&self) -> bool {
        self.owners.is_empty() && !self.foreground && !self.orphan
    }
}

/// Plain objects' uids: UUIDs in 16 bytes, anything else as text.
#[derive(Debug, Default)]
struct Plain {
    uuids: HashSet<u128>,
    others: HashSet<Box<str>>,
}

impl Plain {
    /// `uid` as 16 bytes, if it is a UUID written as the host writes them
    /// (lower-case, hyphenated): any other spelling stays text, so that
    /// uids compare exactly as strings.
    fn uuid(uid: &str) -> Option<u128> {
        let parsed = uuid::Uuid::try_parse(uid).ok()?;
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        (parsed.hyphenated().encode_lower(&mut buf) == uid).then(|| parsed.as_u128())
    }

    fn insert(&mut self, uid: &str) {
        match Self::uuid(uid) {
            Some(uuid) => self.uuids.insert(uuid),
            None => self.others.insert(uid.into()),
        };
    }

    fn remove(&mut self, uid: &str) -> bool {
        match Self::uuid(uid) {
            Some(uuid) => self.uuids.remove(&uuid),
            None => self.others.remove(uid),
        }
    }

    fn contains(&self, uid: &str) -> bool {
        match Self::uuid(uid) {
            Some(uuid) => self.uuids.contains(&uuid),
            None => self.others.contains(uid),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.uuids.len() + self.others.len()
    }
}

/// Every object by uid, and the owner index.
#[derive(Debug, Default)]
pub(super) struct Graph {
    /// Objects with owners or a deletion policy to carry out.
    nodes: HashMap<String, Node>,
    /// Every other object: that it exists.
    plain: Plain,
    /// Owner uid → dependent uids. Kept for owners that do not exist too:
    /// their dependents are exactly the ones to collect.
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// Record an object's current state; returns its previous one if that
    /// was kept as a node (not a plain object).
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
        let previous = if node.is_plain() {
            self.plain.insert(uid);
            self.nodes.remove(uid)
        } else {
            self.plain.remove(uid);
            self.nodes.insert(uid.to_owned(), node)
        };
        if let Some(previous) = &previous {
            for gone in previous.owners.iter().filter(|o| !current.contains(&o.uid)) {
                self.unlink(&gone.uid, uid);
            }
        }
        previous
    }

    /// Forget an object; returns its last state if it was kept as a node.
    /// Its own dependents stay indexed under its uid.
    pub fn remove(&mut self, uid: &str) -> Option<Node> {
        self.plain.remove(uid);
        let node = self.nodes.remove(uid)?;
        for owner in &node.owners {
            self.unlink(&owner.uid, uid);
        }
        Some(node)
    }

    /// Whether the object `uid` exists and, if so, whether its foreground
    /// deletion is under way.
    pub fn foreground(&self, uid: &str) -> Option<bool> {
        match self.nodes.get(uid) {
            Some(node) => Some(node.foreground),
            None => self.plain.contains(uid).then_some(false),
        }
    }

    /// How many objects the graph knows.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes.len() + self.plain.len()
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    /// An object with owners or a deletion policy, by uid (plain objects
    /// have no node: [`Graph::foreground`] says whether they exist).
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

    /// Every object with owners or a deletion policy, by uid.
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
        assert!(graph.node("b").is_none() && graph.foreground("b").is_none());
        assert!(graph.node("a").is_none(), "a plain object has no node");
        assert_eq!(graph.foreground("a"), Some(false), "but it exists");
        assert_eq!(graph.len(), 2);
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
        assert_eq!(graph.foreground("f"), Some(true));
        assert!(graph.node("o").unwrap().orphan);
        assert!(graph.node("p").is_none(), "not deleting yet: plain");
        assert_eq!(graph.foreground("p"), Some(false));
        assert_eq!(graph.nodes().count(), 2);
        assert!(graph.upsert("/k/none", &json!({"metadata": {}})).is_none());
        assert_eq!(graph.len(), 3, "objects without a uid are ignored");
    }

    /// An object moves between plain and node as its owners and deletion
    /// state change, and its owners' index follows.
    #[test]
    fn objects_move_between_plain_and_node_as_they_change() {
        let uid = "0b9f3c1e-5d2a-4c8e-9f1a-2b3c4d5e6f70";
        let mut graph = Graph::default();
        graph.upsert("/k/a", &object(uid, json!([])));
        assert!(graph.node(uid).is_none() && graph.foreground(uid) == Some(false));
        graph.upsert("/k/a", &object(uid, json!([{"uid": "owner"}])));
        assert_eq!(graph.node(uid).unwrap().key, "/k/a");
        assert_eq!(graph.dependents_of("owner"), [uid]);
        assert_eq!(graph.len(), 1, "one object, not a node and a plain entry");
        let previous = graph.upsert("/k/a", &object(uid, json!([]))).unwrap();
        assert_eq!(previous.owners.len(), 1, "its last state as a node");
        assert!(graph.node(uid).is_none() && !graph.has_dependents("owner"));
        assert_eq!(graph.len(), 1);
        assert!(graph.remove(uid).is_none(), "a plain object had no node");
        assert_eq!((graph.foreground(uid), graph.len()), (None, 0));
    }

    /// Plain uids are kept as 16 bytes only when that spells them back
    /// exactly: another spelling of the same UUID is another uid.
    #[test]
    fn plain_uids_compare_exactly_as_strings() {
        let lower = "0b9f3c1e-5d2a-4c8e-9f1a-2b3c4d5e6f70";
        let upper = lower.to_uppercase();
        let simple = lower.replace('-', "");
        let mut graph = Graph::default();
        graph.upsert("/k/a", &object(lower, json!([])));
        assert_eq!(graph.foreground(lower), Some(false));
        assert_eq!(graph.foreground(&upper), None);
        assert_eq!(graph.foreground(&simple), None);
        graph.upsert("/k/b", &object(&upper, json!([])));
        graph.upsert("/k/c", &object("not-a-uuid", json!([])));
        assert_eq!(graph.len(), 3);
        assert_eq!(
            graph.plain.uuids.len(),
            1,
            "only the host's spelling in 16 bytes"
        );
        graph.remove(&upper);
        assert_eq!(
            graph.foreground(lower),
            Some(false),
            "the other spelling stays"
        );
        assert_eq!(graph.foreground(&upper), None);
    }
}
