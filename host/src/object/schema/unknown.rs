//! Finding, without changing anything, the fields that pruning would drop
//! because no schema node declares them: what `fieldValidation=Strict`
//! refuses and `Warn` reports. Follows exactly the rules of `normalize`
//! (declared properties, `additionalProperties`,
//! `x-kubernetes-preserve-unknown-fields`, embedded resources, the root's
//! own members), so that a field is reported if and only if a write would
//! silently lose it.

use serde_json::Value;

use super::normalize::{keeps_unknown, object_like};
use super::{Additional, ROOT_MEMBERS, Schema};
use crate::object::field::FieldPath;

/// What the schema says about one member of an object.
enum Member<'a> {
    /// Declared (or a value of an `additionalProperties` map): check below.
    Declared(&'a Schema),
    /// Kept as written and never looked into.
    Kept,
    /// Pruned.
    Unknown,
}

fn member<'a>(schema: &'a Schema, name: &str) -> Member<'a> {
    if let Some(property) = schema.properties.get(name) {
        return Member::Declared(property);
    }
    if let Additional::Schema(values) = &schema.additional {
        return Member::Declared(values);
    }
    if keeps_unknown(schema, name) {
        Member::Kept
    } else {
        Member::Unknown
    }
}

impl Schema {
    /// The fields of a whole object that pruning would drop as unknown
    /// (`spec.foo`, `spec.items[1].bar`), in the order of its members. The root's
    /// `apiVersion`, `kind` and `metadata` are the host's and never
    /// reported.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::{field::FieldPath, schema::Schema};
    /// let schema = Schema::compile(&json!({"type": "object", "properties": {
    ///     "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}),
    ///     &FieldPath::root()).unwrap();
    /// let object = json!({"kind": "X", "metadata": {"x": 1}, "spec": {"replicas": 1, "bogus": 2}});
    /// let unknown: Vec<String> = schema.unknown_fields(&object).iter().map(|p| p.to_string()).collect();
    /// assert_eq!(unknown, ["spec.bogus"]);
    /// ```
    pub fn unknown_fields(&self, object: &Value) -> Vec<FieldPath> {
        let mut found = Vec::new();
        walk_root(self, object, false, &mut found);
        found
    }

    /// The fields a JSON merge patch would add that pruning would drop.
    /// A `null` member deletes, so it is never an unknown field.
    pub fn unknown_fields_in_merge_patch(&self, patch: &Value) -> Vec<FieldPath> {
        let mut found = Vec::new();
        walk_root(self, patch, true, &mut found);
        found
    }

    /// The fields that writing `value` at the JSON pointer made of `tokens`
    /// (a JSON patch `add` or `replace`; `None` for `move` and `copy`, whose
    /// value comes from the object) would add and pruning would drop: the
    /// first undeclared step of the path itself, or else the unknown
    /// fields inside `value`.
    pub fn unknown_fields_at(&self, tokens: &[String], value: Option<&Value>) -> Vec<FieldPath> {
        let mut found = Vec::new();
        let Some((first, _)) = tokens.split_first() else {
            if let Some(value) = value {
                walk_root(self, value, false, &mut found);
            }
            return found;
        };
        if ROOT_MEMBERS.contains(&first.as_str()) {
            return found;
        }
        let mut schema = self;
        let mut at = FieldPath::root();
        for token in tokens {
            let index = token == "-" || token.parse::<usize>().is_ok();
            match &schema.items {
                Some(items) if index => {
                    at = match token.parse::<usize>() {
                        Ok(i) => at.index(i),
                        Err(_) => at.key(token),
                    };
                    schema = items;
                    continue;
                }
                _ => {}
            }
            if !object_like(schema) {
                // The patch fails, or writes into a value kept as it is.
                return found;
            }
            match member(schema, token) {
                Member::Declared(next) => {
                    at = at.child(token);
                    schema = next;
                }
                Member::Kept => return found,
                Member::Unknown => {
                    found.push(at.child(token));
                    return found;
                }
            }
        }
        if let Some(value) = value {
            walk(schema, value, &at, false, &mut found);
        }
        found
    }
}

fn walk_root(schema: &Schema, object: &Value, merge_patch: bool, found: &mut Vec<FieldPath>) {
    let Some(map) = object.as_object() else {
        return;
    };
    for (name, value) in map {
        if ROOT_MEMBERS.contains(&name.as_str()) {
            continue;
        }
        visit_member(schema, name, value, &FieldPath::root(), merge_patch, found);
    }
}

fn visit_member(
    schema: &Schema,
    name: &str,
    value: &Value,
    at: &FieldPath,
    merge_patch: bool,
    found: &mut Vec<FieldPath>,
) {
    if merge_patch && value.is_null() {
        return;
    }
    match member(schema, name) {
        Member::Declared(next) => walk(next, value, &at.child(name), merge_patch, found),
        Member::Kept => {}
        Member::Unknown => found.push(at.child(name)),
    }
}

/// Walk `value` as an instance of `schema`, where `normalize` would.
fn walk(
    schema: &Schema,
    value: &Value,
    at: &FieldPath,
    merge_patch: bool,
    found: &mut Vec<FieldPath>,
) {
    match value {
        Value::Object(map) if object_like(schema) => {
            for (name, member) in map {
                visit_member(schema, name, member, at, merge_patch, found);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                // A merge patch replaces lists whole: their items are
                // plain values, so `null` inside them is not a deletion.
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &at.index(i), false, found);
                }
            }
        }
        _ => {}
    }
}
