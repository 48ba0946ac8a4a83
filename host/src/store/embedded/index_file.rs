//! The version index's file, `versions` beside the database: the in-memory
//! index of every key's versions (`history.rs`) as of one revision, so
//! that an open reads it and the changes after it instead of rebuilding it
//! from every stored change (docs/benchmarks/scale.md, "Informers that read
//! back").
//!
//! It is a cache of the database, never a source. It is trusted only when
//! whole (its length and CRC-32), of this database (the entry stored at its
//! revision has the CRC-32 it names), not ahead of it, and not outdated by
//! a cleanup (the database's `cleaned` counter is the one it names: a
//! cleanup is the only thing that removes versions). Anything else is named
//! in the log, and the index is rebuilt from `revisions` as before.
//!
//! The open reads and decodes it on a thread of its own while the database
//! file is being checked, and checks it against the database once that is
//! open.
//!
//! It is written beside (`versions.new`), synced and renamed over the last
//! one, the directory synced: a crash leaves the old file or the new. It is
//! written when nothing else runs on the store: after an open that rebuilt
//! the index or replayed many changes onto it (encoded in the open, written
//! on a thread while the host starts) and at a clean close, after the final
//! checkpoint.

use std::path::Path;

use redb::{Database, ReadTransaction, ReadableDatabase};

use super::Shared;
use super::history::History;
use super::open::Counters;
use super::schema::{Context, Entry, META, REVISIONS};
use crate::store::{Error, Result, Revision};

/// The file in the data directory.
pub(super) const FILE: &str = "versions";

/// Where a new file is written before it is renamed over [`FILE`].
const NEW_FILE: &str = "versions.new";

/// The first line: the format.
const MAGIC: &[u8] = b"setpoint-versions 1\n";

/// The fixed fields after [`MAGIC`]: revision, cleaned (i64 LE each), the
/// entry's CRC-32, the body's length (u64 LE) and its CRC-32.
const FIELDS: usize = 8 + 8 + 4 + 8 + 4;

/// Changes replayed onto a saved index above which the open saves a new
/// one (fewer cost less to replay than a save).
pub(super) const RESAVE_AFTER: u64 = 100_000;

/// What a saved index says it is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    /// The database's revision when it was saved.
    pub revision: Revision,
    /// The database's `cleaned` counter then.
    pub cleaned: Revision,
    /// The CRC-32 of the entry stored at `revision` (0 at revision 0).
    pub entry_crc: u32,
}

/// How the open came by its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Loaded {
    /// From the file, then this many changes after it.
    Saved { replayed: u64 },
    /// Rebuilt from every change stored.
    Rebuilt,
}

/// The stamp of the database `txn` reads, at `revision` with history
/// cleaned up to `cleaned`; `None` if the entry at `revision` is not there
/// to name (a deletion at the top that a cleanup removed): no index is
/// saved then.
fn stamp(
    txn: &ReadTransaction,
    revision: Revision,
    cleaned: Revision,
    file: &Path,
) -> Result<Option<Stamp>> {
    if revision == 0 {
        return Ok(Some(Stamp {
            revision,
            cleaned,
            entry_crc: 0,
        }));
    }
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    Ok(revisions.get(revision).ctx(file)?.map(|stored| Stamp {
        revision,
        cleaned,
        entry_crc: crc32fast::hash(stored.value()),
    }))
}

/// The file's bytes for `history`, the index of the database `txn` reads
/// at `counters`; `None` if no stamp names it ([`stamp`]).
fn snapshot(
    txn: &ReadTransaction,
    counters: &Counters,
    history: &History,
    file: &Path,
) -> Result<Option<Vec<u8>>> {
    let stamp = stamp(txn, counters.revision, counters.cleaned, file)?;
    Ok(stamp.map(|stamp| encode(history, &stamp)))
}

/// The file's bytes for `history` as of `stamp`.
pub(super) fn encode(history: &History, stamp: &Stamp) -> Vec<u8> {
    let body = history.encode();
    let mut out = Vec::with_capacity(MAGIC.len() + FIELDS + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&stamp.revision.to_le_bytes());
    out.extend_from_slice(&stamp.cleaned.to_le_bytes());
    out.extend_from_slice(&stamp.entry_crc.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The index in `bytes` with its stamp, or what is wrong with them.
pub(super) fn decode(bytes: &[u8]) -> std::result::Result<(Stamp, History), String> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or("not a version index of this format")?;
    if rest.len() < FIELDS {
        return Err("cut short in its header".into());
    }
    let (fields, body) = rest.split_at(FIELDS);
    let i64_at = |at: usize| i64::from_le_bytes(fields[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(fields[at..at + 4].try_into().expect("4 bytes"));
    let stamp = Stamp {
        revision: i64_at(0),
        cleaned: i64_at(8),
        entry_crc: u32_at(16),
    };
    let len = u64::from_le_bytes(fields[20..28].try_into().expect("8 bytes"));
    if len != body.len() as u64 {
        return Err(format!(
            "{} bytes of index where the header says {len}",
            body.len()
        ));
    }
    if crc32fast::hash(body) != u32_at(28) {
        return Err("its checksum does not match: the file is damaged".into());
    }
    Ok((stamp, History::decode(body)?))
}

/// Writes `bytes` as the directory's index file: beside, synced, renamed
/// over the last one, the directory synced.
pub(super) fn write(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::files::replace(&dir.join(FILE), &dir.join(NEW_FILE), bytes)
}

/// The index saved in `dir`, read and decoded (whole, by its CRC) but not
/// yet checked against the database: needs no database, so the open runs
/// it while the database file is being checked. `None` if there is none
/// or it is damaged (named in the log).
pub(super) fn read(dir: &Path) -> Option<(Stamp, History)> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => {
            refuse(&path, &format!("it cannot be read ({err})"));
            return None;
        }
    };
    match decode(&bytes) {
        Ok(found) => Some(found),
        Err(why) => {
            refuse(&path, &why);
            None
        }
    }
}

/// [`read`] on a thread of its own, started before the database is
/// checked and opened; [`load`] takes what it read.
pub(super) fn read_meanwhile(
    dir: &Path,
) -> Result<std::thread::JoinHandle<Option<(Stamp, History)>>> {
    let dir = dir.to_owned();
    std::thread::Builder::new()
        .name("store-index-read".into())
        .spawn(move || read(&dir))
        .map_err(|e| super::open::io_context(e, "starting the version index reader".into()))
}

/// The saved index `read` (see [`read`]) if it is of `db` as it is, with
/// the changes after it recorded; else `None`, with why named in the log.
pub(super) fn load(
    dir: &Path,
    read: Option<(Stamp, History)>,
    db: &Database,
    counters: &Counters,
    file: &Path,
) -> Result<Option<(History, u64)>> {
    let path = dir.join(FILE);
    let Some((saved, mut history)) = read else {
        return Ok(None);
    };
    let txn = db.begin_read().ctx(file)?;
    if saved.revision > counters.revision {
        refuse(
            &path,
            &format!(
                "it is of revision {} but the database ends at {}",
                saved.revision, counters.revision
            ),
        );
        return Ok(None);
    }
    if saved.cleaned != counters.cleaned {
        refuse(
            &path,
            &format!(
                "history was cleaned up to {} since it was saved (then {})",
                counters.cleaned, saved.cleaned
            ),
        );
        return Ok(None);
    }
    if stamp(&txn, saved.revision, saved.cleaned, file)? != Some(saved) {
        refuse(
            &path,
            &format!(
                "the change stored at its revision {} is not the one it was saved with (another database's)",
                saved.revision
            ),
        );
        return Ok(None);
    }
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let mut replayed = 0;
    for entry in revisions.range((saved.revision + 1)..).ctx(file)? {
        let (revision, stored) = entry.ctx(file)?;
        let revision = revision.value();
        let entry = Entry::decode(stored.value(), revision, file)?;
        history.record_if_newer(entry.key, revision, entry.value.is_none());
        replayed += 1;
    }
    Ok(Some((history, replayed)))
}

/// Encodes `history`, the index of `db` at `counters`, in the open and
/// writes it on a thread of its own (the host starts meanwhile).
pub(super) fn save_later(
    dir: &Path,
    db: &Database,
    counters: &Counters,
    file: &Path,
    history: &History,
) -> Result<Option<std::thread::JoinHandle<()>>> {
    let txn = db.begin_read().ctx(file)?;
    let Some(bytes) = snapshot(&txn, counters, history, file)? else {
        return Ok(None);
    };
    write_later(dir, bytes).map(Some)
}

/// Writes an encoded index to `dir` on a thread of its own; a failure is
/// logged ([`unsaved`]).
fn write_later(dir: &Path, bytes: Vec<u8>) -> Result<std::thread::JoinHandle<()>> {
    let dir = dir.to_owned();
    std::thread::Builder::new()
        .name("store-index".into())
        .spawn(move || {
            if let Err(err) = write(&dir, &bytes) {
                unsaved(&dir, &Error::Io(err));
            }
        })
        .map_err(|e| super::open::io_context(e, "starting the version index writer".into()))
}

/// While the store runs, on the applier's thread between its jobs (the
/// database and the index agree) once the writer is idle: saves the index
/// on a thread if it moved [`RESAVE_AFTER`] changes or was cleaned since
/// `last` (the revision and cleanup point of the last save, updated), so
/// that an open after a crash reads it instead of rebuilding it. An
/// earlier save still writing defers this one to the next idle moment.
pub(super) fn save_when_idle(shared: &Shared, last: &mut (Revision, Revision)) -> Result<()> {
    let file = &shared.file;
    let txn = shared.begin_read()?;
    let counters = Counters::read(&txn.open_table(META).ctx(file)?, file)?;
    let moved = u64::try_from(counters.revision - last.0).unwrap_or(0);
    if moved < RESAVE_AFTER && counters.cleaned == last.1 {
        return Ok(());
    }
    let mut writer = shared
        .index_writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if writer.as_ref().is_some_and(|w| !w.is_finished()) {
        return Ok(());
    }
    if let Some(Err(_)) = writer.take().map(std::thread::JoinHandle::join) {
        tracing::warn!(file = %file.display(), "the version index writer panicked");
    }
    // What the index is saved with must be what an open after a crash
    // finds: the commits since the last checkpoint (cleanup chunks) made
    // durable, the log segment they name unchanged.
    drop(txn);
    shared.begin_write(true)?.commit().ctx(file)?;
    let txn = shared.begin_read()?;
    let Some(bytes) = snapshot(&txn, &counters, &shared.history(), file)? else {
        return Ok(());
    };
    *last = (counters.revision, counters.cleaned);
    *writer = Some(write_later(file.parent().unwrap_or(Path::new(".")), bytes)?);
    Ok(())
}

/// Saves the index of the store `shared` holds, at a clean close (after
/// the final checkpoint; nothing changes the index any more), once the
/// open's writer is done.
pub(super) fn save(shared: &Shared) {
    let joined = shared
        .index_writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .map(std::thread::JoinHandle::join);
    if let Some(Err(_)) = joined {
        tracing::warn!(file = %shared.file.display(), "the version index writer panicked");
    }
    let file = &shared.file;
    let dir = file.parent().unwrap_or(Path::new("."));
    let saved = (|| -> Result<()> {
        let txn = shared.begin_read()?;
        let counters = Counters::read(&txn.open_table(META).ctx(file)?, file)?;
        match snapshot(&txn, &counters, &shared.history(), file)? {
            Some(bytes) => write(dir, &bytes).map_err(Error::Io),
            None => Ok(()),
        }
    })();
    if let Err(err) = saved {
        unsaved(dir, &err);
    }
}

/// Logs a save that failed (a full disk, say): never fatal, the next open
/// rebuilds the index.
fn unsaved(dir: &Path, err: &Error) {
    tracing::warn!(dir = %dir.display(), %err, "saving the version index failed: the next open rebuilds it");
}

/// Logs why the saved index at `path` is not used.
fn refuse(path: &Path, why: &str) {
    tracing::warn!(file = %path.display(), why, "the saved version index is not used: rebuilding it from the stored changes");
}

#[cfg(test)]
mod tests;
