//! `ObjectKey`: the namespace and name that identify an object within its kind.

use std::fmt;

/// Namespace (absent for cluster-scoped kinds) and name of one object of a
/// known kind. This is the workqueue key of a controller.
///
/// ```
/// use setpoint::object::ObjectKey;
/// assert_eq!(ObjectKey::new(None, "cluster-wide").to_string(), "cluster-wide");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace, `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

/// One word for the namespace's presence and length, then the bytes: the
/// derived hash writes the option's tag and a terminator after each string
/// (five writes where three do), and hashing keys is most of an informer's
/// start from its saved cache (docs/benchmarks/scale.md, "A seal kept at
/// every checkpoint").
impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match &self.namespace {
            Some(namespace) => {
                state.write_u64(namespace.len() as u64);
                state.write(namespace.as_bytes());
            }
            None => state.write_u64(u64::MAX),
        }
        state.write(self.name.as_bytes());
    }
}

impl ObjectKey {
    /// A key for an object in `namespace` (or cluster-scoped when `None`).
    ///
    /// ```
    /// let key = setpoint::object::ObjectKey::new(Some("default"), "web");
    /// assert_eq!(key.to_string(), "default/web");
    /// ```
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The key of an object, read from its metadata.
    ///
    /// ```
    /// use setpoint::object::ObjectKey;
    /// let key = ObjectKey::of(&serde_json::json!({"metadata": {"name": "web", "namespace": "ops"}}));
    /// assert_eq!(key, ObjectKey::new(Some("ops"), "web"));
    /// ```
    pub fn of(object: &super::Object) -> Self {
        Self::new(super::meta::namespace(object), super::meta::name(object))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}
