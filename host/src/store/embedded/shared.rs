//! What the writer, the applier, the readers and the watchers of one
//! embedded store share: the database, the revisions acknowledged and
//! committed, why writes are refused (a failure, a full disk), the watch
//! tail and the index of versions.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

use redb::{Database, ReadTransaction, ReadableDatabase, WriteTransaction};
use tokio::sync::watch as revision_watch;

use super::history::History;
use super::room;
use super::schema::Context;
use super::stats::Stats;
use super::watch::Recent;
use crate::store::{Error, Result, Revision};

/// What the writer, the readers and the watchers share.
pub(super) struct Shared {
    /// The database file, named in errors.
    pub(super) file: PathBuf,
    /// `None` once closed.
    pub(super) db: RwLock<Option<Database>>,
    /// The directory lock, released at close.
    pub(super) lock: Mutex<Option<File>>,
    /// The last acknowledged revision (its batch is in the log); watchers
    /// wait on it.
    pub(super) revision_tx: revision_watch::Sender<Revision>,
    /// The same, for reads' fast path.
    pub(super) acknowledged: AtomicI64,
    /// The last revision the applier committed to the database: what reads
    /// see.
    pub(super) committed: AtomicI64,
    /// The same, for reads waiting for it.
    pub(super) committed_tx: revision_watch::Sender<Revision>,
    /// Why the store takes no more writes, once a write failed half-way.
    pub(super) failure: OnceLock<String>,
    /// Why writes are refused for now: the disk is full (nothing was
    /// written; the writer looks for room again and clears it).
    pub(super) out_of_space: Mutex<Option<String>>,
    /// The same, for the writer's check before every batch.
    pub(super) is_out_of_space: AtomicBool,
    /// The room reserved on disk for the database file to grow into.
    pub(super) room: Arc<room::Room>,
    /// The compaction point, as acknowledged.
    pub(super) compacted: AtomicI64,
    /// The newest events, for live watchers.
    pub(super) recent: Mutex<Recent>,
    /// Every key's versions since compaction.
    pub(super) history: RwLock<History>,
    /// The thread saving the index the open built (`index_file`), joined
    /// before the close saves it again.
    pub(super) index_writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(super) closed: AtomicBool,
    /// Set at close when the database could not be made to hold every
    /// write (a failed write, or no final checkpoint on a full disk): the
    /// log stays for the next open to replay.
    pub(super) log_kept: AtomicBool,
    /// The open found the file as sealed, but for the blocks written
    /// since (`seal.rs`), and skipped the full check.
    pub(super) opened_sealed: bool,
    /// Keeps the seal of the file current.
    pub(super) sealer: Arc<super::seal::Sealer>,
    pub(super) stats: Stats,
}

impl Shared {
    /// Marks `revision` as acknowledged: in the log, answered, told to
    /// watchers.
    pub(super) fn set_acknowledged(&self, revision: Revision) {
        self.acknowledged.store(revision, Ordering::Release);
        self.revision_tx.send_replace(revision);
    }

    /// Acknowledged revisions the applier has not committed yet.
    pub(super) fn unapplied(&self) -> u64 {
        // Committed first: it never passes acknowledged, so this order
        // never yields a negative lag.
        let committed = self.committed.load(Ordering::Acquire);
        (self.acknowledged.load(Ordering::Acquire) - committed).max(0) as u64
    }

    /// Marks `revision` as committed to the database, visible to reads.
    pub(super) fn set_committed(&self, revision: Revision) {
        self.committed.store(revision, Ordering::Release);
        self.committed_tx.send_replace(revision);
    }

    /// Stops writes (and reads that wait for writes) for good: the database
    /// may lag the log, which only reopening recovers.
    /// The first failure's cause is the one reported.
    pub(super) fn fail(&self, cause: impl std::fmt::Display) {
        let _ = self.failure.set(format!(
            "{}: an earlier write failed ({cause}); the store takes no writes until it is \
             reopened",
            self.file.display()
        ));
        self.committed_tx.send_modify(|_| {});
    }

    /// Refuses writes until [`Shared::clear_out_of_space`]: the disk is
    /// full, for the reason given.
    pub(super) fn set_out_of_space(&self, why: &str) {
        let mut full = self
            .out_of_space
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if full.is_none() {
            tracing::warn!(
                file = %self.file.display(),
                error = why,
                "the disk is full: the store refuses writes (reads go on) until there is room again"
            );
        }
        *full = Some(format!(
            "{why}; writes are refused until there is room again (reads go on)"
        ));
        self.is_out_of_space.store(true, Ordering::Release);
    }

    /// Takes writes again after the disk was full.
    pub(super) fn clear_out_of_space(&self) {
        let mut full = self
            .out_of_space
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.is_out_of_space.store(false, Ordering::Release);
        let was = full.take();
        if was.is_some() {
            tracing::info!(file = %self.file.display(), "there is room on disk again: the store takes writes");
        }
    }

    /// Why writes are refused for lack of room, if they are.
    pub(super) fn out_of_space(&self) -> Option<String> {
        if !self.is_out_of_space.load(Ordering::Acquire) {
            return None;
        }
        self.out_of_space
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether writes stopped after a failure.
    pub(super) fn failed(&self) -> bool {
        self.failure.get().is_some()
    }

    /// The error for requests refused after a failure.
    pub(super) fn failure(&self) -> Error {
        let why = self.failure.get().cloned();
        Error::Unavailable(
            why.unwrap_or_else(|| format!("{}: an earlier write failed", self.file.display())),
        )
    }

    /// Waits until the database holds every write acknowledged so far, so
    /// that a read started now sees them all. Acknowledgement runs ahead of
    /// the applier's commit by about one batch; most reads do not wait.
    pub(super) async fn caught_up(&self) -> Result<()> {
        let acknowledged = self.acknowledged.load(Ordering::Acquire);
        if self.committed.load(Ordering::Acquire) >= acknowledged {
            return Ok(());
        }
        let mut committed = self.committed_tx.subscribe();
        loop {
            if *committed.borrow_and_update() >= acknowledged {
                return Ok(());
            }
            if self.failed() {
                return Err(self.failure());
            }
            if self.is_closed() {
                return Err(self.closed_error());
            }
            if committed.changed().await.is_err() {
                return Err(self.closed_error());
            }
        }
    }

    pub(super) fn history(&self) -> RwLockReadGuard<'_, History> {
        // Every change leaves the index whole, even if a holder panicked.
        self.history.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn history_mut(&self) -> RwLockWriteGuard<'_, History> {
        self.history.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn recent(&self) -> MutexGuard<'_, Recent> {
        // Pushes and reads leave the tail consistent even if a holder panicked.
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn closed_error(&self) -> Error {
        Error::Unavailable(format!("{}: store is closed", self.file.display()))
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(super) fn begin_read(&self) -> Result<ReadTransaction> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db.as_ref().ok_or_else(|| self.closed_error())?;
        db.begin_read().ctx(&self.file)
    }

    /// A write transaction: durable at commit (a checkpoint) or, for every
    /// ordinary batch, made durable by the write-ahead log instead.
    pub(super) fn begin_write(&self, durable: bool) -> Result<WriteTransaction> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db.as_ref().ok_or_else(|| self.closed_error())?;
        let mut txn = db.begin_write().ctx(&self.file)?;
        if durable {
            // The allocator state goes with each checkpoint, so that the
            // open after a crash need not walk the whole file to rebuild
            // it (docs/benchmarks/scale.md, "Restarts without a storm").
            txn.set_quick_repair(true);
        } else {
            txn.set_durability(redb::Durability::None).ctx(&self.file)?;
        }
        Ok(txn)
    }

    /// Closes the database (a clean shutdown), releases the directory lock
    /// and wakes the watchers so that they end. `seal`: the database holds
    /// every write (no log is kept), so the close seals the file as closed
    /// (`seal.rs`); otherwise it removes the seal.
    pub(super) fn close(&self, seal: bool) {
        let db = self
            .db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let closed = match db.map(redb::Database::close) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                tracing::warn!(file = %self.file.display(), error = %e, "closing the store failed");
                false
            }
            None => false,
        };
        // Still under the directory lock: nothing else opens the file.
        self.sealer.finish(seal && closed);
        self.lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.closed.store(true, Ordering::Release);
        self.revision_tx.send_modify(|_| {});
        self.committed_tx.send_modify(|_| {});
    }
}
