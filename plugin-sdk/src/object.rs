//! Objects as a reconciler sees them: typed ([`Object`]) for the kind it
//! reconciles, untyped ([`DynamicObject`]) for children and anything read from
//! the host, plus the references ([`KindRef`], [`ObjectRef`]) that name them.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{Condition, Error, Time};

/// A kind: `apiVersion` (`"group/version"`, or `"v1"` for the core group)
/// plus `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `"group/version"`, e.g. `"demo.setpoint.dev/v1"`.
    pub api_version: String,
    /// The kind, e.g. `"ReplicaSet"`.
    pub kind: String,
}

impl KindRef {
    /// A kind from its `apiVersion` and `kind`.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }
}

/// One object by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `"group/version"` of the object.
    pub api_version: String,
    /// Kind of the object.
    pub kind: String,
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
}

impl ObjectRef {
    /// A reference to the object `name` of kind `kind` in `namespace`.
    pub fn new(kind: &KindRef, namespace: Option<&str>, name: impl Into<String>) -> Self {
        Self {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
        }
    }
}

/// A reference from a child to the object that owns it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// `apiVersion` of the owner.
    pub api_version: String,
    /// Kind of the owner.
    pub kind: String,
    /// Name of the owner.
    pub name: String,
    /// UID of the owner.
    pub uid: String,
    /// Whether the owner is the managing controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether foreground deletion of the owner waits for this child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Standard object metadata. Fields the host sets (uid, resourceVersion,
/// generation, timestamps) are read-only to a reconciler.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Name, unique per kind and namespace.
    #[serde(default)]
    pub name: String,
    /// Namespace; `None` for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Unique id of this incarnation of the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Opaque version of the stored object, for optimistic concurrency.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Bumped by the host whenever `spec` changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// When the object was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// Set once deletion started; the object stays until its finalizers are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// Identifying labels, matched by label selectors.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub labels: BTreeMap<String, String>,
    /// Non-identifying annotations.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub annotations: BTreeMap<String, String>,
    /// Finalizers that hold back deletion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// The objects that own this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// Deserialises a string map by collecting its entries and building the tree
/// in one go instead of inserting them one by one.
///
/// The host sends objects with their keys sorted, and building a `BTreeMap`
/// from sorted entries costs about two key comparisons per entry instead of
/// a descent through the tree per insert. Key comparisons are `memcmp`
/// calls, which in a Wasm guest are a byte-at-a-time loop: on a 16 KiB
/// object whose bulk is annotations, inserting them one by one was a quarter
/// of the whole reconcile (BENCHMARKS.md, plugins). Duplicate keys keep the
/// last value, as inserting would.
fn string_map<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct Entries;

    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some(entry) = map.next_entry::<String, String>()? {
                entries.push(entry);
            }
            // Stable sort (a single pass over input that is already sorted),
            // then a bulk build that keeps the last of equal keys.
            Ok(entries.into_iter().collect())
        }
    }

    deserializer.deserialize_map(Entries)
}

/// A typed object: the kind a reconciler reconciles, with its `spec` and
/// `status` parsed into the reconciler's own types.
///
/// A missing `status` (or `null`) parses as `Status::default()`; a missing
/// `spec` parses as if it were `{}`, so a spec type whose fields all have
/// defaults accepts it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Object<Spec, Status> {
    /// `"group/version"` of the object.
    pub api_version: String,
    /// Kind of the object.
    pub kind: String,
    /// Standard metadata.
    pub metadata: ObjectMeta,
    /// The desired state, written by users.
    pub spec: Spec,
    /// The observed state, written by the reconciler.
    pub status: Status,
}

impl<Spec, Status> Object<Spec, Status>
where
    Spec: DeserializeOwned,
    Status: DeserializeOwned + Default,
{
    /// Parses an object from JSON. Errors are permanent and name the part that
    /// failed, e.g. `spec: missing field `replicas``.
    pub fn from_value(value: Value) -> Result<Self, Error> {
        let Value::Object(mut fields) = value else {
            return Err(Error::permanent("object: expected a JSON object"));
        };
        let mut take = |key: &str| fields.remove(key).unwrap_or(Value::Null);
        let (api_version, kind) = (take("apiVersion"), take("kind"));
        let (metadata, spec, status) = (take("metadata"), take("spec"), take("status"));
        let spec = if spec.is_null() {
            Value::Object(Map::new())
        } else {
            spec
        };
        Ok(Self {
            api_version: parse_part(api_version, "apiVersion")?,
            kind: parse_part(kind, "kind")?,
            metadata: if metadata.is_null() {
                ObjectMeta::default()
            } else {
                parse_part(metadata, "metadata")?
            },
            spec: parse_part(spec, "spec")?,
            status: if status.is_null() {
                Status::default()
            } else {
                parse_part(status, "status")?
            },
        })
    }

    /// Parses an object from JSON text; see [`Object::from_value`].
    ///
    /// One pass over the text: each part is parsed straight into its type
    /// as the parser reaches it, without an intermediate `Value` tree or a
    /// first pass to find where the parts are.
    pub fn from_json(text: &str) -> Result<Self, Error> {
        let failed = Cell::new(None);
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let fields = Fields {
            failed: &failed,
            parts: PhantomData,
        };
        let parsed = serde::Deserializer::deserialize_map(&mut deserializer, fields)
            .and_then(|object| deserializer.end().map(|()| object));
        parsed.map_err(|e| match failed.take() {
            Some(err) => err,
            None if e.classify() == serde_json::error::Category::Data => {
                Error::permanent("object: expected a JSON object")
            }
            None => Error::from(e).context("object"),
        })
    }
}

/// Reads an object the way [`Object::from_value`] does, in one pass as
/// [`Object::from_json`] does, so that the types a reconciler uses also read
/// objects from elsewhere: the host's embedding client, a file.
///
/// ```
/// # use serde::Deserialize;
/// # use setpoint_plugin_sdk::Object;
/// #[derive(Deserialize)]
/// struct Spec { replicas: u32 }
///
/// let object: Object<Spec, ()> = serde_json::from_str(
///     r#"{"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
///         "metadata": {"name": "web"}, "spec": {"replicas": 2}}"#,
/// ).unwrap();
/// assert_eq!((object.name(), object.spec.replicas), ("web", 2));
/// ```
impl<'de, Spec, Status> Deserialize<'de> for Object<Spec, Status>
where
    Spec: DeserializeOwned,
    Status: DeserializeOwned + Default,
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The error carries the part's name in its message already.
        let failed = Cell::new(None);
        deserializer.deserialize_map(Fields {
            failed: &failed,
            parts: PhantomData,
        })
    }
}

/// The top-level fields [`Object::from_json`] reads; anything else is skipped.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Field {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
    Status,
    #[serde(other)]
    Other,
}

/// The visitor behind [`Object::from_json`]. A part that fails to parse
/// leaves its error, named after the part, in `failed`: serde's error type
/// would otherwise carry a position in the whole text, which means little
/// to a user.
struct Fields<'a, Spec, Status> {
    failed: &'a Cell<Option<Error>>,
    parts: PhantomData<fn() -> (Spec, Status)>,
}

impl<Spec, Status> Fields<'_, Spec, Status> {
    /// Records `err` as the reason and returns an error that stops the parse.
    fn fail<E: serde::de::Error>(&self, err: Error) -> E {
        let message = err.message().to_owned();
        self.failed.set(Some(err));
        E::custom(message)
    }

    /// Parses the value of the current entry into `slot`; `null` is `None`.
    fn part<'de, A, T>(
        &self,
        map: &mut A,
        slot: &mut Option<Option<T>>,
        name: &str,
    ) -> Result<(), A::Error>
    where
        A: serde::de::MapAccess<'de>,
        T: Deserialize<'de>,
    {
        if slot.is_some() {
            return Err(self.fail(Error::permanent(format!(
                "object: duplicate field `{name}`"
            ))));
        }
        match map.next_value::<Option<T>>() {
            Ok(value) => {
                *slot = Some(value);
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                Err(self.fail(Error::permanent(without_position(&message)).context(name)))
            }
        }
    }
}

impl<'de, Spec, Status> serde::de::Visitor<'de> for Fields<'_, Spec, Status>
where
    Spec: DeserializeOwned,
    Status: DeserializeOwned + Default,
{
    type Value = Object<Spec, Status>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut api_version, mut kind, mut metadata) = (None, None, None);
        let (mut spec, mut status) = (None, None);
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::ApiVersion => self.part(&mut map, &mut api_version, "apiVersion")?,
                Field::Kind => self.part(&mut map, &mut kind, "kind")?,
                Field::Metadata => self.part(&mut map, &mut metadata, "metadata")?,
                Field::Spec => self.part(&mut map, &mut spec, "spec")?,
                Field::Status => self.part(&mut map, &mut status, "status")?,
                Field::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        // Missing (or null) parts: the same defaults and errors as
        // `from_value`, from parsing the JSON they stand for.
        let or_parse = |value: Option<Option<_>>, json: &str, name: &str| match value.flatten() {
            Some(value) => Ok(value),
            None => parse_text(json, name).map_err(|e| self.fail(e)),
        };
        Ok(Object {
            api_version: or_parse(api_version, "null", "apiVersion")?,
            kind: or_parse(kind, "null", "kind")?,
            metadata: metadata.flatten().unwrap_or_default(),
            spec: match spec.flatten() {
                Some(spec) => spec,
                None => parse_text("{}", "spec").map_err(|e| self.fail(e))?,
            },
            status: status.flatten().unwrap_or_default(),
        })
    }
}

/// `message` without serde_json's trailing ` at line L column C`.
fn without_position(message: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match message.rfind(" at line ") {
        Some(i) => match message[i + " at line ".len()..].split_once(" column ") {
            Some((line, column)) if digits(line) && digits(column) => &message[..i],
            _ => message,
        },
        None => message,
    }
}

fn parse_text<T: DeserializeOwned>(text: &str, part: &str) -> Result<T, Error> {
    serde_json::from_str(text).map_err(|e| {
        // Positions within one part mean little to a user; the part's name does.
        let message = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        Error::permanent(message.strip_suffix(&position).unwrap_or(&message)).context(part)
    })
}

impl<Spec, Status> Object<Spec, Status> {
    /// The object's name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The object's namespace, if it is namespaced.
    pub fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    /// The object's kind.
    pub fn kind_ref(&self) -> KindRef {
        KindRef::new(&self.api_version, &self.kind)
    }

    /// A reference to this object.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef::new(&self.kind_ref(), self.namespace(), self.name())
    }

    /// Whether deletion has started (`metadata.deletionTimestamp` is set).
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

fn parse_part<T: DeserializeOwned>(value: Value, part: &str) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::from(e).context(part))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Spec {
        replicas: u32,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default, rename_all = "camelCase")]
    struct Status {
        ready_replicas: u32,
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "demo.setpoint.dev/v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "default", "uid": "u-1",
                "resourceVersion": "7", "generation": 2,
                "creationTimestamp": "2025-01-02T03:04:05Z",
                "labels": {"app": "web"}, "annotations": {"note": "x"},
                "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
                                     "name": "web", "uid": "u-0", "controller": true}],
                "somethingNew": true
            },
            "spec": {"replicas": 3},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "PodReady", "message": ""}]}
        })
    }

    #[test]
    fn a_typed_object_deserializes_as_from_value_parses_it() {
        let object: Object<Spec, Status> = serde_json::from_value(pod()).unwrap();
        assert_eq!(object, Object::from_value(pod()).unwrap());
        let mut bad = pod();
        bad["spec"]["replicas"] = json!("three");
        let err = serde_json::from_value::<Object<Spec, Status>>(bad).unwrap_err();
        assert!(err.to_string().starts_with("spec: invalid type"), "{err}");
    }

    #[test]
    fn typed_object_parses_metadata_spec_and_status() {
        let object = Object::<Spec, Status>::from_value(pod()).unwrap();
        assert_eq!(object.name(), "web-0");
        assert_eq!(object.namespace(), Some("default"));
        assert_eq!(object.metadata.generation, Some(2));
        assert_eq!(
            object.metadata.creation_timestamp,
            Some("2025-01-02T03:04:05Z".parse().unwrap())
        );
        assert_eq!(object.metadata.owner_references[0].controller, Some(true));
        assert_eq!(object.spec, Spec { replicas: 3 });
        assert_eq!(object.status, Status::default());
        assert_eq!(object.object_ref().name, "web-0");
        assert!(!object.is_deleting());
    }

    #[test]
    fn typed_object_errors_name_the_part_that_failed() {
        let mut value = pod();
        value["spec"] = json!({});
        let err = Object::<Spec, Status>::from_value(value).unwrap_err();
        assert_eq!(err, Error::permanent("spec: missing field `replicas`"));

        let mut value = pod();
        value["status"] = json!({"readyReplicas": "two"});
        let err = Object::<Spec, Status>::from_value(value).unwrap_err();
        assert!(err.message().starts_with("status: invalid type"), "{err}");

        let mut value = pod();
        value["metadata"]["labels"] = json!(["a"]);
        let err = Object::<Spec, Status>::from_value(value).unwrap_err();
        assert!(err.message().starts_with("metadata: invalid type"), "{err}");

        let err = Object::<Spec, Status>::from_json("{").unwrap_err();
        assert!(
            err.is_permanent() && err.message().starts_with("object: "),
            "{err}"
        );
    }

    #[test]
    fn missing_spec_and_null_status_use_defaults() {
        #[derive(Debug, Default, Deserialize, PartialEq)]
        struct Empty {
            #[serde(default)]
            x: u32,
        }
        let value =
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "status": null});
        let object = Object::<Empty, Empty>::from_value(value).unwrap();
        assert_eq!((object.spec.x, object.status.x), (0, 0));
    }

    #[test]
    fn from_json_agrees_with_from_value() {
        let cases = [
            pod(),
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": {"replicas": 1}, "status": null}),
            json!({"kind": "K", "spec": {"replicas": 1}}),
            json!({"apiVersion": 5, "kind": "K", "spec": {"replicas": 1}}),
            json!({"apiVersion": "v1", "kind": "K"}),
            json!({"apiVersion": "v1", "kind": "K", "spec": {"replicas": "x"}}),
            json!({"apiVersion": "v1", "kind": "K", "spec": {"replicas": 1}, "status": {"readyReplicas": -1}}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"labels": {"a": 1}}, "spec": {"replicas": 1}}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": null, "spec": {"replicas": 1}, "extra": [1, {"x": null}]}),
            json!([1, 2]),
            json!("text"),
        ];
        for value in cases {
            let text = value.to_string();
            assert_eq!(
                Object::<Spec, Status>::from_json(&text),
                Object::<Spec, Status>::from_value(value),
                "{text}"
            );
        }
    }

    #[test]
    fn from_json_reports_broken_text_and_repeated_parts() {
        let err = Object::<Spec, Status>::from_json(
            r#"{"apiVersion": "v1", "kind": "K", "spec": {"replicas": 1}} x"#,
        )
        .unwrap_err();
        assert!(
            err.message().starts_with("object: trailing characters"),
            "{err}"
        );
        let err = Object::<Spec, Status>::from_json(r#"{"spec": {"replicas": 1}, "spec": {}}"#)
            .unwrap_err();
        assert_eq!(err, Error::permanent("object: duplicate field `spec`"));
        let err = Object::<Spec, Status>::from_json(r#"{"spec": {"replicas": 1"#).unwrap_err();
        assert!(
            err.message().starts_with("spec: EOF while parsing"),
            "{err}"
        );
        assert!(!err.message().contains(" at line "), "{err}");
    }

    #[test]
    fn label_and_annotation_maps_accept_any_order_and_keep_the_last_duplicate() {
        let text = r#"{"apiVersion": "v1", "kind": "K", "spec": {"replicas": 1},
            "metadata": {"labels": {"b": "2", "a": "1", "c": "3", "a": "9"}, "annotations": {}}}"#;
        let object = Object::<Spec, Status>::from_json(text).unwrap();
        let labels: Vec<(&str, &str)> = object
            .metadata
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(labels, [("a", "9"), ("b", "2"), ("c", "3")]);
        assert!(object.metadata.annotations.is_empty());
        let err = Object::<Spec, Status>::from_json(
            r#"{"spec": {"replicas": 1}, "metadata": {"labels": null}}"#,
        )
        .unwrap_err();
        assert!(
            err.message()
                .starts_with("metadata: invalid type: null, expected a map"),
            "{err}"
        );
    }

    #[test]
    fn field_follows_json_pointers() {
        let object = DynamicObject::from_value(json!({
            "apiVersion": "v1", "kind": "K",
            "metadata": {"annotations": {"example.com/a~b": "x"}},
            "spec": {"list": [10, 11], "": {"e": 1}}
        }))
        .unwrap();
        assert_eq!(object.field("/spec/list/1"), Some(&json!(11)));
        assert_eq!(object.field("/spec/list/01"), None);
        assert_eq!(object.field("/spec/list/+1"), None);
        assert_eq!(object.field("/spec/list/2"), None);
        assert_eq!(object.field("/spec//e"), Some(&json!(1)));
        assert_eq!(
            object.field("/metadata/annotations/example.com~1a~0b"),
            Some(&json!("x"))
        );
        assert_eq!(object.field("/kind/x"), None);
        assert_eq!(object.field("kind"), None);
        assert_eq!(object.field("/kind"), Some(&json!("K")));
    }

    #[test]
    fn dynamic_object_reads_common_fields() {
        let pod = DynamicObject::from_value(pod()).unwrap();
        assert!(pod.is_kind("demo.setpoint.dev/v1", "Pod"));
        assert_eq!(
            (pod.name(), pod.namespace(), pod.uid()),
            ("web-0", Some("default"), "u-1")
        );
        assert_eq!(pod.generation(), Some(2));
        assert_eq!(pod.label("app"), Some("web"));
        assert_eq!(pod.labels().len(), 1);
        assert_eq!(pod.annotation("note"), Some("x"));
        assert_eq!(pod.status_field("phase"), Some(&json!("Running")));
        assert_eq!(pod.field("/spec/replicas"), Some(&json!(3)));
        assert!(pod.condition("Ready").is_some_and(|c| c.is_true()));
        assert!(pod.condition("Scheduled").is_none());
        assert!(!pod.is_deleting());
        assert_eq!(pod.metadata().unwrap().finalizers, ["f"]);
        let typed: Object<Spec, Status> = pod.parse().unwrap();
        assert_eq!(typed.spec.replicas, 3);
    }

    #[test]
    fn dynamic_object_requires_api_version_and_kind() {
        assert!(DynamicObject::from_value(json!({"kind": "Pod"})).is_err());
        assert!(DynamicObject::from_value(json!([])).is_err());
        assert!(DynamicObject::from_json("{\"apiVersion\":\"v1\",\"kind\":\"K\"}").is_ok());
        assert!(serde_json::from_value::<DynamicObject>(json!({"apiVersion": "v1"})).is_err());
    }

    #[test]
    fn builds_a_child_without_empty_maps() {
        let child = DynamicObject::new("demo.setpoint.dev/v1", "Pod", "web-0")
            .with_labels(BTreeMap::from([("app".into(), "web".into())]))
            .with_annotations(BTreeMap::new())
            .with_label("tier", "front")
            .with_spec(&json!({"image": "nginx"}))
            .unwrap();
        assert_eq!(
            child.to_value(),
            json!({
                "apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
                "metadata": {"name": "web-0", "labels": {"app": "web", "tier": "front"}},
                "spec": {"image": "nginx"}
            })
        );
        assert_eq!(DynamicObject::from_json(&child.to_json()).unwrap(), child);
    }
}
