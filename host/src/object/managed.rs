//! Field ownership for server-side apply: the set of fields one manager set,
//! as paths of member names, read from and written to a `managedFields`
//! entry's `fieldsV1` trie (`{"f:spec": {"f:replicas": {}}}`). Owns the
//! data and its encoding; the apply rules (conflicts, removal) are in
//! `api::apply`.
//!
//! Maps are containers, owned member by member (an empty map owns nothing);
//! everything else (scalars and lists) is owned whole: a list is one leaf,
//! as if every list were `x-kubernetes-list-type: atomic`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A path of member names from the object root, e.g. `["spec", "replicas"]`.
pub type Path = Vec<String>;

/// One `metadata.managedFields` entry, in the Kubernetes shape.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::ManagedFieldsEntry;
/// let entry: ManagedFieldsEntry = serde_json::from_value(json!({
///     "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
///     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}))
/// .unwrap();
/// assert_eq!(entry.manager, "kubectl");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedFieldsEntry {
    /// Who manages these fields (the `fieldManager` of the request).
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The `apiVersion` the fields were set in.
    #[serde(default)]
    pub api_version: String,
    /// When the entry last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Always `FieldsV1`.
    #[serde(default = "fields_v1_type")]
    pub fields_type: String,
    /// The owned fields as a `FieldsV1` trie.
    #[serde(default, rename = "fieldsV1")]
    pub fields_v1: Value,
    /// The sub-resource written (`status`), if not the main resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
}

fn fields_v1_type() -> String {
    "FieldsV1".into()
}

impl ManagedFieldsEntry {
    /// The owned fields.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let entry: managed::ManagedFieldsEntry = serde_json::from_value(json!({
    ///     "manager": "m", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}))
    /// .unwrap();
    /// assert!(entry.fields().contains(&["spec".into(), "replicas".into()]));
    /// ```
    pub fn fields(&self) -> FieldSet {
        FieldSet::from_fields_v1(&self.fields_v1)
    }
}

/// A set of owned field paths.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::{self, FieldSet};
///
/// let mut set = FieldSet::leaves_of(&json!({"spec": {"replicas": 3}}));
/// set.insert(vec!["spec".into(), "image".into()]);
/// assert_eq!(set.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<Path>);

impl FieldSet {
    /// The leaves of a (partial) object: every scalar and list, by path.
    /// Maps are only the way to them, and `null` members are skipped.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::FieldSet;
    /// let set = FieldSet::leaves_of(&json!({"spec": {"replicas": 3, "ports": [80], "extra": {}}}));
    /// assert_eq!(set.to_fields_v1(), json!({"f:spec": {"f:replicas": {}, "f:ports": {}}}));
    /// ```
    pub fn leaves_of(value: &Value) -> Self {
        let mut set = Self::default();
        let mut path = Vec::new();
        collect_leaves(value, &mut path, &mut set.0);
        set
    }

    /// Read a `fieldsV1` trie. `f:` members are followed; a node that is
    /// empty, or that names list items or itself (`k:`, `v:`, `i:`, `.`),
    /// is owned whole.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let set = FieldSet::from_fields_v1(&json!({"f:spec": {"f:replicas": {}, "f:ports": {"k:{\"port\":80}": {}}}}));
    /// assert!(set.contains(&["spec".into(), "replicas".into()]));
    /// assert!(set.contains(&["spec".into(), "ports".into()]), "list items make the list owned whole");
    /// ```
    pub fn from_fields_v1(trie: &Value) -> Self {
        let mut set = Self::default();
        let mut path = Vec::new();
        if let Some(map) = trie.as_object() {
            read_trie(map, &mut path, &mut set.0);
        }
        set
    }

    /// Write the set as a `fieldsV1` trie.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let set = FieldSet::leaves_of(&json!({"metadata": {"labels": {"app": "web"}}}));
    /// assert_eq!(set.to_fields_v1(), json!({"f:metadata": {"f:labels": {"f:app": {}}}}));
    /// ```
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut node = &mut root;
            for name in path {
                node = node
                    .entry(format!("f:{name}"))
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .expect("trie nodes are objects");
            }
        }
        Value::Object(root)
    }

    /// Add a path.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let mut set = FieldSet::default();
    /// set.insert(vec!["spec".into(), "replicas".into()]);
    /// assert!(!set.is_empty());
    /// ```
    pub fn insert(&mut self, path: Path) {
        self.0.insert(path);
    }

    /// Remove a path; whether it was present.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let mut set = FieldSet::leaves_of(&json!({"spec": {"replicas": 3}}));
    /// assert!(set.remove(&["spec".into(), "replicas".into()]));
    /// assert!(set.is_empty());
    /// ```
    pub fn remove(&mut self, path: &[String]) -> bool {
        self.0.remove(path)
    }

    /// Whether the exact path is in the set.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let set = FieldSet::leaves_of(&json!({"spec": {"replicas": 3}}));
    /// assert!(set.contains(&["spec".into(), "replicas".into()]));
    /// assert!(!set.contains(&["spec".into()]), "exact paths only");
    /// ```
    pub fn contains(&self, path: &[String]) -> bool {
        self.0.contains(path)
    }

    /// Whether a path in the set equals `path`, lies inside it or contains it.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let set = FieldSet::leaves_of(&json!({"spec": {"replicas": 3}}));
    /// assert!(set.overlaps(&["spec".into()]), "it contains the path");
    /// assert!(!set.overlaps(&["metadata".into()]));
    /// ```
    pub fn overlaps(&self, path: &[String]) -> bool {
        self.0.iter().any(|p| overlapping(p, path))
    }

    /// Drop every path for which `keep` is false.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let mut set = FieldSet::leaves_of(&json!({"spec": {"replicas": 3}, "data": {"x": 1}}));
    /// set.retain(|path| path[0] == "spec");
    /// assert_eq!(set.len(), 1);
    /// ```
    pub fn retain(&mut self, mut keep: impl FnMut(&Path) -> bool) {
        self.0.retain(|p| keep(p));
    }

    /// The paths, in order.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// let set = FieldSet::leaves_of(&json!({"b": 1, "a": 2}));
    /// let paths: Vec<_> = set.iter().map(|p| managed::display(p)).collect();
    /// assert_eq!(paths, [".a", ".b"]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = &Path> {
        self.0.iter()
    }

    /// Whether the set is empty.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// assert!(FieldSet::leaves_of(&json!({"spec": {}})).is_empty(), "an empty map owns nothing");
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of paths.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::managed::{self, FieldSet};
    ///
    /// assert_eq!(FieldSet::leaves_of(&json!({"spec": {"a": 1, "b": [2]}})).len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Whether one path equals, contains or lies inside the other.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::{self, FieldSet};
///
/// let spec = ["spec".to_owned()];
/// let replicas = ["spec".to_owned(), "replicas".to_owned()];
/// assert!(managed::overlapping(&spec, &replicas));
/// assert!(!managed::overlapping(&replicas, &["status".to_owned()]));
/// ```
pub fn overlapping(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn collect_leaves(value: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) => {
            for (name, member) in map {
                if member.is_null() {
                    continue;
                }
                path.push(name.clone());
                collect_leaves(member, path, out);
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

fn read_trie(node: &Map<String, Value>, path: &mut Path, out: &mut BTreeSet<Path>) {
    let fields: Vec<(&str, &Value)> = node
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("f:").map(|name| (name, v)))
        .collect();
    let whole = node.is_empty() || fields.len() != node.len();
    if whole && !path.is_empty() {
        out.insert(path.clone());
    }
    for (name, child) in fields {
        path.push(name.to_owned());
        match child.as_object() {
            Some(map) => read_trie(map, path, out),
            None => {
                out.insert(path.clone());
            }
        }
        path.pop();
    }
}

/// The value at `path`, if any.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::{self, FieldSet};
///
/// let object = json!({"spec": {"replicas": 3}});
/// assert_eq!(managed::get(&object, &["spec".into(), "replicas".into()]), Some(&json!(3)));
/// ```
pub fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |v, name| v.as_object()?.get(name))
}

/// Set the value at `path`, creating (or turning into) maps on the way.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::{self, FieldSet};
///
/// let mut object = json!({});
/// managed::set(&mut object, &["spec".into(), "replicas".into()], json!(2));
/// assert_eq!(object, json!({"spec": {"replicas": 2}}));
/// ```
pub fn set(value: &mut Value, path: &[String], new: Value) {
    let Some((last, parents)) = path.split_last() else {
        *value = new;
        return;
    };
    let mut node = value;
    for name in parents {
        node = as_map(node)
            .entry(name.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    as_map(node).insert(last.clone(), new);
}

/// Remove the value at `path`, then every map on the way that it left
/// empty, down to (not including) the top-level members. Returns the
/// removed value.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::{self, FieldSet};
///
/// let mut object = json!({"spec": {"template": {"image": "x"}}, "kind": "K"});
/// let path = ["spec".into(), "template".into(), "image".into()];
/// assert_eq!(managed::remove(&mut object, &path), Some(json!("x")));
/// assert_eq!(object, json!({"spec": {}, "kind": "K"}), "emptied maps go, down to the top level");
/// ```
pub fn remove(value: &mut Value, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let removed = {
        let parent = parents
            .iter()
            .try_fold(&mut *value, |v, name| v.as_object_mut()?.get_mut(name))?;
        parent.as_object_mut()?.remove(last)?
    };
    for depth in (1..parents.len()).rev() {
        let empty = get(value, &parents[..=depth])
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty);
        if !empty {
            break;
        }
        if let Some(map) = parents[..depth]
            .iter()
            .try_fold(&mut *value, |v, name| v.as_object_mut()?.get_mut(name))
            .and_then(Value::as_object_mut)
        {
            map.remove(&parents[depth]);
        }
    }
    Some(removed)
}

/// A path as Kubernetes apply conflicts show it: `.spec.replicas`.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::managed::{self, FieldSet};
///
/// assert_eq!(managed::display(&["spec".into(), "replicas".into()]), ".spec.replicas");
/// ```
pub fn display(path: &[String]) -> String {
    path.iter().map(|name| format!(".{name}")).collect()
}

fn as_map(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().expect("made an object above")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(path: &str) -> Path {
        path.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn leaves_are_scalars_and_lists_and_maps_and_nulls_are_not() {
        let set = FieldSet::leaves_of(&json!({
            "metadata": {"labels": {"a": "1"}},
            "spec": {"n": 1, "l": [1, 2], "m": {}, "gone": null}
        }));
        let paths: Vec<String> = set.iter().map(|p| display(p)).collect();
        assert_eq!(paths, [".metadata.labels.a", ".spec.l", ".spec.n"]);
    }

    #[test]
    fn fields_v1_round_trips_and_foreign_node_kinds_are_owned_whole() {
        let set = FieldSet::leaves_of(&json!({"spec": {"a": 1, "b": {"c": "x"}}}));
        let trie = set.to_fields_v1();
        assert_eq!(trie, json!({"f:spec": {"f:a": {}, "f:b": {"f:c": {}}}}));
        assert_eq!(FieldSet::from_fields_v1(&trie), set);
        let foreign = FieldSet::from_fields_v1(&json!({
            "f:spec": {"f:ports": {"k:{\"port\":80}": {".": {}}}, "f:x": {".": {}, "f:y": {}}}
        }));
        assert!(foreign.contains(&p("spec.ports")));
        assert!(foreign.contains(&p("spec.x")));
        assert!(foreign.contains(&p("spec.x.y")));
    }

    #[test]
    fn overlap_means_equal_ancestor_or_descendant() {
        let set = FieldSet::leaves_of(&json!({"spec": {"a": {"b": 1}}}));
        assert!(set.overlaps(&p("spec.a.b")));
        assert!(set.overlaps(&p("spec.a")));
        assert!(set.overlaps(&p("spec.a.b.c")));
        assert!(!set.overlaps(&p("spec.c")));
    }

    #[test]
    fn set_creates_maps_and_remove_prunes_the_maps_it_empties() {
        let mut doc = json!({"spec": {"keep": 1}});
        set(&mut doc, &p("spec.a.b.c"), json!(5));
        assert_eq!(get(&doc, &p("spec.a.b.c")), Some(&json!(5)));
        assert_eq!(remove(&mut doc, &p("spec.a.b.c")), Some(json!(5)));
        assert_eq!(doc, json!({"spec": {"keep": 1}}));
        set(&mut doc, &p("spec.only"), json!(1));
        remove(&mut doc, &p("spec.keep"));
        remove(&mut doc, &p("spec.only"));
        assert_eq!(doc, json!({"spec": {}}), "top-level members stay");
        assert_eq!(remove(&mut doc, &p("spec.missing")), None);
    }

    #[test]
    fn entries_read_and_write_the_kubernetes_shape() {
        let entry: ManagedFieldsEntry = serde_json::from_value(json!({
            "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
            "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}
        }))
        .unwrap();
        assert!(entry.fields().contains(&p("spec.replicas")));
        let back = serde_json::to_value(&entry).unwrap();
        assert_eq!(back["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(back["apiVersion"], "v1");
        assert!(back.get("subresource").is_none());
    }
}
