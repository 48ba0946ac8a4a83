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
use crate::store::{
    Error, KeyValue, Range, RangeResult, Result, Revision, VersionRef, WriteVersion, WrittenRange,
};

/// The key at the snapshot's revision, if it exists.
pub(super) fn get(txn: &ReadTransaction, file: &Path, key: &str) -> Result<Option<KeyValue>> {
    let current = txn.open_table(CURRENT).ctx(file)?;
    let Some(revs) = current.get(key).ctx(file)? else {
        return Ok(None);
    };
    let (create_revision, mod_revision) = revs.value();
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let version = (key, Some(create_revision), mod_revision);
    read_version(&revisions, file, version, |version| version.to_key_value()).map(Some)
}

/// A range read with the exact semantics of the memory backend.
pub(super) fn range(txn: &ReadTransaction, shared: &Shared, range: &Range) -> Result<RangeResult> {
    let file = &shared.file;
    let (wanted, more, revision) = wanted(txn, shared, range)?;
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let mut parts = read_parts(&wanted, |part| {
        part.iter()
            .map(|w| {
                read_version(&revisions, file, w.version(), |version| {
                    version.to_key_value()
                })
            })
            .collect::<Result<Vec<_>>>()
    })?
    .into_iter();
    let mut kvs = parts.next().unwrap_or_default();
    kvs.reserve(wanted.len() - kvs.len());
    for part in parts {
        kvs.extend(part);
    }
    Ok(RangeResult {
        kvs,
        more,
        revision,
    })
}

/// [`range`], each version handed to `write` where redb lends it, on the
/// thread that read it ([`Backend::range_written`]).
///
/// [`Backend::range_written`]: crate::store::Backend::range_written
pub(super) fn range_written(
    txn: &ReadTransaction,
    shared: &Shared,
    range: &Range,
    write: &WriteVersion,
) -> Result<WrittenRange> {
    let file = &shared.file;
    let (wanted, more, revision) = wanted(txn, shared, range)?;
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let parts = read_parts(&wanted, |part| {
        let (mut out, mut value_bytes) = (Vec::new(), 0);
        for (i, w) in part.iter().enumerate() {
            read_version(&revisions, file, w.version(), |version| {
                value_bytes += version.value.len();
                write(version, &mut out)
            })??;
            if i == 0 {
                // Sized once, from the first, rather than grown by doubling.
                out.reserve(out.len().saturating_add(16) * (part.len() - 1));
            }
        }
        Ok((out, value_bytes))
    })?;
    Ok(WrittenRange {
        value_bytes: parts.iter().map(|(_, bytes)| bytes).sum(),
        parts: parts.into_iter().map(|(out, _)| out).collect(),
        count: wanted.len(),
        last_key: wanted.last().map(|w| w.key.clone()),
        more,
        revision,
    })
}

/// The versions a range reads, whether more keys match beyond its limit,
/// and the revision it is served at.
fn wanted(
    txn: &ReadTransaction,
    shared: &Shared,
    range: &Range,
) -> Result<(Vec<Wanted>, bool, Revision)> {
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
    let (wanted, more) = if revision == current_revision {
        wanted_current(txn, file, range, after)?
    } else {
        wanted_past(shared, range, after, revision)?
    };
    Ok((wanted, more, revision))
}

/// Walks the live keys: each one's newest version.
fn wanted_current(
    txn: &ReadTransaction,
    file: &Path,
    range: &Range,
    after: Option<&str>,
) -> Result<(Vec<Wanted>, bool)> {
    let current = txn.open_table(CURRENT).ctx(file)?;
    let start = match after {
        Some(after) => Bound::Excluded(after),
        None => Bound::Included(range.prefix.as_str()),
    };
    let mut wanted = Vec::new();
    let mut more = false;
    for entry in current.range::<&str>((start, Bound::Unbounded)).ctx(file)? {
        let (key, revs) = entry.ctx(file)?;
        let key = key.value();
        if !key.starts_with(&range.prefix) {
            break;
        }
        if range.limit != 0 && wanted.len() == range.limit {
            more = true;
            break;
        }
        let (create_revision, mod_revision) = revs.value();
        wanted.push(Wanted {
            key: key.to_owned(),
            create_revision: Some(create_revision),
            mod_revision,
        });
    }
    Ok((wanted, more))
}

/// A version a range reads: its key, its revision, and the create
/// revision the current table records for it (`None` for a past version,
/// which the current table does not describe).
struct Wanted {
    key: String,
    create_revision: Option<Revision>,
    mod_revision: Revision,
}

impl Wanted {
    /// What [`read_version`] reads.
    fn version(&self) -> (&str, Option<Revision>, Revision) {
        (&self.key, self.create_revision, self.mod_revision)
    }
}

/// Versions a range reads in one thread; a longer page is split into
/// parts of at least this many, read at once by as many threads (up to
/// [`READERS`]). Each read walks down the revisions tree to a leaf that is
/// rarely in redb's cache and copies it out of the file — a page-cache
/// hit takes a microsecond or so, but a page the kernel has dropped waits
/// on the disk, and a LIST of a million objects waited that way more than
/// it computed (docs/benchmarks/scale.md, "A LIST that reads on four
/// threads"). Threads that wait on the disk do not take a core, so
/// there are more of them than cores.
const READ_ALONE: usize = 96;

/// Threads that read one range's versions at most.
const READERS: usize = 4;

/// `read` applied to `wanted` in parts, in their order: a long range in
/// parts at once, on scoped threads reading the same snapshot.
fn read_parts<T: Send>(
    wanted: &[Wanted],
    read: impl Fn(&[Wanted]) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let parts = (wanted.len() / READ_ALONE).clamp(1, READERS);
    if parts == 1 {
        return Ok(vec![read(wanted)?]);
    }
    let mut chunks = wanted.chunks(wanted.len().div_ceil(parts));
    let first = chunks.next().expect("more than one part");
    let read = &read;
    std::thread::scope(|scope| {
        let others: Vec<_> = chunks
            .map(|chunk| scope.spawn(move || read(chunk)))
            .collect();
        let mut results = vec![read(first)?];
        for other in others {
            let part = other
                .join()
                .map_err(|_| Error::Unavailable("a store read thread panicked".into()))?;
            results.push(part?);
        }
        Ok(results)
    })
}

/// Reads the version of `key` at `revision` and hands it to `take` where
/// redb lends it, checking it is the put it must be (and, for a live key,
/// of the create revision the current table records).
fn read_version<R>(
    revisions: &impl ReadableTable<i64, &'static [u8]>,
    file: &Path,
    (key, create_revision, revision): (&str, Option<Revision>, Revision),
    take: impl FnOnce(VersionRef<'_>) -> R,
) -> Result<R> {
    let stored = revisions.get(revision).ctx(file)?.ok_or_else(|| {
        Error::Corrupt(format!(
            "{}: revision {revision} of {key:?} is missing",
            file.display(),
        ))
    })?;
    let version = Entry::decode(stored.value(), revision, file)?.version(key, revision, file)?;
    match create_revision {
        Some(create_revision) if create_revision != version.create_revision => {
            Err(Error::Corrupt(format!(
                "{}: {key:?} was created at {create_revision} according to the current table but \
                 at {} according to revision {revision}",
                file.display(),
                version.create_revision,
            )))
        }
        _ => Ok(take(version)),
    }
}

/// Finds, in the in-memory index of versions, each key's newest version at
/// or below `revision` (skipping deletions).
fn wanted_past(
    shared: &Shared,
    range: &Range,
    after: Option<&str>,
    revision: Revision,
) -> Result<(Vec<Wanted>, bool)> {
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
    let wanted = found
        .into_iter()
        .map(|(key, version)| Wanted {
            key: key.as_ref().to_owned(),
            create_revision: None,
            mod_revision: version,
        })
        .collect();
    Ok((wanted, more))
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use redb::backends::InMemoryBackend;
    use redb::{Database, ReadableDatabase};

    use super::{READ_ALONE, READERS, Wanted, read_parts, read_version};
    use crate::store::embedded::schema::{REVISIONS, encode, encoded_len};
    use crate::store::{Error, Revision};

    /// A revisions table holding, at each revision given, a put of the
    /// key named after it.
    fn table(revisions: &[Revision]) -> Database {
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(REVISIONS).unwrap();
            for &revision in revisions {
                let (key, value) = (key(revision), format!("{{\"at\":{revision}}}"));
                let mut entry = vec![0; encoded_len(&key, value.len())];
                encode(&mut entry, revision, &key, value.as_bytes());
                table.insert(revision, entry.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        db
    }

    fn key(revision: Revision) -> String {
        format!("/k/{:08}", revision * 7919 % 100_003)
    }

    fn wanted(revisions: &[Revision]) -> Vec<Wanted> {
        revisions
            .iter()
            .map(|&revision| Wanted {
                key: key(revision),
                create_revision: Some(revision),
                mod_revision: revision,
            })
            .collect()
    }

    fn read(db: &Database, revisions: &[Revision]) -> Result<Vec<Revision>, Error> {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(REVISIONS).unwrap();
        let file = Path::new("test.redb");
        let kvs: Vec<_> = read_parts(&wanted(revisions), |part| {
            part.iter()
                .map(|w| read_version(&table, file, w.version(), |version| version.to_key_value()))
                .collect::<Result<Vec<_>, Error>>()
        })?
        .concat();
        for kv in &kvs {
            assert_eq!(kv.key, key(kv.mod_revision));
            assert_eq!(
                *kv.value,
                *format!("{{\"at\":{}}}", kv.mod_revision).as_bytes()
            );
        }
        Ok(kvs.iter().map(|kv| kv.mod_revision).collect())
    }

    #[test]
    fn versions_come_back_in_the_order_asked_whether_read_on_one_thread_or_several() {
        // More than enough for every reader thread.
        let mut stored: Vec<Revision> = (1..=2_000).collect();
        stored.extend((0..300).map(|i| 10_000 + 100 * i));
        let db = table(&stored);
        // Asked in an order unlike the revisions' (as keys order them).
        let mut asked: Vec<Revision> = stored.iter().copied().filter(|r| r % 3 != 0).collect();
        fastrand::Rng::with_seed(7).shuffle(&mut asked);
        assert!(asked.len() > READ_ALONE * READERS);
        assert_eq!(read(&db, &asked).unwrap(), asked);
        // Small reads (one thread) and single versions.
        assert_eq!(read(&db, &asked[..5]).unwrap(), &asked[..5]);
        assert_eq!(read(&db, &[10_100]).unwrap(), [10_100]);
        assert_eq!(read(&db, &[]).unwrap(), Vec::<Revision>::new());
    }

    #[test]
    fn a_missing_version_is_named_as_corruption_by_any_reader_thread() {
        let stored: Vec<Revision> = (1..=1_000).filter(|r| *r != 500 && *r != 900).collect();
        let db = table(&stored);
        for asked in [
            (1..=1_000).collect::<Vec<_>>(),
            vec![498, 499, 500, 501, 502],
            vec![100, 900],
        ] {
            let missing = if asked.contains(&500) { 500 } else { 900 };
            match read(&db, &asked) {
                Err(Error::Corrupt(message)) => assert!(
                    message.contains(&format!(
                        "revision {missing} of {:?} is missing",
                        key(missing)
                    )),
                    "{message}"
                ),
                other => panic!("{asked:?}: {other:?}"),
            }
        }
    }
}
