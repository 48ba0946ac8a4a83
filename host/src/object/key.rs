//! `ObjectKey`: the namespace and name that identify an object within its kind.

use std::fmt;

/// Namespace (absent for cluster-scoped kinds) and name of one object of a
/// known kind. This is the workqueue key of a controller.
///
/// ```
/// use setpoint::object::ObjectKey;
/// assert_eq!(ObjectKey::new(None, "cluster-wide").to_string(), "cluster-wide");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace, `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
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
