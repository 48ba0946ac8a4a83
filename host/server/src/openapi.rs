//! OpenAPI documents for clients: `/openapi/v2` as the minimal protobuf
//! document kubectl needs for its client-side validation to pass, and
//! `/openapi/v3` with each group-version's registered schemas, so that
//! kubectl validates on the server (`fieldValidation`) and `kubectl explain`
//! works. The v3 documents are valid OpenAPI 3.0 (every operation of every
//! path, declared path parameters, described responses) so that generic
//! tools (validators, code generators, schemathesis) take them, and carry
//! an `ETag`; the hashed URLs of the index are cached as immutable.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::status::error_response;
use setpoint::Host;
use setpoint::object::KindInfo;

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
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
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
    let doc = group_version_document(&host, &group, &version);
    let hash = content_hash(&doc);
    let etag = format!("\"{hash}\"");
    match query.get("hash") {
        // A URL of an older document: where the current one is, as
        // kube-apiserver answers.
        Some(asked) if *asked != hash => {
            let location = format!("/openapi/v3{}?hash={hash}", prefix(&group, &version));
            return (
                StatusCode::MOVED_PERMANENTLY,
                [(header::LOCATION, location)],
            )
                .into_response();
        }
        _ => {}
    }
    // A hashed URL names one document forever: cache it for good. The
    // plain URL changes with the kinds: revalidate it (by its ETag).
    let cache = if query.contains_key("hash") {
        "public, immutable, max-age=31536000"
    } else {
        "no-cache, private"
    };
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let headers = [
        (header::ETAG, etag),
        (header::CACHE_CONTROL, cache.to_owned()),
    ];
    if not_modified {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (headers, Json(doc)).into_response()
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

fn query(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": kind}})
}

fn path_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string"}})
}

/// A response carrying `schema_ref` as JSON.
fn response(description: &str, schema_ref: &str) -> Value {
    json!({"description": description,
           "content": {"application/json": {"schema": {"$ref": schema_ref}}}})
}

/// The `Status` answered on failure.
fn failure() -> Value {
    json!({"description": "Failure, as a Kubernetes Status",
           "content": {"application/json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Status"}}}})
}

/// An operation with the Kubernetes extensions clients read.
fn operation(kind: &KindInfo, id: String, action: &str, description: &str) -> Map<String, Value> {
    let mut op = Map::new();
    op.insert("operationId".into(), json!(id));
    op.insert("description".into(), json!(description));
    op.insert("x-kubernetes-action".into(), json!(action));
    op.insert(
        "x-kubernetes-group-version-kind".into(),
        json!({"group": kind.group, "version": kind.version, "kind": kind.kind}),
    );
    op
}

/// `op` as a write that sends the whole object (create, replace): the
/// write parameters, the object as its body, the object as its answer.
fn whole_object_write(mut op: Map<String, Value>, schema_ref: &str) -> Map<String, Value> {
    op.insert("parameters".into(), json!(write_parameters()));
    op.insert(
        "requestBody".into(),
        json!({"required": true, "content": {"application/json": {"schema": {"$ref": schema_ref}}}}),
    );
    op.insert(
        "responses".into(),
        json!({"200": response("OK", schema_ref), "201": response("Created", schema_ref), "default": failure()}),
    );
    op
}

fn write_parameters() -> Vec<Value> {
    vec![
        query(
            "dryRun",
            "string",
            "When present (All), nothing is persisted.",
        ),
        query(
            "fieldManager",
            "string",
            "The name of the actor making the change.",
        ),
        query(
            "fieldValidation",
            "string",
            "Ignore, Warn or Strict: what to do with unknown and duplicate fields.",
        ),
    ]
}

/// The PATCH operation of a kind's item path: its `fieldValidation`
/// parameter makes kubectl validate on the server instead of itself, and
/// strategic merge is deliberately absent (custom resources do not take it).
fn patch_operation(kind: &KindInfo, id: String, schema_ref: &str) -> Value {
    let mut op = operation(kind, id, "patch", "Partially update the object.");
    let mut parameters = write_parameters();
    parameters.push(query(
        "force",
        "boolean",
        "Apply: take fields other managers own.",
    ));
    op.insert("parameters".into(), json!(parameters));
    op.insert(
        "requestBody".into(),
        json!({"required": true, "content": {
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}},
        }}),
    );
    op.insert(
        "responses".into(),
        json!({"200": response("OK", schema_ref), "201": response("Created", schema_ref), "default": failure()}),
    );
    Value::Object(op)
}

/// Every path of one kind: the collection (list, create, deletecollection),
/// for a namespaced kind the list across namespaces, the item (read,
/// replace, patch, delete) and, with a status sub-resource, its status.
fn kind_paths(paths: &mut Map<String, Value>, kind: &KindInfo, group: &str, version: &str) {
    let name = schema_name(kind);
    let schema_ref = format!("#/components/schemas/{name}");
    let list_ref = format!("#/components/schemas/{name}List");
    let k = &kind.kind;
    let (collection, scope) = if kind.namespaced {
        (
            format!(
                "{}/namespaces/{{namespace}}/{}",
                prefix(group, version),
                kind.plural
            ),
            "Namespaced",
        )
    } else {
        (format!("{}/{}", prefix(group, version), kind.plural), "")
    };
    let mut scope_parameters = Vec::new();
    if kind.namespaced {
        scope_parameters.push(path_parameter("namespace", "The object's namespace."));
    }
    let [labels, fields] = selector_parameters();
    let list_parameters = json!([
        labels,
        fields,
        query("limit", "integer", "At most this many objects per page."),
        query("continue", "string", "The token of the previous page."),
        query(
            "resourceVersion",
            "string",
            "The revision to list or watch from."
        ),
        query(
            "timeoutSeconds",
            "integer",
            "End a watch after this many seconds."
        ),
        query("watch", "boolean", "Stream changes instead of listing."),
        query(
            "allowWatchBookmarks",
            "boolean",
            "Send BOOKMARK events on a watch."
        ),
    ]);

    let mut list = operation(
        kind,
        format!("list{scope}{k}"),
        "list",
        "List or watch objects.",
    );
    list.insert("parameters".into(), list_parameters.clone());
    list.insert(
        "responses".into(),
        json!({"200": response("OK", &list_ref), "default": failure()}),
    );
    let create = whole_object_write(
        operation(
            kind,
            format!("create{scope}{k}"),
            "post",
            "Create an object.",
        ),
        &schema_ref,
    );
    let mut delete_all = operation(
        kind,
        format!("deletecollection{scope}{k}"),
        "deletecollection",
        "Delete the objects the selectors pick.",
    );
    delete_all.insert(
        "parameters".into(),
        json!([
            labels,
            fields,
            query(
                "propagationPolicy",
                "string",
                "Background, Foreground or Orphan."
            ),
        ]),
    );
    delete_all.insert(
        "responses".into(),
        json!({"200": response("OK", &list_ref), "default": failure()}),
    );
    paths.insert(
        collection.clone(),
        json!({"parameters": scope_parameters, "get": list, "post": create, "delete": delete_all}),
    );
    if kind.namespaced {
        let mut everywhere = operation(
            kind,
            format!("list{k}ForAllNamespaces"),
            "list",
            "List or watch objects in every namespace.",
        );
        everywhere.insert("parameters".into(), list_parameters);
        everywhere.insert(
            "responses".into(),
            json!({"200": response("OK", &list_ref), "default": failure()}),
        );
        paths.insert(
            format!("{}/{}", prefix(group, version), kind.plural),
            json!({"get": everywhere}),
        );
    }

    let mut item_parameters = scope_parameters.clone();
    item_parameters.push(path_parameter("name", "The object's name."));
    let mut read = operation(kind, format!("read{scope}{k}"), "get", "Read an object.");
    read.insert(
        "responses".into(),
        json!({"200": response("OK", &schema_ref), "default": failure()}),
    );
    let replace = whole_object_write(
        operation(
            kind,
            format!("replace{scope}{k}"),
            "put",
            "Replace an object.",
        ),
        &schema_ref,
    );
    let mut delete = operation(
        kind,
        format!("delete{scope}{k}"),
        "delete",
        "Delete an object.",
    );
    delete.insert(
        "parameters".into(),
        json!([query(
            "propagationPolicy",
            "string",
            "Background, Foreground or Orphan."
        )]),
    );
    delete.insert(
        "responses".into(),
        json!({"200": response("OK", &schema_ref), "202": response("Accepted", &schema_ref), "default": failure()}),
    );
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({"parameters": item_parameters, "get": read, "put": replace,
               "patch": patch_operation(kind, format!("patch{scope}{k}"), &schema_ref), "delete": delete}),
    );

    if kind.status_subresource {
        let mut read = operation(
            kind,
            format!("read{scope}{k}Status"),
            "get",
            "Read an object's status.",
        );
        read.insert(
            "responses".into(),
            json!({"200": response("OK", &schema_ref), "default": failure()}),
        );
        let mut replace = operation(
            kind,
            format!("replace{scope}{k}Status"),
            "put",
            "Replace an object's status.",
        );
        replace.insert("parameters".into(), json!(write_parameters()));
        replace.insert(
            "requestBody".into(),
            json!({"required": true, "content": {"application/json": {"schema": {"$ref": schema_ref}}}}),
        );
        replace.insert(
            "responses".into(),
            json!({"200": response("OK", &schema_ref), "default": failure()}),
        );
        paths.insert(
            format!("{collection}/{{name}}/status"),
            json!({"parameters": item_parameters, "get": read, "put": replace,
                   "patch": patch_operation(kind, format!("patch{scope}{k}Status"), &schema_ref)}),
        );
    }
}

/// The list schema of a kind.
/// The label and field selector query parameters of list, watch and
/// delete-collection.
fn selector_parameters() -> [Value; 2] {
    [
        query(
            "labelSelector",
            "string",
            "Only objects whose labels match.",
        ),
        query(
            "fieldSelector",
            "string",
            "Only objects whose fields match.",
        ),
    ]
}

fn list_schema(kind: &KindInfo, schema_ref: &str) -> Value {
    json!({
        "type": "object",
        "required": ["items"],
        "description": format!("A list of {}.", kind.kind),
        "x-kubernetes-group-version-kind": [{"group": kind.group, "version": kind.version, "kind": kind.list_kind}],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "items": {"type": "array", "items": {"$ref": schema_ref}},
        },
    })
}

fn group_version_document(host: &Host, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for kind in host.api().kinds().in_group_version(group, version) {
        let name = schema_name(&kind);
        kind_paths(&mut paths, &kind, group, version);
        schemas.insert(
            format!("{name}List"),
            list_schema(&kind, &format!("#/components/schemas/{name}")),
        );
        schemas.insert(name, kind_schema(&kind));
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
        json!({"type": "object", "description": "The answer of a failed request.",
               "x-kubernetes-preserve-unknown-fields": true,
               "properties": {"kind": {"type": "string"}, "apiVersion": {"type": "string"},
                              "status": {"type": "string"}, "message": {"type": "string"},
                              "reason": {"type": "string"}, "code": {"type": "integer"},
                              "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
    );
    json!({
        "openapi": "3.0.0",
        "info": {"title": "setpoint", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
