//! [`DynamicObject`]: an untyped object and the helpers that read and
//! build one (children, and anything read from the host).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Object, ObjectMeta, parse_part};
use crate::{Condition, Error, Time};

/// An untyped object: JSON with `apiVersion`, `kind` and `metadata`, and
/// helpers to read it. Owned children, desired children and anything read
/// through [`Ctx::get`](crate::Ctx::get) or [`Ctx::list`](crate::Ctx::list)
/// are dynamic objects; [`DynamicObject::parse`] turns one into a typed
/// [`Object`].
///
/// Build a desired child with [`DynamicObject::new`] and the `with_*` methods.
/// Its namespace and owner reference are set by the host.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct DynamicObject(Map<String, Value>);

impl DynamicObject {
    /// A new object with `apiVersion`, `kind` and `metadata.name` set.
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        let mut fields = Map::new();
        fields.insert("apiVersion".into(), Value::String(api_version.into()));
        fields.insert("kind".into(), Value::String(kind.into()));
        let mut metadata = Map::new();
        metadata.insert("name".into(), Value::String(name.into()));
        fields.insert("metadata".into(), Value::Object(metadata));
        Self(fields)
    }

    /// Wraps JSON. Fails unless it is an object with string `apiVersion` and
    /// `kind`.
    pub fn from_value(value: Value) -> Result<Self, Error> {
        let Value::Object(fields) = value else {
            return Err(Error::permanent("object: expected a JSON object"));
        };
        for key in ["apiVersion", "kind"] {
            if !fields.get(key).is_some_and(Value::is_string) {
                return Err(Error::permanent(format!(
                    "object: missing string field `{key}`"
                )));
            }
        }
        Ok(Self(fields))
    }

    /// Parses JSON text; see [`DynamicObject::from_value`].
    pub fn from_json(text: &str) -> Result<Self, Error> {
        let value = serde_json::from_str(text).map_err(|e| Error::from(e).context("object"))?;
        Self::from_value(value)
    }

    /// Sets `metadata.labels` (an empty map removes them).
    pub fn with_labels(self, labels: BTreeMap<String, String>) -> Self {
        self.with_string_map("labels", labels)
    }

    /// Sets one label.
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let labels = self
            .metadata_mut()
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(labels) = labels {
            labels.insert(key.into(), Value::String(value.into()));
        }
        self
    }

    /// Sets `metadata.annotations` (an empty map removes them).
    pub fn with_annotations(self, annotations: BTreeMap<String, String>) -> Self {
        self.with_string_map("annotations", annotations)
    }

    /// Sets `spec` to `spec` serialised as JSON.
    pub fn with_spec<T: Serialize + ?Sized>(mut self, spec: &T) -> Result<Self, Error> {
        let spec = serde_json::to_value(spec).map_err(|e| Error::from(e).context("spec"))?;
        self.0.insert("spec".into(), spec);
        Ok(self)
    }

    fn with_string_map(mut self, key: &str, map: BTreeMap<String, String>) -> Self {
        let metadata = self.metadata_mut();
        if map.is_empty() {
            metadata.remove(key);
        } else {
            let map = map
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            metadata.insert(key.into(), Value::Object(map));
        }
        self
    }

    fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let metadata = self
            .0
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !metadata.is_object() {
            *metadata = Value::Object(Map::new());
        }
        match metadata {
            Value::Object(map) => map,
            _ => unreachable!("metadata was just made an object"),
        }
    }

    /// The value at a path of object keys. The accessors below use this
    /// rather than a JSON pointer: a pointer is parsed (and its tokens
    /// unescaped) on every call, and reconcilers call `name()` and `kind()`
    /// in loops over their children.
    fn at(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        rest.iter().try_fold(self.0.get(*first)?, |value, key| {
            value.as_object()?.get(*key)
        })
    }

    fn str_at(&self, path: &[&str]) -> Option<&str> {
        self.at(path).and_then(Value::as_str)
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.str_at(&["apiVersion"]).unwrap_or_default()
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.str_at(&["kind"]).unwrap_or_default()
    }

    /// Whether this object is of the given `apiVersion` and `kind`.
    pub fn is_kind(&self, api_version: &str, kind: &str) -> bool {
        self.api_version() == api_version && self.kind() == kind
    }

    /// `metadata.name` (empty if missing).
    pub fn name(&self) -> &str {
        self.str_at(&["metadata", "name"]).unwrap_or_default()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<&str> {
        self.str_at(&["metadata", "namespace"])
    }

    /// `metadata.uid` (empty if missing).
    pub fn uid(&self) -> &str {
        self.str_at(&["metadata", "uid"]).unwrap_or_default()
    }

    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.at(&["metadata", "generation"]).and_then(Value::as_i64)
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.at(&["metadata", "labels"])
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
    }

    /// All labels (non-string values are skipped).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.string_map("labels")
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.at(&["metadata", "annotations"])
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    }

    /// All annotations (non-string values are skipped).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.string_map("annotations")
    }

    fn string_map(&self, key: &str) -> BTreeMap<String, String> {
        let Some(Value::Object(map)) = self.at(&["metadata", key]) else {
            return BTreeMap::new();
        };
        map.iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect()
    }

    /// `metadata.deletionTimestamp`, if set and well-formed.
    pub fn deletion_timestamp(&self) -> Option<Time> {
        self.str_at(&["metadata", "deletionTimestamp"])
            .and_then(|t| t.parse().ok())
    }

    /// Whether deletion has started (`metadata.deletionTimestamp` is set).
    pub fn is_deleting(&self) -> bool {
        self.at(&["metadata", "deletionTimestamp"])
            .is_some_and(|t| !t.is_null())
    }

    /// The whole `metadata`, typed.
    pub fn metadata(&self) -> Result<ObjectMeta, Error> {
        let metadata = self.0.get("metadata").cloned().unwrap_or(Value::Null);
        if metadata.is_null() {
            Ok(ObjectMeta::default())
        } else {
            parse_part(metadata, "metadata")
        }
    }

    /// `spec`, if present.
    pub fn spec(&self) -> Option<&Value> {
        self.0.get("spec")
    }

    /// `status`, if present.
    pub fn status(&self) -> Option<&Value> {
        self.0.get("status")
    }

    /// One top-level field of `status`, e.g. `status_field("phase")`.
    pub fn status_field(&self, name: &str) -> Option<&Value> {
        self.status().and_then(|s| s.get(name))
    }

    /// The value at a JSON pointer (RFC 6901), e.g. `"/status/phase"`.
    pub fn field(&self, pointer: &str) -> Option<&Value> {
        let mut tokens = pointer.strip_prefix('/')?.split('/').map(unescape);
        let first = tokens.next()?;
        tokens.try_fold(self.0.get(first.as_ref())?, |value, token| match value {
            Value::Object(map) => map.get(token.as_ref()),
            Value::Array(list) => list.get(array_index(&token)?),
            _ => None,
        })
    }

    /// The condition of type `type_` in `status.conditions`, if present and
    /// well-formed.
    pub fn condition(&self, type_: &str) -> Option<Condition> {
        let conditions = self.status_field("conditions")?.as_array()?;
        conditions
            .iter()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some(type_))
            .find_map(|c| Condition::deserialize(c).ok())
    }

    /// Parses into a typed [`Object`]; see [`Object::from_value`].
    pub fn parse<Spec, Status>(&self) -> Result<Object<Spec, Status>, Error>
    where
        Spec: DeserializeOwned,
        Status: DeserializeOwned + Default,
    {
        Object::from_value(self.to_value())
    }

    /// The object as JSON.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The object as a JSON value (a copy).
    pub fn to_value(&self) -> Value {
        Value::Object(self.0.clone())
    }

    /// The object as JSON, consuming it.
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }

    /// The object as JSON text.
    pub fn to_json(&self) -> String {
        // Straight from the map into a byte buffer: no copy of the object,
        // and no `fmt::Formatter` between the serialiser and the buffer (as
        // `Value::to_string` has). A map of JSON values always serialises.
        serde_json::to_string(&self.0).expect("a map of JSON values serialises")
    }
}

/// A JSON pointer token with `~1` and `~0` unescaped (RFC 6901), copied
/// only when it has escapes.
fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// An array index in a JSON pointer: digits without a sign or leading zeros.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

impl<'de> Deserialize<'de> for DynamicObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

impl TryFrom<Value> for DynamicObject {
    type Error = Error;
    fn try_from(value: Value) -> Result<Self, Error> {
        Self::from_value(value)
    }
}

impl From<DynamicObject> for Value {
    fn from(object: DynamicObject) -> Value {
        object.into_value()
    }
}
