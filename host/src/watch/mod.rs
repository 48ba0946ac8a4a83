//! The watch hub: one cache of recent changes per store, decoded once and
//! fanned out to every subscriber (informers, HTTP watchers) as shared
//! `Arc<Event>`s, never copied per subscriber.
//!
//! # Contract
//!
//! - The hub follows the backend's own watch, so it sees every write from
//!   any host sharing the backend.
//! - A subscription starts after a revision and yields every later change
//!   under its key prefix, in revision order, with no gap and no duplicate.
//! - History is bounded, in changes and in bytes ([`DEFAULT_HISTORY_BYTES`]
//!   of decoded objects: a few fat objects rewritten must not make it hold
//!   gigabytes). Subscribing before the oldest retained change fails
//!   with [`Error::TooOldResourceVersion`] (HTTP 410 on the API); the caller
//!   relists.
//! - Like tokio's broadcast channel, a subscriber that falls more than the
//!   channel's capacity behind is cut off with the same error. Writers never
//!   wait for subscribers, and memory stays bounded.

mod subscription;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::object::{Object, codec};
use crate::store::{self, Backend, EventKind, Revision};

pub use subscription::Subscription;

/// Default number of changes kept for late subscribers, which is also how
/// far a subscriber may fall behind before it is cut off. A power of two,
/// because the broadcast channel rounds its capacity up to one.
pub const DEFAULT_HISTORY: usize = 8192;

/// The most bytes of memory the history's decoded objects may take (as
/// estimated from their shape, not their stored size, which may be ten
/// times smaller), whatever the number of changes.
pub const DEFAULT_HISTORY_BYTES: usize = 64 << 20;

/// Changes older than this are let go once the history holds more than
/// [`STALE_KEPT`] changes or bytes (Kubernetes' watch cache shrinks past its
/// `eventFreshDuration` of 75 s alike): memory spent on fat objects returns
/// when their writes stop, and a watcher resuming from further back
/// relists.
pub const HISTORY_FRESH: std::time::Duration = std::time::Duration::from_secs(75);

/// How many changes, and bytes, of stale history are kept anyway: a host
/// at rest still lets its watchers resume after a short break.
const STALE_KEPT: (usize, usize) = (1024, 4 << 20);

/// How often stale history is looked for while no change comes.
const STALE_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Granularity of the hub's tally of bytes written, which tells the
/// compactor how far back history holds a given number of bytes.
const MARK_BYTES: u64 = 1 << 20;

/// What happened to an object.
///
/// ```
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, MemoryBackend};
/// use setpoint::watch::{EventType, WatchHub};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryBackend::new());
/// let hub = WatchHub::start(store.clone(), 16).await?;
///
/// let mut changes = hub.subscribe("/", 0)?;
/// store.put("/k", br#"{"n": 1}"#.to_vec(), Condition::Any).await?;
/// store.put("/k", br#"{"n": 2}"#.to_vec(), Condition::Any).await?;
/// store.delete("/k", Condition::Any).await?;
/// let kinds = [changes.next().await?.kind, changes.next().await?.kind, changes.next().await?.kind];
/// assert_eq!(kinds, [EventType::Added, EventType::Modified, EventType::Deleted]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed; the object is its last state.
    Deleted,
}

/// One change to one object, shared by all subscribers.
///
/// ```
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, MemoryBackend};
/// use setpoint::watch::{EventType, WatchHub};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryBackend::new());
/// let hub = WatchHub::start(store.clone(), 16).await?;
///
/// let mut changes = hub.subscribe("/", 0)?;
/// store.put("/k", br#"{"metadata": {"name": "k"}}"#.to_vec(), Condition::Any).await?;
/// let event = changes.next().await?;
/// assert_eq!((event.revision, event.key.as_str()), (1, "/k"));
/// assert_eq!(event.object["metadata"]["resourceVersion"], "1", "decoded once, for everyone");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Event {
    /// The store revision of the change.
    pub revision: Revision,
    /// Added, modified or deleted.
    pub kind: EventType,
    /// The store key of the object.
    pub key: String,
    /// The object after the change (before it, for a delete), with
    /// `metadata.resourceVersion` set to `revision`.
    pub object: Arc<Object>,
    /// The size of the object as stored (encoded), in bytes.
    pub size: usize,
    /// When the hub received it (for letting go of stale history).
    pub received: tokio::time::Instant,
    /// The object as JSON, encoded by the first subscriber that asks.
    json: std::sync::OnceLock<bytes::Bytes>,
    /// About how much memory the decoded object takes ([`held_bytes`]):
    /// what the history's bound in bytes counts.
    held: usize,
}

/// About how many bytes `value` takes in memory, decoded: serde_json's
/// `Value`s with their maps as B-trees, whose nodes hold 11 entries each
/// whether used or not. A stored object of many small maps (a long
/// `managedFields`, say) takes ten times its encoded size decoded; the
/// history's bound must count that, not the stored bytes.
fn held_bytes(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    const VALUE: usize = std::mem::size_of::<Value>();
    // keys, values, parent, index and length; internal nodes add edges.
    const NODE: usize = 11 * (std::mem::size_of::<String>() + VALUE) + 16;
    match value {
        Value::String(s) => VALUE + s.capacity(),
        Value::Array(items) => {
            VALUE
                + items.capacity() * VALUE
                + items.iter().map(|v| held_bytes(v) - VALUE).sum::<usize>()
        }
        Value::Object(map) => {
            VALUE
                + map.len().div_ceil(11).max(1) * NODE
                + map
                    .iter()
                    .map(|(k, v)| k.capacity() + held_bytes(v) - VALUE)
                    .sum::<usize>()
        }
        _ => VALUE,
    }
}

impl Event {
    /// The object as JSON, encoded once for every subscriber that sends it
    /// on (HTTP watchers share these bytes instead of encoding, and
    /// holding, a copy each, as kube-apiserver's watch cache serialises an
    /// event once for all its watchers).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    /// let (mut one, mut two) = (hub.subscribe("/", 0)?, hub.subscribe("/", 0)?);
    /// store.put("/k", br#"{"metadata": {"name": "k"}}"#.to_vec(), Condition::Any).await?;
    /// let (a, b) = (one.next().await?.json(), two.next().await?.json());
    /// assert_eq!(a.as_ptr(), b.as_ptr(), "one encoding, shared");
    /// let back: serde_json::Value = serde_json::from_slice(&a)?;
    /// assert_eq!(back["metadata"]["resourceVersion"], "1");
    /// # Ok(()) }
    /// ```
    pub fn json(&self) -> bytes::Bytes {
        self.json
            .get_or_init(|| {
                bytes::Bytes::from(serde_json::to_vec(&*self.object).expect("JSON serialises"))
            })
            .clone()
    }
}

/// A subscription failure.
///
/// ```
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, MemoryBackend};
/// use setpoint::watch::{EventType, WatchHub};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryBackend::new());
/// let hub = WatchHub::start(store.clone(), 16).await?;
///
/// use setpoint::watch::Error;
/// for i in 0..40 {
///     store.put(&format!("/k{i}"), b"{}".to_vec(), Condition::Any).await?;
/// }
/// hub.wait_for(40).await;
/// let err = hub.subscribe("/", 0).err().unwrap();
/// assert!(matches!(err, Error::TooOldResourceVersion { requested: 0, .. }), "only 16 kept: relist");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The requested start is older than the retained history, or the
    /// subscriber fell too far behind.
    #[error("too old resource version: {requested} (oldest available {oldest})")]
    TooOldResourceVersion {
        /// The revision the subscriber needed next.
        requested: Revision,
        /// The oldest revision the hub can still deliver after.
        oldest: Revision,
    },
    /// The hub stopped.
    #[error("watch hub closed")]
    Closed,
}

/// The fan-out point for one store.
///
/// ```
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, MemoryBackend};
/// use setpoint::watch::{EventType, WatchHub};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryBackend::new());
/// let hub = WatchHub::start(store.clone(), 16).await?;
///
/// let mut a = hub.subscribe("/pods/", 0)?;
/// let mut b = hub.subscribe("/", 0)?;
/// store.put("/pods/web-0", b"{}".to_vec(), Condition::Any).await?;
/// let (seen_a, seen_b) = (a.next().await?, b.next().await?);
/// assert!(Arc::ptr_eq(&seen_a, &seen_b), "one shared event, not a copy per subscriber");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WatchHub {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    sender: broadcast::Sender<Arc<Event>>,
    capacity: usize,
    /// The most bytes of objects the history keeps.
    max_bytes: usize,
    /// Moves when the hub resumes after a gap it cannot fill: every
    /// subscriber from before must relist.
    epoch: Arc<AtomicU64>,
    /// The task following the store, until [`WatchHub::stop`].
    follower: Mutex<Option<tokio::task::AbortHandle>>,
}

struct State {
    /// Retained events; every change after `oldest` up to `last` is here.
    history: VecDeque<Arc<Event>>,
    oldest: Revision,
    last: Revision,
    /// Bytes of the objects in `history`.
    bytes: usize,
    /// Bytes of every change seen since the hub started.
    written: u64,
    /// `(revision, written up to and including it)`, one about every
    /// [`MARK_BYTES`], from the last at or below the compaction point on.
    marks: VecDeque<(Revision, u64)>,
}

impl WatchHub {
    /// Start a hub following `backend`, keeping `capacity` (rounded up to a
    /// power of two) events of history, also the lag allowed per subscriber.
    /// The history starts filled with the store's last `capacity` changes.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// store.put("/before", b"{}".to_vec(), Condition::Any).await?;
    /// let late = WatchHub::start(store.clone(), 16).await?;
    /// let mut changes = late.subscribe("/", 0)?;
    /// assert_eq!(changes.next().await?.key, "/before", "history starts filled from the store");
    /// # Ok(()) }
    /// ```
    pub async fn start(backend: Arc<dyn Backend>, capacity: usize) -> store::Result<Self> {
        Self::start_with(backend, capacity, DEFAULT_HISTORY_BYTES).await
    }

    /// [`WatchHub::start`] keeping at most `max_bytes` of decoded objects
    /// in its history (at least the last change, whatever its size).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{Error, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start_with(store.clone(), 1024, 12_000).await?;
    /// let fat = format!(r#"{{"blob": "{}"}}"#, "x".repeat(4_000)).into_bytes();
    /// for _ in 0..5 {
    ///     store.put("/fat", fat.clone(), Condition::Any).await?;
    /// }
    /// hub.wait_for(5).await;
    /// // Decoded, each takes a little more than its 4 kB of text.
    /// assert!((2 * fat.len()..12_000).contains(&hub.history_bytes()), "two fit in 12,000 bytes");
    /// assert!(matches!(hub.subscribe("/", 2), Err(Error::TooOldResourceVersion { .. })));
    /// assert!(hub.subscribe("/", 3).is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn start_with(
        backend: Arc<dyn Backend>,
        capacity: usize,
        max_bytes: usize,
    ) -> store::Result<Self> {
        let capacity = capacity.max(1).next_power_of_two();
        // Start from the last `capacity` changes the store still has, so that
        // a client resuming a watch after a restart of the host finds them.
        let current = backend.current_revision().await?;
        let wanted = current.saturating_sub(capacity as Revision).max(0);
        let (start, stream) = match backend.watch(wanted).await {
            Ok(stream) => (wanted, stream),
            Err(store::Error::Compacted { compacted, .. }) => {
                (compacted, backend.watch(compacted).await?)
            }
            Err(err) => return Err(err),
        };
        let (sender, _) = broadcast::channel(capacity);
        let hub = Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    history: VecDeque::with_capacity(capacity.min(1024)),
                    oldest: start,
                    last: start,
                    bytes: 0,
                    written: 0,
                    marks: VecDeque::new(),
                }),
                sender,
                capacity,
                max_bytes,
                epoch: Arc::default(),
                follower: Mutex::new(None),
            }),
        };
        let follower = Arc::downgrade(&hub.inner);
        let task = tokio::spawn(follow(follower, backend, stream));
        *hub.inner.follower.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
        Ok(hub)
    }

    /// Stop following the store: the hub keeps its history and publishes
    /// nothing more. A host that stops calls this before its store closes;
    /// otherwise the closed store reads as a broken watch, and the hub
    /// would log it and keep trying to resume.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    /// hub.stop();
    /// store.put("/after", b"{}".to_vec(), Condition::Any).await?;
    /// tokio::task::yield_now().await;
    /// assert_eq!(hub.last_revision(), 0, "nothing published after the stop");
    /// # Ok(()) }
    /// ```
    pub fn stop(&self) {
        if let Some(task) = self
            .inner
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// Whether [`WatchHub::stop`] was called: the store may be closing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::MemoryBackend;
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hub = WatchHub::start(Arc::new(MemoryBackend::new()), 16).await?;
    /// assert!(!hub.is_stopped());
    /// hub.stop();
    /// assert!(hub.is_stopped());
    /// # Ok(()) }
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.inner
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// How many changes a subscriber may fall behind before it is cut off
    /// (and how many the history keeps).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// assert_eq!(WatchHub::start(store.clone(), 100).await?.max_lag(), 128, "a power of two");
    /// # Ok(()) }
    /// ```
    pub fn max_lag(&self) -> usize {
        self.inner.capacity
    }

    /// The revision of the last change the hub has seen.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// store.put("/k", b"{}".to_vec(), Condition::Any).await?;
    /// hub.wait_for(1).await;
    /// assert_eq!(hub.last_revision(), 1);
    /// # Ok(()) }
    /// ```
    pub fn last_revision(&self) -> Revision {
        self.lock().last
    }

    /// How many subscriptions are open (each watcher and informer holds one
    /// until it ends).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::MemoryBackend;
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hub = WatchHub::start(Arc::new(MemoryBackend::new()), 16).await?;
    /// let subscription = hub.subscribe("/", 0)?;
    /// assert_eq!(hub.subscribers(), 1);
    /// drop(subscription);
    /// assert_eq!(hub.subscribers(), 0);
    /// # Ok(()) }
    /// ```
    pub fn subscribers(&self) -> usize {
        self.inner.sender.receiver_count()
    }

    /// Wait until the hub has seen `revision` (used after a write so that a
    /// watcher started now includes it).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// let kv = store.put("/k", b"{}".to_vec(), Condition::Any).await?;
    /// hub.wait_for(kv.mod_revision).await;
    /// assert!(hub.last_revision() >= kv.mod_revision);
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(&self, revision: Revision) {
        let mut rx = self.inner.sender.subscribe();
        while self.last_revision() < revision {
            match rx.recv().await {
                Ok(e) if e.revision >= revision => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// The store was compacted at `revision`: forget the history at and
    /// before it, so that subscribing after an earlier revision fails with
    /// [`Error::TooOldResourceVersion`], as reading the store there does.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// store.put("/a", b"{}".to_vec(), Condition::Any).await?;
    /// store.put("/b", b"{}".to_vec(), Condition::Any).await?;
    /// hub.wait_for(2).await;
    /// store.compact(1).await?;
    /// hub.compacted(1);
    /// assert!(hub.subscribe("/", 0).is_err(), "before the compaction point");
    /// assert_eq!(hub.subscribe("/", 1)?.next().await?.key, "/b");
    /// # Ok(()) }
    /// ```
    pub fn compacted(&self, revision: Revision) {
        let mut state = self.lock();
        while state
            .history
            .front()
            .is_some_and(|e| e.revision <= revision)
        {
            if let Some(old) = state.history.pop_front() {
                state.bytes -= old.held;
            }
        }
        state.oldest = state.oldest.max(revision.min(state.last));
        // Keep the last mark at or below the compaction point: the base
        // that `written_since` counts from.
        while state.marks.get(1).is_some_and(|m| m.0 <= revision) {
            state.marks.pop_front();
        }
    }

    /// About how many bytes of memory the decoded objects of the history
    /// take now (what its bound in bytes counts).
    pub fn history_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// About how many bytes of objects were written after `revision`, as
    /// far as this hub has seen (to within about a MiB): what a store
    /// compacted at `revision` holds of history.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    /// let mib = format!(r#"{{"blob": "{}"}}"#, "x".repeat(1 << 20)).into_bytes();
    /// for _ in 0..8 {
    ///     store.put("/fat", mib.clone(), Condition::Any).await?;
    /// }
    /// hub.wait_for(8).await;
    /// let mib = mib.len() as u64;
    /// assert_eq!(hub.written_since(0), 8 * mib);
    /// assert_eq!(hub.written_since(6), 2 * mib);
    /// assert_eq!(hub.revision_keeping(3 * mib), Some(5), "after 5: three of them");
    /// # Ok(()) }
    /// ```
    pub fn written_since(&self, revision: Revision) -> u64 {
        let state = self.lock();
        let base = state
            .marks
            .iter()
            .take_while(|m| m.0 <= revision)
            .last()
            .map_or(0, |m| m.1);
        state.written - base
    }

    /// The oldest revision after which at most `bytes` of objects were
    /// written (to within about a MiB), if the hub has seen enough to say:
    /// where to compact to keep that much history.
    pub fn revision_keeping(&self, bytes: u64) -> Option<Revision> {
        let state = self.lock();
        state
            .marks
            .iter()
            .find(|m| state.written - m.1 <= bytes)
            .or(state.marks.back())
            .map(|m| m.0)
    }

    /// Subscribe to changes under `prefix` after revision `after`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// store.put("/pods/a", b"{}".to_vec(), Condition::Any).await?;
    /// store.put("/other/x", b"{}".to_vec(), Condition::Any).await?;
    /// let mut pods = hub.subscribe("/pods/", 0)?;
    /// store.put("/pods/b", b"{}".to_vec(), Condition::Any).await?;
    /// assert_eq!(pods.next().await?.key, "/pods/a", "the backlog first");
    /// assert_eq!(pods.next().await?.key, "/pods/b", "then live changes, under the prefix only");
    /// # Ok(()) }
    /// ```
    pub fn subscribe(&self, prefix: &str, after: Revision) -> Result<Subscription, Error> {
        let state = self.lock();
        if after < state.oldest {
            return Err(Error::TooOldResourceVersion {
                requested: after,
                oldest: state.oldest,
            });
        }
        let skip = state.history.partition_point(|e| e.revision <= after);
        let backlog = state
            .history
            .iter()
            .skip(skip)
            .filter(|e| e.key.starts_with(prefix))
            .cloned()
            .collect();
        let receiver = self.inner.sender.subscribe();
        let last_seen = after.max(state.last);
        Ok(Subscription {
            epoch: self.inner.epoch.clone(),
            subscribed_in: self.inner.epoch.load(Ordering::SeqCst),
            prefix: prefix.to_owned(),
            backlog,
            receiver,
            after,
            last_seen,
            hub: Arc::downgrade(&self.inner),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn let_go_of_stale(&mut self) {
        let (keep_changes, keep_bytes) = STALE_KEPT;
        while (self.history.len() > keep_changes || self.bytes > keep_bytes)
            && self
                .history
                .front()
                .is_some_and(|e| e.received.elapsed() > HISTORY_FRESH)
            && let Some(old) = self.history.pop_front()
        {
            self.oldest = old.revision;
            self.bytes -= old.held;
        }
    }
}

impl Inner {
    fn publish(&self, event: Event) {
        let event = Arc::new(event);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.bytes += event.held;
        while (state.history.len() >= self.capacity || state.bytes > self.max_bytes)
            && let Some(old) = state.history.pop_front()
        {
            state.oldest = old.revision;
            state.bytes -= old.held;
        }
        state.let_go_of_stale();
        state.last = event.revision;
        let before = state.written;
        state.written += event.size as u64;
        if state.marks.is_empty() || before / MARK_BYTES != state.written / MARK_BYTES {
            let mark = (event.revision, state.written);
            state.marks.push_back(mark);
        }
        state.history.push_back(event.clone());
        // Sent under the lock so that `subscribe` sees history and channel
        // consistently: an event is either in the backlog or in the channel.
        let _ = self.sender.send(event);
    }

    /// Let go of changes older than [`HISTORY_FRESH`] past the
    /// [`STALE_KEPT`] allowance.
    fn let_go_of_stale(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .let_go_of_stale();
    }

    /// Start over at `revision` after changes the hub never saw: forget the
    /// history and cut every subscriber off.
    fn reset(&self, revision: Revision) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.history.clear();
        state.bytes = 0;
        state.oldest = revision;
        state.last = revision;
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

async fn follow(
    hub: std::sync::Weak<Inner>,
    backend: Arc<dyn Backend>,
    mut stream: store::WatchStream,
) {
    loop {
        let item = match tokio::time::timeout(STALE_CHECK, stream.recv()).await {
            Ok(item) => item,
            Err(_) => {
                let Some(inner) = hub.upgrade() else { return };
                inner.let_go_of_stale();
                continue;
            }
        };
        let Some(inner) = hub.upgrade() else { return };
        match item {
            Some(Ok(change)) => {
                let kind = match (change.kind, change.created) {
                    (EventKind::Put, true) => EventType::Added,
                    (EventKind::Put, false) => EventType::Modified,
                    (EventKind::Delete, _) => EventType::Deleted,
                };
                let revision = change.revision();
                let size = change.kv.value.len();
                match codec::decode(&change.kv.value, revision) {
                    Ok(object) => inner.publish(Event {
                        held: held_bytes(&object),
                        revision,
                        kind,
                        key: change.kv.key,
                        object: Arc::new(object),
                        size,
                        received: tokio::time::Instant::now(),
                        json: std::sync::OnceLock::new(),
                    }),
                    Err(err) => {
                        tracing::error!(key = %change.kv.key, %err, "undecodable object in store; skipped by watchers");
                    }
                }
            }
            Some(Err(_)) | None => {
                // The backend's watch broke (a lost connection, compaction).
                // Resume after the last change published, so subscribers miss
                // nothing; if the store no longer has those changes, resume
                // from now and cut every subscriber off so they relist.
                if let Some(Err(err)) = &item {
                    tracing::warn!(%err, "store watch broken; resuming");
                }
                let last = inner.state.lock().unwrap_or_else(|p| p.into_inner()).last;
                let resumed = async {
                    match backend.watch(last).await {
                        Ok(s) => Ok((None, s)),
                        Err(store::Error::Compacted { .. }) => {
                            let rev = backend.current_revision().await?;
                            Ok::<_, store::Error>((Some(rev), backend.watch(rev).await?))
                        }
                        Err(err) => Err(err),
                    }
                }
                .await;
                match resumed {
                    Ok((gap, s)) => {
                        if let Some(rev) = gap {
                            tracing::warn!(
                                from = last,
                                to = rev,
                                "changes compacted while the store watch was down; watchers will relist"
                            );
                            inner.reset(rev);
                        } else {
                            tracing::info!(after = last, "store watch resumed");
                        }
                        stream = s;
                    }
                    Err(err) => {
                        tracing::error!(%err, "cannot resume store watch; retrying");
                        drop(inner);
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
