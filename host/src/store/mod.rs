//! Revisioned key-value backends. This module knows keys, bytes and
//! revisions, never objects.
//!
//! # Contract (the shape of etcd v3)
//!
//! - Every successful write (put or delete) takes the next global revision:
//!   revisions start at 1, never skip, never repeat and commit in order.
//! - Each key carries the revision that created it and the one that last
//!   modified it. A write may name a [`Condition`]; if it does not hold, the
//!   write changes nothing and fails with [`Error::Conflict`].
//! - [`Backend::range`] reads a consistent snapshot at one revision (the
//!   current one by default), in key order, with a limit and a key to continue
//!   after, so that a paginated list sees one point in time.
//! - [`Backend::watch`] streams every change after a revision, in revision
//!   order, with no gaps. Revisions at or below the compaction point are gone:
//!   reading or watching there fails with [`Error::Compacted`].
//! - A write is acknowledged only once it is as durable as the backend
//!   promises (the memory backend promises nothing across restarts).

#[cfg(test)]
mod conformance;
mod dry_run;
pub mod embedded;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
mod fenced;
pub mod memory;
pub mod metered;
mod overlay;
mod pump;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

pub use dry_run::DryRunBackend;
pub use embedded::EmbeddedBackend;
pub use error::Error;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdBackend, EtcdConfig};
pub use fenced::FencedBackend;
pub use memory::MemoryBackend;
pub use metered::{Metered, StoreMetrics};
pub use overlay::OverlayBackend;

/// A global, gap-free write counter. Revision 0 means "nothing written yet".
pub type Revision = i64;

/// Result alias for backend operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One key with its value and revisions.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// let created = store.put("/k", b"v1".to_vec(), Condition::Absent).await?;
/// let updated = store.put("/k", b"v2".to_vec(), Condition::Any).await?;
/// assert_eq!((updated.create_revision, updated.mod_revision), (created.mod_revision, 2));
/// assert_eq!(&*updated.value, b"v2");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value bytes, shared rather than copied on every read.
    pub value: Arc<[u8]>,
    /// The revision that created the key (since it last did not exist).
    pub create_revision: Revision,
    /// The revision of the last write to the key.
    pub mod_revision: Revision,
}

impl KeyValue {
    /// The version, borrowed.
    pub fn as_version(&self) -> VersionRef<'_> {
        VersionRef {
            key: &self.key,
            value: &self.value,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        }
    }
}

/// A stored version lent to a [`WriteVersion`] by
/// [`Backend::range_written`]: its bytes where the store read them, not
/// copied out.
#[derive(Debug, Clone, Copy)]
pub struct VersionRef<'a> {
    /// The key.
    pub key: &'a str,
    /// The value bytes.
    pub value: &'a [u8],
    /// The revision that created the key (since it last did not exist).
    pub create_revision: Revision,
    /// The revision of this version.
    pub mod_revision: Revision,
}

impl VersionRef<'_> {
    /// An owned copy.
    pub fn to_key_value(&self) -> KeyValue {
        KeyValue {
            key: self.key.to_owned(),
            value: Arc::from(self.value),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        }
    }
}

/// Writes one version a [`Backend::range_written`] read into a buffer.
pub type WriteVersion = dyn Fn(VersionRef<'_>, &mut Vec<u8>) -> Result<()> + Send + Sync;

/// What [`Backend::range_written`] read and wrote.
#[derive(Debug, Default)]
pub struct WrittenRange {
    /// What the writer wrote, in key order, in parts (a long range's
    /// parts are written on as many threads).
    pub parts: Vec<Vec<u8>>,
    /// How many versions were written.
    pub count: usize,
    /// The bytes of the values read.
    pub value_bytes: usize,
    /// The last key read, where the next page starts.
    pub last_key: Option<String>,
    /// Whether more keys match beyond the limit.
    pub more: bool,
    /// The revision the read was served at.
    pub revision: Revision,
}

/// A precondition on a write, checked atomically with it.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// let kv = store.put("/k", b"1".to_vec(), Condition::Absent).await?;
/// assert!(store.put("/k", b"x".to_vec(), Condition::Absent).await.is_err(), "exists");
/// store.put("/k", b"2".to_vec(), Condition::ModRevision(kv.mod_revision)).await?;
/// let stale = store.put("/k", b"3".to_vec(), Condition::ModRevision(kv.mod_revision)).await;
/// assert!(matches!(stale, Err(setpoint::store::Error::Conflict { .. })));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// No precondition.
    Any,
    /// The key must not exist (create).
    Absent,
    /// The key must exist with exactly this modification revision.
    ModRevision(Revision),
}

impl Condition {
    /// Checks the condition against `key`'s modification revision (`None`
    /// if absent): the backends that evaluate conditions themselves share
    /// this, so that they agree on what a conflict reports.
    pub(crate) fn check(self, key: &str, actual: Option<Revision>) -> Result<()> {
        let ok = match self {
            Condition::Any => true,
            Condition::Absent => actual.is_none(),
            Condition::ModRevision(rev) => actual == Some(rev),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Conflict {
                key: key.to_owned(),
                expected: match self {
                    Condition::ModRevision(rev) => Some(rev),
                    _ => None,
                },
                actual,
            })
        }
    }
}

/// A fencing token: a key that must still exist with the same
/// `create_revision` for a write to happen, checked atomically with the write.
///
/// Several hosts on one etcd hold work through leased claim keys; a host
/// writes with the claim it holds as the fence, so once its lease expires
/// (and the claim key is deleted or re-created by another host) its writes
/// fail with [`Error::Fenced`] instead of racing the new owner.
///
/// ```
/// use setpoint::store::Fence;
/// let fence = Fence { key: "/setpoint/cluster/shards/00007".into(), create_revision: 42 };
/// assert_eq!(fence.create_revision, 42);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The claim key.
    pub key: String,
    /// The revision that created the claim key when it was taken.
    pub create_revision: Revision,
}

/// A range read.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// for key in ["/a/1", "/a/2", "/a/3", "/b/1"] {
///     store.put(key, vec![], Condition::Any).await?;
/// }
/// let first = store.range(Range { prefix: "/a/".into(), limit: 2, ..Default::default() }).await?;
/// assert!(first.more);
/// let rest = store.range(Range {
///     prefix: "/a/".into(),
///     start_after: Some(first.kvs[1].key.clone()),
///     revision: Some(first.revision),
///     ..Default::default()
/// }).await?;
/// assert_eq!(rest.kvs.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Range {
    /// Every key that starts with this prefix.
    pub prefix: String,
    /// Continue after this key (exclusive), for pagination.
    pub start_after: Option<String>,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Read at this revision; `None` reads the current one.
    pub revision: Option<Revision>,
}

/// The answer to a range read.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// store.put("/a", vec![], Condition::Any).await?;
/// let all = store.range(Range::default()).await?;
/// assert_eq!((all.kvs.len(), all.more, all.revision), (1, false, 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeResult {
    /// The keys, in key order.
    pub kvs: Vec<KeyValue>,
    /// Whether more keys match beyond the limit.
    pub more: bool,
    /// The revision the read was served at.
    pub revision: Revision,
}

/// What happened to a key.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// use setpoint::store::EventKind;
/// let mut changes = store.watch(0).await?;
/// store.put("/k", vec![], Condition::Any).await?;
/// store.delete("/k", Condition::Any).await?;
/// assert_eq!(changes.recv().await.unwrap()?.kind, EventKind::Put);
/// assert_eq!(changes.recv().await.unwrap()?.kind, EventKind::Delete);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or modified.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as delivered by [`Backend::watch`].
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// let mut changes = store.watch(0).await?;
/// store.put("/k", b"1".to_vec(), Condition::Any).await?;
/// let event = changes.recv().await.unwrap()?;
/// assert!(event.created);
/// assert_eq!(event.kv.key, "/k");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// For a put, the new value; for a delete, the key with its last value and
    /// `mod_revision` set to the deletion's revision.
    pub kv: KeyValue,
    /// Whether the put created the key.
    pub created: bool,
}

impl WatchEvent {
    /// The revision of the change.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// let mut changes = store.watch(0).await?;
    /// let kv = store.put("/k", vec![], Condition::Any).await?;
    /// assert_eq!(changes.recv().await.unwrap()?.revision(), kv.mod_revision);
    /// # Ok(()) }
    /// ```
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// A stream of changes, ended by dropping it. An `Err` item ends the stream.
pub type WatchStream = mpsc::Receiver<Result<WatchEvent>>;

/// Hands `each` every change `backend` stored after revision `after` up
/// to `until`, in order, from its history: how a cache or a controller
/// saved at `after` catches up. Why not, if the history cannot say (it
/// ended early, or the store failed).
pub(crate) async fn replay_history(
    backend: &dyn Backend,
    after: Revision,
    until: Revision,
    mut each: impl FnMut(WatchEvent),
) -> std::result::Result<(), String> {
    if after >= until {
        return Ok(());
    }
    let failed = |err: Error| format!("the store's history after {after}: {err}");
    let mut changes = backend.watch(after).await.map_err(failed)?;
    while let Some(event) = changes.recv().await {
        let event = event.map_err(failed)?;
        let revision = event.revision();
        if revision > until {
            break;
        }
        each(event);
        if revision >= until {
            return Ok(());
        }
    }
    Err(format!(
        "the store's history after {after} ended before revision {until}"
    ))
}

/// The result of a delete.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// store.put("/k", b"last".to_vec(), Condition::Any).await?;
/// let deleted = store.delete("/k", Condition::Any).await?;
/// assert_eq!((deleted.revision, &*deleted.prev.value), (2, &b"last"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The revision of the delete.
    pub revision: Revision,
    /// The key as it was just before.
    pub prev: KeyValue,
}

/// A revisioned key-value store: memory, embedded or etcd.
///
/// ```
/// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryBackend::new();
///
/// let backend: std::sync::Arc<dyn Backend> = std::sync::Arc::new(store);
/// backend.put("/k", b"v".to_vec(), Condition::Absent).await?;
/// assert_eq!(backend.current_revision().await?, 1);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The key at the current revision, if it exists.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// assert!(store.get("/k").await?.is_none());
    /// store.put("/k", b"v".to_vec(), Condition::Any).await?;
    /// assert_eq!(&*store.get("/k").await?.unwrap().value, b"v");
    /// # Ok(()) }
    /// ```
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Keys under a prefix at one revision, with limit and continuation.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// store.put("/a", b"old".to_vec(), Condition::Any).await?;
    /// store.put("/a", b"new".to_vec(), Condition::Any).await?;
    /// let then = store.range(Range { prefix: "/".into(), revision: Some(1), ..Default::default() }).await?;
    /// assert_eq!(&*then.kvs[0].value, b"old", "a read at a past revision");
    /// # Ok(()) }
    /// ```
    async fn range(&self, range: Range) -> Result<RangeResult>;

    /// [`range`](Backend::range), each version handed to `write` where it
    /// was read instead of copied out: for a long read that is only
    /// written out (a LIST's JSON). The embedded store writes a long
    /// range's parts on several threads; the others write what
    /// [`range`](Backend::range) returns.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    /// store.put("/a", b"1".to_vec(), Condition::Any).await?;
    /// store.put("/b", b"2".to_vec(), Condition::Any).await?;
    /// let written = store
    ///     .range_written(Range { prefix: "/".into(), ..Default::default() },
    ///         Arc::new(|version, out: &mut Vec<u8>| {
    ///             out.extend_from_slice(version.value);
    ///             Ok(())
    ///         }))
    ///     .await?;
    /// assert_eq!(written.parts.concat(), b"12");
    /// assert_eq!((written.count, written.last_key.as_deref()), (2, Some("/b")));
    /// # Ok(()) }
    /// ```
    async fn range_written(&self, range: Range, write: Arc<WriteVersion>) -> Result<WrittenRange> {
        let page = self.range(range).await?;
        let mut out = Vec::new();
        for kv in &page.kvs {
            write(kv.as_version(), &mut out)?;
        }
        Ok(WrittenRange {
            parts: vec![out],
            count: page.kvs.len(),
            value_bytes: page.kvs.iter().map(|kv| kv.value.len()).sum(),
            last_key: page.kvs.last().map(|kv| kv.key.clone()),
            more: page.more,
            revision: page.revision,
        })
    }

    /// Create or replace a key if `condition` holds; returns the stored key.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// let kv = store.put("/k", b"v".to_vec(), Condition::Absent).await?;
    /// assert_eq!(kv.mod_revision, 1);
    /// # Ok(()) }
    /// ```
    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue>;

    /// Delete a key if it exists and `condition` holds.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// assert!(matches!(store.delete("/nope", Condition::Any).await, Err(setpoint::store::Error::NotFound { .. })));
    /// # Ok(()) }
    /// ```
    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted>;

    /// The revision of the last write.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// assert_eq!(store.current_revision().await?, 0);
    /// store.put("/k", vec![], Condition::Any).await?;
    /// assert_eq!(store.current_revision().await?, 1);
    /// # Ok(()) }
    /// ```
    async fn current_revision(&self) -> Result<Revision>;

    /// Forget history at and before `revision`.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// store.put("/k", b"1".to_vec(), Condition::Any).await?;
    /// store.put("/k", b"2".to_vec(), Condition::Any).await?;
    /// store.compact(1).await?;
    /// let old = store.range(Range { revision: Some(1), ..Default::default() }).await;
    /// assert!(matches!(old, Err(setpoint::store::Error::Compacted { .. })));
    /// # Ok(()) }
    /// ```
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// Every change after `after` (exclusive), in order, then live changes.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, MemoryBackend, Range};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryBackend::new();
    ///
    /// store.put("/a", vec![], Condition::Any).await?;
    /// let mut changes = store.watch(0).await?; // history first, then live changes
    /// store.put("/b", vec![], Condition::Any).await?;
    /// assert_eq!(changes.recv().await.unwrap()?.kv.key, "/a");
    /// assert_eq!(changes.recv().await.unwrap()?.kv.key, "/b");
    /// # Ok(()) }
    /// ```
    async fn watch(&self, after: Revision) -> Result<WatchStream>;

    /// [`Backend::put`], only while `fence` holds (atomically with the
    /// write); otherwise [`Error::Fenced`] and nothing is written. Backends
    /// without leases (one host per store) answer [`Error::Unsupported`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use setpoint::store::{Backend, Condition, Error, Fence, MemoryBackend};
    /// let store = MemoryBackend::new();
    /// let fence = Fence { key: "/claims/0".into(), create_revision: 1 };
    /// let err = store.put_fenced("/a", b"1".to_vec(), Condition::Any, &fence).await.unwrap_err();
    /// assert!(matches!(err, Error::Unsupported(_)));
    /// # });
    /// ```
    async fn put_fenced(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        fence: &Fence,
    ) -> Result<KeyValue> {
        let _ = (key, value, condition, fence);
        Err(Error::Unsupported(
            "fenced writes (several hosts need etcd)",
        ))
    }

    /// [`Backend::delete`], only while `fence` holds; see
    /// [`Backend::put_fenced`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use setpoint::store::{Backend, Condition, Error, Fence, MemoryBackend};
    /// let store = MemoryBackend::new();
    /// let fence = Fence { key: "/claims/0".into(), create_revision: 1 };
    /// let err = store.delete_fenced("/a", Condition::Any, &fence).await.unwrap_err();
    /// assert!(matches!(err, Error::Unsupported(_)));
    /// # });
    /// ```
    async fn delete_fenced(
        &self,
        key: &str,
        condition: Condition,
        fence: &Fence,
    ) -> Result<Deleted> {
        let _ = (key, condition, fence);
        Err(Error::Unsupported(
            "fenced writes (several hosts need etcd)",
        ))
    }

    /// Synchronous reads of single stored versions, for caches that keep
    /// each object's revision rather than its value (the informers over the
    /// embedded store, whose pages are in the process already). `None`
    /// (the default) where such reads are not cheap: the caches then keep
    /// the values. Wrappers that do not change what is read forward their
    /// inner backend's.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend, MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// assert!(MemoryBackend::new().version_reader().is_none());
    /// let dir = tempfile::tempdir()?;
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// let put = store.put("/k", b"one".to_vec(), Condition::Any).await?;
    /// let versions = store.version_reader().expect("the embedded store reads versions");
    /// store.get("/k").await?; // a read waits until every acknowledged write is readable
    /// assert!(versions.readable() >= put.mod_revision);
    /// let read = versions.read_version("/k", put.mod_revision)?.expect("stored");
    /// assert_eq!(&*read.value, b"one");
    /// # store.close().await?;
    /// # Ok(()) }
    /// ```
    fn version_reader(&self) -> Option<Arc<dyn VersionReader>> {
        None
    }

    /// Latencies and failures of this backend's operations, when it counts
    /// them (a [`Metered`] wrapper does; plain backends do not).
    fn metrics(&self) -> Option<&StoreMetrics> {
        None
    }

    /// Numbers the backend keeps about its own engine (the embedded store's
    /// commits, applier lag, in-memory versions …), for `/metrics`. Wrappers
    /// forward their inner backend's; plain backends have none.
    fn engine_metrics(&self) -> Vec<EngineMetric> {
        Vec::new()
    }

    /// Whether the backend takes writes now: `Ok`, or the error a write
    /// would get (the embedded store answers [`Error::InsufficientStorage`]
    /// while its disk is full). `/readyz` reports it. Wrappers forward
    /// their inner backend's; the memory and etcd backends are always
    /// writable here (etcd answers for itself).
    ///
    /// ```
    /// use setpoint::store::{Backend, MemoryBackend};
    /// assert!(MemoryBackend::new().writable().is_ok());
    /// ```
    fn writable(&self) -> Result<()> {
        Ok(())
    }

    /// A consistent copy of the whole store as of now, holding at least
    /// every write acknowledged before the call, taken while writes go on.
    /// The embedded store gives a complete database file (restore it as
    /// `store.redb` in an empty data directory); other backends answer
    /// [`Error::Unsupported`] (etcd has `etcdctl snapshot save`).
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (live, restored) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// let store = EmbeddedBackend::open(live.path())?;
    /// store.put("/k", b"kept".to_vec(), Condition::Any).await?;
    ///
    /// let mut backup = store.backup().await?;
    /// assert_eq!(backup.revision, 1);
    /// let mut copy = std::fs::File::create(restored.path().join("store.redb"))?;
    /// std::io::copy(&mut backup.file, &mut copy)?;
    /// let restored = EmbeddedBackend::open(restored.path())?;
    /// assert_eq!(&*restored.get("/k").await?.unwrap().value, b"kept");
    /// # restored.close().await?;
    /// # store.close().await?;
    /// # Ok(()) }
    /// ```
    async fn backup(&self) -> Result<Backup> {
        Err(Error::Unsupported(
            "backups of the whole store (on etcd, use `etcdctl snapshot save`)",
        ))
    }
}

/// Reads of single stored versions without the async machinery: a
/// redb point read in the caller's thread, a few microseconds from pages
/// the process holds anyway ([`Backend::version_reader`]).
pub trait VersionReader: Send + Sync + 'static {
    /// The revision up to which every write can be read here (writes are
    /// acknowledged from the log a little before the database holds them).
    fn readable(&self) -> Revision;

    /// The put of `key` at `revision`; `None` if that version is no longer
    /// kept (a later write replaced it and history was compacted past
    /// that) or is not readable yet (above [`VersionReader::readable`]).
    /// A revision that holds something else is corruption, named.
    fn read_version(&self, key: &str, revision: Revision) -> Result<Option<KeyValue>>;

    /// The live version of `key`, if it exists.
    fn read_current(&self, key: &str) -> Result<Option<KeyValue>>;

    /// A directory where caches over this store may keep what they save
    /// between runs (the embedded store's `DATA/informers/`), if any.
    fn saved_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
}

/// A consistent copy of a store, from [`Backend::backup`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Backup {
    /// The copy, read from its start. It has no name on disk: write it
    /// where it should go.
    pub file: std::fs::File,
    /// The store's revision the copy holds: every write up to it.
    pub revision: Revision,
    /// The copy's length in bytes.
    pub len: u64,
}

/// One number a backend keeps about its engine, exported on `/metrics`
/// under `name` (see [`Backend::engine_metrics`]).
///
/// ```
/// use setpoint::store::{Backend, Condition, EmbeddedBackend, MetricKind};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = EmbeddedBackend::open(dir.path())?;
/// store.put("/a", vec![], Condition::Any).await?;
/// let metrics = store.engine_metrics();
/// let writes = metrics
///     .iter()
///     .find(|m| m.name == "setpoint_embedded_writes_total")
///     .unwrap();
/// assert_eq!((writes.kind, writes.value), (MetricKind::Counter, 1.0));
/// store.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct EngineMetric {
    /// The full metric name, `setpoint_<engine>_…`.
    pub name: &'static str,
    /// What it counts (the `# HELP` line).
    pub help: &'static str,
    /// Counter (only grows) or gauge.
    pub kind: MetricKind,
    /// The value now.
    pub value: f64,
}

/// Whether an [`EngineMetric`] only grows or goes up and down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A running total (Prometheus `counter`).
    Counter,
    /// A level (Prometheus `gauge`).
    Gauge,
}
