//! Typed reads of the `metadata` the host needs from a JSON object.

use serde_json::{Map, Value};

use super::Object;

fn metadata(object: &Object) -> Option<&Map<String, Value>> {
    object.get("metadata")?.as_object()
}

fn meta_str<'a>(object: &'a Object, field: &str) -> Option<&'a str> {
    metadata(object)?.get(field)?.as_str()
}

/// `metadata.name`, or the empty string.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::name(&json!({"metadata": {"name": "web"}})), "web");
/// assert_eq!(meta::name(&json!({})), "");
/// ```
pub fn name(object: &Object) -> &str {
    meta_str(object, "name").unwrap_or("")
}

/// `metadata.namespace`, if set and non-empty.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::namespace(&json!({"metadata": {"namespace": "ops"}})), Some("ops"));
/// assert_eq!(meta::namespace(&json!({"metadata": {"namespace": ""}})), None);
/// ```
pub fn namespace(object: &Object) -> Option<&str> {
    meta_str(object, "namespace").filter(|ns| !ns.is_empty())
}

/// `metadata.uid`, or the empty string.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::uid(&json!({"metadata": {"uid": "4c1b"}})), "4c1b");
/// ```
pub fn uid(object: &Object) -> &str {
    meta_str(object, "uid").unwrap_or("")
}

/// `metadata.resourceVersion`, if set.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::resource_version(&json!({"metadata": {"resourceVersion": "12"}})), Some("12"));
/// assert_eq!(meta::resource_version(&json!({"metadata": {}})), None);
/// ```
pub fn resource_version(object: &Object) -> Option<&str> {
    meta_str(object, "resourceVersion").filter(|rv| !rv.is_empty())
}

/// `metadata.generation`, or 0.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::generation(&json!({"metadata": {"generation": 3}})), 3);
/// assert_eq!(meta::generation(&json!({})), 0);
/// ```
pub fn generation(object: &Object) -> i64 {
    metadata(object)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// `metadata.deletionTimestamp`, if deletion has started.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let deleting = json!({"metadata": {"deletionTimestamp": "2025-01-02T03:04:05Z"}});
/// assert_eq!(meta::deletion_timestamp(&deleting), Some("2025-01-02T03:04:05Z"));
/// ```
pub fn deletion_timestamp(object: &Object) -> Option<&str> {
    meta_str(object, "deletionTimestamp")
}

/// `apiVersion`, or the empty string.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::api_version(&json!({"apiVersion": "demo.setpoint.dev/v1"})), "demo.setpoint.dev/v1");
/// ```
pub fn api_version(object: &Object) -> &str {
    object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `kind`, or the empty string.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// assert_eq!(meta::kind(&json!({"kind": "Pod"})), "Pod");
/// ```
pub fn kind(object: &Object) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// `metadata.labels` as a map, if any.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let pod = json!({"metadata": {"labels": {"app": "web"}}});
/// assert_eq!(meta::labels(&pod).map(|l| l.len()), Some(1));
/// assert!(meta::labels(&json!({})).is_none());
/// ```
pub fn labels(object: &Object) -> Option<&Map<String, Value>> {
    metadata(object)?.get("labels")?.as_object()
}

/// The label `key`, if present.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let pod = json!({"metadata": {"labels": {"app": "web"}}});
/// assert_eq!(meta::label(&pod, "app"), Some("web"));
/// assert_eq!(meta::label(&pod, "tier"), None);
/// ```
pub fn label<'a>(object: &'a Object, key: &str) -> Option<&'a str> {
    labels(object)?.get(key)?.as_str()
}

/// `metadata.finalizers`.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let held = json!({"metadata": {"finalizers": ["example.com/cleanup"]}});
/// assert_eq!(meta::finalizers(&held), ["example.com/cleanup"]);
/// ```
pub fn finalizers(object: &Object) -> Vec<&str> {
    metadata(object)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `metadata.ownerReferences` as JSON objects.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let pod = json!({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "u1"}]}});
/// assert_eq!(meta::owner_references(&pod)[0]["name"], "web");
/// ```
pub fn owner_references(object: &Object) -> &[Value] {
    metadata(object)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The uid of the owner reference marked `controller: true`, if any.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let pod = json!({"metadata": {"ownerReferences": [
///     {"uid": "other"}, {"uid": "u1", "controller": true}]}});
/// assert_eq!(meta::controller_uid(&pod), Some("u1"));
/// ```
pub fn controller_uid(object: &Object) -> Option<&str> {
    owner_references(object)
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid")?.as_str())
}

/// The uids of all owners.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let pod = json!({"metadata": {"ownerReferences": [{"uid": "a"}, {"uid": "b"}]}});
/// assert_eq!(meta::owner_uids(&pod).collect::<Vec<_>>(), ["a", "b"]);
/// ```
pub fn owner_uids(object: &Object) -> impl Iterator<Item = &str> {
    owner_references(object)
        .iter()
        .filter_map(|r| r.get("uid")?.as_str())
}

/// A mutable handle on `metadata`, created if missing or not an object.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let mut object = json!({"kind": "Pod"});
/// meta::metadata_mut(&mut object).insert("name".into(), json!("web-0"));
/// assert_eq!(meta::name(&object), "web-0");
/// ```
pub fn metadata_mut(object: &mut Object) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = object.as_object_mut().expect("object ensured above");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("metadata ensured above")
}

/// An owner reference to `owner`, marked as its controller.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
///
/// let owner = json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
///                    "metadata": {"name": "web", "uid": "u1"}});
/// let reference = meta::controller_reference(&owner);
/// assert_eq!(reference["uid"], "u1");
/// assert_eq!(reference["controller"], true);
/// ```
pub fn controller_reference(owner: &Object) -> Value {
    serde_json::json!({
        "apiVersion": api_version(owner),
        "kind": kind(owner),
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The condition of type `kind` in `status.conditions` (`Ready`, say), if
/// the object has one.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::meta;
/// let pod = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
/// assert_eq!(meta::condition(&pod, "Ready").unwrap()["status"], "True");
/// assert!(meta::condition(&pod, "Scheduled").is_none());
/// ```
pub fn condition<'a>(object: &'a Object, kind: &str) -> Option<&'a Value> {
    object
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accessors_read_metadata_and_tolerate_missing_fields() {
        let obj = json!({"apiVersion": "v1", "kind": "Event", "metadata": {
            "name": "a", "namespace": "ns", "generation": 3, "labels": {"x": "y"},
            "ownerReferences": [{"uid": "u1", "controller": true}, {"uid": "u2"}],
            "finalizers": ["f"]}});
        assert_eq!(name(&obj), "a");
        assert_eq!(namespace(&obj), Some("ns"));
        assert_eq!(generation(&obj), 3);
        assert_eq!(label(&obj, "x"), Some("y"));
        assert_eq!(controller_uid(&obj), Some("u1"));
        assert_eq!(owner_uids(&obj).collect::<Vec<_>>(), ["u1", "u2"]);
        assert_eq!(finalizers(&obj), ["f"]);
        let empty = json!({});
        assert_eq!(name(&empty), "");
        assert_eq!(namespace(&empty), None);
        assert_eq!(generation(&empty), 0);
        assert!(owner_references(&empty).is_empty());
    }

    #[test]
    fn metadata_mut_creates_metadata() {
        let mut obj = json!({"kind": "X"});
        metadata_mut(&mut obj).insert("name".into(), json!("n"));
        assert_eq!(name(&obj), "n");
    }
}
