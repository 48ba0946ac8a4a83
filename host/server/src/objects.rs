//! Collection and item endpoints of every registered kind: get, list,
//! create, update, merge patch, delete, and the `status` sub-resource.
//! Every write's fields are reviewed first (`fieldValidation`, see
//! [`super::fields`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::conn::Connection;
use super::fields::{self, FieldValidation, Format, Write};
use super::list;
use super::status::{ApiError, error_response};
use super::table;
use setpoint::Host;
use setpoint::api::{Api, Error, ListOptions};
use setpoint::object::patch::JsonPatch;
use setpoint::object::{KindInfo, meta};

/// What a path names.
struct Target {
    kind: Arc<KindInfo>,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

pub(super) async fn core(
    State(host): State<Arc<Host>>,
    method: Method,
    Path(rest): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    connection: Option<axum::Extension<Connection>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Incoming {
        query,
        headers,
        body,
        connection: connection.map(|c| c.0),
    };
    handle(host, method, "", "v1", &rest, request).await
}

pub(super) async fn grouped(
    State(host): State<Arc<Host>>,
    method: Method,
    Path((group, version, rest)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    connection: Option<axum::Extension<Connection>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Incoming {
        query,
        headers,
        body,
        connection: connection.map(|c| c.0),
    };
    handle(host, method, &group, &version, &rest, request).await
}

/// What a request brought besides its method and path.
struct Incoming {
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
    /// The connection it came on (absent when the router is served by
    /// something other than [`super::conn::serve`]).
    connection: Option<Connection>,
}

fn resolve(host: &Host, group: &str, version: &str, rest: &str) -> Result<Target, Box<Response>> {
    // The path arrives percent-decoded: a name `%2F` is an empty segment
    // here, and skipping it would turn a GET or DELETE of one object into
    // one of the whole collection. One trailing slash is allowed.
    let trimmed = rest.strip_prefix('/').unwrap_or(rest);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    let segments: Vec<&str> = trimmed.split('/').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(not_found(&format!(
            "the server could not find the requested resource: {rest:?} (a path segment is empty: an object's name cannot be empty or contain \"/\")"
        )));
    }
    let (namespace, rest) = match segments.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        other => (None, other),
    };
    let (plural, name, status) = match rest {
        [plural] => (*plural, None, false),
        [plural, name] => (*plural, Some((*name).to_owned()), false),
        [plural, name, "status"] => (*plural, Some((*name).to_owned()), true),
        _ => {
            return Err(not_found(&format!(
                "the server could not find the requested resource: {rest:?}"
            )));
        }
    };
    let kind = host
        .api()
        .kinds()
        .by_plural(group, plural)
        .filter(|k| k.version == version)
        .ok_or_else(|| {
            let gv = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            not_found(&format!(
                "the server doesn't have a resource type {plural:?} in {gv}"
            ))
        })?;
    if namespace.is_some() && !kind.namespaced {
        return Err(not_found(&format!(
            "{} is cluster-scoped and has no namespaced path",
            kind.plural
        )));
    }
    if status && !kind.status_subresource {
        return Err(not_found(&format!(
            "{} has no status sub-resource",
            kind.plural
        )));
    }
    Ok(Target {
        kind,
        namespace,
        name,
        status,
    })
}

fn not_found(message: &str) -> Box<Response> {
    Box::new(error_response(StatusCode::NOT_FOUND, "NotFound", message))
}

fn parse_body(body: &Bytes) -> Result<Value, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("request body is not valid JSON: {e}"),
        ))
    })
}

/// A create or replace sent as Kubernetes protobuf (typed clients such as
/// `kubectl create secret` do) becomes its JSON; any other body is kept.
fn protobuf_as_json(
    method: &Method,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Bytes, Box<Response>> {
    let protobuf = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(super::protobuf::is_protobuf);
    if !protobuf || !matches!(*method, Method::POST | Method::PUT) {
        return Ok(body);
    }
    match super::protobuf::decode(&body) {
        Ok(object) => Ok(Bytes::from(object.to_string())),
        Err(err @ super::protobuf::Error::Unsupported(_)) => Err(Box::new(error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &err.to_string(),
        ))),
        Err(err) => Err(Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &err.to_string(),
        ))),
    }
}

async fn handle(
    host: Arc<Host>,
    method: Method,
    group: &str,
    version: &str,
    rest: &str,
    request: Incoming,
) -> Response {
    let Incoming {
        query,
        headers,
        body,
        connection,
    } = request;
    let target = match resolve(&host, group, version, rest) {
        Ok(t) => t,
        Err(response) => return *response,
    };
    let body = match protobuf_as_json(&method, &headers, body) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let validation = if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
        match FieldValidation::from_query(&query) {
            Ok(v) => v,
            Err(response) => return *response,
        }
    } else {
        FieldValidation::Ignore
    };
    // `?dryRun=All`: the write runs its whole path over an API that checks
    // and answers but stores nothing (a delete may also ask in its body).
    let api = match (&method, super::options::dry_run(&query)) {
        (&Method::POST | &Method::PUT | &Method::PATCH, Ok(dry_run)) => writer(&host, dry_run),
        (&Method::POST | &Method::PUT | &Method::PATCH, Err(err)) => {
            return ApiError(err).into_response();
        }
        _ => writer(&host, false),
    };
    let review = |write: Write<'_>, format: Format| {
        fields::review(validation, host.api(), &target.kind, write, &body, format)
    };
    let mut warnings = Vec::new();
    let result = match (&method, &target.name) {
        (&Method::GET, None) if super::watch::is_watch(&query) => {
            return super::watch::watch(
                &host,
                target.kind.clone(),
                target.namespace.clone(),
                &query,
                table::requested(&headers, &query),
                connection,
            )
            .await;
        }
        (&Method::GET, None) if table::requested(&headers, &query).is_none() => {
            // Written from the stored bytes, not decoded and encoded again.
            return match list::options(target.namespace.clone(), &query) {
                Ok(options) => list::streamed(&host, &target.kind, &options).await,
                Err(err) => ApiError(err).into_response(),
            };
        }
        (&Method::GET, None) if list::table_streams(&query) => {
            let include =
                table::requested(&headers, &query).unwrap_or(table::IncludeObject::Metadata);
            return match list::options(target.namespace.clone(), &query) {
                Ok(options) => list::streamed_table(&host, &target.kind, options, include).await,
                Err(err) => ApiError(err).into_response(),
            };
        }
        (&Method::GET, None) => {
            list::values(
                &host,
                &target.kind,
                target.namespace.clone(),
                &query,
                &headers,
            )
            .await
        }
        (&Method::GET, Some(name)) => host
            .api()
            .get(&target.kind, target.namespace.as_deref(), name)
            .await
            .map(|o| match table::requested(&headers, &query) {
                Some(include) => (
                    StatusCode::OK,
                    table::table(
                        &target.kind,
                        std::slice::from_ref(&o),
                        serde_json::json!({"resourceVersion": meta::resource_version(&o)}),
                        include,
                    ),
                ),
                None => (StatusCode::OK, o),
            }),
        (&Method::POST, None) => {
            match parse_body(&body).and_then(|o| Ok((review(Write::Object(&o), Format::Json)?, o)))
            {
                Ok((found, object)) => {
                    warnings = found;
                    create(&api, &target, object).await
                }
                Err(r) => return *r,
            }
        }
        (&Method::PUT, Some(name)) => {
            match parse_body(&body).and_then(|o| Ok((review(Write::Object(&o), Format::Json)?, o)))
            {
                Ok((found, object)) => {
                    warnings = found;
                    update(&api, &target, name, object).await
                }
                Err(r) => return *r,
            }
        }
        (&Method::PATCH, Some(name)) => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            match patch(
                &api,
                &target,
                name,
                content_type,
                &query,
                &body,
                &review,
                &mut warnings,
            )
            .await
            {
                Ok(result) => Ok(result),
                Err(PatchFailure::Response(r)) => return *r,
                Err(PatchFailure::Api(e)) => Err(e),
            }
        }
        (&Method::DELETE, Some(name)) => {
            let options = if body.is_empty() {
                Ok(Value::Null)
            } else {
                parse_body(&body)
            };
            match options {
                Ok(options) => delete(&host, &target, name, &query, &options).await,
                Err(r) => return *r,
            }
        }
        (&Method::DELETE, None) => {
            let options = if body.is_empty() {
                Ok(Value::Null)
            } else {
                parse_body(&body)
            };
            match options {
                Ok(options) => delete_collection(&host, &target, &query, &options).await,
                Err(r) => return *r,
            }
        }
        _ => {
            return error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!("{method} is not supported on this path"),
            );
        }
    };
    let mut response = match result {
        Ok((code, body)) => (code, Json(body)).into_response(),
        Err(err) => ApiError(err).into_response(),
    };
    fields::add_warnings(response.headers_mut(), &warnings);
    response
}

/// The API a request writes through: the host's own, or in a dry run a
/// view of it that checks and answers but stores nothing (borrowed, so a
/// plain request copies nothing).
fn writer(host: &Host, dry_run: bool) -> Cow<'_, Api> {
    if dry_run {
        Cow::Owned(host.api().dry_run())
    } else {
        Cow::Borrowed(host.api())
    }
}

/// Put the path's namespace into the body, refusing a contradicting one.
fn place(target: &Target, object: &mut Value) -> Result<(), Error> {
    if !object.is_object() {
        return Err(Error::BadRequest(
            "the request body must be a JSON object".into(),
        ));
    }
    if let Some(ns) = &target.namespace {
        match meta::namespace(object) {
            Some(body_ns) if body_ns != ns => {
                return Err(Error::BadRequest(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
                )));
            }
            _ => {
                meta::metadata_mut(object).insert("namespace".into(), Value::String(ns.clone()));
            }
        }
    }
    Ok(())
}

async fn create(
    api: &Api,
    target: &Target,
    mut object: Value,
) -> Result<(StatusCode, Value), Error> {
    place(target, &mut object)?;
    api.create(&target.kind, object)
        .await
        .map(|o| (StatusCode::CREATED, o))
}

async fn update(
    api: &Api,
    target: &Target,
    name: &str,
    mut object: Value,
) -> Result<(StatusCode, Value), Error> {
    place(target, &mut object)?;
    if meta::name(&object) != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({:?}) does not match the name on the URL ({name:?})",
            meta::name(&object)
        )));
    }
    let result = if target.status {
        api.update_status(&target.kind, object).await
    } else {
        api.update(&target.kind, object).await
    };
    result.map(|o| (StatusCode::OK, o))
}

async fn delete(
    host: &Host,
    target: &Target,
    name: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> Result<(StatusCode, Value), Error> {
    let (options, dry_run) = super::options::delete(query, body)?;
    let api = writer(host, dry_run);
    let object = api
        .delete(&target.kind, target.namespace.as_deref(), name, &options)
        .await?;
    // 200 with the object when deletion completed or is pending on finalizers,
    // as the Kubernetes API does for custom resources.
    Ok((StatusCode::OK, object))
}

/// `DELETE` on a collection (`deletecollection`): the objects the label and
/// field selectors pick, each deleted with the body's `DeleteOptions` (or
/// `propagationPolicy` in the query); answers the list of what was deleted.
async fn delete_collection(
    host: &Host,
    target: &Target,
    query: &HashMap<String, String>,
    options: &Value,
) -> Result<(StatusCode, Value), Error> {
    let (delete_options, dry_run) = super::options::delete(query, options)?;
    let api = writer(host, dry_run);
    let list_options = ListOptions {
        namespace: target.namespace.clone(),
        label_selector: query.get("labelSelector").cloned(),
        field_selector: query.get("fieldSelector").cloned(),
        ..ListOptions::default()
    };
    let deleted = api
        .delete_collection(&target.kind, &list_options, &delete_options)
        .await?;
    Ok((StatusCode::OK, deleted.to_json(&target.kind)))
}

enum PatchFailure {
    Response(Box<Response>),
    Api(Error),
}

impl From<Error> for PatchFailure {
    fn from(err: Error) -> Self {
        PatchFailure::Api(err)
    }
}

/// Reviews a write's fields (see [`fields::review`]).
type Review<'a> =
    dyn Fn(Write<'_>, Format) -> Result<Vec<String>, Box<Response>> + Send + Sync + 'a;

/// PATCH by content type: JSON merge patch, strategic merge patch (for
/// Kubernetes' own kinds), JSON patch (RFC 6902), or server-side apply (`fieldManager` required, `force` optional). The
/// patch's fields are reviewed first; what review warns about goes to
/// `warnings`.
#[allow(clippy::too_many_arguments)]
async fn patch(
    api: &Api,
    target: &Target,
    name: &str,
    content_type: &str,
    query: &HashMap<String, String>,
    body: &Bytes,
    review: &Review<'_>,
    warnings: &mut Vec<String>,
) -> Result<(StatusCode, Value), PatchFailure> {
    let namespace = target.namespace.as_deref();
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/merge-patch+json" => {
            let doc = parse_body(body).map_err(PatchFailure::Response)?;
            *warnings =
                review(Write::MergePatch(&doc), Format::Json).map_err(PatchFailure::Response)?;
            Ok((
                StatusCode::OK,
                api.merge_patch(&target.kind, namespace, name, &doc, target.status)
                    .await?,
            ))
        }
        "application/strategic-merge-patch+json" if !target.kind.takes_strategic_merge_patch() => {
            Err(PatchFailure::Response(Box::new(error_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (strategic merge patch is for Kubernetes' own kinds, not custom resources)",
            ))))
        }
        "application/strategic-merge-patch+json" => {
            let doc = parse_body(body).map_err(PatchFailure::Response)?;
            *warnings = review(
                Write::MergePatch(&setpoint::object::patch::without_directives(&doc)),
                Format::Json,
            )
            .map_err(PatchFailure::Response)?;
            Ok((
                StatusCode::OK,
                api.strategic_merge_patch(&target.kind, namespace, name, &doc, target.status)
                    .await?,
            ))
        }
        "application/json-patch+json" => {
            let doc = parse_body(body).map_err(PatchFailure::Response)?;
            let ops = JsonPatch::from_value(&doc)
                .map_err(|e| Error::BadRequest(format!("invalid JSON patch: {e}")))?;
            *warnings =
                review(Write::JsonPatch(&ops), Format::Json).map_err(PatchFailure::Response)?;
            Ok((
                StatusCode::OK,
                api.json_patch(&target.kind, namespace, name, &ops, target.status)
                    .await?,
            ))
        }
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            if target.status {
                return Err(Error::BadRequest(
                    "apply to the status sub-resource is not supported".into(),
                )
                .into());
            }
            let manager = query
                .get("fieldManager")
                .filter(|m| !m.is_empty())
                .ok_or_else(|| {
                    Error::BadRequest("fieldManager is required for apply patch".into())
                })?;
            let force = matches!(query.get("force").map(String::as_str), Some("true" | "1"));
            let mut object = parse_yaml_or_json(body).map_err(PatchFailure::Response)?;
            // kubectl sends JSON (a subset of YAML); scan it as what it is.
            let format = if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
                Format::Json
            } else {
                Format::Yaml
            };
            *warnings = review(Write::Object(&object), format).map_err(PatchFailure::Response)?;
            place(target, &mut object)?;
            if meta::name(&object) != name {
                return Err(Error::BadRequest(format!(
                    "the name of the object ({:?}) does not match the name on the URL ({name:?})",
                    meta::name(&object)
                ))
                .into());
            }
            let existed = api.get(&target.kind, namespace, name).await.is_ok();
            let applied = api.apply(&target.kind, object, manager, force).await?;
            Ok((
                if existed {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                },
                applied,
            ))
        }
        other => Err(PatchFailure::Response(Box::new(error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            ),
        )))),
    }
}

/// An apply body: YAML (of which JSON is a subset).
fn parse_yaml_or_json(body: &Bytes) -> Result<Value, Box<Response>> {
    let text = std::str::from_utf8(body).map_err(|_| {
        Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "request body is not UTF-8",
        ))
    })?;
    // Bounded work: deep nesting and alias bombs are refused before they
    // cost more than reading them (see `object::yaml`).
    setpoint::object::yaml::from_str(text).map_err(|e| {
        Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("request body is not valid YAML or JSON: {e}"),
        ))
    })
}
