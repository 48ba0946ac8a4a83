//! Compaction cleanup, run by the applier between commits: after `compact` has made the
//! compaction point durable, the revisions no read can need any more are
//! removed in chunks sized to hold the applier about [`CLEAN_TARGET`] each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redb::ReadableTable;

use super::apply::Applier;
use super::duplicate;
use super::tables::Tables;
use crate::store::embedded::open::Counters;
use crate::store::embedded::schema::{Context, Entry, META_CLEANED};
use crate::store::{Error, Result, Revision};

/// About how long one compaction chunk may hold the applier (and so the
/// visibility of writes acknowledged meanwhile).
const CLEAN_TARGET: Duration = Duration::from_millis(2);

/// Bounds of the number of revisions one compaction chunk cleans.
const CLEAN_MIN: usize = 16;
const CLEAN_MAX: usize = 8192;

/// The number of revisions the first chunk cleans.
pub(super) const CLEAN_FIRST: usize = 256;

impl Applier {
    /// Cleans one chunk of revisions at or below the compaction point
    /// and answers the compactions it completes. Chunks are sized to take
    /// about [`CLEAN_TARGET`] each, commit included, so that writes acknowledged
    /// meanwhile wait about that long at most to become visible.
    pub(super) fn clean_chunk(&mut self) {
        let from = self.counters.cleaned;
        let upto = self
            .counters
            .compacted
            .min(from + self.clean_chunk as Revision);
        let started = Instant::now();
        let result = self.clean(from, upto);
        let took = started.elapsed().max(Duration::from_micros(1));
        // Writes waiting meanwhile get at least as long before the next chunk.
        self.clean_after = if self.wrote_since_clean {
            Instant::now() + took
        } else {
            Instant::now()
        };
        self.wrote_since_clean = false;
        match result {
            Ok(()) => {
                self.unsettled = true;
                let scaled = (self.clean_chunk as f64 * CLEAN_TARGET.as_secs_f64()
                    / took.as_secs_f64()) as usize;
                // Adapt gradually: at most double or halve per chunk.
                self.clean_chunk = scaled
                    .clamp(self.clean_chunk / 2, self.clean_chunk * 2)
                    .clamp(CLEAN_MIN, CLEAN_MAX);
                self.counters.cleaned = upto;
                let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.compact_waiters)
                    .into_iter()
                    .partition(|(revision, _)| *revision <= upto);
                self.compact_waiters = waiting;
                for (_, waiter) in done {
                    let _ = waiter.send(Ok(()));
                }
            }
            Err(err) => {
                tracing::error!(file = %self.shared.file.display(), error = %err, "store compaction failed");
                self.cleanup_failed = true;
                for (_, waiter) in self.compact_waiters.drain(..) {
                    let _ = waiter.send(Err(duplicate(&err)));
                }
            }
        }
    }

    /// Cleans the revisions in `(from, upto]`, all at or below the
    /// compaction point: each one is removed if it is a deletion or if a
    /// newer version of its key is at or below the compaction point, and so
    /// is any version of its key that an earlier cleanup kept (at or below
    /// `from`) but this one supersedes. What remains at or below the point is
    /// each key's newest version there, unless that is a deletion.
    fn clean(&self, from: Revision, upto: Revision) -> Result<()> {
        let file = &self.shared.file;
        let compacted = self.counters.compacted;
        let txn = self.shared.begin_write(false)?;
        // Key → the revisions of its versions to remove.
        let mut doomed: BTreeMap<String, Vec<Revision>> = BTreeMap::new();
        {
            let mut tables = Tables::open(&txn).ctx(file)?;
            let history = self.shared.history();
            for entry in tables.revisions.range((from + 1)..=upto).ctx(file)? {
                let (revision, stored) = entry.ctx(file)?;
                let revision = revision.value();
                let entry = Entry::decode(stored.value(), revision, file)?;
                let key = entry.key;
                let versions = doomed.entry(key.to_owned()).or_default();
                // Versions kept by earlier cleanups that this one supersedes.
                versions.extend(history.between(key, ..=from));
                let superseded = history
                    .between(key, (revision + 1)..=compacted)
                    .next()
                    .is_some();
                if superseded || entry.value.is_none() {
                    versions.push(revision);
                }
            }
            drop(history);
            for revisions in doomed.values_mut() {
                revisions.sort_unstable();
                revisions.dedup();
                for revision in revisions.iter() {
                    tables.revisions.remove(*revision).ctx(file)?;
                }
            }
            tables.meta.insert(META_CLEANED, upto).ctx(file)?;
        }
        txn.commit().ctx(file)?;
        // After the commit: until then, reads of the last snapshot may still
        // look for them (only below the compaction point, which they refuse).
        let mut history = self.shared.history_mut();
        for (key, revisions) in &doomed {
            history.forget(key, revisions);
        }
        Ok(())
    }
}

/// Validates a compaction request against the counters so far in the batch;
/// `Some(rev)` when the compaction point moves.
pub(super) fn compact_point(next: &mut Counters, revision: Revision) -> Result<Option<Revision>> {
    if revision > next.revision {
        return Err(Error::FutureRevision {
            requested: revision,
            current: next.revision,
        });
    }
    if revision <= next.compacted {
        return Ok(None);
    }
    next.compacted = revision;
    Ok(Some(revision))
}
