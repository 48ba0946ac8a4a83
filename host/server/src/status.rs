//! The single mapping from API errors to Kubernetes `Status` bodies and HTTP
//! codes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use setpoint::api::Error;

/// A `Status` failure body.
pub fn status_body(code: u16, reason: &str, message: &str, details: Value) -> Value {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if !details.is_null() {
        body["details"] = details;
    }
    body
}

/// An API error as an HTTP response.
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        Self(err)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let err = self.0;
        let code = err.code();
        let details = match &err {
            Error::NotFound { kind, name }
            | Error::AlreadyExists { kind, name }
            | Error::Conflict { kind, name, .. } => resource_details(kind, name),
            Error::Invalid { kind, name, causes } => json!({
                "name": name,
                "kind": kind,
                "causes": causes.iter().map(|c| json!({
                    "reason": c.reason.cause_type(), "message": c.message, "field": c.field,
                })).collect::<Vec<_>>(),
            }),
            Error::ApplyConflict {
                kind,
                name,
                conflicts,
            } => json!({
                "name": name,
                "group": resource_group(kind),
                "kind": resource_plural(kind),
                // As many causes as the message lists: a conflict over
                // 20,000 fields answers kilobytes, not megabytes.
                "causes": conflicts.iter().take(setpoint::api::MAX_LISTED_CONFLICTS).map(|c| json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {:?}", c.manager),
                    "field": c.field,
                })).collect::<Vec<_>>(),
            }),
            _ => Value::Null,
        };
        if code >= 500 {
            tracing::error!(error = %err, "request failed");
        }
        let body = status_body(code, err.reason(), &err.to_string(), details);
        (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Json(body),
        )
            .into_response()
    }
}

/// `details` of an error about one object of `resource` (`plural.group`,
/// as `Api::resource` writes it): Kubernetes gives the plural as `kind`
/// and the group apart, and leaves out an empty group.
fn resource_details(resource: &str, name: &str) -> Value {
    let mut details = json!({"name": name, "kind": resource_plural(resource)});
    let group = resource_group(resource);
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    details
}

/// A plural has no dots (it is a DNS label), so the group is what follows
/// the first one.
fn resource_plural(resource: &str) -> &str {
    resource
        .split_once('.')
        .map_or(resource, |(plural, _)| plural)
}

fn resource_group(resource: &str) -> &str {
    resource.split_once('.').map_or("", |(_, group)| group)
}

/// A plain `Status` error response.
pub fn error_response(code: StatusCode, reason: &str, message: &str) -> Response {
    (
        code,
        Json(status_body(code.as_u16(), reason, message, Value::Null)),
    )
        .into_response()
}

impl IntoResponse for super::guard::Refusal {
    fn into_response(self) -> Response {
        use super::guard::Refusal;
        let (code, reason) = match &self {
            Refusal::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            Refusal::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            Refusal::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            Refusal::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
            Refusal::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "Timeout"),
            Refusal::BadBody(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
        };
        let details = match &self {
            Refusal::TooManyRequests {
                retry_after_secs, ..
            } => json!({"retryAfterSeconds": retry_after_secs}),
            _ => Value::Null,
        };
        let mut response = error_response_with(code, reason, &self.to_string(), details);
        if matches!(self, Refusal::BodyTimeout(_) | Refusal::BadBody(_)) {
            // The rest of the body is not read: the connection cannot carry
            // another request.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        if let Refusal::TooManyRequests {
            retry_after_secs, ..
        } = &self
        {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(*retry_after_secs),
            );
        }
        response
    }
}

fn error_response_with(code: StatusCode, reason: &str, message: &str, details: Value) -> Response {
    (
        code,
        Json(status_body(code.as_u16(), reason, message, details)),
    )
        .into_response()
}
