//! Informers: list-then-watch caches of one kind (kube-rs' watcher plus
//! reflector), with indexes by owner, namespace and label, change handlers
//! with an optional periodic resync, and a relist when the watch is cut off.
//! [`Informers`] shares one informer per kind between every controller and
//! drops it when nobody holds it any more.
//!
//! The list-then-watch itself is [`watcher`]'s, the one primitive every
//! follower of the store uses (informers, and the system controllers of
//! `crate::system`).
//!
//! # Guarantees
//!
//! - The cache is filled by a list at one revision, then follows the watch
//!   hub from exactly that revision: no gap, no duplicate.
//! - When the hub answers "too old" (the informer fell behind, or history was
//!   lost), the informer relists and reconciles its cache with the new list:
//!   objects gone in the meantime are reported as deleted, changed ones as
//!   applied, unchanged ones not at all — no reconcile storm.
//! - Handlers see every change after they are added; a handler added late is
//!   first told about every object already cached, as [`Change::Listed`].
//! - Objects seen by the first list, by a late handler's replay or by a
//!   periodic resync are reported as [`Change::Listed`], so that consumers can
//!   give them a lower priority than real changes.
//! - An informer lives while a handle to it does: when the last [`Informer`]
//!   clone is dropped its watch stops, and [`Informers`] starts a fresh one on
//!   the next request. A controller that stops removes its handlers
//!   ([`Informer::remove_handler`], which also stops a handler's periodic
//!   resync) and drops its handles.

mod cache;
mod follow;
mod reads;
mod saving;
mod shared;
mod terms;
pub mod watcher;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

pub use cache::Cache;
use cache::Pending;
pub use shared::{InformerStats, Informers};
pub use terms::NotReady;

/// How often an informer that follows the watch notes how far it has
/// seen the store while its kind does not change ([`Informer::delivered`]).
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

use crate::api::Api;
use crate::object::{KindInfo, Object};

/// A change the informer observed.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::informer::{Change, Informer, Informers};
/// use setpoint::object::ObjectKey;
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
///
/// api.create(&events, event("old")).await?;
/// let informer = Informer::start(api.clone(), events.clone());
/// let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
/// let log = seen.clone();
/// informer.add_handler(move |change| {
///     let what = match change {
///         Change::Listed(_) => "listed",
///         Change::Applied(_) => "applied",
///         Change::Deleted(_) => "deleted",
///     };
///     log.lock().unwrap().push(what);
/// });
/// informer.wait_synced().await;
/// api.create(&events, event("new")).await?;
/// informer.wait_for_revision(api.current_revision().await?, Duration::from_secs(5)).await;
/// assert_eq!(*seen.lock().unwrap(), ["listed", "applied"]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub enum Change {
    /// The object was created or changed (or first seen).
    Applied(Arc<Object>),
    /// The object was deleted; this is its last known state.
    Deleted(Arc<Object>),
    /// Not a change: an object cached, reported by the first list, when a
    /// handler is added late, or by a periodic resync. It carries the
    /// object's `metadata` and `status.conditions` (all a handler that maps
    /// objects to keys reads), not necessarily the rest: decoding every
    /// object whole to tell about it cost seconds per million at each
    /// start and resync. [`Informer::get`] has the whole object.
    Listed(Arc<Object>),
}

impl Change {
    /// The object the change is about.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let created = api.create(&events, event("e")).await?;
    /// let change = Change::Applied(Arc::new(created));
    /// assert_eq!(change.object()["metadata"]["name"], "e");
    /// # Ok(()) }
    /// ```
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Change::Applied(o) | Change::Deleted(o) | Change::Listed(o) => o,
        }
    }
}

type Handler = Arc<dyn Fn(&Change) + Send + Sync>;

/// Identifies a registered handler, for [`Informer::remove_handler`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::informer::{Change, Informer, Informers};
/// use setpoint::object::ObjectKey;
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
///
/// let informer = Informer::start(api.clone(), events.clone());
/// let id = informer.add_handler(|_| {});
/// informer.remove_handler(id);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerId(u64);

/// A shared list-then-watch cache of one kind. Cheap to clone; the watch
/// stops when the last clone is dropped.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::informer::{Change, Informer, Informers};
/// use setpoint::object::ObjectKey;
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
///
/// api.create(&events, event("e")).await?;
/// let informer = Informer::start(api.clone(), events.clone());
/// informer.wait_synced().await;
/// assert!(informer.get(&ObjectKey::new(Some("default"), "e")).is_some());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Informer {
    inner: Arc<Inner>,
}

struct Inner {
    kind: Arc<KindInfo>,
    cache: RwLock<Cache>,
    handlers: Mutex<Vec<(HandlerId, Handler, Replay)>>,
    next_handler: std::sync::atomic::AtomicU64,
    synced: watch::Sender<bool>,
    /// The revision the cache reflects, for read-your-writes waits.
    revision: watch::Sender<i64>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The periodic resync task of each handler registered with one, stopped
    /// with its handler: a stopped controller's timer would otherwise sleep
    /// on until its next tick (ten minutes by default) before noticing.
    resyncs: Mutex<HashMap<HandlerId, tokio::task::AbortHandle>>,
    /// Lists the cache was filled from: the first, then one per relist.
    lists: std::sync::atomic::AtomicU64,
    /// The revision up to which every change of the kind has been handed
    /// to the handlers, changes of other kinds included (see
    /// [`Informer::delivered`]); moved by the follower while it watches.
    progress: std::sync::atomic::AtomicI64,
    /// The fewest objects its cache is saved with ([`saving::SAVE_FROM`];
    /// tests lower it).
    save_from: std::sync::atomic::AtomicUsize,
    /// How far past its saved file the store may move before an unchanged
    /// cache is saved again ([`saving::RESAVE_BEHIND`]; tests lower it).
    resave_behind: std::sync::atomic::AtomicI64,
    /// Its first fill was its saved cache, not a list.
    restored: std::sync::atomic::AtomicBool,
}

/// Whether a handler is told about objects that did not change: the first
/// list's and, for a handler added late, the cache's ([`Change::Listed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replay {
    Listed,
    /// Only real changes: the handler catches up by other means (a
    /// controller resuming from its checkpoint).
    ChangesOnly,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
        let resyncs = self.resyncs.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, resync) in resyncs.drain() {
            resync.abort();
        }
    }
}

impl Informer {
    /// Start an informer for `kind`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert!(informer.list(None).is_empty());
    /// # Ok(()) }
    /// ```
    pub fn start(api: Api, kind: Arc<KindInfo>) -> Self {
        let (synced, _) = watch::channel(false);
        let (revision, _) = watch::channel(0);
        // Over a store that reads versions back cheaply, the cache keeps
        // keys and revisions, not objects (see `cache`).
        let cache = match api.backend().version_reader() {
            Some(reader) => Cache::reading_from(cache::Source::new(reader, kind.clone())),
            None => Cache::default(),
        };
        let inner = Arc::new(Inner {
            kind,
            cache: RwLock::new(cache),
            handlers: Mutex::new(Vec::new()),
            next_handler: std::sync::atomic::AtomicU64::new(0),
            synced,
            revision,
            task: Mutex::new(None),
            resyncs: Mutex::default(),
            lists: std::sync::atomic::AtomicU64::new(0),
            progress: std::sync::atomic::AtomicI64::new(0),
            save_from: std::sync::atomic::AtomicUsize::new(saving::SAVE_FROM),
            resave_behind: std::sync::atomic::AtomicI64::new(saving::RESAVE_BEHIND),
            restored: std::sync::atomic::AtomicBool::new(false),
        });
        let task = tokio::spawn(follow::run(Arc::downgrade(&inner), api));
        *inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Self { inner }
    }

    /// The kind this informer follows.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informer = Informer::start(api.clone(), events.clone());
    /// assert_eq!(informer.kind().plural, "events");
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> &Arc<KindInfo> {
        &self.inner.kind
    }

    /// Register a handler; it is first called with every cached object (as
    /// [`Change::Listed`]). Handlers run under the cache lock and must be quick.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// api.create(&events, event("already-there")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// informer.add_handler(move |change| { let _ = tx.send(change.object()["metadata"]["name"].clone()); });
    /// assert_eq!(rx.recv().await.unwrap(), "already-there", "replayed on registration");
    /// # Ok(()) }
    /// ```
    pub fn add_handler(&self, handler: impl Fn(&Change) + Send + Sync + 'static) -> HandlerId {
        self.register(Arc::new(handler), Replay::Listed)
    }

    /// Register a handler that is told only about real changes: not about
    /// the objects of the first list, nor (added late) about those cached
    /// already. For a consumer that knows by other means what it has seen
    /// — a controller resuming from its checkpoint replays the store's
    /// history since then — and would otherwise be told about every object
    /// again at each start. Every change after the handler is added, or
    /// after the first list if it is added before, reaches it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// api.create(&events, event("before")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// informer.add_handler_for_changes(move |change| {
    ///     let _ = tx.send((matches!(change, Change::Applied(_)), change.object()["metadata"]["name"].clone()));
    /// });
    /// informer.wait_synced().await;
    /// api.create(&events, event("after")).await?;
    /// assert_eq!(rx.recv().await.unwrap(), (true, json!("after")), "the listed object is not told");
    /// # Ok(()) }
    /// ```
    pub fn add_handler_for_changes(
        &self,
        handler: impl Fn(&Change) + Send + Sync + 'static,
    ) -> HandlerId {
        self.register(Arc::new(handler), Replay::ChangesOnly)
    }

    fn register(&self, handler: Handler, replay: Replay) -> HandlerId {
        let id = HandlerId(
            self.inner
                .next_handler
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        // Hold the cache lock while replaying so no change slips between the
        // replay and the registration.
        let cache = self.inner.cache.read().unwrap_or_else(|p| p.into_inner());
        if replay == Replay::Listed {
            for object in cache.heads() {
                handler(&Change::Listed(object));
            }
        }
        self.inner
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, handler, replay));
        id
    }

    /// The store revision up to which every change of the kind has been
    /// handed to the handlers (0 before the first list is in). It follows
    /// the store's revision while the kind does not change, within about
    /// [`PROGRESS_EVERY`]: the point from which a consumer that stopped
    /// now would have to replay the store's history to miss nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::Informer;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// let written = api.create(&events, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}})).await?;
    /// let revision: i64 = written["metadata"]["resourceVersion"].as_str().unwrap().parse()?;
    /// assert!(informer.wait_for_revision(revision, std::time::Duration::from_secs(5)).await);
    /// assert!(informer.delivered() >= revision);
    /// # Ok(()) }
    /// ```
    pub fn delivered(&self) -> i64 {
        // Under the cache lock: a change being told (its handlers run under
        // the write lock) is counted only once every handler has had it.
        let cached = self
            .inner
            .cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .revision();
        cached.max(
            self.inner
                .progress
                .load(std::sync::atomic::Ordering::Acquire),
        )
    }

    /// Register a handler that is also told about every cached object (as
    /// [`Change::Listed`]) every `period`: a resync, which repairs anything a
    /// level-triggered consumer may have missed. The resync stops when the
    /// handler is removed or the informer dropped.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// api.create(&events, event("e")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// let id = informer.add_handler_with_resync(move |c| { let _ = tx.send(matches!(c, Change::Listed(_))); }, Duration::from_millis(20));
    /// assert!(rx.recv().await.unwrap(), "the replay on registration");
    /// assert!(rx.recv().await.unwrap(), "a resync, 20 ms later");
    /// informer.remove_handler(id);
    /// # Ok(()) }
    /// ```
    pub fn add_handler_with_resync(
        &self,
        handler: impl Fn(&Change) + Send + Sync + 'static,
        period: std::time::Duration,
    ) -> HandlerId {
        let id = self.add_handler(handler);
        self.resync_every(id, period);
        id
    }

    /// Tell handler `id` about every cached object (as [`Change::Listed`])
    /// every `period` from now on, until it is removed; see
    /// [`Informer::add_handler_with_resync`].
    pub fn resync_every(&self, id: HandlerId, period: std::time::Duration) {
        let weak = Arc::downgrade(&self.inner);
        let resync = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if !inner.resync(id) {
                    return;
                }
            }
        });
        self.inner
            .resyncs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, resync.abort_handle());
    }

    /// Tell handler `id` about every cached object now, as
    /// [`Change::Listed`] (what [`Informer::add_handler`] does at once):
    /// for a handler added for changes only that finds it must catch up
    /// after all. Returns whether the handler is registered.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// api.create(&events, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}})).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// let id = informer.add_handler_for_changes(move |change| { let _ = tx.send(matches!(change, Change::Listed(_))); });
    /// assert!(rx.try_recv().is_err());
    /// assert!(informer.replay_to(id));
    /// assert!(rx.recv().await.unwrap());
    /// # Ok(()) }
    /// ```
    pub fn replay_to(&self, id: HandlerId) -> bool {
        self.inner.resync(id)
    }

    /// Unregister a handler; it is not called again once this returns, and
    /// its periodic resync, if any, stops.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    /// let counter = calls.clone();
    /// let id = informer.add_handler(move |_| { counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst); });
    /// informer.remove_handler(id);
    /// api.create(&events, event("unseen")).await?;
    /// informer.wait_for_revision(api.current_revision().await?, Duration::from_secs(5)).await;
    /// assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    /// # Ok(()) }
    /// ```
    pub fn remove_handler(&self, id: HandlerId) {
        if let Some(resync) = self
            .inner
            .resyncs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        {
            resync.abort();
        }
        // The cache lock orders this after any `apply` in progress.
        let _cache = self.inner.cache.read().unwrap_or_else(|p| p.into_inner());
        self.inner
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(h, _, _)| *h != id);
    }

    /// Wait until the first list has filled the cache.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// api.create(&events, event("e")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert_eq!(informer.list(None).len(), 1, "the first list is in");
    /// # Ok(()) }
    /// ```
    pub async fn wait_synced(&self) {
        let mut rx = self.inner.synced.subscribe();
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Wait until the cache reflects store revision `revision` (or newer),
    /// giving up after `timeout`; returns whether it got there. Used after a
    /// write so that the next reconcile reads its own writes.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informer = Informer::start(api.clone(), events.clone());
    /// let written = api.create(&events, event("e")).await?;
    /// let revision: i64 = written["metadata"]["resourceVersion"].as_str().unwrap().parse()?;
    /// assert!(informer.wait_for_revision(revision, Duration::from_secs(5)).await);
    /// assert!(informer.get(&ObjectKey::of(&written)).is_some(), "it reads its own write");
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_revision(&self, revision: i64, timeout: std::time::Duration) -> bool {
        let mut rx = self.inner.revision.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= revision))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl Inner {
    /// Whether the cache reads objects back from the store ([`cache`]).
    fn reads_back(&self) -> bool {
        self.cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .reads_back()
    }

    /// Lets go of recent objects the store now reads back ([`Cache::shed`]).
    fn shed(&self) {
        self.cache.write().unwrap_or_else(|p| p.into_inner()).shed();
    }

    /// Replays the cache to handler `id` as [`Change::Listed`]; returns
    /// whether the handler is still registered.
    fn resync(&self, id: HandlerId) -> bool {
        let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
        let handler = self
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(h, _, _)| *h == id)
            .map(|(_, handler, _)| handler.clone());
        let Some(handler) = handler else {
            return false;
        };
        for object in cache.heads() {
            handler(&Change::Listed(object));
        }
        true
    }

    fn apply(&self, changes: impl FnOnce(&mut Cache) -> Vec<Change>) {
        self.tell(
            |cache| changes(cache).into_iter().map(Pending::Ready).collect(),
            false,
        );
    }

    /// Fills the cache from a list of the kind's objects, their terms read
    /// already (before the cache is locked, [`cache::read_terms`]) at
    /// `revision` ([`Cache::replace_read`]); objects are decoded only to
    /// tell handlers about them, one at a time, and not at all if there
    /// are none. The first list's objects are [`Change::Listed`].
    /// A list (or the saved cache) filled the cache: counted, and the
    /// informer synced.
    fn filled(&self) {
        self.lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.synced.send_replace(true);
    }

    fn apply_list(&self, items: Vec<(terms::Terms, cache::Text)>, revision: i64, first_list: bool) {
        let (started, objects) = (std::time::Instant::now(), items.len());
        self.tell(|cache| cache.replace_read(items, revision), first_list);
        tracing::debug!(kind = %self.kind.kind, objects, took = ?started.elapsed(), "informer filled from a list");
    }

    fn tell(&self, changes: impl FnOnce(&mut Cache) -> Vec<Pending>, first_list: bool) {
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        let changes = changes(&mut cache);
        cache.shed();
        self.revision.send_replace(cache.revision());
        // Handlers run under the write lock so that `add_handler`'s replay and
        // later changes are ordered; handlers must be quick (they enqueue keys).
        let handlers = self
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // The first list tells only what exists: nobody to tell if every
        // handler wants changes only (not even worth decoding for).
        if handlers
            .iter()
            .all(|(_, _, replay)| first_list && *replay == Replay::ChangesOnly)
        {
            return;
        }
        for pending in changes {
            // Decoded one at a time, and dropped once told: a list of every
            // object decoded at once is ten times the cache.
            let Some(change) = cache.change(pending, first_list) else {
                continue;
            };
            let listed = matches!(change, Change::Listed(_));
            for (_, handler, replay) in &handlers {
                if !(listed && *replay == Replay::ChangesOnly) {
                    handler(&change);
                }
            }
        }
        drop(cache);
    }
}

#[cfg(test)]
mod read_back_tests;
#[cfg(test)]
mod saving_tests;
#[cfg(test)]
mod tests;
