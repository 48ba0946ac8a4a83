//! Validation of a (pruned, defaulted) value against a [`Schema`]: every
//! violation is collected with its field path, worded as the Kubernetes
//! API server words it (`spec.replicas in body must be of type integer`).

use serde_json::{Map, Value};

use super::{Additional, ROOT_MEMBERS, Schema, Type};
use crate::object::field::{FieldError, FieldPath, render_value};
use crate::object::patch::json_equal;

/// Validate a whole object, skipping `apiVersion`, `kind` and `metadata`.
pub(super) fn validate_root(schema: &Schema, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match object.as_object() {
        Some(map) => {
            let mut rest = map.clone();
            for member in ROOT_MEMBERS {
                rest.remove(member);
            }
            validate(
                schema,
                &Value::Object(rest),
                &FieldPath::root(),
                &mut errors,
            );
        }
        None => validate(schema, object, &FieldPath::root(), &mut errors),
    }
    errors
}

/// Validate `value` as an instance of `schema` at `at`.
pub(super) fn validate(
    schema: &Schema,
    value: &Value,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if value.is_null() && schema.nullable {
        return;
    }
    if !type_matches(schema, value, at, errors) {
        return;
    }
    if let Some(allowed) = &schema.enumeration
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        let supported: Vec<String> = allowed
            .iter()
            .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_owned))
            .collect();
        errors.push(FieldError::not_supported(
            at.clone(),
            value.clone(),
            &supported,
        ));
    }
    match value {
        Value::String(s) => validate_string(schema, s, value, at, errors),
        Value::Number(_) => validate_number(schema, value, at, errors),
        Value::Array(items) => validate_array(schema, items, value, at, errors),
        Value::Object(map) => validate_object(schema, map, value, at, errors),
        Value::Bool(_) | Value::Null => {}
    }
}

/// The type name Kubernetes reports for a JSON value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(
    schema: &Schema,
    value: &Value,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> bool {
    let actual = type_name(value);
    let (ok, expected) = if schema.int_or_string {
        (matches!(actual, "integer" | "string"), "integer,string")
    } else if let Some(t) = schema.types {
        let ok = match t {
            Type::Number => matches!(actual, "integer" | "number"),
            other => other.name() == actual,
        };
        (ok, t.name())
    } else {
        (true, "")
    };
    if !ok {
        errors.push(FieldError::type_invalid(
            at.clone(),
            Value::String(actual.to_owned()),
            format!("{at} in body must be of type {expected}: {actual:?}"),
        ));
    }
    ok
}

fn validate_string(
    schema: &Schema,
    s: &str,
    value: &Value,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    let chars = s.chars().count() as u64;
    if let Some(min) = schema.min_length
        && chars < min
    {
        errors.push(FieldError::invalid(
            at.clone(),
            value.clone(),
            format!("{at} in body should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.max_length
        && chars > max
    {
        errors.push(FieldError::too_long(at.clone(), max));
    }
    if let Some(pattern) = &schema.pattern
        && !pattern.is_match(s)
    {
        errors.push(FieldError::invalid(
            at.clone(),
            value.clone(),
            format!("{at} in body should match '{}'", pattern.as_str()),
        ));
    }
    if schema.format.as_deref() == Some("date-time")
        && chrono::DateTime::parse_from_rfc3339(s).is_err()
    {
        errors.push(FieldError::invalid(
            at.clone(),
            value.clone(),
            format!("{at} in body must be of type date-time: {s:?}"),
        ));
    }
}

fn validate_number(schema: &Schema, value: &Value, at: &FieldPath, errors: &mut Vec<FieldError>) {
    let Some(n) = value.as_f64() else { return };
    let mut invalid = |detail: String| {
        errors.push(FieldError::invalid(at.clone(), value.clone(), detail));
    };
    if let Some(min) = schema.minimum {
        if schema.exclusive_minimum && n <= min {
            invalid(format!(
                "{at} in body should be greater than {}",
                number(min)
            ));
        } else if n < min {
            invalid(format!(
                "{at} in body should be greater than or equal to {}",
                number(min)
            ));
        }
    }
    if let Some(max) = schema.maximum {
        if schema.exclusive_maximum && n >= max {
            invalid(format!("{at} in body should be less than {}", number(max)));
        } else if n > max {
            invalid(format!(
                "{at} in body should be less than or equal to {}",
                number(max)
            ));
        }
    }
    if let Some(factor) = schema.multiple_of {
        let quotient = n / factor;
        if (quotient - quotient.round()).abs() > 1e-9 {
            invalid(format!(
                "{at} in body should be a multiple of {}",
                number(factor)
            ));
        }
    }
    let out_of_range = match schema.format.as_deref() {
        Some("int32") => Some(value.as_i64().is_none_or(|i| i32::try_from(i).is_err())),
        Some("int64") => Some(value.as_i64().is_none()),
        _ => None,
    };
    if out_of_range == Some(true) && schema.types == Some(Type::Integer) {
        let format = schema.format.as_deref().unwrap_or_default();
        errors.push(FieldError::type_invalid(
            at.clone(),
            value.clone(),
            format!("{at} in body must be of type {format}: \"{value}\""),
        ));
    }
}

fn validate_array(
    schema: &Schema,
    items: &[Value],
    value: &Value,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if let Some(min) = schema.min_items
        && (items.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            at.clone(),
            value.clone(),
            format!("{at} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = schema.max_items
        && items.len() as u64 > max
    {
        errors.push(FieldError::too_many(at.clone(), items.len(), max));
    }
    if let Some(item_schema) = &schema.items {
        for (i, item) in items.iter().enumerate() {
            validate(item_schema, item, &at.index(i), errors);
        }
    }
}

fn validate_object(
    schema: &Schema,
    map: &Map<String, Value>,
    value: &Value,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    for name in &schema.required {
        if !map.contains_key(name) {
            errors.push(FieldError::required(at.child(name), ""));
        }
    }
    if let Some(min) = schema.min_properties
        && (map.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            at.clone(),
            value.clone(),
            format!("{at} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = schema.max_properties
        && map.len() as u64 > max
    {
        errors.push(FieldError::too_many(at.clone(), map.len(), max));
    }
    for (name, member) in map {
        let member_at = at.child(name);
        if let Some(prop) = schema.properties.get(name) {
            validate(prop, member, &member_at, errors);
            continue;
        }
        match &schema.additional {
            Additional::Schema(values) => validate(values, member, &member_at, errors),
            Additional::Allowed(false) => errors.push(FieldError::invalid(
                member_at.clone(),
                member.clone(),
                format!("{member_at} in body is a forbidden property"),
            )),
            Additional::Allowed(true) | Additional::Unspecified => {}
        }
    }
}

/// A bound as Kubernetes prints it: `5`, not `5.0`.
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        render_value(&Value::from(n))
    }
}
