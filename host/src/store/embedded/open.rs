//! Opening a data directory: the directory lock, creating a new database
//! atomically, checking an existing one without writing to it, then opening
//! it for real and reading the counters back.

use std::fs::{self, File, TryLockError};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redb::{Builder, Database, ReadableDatabase, ReadableTable, RepairSession};

use super::commit;
use super::history::History;
use super::index_file::{self, Loaded};
use super::overlay::Overlay;
use super::room::{Room, RoomyFile};
use super::schema::{
    CURRENT, Context, DB_FILE, DB_TMP_FILE, Entry, FORMAT_VERSION, LOCK_FILE, META, META_CLEANED,
    META_COMPACTED, META_FORMAT, META_LOG_SEGMENT, META_REVISION, OLDEST_FORMAT_VERSION, REVISIONS,
    db_error, read_meta,
};
use super::seal;
use super::wal::{Found, LogIo, Wal};
use crate::store::{Error, Result, Revision};

/// An open database with its directory lock, recovered counters and a
/// fresh write-ahead log segment.
pub(super) struct Opened<I: LogIo> {
    pub db: Database,
    pub lock: File,
    pub file: PathBuf,
    pub counters: Counters,
    /// Every key's versions, read from the saved index and `revisions`.
    pub history: History,
    /// The thread saving the index for the next open, if this one built it
    /// or replayed many changes onto it.
    pub index_writer: Option<std::thread::JoinHandle<()>>,
    pub wal: Wal<I>,
    /// The room reserved for the database file.
    pub room: Arc<Room>,
    /// The file matched its seal but for the blocks written since, so the
    /// full check was not needed (`seal.rs`).
    pub sealed: bool,
    /// Keeps the seal current.
    pub sealer: Arc<seal::Sealer>,
}

/// The persistent counters of the `meta` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counters {
    pub revision: Revision,
    pub compacted: Revision,
    pub cleaned: Revision,
}

impl Counters {
    /// The counters the `meta` table holds.
    pub(super) fn read(meta: &impl ReadableTable<&'static str, i64>, file: &Path) -> Result<Self> {
        Ok(Self {
            revision: read_meta(meta, META_REVISION, file)?,
            compacted: read_meta(meta, META_COMPACTED, file)?,
            cleaned: read_meta(meta, META_CLEANED, file)?,
        })
    }
}

/// redb calls the repair callback with this progress just before rolling the
/// file back to its previous commit because the latest one does not verify.
const ROLLBACK_PROGRESS: f64 = 0.3;

/// redb's page cache for the open store (its default is 1 GiB). 64 MiB
/// wrote and served as fast as 256 MiB did and holds far less after fat
/// writes (BENCHMARKS.md, "A plugin that writes fat statuses"); 32 MiB
/// wrote and listed as fast as 64 again, and is what a LIST refills after
/// the compactor's cleanup has emptied it, which counts against the
/// LIST's bound on growth (docs/benchmarks/scale.md, "Quiet after the
/// load").
const CACHE_BYTES: usize = 32 << 20;

/// redb's page cache while checking a file: pages are read once.
const CHECK_CACHE_BYTES: usize = 32 << 20;

/// A builder for the write-free check.
fn check_builder() -> Builder {
    let mut builder = Builder::new();
    builder.set_cache_size(CHECK_CACHE_BYTES);
    builder
}

/// What a database's `meta` table says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stored {
    pub counters: Counters,
    /// [`META_LOG_SEGMENT`]; `None` in files of formats before 4.
    pub log_segment: Option<u64>,
}

/// Locks `dir`, creates or checks its database and opens it, with the log
/// written through `io`.
pub(super) fn open<I: LogIo>(dir: &Path, io: I) -> Result<Opened<I>> {
    fs::create_dir_all(dir)
        .map_err(|e| io_context(e, format!("creating data directory {}", dir.display())))?;
    let lock = lock_directory(dir)?;
    super::backup::remove_leftovers(dir)?;
    let file = dir.join(DB_FILE);
    let found = Found::read(dir)?;
    match fs::symlink_metadata(&file) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound && found.is_empty() => create(dir, &file)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::Corrupt(format!(
                "{} is missing but the write-ahead log beside it holds writes: the directory was \
                 damaged. It was left untouched: restore it from a backup",
                file.display()
            )));
        }
        Err(e) => return Err(io_context(e, format!("reading {}", file.display()))),
    }
    let started = std::time::Instant::now();
    // The saved version index is read and decoded while the file is
    // checked (a thread's work the check does not wait on).
    let index_read = index_file::read_meanwhile(dir)?;
    let as_sealed = seal::check(dir, &file);
    let sealed = match &as_sealed {
        seal::Found::Matches(verified) => {
            tracing::debug!(
                file = %file.display(),
                written = verified.written(),
                "the file matches its seal but for the blocks written since"
            );
            true
        }
        seal::Found::Missing => false,
        seal::Found::Mismatch(why) => {
            tracing::warn!(
                file = %file.display(),
                why,
                "the file does not match its seal: checking every page"
            );
            false
        }
    };
    let checked = check(&file, !sealed)?;
    let checked_at = started.elapsed();
    // The log is checked against the database before anything is written.
    let checked_replay = found
        .replay(checked.stored.counters.revision, checked.stored.log_segment)
        .map_err(|err| checked.blame(err, &file))?;
    let crashed = checked.crashed;
    // From here on the file may change: sealed as it is, every write
    // recorded from now on.
    let sealer = seal::Sealer::open(dir, &file, as_sealed)
        .map_err(|e| io_context(e, format!("sealing {}", file.display())))?;
    let mut builder = Builder::new();
    builder.set_cache_size(CACHE_BYTES);
    if crashed {
        // Crash recovery: redb rebuilds its allocator state and may roll back
        // a last commit the crash left incomplete (never acknowledged), as
        // the check above already did, and logged, in memory.
        builder.set_repair_callback(|_| {});
    } else {
        builder.set_repair_callback(|session: &mut RepairSession| session.abort());
    }
    let room = Arc::new(Room::default());
    let backend = File::options()
        .read(true)
        .write(true)
        .open(&file)
        .and_then(|f| RoomyFile::new(f, room.clone(), sealer.clone(), &file))
        .map_err(|e| io_context(e, format!("opening {}", file.display())))?;
    let db = builder.create_with_backend(backend).ctx(&file)?;
    let stored = read_counters(&db, &file)?;
    // The real open repairs as the check did, so the counters agree; parse
    // the log again only if they do not.
    let replay = if stored == checked.stored {
        checked_replay
    } else {
        found
            .replay(stored.counters.revision, stored.log_segment)
            .map_err(|err| checked.blame(err, &file))?
    };
    if replay.torn_bytes > 0 {
        tracing::warn!(
            dir = %dir.display(),
            bytes = replay.torn_bytes,
            "the write-ahead log ends before the end of its last segment: what follows is an \
             append the crash interrupted (never acknowledged), and is not replayed"
        );
    }
    if !replay.records.is_empty() {
        tracing::info!(
            dir = %dir.display(),
            records = replay.records.len(),
            "recovering writes from the write-ahead log"
        );
    }
    // The new segment is there before the database names it (on a disk too
    // full for one it names none: once replayed, it holds every write); the
    // old ones go once the database holds their records, durably.
    let wal = Wal::create(io, dir, &found)?;
    let counters = commit::replay(
        &db,
        &replay.records,
        stored.counters,
        wal.named_segment(),
        &file,
    )?;
    wal.forget(&found)?;
    let replayed_at = started.elapsed();
    let index_read = index_read.join().unwrap_or_else(|_| {
        tracing::warn!(dir = %dir.display(), "the version index reader panicked: rebuilding it");
        None
    });
    let (history, loaded) = match index_file::load(dir, index_read, &db, &counters, &file)? {
        Some((history, replayed)) => (history, Loaded::Saved { replayed }),
        None => (load_history(&db, &file)?, Loaded::Rebuilt),
    };
    let index_at = started.elapsed();
    let save = match loaded {
        Loaded::Rebuilt => true,
        Loaded::Saved { replayed } => replayed > index_file::RESAVE_AFTER,
    };
    let index_writer = if save {
        index_file::save_later(dir, &db, &counters, &file, &history)?
    } else {
        None
    };
    tracing::debug!(
        dir = %dir.display(),
        check = ?checked_at,
        sealed,
        replay = ?replayed_at - checked_at,
        history = ?index_at - replayed_at,
        index = ?loaded,
        versions = history.len(),
        "store open: integrity check, log replay, version index"
    );
    Ok(Opened {
        db,
        lock,
        file,
        counters,
        history,
        index_writer,
        wal,
        room,
        sealed,
        sealer,
    })
}

/// Builds the in-memory index of versions from every change kept in
/// `revisions` (one sequential scan; the integrity check before has read
/// the same pages).
fn load_history(db: &Database, file: &Path) -> Result<History> {
    let txn = db.begin_read().ctx(file)?;
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let mut history = History::default();
    for entry in revisions.iter().ctx(file)? {
        let (revision, stored) = entry.ctx(file)?;
        let revision = revision.value();
        let entry = Entry::decode(stored.value(), revision, file)?;
        history.record(entry.key, revision, entry.value.is_none());
    }
    Ok(history)
}

/// Takes the directory's lock file, or says who holds it.
fn lock_directory(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_context(e, format!("opening {}", path.display())))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(TryLockError::WouldBlock) => Err(Error::Unavailable(format!(
            "data directory {} is in use by another process (or another store in this process)",
            dir.display()
        ))),
        Err(TryLockError::Error(e)) => Err(io_context(e, format!("locking {}", path.display()))),
    }
}

/// Creates an initialised database under a temporary name and renames it into
/// place, so that `store.redb` is never a half-created file.
fn create(dir: &Path, file: &Path) -> Result<()> {
    let tmp = dir.join(DB_TMP_FILE);
    // A leftover from a creation that crashed never held acknowledged data.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_context(e, format!("removing {}", tmp.display()))),
    }
    let db = Database::create(&tmp).ctx(&tmp)?;
    let txn = db.begin_write().ctx(&tmp)?;
    {
        txn.open_table(REVISIONS).ctx(&tmp)?;
        txn.open_table(CURRENT).ctx(&tmp)?;
        let mut meta = txn.open_table(META).ctx(&tmp)?;
        for (name, value) in [
            (META_FORMAT, FORMAT_VERSION),
            (META_REVISION, 0),
            (META_COMPACTED, 0),
            (META_CLEANED, 0),
            (META_LOG_SEGMENT, 0),
        ] {
            meta.insert(name, value).ctx(&tmp)?;
        }
    }
    txn.commit().ctx(&tmp)?;
    db.close().ctx(&tmp)?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_context(e, format!("syncing {}", tmp.display())))?;
    fs::rename(&tmp, file).map_err(|e| {
        io_context(
            e,
            format!("renaming {} to {}", tmp.display(), file.display()),
        )
    })?;
    sync_dir(dir)
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_context(e, format!("syncing directory {}", dir.display())))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Checks an existing database without writing to it: with `integrity`,
/// every page of the committed trees is verified (redb's integrity check;
/// without, the file matched its seal: `seal.rs`), then redb's recovery
/// runs over an [`Overlay`] so that its repair writes stay in memory, and
/// the schema is read back. Returns whether the file was left by a crash
/// (not closed), and what its `meta` table says as the real open will find
/// it.
///
/// A rollback of the latest commit is allowed only after a crash: a commit
/// that does not verify in a cleanly closed file was damaged afterwards, and
/// silently dropping it could lose acknowledged writes.
fn check(file: &Path, integrity: bool) -> Result<Checked> {
    let len = fs::metadata(file)
        .map_err(|e| io_context(e, format!("reading {}", file.display())))?
        .len();
    if len == 0 {
        return Err(Error::Corrupt(format!(
            "{} is empty (0 bytes) but should hold the store's database; a new store is never \
             left empty (it is created under a temporary name), so the file was truncated or \
             replaced. It was left untouched: restore it from a backup, or move it away to \
             start an empty store",
            file.display()
        )));
    }
    let damaged = |what: String| {
        Error::Corrupt(format!(
            "{} is damaged: {what}. It was left untouched: restore it from a backup, or move it \
             away to start an empty store",
            file.display()
        ))
    };
    let overlay = || -> Result<Overlay> {
        File::open(file)
            .and_then(Overlay::new)
            .map_err(|e| io_context(e, format!("opening {}", file.display())))
    };
    // A cleanly closed file opens read-only; one left by a crash needs the
    // recovery that only a writable open performs.
    let crashed = match guard(
        || Ok(check_builder().open_read_only_with_backend(overlay()?)),
        file,
    )? {
        Ok(db) if !integrity => {
            // Closed cleanly and as sealed: nothing to recover or verify.
            let stored = guard(|| read_counters(&db, file).map(Ok), file)?
                .map_err(|e: Error| damaged(e.to_string()))?;
            return Ok(Checked {
                crashed: false,
                rolled_back: false,
                stored,
            });
        }
        Ok(db) => {
            drop(db);
            false
        }
        Err(redb::DatabaseError::RepairAborted) => true,
        Err(e) => return Err(describe(file, e, &damaged)),
    };
    let rolled_back = Arc::new(AtomicBool::new(false));
    let mut builder = check_builder();
    builder.set_check_integrity_on_open(integrity);
    let flag = rolled_back.clone();
    builder.set_repair_callback(move |session: &mut RepairSession| {
        if session.progress() == ROLLBACK_PROGRESS {
            flag.store(true, Ordering::Relaxed);
            if !crashed {
                session.abort();
            }
        }
    });
    let db = guard(|| Ok(builder.create_with_backend(overlay()?)), file)?.map_err(|e| match e {
        redb::DatabaseError::RepairAborted => damaged(
            "its latest commit fails its checksums although the file was closed cleanly".into(),
        ),
        e => describe(file, e, &damaged),
    })?;
    let rolled_back = rolled_back.load(Ordering::Relaxed);
    if rolled_back {
        tracing::warn!(
            file = %file.display(),
            "the last commit before the crash was incomplete and is rolled back; it was never \
             acknowledged"
        );
    }
    let stored = guard(|| read_counters(&db, file).map(Ok), file)?
        .map_err(|e: Error| damaged(e.to_string()))?;
    Ok(Checked {
        crashed,
        rolled_back,
        stored,
    })
}

/// Checks a database file that should hold a whole store on its own (a
/// backup) without writing to it: every page, the schema, and that it
/// needs no log. Returns its revision.
pub(super) fn check_whole(file: &Path) -> Result<Revision> {
    let checked = check(file, true)?;
    match checked.stored.log_segment {
        Some(0) if !checked.crashed => Ok(checked.stored.counters.revision),
        Some(0) => Err(Error::Corrupt(format!(
            "{} was not closed: it may lack writes that a write-ahead log beside it held",
            file.display()
        ))),
        None => Err(Error::Corrupt(format!(
            "{} was written by an older build, which does not record whether it needs a \
             write-ahead log: open it as a data directory instead",
            file.display()
        ))),
        Some(segment) => Err(Error::Corrupt(format!(
            "{} is not a whole store: writes after its revision {} are in the write-ahead log \
             segment {} and after, which must be beside it",
            file.display(),
            checked.stored.counters.revision,
            super::wal::segment_name(segment)
        ))),
    }
}

/// What [`check`] found.
struct Checked {
    /// The file was left by a crash (not closed).
    crashed: bool,
    /// Its latest commit failed its checksums and was rolled back.
    rolled_back: bool,
    stored: Stored,
}

impl Checked {
    /// The error for a log that does not continue the database. After a
    /// rollback, the database is the one to blame: a commit torn by a crash
    /// leaves the log it needs (older segments go only once a checkpoint is
    /// durable), so a rolled-back commit the log does not continue was
    /// damaged after it was made.
    fn blame(&self, err: Error, file: &Path) -> Error {
        match err {
            Error::Corrupt(log) if self.rolled_back => Error::Corrupt(format!(
                "{} is damaged: its latest commit fails its checksums, and the commit before it \
                 (revision {}) is older than the write-ahead log beside it can bring back ({log}). \
                 The database lost writes the log no longer holds; it was left untouched: restore \
                 the data directory from a backup",
                file.display(),
                self.stored.counters.revision,
            )),
            other => other,
        }
    }
}

/// Runs `f`, turning a panic inside redb into an error.
fn guard<T>(f: impl FnOnce() -> Result<T>, file: &Path) -> Result<T> {
    panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Corrupt(format!(
            "{} is damaged: the database engine failed reading it ({what}). It was left \
             untouched",
            file.display()
        )))
    })
}

/// Explains an open failure found by [`check`].
fn describe(file: &Path, err: redb::DatabaseError, damaged: &dyn Fn(String) -> Error) -> Error {
    match err {
        redb::DatabaseError::Storage(redb::StorageError::Io(e))
            if e.kind() == io::ErrorKind::InvalidData
                || e.kind() == io::ErrorKind::UnexpectedEof =>
        {
            damaged(e.to_string())
        }
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(msg)) => damaged(format!(
            "the database engine's integrity check failed: {msg}"
        )),
        e => db_error(file, e),
    }
}

/// Reads and validates the `meta` counters.
fn read_counters(db: &impl ReadableDatabase, file: &Path) -> Result<Stored> {
    let txn = db.begin_read().ctx(file)?;
    txn.open_table(REVISIONS).ctx(file)?;
    txn.open_table(CURRENT).ctx(file)?;
    let meta = txn.open_table(META).ctx(file)?;
    let format = read_meta(&meta, META_FORMAT, file)?;
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&format) {
        return Err(Error::Corrupt(format!(
            "{}: store format {format} is not supported (this build reads formats \
             {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})",
            file.display()
        )));
    }
    let counters = Counters::read(&meta, file)?;
    let log_segment = match meta.get(META_LOG_SEGMENT).ctx(file)? {
        Some(segment) => Some(u64::try_from(segment.value()).map_err(|_| {
            Error::Corrupt(format!(
                "{}: meta counter {META_LOG_SEGMENT:?} is negative",
                file.display()
            ))
        })?),
        None if format >= 4 => {
            return Err(Error::Corrupt(format!(
                "{}: meta counter {META_LOG_SEGMENT:?} is missing",
                file.display()
            )));
        }
        None => None,
    };
    if !(0 <= counters.cleaned
        && counters.cleaned <= counters.compacted
        && counters.compacted <= counters.revision)
    {
        return Err(Error::Corrupt(format!(
            "{}: inconsistent counters {counters:?}",
            file.display()
        )));
    }
    Ok(Stored {
        counters,
        log_segment,
    })
}

/// An I/O error with what was being done.
pub(super) fn io_context(err: io::Error, doing: String) -> Error {
    Error::Io(io::Error::new(err.kind(), format!("{doing}: {err}")))
}
