//! Patch documents: JSON merge patch (RFC 7386, here) and JSON patch
//! (RFC 6902, `json`). Owns how a patch changes a JSON document; which
//! object is patched, and the conflict and retry rules around it, are
//! `api`'s.

mod json;
mod strategic;

use serde_json::Value;

pub use json::{Bounds, JsonPatch, MAX_OPERATIONS, PatchError, PatchOperation, json_equal};
pub use strategic::{StrategicError, strategic_merge, without_directives};

/// Apply `patch` to `target` as a JSON merge patch: objects merge key by key,
/// `null` deletes a key, anything else replaces.
///
/// ```
/// use serde_json::json;
/// let mut doc = json!({"a": 1, "b": {"c": 2, "d": 3}});
/// setpoint::object::patch::merge(&mut doc, &json!({"a": null, "b": {"c": 5}}));
/// assert_eq!(doc, json!({"b": {"c": 5, "d": 3}}));
/// ```
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let target_map = target.as_object_mut().expect("target made an object above");
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            merge(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// What `setpoint apply` writes over a live object: the manifest's
/// top-level fields replace the live ones (`metadata` and `status` aside),
/// and its labels, annotations and finalizers replace the live ones; the
/// rest of the live metadata (uid, resourceVersion, owner references) and
/// the status stay. Shared by the CLI and by plans, so a plan of a
/// manifest writes exactly what applying it would.
///
/// ```
/// use serde_json::json;
/// let live = json!({"metadata": {"name": "web", "uid": "u1", "labels": {"old": "x"}},
///                   "spec": {"replicas": 1, "paused": true}, "status": {"ready": 1}});
/// let manifest = json!({"metadata": {"name": "web", "labels": {"app": "web"}},
///                       "spec": {"replicas": 3}});
/// let next = setpoint::object::patch::applied_over(&live, &manifest);
/// assert_eq!(next, json!({"metadata": {"name": "web", "uid": "u1", "labels": {"app": "web"}},
///                         "spec": {"replicas": 3}, "status": {"ready": 1}}));
/// ```
pub fn applied_over(live: &Value, manifest: &Value) -> Value {
    let mut next = live.clone();
    for (field, value) in manifest.as_object().into_iter().flatten() {
        if field != "metadata" && field != "status" {
            next[field] = value.clone();
        }
    }
    for field in ["labels", "annotations", "finalizers"] {
        if let Some(value) = manifest["metadata"].get(field) {
            next["metadata"][field] = value.clone();
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::merge;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (json!(["a"]), json!({"a": "b"}), json!({"a": "b"})),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (mut target, patch, expected) in cases {
            merge(&mut target, &patch);
            assert_eq!(target, expected, "patch {patch}");
        }
    }
}
