//! The rules a `CustomResourceDefinition` object must follow before it can
//! register a kind: group, names, scope, versions (exactly one stored) and
//! a structural `openAPIV3Schema` per version. Every problem is reported
//! with its field path. Reading the registered kind out of a valid
//! definition is `kinds::kind_from_crd`.

use std::collections::HashSet;

use serde_json::Value;

use crate::object::field::{FieldError, FieldPath};
use crate::object::schema::Schema;

/// Every problem with a definition, in document order.
pub(super) fn check(crd: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec_at = FieldPath::new("spec");
    let spec = &crd["spec"];
    if !spec.is_object() {
        errors.push(FieldError::required(spec_at, ""));
        return errors;
    }
    let group = required_str(spec, "group", &spec_at, &mut errors);
    if let Some(group) = group
        && (!group.contains('.') || subdomain_problem(group).is_some())
    {
        errors.push(FieldError::invalid(
            spec_at.child("group"),
            Value::String(group.to_owned()),
            "should be a domain with at least one dot",
        ));
    }
    if let Some(group) = group {
        check_group_is_not_reserved(crd, group, &spec_at, &mut errors);
    }
    let plural = check_names(spec, &spec_at, &mut errors);
    if let (Some(group), Some(plural)) = (group, plural) {
        let name = crd["metadata"]["name"].as_str().unwrap_or("");
        if name != format!("{plural}.{group}") {
            errors.push(FieldError::invalid(
                FieldPath::new("metadata.name"),
                Value::String(name.to_owned()),
                format!("must be spec.names.plural+\".\"+spec.group: {plural}.{group}"),
            ));
        }
    }
    if let Some(scope) = spec.get("scope")
        && !matches!(scope.as_str(), Some("Namespaced" | "Cluster"))
    {
        errors.push(FieldError::not_supported(
            spec_at.child("scope"),
            scope.clone(),
            &["Cluster".into(), "Namespaced".into()],
        ));
    }
    check_versions(spec, &spec_at, &mut errors);
    errors
}

/// API groups a definition can never claim: the host's own built-in API
/// (`apiextensions.k8s.io` serves the definitions themselves) and the
/// groups of Kubernetes' built-in APIs, which clients expect to mean what
/// Kubernetes means by them.
const RESERVED_GROUPS: [&str; 17] = [
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "admissionregistration.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

/// The annotation Kubernetes requires on definitions in its protected
/// groups (`k8s.io`, `kubernetes.io` and their subdomains).
const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// Refuses groups the host or Kubernetes serve built in, always, and the
/// rest of Kubernetes' protected groups without the approval annotation,
/// in the API server's words.
fn check_group_is_not_reserved(
    crd: &Value,
    group: &str,
    spec_at: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if RESERVED_GROUPS.contains(&group) {
        errors.push(FieldError::invalid(
            spec_at.child("group"),
            Value::String(group.to_owned()),
            "is a built-in API group; a CustomResourceDefinition cannot serve it",
        ));
        return;
    }
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|domain| group == *domain || group.ends_with(&format!(".{domain}")));
    let approved = crd["metadata"]["annotations"][API_APPROVED_ANNOTATION]
        .as_str()
        .is_some_and(|v| !v.is_empty());
    if protected && !approved {
        errors.push(FieldError::required(
            FieldPath::new("metadata.annotations").key(API_APPROVED_ANNOTATION),
            format!(
                "protected groups must have approval annotation {API_APPROVED_ANNOTATION:?}, see https://github.com/kubernetes/enhancements/pull/1111"
            ),
        ));
    }
}

/// Problems with changing a stored definition into `next`: the scope of a
/// kind cannot change under its objects.
pub(super) fn check_update(current: &Value, next: &Value) -> Vec<FieldError> {
    let scope = |crd: &Value| {
        crd["spec"]["scope"]
            .as_str()
            .unwrap_or("Namespaced")
            .to_owned()
    };
    if scope(current) == scope(next) {
        return Vec::new();
    }
    vec![FieldError::invalid(
        FieldPath::new("spec.scope"),
        Value::String(scope(next)),
        "field is immutable",
    )]
}

fn check_names<'a>(
    spec: &'a Value,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Option<&'a str> {
    let names_at = at.child("names");
    let names = &spec["names"];
    if !names.is_object() {
        errors.push(FieldError::required(names_at, ""));
        return None;
    }
    required_str(names, "kind", &names_at, errors);
    let plural = required_str(names, "plural", &names_at, errors);
    for (field, value) in [("plural", plural), ("singular", names["singular"].as_str())] {
        if let Some(value) = value
            && let Some(problem) = label_problem(value)
        {
            errors.push(FieldError::invalid(
                names_at.child(field),
                Value::String(value.to_owned()),
                problem,
            ));
        }
    }
    if let Some(short) = names.get("shortNames")
        && !short
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string))
    {
        errors.push(FieldError::invalid(
            names_at.child("shortNames"),
            short.clone(),
            "must be a list of strings",
        ));
    }
    plural
}

fn check_versions(spec: &Value, at: &FieldPath, errors: &mut Vec<FieldError>) {
    let versions_at = at.child("versions");
    let Some(versions) = spec["versions"].as_array().filter(|v| !v.is_empty()) else {
        errors.push(FieldError::required(
            versions_at,
            "must have at least one version",
        ));
        return;
    };
    let mut seen = HashSet::new();
    let mut stored = 0;
    for (i, version) in versions.iter().enumerate() {
        let at = versions_at.index(i);
        if let Some(name) = required_str(version, "name", &at, errors) {
            if let Some(problem) = label_problem(name) {
                errors.push(FieldError::invalid(
                    at.child("name"),
                    Value::String(name.to_owned()),
                    problem,
                ));
            }
            if !seen.insert(name) {
                errors.push(FieldError {
                    error_type: crate::object::field::ErrorType::Duplicate,
                    field: at.child("name"),
                    value: Some(Value::String(name.to_owned())),
                    detail: String::new(),
                });
            }
        }
        for flag in ["served", "storage"] {
            if let Some(v) = version.get(flag)
                && !v.is_boolean()
            {
                errors.push(FieldError::invalid(
                    at.child(flag),
                    v.clone(),
                    "must be a boolean",
                ));
            }
        }
        if version["storage"].as_bool() == Some(true) {
            stored += 1;
        }
        if let Some(status) = version["subresources"].get("status")
            && !status.is_object()
        {
            errors.push(FieldError::invalid(
                at.child("subresources").child("status"),
                status.clone(),
                "must be an object",
            ));
        }
        let schema_at = at.child("schema").child("openAPIV3Schema");
        match version["schema"].get("openAPIV3Schema") {
            None | Some(Value::Null) => {
                errors.push(FieldError::required(schema_at, "schemas are required"));
            }
            Some(schema) => {
                if let Err(schema_errors) = Schema::compile(schema, &schema_at) {
                    errors.extend(schema_errors);
                }
            }
        }
    }
    if stored != 1 {
        errors.push(FieldError::invalid(
            versions_at,
            Value::from(stored),
            "must have exactly one version marked as storage version",
        ));
    }
}

fn required_str<'a>(
    parent: &'a Value,
    field: &str,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Option<&'a str> {
    match parent.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        None | Some(Value::Null) => {
            errors.push(FieldError::required(at.child(field), ""));
            None
        }
        Some(Value::String(_)) => {
            errors.push(FieldError::required(at.child(field), ""));
            None
        }
        Some(other) => {
            errors.push(FieldError::invalid(
                at.child(field),
                other.clone(),
                "must be a string",
            ));
            None
        }
    }
}

/// Why `value` is not a lowercase RFC 1123 label, if it is not.
fn label_problem(value: &str) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    (!ok).then(|| {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".to_owned()
    })
}

fn subdomain_problem(value: &str) -> Option<String> {
    if value.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    value.split('.').find_map(label_problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> Value {
        json!({"metadata": {"name": "widgets.example.dev"}, "spec": {
            "group": "example.dev", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    fn fields(crd: &Value) -> Vec<String> {
        check(crd).iter().map(|e| e.field.to_string()).collect()
    }

    #[test]
    fn a_complete_definition_has_no_problems() {
        assert!(check(&valid()).is_empty());
    }

    #[test]
    fn every_missing_or_malformed_part_is_reported_at_once() {
        let crd = json!({"metadata": {"name": "x"}, "spec": {
            "group": "nodot", "scope": "Everywhere",
            "names": {"kind": "", "plural": "Widgets"},
            "versions": [
                {"name": "v1", "storage": true},
                {"name": "v1", "storage": true, "schema": {"openAPIV3Schema": {"type": "string"}}}]}});
        assert_eq!(
            fields(&crd),
            [
                "spec.group",
                "spec.names.kind",
                "spec.names.plural",
                "metadata.name",
                "spec.scope",
                "spec.versions[0].schema.openAPIV3Schema",
                "spec.versions[1].name",
                "spec.versions[1].schema.openAPIV3Schema.type",
                "spec.versions",
            ]
        );
        let messages: Vec<String> = check(&crd).iter().map(ToString::to_string).collect();
        assert!(
            messages.contains(
                &"spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"
                    .to_owned()
            )
        );
        assert!(messages.contains(&"spec.versions: Invalid value: 2: must have exactly one version marked as storage version".to_owned()));
    }

    #[test]
    fn a_definition_without_spec_or_versions_says_so() {
        assert_eq!(fields(&json!({"metadata": {"name": "a"}})), ["spec"]);
        let mut crd = valid();
        crd["spec"]["versions"] = json!([]);
        assert_eq!(fields(&crd), ["spec.versions"]);
    }

    #[test]
    fn the_scope_of_a_stored_definition_is_immutable() {
        let mut next = valid();
        assert!(check_update(&valid(), &next).is_empty());
        next["spec"]["scope"] = json!("Cluster");
        assert_eq!(
            check_update(&valid(), &next)[0].to_string(),
            "spec.scope: Invalid value: \"Cluster\": field is immutable"
        );
    }
}
