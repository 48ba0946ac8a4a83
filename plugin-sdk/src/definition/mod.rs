//! [`Definition`]: a kind's CustomResourceDefinition generated from the
//! Rust types of its spec and status, so a plugin writes its kind once.
//!
//! The types derive [`schemars::JsonSchema`]; [`Definition::of`] turns
//! their JSON Schemas into the *structural* OpenAPI v3 schema the host
//! requires (what kube-rs's `CustomResourceExt` does): every `$ref`
//! inlined, `Option<T>` as a field that may be absent, free-form JSON
//! (`serde_json::Value`, `Map<String, Value>`) as
//! `x-kubernetes-preserve-unknown-fields`, Rust integer widths as the
//! OpenAPI formats `int32`/`int64`, documented unit enums as string enums.
//! The rest of the definition (names, scope, the status subresource,
//! printer columns) comes from the builder.
//!
//! Schema generation runs only when the host asks for the manifest (once,
//! at load time), never in a reconcile.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::KindRef;

mod structural;

use structural::structural;

/// A kind's CustomResourceDefinition, built from the Rust types of its
/// spec and status; hand it to [`Manifest::define`](crate::Manifest::define).
///
/// ```
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use setpoint_plugin_sdk::{Definition, KindRef, PrinterColumn};
///
/// /// Says hello.
/// #[derive(Deserialize, JsonSchema)]
/// struct GreetingSpec {
///     /// Whom to greet.
///     name: String,
///     /// How often, at least once.
///     #[serde(default = "once")]
///     #[schemars(range(min = 1))]
///     times: u32,
/// }
/// fn once() -> u32 { 1 }
///
/// #[derive(Serialize, Deserialize, Default, JsonSchema)]
/// #[serde(default)]
/// struct GreetingStatus {
///     message: String,
/// }
///
/// let crd = Definition::of::<GreetingSpec, GreetingStatus>(KindRef::new("demo.setpoint.dev/v1", "Greeting"))
///     .short_name("gr")
///     .column(PrinterColumn::string("Message", ".status.message"))
///     .to_crd();
/// assert_eq!(crd["metadata"]["name"], "greetings.demo.setpoint.dev");
/// let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
/// let times = &schema["properties"]["spec"]["properties"]["times"];
/// assert_eq!(times["format"], "int32");
/// assert_eq!(times["default"], 1);
/// assert_eq!(schema["properties"]["spec"]["required"], serde_json::json!(["name"]));
/// ```
///
/// # What the schema says, and how to say more
///
/// - A field is required unless it is an `Option`, has a serde default, or
///   is skipped when empty.
/// - Doc comments become descriptions.
/// - Bounds and lengths: `#[schemars(range(min = 0, max = 10))]`,
///   `#[schemars(length(min = 1))]` (`minItems` on a list, `minLength` on
///   a string); anything else OpenAPI knows with
///   `#[schemars(extend("minProperties" = 1))]`.
/// - A **default the host fills in** on every write comes from each serde
///   default of a spec field (`#[serde(default = "one")]`, or
///   `#[serde(default)]` on the field or its struct) whose type is
///   `Serialize`, as in kube-rs; except an empty string, list or map (or
///   a struct of only those), which the Rust default gives anyway
///   (storing it would only add noise). Write any other with `#[schemars(extend("default" = 1))]`.
///   The status never gets defaults: the plugin writes its whole status.
/// - A struct that keeps fields it does not declare (the rest of a Pod
///   spec, say): `#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]`.
/// - `status.conditions` is the host's too (it reports `Ready=False` there),
///   so a structured status always declares the standard
///   [`Condition`](crate::Condition) list, keyed by `type`, whether the
///   Rust type has the field or not.
/// - A status (or spec) of type `serde_json::Value` is free-form: any
///   fields are kept and none validated.
///
/// Recursive types cannot be written as a structural schema; `of` panics on
/// them (a unit test that calls `manifest()` catches it).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct Definition {
    kind: KindRef,
    plural: String,
    short_names: Vec<String>,
    cluster_scoped: bool,
    description: Option<String>,
    columns: Vec<PrinterColumn>,
    spec: Value,
    status: Value,
}

impl Definition {
    /// The definition of `kind`, whose objects have a `Spec` and a
    /// `Status`; namespaced, plural `<kind in lower case>s`, with the
    /// status subresource.
    pub fn of<Spec: JsonSchema, Status: JsonSchema>(kind: KindRef) -> Self {
        let spec = Self::root_schema::<Spec>(false);
        let mut status = Self::root_schema::<Status>(true);
        if let Some(properties) = status.get_mut("properties").and_then(Value::as_object_mut) {
            let mut conditions = conditions_schema();
            if let Some(description) = properties
                .get("conditions")
                .and_then(|c| c.get("description"))
            {
                conditions["description"] = description.clone();
            }
            properties.insert("conditions".into(), conditions);
        }
        Self {
            plural: format!("{}s", kind.kind.to_lowercase()),
            kind,
            short_names: Vec::new(),
            cluster_scoped: false,
            description: None,
            columns: Vec::new(),
            spec,
            status,
        }
    }

    /// The kind defined.
    pub fn kind(&self) -> KindRef {
        self.kind.clone()
    }

    /// Sets the plural name (the default adds an `s` to the lower-case kind).
    pub fn plural(mut self, plural: impl Into<String>) -> Self {
        self.plural = plural.into();
        self
    }

    /// Adds a short name (`rs` for ReplicaSets), for `kubectl get rs`.
    pub fn short_name(mut self, short_name: impl Into<String>) -> Self {
        self.short_names.push(short_name.into());
        self
    }

    /// Makes the kind cluster-scoped (objects without a namespace).
    pub fn cluster_scoped(mut self) -> Self {
        self.cluster_scoped = true;
        self
    }

    /// Describes the kind (the schema's top-level description).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Adds a printer column (shown by `kubectl get`). An `Age` column is
    /// always added last.
    pub fn column(mut self, column: PrinterColumn) -> Self {
        self.columns.push(column);
        self
    }

    /// The CustomResourceDefinition (`apiextensions.k8s.io/v1`) as JSON.
    pub fn to_crd(&self) -> Value {
        let (group, version) = self
            .kind
            .api_version
            .split_once('/')
            .unwrap_or(("", self.kind.api_version.as_str()));
        let kind = &self.kind.kind;
        let mut schema = json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": self.spec,
                "status": self.status,
            }
        });
        if let Some(description) = &self.description {
            schema["description"] = json!(description);
        }
        let mut names = json!({
            "kind": kind,
            "listKind": format!("{kind}List"),
            "plural": self.plural,
            "singular": kind.to_lowercase(),
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        let mut columns: Vec<Value> = self.columns.iter().map(PrinterColumn::to_json).collect();
        columns.push(PrinterColumn::new("Age", "date", ".metadata.creationTimestamp").to_json());
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{group}", self.plural)},
            "spec": {
                "group": group,
                "names": names,
                "scope": if self.cluster_scoped { "Cluster" } else { "Namespaced" },
                "versions": [{
                    "name": version,
                    "served": true,
                    "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }],
            },
        })
    }

    /// The structural schema of `T`, as the `spec` or `status` of an object.
    fn root_schema<T: JsonSchema>(status: bool) -> Value {
        let generator = SchemaSettings::draft07()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .into_generator();
        let mut schema = generator.into_root_schema_for::<T>().to_value();
        structural(&mut schema, status);
        if let Some(map) = schema.as_object_mut() {
            // `spec` and `status` are objects even when free-form.
            map.entry("type").or_insert_with(|| json!("object"));
        }
        schema
    }
}

/// A column `kubectl get` shows for the kind.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct PrinterColumn {
    name: String,
    type_: String,
    json_path: String,
    description: Option<String>,
}

impl PrinterColumn {
    /// A column of OpenAPI `type_` (`integer`, `string`, `date`, ...)
    /// showing the value at `json_path` (`.status.readyReplicas`).
    pub fn new(
        name: impl Into<String>,
        type_: impl Into<String>,
        json_path: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            type_: type_.into(),
            json_path: json_path.into(),
            description: None,
        }
    }

    /// An integer column.
    pub fn integer(name: impl Into<String>, json_path: impl Into<String>) -> Self {
        Self::new(name, "integer", json_path)
    }

    /// A string column.
    pub fn string(name: impl Into<String>, json_path: impl Into<String>) -> Self {
        Self::new(name, "string", json_path)
    }

    /// A string column showing the status of the condition `type_`
    /// (`True`, `False`, `Unknown`).
    pub fn condition(name: impl Into<String>, type_: &str) -> Self {
        Self::string(
            name,
            format!(".status.conditions[?(@.type==\"{type_}\")].status"),
        )
    }

    /// Describes the column.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    fn to_json(&self) -> Value {
        let mut column = json!({"name": self.name, "type": self.type_, "jsonPath": self.json_path});
        if let Some(description) = &self.description {
            column["description"] = json!(description);
        }
        column
    }
}

/// The host's `status.conditions`: a list keyed by `type` (so server-side
/// apply merges entries by type).
pub(crate) fn conditions_schema() -> Value {
    json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::{Condition, Time};

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Spec {
        /// How many.
        #[serde(default)]
        count: u32,
        big: u64,
        small: Option<u8>,
        labels: BTreeMap<String, String>,
        free: Map<String, Value>,
        anything: Value,
        nested: Option<Nested>,
        phase: Phase,
        items: Vec<Nested>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        at: Time,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum Phase {
        /// Documented, so schemars writes a `oneOf` of constants.
        Up,
        /// Down.
        Down,
    }

    #[derive(Serialize, Deserialize, Default, JsonSchema)]
    #[serde(default)]
    struct Status {
        replicas: u32,
        conditions: Vec<Condition>,
    }

    fn schema(crd: &Value, part: &str) -> Value {
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part].clone()
    }

    #[test]
    fn rust_types_become_a_structural_schema() {
        let crd = Definition::of::<Spec, Status>(KindRef::new("a.example/v1", "Thing")).to_crd();
        let spec = schema(&crd, "spec");
        let text = spec.to_string();
        assert!(!text.contains("$ref") && !text.contains("null"), "{text}");
        let p = &spec["properties"];
        assert_eq!(
            p["count"],
            json!({"description": "How many.", "type": "integer", "format": "int32", "minimum": 0, "default": 0})
        );
        assert_eq!(p["big"]["format"], "int64");
        assert_eq!(
            p["small"],
            json!({"type": "integer", "format": "int32", "minimum": 0, "maximum": 255})
        );
        assert_eq!(
            p["labels"],
            json!({"type": "object", "additionalProperties": {"type": "string"}})
        );
        assert_eq!(
            p["free"],
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            p["anything"],
            json!({"x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            p["nested"]["properties"]["at"],
            json!({"type": "string", "format": "date-time"})
        );
        assert_eq!(
            p["phase"],
            json!({"type": "string", "enum": ["Up", "Down"]})
        );
        assert_eq!(p["items"]["items"]["required"], json!(["at"]));
        let mut required: Vec<&str> = spec["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        required.sort_unstable();
        assert_eq!(
            required,
            ["anything", "big", "free", "items", "labels", "phase"]
        );
    }

    #[test]
    fn the_status_has_no_defaults_and_the_host_s_conditions() {
        let crd = Definition::of::<Spec, Status>(KindRef::new("a.example/v1", "Thing")).to_crd();
        let status = schema(&crd, "status");
        assert_eq!(
            status["properties"]["replicas"],
            json!({"type": "integer", "format": "int32", "minimum": 0})
        );
        assert_eq!(status["properties"]["conditions"], conditions_schema());
    }

    #[test]
    fn a_value_status_is_free_form() {
        let crd = Definition::of::<Spec, Value>(KindRef::new("a.example/v1", "Thing")).to_crd();
        assert_eq!(
            schema(&crd, "status"),
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
    }

    #[test]
    fn names_scope_columns_and_subresources_come_from_the_builder() {
        let crd = Definition::of::<Spec, Status>(KindRef::new("a.example/v1", "Policy"))
            .plural("policies")
            .short_name("pol")
            .cluster_scoped()
            .description("A policy.")
            .column(PrinterColumn::condition("Ready", "Ready").description("Ready?"))
            .to_crd();
        assert_eq!(crd["metadata"]["name"], "policies.a.example");
        assert_eq!(
            crd["spec"]["names"],
            json!({"kind": "Policy", "listKind": "PolicyList", "plural": "policies",
                   "singular": "policy", "shortNames": ["pol"]})
        );
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(version["subresources"], json!({"status": {}}));
        assert_eq!(
            version["additionalPrinterColumns"],
            json!([
                {"name": "Ready", "type": "string", "description": "Ready?",
                 "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ])
        );
        assert_eq!(
            version["schema"]["openAPIV3Schema"]["description"],
            "A policy."
        );
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        children: Vec<Tree>,
    }

    #[test]
    #[should_panic(expected = "recursive type")]
    fn a_recursive_type_is_refused() {
        let _ = Definition::of::<Tree, Value>(KindRef::new("a.example/v1", "Tree"));
    }
}
