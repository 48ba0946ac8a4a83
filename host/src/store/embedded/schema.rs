//! The on-disk layout of the embedded store: redb table definitions, the
//! encoding of stored versions and the mapping of redb errors to
//! [`store::Error`](crate::store::Error).

use std::path::Path;
use std::sync::Arc;

use redb::{ReadableTable, TableDefinition};

use crate::store::{Error, KeyValue, Revision, VersionRef};

/// Every change since compaction, by revision: revision → encoded
/// [`Entry`] (key, create revision, value or deletion). Appends only, so
/// values are written sequentially whatever the key, watch replay is a
/// sequential scan, and compaction removes mostly contiguous runs.
pub(super) const REVISIONS: TableDefinition<i64, &[u8]> = TableDefinition::new("revisions");

/// The versions of each key: (key, revision) → (), in formats 1 and 2
/// only; format 3 keeps this index in memory (`history.rs`) and drops the
/// table when it upgrades a file.
pub(super) const LEGACY_INDEX: TableDefinition<(&str, i64), ()> = TableDefinition::new("index");

/// Live keys only: key → (create revision, mod revision).
pub(super) const CURRENT: TableDefinition<&str, (i64, i64)> = TableDefinition::new("current");

/// Counters: [`META_FORMAT`], [`META_REVISION`], [`META_COMPACTED`],
/// [`META_CLEANED`], [`META_LOG_SEGMENT`].
pub(super) const META: TableDefinition<&str, i64> = TableDefinition::new("meta");

/// The schema version written by this code.
pub(super) const META_FORMAT: &str = "format";
/// The revision of the last committed write.
pub(super) const META_REVISION: &str = "revision";
/// The compaction point: reads and watches at or below it are refused.
pub(super) const META_COMPACTED: &str = "compacted";
/// How far history and log have physically been cleaned (≤ compacted).
pub(super) const META_CLEANED: &str = "cleaned";
/// The first write-ahead log segment whose writes the database may lack,
/// as of its last durable commit: that segment and every later one up to
/// the newest must be there. 0 when the database holds every write (a new
/// store, a clean close, a backup). Missing before format 4.
pub(super) const META_LOG_SEGMENT: &str = "log_segment";

/// A log segment's sequence as [`META_LOG_SEGMENT`] stores it.
pub(super) fn log_segment_value(sequence: u64) -> i64 {
    i64::try_from(sequence).expect("log segments are numbered from 1, one per 32 MiB at most")
}

/// The schema version this code writes. Version 2 has the same tables as
/// 1 but may leave a write-ahead log beside the database (`wal.rs`) that
/// holds acknowledged writes: a build that reads only version 1 would
/// ignore it, so it must refuse the file instead. Version 3 has no `index`
/// table: a build that reads only up to 2 would find it missing or stale.
/// Version 4 names the log segment that follows the last checkpoint
/// ([`META_LOG_SEGMENT`]) and writes log segments with their size and a
/// record naming the next one: a build that reads only up to 3 would
/// neither keep the name up to date nor read those segments.
pub(super) const FORMAT_VERSION: i64 = 4;

/// The oldest schema version this code reads (and upgrades at open).
pub(super) const OLDEST_FORMAT_VERSION: i64 = 1;

/// The database file inside the data directory.
pub(super) const DB_FILE: &str = "store.redb";
/// A database being created; renamed to [`DB_FILE`] once initialised.
pub(super) const DB_TMP_FILE: &str = "store.redb.tmp";
/// The file whose lock marks the directory as in use.
pub(super) const LOCK_FILE: &str = "LOCK";

/// Bytes in front of an entry's key: create revision (i64 LE) and key
/// length (u32 LE).
const HEADER: usize = 12;

/// The stored length of an entry for `key` with `value_len` value bytes.
pub(super) fn encoded_len(key: &str, value_len: usize) -> usize {
    HEADER + key.len() + value_len
}

/// Encodes an entry into `out`, which must be [`encoded_len`] long. A
/// deletion has create revision 0 and no value.
pub(super) fn encode(out: &mut [u8], create_revision: Revision, key: &str, value: &[u8]) {
    let key_len = u32::try_from(key.len()).expect("redb limits keys far below 4 GiB");
    out[..8].copy_from_slice(&create_revision.to_le_bytes());
    out[8..HEADER].copy_from_slice(&key_len.to_le_bytes());
    out[HEADER..HEADER + key.len()].copy_from_slice(key.as_bytes());
    out[HEADER + key.len()..].copy_from_slice(value);
}

/// The encoded deletion of `key`.
pub(super) fn tombstone(key: &str) -> Vec<u8> {
    let mut out = vec![0; encoded_len(key, 0)];
    encode(&mut out, 0, key, &[]);
    out
}

/// One entry of [`REVISIONS`], decoded without copying.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<'a> {
    /// The revision that created the key; 0 marks a deletion.
    pub create_revision: Revision,
    /// The key written.
    pub key: &'a str,
    /// The value; `None` for a deletion.
    pub value: Option<&'a [u8]>,
}

impl<'a> Entry<'a> {
    /// Decodes the entry stored at `revision`.
    pub(super) fn decode(bytes: &'a [u8], revision: Revision, file: &Path) -> Result<Self, Error> {
        let bad = |what: &str| {
            Error::Corrupt(format!(
                "{}: entry of revision {revision} {what}",
                file.display()
            ))
        };
        let (header, rest) = bytes
            .split_first_chunk::<HEADER>()
            .ok_or_else(|| bad("is shorter than its header"))?;
        let create_revision = i64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let key_len = u32::from_le_bytes(header[8..].try_into().expect("4 bytes")) as usize;
        if rest.len() < key_len {
            return Err(bad("is shorter than its key"));
        }
        let (key, value) = rest.split_at(key_len);
        let key = std::str::from_utf8(key).map_err(|_| bad("has a key that is not UTF-8"))?;
        let value = if create_revision == 0 {
            if !value.is_empty() {
                return Err(bad("is a deletion with a value"));
            }
            None
        } else {
            Some(value)
        };
        Ok(Entry {
            create_revision,
            key,
            value,
        })
    }

    /// The value as a live key at `revision`, checking that the entry is
    /// the put of `key` it is expected to be.
    pub(super) fn to_kv(
        self,
        key: &str,
        revision: Revision,
        file: &Path,
    ) -> Result<KeyValue, Error> {
        self.version(key, revision, file).map(|version| KeyValue {
            key: key.to_owned(),
            value: Arc::from(version.value),
            create_revision: version.create_revision,
            mod_revision: revision,
        })
    }

    /// The put of `key` this entry (stored at `revision`) must be, lent
    /// where it lies.
    pub(super) fn version(
        self,
        key: &str,
        revision: Revision,
        file: &Path,
    ) -> Result<VersionRef<'a>, Error> {
        match self.value {
            Some(value) if self.key == key => Ok(VersionRef {
                key: self.key,
                value,
                create_revision: self.create_revision,
                mod_revision: revision,
            }),
            _ => Err(Error::Corrupt(format!(
                "{}: revision {revision} should be a put of {key:?} but holds {} of {:?}",
                file.display(),
                if self.value.is_some() {
                    "a put"
                } else {
                    "a deletion"
                },
                self.key
            ))),
        }
    }
}

/// Reads a counter from the meta table, failing if it is missing.
pub(super) fn read_meta(
    meta: &impl ReadableTable<&'static str, i64>,
    name: &str,
    file: &Path,
) -> Result<i64, Error> {
    match meta.get(name).ctx(file)? {
        Some(v) => Ok(v.value()),
        None => Err(Error::Corrupt(format!(
            "{}: meta counter {name:?} is missing",
            file.display()
        ))),
    }
}

/// Maps a redb error to a store error naming the database file.
pub(super) fn db_error(file: &Path, err: impl Into<redb::Error>) -> Error {
    let err: redb::Error = err.into();
    let file = file.display();
    match err {
        redb::Error::Io(io) => Error::Io(std::io::Error::new(io.kind(), format!("{file}: {io}"))),
        redb::Error::Corrupted(msg) => Error::Corrupt(format!("{file}: {msg}")),
        redb::Error::TableDoesNotExist(table) => {
            Error::Corrupt(format!("{file}: table {table:?} is missing"))
        }
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
            Error::Unavailable(format!("{file} is in use by another process"))
        }
        redb::Error::DatabaseClosed => Error::Unavailable(format!("{file}: store is closed")),
        redb::Error::UpgradeRequired(v) => Error::Corrupt(format!(
            "{file}: redb file format {v} needs an upgrade this build does not perform"
        )),
        other => Error::Unavailable(format!("{file}: {other}")),
    }
}

/// Attaches the database file to redb errors: `.ctx(file)?`.
pub(super) trait Context<T> {
    /// Maps the error with [`db_error`].
    fn ctx(self, file: &Path) -> Result<T, Error>;
}

impl<T, E: Into<redb::Error>> Context<T> for Result<T, E> {
    fn ctx(self, file: &Path) -> Result<T, Error> {
        self.map_err(|e| db_error(file, e))
    }
}
