//! Backups while the store runs: one read transaction (a snapshot taken
//! once every write acknowledged before the backup is in the database) is
//! copied, table by table, into a new database file, which is committed
//! durably and closed cleanly. The copy names no log (`log_segment` 0), so
//! it is a whole store on its own: put it as `store.redb` in an empty data
//! directory to restore it. Writes go on meanwhile (redb's readers do not
//! block its writer); the copy holds the snapshot's pages until it is done.
//!
//! The copy is written to an unnamed file in the data directory (created,
//! then unlinked at once), so that it takes room where the store does and
//! leaves nothing behind if the process dies; a name left by a crash
//! between the two steps is removed at the next open.

use std::fs::{self, File};
use std::io::{self, Seek};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{ReadTransaction, ReadableTable, TableDefinition};

use super::open::io_context;
use super::schema::{
    CURRENT, Context, META, META_LOG_SEGMENT, META_REVISION, REVISIONS, read_meta,
};
use super::wal::is_no_space;
use crate::store::{Backup, Error, Result};

/// The name a backup file has for a moment in the data directory.
/// Keys and values copied per transaction of the backup's database.
const BATCH_BYTES: usize = 16 << 20;

/// The backup's database's page cache (redb's default is 1 GiB).
const COPY_CACHE_BYTES: usize = 16 << 20;

const PREFIX: &str = "backup-";
const SUFFIX: &str = ".redb.tmp";

/// Writes the snapshot `txn` of the database `file` as a new database in an
/// unnamed file beside it. A full disk is [`Error::InsufficientStorage`].
pub(super) fn write(txn: &ReadTransaction, file: &Path) -> Result<Backup> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut out = unnamed_file(dir)?;
    let revision = copy(txn, file, &out).map_err(|err| match err {
        Error::Io(e) if is_no_space(&e) => Error::InsufficientStorage(format!(
            "no room for a backup of {} in {}: {e}",
            file.display(),
            dir.display()
        )),
        other => other,
    })?;
    let len = out
        .metadata()
        .and_then(|m| out.rewind().map(|()| m.len()))
        .map_err(|e| io_context(e, format!("reading back the backup of {}", file.display())))?;
    Ok(Backup {
        file: out,
        revision,
        len,
    })
}

/// A new file in `dir` with no name: created under a temporary one, which
/// is removed at once.
fn unnamed_file(dir: &Path) -> Result<File> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "{PREFIX}{}-{}{SUFFIX}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io_context(e, format!("creating {}", path.display())))?;
    fs::remove_file(&path).map_err(|e| io_context(e, format!("removing {}", path.display())))?;
    Ok(file)
}

/// Removes backup files a crash left named in `dir`.
pub(super) fn remove_leftovers(dir: &Path) -> Result<()> {
    let listing =
        fs::read_dir(dir).map_err(|e| io_context(e, format!("listing {}", dir.display())))?;
    for entry in listing.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(PREFIX) && name.ends_with(SUFFIX) {
            match fs::remove_file(entry.path()) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(io_context(
                        e,
                        format!("removing {}", entry.path().display()),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Copies every table of the snapshot into a new database in `out`,
/// committed durably and closed; returns the snapshot's revision.
fn copy(txn: &ReadTransaction, file: &Path, out: &File) -> Result<crate::store::Revision> {
    // What errors call the copy, which has no name.
    let backup = file.with_file_name(format!(
        "(backup of {})",
        file.file_name().unwrap_or_default().to_string_lossy()
    ));
    let failed = |e: io::Error| io_context(e, format!("writing {}", backup.display()));
    let target = out.try_clone().map_err(failed)?;
    let backend = FileBackend::new(target).ctx(&backup)?;
    let db = redb::Builder::new()
        .set_cache_size(COPY_CACHE_BYTES)
        .create_with_backend(backend)
        .ctx(&backup)?;
    let meta = txn.open_table(META).ctx(file)?;
    let revision = read_meta(&meta, META_REVISION, file)?;
    let mut write = db.begin_write().ctx(&backup)?;
    write = copy_table(txn, &db, write, REVISIONS, file, &backup)?;
    write = copy_table(txn, &db, write, CURRENT, file, &backup)?;
    write = copy_table(txn, &db, write, META, file, &backup)?;
    {
        // A whole store: no log continues it.
        let mut meta = write.open_table(META).ctx(&backup)?;
        meta.insert(META_LOG_SEGMENT, 0).ctx(&backup)?;
    }
    write.commit().ctx(&backup)?;
    db.close().ctx(&backup)?;
    out.sync_all().map_err(failed)?;
    Ok(revision)
}

/// Copies table `table` of `txn` into `write`.
/// Copy `table` into the backup, committing every [`BATCH_BYTES`] of keys
/// and values: an uncommitted transaction keeps its pages in memory, and
/// one transaction for the whole copy held as much as the store.
fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    db: &redb::Database,
    mut write: redb::WriteTransaction,
    table: TableDefinition<K, V>,
    file: &Path,
    backup: &Path,
) -> Result<redb::WriteTransaction> {
    let from = txn.open_table(table).ctx(file)?;
    let mut rows = from.iter().ctx(file)?;
    loop {
        let mut batch = 0;
        {
            let mut to = write.open_table(table).ctx(backup)?;
            for row in rows.by_ref() {
                let (key, value) = row.ctx(file)?;
                let (key, value) = (key.value(), value.value());
                batch += K::as_bytes(&key).as_ref().len() + V::as_bytes(&value).as_ref().len();
                to.insert(key, value).ctx(backup)?;
                if batch >= BATCH_BYTES {
                    break;
                }
            }
        }
        if batch < BATCH_BYTES {
            return Ok(write);
        }
        write.commit().ctx(backup)?;
        write = db.begin_write().ctx(backup)?;
    }
}
