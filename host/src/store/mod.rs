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
pub mod embedded;
mod error;
pub mod etcd;
mod fenced;
pub mod memory;
pub mod metered;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

pub use embedded::EmbeddedBackend;
pub use error::Error;
pub use etcd::{EtcdBackend, EtcdConfig};
pub use fenced::FencedBackend;
pub use memory::MemoryBackend;
pub use metered::{Metered, StoreMetrics};

/// A global, gap-free write counter. Revision 0 means "nothing written yet".
pub type Revision = i64;

/// Result alias for backend operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One key with its value and revisions.
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

/// A precondition on a write, checked atomically with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// No precondition.
    Any,
    /// The key must not exist (create).
    Absent,
    /// The key must exist with exactly this modification revision.
    ModRevision(Revision),
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or modified.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as delivered by [`Backend::watch`].
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
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// A stream of changes, ended by dropping it. An `Err` item ends the stream.
pub type WatchStream = mpsc::Receiver<Result<WatchEvent>>;

/// The result of a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The revision of the delete.
    pub revision: Revision,
    /// The key as it was just before.
    pub prev: KeyValue,
}

/// A revisioned key-value store: memory, embedded or etcd.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The key at the current revision, if it exists.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Keys under a prefix at one revision, with limit and continuation.
    async fn range(&self, range: Range) -> Result<RangeResult>;

    /// Create or replace a key if `condition` holds; returns the stored key.
    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue>;

    /// Delete a key if it exists and `condition` holds.
    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted>;

    /// The revision of the last write.
    async fn current_revision(&self) -> Result<Revision>;

    /// Forget history at and before `revision`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// Every change after `after` (exclusive), in order, then live changes.
    async fn watch(&self, after: Revision) -> Result<WatchStream>;

    /// [`Backend::put`], only while `fence` holds (atomically with the
    /// write); otherwise [`Error::Fenced`] and nothing is written. Backends
    /// without leases (one host per store) answer [`Error::Unsupported`].
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

    /// Latencies and failures of this backend's operations, when it counts
    /// them (a [`Metered`] wrapper does; plain backends do not).
    fn metrics(&self) -> Option<&StoreMetrics> {
        None
    }
}
