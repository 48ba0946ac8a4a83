//! OpenAPI documents for clients: `/openapi/v2` as the minimal protobuf
//! document kubectl needs for its client-side validation to pass, and
//! `/openapi/v3` with each group-version's registered schemas, so that
//! kubectl validates on the server (`fieldValidation`) and `kubectl explain`
//! works.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::status::error_response;
use crate::Host;
use crate::object::KindInfo;

/// The gnostic protobuf `Document{swagger: "2.0"}`: every kubectl from 1.20
/// on accepts it, and finding no schemas in it, validates nothing itself.
const MINIMAL_V2: &[u8] = &[0x0A, 0x03, b'2', b'.', b'0'];

/// `GET /openapi/v2`, always as protobuf: the content type is the dotted
/// form (`…spec.v2.v1.0+protobuf`) because Go's MIME parser rejects the `@`
/// form kubectl sends in `Accept`.
pub(super) async fn v2() -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
        )],
        MINIMAL_V2,
    )
        .into_response()
}

/// `GET /openapi/v3`: one entry per served group-version, each URL carrying
/// a hash of its document so that clients' HTTP caches see every change.
pub(super) async fn v3_index(State(host): State<Arc<Host>>) -> Json<Value> {
    let mut paths = Map::new();
    for (group, version) in group_versions(&host) {
        let doc = group_version_document(&host, &group, &version);
        let prefix = prefix(&group, &version);
        paths.insert(
            prefix.trim_start_matches('/').to_owned(),
            json!({"serverRelativeURL": format!("/openapi/v3{prefix}?hash={}", content_hash(&doc))}),
        );
    }
    Json(json!({"paths": paths}))
}

/// `GET /openapi/v3/apis/{group}/{version}` (and `/openapi/v3/api/v1`).
pub(super) async fn v3_group_version(
    State(host): State<Arc<Host>>,
    Path(rest): Path<String>,
) -> Response {
    let segments: Vec<&str> = rest.split('/').collect();
    let (group, version) = match segments.as_slice() {
        ["apis", group, version] => ((*group).to_owned(), (*version).to_owned()),
        ["api", version] => (String::new(), (*version).to_owned()),
        _ => return not_found(&rest),
    };
    if !group_versions(&host).contains(&(group.clone(), version.clone())) {
        return not_found(&rest);
    }
    Json(group_version_document(&host, &group, &version)).into_response()
}

fn not_found(path: &str) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("the server could not find the requested resource: openapi/v3/{path}"),
    )
}

fn group_versions(host: &Host) -> BTreeSet<(String, String)> {
    host.api()
        .kinds()
        .all()
        .into_iter()
        .map(|k| (k.group.clone(), k.version.clone()))
        .collect()
}

fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

fn content_hash(doc: &Value) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    doc.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// The schema name Kubernetes uses: the group reversed, then version and
/// kind (`com.example.v1.Widget`; `io.k8s.api.core.v1.Event` for core).
fn schema_name(kind: &KindInfo) -> String {
    let group = if kind.group.is_empty() {
        "io.k8s.api.core".to_owned()
    } else {
        kind.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{}.{}", kind.version, kind.kind)
}

/// A kind's schema: its registered one (or a free-form object), with
/// `apiVersion`, `kind` and `metadata` and its group-version-kind.
fn kind_schema(kind: &KindInfo) -> Value {
    let mut schema =
        kind.schema.clone().filter(Value::is_object).unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
    let gvk = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
    schema["x-kubernetes-group-version-kind"] = json!([gvk]);
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    let properties = &mut schema["properties"];
    properties["apiVersion"] = json!({
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    });
    properties["kind"] = json!({
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents.",
    });
    properties["metadata"] = json!({
        "type": "object",
        "description": "Standard object's metadata.",
        "x-kubernetes-preserve-unknown-fields": true,
    });
    schema
}

/// The PATCH operation of a kind's item path: its `fieldValidation`
/// parameter makes kubectl validate on the server instead of itself, and
/// strategic merge is deliberately absent (custom resources do not take it).
fn patch_operation(kind: &KindInfo, schema_ref: &str) -> Value {
    let query =
        |name: &str, kind: &str| json!({"name": name, "in": "query", "schema": {"type": kind}});
    json!({
        "operationId": format!("patch{}", kind.kind),
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "parameters": [
            query("dryRun", "string"),
            query("fieldManager", "string"),
            query("fieldValidation", "string"),
            query("force", "boolean"),
        ],
        "requestBody": {"required": true, "content": {
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}},
        }},
        "responses": {"200": {"content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
    })
}

fn group_version_document(host: &Host, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let mut kinds: Vec<Arc<KindInfo>> = host
        .api()
        .kinds()
        .all()
        .into_iter()
        .filter(|k| k.group == group && k.version == version)
        .collect();
    kinds.sort_by(|a, b| a.plural.cmp(&b.plural));
    for kind in kinds {
        let name = schema_name(&kind);
        let schema_ref = format!("#/components/schemas/{name}");
        let item = if kind.namespaced {
            format!(
                "{}/namespaces/{{namespace}}/{}/{{name}}",
                prefix(group, version),
                kind.plural
            )
        } else {
            format!("{}/{}/{{name}}", prefix(group, version), kind.plural)
        };
        paths.insert(item, json!({"patch": patch_operation(&kind, &schema_ref)}));
        schemas.insert(name, kind_schema(&kind));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "setpoint", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
