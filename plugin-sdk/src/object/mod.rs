//! Objects as a reconciler sees them: typed ([`Object`]) for the kind it
//! reconciles, untyped ([`DynamicObject`]) for children and anything read from
//! the host, plus the references ([`KindRef`], [`ObjectRef`]) that name them.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{Error, Time};

mod dynamic;
#[cfg(test)]
mod tests;

pub use dynamic::DynamicObject;

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

/// A kind as Rust types: its [`KindRef`] and the types of its spec and
/// status, so typed objects of it can be read from the host
/// ([`Ctx::owned`](crate::Ctx::owned)). Implement it on a unit struct
/// named after the kind:
///
/// ```
/// # use serde::Deserialize;
/// use setpoint_plugin_sdk::{KindRef, Resource};
///
/// # #[derive(Deserialize)] pub struct PodSpec {}
/// # #[derive(Deserialize, Default)] pub struct PodStatus {}
/// pub struct Pod;
///
/// impl Resource for Pod {
///     type Spec = PodSpec;
///     type Status = PodStatus;
///     fn kind() -> KindRef {
///         KindRef::new("demo.setpoint.dev/v1", "Pod")
///     }
/// }
/// ```
pub trait Resource {
    /// The kind's `spec`.
    type Spec: DeserializeOwned;
    /// The kind's `status`; a missing status parses as its default.
    type Status: DeserializeOwned + Default;
    /// The kind's `apiVersion` and `kind`.
    fn kind() -> KindRef;
}

/// A typed object of the kind `R`.
pub type ObjectOf<R> = Object<<R as Resource>::Spec, <R as Resource>::Status>;

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
/// object whose bulk is annotations, inserting them one by one was a large
/// share of the whole reconcile (docs/benchmarks/plugins.md#branch-plugin-perf-parse-once-build-maps-in-bulk). Duplicate keys keep the
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
    /// failed, e.g. `spec: missing field `replicas``, and in the spec and the
    /// status the field, e.g. `spec.port: invalid type: string "eighty",
    /// expected u16`.
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
            spec: parse_typed_part(spec, "spec")?,
            status: if status.is_null() {
                Status::default()
            } else {
                parse_typed_part(status, "status")?
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
            Some(err) => with_field_path::<Spec, Status>(err, || {
                serde_json::from_str::<Value>(text).unwrap_or(Value::Null)
            }),
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

/// [`parse_part`] for the spec and the status, whose errors name the field
/// (`spec.port: invalid type: …`). Parsed from a borrowed value, so that
/// the value is still there to find the field once the parse failed.
fn parse_typed_part<T: DeserializeOwned>(value: Value, part: &str) -> Result<T, Error> {
    T::deserialize(&value)
        .map_err(|e| field_error::<T>(&value, part).unwrap_or_else(|| Error::from(e).context(part)))
}

/// The error of parsing `value` as the `part` (`spec` or `status`) of an
/// object, naming the field that failed; `None` if no field is to blame.
fn field_error<T: DeserializeOwned>(value: &Value, part: &str) -> Option<Error> {
    let err = serde_path_to_error::deserialize::<_, T>(value).err()?;
    let path = err.path().to_string();
    if path.is_empty() || path == "." {
        return None;
    }
    let message = err.inner().to_string();
    Some(Error::permanent(without_position(&message)).context(format!("{part}.{path}")))
}

/// A part's error from [`Object::from_json`], with the field named when it
/// is the spec's or the status's (parsed again, from `whole`, only now
/// that it failed).
fn with_field_path<Spec: DeserializeOwned, Status: DeserializeOwned>(
    err: Error,
    whole: impl FnOnce() -> Value,
) -> Error {
    let named = if err.message().starts_with("spec: ") {
        field_error::<Spec>(&whole()["spec"], "spec")
    } else if err.message().starts_with("status: ") {
        field_error::<Status>(&whole()["status"], "status")
    } else {
        None
    };
    match named {
        Some(named) if err.is_permanent() => named,
        _ => err,
    }
}

fn parse_part<T: DeserializeOwned>(value: Value, part: &str) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::from(e).context(part))
}
