//! [`JsonListPages`]: a list's JSON text written a page of the store at a
//! time, for a server that streams it to its client: what a LIST holds at
//! once is a page (about [`PAGE_BYTES`] to [`MAX_PAGE_BYTES`]), not the
//! whole list twice (the stored values and the text), whatever the list's
//! size.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::list::{Filter, compacted_is_gone, decode_continue, encode_continue, write_json};
use super::{Api, ListOptions, Result};
use crate::object::KindInfo;
use crate::store::{Backend, Range, RangeResult, Revision, VersionRef, WrittenRange};

/// About how many bytes of stored objects one page of a list that is not
/// streamed reads: the number of keys per page adapts to the objects' size
/// to stay near the page's target.
pub const PAGE_BYTES: usize = 1 << 20;

/// The least a streamed list's page aims at, when very many stream at
/// once: a list holds about two pages (the one its client is sent, the
/// next), so 200 LISTs of 1 MiB pages held 0.6-0.9 GB (BENCHMARKS.md,
/// "Hostile clients"); of this size, a tenth of that.
const LEAST_PAGE_BYTES: usize = 256 << 10;

/// The most a page aims at: when few lists stream, each reads larger
/// pages, which costs less per object (the store's reads of a page are
/// spread over threads and joined; a LIST of a million took three
/// quarters of the time with pages of 4 MiB: docs/benchmarks/scale.md,
/// "Larger pages while few lists stream").
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// What the pages of all streaming lists aim at together: a page's target
/// is this shared among them, between [`LEAST_PAGE_BYTES`] and
/// [`MAX_PAGE_BYTES`]. A list holds about three pages at once (the one
/// read ahead, the one being written out, the one its client is sent), so
/// four lists of large pages hold about what sixteen of small ones do.
const PAGES_BUDGET: usize = 16 << 20;

/// How many lists may stream at once with each reading its next page
/// while it writes out the last: that page is one more held per list, and
/// its read runs outside the turns the lists' pages take, so beyond this
/// many lists each reads its next page only when asked (200 LISTs at once
/// kept `/healthz` waiting several times longer with every one reading
/// ahead: BENCHMARKS.md, "Hostile clients").
const READ_AHEAD_LISTS: usize = 4;

const FIRST_PAGE_KEYS: usize = 128;
const MAX_PAGE_KEYS: usize = 16384;

/// The bytes a page of one of `streaming` lists aims at.
fn page_target(streaming: usize) -> usize {
    (PAGES_BUDGET / streaming.max(1)).clamp(LEAST_PAGE_BYTES, MAX_PAGE_BYTES)
}

/// One streaming list, counted in its API's count of streaming lists
/// while it lives.
struct Streaming(Arc<AtomicUsize>);

impl Streaming {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }

    /// The bytes this list's next page aims at.
    fn page_target(&self) -> usize {
        page_target(self.0.load(Ordering::Relaxed))
    }

    /// Whether few enough lists stream for this one to read ahead.
    fn may_read_ahead(&self) -> bool {
        self.0.load(Ordering::Relaxed) <= READ_AHEAD_LISTS
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The JSON text of a list (byte for byte the `…List` object of
/// [`Api::list`]; [`Api::list_json`] gathers it), in chunks of about a
/// page each; see the module docs.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// for i in 0..1000 {
///     let note = "x".repeat(10_000);
///     api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
///         "metadata": {"name": format!("e{i:03}"), "namespace": "default"}, "note": note})).await?;
/// }
/// let mut pages = api.list_json_pages(&events, &Default::default());
/// let mut text: Vec<u8> = Vec::new();
/// let mut chunks = 0;
/// while let Some(chunk) = pages.next_chunk().await? {
///     text.extend_from_slice(&chunk);
///     chunks += 1;
/// }
/// assert!(chunks > 2, "a page at a time");
/// assert_eq!(text, api.list_json(&events, &Default::default()).await?);
/// # Ok(()) }
/// ```
pub struct JsonListPages {
    api: Api,
    kind: KindInfo,
    options: ListOptions,
    filter: Option<Filter>,
    prefix: String,
    revision: Option<Revision>,
    start_after: Option<String>,
    taken: usize,
    page_keys: usize,
    state: State,
    /// The next page's read, started as soon as the last one was read:
    /// the store reads a page while the server writes out the one before.
    ahead: Option<tokio::task::JoinHandle<crate::store::Result<PageRead>>>,
    /// Counted among the streaming lists until written out or dropped.
    streaming: Option<Streaming>,
    /// The parts of a page written in place after its first, each handed
    /// out as a chunk of its own.
    parts: std::collections::VecDeque<Vec<u8>>,
}

/// A page as the store read it: its values, to be filtered, or (a list
/// of everything) its items already written, where the store read them
/// and on the threads that did ([`Backend::range_written`]: no copy of
/// each value, and the writing spread over the store's reader threads).
enum PageRead {
    Values(RangeResult),
    Written(WrittenRange),
}

impl PageRead {
    fn revision(&self) -> Revision {
        match self {
            Self::Values(page) => page.revision,
            Self::Written(page) => page.revision,
        }
    }

    fn more(&self) -> bool {
        match self {
            Self::Values(page) => page.more,
            Self::Written(page) => page.more,
        }
    }

    fn value_bytes(&self) -> usize {
        match self {
            Self::Values(page) => page.kvs.iter().map(|kv| kv.value.len()).sum(),
            Self::Written(page) => page.value_bytes,
        }
    }

    fn last_key(&self) -> Option<String> {
        match self {
            Self::Values(page) => page.kvs.last().map(|kv| kv.key.clone()),
            Self::Written(page) => page.last_key.clone(),
        }
    }
}

/// Reads a page: written in place when every object is listed.
async fn read_page(
    backend: Arc<dyn Backend>,
    range: Range,
    everything: bool,
) -> crate::store::Result<PageRead> {
    if everything {
        let write: Arc<crate::store::WriteVersion> = Arc::new(write_item);
        backend
            .range_written(range, write)
            .await
            .map(PageRead::Written)
    } else {
        backend.range(range).await.map(PageRead::Values)
    }
}

/// An item of a list written in place: a comma, then the object (the
/// list's first item goes without its comma).
fn write_item(version: VersionRef<'_>, out: &mut Vec<u8>) -> crate::store::Result<()> {
    out.push(b',');
    Api::write_version(version, out)
}

#[derive(PartialEq)]
enum State {
    Start,
    Items { first: bool },
    Done,
}

impl Api {
    /// A list's JSON text a page at a time: [`JsonListPages`].
    pub fn list_json_pages(&self, kind: &KindInfo, options: &ListOptions) -> JsonListPages {
        JsonListPages {
            api: self.clone(),
            kind: kind.clone(),
            options: options.clone(),
            filter: None,
            prefix: Api::prefix(kind, options.namespace.as_deref()),
            revision: None,
            start_after: None,
            taken: 0,
            page_keys: FIRST_PAGE_KEYS,
            state: State::Start,
            ahead: None,
            streaming: Some(Streaming::new(&self.streaming)),
            parts: std::collections::VecDeque::new(),
        }
    }
}

impl JsonListPages {
    /// The next chunk of the text, or `None` once it is all written. The
    /// first call checks the options and reads the first page: its error
    /// is the list's (a bad selector, a compacted continue token).
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if let Some(part) = self.parts.pop_front() {
            return Ok(Some(part));
        }
        let mut out = Vec::new();
        if self.state == State::Start {
            self.filter = Some(Filter::parse(&self.options)?);
            self.revision = self.options.revision;
            if let Some(rv) = self.revision {
                self.api.check_listable(rv).await?;
            }
            if let Some(token) = &self.options.continue_token {
                let (rv, start) = decode_continue(token)?;
                self.revision = Some(rv);
                self.start_after = Some(start);
            }
            out.extend_from_slice(br#"{"apiVersion":"#);
            write_json(&mut out, &self.kind.api_version());
            out.extend_from_slice(br#","items":["#);
            self.state = State::Items { first: true };
        }
        let State::Items { mut first } = self.state else {
            return Ok(None);
        };
        let limit = self.options.limit;
        let page = match &mut self.ahead {
            // Awaited in place: a cancelled call leaves it for the next.
            Some(ahead) => {
                let page = ahead.await.map_err(|err| {
                    crate::store::Error::Unavailable(format!("a list page's read failed: {err}"))
                });
                self.ahead = None;
                page?
            }
            None => {
                read_page(
                    self.api.backend.clone(),
                    self.next_range(),
                    self.everything(),
                )
                .await
            }
        }
        .map_err(compacted_is_gone)?;
        let (revision, more) = (page.revision(), page.more());
        self.revision = Some(revision);
        let bytes = page.value_bytes();
        // Near the target a page, whatever the objects' size.
        let target = self
            .streaming
            .as_ref()
            .map_or(PAGE_BYTES, Streaming::page_target);
        if bytes > 2 * target && self.page_keys > 1 {
            self.page_keys /= 2;
        } else if bytes < target / 2 && self.page_keys < MAX_PAGE_KEYS {
            self.page_keys *= 2;
        }
        let last_key = page.last_key();
        // Without a limit the next page is known to be wanted: it is read
        // while this one is written out, unless many lists stream.
        let ahead_allowed = self
            .streaming
            .as_ref()
            .is_some_and(Streaming::may_read_ahead);
        let read_on = ahead_allowed && limit == 0 && more && last_key.is_some();
        if read_on {
            self.start_after.clone_from(&last_key);
            self.read_ahead();
        }
        match page {
            PageRead::Values(page) => {
                // Each item grows by its version and a comma.
                out.reserve(bytes + 32 * page.kvs.len());
                let filter = self.filter.as_ref().expect("parsed at the start");
                for kv in &page.kvs {
                    if !filter.is_everything() && !filter.matches(&Api::decode(kv)?) {
                        continue;
                    }
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    Api::write_stored(kv, &mut out)?;
                    self.taken += 1;
                }
            }
            PageRead::Written(page) => {
                self.taken += page.count;
                let mut parts = page.parts.into_iter().filter(|part| !part.is_empty());
                if std::mem::take(&mut first) {
                    if let Some(part) = parts.next() {
                        // The list's first item: no comma before it.
                        out.extend_from_slice(&part[1..]);
                    }
                } else if out.is_empty()
                    && let Some(part) = parts.next()
                {
                    // Taken as it is: the chunk starts with it.
                    out = part;
                }
                // The others are chunks of their own: not copied together.
                self.parts.extend(parts);
            }
        }
        self.state = State::Items { first };
        let full = limit != 0 && self.taken >= limit;
        let token = match (&last_key, more, full) {
            (None, _, _) | (_, false, _) => None,
            (Some(last), true, true) => Some(encode_continue(revision, last)),
            (Some(_), true, false) => {
                if !read_on {
                    self.start_after = last_key;
                    if ahead_allowed {
                        self.read_ahead();
                    }
                }
                return Ok(Some(out));
            }
        };
        let mut tail = Vec::new();
        tail.extend_from_slice(br#"],"kind":"#);
        write_json(&mut tail, &self.kind.list_kind);
        tail.extend_from_slice(br#","metadata":{"#);
        if let Some(token) = &token {
            tail.extend_from_slice(br#""continue":"#);
            write_json(&mut tail, token);
            tail.push(b',');
        }
        tail.extend_from_slice(br#""resourceVersion":""#);
        tail.extend_from_slice(revision.to_string().as_bytes());
        tail.extend_from_slice(br#""}}"#);
        // After the page's last part.
        match self.parts.back_mut() {
            Some(last) => last.extend_from_slice(&tail),
            None => out.extend_from_slice(&tail),
        }
        self.state = State::Done;
        self.streaming = None;
        Ok(Some(out))
    }

    /// The range of the next page: after the last key read, as many keys
    /// as a page takes (or as the limit leaves).
    fn next_range(&self) -> Range {
        let limit = self.options.limit;
        Range {
            prefix: self.prefix.clone(),
            start_after: self.start_after.clone(),
            limit: if limit == 0 {
                self.page_keys
            } else {
                (limit - self.taken).min(self.page_keys)
            },
            revision: self.revision,
        }
    }

    /// Whether every object is listed (no selector).
    fn everything(&self) -> bool {
        self.filter.as_ref().is_some_and(Filter::is_everything)
    }

    /// Starts reading the next page (of the size the next call asks for).
    fn read_ahead(&mut self) {
        let read = read_page(
            self.api.backend.clone(),
            self.next_range(),
            self.everything(),
        );
        self.ahead = Some(tokio::spawn(read));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::MemoryBackend;

    #[test]
    fn pages_share_a_budget_between_the_least_and_the_most() {
        assert_eq!(page_target(0), MAX_PAGE_BYTES);
        assert_eq!(page_target(1), MAX_PAGE_BYTES);
        assert_eq!(page_target(4), MAX_PAGE_BYTES);
        assert_eq!(page_target(8), PAGES_BUDGET / 8);
        assert_eq!(page_target(16), PAGES_BUDGET / 16);
        assert_eq!(page_target(64), LEAST_PAGE_BYTES);
        assert_eq!(
            page_target(10_000),
            LEAST_PAGE_BYTES,
            "never below the least"
        );
        // What many lists hold together stays that of small pages.
        for lists in [1, 2, 4, 8, 16, 64, 200] {
            assert!(
                page_target(lists) * lists <= (PAGES_BUDGET).max(LEAST_PAGE_BYTES * lists),
                "{lists} lists"
            );
        }
    }

    #[tokio::test]
    async fn a_list_reads_ahead_only_while_few_lists_stream() {
        let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
        let events = api.kinds().require("v1", "Event").unwrap();
        for i in 0..400 {
            let object = serde_json::json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": format!("e{i:03}"), "namespace": "default"}});
            api.create(&events, object).await.unwrap();
        }
        let options = ListOptions::default();
        let mut alone = api.list_json_pages(&events, &options);
        alone.next_chunk().await.unwrap().unwrap();
        assert!(
            alone.ahead.is_some(),
            "a list alone reads its next page ahead"
        );
        let others: Vec<_> = (0..READ_AHEAD_LISTS)
            .map(|_| api.list_json_pages(&events, &options))
            .collect();
        let mut crowded = api.list_json_pages(&events, &options);
        let mut text = crowded.next_chunk().await.unwrap().unwrap();
        assert!(crowded.ahead.is_none(), "one of many reads ahead");
        while let Some(chunk) = crowded.next_chunk().await.unwrap() {
            assert!(crowded.ahead.is_none());
            text.extend(chunk);
        }
        assert_eq!(
            text,
            api.list_json(&events, &options).await.unwrap(),
            "pages read when asked make the same list"
        );
        drop((alone, others));
    }

    #[tokio::test]
    async fn a_list_counts_as_streaming_while_it_lives() {
        let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
        let events = api.kinds().require("v1", "Event").unwrap();
        let streaming = || api.streaming.load(Ordering::Relaxed);
        let one = api.list_json_pages(&events, &Default::default());
        let two = api.list_json_pages(&events, &Default::default());
        assert_eq!(streaming(), 2);
        assert_eq!(
            one.streaming.as_ref().map(Streaming::page_target),
            Some(page_target(2))
        );
        drop(one);
        assert_eq!(streaming(), 1, "a dropped list no longer counts");
        let mut two = two;
        while two.next_chunk().await.unwrap().is_some() {}
        assert_eq!(streaming(), 0, "nor one written out");
        drop(two);
        assert_eq!(streaming(), 0);
    }
}
