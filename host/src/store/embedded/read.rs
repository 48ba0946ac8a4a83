//! Reads of the embedded store: `get` and `range` at the current or a past
//! revision, served from one redb read transaction (one snapshot); a read
//! at a past revision finds its versions in the in-memory index
//! (`history.rs`).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::Ordering;

use redb::{ReadTransaction, ReadableTable};

use super::Shared;
use super::schema::{
    CURRENT, Context, Entry, META, META_COMPACTED, META_REVISION, REVISIONS, read_meta,
};
use crate::store::{Error, KeyValue, Range, RangeResult, Result, Revision};

/// The key at the snapshot's revision, if it exists.
pub(super) fn get(txn: &ReadTransaction, file: &Path, key: &str) -> Result<Option<KeyValue>> {
    let current = txn.open_table(CURRENT).ctx(file)?;
    let Some(revs) = current.get(key).ctx(file)? else {
        return Ok(None);
    };
    let (create_revision, mod_revision) = revs.value();
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let kv = read_put(&revisions, file, key, mod_revision)?;
    check_create(kv, create_revision, file).map(Some)
}

/// Reads the put of `key` at `revision`.
fn read_put(
    revisions: &impl ReadableTable<i64, &'static [u8]>,
    file: &Path,
    key: &str,
    revision: Revision,
) -> Result<KeyValue> {
    let stored = revisions.get(revision).ctx(file)?.ok_or_else(|| {
        Error::Corrupt(format!(
            "{}: revision {revision} of {key:?} is missing",
            file.display()
        ))
    })?;
    Entry::decode(stored.value(), revision, file)?.to_kv(key, revision, file)
}

/// Checks a live version against the create revision `current` records.
fn check_create(kv: KeyValue, create_revision: Revision, file: &Path) -> Result<KeyValue> {
    if kv.create_revision == create_revision {
        Ok(kv)
    } else {
        Err(Error::Corrupt(format!(
            "{}: {:?} was created at {create_revision} according to the current table but at {} \
             according to revision {}",
            file.display(),
            kv.key,
            kv.create_revision,
            kv.mod_revision
        )))
    }
}

/// A range read with the exact semantics of the memory backend.
pub(super) fn range(txn: &ReadTransaction, shared: &Shared, range: &Range) -> Result<RangeResult> {
    let file = &shared.file;
    let meta = txn.open_table(META).ctx(file)?;
    let current_revision = read_meta(&meta, META_REVISION, file)?;
    let compacted = read_meta(&meta, META_COMPACTED, file)?;
    let revision = match range.revision {
        None | Some(0) => current_revision,
        Some(rev) if rev <= compacted => {
            return Err(Error::Compacted {
                requested: rev,
                compacted,
            });
        }
        Some(rev) if rev > current_revision => {
            return Err(Error::FutureRevision {
                requested: rev,
                current: current_revision,
            });
        }
        Some(rev) => rev,
    };
    let after = range
        .start_after
        .as_deref()
        .filter(|after| *after >= range.prefix.as_str());
    let (kvs, more) = if revision == current_revision {
        range_current(txn, file, range, after)?
    } else {
        range_past(txn, shared, range, after, revision)?
    };
    Ok(RangeResult {
        kvs,
        more,
        revision,
    })
}

/// Walks the live keys and reads each one's newest version.
fn range_current(
    txn: &ReadTransaction,
    file: &Path,
    range: &Range,
    after: Option<&str>,
) -> Result<(Vec<KeyValue>, bool)> {
    let current = txn.open_table(CURRENT).ctx(file)?;
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let start = match after {
        Some(after) => Bound::Excluded(after),
        None => Bound::Included(range.prefix.as_str()),
    };
    let mut kvs = Vec::new();
    for entry in current.range::<&str>((start, Bound::Unbounded)).ctx(file)? {
        let (key, revs) = entry.ctx(file)?;
        let key = key.value();
        if !key.starts_with(&range.prefix) {
            break;
        }
        if range.limit != 0 && kvs.len() == range.limit {
            return Ok((kvs, true));
        }
        let (create_revision, mod_revision) = revs.value();
        let kv = read_put(&revisions, file, key, mod_revision)?;
        kvs.push(check_create(kv, create_revision, file)?);
    }
    Ok((kvs, false))
}

/// Finds, in the in-memory index of versions, each key's newest version at
/// or below `revision` (skipping deletions) and reads it from the snapshot.
fn range_past(
    txn: &ReadTransaction,
    shared: &Shared,
    range: &Range,
    after: Option<&str>,
    revision: Revision,
) -> Result<(Vec<KeyValue>, bool)> {
    let file = &shared.file;
    // One more than the limit tells whether there are more.
    let wanted = if range.limit == 0 { 0 } else { range.limit + 1 };
    let mut found = shared
        .history()
        .visible(&range.prefix, after, revision, wanted);
    // The index drops versions once compaction passes them: it was whole
    // for `revision` if the compaction point is still below it now.
    let compacted = shared.compacted.load(Ordering::Acquire);
    if revision <= compacted {
        return Err(Error::Compacted {
            requested: revision,
            compacted,
        });
    }
    let more = range.limit != 0 && found.len() > range.limit;
    if more {
        found.truncate(range.limit);
    }
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let kvs = found
        .iter()
        .map(|(key, version)| read_put(&revisions, file, key, *version))
        .collect::<Result<_>>()?;
    Ok((kvs, more))
}

/// Single versions read in the caller's thread, for caches that keep
/// revisions rather than values ([`crate::store::Backend::version_reader`]).
pub(super) struct Versions(pub(super) std::sync::Arc<Shared>);

impl crate::store::VersionReader for Versions {
    fn readable(&self) -> Revision {
        self.0.committed.load(Ordering::Acquire)
    }

    fn read_version(&self, key: &str, revision: Revision) -> Result<Option<KeyValue>> {
        if revision > self.readable() {
            return Ok(None);
        }
        let file = &self.0.file;
        let txn = self.0.begin_read()?;
        let revisions = txn.open_table(REVISIONS).ctx(file)?;
        let Some(stored) = revisions.get(revision).ctx(file)? else {
            // Compacted away (a later write replaced it).
            return Ok(None);
        };
        Entry::decode(stored.value(), revision, file)?
            .to_kv(key, revision, file)
            .map(Some)
    }

    fn read_current(&self, key: &str) -> Result<Option<KeyValue>> {
        let txn = self.0.begin_read()?;
        get(&txn, &self.0.file, key)
    }

    fn saved_dir(&self) -> Option<std::path::PathBuf> {
        Some(self.0.file.parent()?.join("informers"))
    }
}
