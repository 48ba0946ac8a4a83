//! `store::Error`: what a backend operation can fail with.

use super::Revision;

/// A backend failure. Conflicts are normal under optimistic concurrency.
///
/// ```
/// use setpoint::store::{Backend, Condition, Error, MemoryBackend};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryBackend::new();
/// store.put("/k", vec![], Condition::Any).await.unwrap();
/// let err = store.put("/k", vec![], Condition::Absent).await.unwrap_err();
/// assert!(matches!(err, Error::Conflict { expected: None, actual: Some(1), .. }));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A write's [`Condition`](super::Condition) did not hold.
    #[error("conflict on {key}: expected revision {expected:?}, found {actual:?}")]
    Conflict {
        /// The key written.
        key: String,
        /// The modification revision the writer expected (`None`: absent).
        expected: Option<Revision>,
        /// The modification revision found (`None`: absent).
        actual: Option<Revision>,
    },
    /// A delete of a key that does not exist.
    #[error("key {key} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// A read or watch at a revision that compaction has removed.
    #[error("revision {requested} is compacted (oldest available is {compacted} + 1)")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The compaction point.
        compacted: Revision,
    },
    /// A read at a revision that does not exist yet.
    #[error("revision {requested} is in the future (current is {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The current revision.
        current: Revision,
    },
    /// The stored data is damaged.
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    /// An I/O failure.
    #[error("store I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A fenced write's claim is gone: another host owns the work now.
    #[error("fenced out: claim {key} is no longer held at revision {create_revision}")]
    Fenced {
        /// The claim key.
        key: String,
        /// The claim's revision the writer held.
        create_revision: Revision,
    },
    /// The backend does not offer this operation.
    #[error("{0} is not supported by this backend")]
    Unsupported(&'static str),
    /// The backend cannot serve requests (closed, unreachable).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The disk is full: the write was refused and nothing was written.
    /// Reads go on, and writes resume once there is room again.
    #[error("store out of disk space: {0}")]
    InsufficientStorage(String),
}
