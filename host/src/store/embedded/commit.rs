//! The single writer of the embedded store: group commit, and the loop that
//! interleaves it with compaction cleanup (`commit/compact.rs`).
//!
//! One std thread owns every write. It takes all pending requests (up to
//! [`MAX_BATCH`]), checks each request's condition against the state
//! including the earlier requests of the same batch, assigns revisions in
//! order, writes the whole batch in one redb write transaction and commits
//! it once (one fsync) before answering anyone. A lone writer is committed
//! at once. After a batch of several writers, the next batch gives them a
//! moment (while requests keep arriving, at most [`GATHER_MAX`]) to come
//! back, so that concurrent writers keep sharing one fsync instead of
//! splitting into alternating half-size batches.

mod compact;

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use redb::{ReadableTable, Table, WriteTransaction};
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::Shared;
use super::open::Counters;
use super::schema::{
    CURRENT, Context, Entry, INDEX, META, META_COMPACTED, META_REVISION, REVISIONS, encode,
    encoded_len, tombstone,
};
use crate::store::{Condition, Deleted, Error, EventKind, KeyValue, Result, Revision, WatchEvent};

/// The most requests committed in one transaction.
pub(super) const MAX_BATCH: usize = 512;

/// How long a batch being gathered waits for one more request.
const GATHER_STEP: Duration = Duration::from_micros(50);

/// The longest a batch keeps taking more requests from concurrent writers.
const GATHER_MAX: Duration = Duration::from_millis(1);

/// A request to the writer, with the queue slot it holds until answered.
pub(super) struct Queued {
    pub request: Request,
    /// Released when the request is dropped (answered or refused).
    pub _slot: OwnedSemaphorePermit,
}

/// What a caller asks of the writer.
pub(super) enum Request {
    /// A put; answered with the stored key.
    Put {
        key: String,
        value: Arc<[u8]>,
        condition: Condition,
        reply: oneshot::Sender<Result<KeyValue>>,
    },
    /// A delete; answered with the deleted key.
    Delete {
        key: String,
        condition: Condition,
        reply: oneshot::Sender<Result<Deleted>>,
    },
    /// Compaction up to a revision; answered once history is cleaned.
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Stop after the current batch and close the database.
    Close { reply: oneshot::Sender<()> },
}

/// What a request turned into, before the batch commits.
enum Outcome {
    Put(Result<KeyValue>),
    Delete(Result<Deleted>),
    /// `Some(rev)`: the compaction point moved to `rev` and the caller waits
    /// for the cleanup.
    Compact(Result<Option<Revision>>),
    Close,
}

/// The writer thread's state.
pub(super) struct Writer {
    shared: Arc<Shared>,
    requests: Receiver<Queued>,
    counters: Counters,
    /// Callers of `compact` waiting for the cleanup to reach their revision.
    compact_waiters: Vec<(Revision, oneshot::Sender<Result<()>>)>,
    /// Set when a cleanup chunk failed; cleared by the next compaction.
    cleanup_failed: bool,
    /// Requests in the previous batch.
    last_batch: usize,
    /// Revisions the next compaction chunk cleans.
    clean_chunk: usize,
    /// No compaction chunk starts before this while writes are waiting.
    clean_after: Instant,
    /// Whether a write batch ran since the last compaction chunk.
    wrote_since_clean: bool,
}

impl Writer {
    pub(super) fn new(shared: Arc<Shared>, requests: Receiver<Queued>, counters: Counters) -> Self {
        Self {
            shared,
            requests,
            counters,
            compact_waiters: Vec::new(),
            cleanup_failed: false,
            last_batch: 0,
            clean_chunk: compact::CLEAN_FIRST,
            clean_after: Instant::now(),
            wrote_since_clean: false,
        }
    }

    fn cleanup_pending(&self) -> bool {
        self.counters.cleaned < self.counters.compacted && !self.cleanup_failed
    }

    /// Serves requests until every handle is dropped or `close` is called,
    /// then closes the database.
    ///
    /// Compaction cleanup runs between write batches, in chunks; while
    /// writes keep coming, each chunk is followed by at least as much time
    /// for writes as it took, so that writers keep about half the throughput
    /// and wait at most about one chunk. An idle store cleans flat out.
    pub(super) fn run(mut self) {
        let mut batch: Vec<Queued> = Vec::with_capacity(MAX_BATCH);
        let mut closers = Vec::new();
        loop {
            let first = if self.cleanup_pending() {
                let now = Instant::now();
                if now >= self.clean_after {
                    match self.requests.try_recv() {
                        Ok(queued) => queued,
                        Err(TryRecvError::Empty) => {
                            self.clean_chunk();
                            continue;
                        }
                        Err(TryRecvError::Disconnected) => break,
                    }
                } else {
                    match self.requests.recv_timeout(self.clean_after - now) {
                        Ok(queued) => queued,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            } else {
                match self.requests.recv() {
                    Ok(queued) => queued,
                    Err(_) => break,
                }
            };
            batch.push(first);
            self.drain(&mut batch);
            self.wrote_since_clean = true;
            if self.commit_batch(&mut batch, &mut closers) {
                break;
            }
        }
        // Requests still queued are refused by dropping them: their callers
        // see the store closed.
        drop(self.requests);
        for (_, waiter) in self.compact_waiters.drain(..) {
            // The compaction point is durable; the cleanup resumes on reopen.
            let _ = waiter.send(Ok(()));
        }
        self.shared.close();
        for closer in closers {
            let _ = closer.send(());
        }
    }

    /// Moves queued requests into `batch`, up to [`MAX_BATCH`]. Returns how
    /// many were added.
    fn drain(&mut self, batch: &mut Vec<Queued>) -> usize {
        let before = batch.len();
        while batch.len() < MAX_BATCH {
            match self.requests.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        batch.len() - before
    }

    /// Writes and commits one batch, then answers it. Returns whether a
    /// close was requested.
    fn commit_batch(
        &mut self,
        batch: &mut Vec<Queued>,
        closers: &mut Vec<oneshot::Sender<()>>,
    ) -> bool {
        let mut outcomes = Vec::with_capacity(MAX_BATCH);
        let mut events = Vec::with_capacity(MAX_BATCH);
        let mut next = self.counters;
        let written = self.write_batch(batch, &mut next, &mut outcomes, &mut events);
        self.last_batch = batch.len();
        if let Err(err) = written {
            tracing::error!(file = %self.shared.file.display(), error = %err, "store write failed");
            // Nothing was committed: the revision counter stays where it was.
            outcomes = batch
                .iter()
                .map(|queued| match &queued.request {
                    Request::Put { .. } => Outcome::Put(Err(duplicate(&err))),
                    Request::Delete { .. } => Outcome::Delete(Err(duplicate(&err))),
                    Request::Compact { .. } => Outcome::Compact(Err(duplicate(&err))),
                    Request::Close { .. } => Outcome::Close,
                })
                .collect();
            events.clear();
        } else {
            let compacted_moved = next.compacted != self.counters.compacted;
            self.counters = next;
            if compacted_moved {
                self.cleanup_failed = false;
                self.shared
                    .compacted
                    .store(next.compacted, Ordering::Release);
            }
            if !events.is_empty() {
                self.shared.recent().push(events);
                self.shared.revision_tx.send_replace(next.revision);
            }
        }
        let mut close = false;
        for (queued, outcome) in batch.drain(..).zip(outcomes) {
            match (queued.request, outcome) {
                (Request::Put { reply, .. }, Outcome::Put(result)) => {
                    let _ = reply.send(result);
                }
                (Request::Delete { reply, .. }, Outcome::Delete(result)) => {
                    let _ = reply.send(result);
                }
                (Request::Compact { reply, .. }, Outcome::Compact(result)) => match result {
                    Ok(Some(revision)) => self.compact_waiters.push((revision, reply)),
                    Ok(None) => {
                        let _ = reply.send(Ok(()));
                    }
                    Err(err) => {
                        let _ = reply.send(Err(err));
                    }
                },
                (Request::Close { reply }, Outcome::Close) => {
                    closers.push(reply);
                    close = true;
                }
                _ => unreachable!("one outcome per request, in order"),
            }
        }
        close
    }

    /// Applies every request of `batch` in one write transaction and commits
    /// it. `next` ends as the counters after the commit; `outcomes` gets one
    /// entry per request.
    ///
    /// When the previous batch had several writers, they are given a moment
    /// to send their next request so that they join this batch rather than
    /// queue behind it (concurrent writers otherwise settle into two
    /// alternating half-size batches). The requests already taken are applied
    /// meanwhile; the wait lasts only while requests keep arriving, at most
    /// [`GATHER_MAX`], and never follows a lone write.
    fn write_batch(
        &mut self,
        batch: &mut Vec<Queued>,
        next: &mut Counters,
        outcomes: &mut Vec<Outcome>,
        events: &mut Vec<WatchEvent>,
    ) -> Result<()> {
        let shared = self.shared.clone();
        let file = &shared.file;
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        let target = self.last_batch.max(batch.len()).min(MAX_BATCH);
        let txn = shared.begin_write()?;
        {
            let mut tables = Tables::open(&txn).ctx(file)?;
            let mut applied = 0;
            loop {
                for queued in &batch[applied..] {
                    outcomes.push(tables.apply(&queued.request, next, events, file)?);
                }
                applied = batch.len();
                if self.last_batch <= 1 || applied >= target || started.elapsed() >= GATHER_MAX {
                    break;
                }
                if self.drain(batch) == 0 {
                    // Nothing queued: wait for the next request, but only
                    // briefly (requests stopped coming, most likely).
                    let wait = Instant::now();
                    let left = GATHER_MAX.saturating_sub(started.elapsed());
                    let arrived = self.requests.recv_timeout(GATHER_STEP.min(left));
                    waited += wait.elapsed();
                    match arrived {
                        Ok(queued) => batch.push(queued),
                        Err(_) => break,
                    }
                }
            }
            if next.revision != self.counters.revision {
                tables.meta.insert(META_REVISION, next.revision).ctx(file)?;
            }
            if next.compacted != self.counters.compacted {
                tables
                    .meta
                    .insert(META_COMPACTED, next.compacted)
                    .ctx(file)?;
            }
        }
        let stats = &shared.stats;
        let applied = Instant::now();
        stats.apply_nanos.fetch_add(
            (applied - started - waited).as_nanos() as u64,
            Ordering::Relaxed,
        );
        stats
            .gather_nanos
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        if next.revision == self.counters.revision && next.compacted == self.counters.compacted {
            // Only conflicts, no-ops or a close: nothing to make durable.
            txn.abort().ctx(file)?;
        } else {
            txn.commit().ctx(file)?;
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.writes.fetch_add(
                (next.revision - self.counters.revision) as u64,
                Ordering::Relaxed,
            );
            stats
                .commit_nanos
                .fetch_add(applied.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The open tables of one write transaction.
struct Tables<'txn> {
    revisions: Table<'txn, i64, &'static [u8]>,
    index: Table<'txn, (&'static str, i64), ()>,
    current: Table<'txn, &'static str, (i64, i64)>,
    meta: Table<'txn, &'static str, i64>,
}

impl<'txn> Tables<'txn> {
    /// Applies one request. The outer `Result` fails the whole batch.
    fn apply(
        &mut self,
        request: &Request,
        next: &mut Counters,
        events: &mut Vec<WatchEvent>,
        file: &std::path::Path,
    ) -> Result<Outcome> {
        Ok(match request {
            Request::Put {
                key,
                value,
                condition,
                ..
            } => Outcome::Put(self.put(next, key, value, *condition, events, file)?),
            Request::Delete { key, condition, .. } => {
                Outcome::Delete(self.delete(next, key, *condition, events, file)?)
            }
            Request::Compact { revision, .. } => {
                Outcome::Compact(compact::compact_point(next, *revision))
            }
            Request::Close { .. } => Outcome::Close,
        })
    }

    fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Self {
            revisions: txn.open_table(REVISIONS)?,
            index: txn.open_table(INDEX)?,
            current: txn.open_table(CURRENT)?,
            meta: txn.open_table(META)?,
        })
    }

    /// The live key's (create revision, mod revision).
    fn live(&self, key: &str, file: &std::path::Path) -> Result<Option<(i64, i64)>> {
        Ok(self.current.get(key).ctx(file)?.map(|v| v.value()))
    }

    /// A put. The outer `Result` fails the whole batch (storage error), the
    /// inner one only this request (conflict).
    fn put(
        &mut self,
        next: &mut Counters,
        key: &str,
        value: &Arc<[u8]>,
        condition: Condition,
        events: &mut Vec<WatchEvent>,
        file: &std::path::Path,
    ) -> Result<Result<KeyValue>> {
        let live = self.live(key, file)?;
        if let Err(conflict) = check(key, condition, live.map(|(_, m)| m)) {
            return Ok(Err(conflict));
        }
        let revision = next.revision + 1;
        let create_revision = live.map_or(revision, |(c, _)| c);
        {
            let mut slot = self
                .revisions
                .insert_reserve(revision, encoded_len(key, value.len()))
                .ctx(file)?;
            encode(slot.as_mut(), create_revision, key, value);
        }
        self.index.insert((key, revision), ()).ctx(file)?;
        self.current
            .insert(key, (create_revision, revision))
            .ctx(file)?;
        next.revision = revision;
        let kv = KeyValue {
            key: key.to_owned(),
            value: value.clone(),
            create_revision,
            mod_revision: revision,
        };
        events.push(WatchEvent {
            kind: EventKind::Put,
            kv: kv.clone(),
            created: live.is_none(),
        });
        Ok(Ok(kv))
    }

    /// A delete; results as for [`Tables::put`].
    fn delete(
        &mut self,
        next: &mut Counters,
        key: &str,
        condition: Condition,
        events: &mut Vec<WatchEvent>,
        file: &std::path::Path,
    ) -> Result<Result<Deleted>> {
        let live = self.live(key, file)?;
        if let Err(conflict) = check(key, condition, live.map(|(_, m)| m)) {
            return Ok(Err(conflict));
        }
        let Some((create_revision, mod_revision)) = live else {
            return Ok(Err(Error::NotFound {
                key: key.to_owned(),
            }));
        };
        let value = {
            let stored = self.revisions.get(mod_revision).ctx(file)?.ok_or_else(|| {
                Error::Corrupt(format!(
                    "{}: revision {mod_revision} of {key:?} is missing",
                    file.display()
                ))
            })?;
            Entry::decode(stored.value(), mod_revision, file)?
                .to_kv(key, mod_revision, file)?
                .value
        };
        let revision = next.revision + 1;
        self.revisions
            .insert(revision, tombstone(key).as_slice())
            .ctx(file)?;
        self.index.insert((key, revision), ()).ctx(file)?;
        self.current.remove(key).ctx(file)?;
        next.revision = revision;
        let prev = KeyValue {
            key: key.to_owned(),
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
        Ok(Ok(Deleted { revision, prev }))
    }
}

/// Checks a write's condition against the key's modification revision.
fn check(key: &str, condition: Condition, actual: Option<Revision>) -> Result<()> {
    let ok = match condition {
        Condition::Any => true,
        Condition::Absent => actual.is_none(),
        Condition::ModRevision(rev) => actual == Some(rev),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Conflict {
            key: key.to_owned(),
            expected: match condition {
                Condition::ModRevision(rev) => Some(rev),
                _ => None,
            },
            actual,
        })
    }
}

/// A copy of an error for each request of a failed batch.
fn duplicate(err: &Error) -> Error {
    match err {
        Error::Io(e) => Error::Io(io::Error::new(e.kind(), e.to_string())),
        Error::Corrupt(msg) => Error::Corrupt(msg.clone()),
        Error::Unavailable(msg) => Error::Unavailable(msg.clone()),
        other => Error::Unavailable(other.to_string()),
    }
}
