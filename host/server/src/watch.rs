//! Watch streams (`?watch=true`): newline-delimited JSON events
//! (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`) the way client-go's
//! watcher reads them.
//!
//! - Without `resourceVersion` (or with `0`), or with `sendInitialEvents=true`,
//!   the stream starts with a synthetic `ADDED` per existing object, taken
//!   from one list at one revision, then follows every change after it.
//! - With `resourceVersion=N` it follows every change after `N`; if `N` is
//!   older than the watch cache keeps, the stream is one `ERROR` event
//!   carrying a 410 `Expired` Status, and the client relists.
//! - With `allowWatchBookmarks=true`, a `BOOKMARK` carrying the latest
//!   revision the stream has fully seen is sent when it has been quiet for a
//!   while, so a client on a quiet kind can resume without relisting. With
//!   `sendInitialEvents=true` a bookmark annotated
//!   `k8s.io/initial-events-end: "true"` marks the end of the initial events.
//! - Label and field selectors filter events by the object's state at each
//!   event.
//! - A client that stops reading is cut off (its stream ends) as soon as it
//!   has fallen further behind than the watch cache keeps, not only when
//!   it reads again.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::status::{ApiError, status_body};
use super::table::{self, IncludeObject};
use setpoint::Host;
use setpoint::api::{Api, Error, ListOptions};
use setpoint::object::selector::LabelSelector;
use setpoint::object::{KindInfo, meta};
use setpoint::watch::{self, EventType};

/// How long a stream may be quiet before a bookmark is sent.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// Events buffered per stream before the writer waits for the client.
const STREAM_BUFFER: usize = 256;

fn truthy(query: &HashMap<String, String>, key: &str) -> bool {
    matches!(query.get(key).map(String::as_str), Some("true" | "1"))
}

/// `timeoutSeconds` from a list or watch query: a non-negative number of
/// seconds, or absent; anything else is a 400 rather than ignored.
pub(super) fn timeout_seconds(query: &HashMap<String, String>) -> Result<Option<Duration>, Error> {
    match query.get("timeoutSeconds").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(t) => t
            .parse::<u64>()
            .map(|s| Some(Duration::from_secs(s)))
            .map_err(|_| {
                Error::BadRequest(format!(
                    "invalid value for timeoutSeconds: {t:?}: must be a non-negative integer"
                ))
            }),
    }
}

/// `resourceVersion` from a list or watch query: a revision (`0`: any),
/// or absent; anything else is a 400 rather than ignored.
pub(super) fn resource_version(query: &HashMap<String, String>) -> Result<Option<i64>, Error> {
    match query.get("resourceVersion").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(rv) => match rv.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(Error::BadRequest(format!(
                "invalid resource version: resourceVersion: Invalid value: {rv:?}: must be a non-negative integer"
            ))),
        },
    }
}

/// Whether the query asks for a watch.
pub(super) fn is_watch(query: &HashMap<String, String>) -> bool {
    truthy(query, "watch")
}

struct Filter {
    labels: LabelSelector,
    name: Option<String>,
}

impl Filter {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(meta::labels(object))
            && self.name.as_deref().is_none_or(|n| meta::name(object) == n)
    }
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line =
        serde_json::to_vec(&json!({"type": kind, "object": object})).expect("JSON serialises");
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(kind: &KindInfo, revision: i64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"apiVersion": kind.api_version(), "kind": kind.kind, "metadata": metadata}),
    )
}

/// Start a watch stream for `kind` in `namespace` (or all).
pub(super) async fn watch(
    host: &Host,
    kind: std::sync::Arc<KindInfo>,
    namespace: Option<String>,
    query: &HashMap<String, String>,
    table: Option<IncludeObject>,
) -> Response {
    let labels = match query
        .get("labelSelector")
        .map(|s| LabelSelector::parse(s))
        .transpose()
    {
        Ok(l) => l.unwrap_or_default(),
        Err(e) => return ApiError(Error::BadRequest(e.to_string())).into_response(),
    };
    let name = match query.get("fieldSelector").map(String::as_str) {
        None | Some("") => None,
        Some(f) => match f
            .strip_prefix("metadata.name=")
            .or_else(|| f.strip_prefix("metadata.name=="))
        {
            Some(n) if !n.contains(',') => Some(n.to_owned()),
            _ => {
                return ApiError(Error::BadRequest(format!(
                    "watch supports only the field selector metadata.name=NAME, not {f:?}"
                )))
                .into_response();
            }
        },
    };
    let filter = Filter { labels, name };
    let rv = query
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && v.as_str() != "0");
    let initial = rv.is_none() || truthy(query, "sendInitialEvents");
    let bookmarks = truthy(query, "allowWatchBookmarks");
    let timeout = match timeout_seconds(query).and_then(|t| resource_version(query).map(|_| t)) {
        Ok(t) => t,
        Err(e) => return ApiError(e).into_response(),
    };
    let api = host.api().clone();
    let prefix = Api::prefix(&kind, namespace.as_deref());

    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(STREAM_BUFFER);
    // Initial list (if asked for) and the starting revision.
    let mut initial_items = Vec::new();
    let start = match rv {
        Some(rv) => match rv.parse::<i64>() {
            Ok(rv) => rv,
            Err(_) => {
                return ApiError(Error::BadRequest(format!("invalid resourceVersion {rv:?}")))
                    .into_response();
            }
        },
        None => 0,
    };
    let start = if initial && rv.is_none() {
        let options = ListOptions {
            namespace: namespace.clone(),
            ..Default::default()
        };
        match api.list(&kind, &options).await {
            Ok(list) => {
                initial_items = list.items;
                list.resource_version
            }
            Err(e) => return ApiError(e).into_response(),
        }
    } else {
        start
    };
    let subscription = api.hub().subscribe(&prefix, start);
    tokio::spawn(async move {
        let mut subscription = match subscription {
            Ok(s) => s,
            Err(err) => {
                let _ = tx.send(Ok(expired(&err))).await;
                return;
            }
        };
        let render = |object: &Value| match table {
            Some(include) => table::table(
                &kind,
                std::slice::from_ref(object),
                json!({"resourceVersion": meta::resource_version(object)}),
                include,
            ),
            None => object.clone(),
        };
        for item in initial_items.iter().filter(|o| filter.matches(o)) {
            if tx
                .send(Ok(event_line("ADDED", &render(item))))
                .await
                .is_err()
            {
                return;
            }
        }
        if initial && bookmarks {
            let _ = tx.send(Ok(bookmark(&kind, start, true))).await;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            let quiet = tokio::time::sleep(BOOKMARK_INTERVAL);
            let ended = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                next = subscription.next() => match next {
                    Ok(event) => {
                        if !filter.matches(&event.object) {
                            continue;
                        }
                        let kind = match event.kind {
                            EventType::Added => "ADDED",
                            EventType::Modified => "MODIFIED",
                            EventType::Deleted => "DELETED",
                        };
                        let line = event_line(kind, &render(&event.object));
                        if !send_or_cut_off(&tx, line, &subscription, api.hub()).await {
                            return;
                        }
                    }
                    Err(err) => {
                        let _ = tx.send(Ok(expired(&err))).await;
                        return;
                    }
                },
                () = quiet, if bookmarks => {
                    let revision = subscription.progress(api.hub());
                    if tx.send(Ok(bookmark(&kind, revision, false))).await.is_err() {
                        return;
                    }
                }
                () = ended => return,
                () = tx.closed() => return,
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// How often a stream waiting on its client checks whether the client fell
/// too far behind to catch up.
const SLOW_CLIENT_CHECK: Duration = Duration::from_millis(500);

/// Send `line` once the client has room for it; false when the client is
/// gone, or when, while it was not reading, the stream fell further behind
/// than the watch cache keeps: such a client could only be told to relist
/// once it read again, so it is cut off now (its connection ends and it
/// watches again), as kube-apiserver closes an unresponsive consumer.
async fn send_or_cut_off(
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    line: Bytes,
    subscription: &watch::Subscription,
    hub: &setpoint::watch::WatchHub,
) -> bool {
    let mut check = tokio::time::interval(SLOW_CLIENT_CHECK);
    check.tick().await;
    loop {
        tokio::select! {
            permit = tx.reserve() => return match permit {
                Ok(permit) => {
                    permit.send(Ok(line));
                    true
                }
                Err(_) => false,
            },
            _ = check.tick() => {
                if subscription.fell_behind(hub) {
                    tracing::info!("watch client too slow to catch up; closing its stream");
                    return false;
                }
            }
        }
    }
}

/// The `ERROR` event for a broken watch: 410 Expired for a too-old
/// revision, 500 otherwise.
fn expired(err: &watch::Error) -> Bytes {
    let (code, reason) = match err {
        watch::Error::TooOldResourceVersion { .. } => (410, "Expired"),
        _ => (500, "InternalError"),
    };
    event_line(
        "ERROR",
        &status_body(code, reason, &err.to_string(), Value::Null),
    )
}
