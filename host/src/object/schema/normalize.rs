//! Structural pruning and defaulting: the two steps that change an object
//! before it is validated. Never reports errors; validation does.

use serde_json::{Map, Value};

use super::{Additional, ROOT_MEMBERS, Schema, Type};

/// Prune (and, with `defaults`, default) a whole object. The root members
/// `apiVersion`, `kind` and `metadata` are left alone.
pub(super) fn normalize_root(schema: &Schema, object: &mut Value, defaults: bool) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let kept: Vec<(String, Value)> = ROOT_MEMBERS
        .iter()
        .filter_map(|k| map.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect();
    normalize(schema, object, defaults);
    if let Some(map) = object.as_object_mut() {
        map.extend(kept);
    }
}

/// Prune and default `value` as an instance of `schema`.
pub(super) fn normalize(schema: &Schema, value: &mut Value, defaults: bool) {
    match value {
        Value::Object(map) if object_like(schema) => normalize_object(schema, map, defaults),
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for item in items {
                    normalize(item_schema, item, defaults);
                }
            }
        }
        _ => {}
    }
}

pub(super) fn object_like(schema: &Schema) -> bool {
    matches!(schema.types, Some(Type::Object) | None)
}

fn normalize_object(schema: &Schema, map: &mut Map<String, Value>, defaults: bool) {
    map.retain(|name, member| match schema.properties.get(name) {
        Some(prop) => !member.is_null() || prop.nullable,
        None => keeps_unknown(schema, name),
    });
    if defaults {
        for (name, prop) in &schema.properties {
            if let Some(default) = &prop.default
                && !map.contains_key(name)
            {
                map.insert(name.clone(), default.clone());
            }
        }
    }
    for (name, member) in map.iter_mut() {
        if let Some(prop) = schema.properties.get(name) {
            normalize(prop, member, defaults);
        } else if let Additional::Schema(values) = &schema.additional {
            normalize(values, member, defaults);
        }
    }
}

pub(super) fn keeps_unknown(schema: &Schema, name: &str) -> bool {
    schema.preserve_unknown
        || matches!(
            schema.additional,
            Additional::Allowed(true) | Additional::Schema(_)
        )
        || (schema.embedded_resource && ROOT_MEMBERS.contains(&name))
}
