//! The kind registry: built-in kinds plus those registered by
//! `CustomResourceDefinition` objects, looked up by kind or by plural, each
//! with its schema compiled once. What a definition must contain is
//! checked in `api::crd`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::{Error, crd};
use crate::object::KindInfo;
use crate::object::field::FieldPath;
use crate::object::schema::Schema;

/// The group of `CustomResourceDefinition`.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";

/// Registered kinds; cheap to clone, shared by every user of one store.
///
/// ```
/// use setpoint::api::KindRegistry;
/// let kinds = KindRegistry::with_builtins();
///
/// use serde_json::json;
/// let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
///     "metadata": {"name": "widgets.example.com"},
///     "spec": {"group": "example.com", "scope": "Namespaced",
///         "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
///         "versions": [{"name": "v1", "served": true, "storage": true,
///             "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
///
/// kinds.insert(setpoint::api::kinds::kind_from_crd(&crd)?);
/// assert_eq!(kinds.require("example.com/v1", "Widget")?.short_names, ["wd"]);
/// # Ok::<(), setpoint::api::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct KindRegistry {
    kinds: Arc<RwLock<KindsByPlural>>,
}

/// Kinds keyed by (group, plural).
type KindsByPlural = HashMap<(String, String), Entry>;

/// A registered kind and its compiled schema (or why it does not compile).
#[derive(Clone)]
struct Entry {
    info: Arc<KindInfo>,
    schema: CompiledSchema,
}

type CompiledSchema = Result<Option<Arc<Schema>>, String>;

fn compile(info: &KindInfo) -> CompiledSchema {
    let Some(schema) = &info.schema else {
        return Ok(None);
    };
    Schema::compile(schema, &FieldPath::new("openAPIV3Schema"))
        .map(|s| Some(Arc::new(s)))
        .map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
}

/// `PluginGrant`: the destinations, secrets and limits the operator grants
/// one plugin (named after it). A schema, so that a mistyped grant is
/// refused when written rather than ignored when read.
fn plugin_grant_kind() -> KindInfo {
    let strings = serde_json::json!({"type": "array", "items": {"type": "string"}});
    KindInfo {
        group: "setpoint.dev".into(),
        version: "v1".into(),
        kind: "PluginGrant".into(),
        plural: "plugingrants".into(),
        singular: "plugingrant".into(),
        short_names: vec!["pg".into()],
        list_kind: "PluginGrantList".into(),
        namespaced: false,
        status_subresource: false,
        schema: Some(serde_json::json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "destinations": strings,
                        "secrets": strings,
                        "kinds": strings,
                        "limits": {
                            "type": "object",
                            "properties": {
                                "rps": {"type": "number", "minimum": 0},
                                "concurrency": {"type": "integer", "minimum": 1},
                                "children": {"type": "integer", "minimum": 1},
                                "cpu": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
                                "writeMiBPerSecond": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
                                "events": {"type": "integer", "minimum": 1},
                            },
                        },
                    },
                },
            },
        })),
        printer_columns: vec![],
    }
}

impl KindRegistry {
    /// A registry with the built-in kinds: `CustomResourceDefinition`, core
    /// `Event` and `Secret` (`api::secret`), and `PluginGrant`
    /// (`setpoint.dev/v1`, cluster-scoped: what the operator grants a
    /// plugin, see `crate::egress`).
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// let names: Vec<String> = kinds.all().iter().map(|k| k.kind.clone()).collect();
    /// assert_eq!(names, ["Event", "Secret", "CustomResourceDefinition", "PluginGrant"]);
    /// ```
    pub fn with_builtins() -> Self {
        let registry = Self::default();
        registry.insert(KindInfo {
            group: CRD_GROUP.into(),
            version: "v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
            singular: "customresourcedefinition".into(),
            short_names: vec!["crd".into(), "crds".into()],
            list_kind: "CustomResourceDefinitionList".into(),
            namespaced: false,
            status_subresource: true,
            schema: None,
            printer_columns: vec![],
        });
        registry.insert(KindInfo {
            group: String::new(),
            version: "v1".into(),
            kind: "Event".into(),
            plural: "events".into(),
            singular: "event".into(),
            short_names: vec!["ev".into()],
            list_kind: "EventList".into(),
            namespaced: true,
            status_subresource: false,
            schema: None,
            printer_columns: vec![],
        });
        registry.insert(super::secret::kind_info());
        registry.insert(plugin_grant_kind());
        registry
    }

    /// Add or replace a kind, compiling its schema. A schema that does not
    /// compile is kept as an error: writes of the kind are then refused.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// use serde_json::json;
    /// let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    ///     "metadata": {"name": "widgets.example.com"},
    ///     "spec": {"group": "example.com", "scope": "Namespaced",
    ///         "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
    ///         "versions": [{"name": "v1", "served": true, "storage": true,
    ///             "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    ///
    /// kinds.insert(setpoint::api::kinds::kind_from_crd(&crd)?);
    /// assert!(kinds.by_plural("example.com", "widgets").is_some());
    /// # Ok::<(), setpoint::api::Error>(())
    /// ```
    pub fn insert(&self, info: KindInfo) {
        let key = (info.group.clone(), info.plural.clone());
        let schema = compile(&info);
        if let Err(err) = &schema {
            tracing::warn!(kind = %info.kind, %err, "kind registered with an invalid schema; its writes will be refused");
        }
        self.kinds
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                key,
                Entry {
                    info: Arc::new(info),
                    schema,
                },
            );
    }

    /// A registry of its own holding the kinds this one holds now: what
    /// is inserted into or removed from either later, the other does not
    /// see.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    /// let fork = kinds.fork();
    /// fork.remove("", "events");
    /// assert!(fork.by_kind("v1", "Event").is_none());
    /// assert!(kinds.by_kind("v1", "Event").is_some());
    /// ```
    pub fn fork(&self) -> Self {
        let kinds = self.kinds.read().unwrap_or_else(|p| p.into_inner()).clone();
        Self {
            kinds: Arc::new(RwLock::new(kinds)),
        }
    }

    /// The compiled schema writes of `kind` are checked against: the
    /// registered one for the kind's group, plural and version, else the
    /// kind's own (compiled now). `None` when the kind has no schema.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// use serde_json::json;
    /// let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    ///     "metadata": {"name": "widgets.example.com"},
    ///     "spec": {"group": "example.com", "scope": "Namespaced",
    ///         "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
    ///         "versions": [{"name": "v1", "served": true, "storage": true,
    ///             "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    ///
    /// let widget = setpoint::api::kinds::kind_from_crd(&crd)?;
    /// kinds.insert(widget.clone());
    /// assert!(kinds.schema_for(&widget)?.is_some());
    /// let events = kinds.require("v1", "Event")?;
    /// assert!(kinds.schema_for(&events)?.is_none(), "built-in events keep any field");
    /// # Ok::<(), setpoint::api::Error>(())
    /// ```
    pub fn schema_for(&self, kind: &KindInfo) -> Result<Option<Arc<Schema>>, Error> {
        let registered = self
            .kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(kind.group.clone(), kind.plural.clone()))
            .filter(|e| e.info.version == kind.version)
            .map(|e| e.schema.clone());
        registered.unwrap_or_else(|| compile(kind)).map_err(|err| {
            Error::BadRequest(format!("the schema of {} is invalid: {err}", kind.kind))
        })
    }

    /// Remove a kind by group and plural.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// kinds.remove("", "events");
    /// assert!(kinds.by_kind("v1", "Event").is_none());
    /// ```
    pub fn remove(&self, group: &str, plural: &str) {
        self.kinds
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(group.to_owned(), plural.to_owned()));
    }

    /// Look a kind up by group and plural (URL form).
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// assert_eq!(kinds.by_plural("", "events").unwrap().kind, "Event");
    /// assert!(kinds.by_plural("", "pods").is_none());
    /// ```
    pub fn by_plural(&self, group: &str, plural: &str) -> Option<Arc<KindInfo>> {
        self.kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(group.to_owned(), plural.to_owned()))
            .map(|e| e.info.clone())
    }

    /// Look a kind up by `apiVersion` and `kind` (manifest form).
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// assert_eq!(kinds.by_kind("v1", "Event").unwrap().plural, "events");
    /// assert!(kinds.by_kind("v2", "Event").is_none(), "the version must match");
    /// ```
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<KindInfo>> {
        let gvk = crate::object::GroupVersionKind::from_api_version(api_version, kind);
        self.kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|e| &e.info)
            .find(|k| k.group == gvk.group && k.version == gvk.version && k.kind == gvk.kind)
            .cloned()
    }

    /// Look a kind up, or fail with [`Error::UnknownKind`].
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// let err = kinds.require("example.com/v1", "Widget").unwrap_err();
    /// assert_eq!(err.to_string(), "unknown kind example.com/v1/Widget: no CustomResourceDefinition registers it");
    /// ```
    pub fn require(&self, api_version: &str, kind: &str) -> Result<Arc<KindInfo>, Error> {
        self.by_kind(api_version, kind)
            .ok_or_else(|| Error::UnknownKind(format!("{api_version}/{kind}")))
    }

    /// Every registered kind, sorted by group then kind.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// assert_eq!(kinds.all().len(), 4);
    /// assert_eq!(kinds.all()[0].group, "", "sorted by group, then kind");
    /// ```
    pub fn all(&self) -> Vec<Arc<KindInfo>> {
        let mut all: Vec<_> = self
            .kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|e| e.info.clone())
            .collect();
        all.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
        all
    }

    /// The kinds served under one group and version (`""` is the core
    /// group), sorted by plural: what discovery and the OpenAPI document
    /// list for that group version.
    ///
    /// ```
    /// use setpoint::api::KindRegistry;
    /// let kinds = KindRegistry::with_builtins();
    ///
    /// let core: Vec<_> = kinds.in_group_version("", "v1").iter().map(|k| k.plural.clone()).collect();
    /// assert!(core.windows(2).all(|w| w[0] < w[1]), "sorted by plural: {core:?}");
    /// assert!(core.contains(&"events".to_owned()));
    /// assert!(kinds.in_group_version("", "v2").is_empty());
    /// ```
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<KindInfo>> {
        let mut kinds: Vec<_> = self
            .all()
            .into_iter()
            .filter(|k| k.group == group && k.version == version)
            .collect();
        kinds.sort_by(|a, b| a.plural.cmp(&b.plural));
        kinds
    }
}

/// Read the kind a `CustomResourceDefinition` registers, after checking
/// the definition (every problem is reported, with its field path).
///
/// ```
/// use serde_json::json;
/// let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
///     "metadata": {"name": "widgets.example.com"},
///     "spec": {"group": "example.com", "scope": "Namespaced",
///         "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
///         "versions": [{"name": "v1", "served": true, "storage": true,
///             "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
///
/// use setpoint::api::kinds::kind_from_crd;
/// let widget = kind_from_crd(&crd)?;
/// assert_eq!((widget.plural.as_str(), widget.list_kind.as_str()), ("widgets", "WidgetList"));
/// let mut bad = crd.clone();
/// bad["spec"]["scope"] = json!("Galaxy");
/// assert!(kind_from_crd(&bad).unwrap_err().to_string().contains("spec.scope"));
/// # Ok::<(), setpoint::api::Error>(())
/// ```
pub fn kind_from_crd(crd: &Value) -> Result<KindInfo, Error> {
    let name = crd["metadata"]["name"].as_str().unwrap_or("");
    let problems = crd::check(crd);
    if !problems.is_empty() {
        return Err(Error::invalid_fields(
            "CustomResourceDefinition",
            name,
            &problems,
        ));
    }
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let kind = names["kind"].as_str().unwrap_or_default();
    let plural = names["plural"].as_str().unwrap_or_default();
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    // Checked above: exactly one version is stored; that is the one served.
    let version = spec["versions"]
        .as_array()
        .and_then(|versions| {
            versions
                .iter()
                .find(|v| v["storage"].as_bool() == Some(true))
        })
        .unwrap_or(&Value::Null);
    let version_name = version["name"].as_str().unwrap_or_default();
    Ok(KindInfo {
        group: group.to_owned(),
        version: version_name.to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
        singular: names["singular"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| kind.to_lowercase()),
        short_names: names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        list_kind: names["listKind"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{kind}List")),
        namespaced,
        status_subresource: version["subresources"]["status"].is_object(),
        schema: version["schema"].get("openAPIV3Schema").cloned(),
        printer_columns: version["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_crd_registers_its_kind_and_bad_ones_name_the_field() {
        let crd = json!({"metadata": {"name": "widgets.example.dev"}, "spec": {
            "group": "example.dev", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        let info = kind_from_crd(&crd).unwrap();
        assert_eq!(
            (
                info.kind.as_str(),
                info.plural.as_str(),
                info.singular.as_str()
            ),
            ("Widget", "widgets", "widget")
        );
        assert!(info.namespaced && info.status_subresource);
        assert_eq!(info.list_kind, "WidgetList");

        let mut bad = crd.clone();
        bad["metadata"]["name"] = json!("wrong");
        assert!(
            kind_from_crd(&bad)
                .unwrap_err()
                .to_string()
                .contains("metadata.name")
        );
        let mut bad = crd;
        bad["spec"]["names"]["plural"] = json!(null);
        assert!(
            kind_from_crd(&bad)
                .unwrap_err()
                .to_string()
                .contains("spec.names.plural")
        );
    }

    fn kind_with_schema(schema: Option<Value>) -> KindInfo {
        KindInfo {
            group: "example.dev".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            short_names: vec![],
            list_kind: "WidgetList".into(),
            namespaced: true,
            status_subresource: false,
            schema,
            printer_columns: vec![],
        }
    }

    #[test]
    fn writes_are_checked_against_the_registered_schema_of_the_kind() {
        let registry = KindRegistry::with_builtins();
        let schema = json!({"type": "object", "properties": {"spec": {"type": "string"}}});
        registry.insert(kind_with_schema(Some(schema)));
        let caller_view = kind_with_schema(None);
        let compiled = registry.schema_for(&caller_view).unwrap().unwrap();
        let mut bad = json!({"spec": 1});
        assert!(compiled.admit(&mut bad).is_err());

        let unregistered = KindInfo {
            plural: "others".into(),
            ..kind_with_schema(Some(json!({"type": "object"})))
        };
        assert!(registry.schema_for(&unregistered).unwrap().is_some());
        let events = registry.by_plural("", "events").unwrap();
        assert!(registry.schema_for(&events).unwrap().is_none());
    }

    #[test]
    fn a_kind_whose_schema_does_not_compile_refuses_writes() {
        let registry = KindRegistry::default();
        registry.insert(kind_with_schema(Some(json!({"type": "string"}))));
        let err = registry.schema_for(&kind_with_schema(None)).unwrap_err();
        assert!(matches!(err, Error::BadRequest(_)));
        assert!(err.to_string().contains("openAPIV3Schema.type"), "{err}");
        assert_eq!(
            registry.all().len(),
            1,
            "still registered, so the error is visible"
        );
    }
}
