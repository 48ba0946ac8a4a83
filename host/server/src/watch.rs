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
//! - What a stream holds for its client is bounded in bytes: an event's
//!   JSON is encoded once and shared by every watcher (see
//!   [`watch::Event::json`]), and each stream buffers at most
//!   [`STREAM_BUFFER_BYTES`] of it (more only for one larger event).
//! - A client that stops reading is cut off (its stream ends; it watches
//!   again from its last revision, or relists) as soon as it is
//!   [`MAX_LAG_BYTES`] of changes behind, or further than the watch cache
//!   keeps, not only when it reads again. `setpoint_watches_closed_slow_total`
//!   counts them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::status::{ApiError, status_body};
use super::table::{self, IncludeObject};
use setpoint::Host;
use setpoint::api::{Api, Error, ListOptions};
use setpoint::object::selector::LabelSelector;
use setpoint::object::{KindInfo, meta};
use setpoint::watch::{self, EventType};

/// How long a stream may be quiet before a bookmark is sent.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// Bytes of events a stream buffers for its client before it waits for
/// the client to read (an event larger than this is buffered alone).
/// Events' JSON is shared between watchers, so an unread stream mostly
/// holds references; tables, rendered per watcher, are copies.
pub const STREAM_BUFFER_BYTES: usize = 256 << 10;

/// A watcher that has not read this many bytes of changes the watch
/// cache received (objects as stored, all kinds) is closed: the cache
/// would otherwise hold them for it.
pub const MAX_LAG_BYTES: u64 = 16 << 20;

/// Chunks buffered per stream (an event is up to three).
const STREAM_CHUNKS: usize = 1024;

/// Watch streams closed because their client fell too far behind
/// (`setpoint_watches_closed_slow_total`).
pub(super) static CLOSED_SLOW: AtomicU64 = AtomicU64::new(0);

/// A piece of a stream, with the share of the stream's byte budget it
/// holds until the HTTP connection takes it.
type Chunk = (Bytes, Option<OwnedSemaphorePermit>);

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

/// The `{"type":…,"object":…}` line of a watch event, around the event's
/// shared JSON: three chunks, none of them copied per watcher.
fn shared_event_line(kind: EventType, event: &watch::Event) -> [Bytes; 3] {
    let start: &'static [u8] = match kind {
        EventType::Added => br#"{"type":"ADDED","object":"#,
        EventType::Modified => br#"{"type":"MODIFIED","object":"#,
        EventType::Deleted => br#"{"type":"DELETED","object":"#,
    };
    [
        Bytes::from_static(start),
        event.json(),
        Bytes::from_static(b"}\n"),
    ]
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
    connection: Option<super::conn::Connection>,
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

    let (tx, rx) = mpsc::channel::<Chunk>(STREAM_CHUNKS);
    let out = Outbox {
        tx,
        budget: Arc::new(Semaphore::new(STREAM_BUFFER_BYTES)),
    };
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
        let subscription = match subscription {
            Ok(s) => s,
            Err(err) => {
                let _ = out.send_now(expired(&err)).await;
                return;
            }
        };
        let hub = api.hub();
        let mut stream = Stream {
            out,
            subscription,
            hub,
            connection,
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
            if !stream.send([event_line("ADDED", &render(item))]).await {
                return;
            }
        }
        drop(initial_items);
        if initial && bookmarks && !stream.send([bookmark(&kind, start, true)]).await {
            return;
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
                next = stream.subscription.next() => match next {
                    Ok(event) => {
                        if !filter.matches(&event.object) {
                            continue;
                        }
                        let sent = match table {
                            Some(_) => {
                                let kind = match event.kind {
                                    EventType::Added => "ADDED",
                                    EventType::Modified => "MODIFIED",
                                    EventType::Deleted => "DELETED",
                                };
                                stream.send([event_line(kind, &render(&event.object))]).await
                            }
                            None => stream.send(shared_event_line(event.kind, &event)).await,
                        };
                        if !sent {
                            return;
                        }
                    }
                    Err(err) => {
                        let _ = stream.out.send_now(expired(&err)).await;
                        return;
                    }
                },
                () = quiet, if bookmarks => {
                    let revision = stream.subscription.progress(stream.hub);
                    if !stream.send([bookmark(&kind, revision, false)]).await {
                        return;
                    }
                }
                () = ended => return,
                () = stream.out.tx.closed() => return,
            }
        }
    });
    // The budget a chunk holds is given back as the connection takes it.
    let body = Body::from_stream(tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(rx),
        |(chunk, _budget)| Ok::<_, Infallible>(chunk),
    ));
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

/// Where a stream's chunks go, and the byte budget they take there.
struct Outbox {
    tx: mpsc::Sender<Chunk>,
    budget: Arc<Semaphore>,
}

impl Outbox {
    /// Send one last chunk (an error), waiting as long as it takes.
    async fn send_now(&self, chunk: Bytes) -> bool {
        self.tx.send((chunk, None)).await.is_ok()
    }
}

/// A watch stream's outbox and the subscription it follows.
struct Stream<'h> {
    out: Outbox,
    subscription: watch::Subscription,
    hub: &'h setpoint::watch::WatchHub,
    connection: Option<super::conn::Connection>,
}

impl Stream<'_> {
    /// Send `line` once the client has room for it; false when the client
    /// is gone, or when, while it was not reading, it fell [`MAX_LAG_BYTES`]
    /// behind or further than the watch cache keeps: such a client could
    /// only be told to relist once it read again, and meanwhile the cache
    /// holds what it has not read, so it is cut off now (its connection
    /// ends and it watches again), as kube-apiserver closes an
    /// unresponsive watcher.
    async fn send<const N: usize>(&mut self, line: [Bytes; N]) -> bool {
        let size: usize = line.iter().map(Bytes::len).sum();
        let take = u32::try_from(size.clamp(1, STREAM_BUFFER_BYTES)).unwrap_or(u32::MAX);
        let room = async {
            let budget = self.out.budget.clone().acquire_many_owned(take).await;
            let slots = self.out.tx.reserve_many(N).await;
            budget.ok().zip(slots.ok())
        };
        let mut room = std::pin::pin!(room);
        let mut check = tokio::time::interval(SLOW_CLIENT_CHECK);
        check.tick().await;
        loop {
            tokio::select! {
                room = &mut room => {
                    let Some((budget, slots)) = room else { return false };
                    let mut budget = Some(budget);
                    let last = N - 1;
                    for ((i, chunk), slot) in line.into_iter().enumerate().zip(slots) {
                        slot.send((chunk, if i == last { budget.take() } else { None }));
                    }
                    return true;
                },
                _ = check.tick() => {
                    let behind = self.subscription.bytes_behind(self.hub);
                    if behind > MAX_LAG_BYTES || self.subscription.fell_behind(self.hub) {
                        CLOSED_SLOW.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(behind, "watch client too slow to catch up; closing its connection");
                        // Ending the response would wait for the client to
                        // read what is queued: close the connection instead.
                        if let Some(connection) = &self.connection {
                            connection.cut();
                        }
                        return false;
                    }
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
