//! Field validation of writes (`?fieldValidation=Strict|Warn|Ignore` on
//! create, update, patch and apply), as kube-apiserver does it: a request
//! that sets a field the kind's schema does not declare (one pruning would
//! silently drop) or sets a member twice in one JSON or YAML object is
//!
//! - **Strict**: refused, 400 `BadRequest`, before anything is written:
//!   `Widget in version "v1" cannot be handled as a Widget: strict decoding
//!   error: unknown field "spec.foo", duplicate field "spec.replicas"`;
//! - **Warn** (the default, as in Kubernetes ≥ 1.23): written (unknown
//!   fields pruned, the last of duplicates kept) with one
//!   `Warning: 299 - "unknown field \"spec.foo\""` header per problem, which
//!   kubectl prints;
//! - **Ignore**: written without a word.
//!
//! kubectl sends `Strict` with `apply`, `create`, `replace` and `edit`
//! (`--validate=strict`, its default since 1.27), `Warn` with
//! `--validate=warn` and `Ignore` with `--validate=false`.
//!
//! Owns the parameter, the duplicate-member scan of request bodies and the
//! wording; which fields are unknown is the schema's
//! (`Schema::unknown_fields`). Kinds without a schema (CRDs themselves,
//! Events) have no unknown fields here. For JSON patches only what `add`
//! and `replace` write and where `move` and `copy` write to are checked: the
//! values moved or copied come from the (already pruned) object.

use std::collections::{HashMap, HashSet};
use std::fmt;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::status::error_response;
use setpoint::api::Api;
use setpoint::object::KindInfo;
use setpoint::object::field::FieldPath;
use setpoint::object::patch::{JsonPatch, PatchOperation};
use setpoint::object::pointer::Pointer;

/// At most this many problems are named in one answer: a body of
/// thousands of unknown fields must not become thousands of headers.
const MAX_REPORTED: usize = 100;

/// What to do with unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FieldValidation {
    /// Write silently.
    Ignore,
    /// Write, and say what was dropped in `Warning` headers.
    Warn,
    /// Refuse the request.
    Strict,
}

impl FieldValidation {
    /// The `fieldValidation` query parameter; `Warn` when absent, 400 when
    /// it is none of the three.
    pub(super) fn from_query(query: &HashMap<String, String>) -> Result<Self, Box<Response>> {
        match query.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Strict") => Ok(Self::Strict),
            Some("Ignore") => Ok(Self::Ignore),
            Some(other) => Err(Box::new(error_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", not {other:?}"
                ),
            ))),
        }
    }
}

/// What a write request carries, as far as its fields go.
pub(super) enum Write<'a> {
    /// A whole object (create, update, apply).
    Object(&'a Value),
    /// A JSON merge patch.
    MergePatch(&'a Value),
    /// A JSON patch.
    JsonPatch(&'a JsonPatch),
}

/// The body's text format, for the duplicate scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Json,
    Yaml,
}

/// Check a write's fields under `mode`: the warnings to send with the
/// answer, or (Strict) the 400 answer itself.
pub(super) fn review(
    mode: FieldValidation,
    api: &Api,
    kind: &KindInfo,
    write: Write<'_>,
    body: &[u8],
    format: Format,
) -> Result<Vec<String>, Box<Response>> {
    if mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let mut problems: Vec<String> = duplicate_fields(body, format)
        .iter()
        .map(|p| format!("duplicate field {:?}", p.as_str()))
        .collect();
    // A schema that does not compile refuses the write anyway, later.
    if let Ok(Some(schema)) = api.kinds().schema_for(kind) {
        let unknown = match write {
            Write::Object(object) => schema.unknown_fields(object),
            Write::MergePatch(patch) => schema.unknown_fields_in_merge_patch(patch),
            Write::JsonPatch(patch) => unknown_in_json_patch(&schema, patch),
        };
        let mut seen = HashSet::new();
        problems.extend(
            unknown
                .into_iter()
                .filter(|p| seen.insert(p.clone()))
                .map(|p| format!("unknown field {:?}", p.as_str())),
        );
    }
    if problems.len() > MAX_REPORTED {
        let more = problems.len() - MAX_REPORTED;
        problems.truncate(MAX_REPORTED);
        problems.push(format!("and {more} more"));
    }
    if mode == FieldValidation::Strict && !problems.is_empty() {
        return Err(Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {problems}",
                kind = kind.kind,
                version = kind.version,
                problems = problems.join(", ")
            ),
        )));
    }
    Ok(problems)
}

fn unknown_in_json_patch(
    schema: &setpoint::object::schema::Schema,
    patch: &JsonPatch,
) -> Vec<FieldPath> {
    let mut found = Vec::new();
    for op in &patch.0 {
        let value = match op {
            PatchOperation::Add { value, .. } | PatchOperation::Replace { value, .. } => {
                Some(value)
            }
            PatchOperation::Move { .. } | PatchOperation::Copy { .. } => None,
            PatchOperation::Remove { .. } | PatchOperation::Test { .. } => continue,
        };
        // A malformed path fails the patch itself, with its own error.
        if let Ok(pointer) = Pointer::parse(op.path()) {
            found.extend(schema.unknown_fields_at(pointer.tokens(), value));
        }
    }
    found
}

/// Add one `Warning` header per problem, in the form kubectl prints
/// (`299 - "text"`, RFC 7234's warn-code, agent and quoted text).
pub(super) fn add_warnings(headers: &mut HeaderMap, warnings: &[String]) {
    for warning in warnings {
        let text: String = warning
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
            headers.append(header::WARNING, value);
        }
    }
}

/// The paths of members set twice in one object of a JSON or YAML body
/// (the decoded body keeps the last). A body that does not parse has
/// none here: decoding it reports that.
pub(super) fn duplicate_fields(body: &[u8], format: Format) -> Vec<FieldPath> {
    let mut found = Vec::new();
    let scan = Scan {
        at: FieldPath::root(),
        found: &mut found,
    };
    let _ = match format {
        Format::Json => scan
            .deserialize(&mut serde_json::Deserializer::from_slice(body))
            .map_err(|_| ()),
        Format::Yaml => match std::str::from_utf8(body) {
            Ok(text) => scan
                .deserialize(serde_yaml_ng::Deserializer::from_str(text))
                .map_err(|_| ()),
            Err(_) => Err(()),
        },
    };
    found
}

/// A serde visitor that reads any document and records repeated members.
struct Scan<'a> {
    at: FieldPath,
    found: &'a mut Vec<FieldPath>,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Scan {
                at: self.at.index(i),
                found: &mut *self.found,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(Key(key)) = map.next_key()? {
            let at = self.at.child(&key);
            if !seen.insert(key) && !self.found.contains(&at) {
                self.found.push(at.clone());
            }
            map.next_value_seed(Scan {
                at,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
}

/// A member name: a string, or a YAML scalar used as one.
struct Key(String);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(body: &str, format: Format) -> Vec<String> {
        duplicate_fields(body.as_bytes(), format)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn members_set_twice_are_found_at_any_depth_in_json_and_yaml() {
        assert_eq!(
            paths(
                r#"{"spec": {"a": 1, "b": [{"x": 1, "x": 2}], "a": 3}, "kind": "K"}"#,
                Format::Json
            ),
            ["spec.b[0].x", "spec.a"]
        );
        assert_eq!(
            paths("spec:\n  a: 1\n  a: 2\n  a: 3\nkind: K\n", Format::Yaml),
            ["spec.a"]
        );
        assert!(paths(r#"{"spec": {"a": 1, "b": {"a": 2}}}"#, Format::Json).is_empty());
        assert!(paths("{not json", Format::Json).is_empty());
    }

    #[test]
    fn the_parameter_defaults_to_warn_and_refuses_other_values() {
        let query = |v: &str| HashMap::from([("fieldValidation".to_owned(), v.to_owned())]);
        assert_eq!(
            FieldValidation::from_query(&HashMap::new()).unwrap(),
            FieldValidation::Warn
        );
        assert_eq!(
            FieldValidation::from_query(&query("Strict")).unwrap(),
            FieldValidation::Strict
        );
        assert_eq!(
            FieldValidation::from_query(&query("Ignore")).unwrap(),
            FieldValidation::Ignore
        );
        let refused = FieldValidation::from_query(&query("strict")).unwrap_err();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn warnings_are_quoted_as_kubectl_reads_them() {
        let mut headers = HeaderMap::new();
        add_warnings(
            &mut headers,
            &["unknown field \"spec.é\"".into(), "b".into()],
        );
        let values: Vec<&str> = headers
            .get_all(header::WARNING)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            values,
            [r#"299 - "unknown field \"spec.?\"""#, r#"299 - "b""#]
        );
    }
}
