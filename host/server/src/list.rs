//! LIST requests: their options (`limit`, `continue`, `resourceVersion`
//! and `resourceVersionMatch`, selectors) and their answers: JSON streamed
//! a page at a time, a table of a whole collection written a page of rows
//! at a time, or a table page (a `limit`) built whole.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::status::ApiError;
use super::table;
use setpoint::Host;
use setpoint::api::{Error, ListOptions};
use setpoint::object::KindInfo;

/// A list request's options, its query checked.
pub(super) fn options(
    namespace: Option<String>,
    query: &HashMap<String, String>,
) -> Result<ListOptions, Error> {
    // Checked though a list answers at once and from the latest revision
    // (which no requested one is newer than): a bad value is a client bug
    // to report, not to ignore.
    super::watch::timeout_seconds(query)?;
    let resource_version = super::watch::resource_version(query)?;
    let limit = match query.get("limit") {
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| Error::BadRequest(format!("limit {l:?} is not a number")))?,
        None => 0,
    };
    let continue_token = query.get("continue").filter(|c| !c.is_empty()).cloned();
    let revision = exact_revision(query, resource_version, limit, continue_token.is_some())?;
    Ok(ListOptions {
        namespace,
        label_selector: query.get("labelSelector").cloned(),
        field_selector: query.get("fieldSelector").cloned(),
        limit,
        continue_token,
        revision,
    })
}

/// The revision a LIST must be served at exactly, as Kubernetes reads
/// `resourceVersion` and `resourceVersionMatch`: `Exact` with a revision,
/// or (the older rule) a revision other than 0 with a `limit`; otherwise
/// the latest, which is not older than any revision there is.
fn exact_revision(
    query: &HashMap<String, String>,
    resource_version: Option<i64>,
    limit: usize,
    continued: bool,
) -> Result<Option<i64>, Error> {
    let wanted = query
        .get("resourceVersionMatch")
        .filter(|m| !m.is_empty())
        .map(String::as_str);
    let Some(wanted) = wanted else {
        return Ok(resource_version.filter(|rv| *rv > 0 && limit > 0 && !continued));
    };
    let invalid =
        |message: String| Error::invalid("ListOptions", "", "resourceVersionMatch", message);
    if continued {
        return Err(invalid(
            "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
        ));
    }
    let Some(rv) = resource_version else {
        return Err(invalid(
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                .into(),
        ));
    };
    match wanted {
        "Exact" if rv == 0 => Err(invalid(format!(
            "Forbidden: resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"{rv}\""
        ))),
        "Exact" => Ok(Some(rv)),
        "NotOlderThan" => Ok(None),
        other => Err(invalid(format!(
            "Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
        ))),
    }
}

/// A LIST answered as a value: a table when asked for one.
pub(super) async fn values(
    host: &Host,
    kind: &KindInfo,
    namespace: Option<String>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<(StatusCode, Value), Error> {
    let options = options(namespace, query)?;
    let list = host.api().list(kind, &options).await?;
    // (A table of a whole collection is [`streamed_table`]; this one has a
    // `limit`, which bounds it.)
    let json = list.to_json(kind);
    Ok((
        StatusCode::OK,
        match table::requested(headers, query) {
            Some(include) => table::table(kind, &list.items, json["metadata"].clone(), include),
            None => json,
        },
    ))
}

/// Chunks of a LIST buffered ahead of its client (each about a page): a
/// page is made only once there is room for it here. Two keep a single
/// LIST of a million as fast as a page made while the last waited did
/// (docs/benchmarks/scale.md, "Quiet after the load").
const LIST_CHUNKS_AHEAD: usize = 2;

/// Pages of streamed LISTs written at once, one per core: hundreds of
/// concurrent LISTs then take turns instead of all being runnable at once,
/// and a health check or a small request waits for a page or two, not for
/// a page of every LIST (`scripts/bench clients lists`).
static LIST_PAGES_AT_ONCE: std::sync::LazyLock<tokio::sync::Semaphore> =
    std::sync::LazyLock::new(|| {
        tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(2, usize::from))
    });

/// A LIST answer written a chunk (about a page) at a time: a JSON list
/// ([`setpoint::api::JsonListPages`]) or a table ([`TablePages`]).
trait Chunks: Send + 'static {
    /// The next chunk, or `None` once all is written.
    fn next_chunk(&mut self)
    -> impl Future<Output = setpoint::api::Result<Option<Vec<u8>>>> + Send;
}

impl Chunks for setpoint::api::JsonListPages {
    fn next_chunk(
        &mut self,
    ) -> impl Future<Output = setpoint::api::Result<Option<Vec<u8>>>> + Send {
        setpoint::api::JsonListPages::next_chunk(self)
    }
}

/// The next chunk of `pages`, written in its turn.
async fn next_page(pages: &mut impl Chunks) -> setpoint::api::Result<Option<Vec<u8>>> {
    let _turn = LIST_PAGES_AT_ONCE.acquire().await;
    pages.next_chunk().await
}

/// Objects of a table LIST without a `limit` read and written at a time,
/// at first; then as many as make about [`TABLE_PAGE_BYTES`] of rows
/// (at most [`TABLE_PAGE_MAX`]).
const TABLE_PAGE_FIRST: usize = 100;
const TABLE_PAGE_MAX: usize = 500;
const TABLE_PAGE_BYTES: usize = 1 << 20;

/// How many objects the next page of a table takes, from the bytes of
/// rows the last page of `listed` objects made.
fn next_table_page(listed: usize, bytes: usize) -> usize {
    if listed == 0 || bytes == 0 {
        return TABLE_PAGE_FIRST;
    }
    (TABLE_PAGE_BYTES * listed / bytes).clamp(10, TABLE_PAGE_MAX)
}

/// Whether a LIST answered as a table must be written a page at a time:
/// no `limit` asks for the whole collection (`kubectl get` pages itself
/// with `limit=500`; other clients may not), which built whole would hold
/// every object, decoded, and its rows at once.
pub(super) fn table_streams(query: &HashMap<String, String>) -> bool {
    query.get("limit").is_none_or(|l| l.is_empty() || l == "0")
        && query.get("continue").is_none_or(String::is_empty)
}

/// A table of a whole collection, a page of rows at a time: pages of
/// about a MiB of rows, the first at the latest revision and the others at
/// the same one (through continue tokens), so the table is one snapshot,
/// as a table built whole is.
struct TablePages {
    api: setpoint::api::Api,
    kind: KindInfo,
    options: ListOptions,
    writer: table::TableWriter,
    /// Objects the next page takes.
    limit: usize,
    /// Where the next page starts; `None` once the last page is written.
    next: Option<String>,
    started: bool,
    closed: bool,
}

impl TablePages {
    /// The rows of a page of `options`' objects, and where the next starts.
    async fn page(&mut self, continue_token: Option<String>) -> setpoint::api::Result<Vec<u8>> {
        let options = ListOptions {
            limit: self.limit,
            continue_token,
            ..self.options.clone()
        };
        let list = self.api.list(&self.kind, &options).await?;
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out = self
                .writer
                .opening(serde_json::json!({"resourceVersion": list.resource_version.to_string()}));
        }
        let rows = self.writer.rows(&list.items);
        self.limit = next_table_page(list.items.len(), rows.len());
        self.next = list.continue_token;
        out.extend(rows);
        Ok(out)
    }
}

impl Chunks for TablePages {
    async fn next_chunk(&mut self) -> setpoint::api::Result<Option<Vec<u8>>> {
        if !self.started {
            return self.page(None).await.map(Some);
        }
        match self.next.take() {
            Some(token) => self.page(Some(token)).await.map(Some),
            None if self.closed => Ok(None),
            None => {
                self.closed = true;
                Ok(Some(table::TableWriter::closing().to_vec()))
            }
        }
    }
}

/// A table LIST of a whole collection ([`TablePages`]), written as its
/// client reads ([`streamed`]).
pub(super) async fn streamed_table(
    host: &Host,
    kind: &KindInfo,
    options: ListOptions,
    include: table::IncludeObject,
) -> Response {
    stream(TablePages {
        api: host.api().clone(),
        kind: kind.clone(),
        options,
        writer: table::TableWriter::new(kind, include),
        limit: TABLE_PAGE_FIRST,
        next: None,
        started: false,
        closed: false,
    })
    .await
}

/// A LIST's JSON streamed a page at a time as the client reads it
/// ([`setpoint::api::JsonListPages`]).
pub(super) async fn streamed(host: &Host, kind: &KindInfo, options: &ListOptions) -> Response {
    stream(host.api().list_json_pages(kind, options)).await
}

/// `pages` written as the client reads them: the first chunk is read
/// before the answer starts, so its errors are answered as a `Status`; a
/// later error (the revision compacted under a client that read too
/// slowly) breaks the response off, and the client lists again.
async fn stream(mut pages: impl Chunks) -> Response {
    let first = match next_page(&mut pages).await {
        Ok(first) => first.unwrap_or_default(),
        Err(err) => return ApiError(err).into_response(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(LIST_CHUNKS_AHEAD);
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(first))).await.is_err() {
            return;
        }
        loop {
            // Room first, then the page: a page built while the client has
            // not taken the last one would wait in memory beside it, one
            // more page for every LIST whose client reads slower than the
            // server writes (200 such LISTs held 0.6-0.9 GB).
            let Ok(room) = tx.reserve().await else {
                return;
            };
            let next = tokio::select! {
                next = next_page(&mut pages) => next,
                () = tx.closed() => return,
            };
            let chunk = match next {
                Ok(Some(chunk)) => Ok(Bytes::from(chunk)),
                Ok(None) => return,
                Err(err) => {
                    tracing::info!(%err, "a streamed list broke off");
                    Err(std::io::Error::other(err.to_string()))
                }
            };
            let failed = chunk.is_err();
            room.send(chunk);
            if failed {
                return;
            }
        }
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use http_body_util::BodyExt as _;

    use super::*;

    /// Endless pages of 1 KiB, counting how many were made.
    struct Counted(Arc<AtomicUsize>);

    impl Chunks for Counted {
        async fn next_chunk(&mut self) -> setpoint::api::Result<Option<Vec<u8>>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Some(vec![b' '; 1024]))
        }
    }

    /// Lets the streaming task run as far as it can.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_list_makes_its_next_page_only_once_its_client_has_room_for_it() {
        let made = Arc::new(AtomicUsize::new(0));
        let response = stream(Counted(made.clone())).await;
        settle().await;
        // The pages the channel holds for the client; not one more beside.
        assert_eq!(made.load(Ordering::SeqCst), LIST_CHUNKS_AHEAD);
        let mut body = response.into_body();
        for read in 1..=5 {
            let frame = body.frame().await.expect("a chunk").expect("no error");
            assert_eq!(frame.into_data().expect("data").len(), 1024);
            settle().await;
            assert_eq!(
                made.load(Ordering::SeqCst),
                read + LIST_CHUNKS_AHEAD,
                "after {read} chunks read, one made ahead"
            );
        }
        drop(body);
        settle().await;
        let made_at_the_end = made.load(Ordering::SeqCst);
        settle().await;
        assert_eq!(
            made.load(Ordering::SeqCst),
            made_at_the_end,
            "none after the client left"
        );
    }
}
