//! Strategic merge patch (`application/strategic-merge-patch+json`), which
//! `kubectl apply` (client-side) and `kubectl patch` send for Kubernetes'
//! own kinds: a JSON merge patch plus directives. The host's built-in
//! kinds (Secret, Event, CustomResourceDefinition) have no lists merged by
//! key, so lists are replaced whole, as a merge patch does; the directives
//! are honoured: `$patch: replace` and `$patch: delete` on a map,
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>`, and
//! `$setElementOrder/<field>` (an order of merged lists: nothing to do).

use serde_json::{Map, Value};

/// Why a strategic merge patch cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StrategicError {
    /// The patch (or a map in it) is not what the directive needs.
    #[error("invalid strategic merge patch: {0}")]
    Invalid(String),
}

/// Apply the strategic merge patch `patch` to `target`.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::strategic_merge;
/// let mut secret = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
///     "data": {"x": "eA==", "y": "eQ=="}, "stringData": {"k": "v"}});
/// strategic_merge(&mut secret, &json!({
///     "metadata": {"labels": {"$patch": "replace", "c": "3"}},
///     "data": {"y": null, "z": "eg=="},
///     "$setElementOrder/things": [{"name": "a"}],
///     "stringData": {"$patch": "delete"}})).unwrap();
/// assert_eq!(secret, json!({"metadata": {"labels": {"c": "3"}},
///     "data": {"x": "eA==", "z": "eg=="}}));
/// ```
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), StrategicError> {
    let Value::Object(patch) = patch else {
        return Err(StrategicError::Invalid(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    merge_map(target, patch)
}

/// The patch without its directives: the fields it sets, for review.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::without_directives;
/// let patch = json!({"data": {"$retainKeys": ["a"], "a": "1"}, "$setElementOrder/x": []});
/// assert_eq!(without_directives(&patch), json!({"data": {"a": "1"}}));
/// ```
pub fn without_directives(patch: &Value) -> Value {
    match patch {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_directives).collect()),
        other => other.clone(),
    }
}

fn merge_map(target: &mut Value, patch: &Map<String, Value>) -> Result<(), StrategicError> {
    match patch.get("$patch") {
        None => {}
        Some(Value::String(how)) if how == "replace" => {
            *target = without_directives(&Value::Object(patch.clone()));
            return Ok(());
        }
        Some(Value::String(how)) if how == "merge" => {}
        Some(other) => {
            return Err(StrategicError::Invalid(format!(
                "unknown $patch {other} here (replace, merge, or delete on a field's map)"
            )));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("made an object above");
    if let Some(keep) = patch.get("$retainKeys") {
        let Some(keep) = keep.as_array() else {
            return Err(StrategicError::Invalid(
                "$retainKeys must be a list of field names".into(),
            ));
        };
        map.retain(|k, _| keep.iter().any(|kept| kept.as_str() == Some(k.as_str())));
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Some(gone) = value.as_array() else {
                return Err(StrategicError::Invalid(format!("{key} must be a list")));
            };
            if let Some(Value::Array(items)) = map.get_mut(field) {
                items.retain(|item| !gone.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                map.remove(key);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                map.remove(key);
            }
            Value::Object(inner) => {
                merge_map(map.entry(key.clone()).or_insert(Value::Null), inner)?;
            }
            other => {
                map.insert(key.clone(), without_directives(other));
            }
        }
    }
    Ok(())
}
