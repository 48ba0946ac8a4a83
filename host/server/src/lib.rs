//! The HTTP API over a [`setpoint::Host`] (crate `setpoint-server`; the
//! engine itself builds without it), following Kubernetes' REST conventions for custom
//! resources: discovery under `/api` and `/apis`, collection and item paths
//! per kind (namespaced or cluster-scoped), the `status` sub-resource, and
//! `Status` error bodies; and the web [`console`] at `/`. Every request first passes the gate in
//! [`guard`]: bearer tokens ([`auth`]), rate limits, the in-flight bound and
//! the body size limit.

pub mod auth;
pub mod backup;
pub mod conn;
pub mod console;
mod discovery;
mod fields;
pub mod guard;
mod host_info;
mod list;
mod manifests;
mod metrics;
mod objects;
mod openapi;
mod options;
mod plan;
mod protobuf;
mod status;
mod table;
pub mod tls;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use setpoint::Host;

pub use guard::{Config, RateLimit};
pub use status::status_body;

/// The largest request body accepted (a little over the object size limit).
pub const MAX_BODY_BYTES: usize = 3 << 20;

/// Build the router for a host, open to every caller (loopback use).
pub fn router(host: Arc<Host>) -> Router {
    router_with(host, Config::default())
}

/// Build the router for a host behind the gate configured by `config`.
pub fn router_with(host: Arc<Host>, config: Config) -> Router {
    let max_body = config.max_body_bytes;
    let console = config.console.clone();
    let guard = guard::Guard::new(config);
    let requests = guard.metrics.clone();
    let metrics_host = host.clone();
    Router::new()
        .route(
            "/metrics",
            get(move || metrics::metrics(metrics_host.clone(), requests.clone())),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/livez", get(|| async { "ok" }))
        .route("/version", get(discovery::version))
        .route("/setpoint/v1/plugins", get(host_info::plugins))
        .route("/setpoint/v1/history", get(host_info::history))
        .route("/setpoint/v1/cluster", get(host_info::cluster))
        .route("/setpoint/v1/backup", get(backup::backup))
        .route("/setpoint/v1/plan", axum::routing::post(plan::plan))
        .route(
            "/setpoint/v1/manifests",
            axum::routing::post(manifests::manifests),
        )
        .merge(console::routes(console))
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::v3_index))
        .route("/openapi/v3/{*rest}", get(openapi::v3_group_version))
        .route("/api", get(discovery::core_versions))
        .route("/api/v1", get(discovery::core_resources))
        .route("/apis", get(discovery::groups))
        .route("/apis/{group}/{version}", get(discovery::group_resources))
        .route("/api/v1/{*rest}", axum::routing::any(objects::core))
        .route(
            "/apis/{group}/{version}/{*rest}",
            axum::routing::any(objects::grouped),
        )
        .fallback(|| async {
            status::error_response(
                axum::http::StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
        .with_state(host)
}

/// `GET /readyz`: `ok` while the store takes writes; 503 with the reason
/// while it does not (the disk is full, a write failed, it is closed), so
/// that a load balancer sends writes elsewhere. Reads may still work.
async fn readyz(axum::extract::State(host): axum::extract::State<Arc<Host>>) -> Response {
    match host.api().backend().writable() {
        Ok(()) => "ok".into_response(),
        Err(err) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {err}\n"),
        )
            .into_response(),
    }
}

/// Serve the API on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    host: Arc<Host>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, host, Config::default(), shutdown).await
}

/// Serve the API behind the gate configured by `config` on `listener` — a
/// `TcpListener`, or a [`tls::TlsListener`] for HTTPS — until `shutdown`
/// resolves.
pub async fn serve_with<L>(
    listener: L,
    host: Arc<Host>,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    conn::serve(listener, router_with(host, config), shutdown).await
}

/// Bind a listener: any address when the API authenticates its callers,
/// loopback only when it does not (see [`bind_loopback`]).
pub async fn bind(
    addr: SocketAddr,
    authenticated: bool,
) -> std::io::Result<tokio::net::TcpListener> {
    if authenticated {
        tokio::net::TcpListener::bind(addr).await
    } else {
        bind_loopback(addr).await
    }
}

/// Bind a listener, refusing anything but loopback: without authentication
/// the API must not be reachable from other machines.
pub async fn bind_loopback(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    if !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing to listen on {addr}: without authentication the API only binds to loopback (127.0.0.1 or ::1); give a tokens file (--tokens) to listen elsewhere"
            ),
        ));
    }
    tokio::net::TcpListener::bind(addr).await
}
