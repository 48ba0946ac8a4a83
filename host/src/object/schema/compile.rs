//! Turning an `openAPIV3Schema` document into a [`Schema`] tree, checking
//! what Kubernetes requires of a structural schema on the way (every node
//! has a type, lists have `items`, patterns compile, defaults validate).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::{Additional, Schema, Type};
use crate::object::field::{FieldError, FieldPath};

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

pub(super) fn compile_root(schema: &Value, at: &FieldPath) -> Result<Schema, Vec<FieldError>> {
    let mut errors = Vec::new();
    let root = compile_node(schema, at, &mut errors);
    if schema.is_object() && root.types != Some(Type::Object) {
        errors.push(FieldError::invalid(
            at.child("type"),
            schema
                .get("type")
                .cloned()
                .unwrap_or(Value::String(String::new())),
            "must be object at the root",
        ));
    }
    if errors.is_empty() {
        Ok(root)
    } else {
        Err(errors)
    }
}

fn compile_node(value: &Value, at: &FieldPath, errors: &mut Vec<FieldError>) -> Schema {
    let Some(map) = value.as_object() else {
        errors.push(FieldError::invalid(
            at.clone(),
            value.clone(),
            "must be a schema object",
        ));
        return Schema::default();
    };
    let mut node = Schema {
        nullable: flag(map, "nullable", at, errors),
        int_or_string: flag(map, "x-kubernetes-int-or-string", at, errors),
        preserve_unknown: flag(map, "x-kubernetes-preserve-unknown-fields", at, errors),
        embedded_resource: flag(map, "x-kubernetes-embedded-resource", at, errors),
        ..Schema::default()
    };
    node.types = match map.get("type") {
        None => None,
        Some(Value::String(t)) => match t.as_str() {
            "object" => Some(Type::Object),
            "array" => Some(Type::Array),
            "string" => Some(Type::String),
            "integer" => Some(Type::Integer),
            "number" => Some(Type::Number),
            "boolean" => Some(Type::Boolean),
            _ => {
                let supported: Vec<String> = TYPES.iter().map(|t| (*t).to_owned()).collect();
                errors.push(FieldError::not_supported(
                    at.child("type"),
                    Value::String(t.clone()),
                    &supported,
                ));
                None
            }
        },
        Some(other) => {
            errors.push(FieldError::invalid(
                at.child("type"),
                other.clone(),
                "must be a string",
            ));
            None
        }
    };
    if node.types.is_none()
        && !map.contains_key("type")
        && !node.int_or_string
        && !node.preserve_unknown
    {
        errors.push(FieldError::required(
            at.child("type"),
            "must not be empty for specified fields",
        ));
    }
    compile_object_keywords(map, at, &mut node, errors);
    compile_value_keywords(map, at, &mut node, errors);
    if let Some(default) = map.get("default") {
        let default_at = at.child("default");
        let mut defaulted = default.clone();
        super::normalize::normalize(&node, &mut defaulted, true);
        for err in node.validate(&defaulted, &default_at) {
            errors.push(FieldError::invalid(
                default_at.clone(),
                default.clone(),
                format!("must validate against the schema: {err}"),
            ));
        }
        node.default = Some(default.clone());
    }
    node
}

fn compile_object_keywords(
    map: &Map<String, Value>,
    at: &FieldPath,
    node: &mut Schema,
    errors: &mut Vec<FieldError>,
) {
    if let Some(props) = map.get("properties") {
        match props.as_object() {
            Some(props) => {
                let mut compiled = BTreeMap::new();
                for (name, prop) in props {
                    let prop_at = at.child("properties").key(name);
                    compiled.insert(name.clone(), compile_node(prop, &prop_at, errors));
                }
                node.properties = compiled;
            }
            None => errors.push(FieldError::invalid(
                at.child("properties"),
                props.clone(),
                "must be a map of schemas",
            )),
        }
    }
    if let Some(required) = map.get("required") {
        match required.as_array().and_then(|names| {
            names
                .iter()
                .map(|n| n.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        }) {
            Some(names) => node.required = names,
            None => errors.push(FieldError::invalid(
                at.child("required"),
                required.clone(),
                "must be a list of property names",
            )),
        }
    }
    match map.get("additionalProperties") {
        None => {}
        Some(Value::Bool(allowed)) => node.additional = Additional::Allowed(*allowed),
        Some(schema @ Value::Object(_)) => {
            let schema = compile_node(schema, &at.child("additionalProperties"), errors);
            node.additional = Additional::Schema(Box::new(schema));
        }
        Some(other) => errors.push(FieldError::invalid(
            at.child("additionalProperties"),
            other.clone(),
            "must be a boolean or a schema",
        )),
    }
    if !node.properties.is_empty()
        && matches!(
            node.additional,
            Additional::Schema(_) | Additional::Allowed(true)
        )
    {
        errors.push(FieldError::forbidden(
            at.child("additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    match map.get("items") {
        None => {
            if node.types == Some(Type::Array) {
                errors.push(FieldError::required(at.child("items"), "must be specified"));
            }
        }
        Some(items @ Value::Object(_)) => {
            node.items = Some(Box::new(compile_node(items, &at.child("items"), errors)));
        }
        Some(other) => errors.push(FieldError::forbidden(
            at.child("items"),
            format!("items must be a schema object and not an array: {other}"),
        )),
    }
}

fn compile_value_keywords(
    map: &Map<String, Value>,
    at: &FieldPath,
    node: &mut Schema,
    errors: &mut Vec<FieldError>,
) {
    let number = |key: &str, errors: &mut Vec<FieldError>| -> Option<f64> {
        let value = map.get(key)?;
        let n = value.as_f64();
        if n.is_none() {
            errors.push(FieldError::invalid(
                at.child(key),
                value.clone(),
                "must be a number",
            ));
        }
        n
    };
    node.minimum = number("minimum", errors);
    node.maximum = number("maximum", errors);
    node.multiple_of = number("multipleOf", errors);
    if node.multiple_of.is_some_and(|m| m <= 0.0) {
        errors.push(FieldError::invalid(
            at.child("multipleOf"),
            map["multipleOf"].clone(),
            "must be greater than zero",
        ));
        node.multiple_of = None;
    }
    node.exclusive_minimum = flag(map, "exclusiveMinimum", at, errors);
    node.exclusive_maximum = flag(map, "exclusiveMaximum", at, errors);
    let count = |key: &str, errors: &mut Vec<FieldError>| -> Option<u64> {
        let value = map.get(key)?;
        let n = value.as_u64();
        if n.is_none() {
            errors.push(FieldError::invalid(
                at.child(key),
                value.clone(),
                "must be a non-negative integer",
            ));
        }
        n
    };
    node.min_length = count("minLength", errors);
    node.max_length = count("maxLength", errors);
    node.min_items = count("minItems", errors);
    node.max_items = count("maxItems", errors);
    node.min_properties = count("minProperties", errors);
    node.max_properties = count("maxProperties", errors);
    if let Some(values) = map.get("enum") {
        match values.as_array() {
            Some(list) => node.enumeration = Some(list.clone()),
            None => errors.push(FieldError::invalid(
                at.child("enum"),
                values.clone(),
                "must be a list",
            )),
        }
    }
    if let Some(pattern) = map.get("pattern") {
        match pattern.as_str().map(Regex::new) {
            Some(Ok(re)) => node.pattern = Some(re),
            Some(Err(err)) => errors.push(FieldError::invalid(
                at.child("pattern"),
                pattern.clone(),
                format!("must be a valid regular expression: {err}"),
            )),
            None => errors.push(FieldError::invalid(
                at.child("pattern"),
                pattern.clone(),
                "must be a string",
            )),
        }
    }
    if let Some(format) = map.get("format") {
        match format.as_str() {
            Some(f) => node.format = Some(f.to_owned()),
            None => errors.push(FieldError::invalid(
                at.child("format"),
                format.clone(),
                "must be a string",
            )),
        }
    }
}

fn flag(map: &Map<String, Value>, key: &str, at: &FieldPath, errors: &mut Vec<FieldError>) -> bool {
    match map.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errors.push(FieldError::invalid(
                at.child(key),
                other.clone(),
                "must be a boolean",
            ));
            false
        }
    }
}
