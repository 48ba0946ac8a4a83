//! The one list-watch primitive (kube-runtime's `watcher`): every object
//! under a key prefix, listed at one revision, then every change after that
//! revision from the watch hub, as a stream of [`Event`]s. Informers, the
//! definition follower and the garbage collector are consumers; the
//! watcher owns listing, subscribing and relisting, and nothing else.
//!
//! # Guarantees
//!
//! - A list is paged ([`PAGE`] keys a page) at the revision of its first
//!   page, and the watch starts after exactly that revision: no change is
//!   missed or seen twice across the list and the watch.
//! - Every list, the first and each relist, is `Init`, one `InitApply` per
//!   stored object, then `InitDone { revision }`: a consumer rebuilds its
//!   state from it. A list that fails half-way starts over with a new
//!   `Init`, so a consumer discards what it buffered since the last one.
//! - When the watch breaks (the hub answers "too old": the watcher fell
//!   behind or history was compacted) or a list fails, the watcher relists
//!   after a backoff that doubles from [`MIN_BACKOFF`] to [`MAX_BACKOFF`]
//!   while it keeps failing, and starts over once a list and its watch
//!   succeed.
//! - [`Watcher::next`] is cancel safe: dropping its future (in a
//!   `tokio::select!`, say) loses no event and resets no backoff.
//! - The stream ends (`None`) only when the watch hub stops.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::Api;
use crate::queue::{ExponentialBackoff, RateLimiter};
use crate::store::{Backend, KeyValue, Range, Revision};
use crate::watch::{self, EventType, Subscription, WatchHub};

/// Keys per page of a list.
pub const PAGE: usize = 500;
/// The first wait before a relist after a failure.
pub const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait before a relist.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a [`Watcher`] yields.
#[derive(Debug, Clone)]
pub enum Event {
    /// A list starts: what follows replaces everything seen before.
    Init,
    /// One stored object of the list, as stored (decode it with
    /// [`object::codec::decode`](crate::object::codec::decode) and the
    /// key-value's `mod_revision`).
    InitApply(KeyValue),
    /// The list is complete, at `revision`; the changes after it follow.
    InitDone {
        /// The revision the list was read at.
        revision: Revision,
    },
    /// An object was created or changed.
    Apply(Arc<watch::Event>),
    /// An object was deleted; the event carries its last state.
    Delete(Arc<watch::Event>),
}

/// A list-then-watch of one key prefix (see the module docs).
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::informer::watcher::{Event, Watcher};
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
///
/// api.create(&events, event("listed")).await?;
/// let mut watcher = Watcher::new(&api, &Api::prefix(&events, None));
/// assert!(matches!(watcher.next().await, Some(Event::Init)));
/// assert!(matches!(watcher.next().await, Some(Event::InitApply(kv)) if kv.key.ends_with("/listed")));
/// assert!(matches!(watcher.next().await, Some(Event::InitDone { revision: 1 })));
/// api.create(&events, event("watched")).await?;
/// assert!(matches!(watcher.next().await, Some(Event::Apply(e)) if e.revision == 2));
/// # Ok(()) }
/// ```
pub struct Watcher {
    backend: Arc<dyn Backend>,
    hub: WatchHub,
    prefix: String,
    state: State,
    /// Consecutive failures, for the wait before the next list.
    backoff: ExponentialBackoff<()>,
    /// No list starts before this (kept here, not in a sleep, so that a
    /// cancelled `next` resumes the same wait).
    not_before: Option<Instant>,
    /// The store's history after the revision of the list in progress,
    /// held from the compactor until the list is done.
    hold: ListHold,
}

/// Holds the store's history after a list's revision from the compactor
/// ([`Api::hold_history`]) while the list pages through it. A list of a
/// million objects under sustained writes takes longer than the compactor
/// keeps history: each page at the list's revision then failed as
/// compacted and the list started over, again and again (a whole-store
/// list of the garbage collector never finished during a load at a
/// million; docs/benchmarks/scale.md). The compactor honours a hold only
/// while it is a bounded amount of writes behind, so a list that stalls
/// cannot keep history without bound.
struct ListHold {
    api: Api,
    /// The holder's name, one per watcher.
    name: String,
    held: bool,
}

impl ListHold {
    fn new(api: &Api, prefix: &str) -> Self {
        static WATCHERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = WATCHERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            api: api.clone(),
            name: format!("the list of {prefix} (watcher {number})"),
            held: false,
        }
    }

    /// Holds what a read at `revision` needs: a compaction point below it
    /// (a hold keeps the history *after* its revision).
    fn hold(&mut self, revision: Revision) {
        if !self.held {
            self.api.hold_history(&self.name, revision - 1);
            self.held = true;
        }
    }

    fn release(&mut self) {
        if self.held {
            self.api.release_history(&self.name);
            self.held = false;
        }
    }
}

impl Drop for ListHold {
    fn drop(&mut self) {
        self.release();
    }
}

enum State {
    /// Next: `Init`, then the first page.
    Start,
    Listing(Pager, std::vec::IntoIter<KeyValue>),
    Watching(Subscription),
    Closed,
}

impl Watcher {
    /// A watcher of every object under `prefix` in `api`'s store. Nothing
    /// is read until [`next`](Self::next).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::api::Api;
    /// use setpoint::informer::watcher::Watcher;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let watcher = Watcher::new(&api, "/registry/");
    /// assert!(!watcher.is_watching(), "lists first");
    /// # Ok(()) }
    /// ```
    pub fn new(api: &Api, prefix: &str) -> Self {
        Self {
            backend: api.backend().clone(),
            hub: api.hub().clone(),
            prefix: prefix.to_owned(),
            state: State::Start,
            backoff: ExponentialBackoff::new(MIN_BACKOFF, MAX_BACKOFF),
            not_before: None,
            hold: ListHold::new(api, prefix),
        }
    }

    /// A watcher that follows the watch after `revision` at once, for a
    /// consumer that holds what a list at `revision` gives (an informer's
    /// saved cache, caught up): it lists only if the watch cannot start
    /// there, as after a broken watch.
    pub(crate) fn resume(api: &Api, prefix: &str, revision: Revision) -> Self {
        let mut watcher = Self::new(api, prefix);
        match watcher.hub.subscribe(prefix, revision) {
            Ok(subscription) => watcher.state = State::Watching(subscription),
            Err(watch::Error::Closed) => watcher.state = State::Closed,
            Err(err) => {
                tracing::debug!(prefix, %err, "cannot watch from the saved revision; listing");
            }
        }
        watcher
    }

    /// The next event; `None` once the watch hub has stopped. Cancel safe.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::watcher::{Event, Watcher};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let created = api
    ///     .create(&events, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}}))
    ///     .await?;
    /// let mut watcher = Watcher::new(&api, "/registry/");
    /// while !matches!(watcher.next().await, Some(Event::InitDone { .. })) {}
    /// api.delete(&events, Some("default"), "e", &Default::default()).await?;
    /// let Some(Event::Delete(gone)) = watcher.next().await else { panic!("a delete") };
    /// assert_eq!(gone.object["metadata"]["uid"], created["metadata"]["uid"]);
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            match &mut self.state {
                State::Closed => return None,
                State::Start => {
                    if let Some(at) = self.not_before {
                        tokio::time::sleep_until(at).await;
                        self.not_before = None;
                    }
                    self.state = State::Listing(Pager::new(&self.prefix), Vec::new().into_iter());
                    return Some(Event::Init);
                }
                State::Listing(pager, page) => {
                    if let Some(kv) = page.next() {
                        return Some(Event::InitApply(kv));
                    }
                    if !pager.done() {
                        match pager.next_page(&self.backend).await {
                            Ok(kvs) => {
                                *page = kvs.into_iter();
                                if !pager.done() {
                                    // More pages to read at this revision.
                                    self.hold.hold(pager.revision());
                                }
                            }
                            Err(err) => {
                                tracing::warn!(prefix = %self.prefix, %err, "list failed; listing again");
                                self.start_over();
                            }
                        }
                        continue;
                    }
                    let revision = pager.revision();
                    // Every page is read: the watch takes over from here.
                    self.hold.release();
                    match self.hub.subscribe(&self.prefix, revision) {
                        Ok(subscription) => {
                            self.state = State::Watching(subscription);
                            self.backoff.forget(&());
                            return Some(Event::InitDone { revision });
                        }
                        Err(watch::Error::Closed) => self.state = State::Closed,
                        Err(err) => {
                            tracing::debug!(prefix = %self.prefix, %err, "cannot watch from the list; listing again");
                            self.start_over();
                        }
                    }
                }
                State::Watching(subscription) => match subscription.next().await {
                    Ok(event) if event.kind == EventType::Deleted => {
                        return Some(Event::Delete(event));
                    }
                    Ok(event) => return Some(Event::Apply(event)),
                    Err(watch::Error::Closed) => self.state = State::Closed,
                    Err(err) => {
                        tracing::info!(prefix = %self.prefix, %err, "watch broke; listing again");
                        self.start_over();
                    }
                },
            }
        }
    }

    /// List again at once (a periodic resync): the next event is `Init`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::api::Api;
    /// use setpoint::informer::watcher::{Event, Watcher};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let mut watcher = Watcher::new(&api, "/registry/");
    /// while !matches!(watcher.next().await, Some(Event::InitDone { .. })) {}
    /// watcher.relist();
    /// assert!(matches!(watcher.next().await, Some(Event::Init)));
    /// # Ok(()) }
    /// ```
    pub fn relist(&mut self) {
        if !matches!(self.state, State::Closed) {
            self.hold.release();
            self.state = State::Start;
        }
    }

    /// Whether the watcher follows the watch (its list is done).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::api::Api;
    /// use setpoint::informer::watcher::{Event, Watcher};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let mut watcher = Watcher::new(&api, "/registry/");
    /// while !matches!(watcher.next().await, Some(Event::InitDone { .. })) {}
    /// assert!(watcher.is_watching());
    /// # Ok(()) }
    /// ```
    pub fn is_watching(&self) -> bool {
        matches!(self.state, State::Watching(_))
    }

    /// The revision every change up to which has been yielded, while
    /// watching (see [`Subscription::progress`]); `None` while listing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::api::Api;
    /// use setpoint::informer::watcher::{Event, Watcher};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let mut watcher = Watcher::new(&api, "/registry/");
    /// assert_eq!(watcher.progress(), None);
    /// while !matches!(watcher.next().await, Some(Event::InitDone { .. })) {}
    /// assert_eq!(watcher.progress(), Some(0));
    /// # Ok(()) }
    /// ```
    pub fn progress(&self) -> Option<Revision> {
        match &self.state {
            State::Watching(subscription) => Some(subscription.progress(&self.hub)),
            _ => None,
        }
    }

    /// After a failure: list again once the backoff has passed.
    fn start_over(&mut self) {
        self.hold.release();
        self.not_before = Some(Instant::now() + self.backoff.when(&()));
        self.state = State::Start;
    }
}

/// Pages through every key under a prefix at the revision of the first
/// page. Cancel safe: it moves on only when a page has arrived. Once the
/// revision is known, the next page is read while the caller handles this
/// one (on the embedded store a page is read on the blocking pool, so the
/// read and the caller's work overlap on two cores).
pub(crate) struct Pager {
    prefix: String,
    revision: Option<Revision>,
    start_after: Option<String>,
    done: bool,
    /// The next page, being read.
    ahead: Option<tokio::task::JoinHandle<crate::store::Result<crate::store::RangeResult>>>,
}

impl Drop for Pager {
    fn drop(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            ahead.abort();
        }
    }
}

impl Pager {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            revision: None,
            start_after: None,
            done: false,
            ahead: None,
        }
    }

    /// Whether the last page has been read.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// The revision the pages are read at (0 before the first page).
    pub(crate) fn revision(&self) -> Revision {
        self.revision.unwrap_or_default()
    }

    /// The next page (empty once done).
    pub(crate) async fn next_page(
        &mut self,
        backend: &Arc<dyn Backend>,
    ) -> crate::store::Result<Vec<KeyValue>> {
        if self.done {
            return Ok(Vec::new());
        }
        let page = match &mut self.ahead {
            // Awaited in place: a cancelled call leaves it for the next.
            Some(ahead) => {
                let page = ahead.await.map_err(|err| {
                    crate::store::Error::Unavailable(format!("a list page's read failed: {err}"))
                });
                self.ahead = None;
                page??
            }
            None => backend.range(self.range()).await?,
        };
        self.revision = Some(page.revision);
        match page.kvs.last() {
            Some(last) if page.more => {
                self.start_after = Some(last.key.clone());
                let (backend, range) = (backend.clone(), self.range());
                self.ahead = Some(tokio::spawn(async move { backend.range(range).await }));
            }
            _ => self.done = true,
        }
        Ok(page.kvs)
    }

    /// The range of the next page.
    fn range(&self) -> Range {
        Range {
            prefix: self.prefix.clone(),
            start_after: self.start_after.clone(),
            limit: PAGE,
            revision: self.revision,
        }
    }
}

#[cfg(test)]
#[path = "watcher_tests.rs"]
mod tests;
