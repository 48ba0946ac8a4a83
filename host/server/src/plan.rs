//! `POST /setpoint/v1/plan`: what applying a manifest (`{"apply":
//! [{"origin": …, "object": …}, …]}`) or deleting an object (`{"delete":
//! {"apiVersion", "kind", "namespace", "name", "propagationPolicy"}}`)
//! would do, as a [`setpoint::plan::Plan`] in JSON. Nothing is written.
//!
//! A plan shows objects before and after, whichever the cascade touches.
//! It needs a `nonResourceURLs` rule with verb `post`; what it shows is
//! then cut to what the caller may `get`: an object the caller may not
//! read is listed with what happens to it, without its contents, the
//! bodies of the requests made for it or its events' messages.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use super::auth::{self, ResourceRequest, User};
use super::guard::Caller;
use super::status::{ApiError, error_response};
use setpoint::Host;
use setpoint::plan::{Error, ObjectRef, Request};

pub(super) async fn plan(
    State(host): State<Arc<Host>>,
    caller: Option<Extension<Caller>>,
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
        Ok(mut plan) => {
            if let Some(Extension(Caller(user))) = caller {
                plan.redact(|object| may_read(&host, &user, object));
            }
            Json(plan).into_response()
        }
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

/// Whether `user` may `get` `object`; an object of a kind the host does not
/// serve is not shown.
pub(super) fn may_read(host: &Host, user: &User, object: &ObjectRef) -> bool {
    let Ok(kind) = host
        .api()
        .kinds()
        .require(&object.api_version, &object.kind)
    else {
        return false;
    };
    user.allows(&auth::Request::Resource(ResourceRequest {
        verb: "get".into(),
        group: kind.group.clone(),
        resource: kind.plural.clone(),
        subresource: None,
        namespace: object.namespace.clone(),
        name: Some(object.name.clone()),
    }))
}
