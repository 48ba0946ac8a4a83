//! The web console: its page and files, embedded in the binary and served
//! at `/` and `/console/*` to everyone (they hold no data), and the JSON it
//! reads beside the Kubernetes API, under `/setpoint/v1/console/`, behind
//! the same tokens as the rest of the API:
//!
//! - `whoami`: who the token is and whether it may write (the page turns
//!   its apply button off when it may not; the API refuses anyway);
//! - `overview` ([`overview`]): kinds with counts, plugins, what needs a look;
//! - `tree` ([`tree`]): an object's owners and dependents, folded;
//! - `plugins` ([`plugins`]): what each plugin declares and is granted, its
//!   destinations' breakers, effect counters and refusals.
//!
//! The page itself (`assets/`) is plain HTML, CSS and a script module with
//! no build step; it reads everything else from the Kubernetes API
//! (tables, watches, events) and `/setpoint/v1` (history, plan).

mod overview;
mod plugins;
mod tree;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json};
use serde_json::json;

use super::auth;
use super::guard::Caller;
use super::status::error_response;
use setpoint::Host;

/// The page's files, embedded: (name, media type, contents).
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("assets/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/app.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("assets/favicon.svg"),
    ),
];

/// No inline script or style, nothing from elsewhere: the page works
/// offline and a value that slipped through escaping cannot run.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Where the console's files come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Source {
    /// The copy built into the binary.
    #[default]
    Embedded,
    /// A directory read at each request (developing the page without
    /// rebuilding): `setpoint serve --console-dir`.
    Dir(PathBuf),
    /// No console (`--no-console`): `/` answers 404 like any unknown path.
    Off,
}

/// The console's routes: the page and its files (when `source` is not
/// [`Source::Off`]) and its JSON endpoints (always: they are API).
pub(super) fn routes(source: Source) -> Router<Arc<Host>> {
    let router = Router::new()
        .route("/setpoint/v1/console/whoami", get(whoami))
        .route("/setpoint/v1/console/overview", get(overview::overview))
        .route("/setpoint/v1/console/tree", get(tree::tree))
        .route("/setpoint/v1/console/plugins", get(plugins::plugins));
    if source == Source::Off {
        return router;
    }
    let source = Arc::new(source);
    let index = source.clone();
    router
        .route(
            "/",
            get(move || asset(index.clone(), "index.html".to_owned())),
        )
        .route(
            "/console/{file}",
            get(move |Path(file): Path<String>| asset(source.clone(), file)),
        )
}

async fn asset(source: Arc<Source>, file: String) -> Response {
    let Some((name, media_type, embedded)) = ASSETS.iter().find(|(name, ..)| *name == file) else {
        return error_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the console has no file {file:?}"),
        );
    };
    let body = match &*source {
        Source::Dir(dir) => match tokio::fs::read(dir.join(name)).await {
            Ok(body) => body,
            Err(err) => {
                return error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &format!("reading the console's {name} from {}: {err}", dir.display()),
                );
            }
        },
        _ => embedded.to_vec(),
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The page changes with the binary; a reload after an upgrade must not
    // mix an old script with a new page.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /setpoint/v1/console/whoami`: the caller's name and what the page
/// may offer it. Open to every authenticated user (like discovery).
async fn whoami(State(_host): State<Arc<Host>>, caller: Option<Extension<Caller>>) -> Response {
    let plan = auth::Request::NonResource {
        verb: "post".into(),
        path: "/setpoint/v1/plan".into(),
    };
    match caller {
        None => Json(json!({
            "authenticated": false,
            "tokensRequired": false,
            "user": null,
            "mayWrite": true,
            "mayPlan": true,
        })),
        Some(Extension(Caller(user))) => Json(json!({
            "authenticated": true,
            "tokensRequired": true,
            "user": user.name,
            "mayWrite": user.may_write_some(),
            "mayPlan": user.allows(&plan),
        })),
    }
    .into_response()
}

/// A node's reference fields: what the page needs to name and link an
/// object.
pub(super) fn reference(
    kind: &setpoint::object::KindInfo,
    object: &setpoint::object::Object,
) -> serde_json::Value {
    use setpoint::object::meta;
    json!({
        "apiVersion": kind.api_version(),
        "group": kind.group,
        "version": kind.version,
        "kind": kind.kind,
        "plural": kind.plural,
        "namespace": meta::namespace(object),
        "name": meta::name(object),
        "uid": meta::uid(object),
    })
}
