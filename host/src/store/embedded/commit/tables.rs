//! What the writer does inside one redb write transaction: decide each
//! request of a batch against the stored state and the batch so far
//! (conditions, revisions, the log record, watch events), then write the
//! decided changes; and the same writes when the log is replayed at open.

use std::collections::HashMap;
use std::sync::Arc;

use redb::{ReadableTable, Table, WriteTransaction};

use super::{Outcome, Request, compact};
use crate::store::embedded::open::Counters;
use crate::store::embedded::schema::{
    CURRENT, Context, Entry, FORMAT_VERSION, INDEX, META, META_COMPACTED, META_FORMAT,
    META_REVISION, REVISIONS, encode, encoded_len, tombstone,
};
use crate::store::embedded::wal::{Record, RecordBuilder};
use crate::store::{Deleted, Error, EventKind, KeyValue, Result, Revision, WatchEvent};

/// A batch's changes, decided but not yet written, and the keys it touched.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) changes: Vec<Change>,
    /// Keys written earlier in the batch: `Some((create, mod, value))` if
    /// live afterwards, `None` if deleted.
    touched: HashMap<Arc<str>, Option<LiveVersion>>,
}

/// A live key's create revision, mod revision and value.
type LiveVersion = (Revision, Revision, Arc<[u8]>);

/// One decided write, in revision order.
pub(super) struct Change {
    revision: Revision,
    key: Arc<str>,
    create_revision: Revision,
    /// `None` for a deletion.
    value: Option<Arc<[u8]>>,
}

/// The open tables of one write transaction.
pub(super) struct Tables<'txn> {
    pub(super) revisions: Table<'txn, i64, &'static [u8]>,
    pub(super) index: Table<'txn, (&'static str, i64), ()>,
    pub(super) current: Table<'txn, &'static str, (i64, i64)>,
    pub(super) meta: Table<'txn, &'static str, i64>,
}

impl<'txn> Tables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Self {
            revisions: txn.open_table(REVISIONS)?,
            index: txn.open_table(INDEX)?,
            current: txn.open_table(CURRENT)?,
            meta: txn.open_table(META)?,
        })
    }

    /// Decides one request: checks its condition against the stored state
    /// and the batch so far, assigns its revision and adds it to the log
    /// record and the watch events. The outer `Result` fails the whole
    /// batch (storage error), the inner one only this request (conflict).
    pub(super) fn decide(
        &self,
        request: &Request,
        next: &mut Counters,
        pending: &mut Pending,
        record: &mut RecordBuilder,
        events: &mut Vec<WatchEvent>,
        file: &std::path::Path,
    ) -> Result<Outcome> {
        Ok(match request {
            Request::Put {
                key,
                value,
                condition,
                ..
            } => {
                let live = self.live(key, pending, file)?;
                if let Err(conflict) = condition.check(key, live.map(|(_, m)| m)) {
                    return Ok(Outcome::Put(Err(conflict)));
                }
                let revision = next.revision + 1;
                let create_revision = live.map_or(revision, |(c, _)| c);
                record.push(create_revision, key, Some(value));
                next.revision = revision;
                let key: Arc<str> = Arc::from(key.as_str());
                pending.touched.insert(
                    key.clone(),
                    Some((create_revision, revision, value.clone())),
                );
                pending.changes.push(Change {
                    revision,
                    key: key.clone(),
                    create_revision,
                    value: Some(value.clone()),
                });
                let kv = KeyValue {
                    key: key.to_string(),
                    value: value.clone(),
                    create_revision,
                    mod_revision: revision,
                };
                events.push(WatchEvent {
                    kind: EventKind::Put,
                    kv: kv.clone(),
                    created: live.is_none(),
                });
                Outcome::Put(Ok(kv))
            }
            Request::Delete { key, condition, .. } => {
                let live = self.live(key, pending, file)?;
                if let Err(conflict) = condition.check(key, live.map(|(_, m)| m)) {
                    return Ok(Outcome::Delete(Err(conflict)));
                }
                let Some((create_revision, mod_revision)) = live else {
                    return Ok(Outcome::Delete(Err(Error::NotFound {
                        key: key.to_owned(),
                    })));
                };
                let value = self.live_value(key, mod_revision, pending, file)?;
                let revision = next.revision + 1;
                record.push(0, key, None);
                next.revision = revision;
                let key: Arc<str> = Arc::from(key.as_str());
                pending.touched.insert(key.clone(), None);
                pending.changes.push(Change {
                    revision,
                    key: key.clone(),
                    create_revision: 0,
                    value: None,
                });
                let prev = KeyValue {
                    key: key.to_string(),
                    value,
                    create_revision,
                    mod_revision,
                };
                events.push(WatchEvent {
                    kind: EventKind::Delete,
                    kv: KeyValue {
                        mod_revision: revision,
                        ..prev.clone()
                    },
                    created: false,
                });
                Outcome::Delete(Ok(Deleted { revision, prev }))
            }
            Request::Compact { revision, .. } => {
                Outcome::Compact(compact::compact_point(next, *revision))
            }
            Request::Close { .. } => Outcome::Close,
        })
    }

    /// The live key's (create revision, mod revision), as the batch so far
    /// leaves it.
    fn live(
        &self,
        key: &str,
        pending: &Pending,
        file: &std::path::Path,
    ) -> Result<Option<(Revision, Revision)>> {
        if let Some(touched) = pending.touched.get(key) {
            return Ok(touched.as_ref().map(|(c, m, _)| (*c, *m)));
        }
        Ok(self.current.get(key).ctx(file)?.map(|v| v.value()))
    }

    /// The value of `key` at `mod_revision`, the live version `live` found.
    fn live_value(
        &self,
        key: &str,
        mod_revision: Revision,
        pending: &Pending,
        file: &std::path::Path,
    ) -> Result<Arc<[u8]>> {
        if let Some(Some((_, _, value))) = pending.touched.get(key) {
            return Ok(value.clone());
        }
        let stored = self.revisions.get(mod_revision).ctx(file)?.ok_or_else(|| {
            Error::Corrupt(format!(
                "{}: revision {mod_revision} of {key:?} is missing",
                file.display()
            ))
        })?;
        Ok(Entry::decode(stored.value(), mod_revision, file)?
            .to_kv(key, mod_revision, file)?
            .value)
    }

    /// Writes decided changes and the counters that moved.
    pub(super) fn write(
        &mut self,
        changes: &[Change],
        next: &Counters,
        before: &Counters,
        file: &std::path::Path,
    ) -> Result<()> {
        for change in changes {
            self.write_entry(
                change.revision,
                change.create_revision,
                &change.key,
                change.value.as_deref(),
                file,
            )?;
        }
        if next.revision != before.revision {
            self.meta.insert(META_REVISION, next.revision).ctx(file)?;
        }
        if next.compacted != before.compacted {
            self.meta.insert(META_COMPACTED, next.compacted).ctx(file)?;
        }
        Ok(())
    }

    /// Writes one entry: a put (`value`) or a deletion (`None`), at
    /// `revision`. Used for new batches and for replaying the log.
    fn write_entry(
        &mut self,
        revision: Revision,
        create_revision: Revision,
        key: &str,
        value: Option<&[u8]>,
        file: &std::path::Path,
    ) -> Result<()> {
        match value {
            Some(value) => {
                let mut slot = self
                    .revisions
                    .insert_reserve(revision, encoded_len(key, value.len()))
                    .ctx(file)?;
                encode(slot.as_mut(), create_revision, key, value);
                drop(slot);
                self.current
                    .insert(key, (create_revision, revision))
                    .ctx(file)?;
            }
            None => {
                self.revisions
                    .insert(revision, tombstone(key).as_slice())
                    .ctx(file)?;
                self.current.remove(key).ctx(file)?;
            }
        }
        self.index.insert((key, revision), ()).ctx(file)?;
        Ok(())
    }
}

/// Recovery at open: applies the log's records that follow the database's
/// revision in one durable transaction, marks the file as this build's
/// format, and returns the counters after them.
pub(in crate::store::embedded) fn replay(
    db: &redb::Database,
    records: &[Record<'_>],
    mut counters: Counters,
    file: &std::path::Path,
) -> Result<Counters> {
    let txn = db.begin_write().ctx(file)?;
    {
        let mut tables = Tables::open(&txn).ctx(file)?;
        for record in records {
            for (revision, entry) in (record.first_revision..).zip(&record.entries) {
                if revision <= counters.revision {
                    continue;
                }
                tables.write_entry(
                    revision,
                    entry.create_revision,
                    entry.key,
                    entry.value,
                    file,
                )?;
                counters.revision = revision;
            }
            counters.compacted = counters
                .compacted
                .max(record.compacted.min(counters.revision));
        }
        tables
            .meta
            .insert(META_REVISION, counters.revision)
            .ctx(file)?;
        tables
            .meta
            .insert(META_COMPACTED, counters.compacted)
            .ctx(file)?;
        tables.meta.insert(META_FORMAT, FORMAT_VERSION).ctx(file)?;
    }
    txn.commit().ctx(file)?;
    Ok(counters)
}
