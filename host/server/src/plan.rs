//! `POST /setpoint/v1/plan`: what applying a manifest (`{"apply":
//! [{"origin": …, "object": …}, …]}`) or deleting an object (`{"delete":
//! {"apiVersion", "kind", "namespace", "name", "propagationPolicy"}}`)
//! would do, as a [`setpoint::plan::Plan`] in JSON. Nothing is written.
//!
//! A plan shows objects before and after, whichever the cascade touches:
//! grant it (a `nonResourceURLs` rule, verb `post`) only to callers who
//! may read what the plugins reconcile.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::status::{ApiError, error_response};
use setpoint::Host;
use setpoint::plan::{Error, Request};

pub(super) async fn plan(
    State(host): State<Arc<Host>>,
    request: Result<Json<Request>, JsonRejection>,
) -> Response {
    let Json(request) = match request {
        Ok(request) => request,
        Err(rejection) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "a plan request is {{\"apply\": [{{\"object\": …}}]}} or {{\"delete\": {{\"apiVersion\", \"kind\", \"name\", …}}}}: {}",
                    rejection.body_text()
                ),
            );
        }
    };
    match host.plan(request).await {
        Ok(plan) => Json(plan).into_response(),
        Err(Error::BadRequest(message)) => {
            error_response(StatusCode::BAD_REQUEST, "BadRequest", &message)
        }
        Err(Error::Api(err)) => ApiError(err).into_response(),
        Err(Error::Store(err)) => ApiError(err.into()).into_response(),
        Err(err) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &err.to_string(),
        ),
    }
}
