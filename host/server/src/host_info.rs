//! Setpoint's own endpoints beside the Kubernetes API, under `/setpoint/v1`:
//! the plugins the host runs, the recent reconcile results of an object and
//! the host's view of its cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::status::error_response;
use setpoint::Host;
use setpoint::controller::Outcome;
use setpoint::object::ObjectKey;
use setpoint::plugins::PluginState;

fn unix_seconds(time: std::time::SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A plugin's state as the API words it: `Running`, or `Failed` and why.
pub(super) fn plugin_state(state: &PluginState) -> (&'static str, Option<String>) {
    match state {
        PluginState::Running => ("Running", None),
        PluginState::Failed(reason) => ("Failed", Some(reason.clone())),
    }
}

/// One object named in a query: `apiVersion`, `kind`, `name`, and
/// `namespace` if any.
pub(super) struct ObjectQuery<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

impl<'a> ObjectQuery<'a> {
    /// The object `query` names, if it names one.
    pub(super) fn of(query: &'a HashMap<String, String>) -> Option<Self> {
        Some(Self {
            api_version: query.get("apiVersion")?,
            kind: query.get("kind")?,
            namespace: query
                .get("namespace")
                .map(String::as_str)
                .filter(|n| !n.is_empty()),
            name: query.get("name")?,
        })
    }

    /// The answer to a query that names no object.
    pub(super) fn missing() -> Response {
        error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "apiVersion, kind and name are required",
        )
    }
}

/// `GET /setpoint/v1/plugins`: every plugin file the host has seen, and
/// the custom kinds no running plugin reconciles (`unreconciledKinds`).
pub(super) async fn plugins(State(host): State<Arc<Host>>) -> Json<Value> {
    let plugins: Vec<Value> = host
        .plugins()
        .await
        .into_iter()
        .map(|p| {
            let (state, reason) = plugin_state(&p.state);
            json!({
                "name": p.name,
                "path": p.path.display().to_string(),
                "kind": p.kind,
                "version": p.version,
                "contentHash": p.content_hash,
                "loadedAt": unix_seconds(p.loaded_at),
                "state": state,
                "reason": reason,
                "lastError": p.last_error,
                "reconciles": p.reconciles,
                "errors": p.errors,
                "contested": p.contested,
            })
        })
        .collect();
    let unreconciled = host.unreconciled_kinds().await;
    Json(json!({"plugins": plugins, "unreconciledKinds": unreconciled}))
}

/// `GET /setpoint/v1/history?apiVersion=…&kind=…&namespace=…&name=…`: the
/// last reconcile results of one object, oldest first, then the reconcile
/// in progress (outcome `InProgress`, its duration so far), if one is; and
/// `reconciler: false` when no running plugin reconciles the kind; and the
/// object's recent external requests (`externalRequests`, oldest first).
pub(super) async fn history(
    State(host): State<Arc<Host>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(ObjectQuery {
        api_version,
        kind,
        namespace,
        name,
    }) = ObjectQuery::of(&query)
    else {
        return ObjectQuery::missing();
    };
    let key = ObjectKey::new(namespace, name);
    let records: Vec<Value> = host
        .history(api_version, kind, &key)
        .await
        .into_iter()
        .map(|r| {
            let (outcome, error) = match r.outcome {
                Outcome::Success => ("Success", None),
                Outcome::TransientError(e) => ("TransientError", Some(e)),
                Outcome::PermanentError(e) => ("PermanentError", Some(e)),
            };
            json!({
                "started": unix_seconds(r.started),
                "durationSeconds": r.duration.as_secs_f64(),
                "version": r.version,
                "outcome": outcome,
                "error": error,
                "nextInSeconds": r.next_in.map(|d| d.as_secs_f64()),
            })
        })
        .collect();
    let mut records = records;
    if let Some(started) = host.in_progress(api_version, kind, &key).await {
        records.push(json!({
            "started": unix_seconds(started),
            "durationSeconds": started.elapsed().map(|d| d.as_secs_f64()).unwrap_or(0.0),
            "outcome": "InProgress",
        }));
    }
    let reconciled = !host
        .unreconciled_kinds()
        .await
        .contains(&format!("{api_version} {kind}"));
    let external = host
        .egress()
        .metrics()
        .recent(&setpoint::controller::effects::recent_key(kind, &key));
    Json(json!({"records": records, "reconciler": reconciled, "externalRequests": external}))
        .into_response()
}

/// `GET /setpoint/v1/cluster`: this host's view of the cluster it shares
/// work in (members, shards held, lease), or `{"clustered": false}`.
pub(super) async fn cluster(State(host): State<Arc<Host>>) -> Json<Value> {
    Json(match host.cluster() {
        Some(cluster) => {
            let mut status = serde_json::to_value(cluster.status()).unwrap_or_default();
            status["clustered"] = Value::Bool(true);
            status
        }
        None => serde_json::json!({"clustered": false}),
    })
}
