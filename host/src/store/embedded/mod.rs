//! The embedded durable backend (the default): a [`Backend`] on the redb
//! database in one data directory, with exactly the memory backend's
//! semantics, every acknowledged write on disk (in a write-ahead log), and
//! concurrent writes group committed.
//!
//! # Layout
//!
//! A data directory holds `store.redb` (the database), `LOCK` (held with
//! an exclusive file lock while the store is open, so that a second process
//! gets "data directory … is in use by another process") and, while the
//! store is open or after a crash, the write-ahead log `wal-*.log` (see
//! `wal/`; a clean close leaves none), and the seal `store.redb.seal` with
//! its journal `store.redb.journal.{0,1}` (`seal.rs`). The database has
//! three tables:
//!
//! | table | key → value | holds |
//! |---|---|---|
//! | `revisions` | revision → create revision (i64 LE) ‖ key length (u32 LE) ‖ key ‖ value | every change since compaction, plus each live key's newest version at or below the compaction point; create revision 0 and no value mark a deletion |
//! | `current` | key → (create revision, mod revision) | live keys only: current reads and write conditions |
//! | `meta` | name → i64 | `format` (4; 1 to 3 are read and upgraded), `revision`, `compacted` (the compaction point), `cleaned` (how far compaction has physically removed entries), `log_segment` (the log segment that follows the last checkpoint; 0 when the database needs no log) |
//!
//! Values are stored once, in `revisions`, which only ever grows at its end:
//! whatever keys are written, a batch's values land on a few adjacent pages,
//! watch replay is a sequential scan, and compaction deletes mostly
//! contiguous runs. `current` holds small entries. The versions of each
//! key (for reads at a past revision, the value a deletion removed, and
//! compaction) are indexed in memory (`history.rs`), read at open from the
//! file a clean close (or the open before) saved it to (`index_file.rs`,
//! trusted only when whole and of this database as it is) plus the changes
//! after it, else rebuilt from `revisions`; formats 1 and 2 kept that index
//! in an `index` table, which the upgrade drops.
//!
//! # Writes
//!
//! One writer thread (`commit.rs`) decides all writes and group-commits
//! them: one log record (one fsync) per batch of queued requests, revisions
//! assigned in order, a failed condition consuming no revision. A write is
//! answered as soon as its batch's record is synced; the batch then goes to
//! the applier thread (`commit/apply.rs`), which writes every batch queued
//! meanwhile into one redb transaction and commits it without an fsync of
//! its own (`Durability::None`), while the writer already decides the next
//! batch against the writes the database does not hold yet and a snapshot
//! of what it does. The database is made durable at checkpoints (every
//! 32 MiB of log, after a second without writes, and at close): the log
//! moves on to a new segment, the applier commits durably, and the older
//! segments are deleted, with writes going on meanwhile. A lone writer is
//! committed at once; when the previous batch had several writers, the
//! next one waits (while requests keep arriving, at most 1 ms) for them to
//! come back, so that concurrent writers share one fsync.
//!
//! # Reads
//!
//! Each read is served from one redb read transaction (a snapshot), after
//! waiting until the applier has committed every write acknowledged before
//! the read started (usually it has; otherwise the wait is about one
//! commit), so that a read never misses an acknowledged write. Point reads
//! run on the caller's task; ranges, which can be long, on tokio's blocking
//! pool. Watches replay from `revisions` on disk, then follow acknowledged
//! batches through a bounded in-memory tail shared by all watchers
//! (`watch.rs`).
//!
//! `compact` makes the compaction point durable at once; the entries it
//! frees are then removed by the applier in chunks of about 2 ms between its
//! commits, and `compact` returns when they are gone (a cleanup cut short
//! by a close resumes at the next open).
//!
//! # Damaged files
//!
//! At open, the log's records newer than the database are applied again in
//! one durable commit. The log is read and checked against the database
//! before anything is written (`wal/read.rs`): a damaged record (one
//! followed by a valid record), a segment cut short, missing or out of
//! order, a gap in revisions, a missing log or a log without its database
//! is [`Error::Corrupt`] naming the file and the writes lost, and nothing is
//! touched; an invalid record with no valid record after it is the append a
//! crash interrupted (never acknowledged) and is dropped, with a warning.
//!
//! redb repairs files on open: after a crash it rebuilds its allocator state
//! and, if the latest commit fails its checksums, rolls back to the previous
//! one; a file damaged otherwise may even panic a plain open. None of that is
//! allowed to touch user data silently, so an existing file is first checked
//! without writing to it (`open.rs`): redb's full integrity check runs through
//! a copy-on-write view of the file (`overlay.rs`), and the schema and
//! counters are read back. An empty, truncated or garbage file, a failing
//! checksum in a cleanly closed file, or a missing table is reported as
//! [`Error::Corrupt`] naming the file, and the file is left byte-for-byte
//! untouched. Only after a crash may the latest commit be rolled back, if it
//! fails its checksums as a commit torn by a power loss does (its fsync never
//! completed); that is logged, and the log still holds every write since the
//! checkpoint before (its segments are deleted only once a checkpoint is
//! durable). A rolled-back commit the log does not continue was damaged
//! after it was made, and is reported as damage to the database, not to
//! the log. Damage to exactly the last record of the log looks
//! like a torn append and loses that record's batch, as in any log. A new
//! store is created under a temporary name and renamed into
//! place once initialised, so `store.redb` is never legitimately empty.
//!
//! Checkpoints (the durable commits) save redb's allocator state
//! (`set_quick_repair`), so the writable open after a crash loads it
//! instead of walking the whole file to rebuild it.
//!
//! The full check reads every live page (what that costs:
//! docs/benchmarks/store.md#with-the-applier-thread-and-the-in-memory-version-index-current).
//! An open usually needs less: the file is sealed (`seal.rs`,
//! `store.redb.seal`: its length and a CRC-32 of each 64 KiB) at open,
//! after every checkpoint and at close, and every block written since is
//! recorded in a journal before it is written. An open, after a clean
//! close or a crash, that finds every block the journal does not name as
//! sealed, read on every core in large sequential reads, skips redb's
//! walk; the blocks the journal names were written after the last
//! checkpoint, which redb's recovery does not read (or, for the
//! checkpoint's own pages, its two-phase commit synced). A missing,
//! damaged or stale seal or journal, or a block that differs unexplained,
//! sends the open to the full check, and the difference is named in the
//! log.
//!
//! # Backups and a full disk
//!
//! [`Backend::backup`] copies one read snapshot into a new database file
//! that needs no log (`backup.rs`), while writes go on. The log's segments
//! and the database file have their disk space reserved before they are
//! written (`wal/`, `room.rs`), so a full disk refuses a write before any of
//! it is written ([`Error::InsufficientStorage`]) instead of failing the
//! store; reads go on and writes resume once there is room (`commit.rs`).

mod backup;
mod commit;
mod history;
mod index_file;
mod open;
mod overlay;
mod read;
mod room;
mod schema;
mod seal;
mod shared;
mod stats;
mod wal;
mod watch;

#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redb::ReadTransaction;
use tokio::sync::{Semaphore, oneshot, watch as revision_watch};

use self::commit::{Queued, Request, Writer};
use self::shared::Shared;
pub use self::stats::EmbeddedStats;
use self::stats::Stats;
use self::wal::Syncer;
use self::watch::Recent;
use super::{
    Backend, Backup, Condition, Deleted, EngineMetric, Error, KeyValue, Range, RangeResult, Result,
    Revision, WatchStream,
};

/// How many write requests may queue for the writer before callers wait.
const QUEUE: usize = 4096;

/// The embedded, durable, multi-version key-value store.
///
/// Cloning gives another handle on the same store. The store closes when
/// every handle is dropped (in the background) or at [`EmbeddedBackend::close`].
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use setpoint::store::{Backend, Condition, EmbeddedBackend};
/// let dir = tempfile::tempdir().unwrap();
/// let store = EmbeddedBackend::open(dir.path()).unwrap();
/// let kv = store.put("/a", b"1".to_vec(), Condition::Absent).await.unwrap();
/// assert_eq!(kv.mod_revision, 1);
/// store.close().await.unwrap();
/// # });
/// ```
#[derive(Clone)]
pub struct EmbeddedBackend {
    shared: Arc<Shared>,
    /// The writer's queue; a slot of `slots` is taken per queued request.
    requests: std::sync::mpsc::Sender<Queued>,
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for EmbeddedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedBackend")
            .field("file", &self.shared.file)
            .finish_non_exhaustive()
    }
}

impl EmbeddedBackend {
    /// Opens the store in `dir`, creating the directory and an empty store if
    /// absent. Fails with [`Error::Unavailable`] if another process (or
    /// another open store in this one) uses the directory, and with
    /// [`Error::Corrupt`] (or [`Error::Io`]) naming the file if it is
    /// damaged; a damaged file is never modified.
    ///
    /// This blocks while it checks the whole file; call it from
    /// `spawn_blocking` in async code that must not stall.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    ///
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// store.put("/k", b"kept".to_vec(), Condition::Any).await?;
    /// assert!(EmbeddedBackend::open(dir.path()).is_err(), "the directory is in use");
    /// store.close().await?;
    /// let reopened = EmbeddedBackend::open(dir.path())?;
    /// assert_eq!(&*reopened.get("/k").await?.unwrap().value, b"kept");
    /// reopened.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_checkpointing_every(dir, wal::CHECKPOINT_BYTES)
    }

    /// [`EmbeddedBackend::open`] with a checkpoint every `checkpoint_bytes`
    /// of log: tests use a small one to cross many checkpoints and
    /// segments quickly.
    pub(crate) fn open_checkpointing_every(dir: &Path, checkpoint_bytes: u64) -> Result<Self> {
        Self::open_with(dir, checkpoint_bytes, wal::Disk)
    }

    /// [`EmbeddedBackend::open_checkpointing_every`] with the log's file
    /// operations done by `io`: tests pass a file system that fails where
    /// they say.
    fn open_with<I: wal::LogIo>(dir: &Path, checkpoint_bytes: u64, io: I) -> Result<Self> {
        let opened = open::open(dir, io)?;
        let counters = opened.counters;
        let (revision_tx, _) = revision_watch::channel(counters.revision);
        let (committed_tx, _) = revision_watch::channel(counters.revision);
        let shared = Arc::new(Shared {
            file: opened.file,
            db: RwLock::new(Some(opened.db)),
            lock: Mutex::new(Some(opened.lock)),
            revision_tx,
            acknowledged: AtomicI64::new(counters.revision),
            committed: AtomicI64::new(counters.revision),
            committed_tx,
            failure: OnceLock::new(),
            out_of_space: Mutex::new(None),
            is_out_of_space: AtomicBool::new(false),
            room: opened.room,
            compacted: AtomicI64::new(counters.compacted),
            recent: Mutex::new(Recent::new(counters.revision)),
            history: RwLock::new(opened.history),
            index_writer: Mutex::new(opened.index_writer),
            closed: AtomicBool::new(false),
            log_kept: AtomicBool::new(false),
            opened_sealed: opened.sealed,
            sealer: opened.sealer,
            stats: Stats::default(),
        });
        shared
            .sealer
            .start()
            .map_err(|e| open::io_context(e, "starting the store sealer thread".into()))?;
        if let Some(why) = opened.wal.no_room() {
            // Read-only from the start (`/readyz` says so) until the log finds room.
            shared.set_out_of_space(why);
        }
        let (requests, receiver) = std::sync::mpsc::channel();
        let syncer = Syncer::spawn(opened.wal, shared.stats.log_nanos.clone(), checkpoint_bytes)?;
        let writer = Writer::new(shared.clone(), receiver, counters, syncer)?;
        let on_panic = shared.clone();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                // A panic (a bug) must still close the store, so that callers
                // and watchers see it closed instead of waiting forever.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.run())).is_err()
                {
                    tracing::error!(file = %on_panic.file.display(), "store writer panicked");
                    on_panic.close(false);
                }
            })
            .map_err(|e| open::io_context(e, "starting the store writer thread".into()))?;
        tracing::debug!(file = %shared.file.display(), revision = counters.revision, "store opened");
        Ok(Self {
            shared,
            requests,
            slots: Arc::new(Semaphore::new(QUEUE)),
        })
    }

    /// The database file.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    ///
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// assert_eq!(store.file(), dir.path().join("store.redb"));
    /// store.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn file(&self) -> &Path {
        &self.shared.file
    }

    /// The writer's running totals (commits, writes, time spent).
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    ///
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// assert_eq!(store.stats().commits, 0);
    /// store.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> EmbeddedStats {
        let stats = &self.shared.stats;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        EmbeddedStats {
            commits: load(&stats.commits),
            writes: load(&stats.writes),
            decide_time: Duration::from_nanos(load(&stats.decide_nanos)),
            commit_time: Duration::from_nanos(load(&stats.commit_nanos)),
            applies: load(&stats.applies),
            apply_time: Duration::from_nanos(load(&stats.apply_nanos)),
            db_commit_time: Duration::from_nanos(load(&stats.db_commit_nanos)),
            gather_time: Duration::from_nanos(load(&stats.gather_nanos)),
            checkpoints: load(&stats.checkpoints),
            checkpoint_time: Duration::from_nanos(load(&stats.checkpoint_nanos)),
            settles: load(&stats.settles),
            log_time: Duration::from_nanos(load(&stats.log_nanos)),
            versions: self.shared.history().len() as u64,
            unapplied: self.shared.unapplied(),
            opened_sealed: self.shared.opened_sealed,
        }
    }

    /// Checks that `file` (a backup from [`Backend::backup`]) is a whole
    /// store, undamaged and needing no log, the way [`EmbeddedBackend::open`]
    /// checks a data directory, without writing to it. Returns the
    /// revision it holds.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// store.put("/k", vec![], Condition::Any).await?;
    /// let mut backup = store.backup().await?;
    /// let saved = dir.path().join("saved.redb");
    /// std::io::copy(&mut backup.file, &mut std::fs::File::create(&saved)?)?;
    /// assert_eq!(EmbeddedBackend::check_backup(&saved)?, 1);
    /// # store.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn check_backup(file: &Path) -> Result<Revision> {
        open::check_whole(file)
    }

    /// Whether the store takes writes now: `Ok`, or the error a write would
    /// get ([`Error::InsufficientStorage`] while the disk is full,
    /// [`Error::Unavailable`] after a failed write or once closed).
    ///
    /// ```
    /// use setpoint::store::EmbeddedBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    ///
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// assert!(store.writable().is_ok());
    /// store.close().await?;
    /// assert!(store.writable().is_err());
    /// # Ok(()) }
    /// ```
    pub fn writable(&self) -> Result<()> {
        if self.shared.is_closed() {
            return Err(self.shared.closed_error());
        }
        if self.shared.failed() {
            return Err(self.shared.failure());
        }
        match self.shared.out_of_space() {
            Some(why) => Err(Error::InsufficientStorage(why)),
            None => Ok(()),
        }
    }

    /// After [`EmbeddedBackend::close`]: whether the store's write-ahead
    /// log was kept because the database could not be made to hold every
    /// write (a write failed, or the final checkpoint could not be made on
    /// a full disk). The next open replays it; until then `store.redb`
    /// alone is not a backup.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// store.put("/a", vec![], Condition::Any).await?;
    /// store.close().await?;
    /// assert!(!store.log_kept(), "a clean close: the database holds every write");
    /// # Ok(()) }
    /// ```
    pub fn log_kept(&self) -> bool {
        self.shared.log_kept.load(Ordering::Acquire)
    }

    /// Finishes the writes already queued, closes the database cleanly and
    /// releases the directory; every handle then fails with
    /// [`Error::Unavailable`] and watches end. Returns once the directory can
    /// be opened again.
    ///
    /// ```
    /// use setpoint::store::{Backend, Condition, EmbeddedBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    ///
    /// let store = EmbeddedBackend::open(dir.path())?;
    /// let handle = store.clone();
    /// store.close().await?;
    /// assert!(handle.get("/k").await.is_err(), "every handle is closed");
    /// let again = EmbeddedBackend::open(dir.path())?; // the directory is free again
    /// again.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) -> Result<()> {
        let (reply, done) = oneshot::channel();
        if self.send(Request::Close { reply }).await.is_ok() {
            let _ = done.await;
        }
        // The writer may have been stopping already: wait until it is done.
        let mut revisions = self.shared.revision_tx.subscribe();
        while !self.shared.is_closed() {
            if revisions.changed().await.is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Queues a request for the writer, waiting for a free slot.
    async fn send(&self, request: Request) -> Result<()> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.shared.closed_error())?;
        self.requests
            .send(Queued {
                request,
                _slot: slot,
            })
            .map_err(|_| self.shared.closed_error())
    }

    /// Sends a request to the writer and waits for its answer.
    async fn request<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Request,
    ) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.send(make(reply)).await?;
        answer.await.map_err(|_| self.shared.closed_error())?
    }

    /// Runs a read on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Shared, ReadTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.shared.caught_up().await?;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let txn = shared.begin_read()?;
            f(&shared, txn)
        })
        .await
        .map_err(|e| Error::Unavailable(format!("store read task failed: {e}")))?
    }
}

#[async_trait]
impl Backend for EmbeddedBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        // A point read takes a few microseconds from redb's page cache:
        // less than handing it to the blocking pool and back (two thread
        // wake-ups, which dominated the whole loop's profile). Ranges,
        // which can be long, still go to the pool.
        self.shared.caught_up().await?;
        let txn = self.shared.begin_read()?;
        read::get(&txn, &self.shared.file, key)
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        self.read(move |shared, txn| read::range(&txn, shared, &range))
            .await
    }

    async fn range_written(
        &self,
        range: Range,
        write: Arc<crate::store::WriteVersion>,
    ) -> Result<crate::store::WrittenRange> {
        self.read(move |shared, txn| read::range_written(&txn, shared, &range, &*write))
            .await
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        let key = key.to_owned();
        // Copied into shared memory here, on the caller's task, not on the
        // writer thread.
        let value: Arc<[u8]> = value.into();
        self.request(|reply| Request::Put {
            key,
            value,
            condition,
            reply,
        })
        .await
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        let key = key.to_owned();
        self.request(|reply| Request::Delete {
            key,
            condition,
            reply,
        })
        .await
    }

    async fn current_revision(&self) -> Result<Revision> {
        if self.shared.is_closed() {
            return Err(self.shared.closed_error());
        }
        Ok(*self.shared.revision_tx.borrow())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.request(|reply| Request::Compact { revision, reply })
            .await
    }

    fn engine_metrics(&self) -> Vec<EngineMetric> {
        self.stats().metrics()
    }

    fn writable(&self) -> Result<()> {
        EmbeddedBackend::writable(self)
    }

    fn version_reader(&self) -> Option<Arc<dyn crate::store::VersionReader>> {
        Some(Arc::new(read::Versions(self.shared.clone())))
    }

    async fn backup(&self) -> Result<Backup> {
        // After every write acknowledged so far is in the database.
        self.read(|shared, txn| backup::write(&txn, &shared.file))
            .await
    }

    async fn watch(&self, after: Revision) -> Result<WatchStream> {
        if self.shared.is_closed() {
            return Err(self.shared.closed_error());
        }
        let compacted = self.shared.compacted.load(Ordering::Acquire);
        if after < compacted {
            return Err(Error::Compacted {
                requested: after,
                compacted,
            });
        }
        Ok(watch::spawn(self.shared.clone(), after))
    }
}
