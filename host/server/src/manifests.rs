//! `POST /setpoint/v1/manifests`: a manifest's text (YAML, several
//! documents, `List` objects expanded; or JSON) read into the objects a
//! plan request takes (`{"objects": [{"origin", "object"}], "mayApply"}`),
//! each checked to be an object of a kind the host serves, with errors
//! naming the document. What the console sends to `/setpoint/v1/plan`
//! and then applies; nothing is read or written in the store.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::auth::{self, ResourceRequest};
use super::guard::Caller;
use super::status::error_response;
use setpoint::Host;

/// The most objects one manifest may hold.
pub const MAX_OBJECTS: usize = 1_000;

pub(super) async fn manifests(
    State(host): State<Arc<Host>>,
    caller: Option<Extension<Caller>>,
    body: Bytes,
) -> Response {
    let objects = match read(&body) {
        Ok(objects) => objects,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, "BadRequest", &message),
    };
    let mut may_apply = true;
    let mut out = Vec::with_capacity(objects.len());
    for (origin, object) in objects {
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let (api_version, kind) = (text(&object["apiVersion"]), text(&object["kind"]));
        let Some(info) = host.api().kinds().by_kind(&api_version, &kind) else {
            return error_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "{origin}: unknown kind {kind:?} in {api_version:?}: the server has no such kind (is the plugin that defines it loaded?)"
                ),
            );
        };
        if let Some(Extension(Caller(user))) = &caller {
            let namespace = info.namespaced.then(|| {
                object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned()
            });
            may_apply &= ["create", "patch"].iter().all(|verb| {
                user.allows(&auth::Request::Resource(ResourceRequest {
                    verb: (*verb).into(),
                    group: info.group.clone(),
                    resource: info.plural.clone(),
                    subresource: None,
                    namespace: namespace.clone(),
                    name: Some(text(&object["metadata"]["name"])),
                }))
            });
        }
        out.push(json!({"origin": origin, "object": object}));
    }
    Json(json!({"objects": out, "mayApply": may_apply})).into_response()
}

/// The objects of a manifest's text, each with its origin (`document N`,
/// `document N, item M`).
fn read(body: &[u8]) -> Result<Vec<(String, Value)>, String> {
    let text =
        std::str::from_utf8(body).map_err(|_| "the manifest is not UTF-8 text".to_owned())?;
    let mut documents = Vec::new();
    if text.trim_start().starts_with('{') || text.trim_start().starts_with('[') {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("the manifest is not valid JSON: {e}"))?;
        match value {
            Value::Array(items) => documents.extend(items),
            other => documents.push(other),
        }
    } else {
        // Bounded work: deep nesting and alias bombs are refused before they
        // cost more than reading them (`object::yaml`).
        documents = setpoint::object::yaml::documents(text)
            .map_err(|(document, err)| format!("document {document}: not valid YAML: {err}"))?;
    }
    let mut objects = Vec::new();
    for (i, document) in documents.into_iter().enumerate() {
        let origin = format!("document {}", i + 1);
        match document {
            // An empty document (a leading or trailing `---`).
            Value::Null => continue,
            Value::Object(_) => {}
            other => {
                return Err(format!(
                    "{origin}: expected an object with apiVersion, kind and metadata, found {}",
                    kind_of(&other)
                ));
            }
        }
        let is_list = document["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("List"))
            && document["items"].is_array();
        let items: Vec<(String, Value)> = if is_list {
            let items = document["items"].as_array().cloned().unwrap_or_default();
            items
                .into_iter()
                .enumerate()
                .map(|(j, item)| (format!("{origin}, item {}", j + 1), item))
                .collect()
        } else {
            vec![(origin, document)]
        };
        for (origin, object) in items {
            check(&origin, &object)?;
            objects.push((origin, object));
            if objects.len() > MAX_OBJECTS {
                return Err(format!(
                    "the manifest holds more than {MAX_OBJECTS} objects; plan and apply it in parts"
                ));
            }
        }
    }
    if objects.is_empty() {
        return Err("the manifest holds no object".to_owned());
    }
    Ok(objects)
}

fn check(origin: &str, object: &Value) -> Result<(), String> {
    for field in ["apiVersion", "kind"] {
        if object[field].as_str().is_none_or(str::is_empty) {
            return Err(format!("{origin}: {field} is missing"));
        }
    }
    if object["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return Err(format!(
            "{origin}: metadata.name is missing (a {} needs a name)",
            object["kind"].as_str().unwrap_or("")
        ));
    }
    Ok(())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_lists_are_read_in_order_with_their_origin() {
        let text = "---\napiVersion: v1\nkind: Secret\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}\n- {apiVersion: v1, kind: Secret, metadata: {name: c}}\n";
        let objects = read(text.as_bytes()).unwrap();
        let seen: Vec<(&str, &str)> = objects
            .iter()
            .map(|(o, v)| (o.as_str(), v["metadata"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            seen,
            [
                ("document 1", "a"),
                ("document 3, item 1", "b"),
                ("document 3, item 2", "c")
            ]
        );
    }

    #[test]
    fn json_objects_and_arrays_are_read_too() {
        let one =
            read(br#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}"#).unwrap();
        assert_eq!(one.len(), 1);
        let two = read(br#"[{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}}]"#).unwrap();
        assert_eq!(two[1].0, "document 2");
    }

    #[test]
    fn a_bad_document_is_named_and_nothing_is_returned() {
        let cases: [(&str, &str); 6] = [
            (
                "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\n---\nkind: Secret\nmetadata: {name: b}\n",
                "document 2: apiVersion is missing",
            ),
            (
                "apiVersion: v1\nkind: Secret\nmetadata: {}\n",
                "document 1: metadata.name is missing",
            ),
            ("- 1\n- 2\n", "document 1: expected an object"),
            ("a: [1, 2\n", "document 1: not valid YAML"),
            ("", "holds no object"),
            ("{\"apiVersion\": ", "not valid JSON"),
        ];
        for (text, expected) in cases {
            let err = read(text.as_bytes()).unwrap_err();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        assert!(read(&[0xff, 0xfe]).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn yaml_bombs_are_refused_before_they_cost_anything() {
        let mut laughs = String::from("a0: &a0 [\"lol\"]\n");
        for i in 1..30 {
            laughs.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}]\n",
                p = i - 1
            ));
        }
        let deep = format!("spec: {}", "[".repeat(100_000));
        for bomb in [laughs, deep] {
            let started = std::time::Instant::now();
            let err = read(bomb.as_bytes()).unwrap_err();
            assert!(err.starts_with("document 1: not valid YAML"), "{err}");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{err}"
            );
        }
    }

    #[test]
    fn a_manifest_of_too_many_objects_is_refused() {
        let one = "---\napiVersion: v1\nkind: Secret\nmetadata: {name: a}\n";
        let err = read(one.repeat(MAX_OBJECTS + 1).as_bytes()).unwrap_err();
        assert!(err.contains("more than 1000 objects"), "{err}");
    }
}
