//! Checks every write shares: the object names its kind, has a valid name
//! and namespace for the kind's scope, and carries a parseable resource
//! version. Errors name the field path.

use serde_json::Value;

use super::{Error, Result};
use crate::object::{KindInfo, Object, meta};

/// The namespace to use for `kind`: `default` when a namespaced kind has none,
/// nothing for cluster-scoped kinds.
pub(super) fn namespace_for<'a>(kind: &KindInfo, namespace: Option<&'a str>) -> Option<&'a str> {
    if kind.namespaced {
        Some(namespace.unwrap_or("default"))
    } else {
        None
    }
}

/// Validate a new object and normalise its namespace.
pub(super) fn for_create(kind: &KindInfo, object: &mut Object) -> Result<()> {
    if !object.is_object() {
        return Err(Error::BadRequest(format!(
            "a {} must be a JSON object",
            kind.kind
        )));
    }
    check_kind(kind, object)?;
    let name = meta::name(object);
    if name.is_empty() {
        return Err(Error::invalid(
            &kind.kind,
            "",
            "metadata.name",
            "name is required",
        ));
    }
    check_name(kind, name)?;
    let namespace = meta::namespace(object).map(str::to_owned);
    match (kind.namespaced, namespace) {
        (true, None) => {
            meta::metadata_mut(object).insert("namespace".into(), Value::String("default".into()));
        }
        (true, Some(ns)) => {
            if let Some(msg) = dns_label_problem(&ns) {
                return Err(Error::invalid(
                    &kind.kind,
                    meta::name(object),
                    "metadata.namespace",
                    msg,
                ));
            }
        }
        (false, Some(_)) => {
            meta::metadata_mut(object).remove("namespace");
        }
        (false, None) => {}
    }
    check_metadata_shapes(kind, object)
}

/// Validate a replacement of `current`.
pub(super) fn for_update(kind: &KindInfo, current: &Object, next: &mut Object) -> Result<()> {
    if !next.is_object() {
        return Err(Error::BadRequest(format!(
            "a {} must be a JSON object",
            kind.kind
        )));
    }
    check_kind(kind, next)?;
    let uid = meta::uid(next);
    if !uid.is_empty() && uid != meta::uid(current) {
        return Err(Error::Conflict {
            kind: super::Api::resource(kind),
            name: meta::name(current).to_owned(),
            message: format!(
                "uid {uid} does not match the stored object's {}",
                meta::uid(current)
            ),
        });
    }
    check_metadata_shapes(kind, next)
}

fn check_kind(kind: &KindInfo, object: &Object) -> Result<()> {
    let api_version = meta::api_version(object);
    let object_kind = meta::kind(object);
    if object_kind != kind.kind || api_version != kind.api_version() {
        return Err(Error::BadRequest(format!(
            "object is {api_version}/{object_kind}, expected {}/{}",
            kind.api_version(),
            kind.kind
        )));
    }
    Ok(())
}

fn check_metadata_shapes(kind: &KindInfo, object: &Object) -> Result<()> {
    let m = &object["metadata"];
    let name = meta::name(object);
    for field in ["labels", "annotations"] {
        if let Some(v) = m.get(field)
            && !v.is_null()
        {
            let Some(map) = v.as_object() else {
                return Err(Error::invalid(
                    &kind.kind,
                    name,
                    &format!("metadata.{field}"),
                    "must be a map of strings",
                ));
            };
            if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_string()) {
                return Err(Error::invalid(
                    &kind.kind,
                    name,
                    &format!("metadata.{field}.{k}"),
                    "must be a string",
                ));
            }
        }
    }
    if let Some(f) = m.get("finalizers")
        && !f.is_null()
        && !f.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err(Error::invalid(
            &kind.kind,
            name,
            "metadata.finalizers",
            "must be a list of strings",
        ));
    }
    if let Some(refs) = m.get("ownerReferences")
        && !refs.is_null()
    {
        let Some(refs) = refs.as_array() else {
            return Err(Error::invalid(
                &kind.kind,
                name,
                "metadata.ownerReferences",
                "must be a list",
            ));
        };
        for (i, r) in refs.iter().enumerate() {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if r[field].as_str().is_none_or(str::is_empty) {
                    return Err(Error::invalid(
                        &kind.kind,
                        name,
                        &format!("metadata.ownerReferences[{i}].{field}"),
                        "required",
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_name(kind: &KindInfo, name: &str) -> Result<()> {
    let problem = if name.len() > 253 {
        Some("must be no more than 253 characters".to_owned())
    } else if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        Some(format!(
            "{name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    } else {
        None
    };
    match problem {
        Some(msg) => Err(Error::invalid(&kind.kind, name, "metadata.name", msg)),
        None => Ok(()),
    }
}

fn dns_label_problem(label: &str) -> Option<String> {
    let ok = !label.is_empty()
        && label.len() <= 63
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && label.starts_with(|c: char| c.is_ascii_alphanumeric())
        && label.ends_with(|c: char| c.is_ascii_alphanumeric());
    (!ok).then(|| format!("{label:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"))
}

/// The `metadata.resourceVersion` of a write, as a revision, if present.
pub(super) fn parse_resource_version(kind: &KindInfo, object: &Object) -> Result<Option<i64>> {
    match meta::resource_version(object) {
        None => Ok(None),
        Some(rv) => rv.parse::<i64>().map(Some).map_err(|_| {
            Error::invalid(
                &kind.kind,
                meta::name(object),
                "metadata.resourceVersion",
                format!("{rv:?} is not a valid resource version"),
            )
        }),
    }
}
