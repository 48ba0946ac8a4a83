//! The HTTP API, following Kubernetes' REST conventions for custom
//! resources: discovery under `/api` and `/apis`, collection and item paths
//! per kind (namespaced or cluster-scoped), the `status` sub-resource, and
//! `Status` error bodies.

mod discovery;
mod host_info;
mod objects;
mod openapi;
mod status;
mod table;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;

use crate::Host;

pub use status::status_body;

/// The largest request body accepted (a little over the object size limit).
pub const MAX_BODY_BYTES: usize = 3 << 20;

/// Build the router for a host.
pub fn router(host: Arc<Host>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/version", get(discovery::version))
        .route("/setpoint/v1/plugins", get(host_info::plugins))
        .route("/setpoint/v1/history", get(host_info::history))
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
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(host)
}

/// Serve the API on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    host: Arc<Host>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(host))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Bind a listener, refusing anything but loopback: the API has no
/// authentication yet, so it must not be reachable from other machines.
pub async fn bind_loopback(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    if !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing to listen on {addr}: without authentication the API only binds to loopback (127.0.0.1 or ::1)"
            ),
        ));
    }
    tokio::net::TcpListener::bind(addr).await
}
