//! Kinds: group/version/kind triples, and what the host knows of a kind
//! (plural name, scope, schema) once it is registered.

use serde::{Deserialize, Serialize};

/// A kind as `apiVersion` plus `kind`, the way manifests name it.
///
/// ```
/// use setpoint::object::KindRef;
/// let kind: KindRef = serde_json::from_str(r#"{"apiVersion": "v1", "kind": "Event"}"#).unwrap();
/// assert_eq!(kind, KindRef::new("v1", "Event"));
/// assert_eq!(kind.to_string(), "v1/Event");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version`, or just `version` for the core group.
    pub api_version: String,
    /// The kind, e.g. `ReplicaSet`.
    pub kind: String,
}

impl KindRef {
    /// A kind reference from its parts.
    ///
    /// ```
    /// use setpoint::object::KindRef;
    /// let pods = KindRef::new("demo.setpoint.dev/v1", "Pod");
    /// assert_eq!(pods.kind, "Pod");
    /// ```
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    /// Split into group, version and kind.
    ///
    /// ```
    /// use setpoint::object::KindRef;
    /// let gvk = KindRef::new("demo.setpoint.dev/v1", "Pod").gvk();
    /// assert_eq!((gvk.group.as_str(), gvk.version.as_str()), ("demo.setpoint.dev", "v1"));
    /// ```
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::from_api_version(&self.api_version, &self.kind)
    }
}

impl std::fmt::Display for KindRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// Group, version and kind; the core group is the empty string.
///
/// ```
/// use setpoint::object::GroupVersionKind;
/// let gvk = GroupVersionKind::from_api_version("v1", "Event");
/// assert_eq!((gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()), ("", "v1", "Event"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupVersionKind {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// The kind, e.g. `Pod`.
    pub kind: String,
}

impl GroupVersionKind {
    /// Parse `apiVersion` (`group/version` or `version`) and combine it with `kind`.
    ///
    /// ```
    /// use setpoint::object::GroupVersionKind;
    /// let gvk = GroupVersionKind::from_api_version("demo.setpoint.dev/v1", "Pod");
    /// assert_eq!(gvk.group, "demo.setpoint.dev");
    /// assert_eq!(GroupVersionKind::from_api_version("v1", "Event").group, "");
    /// ```
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// `group/version`, or `version` for the core group.
    ///
    /// ```
    /// use setpoint::object::GroupVersionKind;
    /// assert_eq!(GroupVersionKind::from_api_version("apps.example.com/v2", "App").api_version(), "apps.example.com/v2");
    /// assert_eq!(GroupVersionKind::from_api_version("v1", "Event").api_version(), "v1");
    /// ```
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Everything the host knows about a registered kind.
///
/// ```
/// use setpoint::api::KindRegistry;
/// let events = KindRegistry::with_builtins().require("v1", "Event").unwrap();
/// assert_eq!((events.plural.as_str(), events.namespaced), ("events", true));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct KindInfo {
    /// API group, empty for the core group.
    pub group: String,
    /// The served version.
    pub version: String,
    /// The kind, e.g. `ReplicaSet`.
    pub kind: String,
    /// Lower-case plural used in URLs, e.g. `replicasets`.
    pub plural: String,
    /// Lower-case singular, e.g. `replicaset`.
    pub singular: String,
    /// Short names accepted by clients, e.g. `rs`.
    pub short_names: Vec<String>,
    /// The list kind, e.g. `ReplicaSetList`.
    pub list_kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether `status` is a separate sub-resource.
    pub status_subresource: bool,
    /// The OpenAPI v3 schema of the version, if any.
    pub schema: Option<serde_json::Value>,
    /// `additionalPrinterColumns` of the version, for table output.
    pub printer_columns: Vec<serde_json::Value>,
}

impl KindInfo {
    /// Whether clients patch it with a strategic merge patch: Kubernetes'
    /// own kinds (the core group's Secret and Event, and
    /// CustomResourceDefinition), which kubectl knows; custom resources
    /// take a merge patch instead.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    /// assert!(kinds.require("v1", "Event").unwrap().takes_strategic_merge_patch());
    /// assert!(!kinds.require("setpoint.dev/v1", "PluginGrant").unwrap().takes_strategic_merge_patch());
    /// ```
    pub fn takes_strategic_merge_patch(&self) -> bool {
        self.group.is_empty() || self.group == "apiextensions.k8s.io"
    }

    /// `group/version`, or `version` for the core group.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let crds = KindRegistry::with_builtins().by_plural("apiextensions.k8s.io", "customresourcedefinitions").unwrap();
    /// assert_eq!(crds.api_version(), "apiextensions.k8s.io/v1");
    /// ```
    pub fn api_version(&self) -> String {
        self.gvk().api_version()
    }

    /// The group/version/kind of this kind.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let events = KindRegistry::with_builtins().require("v1", "Event").unwrap();
    /// assert_eq!(events.gvk().kind, "Event");
    /// ```
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }

    /// The kind reference of this kind.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// use setpoint::object::KindRef;
    /// let events = KindRegistry::with_builtins().require("v1", "Event").unwrap();
    /// assert_eq!(events.kind_ref(), KindRef::new("v1", "Event"));
    /// ```
    pub fn kind_ref(&self) -> KindRef {
        KindRef::new(self.api_version(), self.kind.clone())
    }
}
