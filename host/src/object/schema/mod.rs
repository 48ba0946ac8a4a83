//! OpenAPI v3 schemas of CustomResourceDefinition versions, compiled once
//! and then used on every write of the kind: unknown fields are pruned,
//! `default`s applied, and the result validated, collecting every
//! violation with its field path. Owns the schema rules; when they run
//! (create, update, status, patch, apply) is `api`'s business.
//!
//! # Order on a write (as in Kubernetes)
//!
//! 1. **Prune**: members of an object that its schema does not declare are
//!    dropped, unless the node says `x-kubernetes-preserve-unknown-fields`
//!    or allows them with `additionalProperties`. `null` members whose
//!    schema is not `nullable` are dropped too.
//! 2. **Default**: an absent member whose schema has a `default` gets it,
//!    at any depth, when its parent object exists (inside list items and
//!    map values too). Defaults are themselves pruned and defaulted.
//! 3. **Validate**: types, `required`, `enum`, bounds, lengths, `pattern`,
//!    item and property counts and `format` (`int32`, `int64`,
//!    `date-time`); every violation is reported, in the wording of the
//!    Kubernetes API server.
//!
//! At the root, `apiVersion`, `kind` and `metadata` are never pruned or
//! validated by the schema: the host checks metadata itself.
//!
//! [`Schema::unknown_fields`] and its patch variants name, without
//! changing anything, the fields step 1 would drop (for the API's
//! `fieldValidation`).
//!
//! # Simplifications
//!
//! `allOf`, `anyOf`, `oneOf`, `not`, `uniqueItems`, `x-kubernetes-validations`
//! (CEL) and formats other than the three above are accepted in a schema and
//! ignored. `additionalProperties: false` is accepted (Kubernetes refuses it)
//! and behaves like leaving it out.

mod compile;
mod normalize;
mod unknown;
mod validate;

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use super::field::{FieldError, FieldPath};

/// The JSON type a schema node requires.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
///
/// let schema = Schema::compile(&json!({"type": "object"}), &FieldPath::root()).unwrap();
/// assert_eq!(schema.type_(), Some(Type::Object));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// A JSON object.
    Object,
    /// A JSON list.
    Array,
    /// A string.
    String,
    /// A number without a fraction.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Boolean,
}

impl Type {
    /// The OpenAPI name of the type.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
    ///
    /// assert_eq!(Type::Integer.name(), "integer");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        }
    }
}

/// What an object node says about members it does not declare.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::{field::FieldPath, schema::Schema};
/// // A map of strings: every member is checked against `additionalProperties`.
/// let schema = Schema::compile(&json!({"type": "object", "properties": {
///     "data": {"type": "object", "additionalProperties": {"type": "string"}}}}), &FieldPath::root()).unwrap();
/// let mut ok = json!({"data": {"a": "x"}});
/// assert!(schema.admit(&mut ok).is_ok());
/// let mut bad = json!({"data": {"a": 1}});
/// assert!(schema.admit(&mut bad).is_err());
/// ```
#[derive(Debug, Clone, Default)]
pub enum Additional {
    /// Not said: unknown members are pruned.
    #[default]
    Unspecified,
    /// `true` keeps any member, `false` prunes them.
    Allowed(bool),
    /// Every other member is a value of this schema (a map).
    Schema(Box<Schema>),
}

/// One compiled schema node (the root describes the whole object).
///
/// ```
/// use serde_json::json;
/// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
///
/// let schema = Schema::compile(&json!({"type": "object", "properties": {
///     "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}), &FieldPath::root()).unwrap();
/// let replicas = schema.property("spec").and_then(|s| s.property("replicas")).unwrap();
/// assert_eq!(replicas.type_(), Some(Type::Integer));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Schema {
    types: Option<Type>,
    nullable: bool,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded_resource: bool,
    properties: BTreeMap<String, Schema>,
    required: Vec<String>,
    additional: Additional,
    items: Option<Box<Schema>>,
    enumeration: Option<Vec<Value>>,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    pattern: Option<Regex>,
    format: Option<String>,
    default: Option<Value>,
}

/// Members of the root object the schema never touches.
const ROOT_MEMBERS: [&str; 3] = ["apiVersion", "kind", "metadata"];

impl Schema {
    /// Compile an `openAPIV3Schema`, checking that it is a structural
    /// schema with an object at the root. Errors carry paths below `at`
    /// (e.g. `spec.versions[0].schema.openAPIV3Schema`).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
    ///
    /// let errors = Schema::compile(&json!({"type": "string"}), &FieldPath::new("openAPIV3Schema")).unwrap_err();
    /// assert_eq!(errors[0].field.as_str(), "openAPIV3Schema.type");
    /// ```
    pub fn compile(schema: &Value, at: &FieldPath) -> Result<Self, Vec<FieldError>> {
        compile::compile_root(schema, at)
    }

    /// The required type, if any.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
    ///
    /// let schema = Schema::compile(&json!({"type": "object", "properties": {"n": {"type": "number"}}}), &FieldPath::root()).unwrap();
    /// assert_eq!(schema.property("n").unwrap().type_(), Some(Type::Number));
    /// ```
    pub fn type_(&self) -> Option<Type> {
        self.types
    }

    /// The schema of a declared property.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
    ///
    /// let schema = Schema::compile(&json!({"type": "object", "properties": {"spec": {"type": "object"}}}), &FieldPath::root()).unwrap();
    /// assert!(schema.property("spec").is_some());
    /// assert!(schema.property("status").is_none());
    /// ```
    pub fn property(&self, name: &str) -> Option<&Schema> {
        self.properties.get(name)
    }

    /// Prune, default and validate a whole object in place (see the module
    /// docs). On error the object may already be pruned and defaulted.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::Schema};
    /// let schema = Schema::compile(&json!({"type": "object", "properties": {
    ///     "spec": {"type": "object", "required": ["image"], "properties": {
    ///         "replicas": {"type": "integer", "default": 1, "maximum": 5},
    ///         "image": {"type": "string"}}}}}), &FieldPath::root()).unwrap();
    /// let mut obj = json!({"kind": "X", "spec": {"image": "nginx", "junk": true}});
    /// schema.admit(&mut obj).unwrap();
    /// assert_eq!(obj, json!({"kind": "X", "spec": {"image": "nginx", "replicas": 1}}));
    /// let mut bad = json!({"spec": {"replicas": 9}});
    /// let errors = schema.admit(&mut bad).unwrap_err();
    /// let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    /// assert_eq!(text, ["spec.image: Required value",
    ///     "spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 5"]);
    /// ```
    pub fn admit(&self, object: &mut Value) -> Result<(), Vec<FieldError>> {
        normalize::normalize_root(self, object, true);
        let errors = validate::validate_root(self, object);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Prune unknown fields of a whole object without applying defaults
    /// (what server-side apply does to an applied configuration).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
    ///
    /// let schema = Schema::compile(&json!({"type": "object", "properties": {
    ///     "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}}}}}), &FieldPath::root()).unwrap();
    /// let mut applied = json!({"spec": {"junk": true}});
    /// schema.prune(&mut applied);
    /// assert_eq!(applied, json!({"spec": {}}), "pruned, not defaulted");
    /// ```
    pub fn prune(&self, object: &mut Value) {
        normalize::normalize_root(self, object, false);
    }

    /// Validate a value against this node, reporting paths below `at`.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::{Schema, Type}};
    ///
    /// let schema = Schema::compile(&json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}), &FieldPath::root()).unwrap();
    /// let n = schema.property("n").unwrap();
    /// let errors = n.validate(&json!(-1), &FieldPath::new("spec.n"));
    /// assert_eq!(errors[0].field.as_str(), "spec.n");
    /// assert!(n.validate(&json!(1), &FieldPath::new("spec.n")).is_empty());
    /// ```
    pub fn validate(&self, value: &Value, at: &FieldPath) -> Vec<FieldError> {
        let mut errors = Vec::new();
        validate::validate(self, value, at, &mut errors);
        errors
    }
}

#[cfg(test)]
mod tests;
