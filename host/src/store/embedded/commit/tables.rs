//! What the writer does with one batch: decide each request against the
//! state it leaves (conditions, revisions, the log record, watch events) —
//! the batch so far, then writes logged but not yet in the database
//! ([`Unapplied`]), then a database snapshot — and, on the applier's side,
//! write the decided changes into a write transaction; the same writes
//! replay the log at open.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use redb::{ReadOnlyTable, ReadTransaction, Table, WriteTransaction};

use super::{Outcome, Request, compact};
use crate::store::embedded::history::History;
use crate::store::embedded::open::Counters;
use crate::store::embedded::schema::{
    CURRENT, Context, Entry, FORMAT_VERSION, LEGACY_INDEX, META, META_COMPACTED, META_FORMAT,
    META_LOG_SEGMENT, META_REVISION, REVISIONS, encode, encoded_len, log_segment_value, tombstone,
};
use crate::store::embedded::wal::{Record, RecordBuilder};
use crate::store::{Deleted, Error, EventKind, KeyValue, Result, Revision, WatchEvent};

/// A live key's create revision, mod revision and value.
type LiveVersion = (Revision, Revision, Arc<[u8]>);

/// A batch's changes, decided but not yet logged, and the keys it touched.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) changes: Vec<Change>,
    /// Keys written earlier in the batch: `Some` if live afterwards, `None`
    /// if deleted.
    touched: HashMap<Arc<str>, Option<LiveVersion>>,
}

/// One decided write, in revision order.
pub(in crate::store::embedded) struct Change {
    revision: Revision,
    key: Arc<str>,
    create_revision: Revision,
    /// `None` for a deletion.
    value: Option<Arc<[u8]>>,
}

/// Writes that are logged (acknowledged) but possibly not yet committed to
/// the database by the applier: each key's newest such change, dropped
/// once the database has it. The writer decides new requests on top of it.
#[derive(Default)]
pub(super) struct Unapplied {
    /// Key → (revision of its newest change, what it left).
    keys: HashMap<Arc<str>, (Revision, Option<LiveVersion>)>,
    /// Every change held, oldest first, so that [`Unapplied::trim`] is
    /// proportional to what it drops.
    order: VecDeque<(Revision, Arc<str>, usize)>,
    /// Value bytes of the changes in `order` (kept alive by them or by the
    /// applier's queue).
    bytes: usize,
}

impl Unapplied {
    /// Adds a logged batch.
    pub(super) fn extend(&mut self, changes: &[Change]) {
        for change in changes {
            let live = change
                .value
                .as_ref()
                .map(|value| (change.create_revision, change.revision, value.clone()));
            self.keys
                .insert(change.key.clone(), (change.revision, live));
            let bytes = change.value.as_ref().map_or(0, |v| v.len());
            self.order
                .push_back((change.revision, change.key.clone(), bytes));
            self.bytes += bytes;
        }
    }

    /// Whether the applier lags so far behind that the writer should wait.
    pub(super) fn is_full(&self) -> bool {
        self.order.len() > MAX_CHANGES || self.bytes > MAX_BYTES
    }

    /// Forgets the changes the database holds: those at or below
    /// `committed`.
    pub(super) fn trim(&mut self, committed: Revision) {
        while let Some((revision, _, _)) = self.order.front()
            && *revision <= committed
        {
            let (revision, key, bytes) = self.order.pop_front().expect("front exists");
            self.bytes -= bytes;
            if self
                .keys
                .get(&key)
                .is_some_and(|(newest, _)| *newest == revision)
            {
                self.keys.remove(&key);
            }
        }
    }
}

/// The most changes [`Unapplied`] holds before the writer waits for the
/// applier.
const MAX_CHANGES: usize = 64 * 1024;

/// The most value bytes [`Unapplied`] holds before the writer waits.
const MAX_BYTES: usize = 256 << 20;

/// The database as last committed by the applier, read by the writer.
pub(super) struct Snapshot {
    current: ReadOnlyTable<&'static str, (i64, i64)>,
    revisions: ReadOnlyTable<i64, &'static [u8]>,
}

impl Snapshot {
    pub(super) fn open(txn: &ReadTransaction, file: &std::path::Path) -> Result<Self> {
        Ok(Self {
            current: txn.open_table(CURRENT).ctx(file)?,
            revisions: txn.open_table(REVISIONS).ctx(file)?,
        })
    }
}

/// The state the writer decides against: the batch so far, over the
/// unapplied writes, over the snapshot.
pub(super) struct Decider<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) unapplied: &'a Unapplied,
    pub(super) file: &'a std::path::Path,
}

impl Decider<'_> {
    /// Decides one request: checks its condition against the state so far,
    /// assigns its revision and adds it to the log record and the watch
    /// events. The outer `Result` fails the whole batch (storage error), the
    /// inner one only this request (conflict).
    pub(super) fn decide(
        &self,
        request: &Request,
        next: &mut Counters,
        pending: &mut Pending,
        record: &mut RecordBuilder,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Outcome> {
        Ok(match request {
            Request::Put {
                key,
                value,
                condition,
                ..
            } => {
                let live = self.live(key, pending)?;
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
                let live = self.live(key, pending)?;
                if let Err(conflict) = condition.check(key, live.map(|(_, m)| m)) {
                    return Ok(Outcome::Delete(Err(conflict)));
                }
                let Some((create_revision, mod_revision)) = live else {
                    return Ok(Outcome::Delete(Err(Error::NotFound {
                        key: key.to_owned(),
                    })));
                };
                let value = self.live_value(key, mod_revision, pending)?;
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

    /// The newer state of `key` held in memory, if any: `Some(None)` for a
    /// deletion.
    fn in_memory<'p>(&'p self, key: &str, pending: &'p Pending) -> Option<&'p Option<LiveVersion>> {
        pending
            .touched
            .get(key)
            .or_else(|| self.unapplied.keys.get(key).map(|(_, live)| live))
    }

    /// The live key's (create revision, mod revision), as the batch so far
    /// leaves it.
    fn live(&self, key: &str, pending: &Pending) -> Result<Option<(Revision, Revision)>> {
        if let Some(live) = self.in_memory(key, pending) {
            return Ok(live.as_ref().map(|(c, m, _)| (*c, *m)));
        }
        Ok(self
            .snapshot
            .current
            .get(key)
            .ctx(self.file)?
            .map(|v| v.value()))
    }

    /// The value of `key` at `mod_revision`, the live version `live` found.
    fn live_value(
        &self,
        key: &str,
        mod_revision: Revision,
        pending: &Pending,
    ) -> Result<Arc<[u8]>> {
        if let Some(Some((_, _, value))) = self.in_memory(key, pending) {
            return Ok(value.clone());
        }
        let file = self.file;
        let stored = self
            .snapshot
            .revisions
            .get(mod_revision)
            .ctx(file)?
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "{}: revision {mod_revision} of {key:?} is missing",
                    file.display()
                ))
            })?;
        Ok(Entry::decode(stored.value(), mod_revision, file)?
            .to_kv(key, mod_revision, file)?
            .value)
    }
}

/// Adds decided changes to the in-memory index of versions.
pub(super) fn record_versions(changes: &[Change], history: &mut History) {
    for change in changes {
        history.record(&change.key, change.revision, change.value.is_none());
    }
}

/// The open tables of one write transaction.
pub(super) struct Tables<'txn> {
    pub(super) revisions: Table<'txn, i64, &'static [u8]>,
    pub(super) current: Table<'txn, &'static str, (i64, i64)>,
    pub(super) meta: Table<'txn, &'static str, i64>,
}

impl<'txn> Tables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Self {
            revisions: txn.open_table(REVISIONS)?,
            current: txn.open_table(CURRENT)?,
            meta: txn.open_table(META)?,
        })
    }

    /// Writes decided changes.
    pub(super) fn write_changes(
        &mut self,
        changes: &[Change],
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
        Ok(())
    }

    /// Writes the counters that moved from `before` to `next`.
    pub(super) fn write_counters(
        &mut self,
        next: &Counters,
        before: &Counters,
        file: &std::path::Path,
    ) -> Result<()> {
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
        Ok(())
    }
}

/// Recovery at open: applies the log's records that follow the database's
/// revision in one durable transaction, marks the file as this build's
/// format, names `log_segment` as where its log continues, and returns the
/// counters after them.
pub(in crate::store::embedded) fn replay(
    db: &redb::Database,
    records: &[Record<'_>],
    mut counters: Counters,
    log_segment: u64,
    file: &std::path::Path,
) -> Result<Counters> {
    let mut txn = db.begin_write().ctx(file)?;
    txn.set_quick_repair(true);
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
        tables
            .meta
            .insert(META_LOG_SEGMENT, log_segment_value(log_segment))
            .ctx(file)?;
    }
    // Formats 1 and 2 kept the index of versions on disk.
    txn.delete_table(LEGACY_INDEX).ctx(file)?;
    txn.commit().ctx(file)?;
    Ok(counters)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(revision: Revision, key: &str, value: Option<&str>) -> Change {
        Change {
            revision,
            key: Arc::from(key),
            create_revision: if value.is_some() { 1 } else { 0 },
            value: value.map(|v| Arc::from(v.as_bytes())),
        }
    }

    fn newest(unapplied: &Unapplied, key: &str) -> Option<Option<Revision>> {
        unapplied
            .keys
            .get(key)
            .map(|(_, live)| live.as_ref().map(|(_, m, _)| *m))
    }

    #[test]
    fn unapplied_writes_are_dropped_only_once_the_database_holds_their_newest_change() {
        let mut unapplied = Unapplied::default();
        unapplied.extend(&[change(1, "a", Some("one")), change(2, "b", Some("two"))]);
        unapplied.extend(&[change(3, "a", Some("three")), change(4, "b", None)]);
        assert_eq!(unapplied.bytes, 3 + 3 + 5);
        assert_eq!(newest(&unapplied, "a"), Some(Some(3)));
        assert_eq!(
            newest(&unapplied, "b"),
            Some(None),
            "a deletion is remembered"
        );

        unapplied.trim(2);
        assert_eq!(
            newest(&unapplied, "a"),
            Some(Some(3)),
            "a's newest change is not applied"
        );
        assert_eq!(newest(&unapplied, "b"), Some(None));
        assert_eq!(unapplied.bytes, 5);

        unapplied.trim(4);
        assert!(unapplied.keys.is_empty() && unapplied.order.is_empty());
        assert_eq!(unapplied.bytes, 0);
        assert!(!unapplied.is_full());
    }

    #[test]
    fn unapplied_writes_are_full_past_their_byte_or_change_bound() {
        let mut unapplied = Unapplied::default();
        let big = "x".repeat(MAX_BYTES / 2 + 1);
        unapplied.extend(&[change(1, "a", Some(&big))]);
        assert!(!unapplied.is_full());
        // Overwriting a key keeps both versions' bytes until both are applied.
        unapplied.extend(&[change(2, "a", Some(&big))]);
        assert!(unapplied.is_full());
        unapplied.trim(2);
        assert!(!unapplied.is_full());

        let changes: Vec<_> = (1..=MAX_CHANGES as Revision + 1)
            .map(|r| change(r, &format!("k{r}"), Some("")))
            .collect();
        unapplied.extend(&changes);
        assert!(unapplied.is_full());
        unapplied.trim(1);
        assert!(!unapplied.is_full());
    }
}
