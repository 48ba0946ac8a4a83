//! The single writer of the embedded store: group commit, and the loop that
//! interleaves it with compaction cleanup (`commit/compact.rs`).
//!
//! One std thread owns every write. It takes all pending requests (up to
//! [`MAX_BATCH`]), checks each request's condition against the state
//! including the earlier requests of the same batch and assigns revisions in
//! order, building the batch's write-ahead log record as it goes. The record
//! is then appended and synced on the log's thread (`wal/`) while this
//! thread writes the batch into one redb transaction; the transaction is
//! committed (without an fsync of its own) only once the record is on disk,
//! and only then is anyone answered or any watcher told. So a reader never
//! sees a write that a crash could take back.
//!
//! A lone writer is committed at once. After a batch of several writers,
//! the next batch gives them a moment (while requests keep arriving, at most
//! [`GATHER_MAX`]) to come back, so that concurrent writers keep sharing one
//! fsync instead of splitting into alternating half-size batches.
//!
//! Every [`CHECKPOINT_BYTES`](super::wal::CHECKPOINT_BYTES) of log, after
//! [`IDLE_CHECKPOINT`] without writes, and at close, the database is
//! committed durably and the log starts afresh. If the log or the database
//! fails to write, the store stops taking writes (the log may hold a batch
//! the database does not): reopening it recovers from the log.

mod compact;
mod tables;

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, oneshot};

pub(super) use self::tables::replay;
use self::tables::{Pending, Tables};
use super::Shared;
use super::open::Counters;
use super::schema::{Context, META, META_REVISION};
use super::wal::{RecordBuilder, Syncer};
use crate::store::{Condition, Deleted, Error, KeyValue, Result, Revision, WatchEvent};

/// The most requests committed in one transaction.
pub(super) const MAX_BATCH: usize = 512;

/// How long a batch being gathered waits for one more request.
const GATHER_STEP: Duration = Duration::from_micros(50);

/// The longest a batch keeps taking more requests from concurrent writers.
const GATHER_MAX: Duration = Duration::from_millis(1);

/// A store without writes for this long is checkpointed, so that an idle
/// host has nothing to replay after a crash.
const IDLE_CHECKPOINT: Duration = Duration::from_secs(1);

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
    /// The write-ahead log's thread.
    syncer: Syncer,
    /// The record of the batch being built.
    record: RecordBuilder,
    /// Set when a write failed half-way: every later write is refused.
    failed: Option<String>,
}

impl Writer {
    pub(super) fn new(
        shared: Arc<Shared>,
        requests: Receiver<Queued>,
        counters: Counters,
        syncer: Syncer,
    ) -> Self {
        Self {
            shared,
            requests,
            counters,
            syncer,
            record: RecordBuilder::default(),
            failed: None,
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
            } else if self.syncer.has_records() && self.failed.is_none() {
                match self.requests.recv_timeout(IDLE_CHECKPOINT) {
                    Ok(queued) => queued,
                    Err(RecvTimeoutError::Timeout) => {
                        self.checkpoint();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
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
            if self.syncer.checkpoint_due() && self.failed.is_none() {
                self.checkpoint();
            }
        }
        // A clean close leaves a durable database and no log; after a failed
        // write the log stays for the next open to recover from.
        if self.failed.is_none()
            && self.checkpoint()
            && let Err(err) = self.syncer.remove()
        {
            tracing::warn!(error = %err, "removing the store's log after the final checkpoint failed");
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
        let written = match &self.failed {
            Some(why) => Err(Error::Unavailable(why.clone())),
            None => self.write_batch(batch, &mut next, &mut outcomes, &mut events),
        };
        self.last_batch = batch.len();
        if let Err(err) = written {
            if self.failed.is_none() {
                tracing::error!(file = %self.shared.file.display(), error = %err, "store write failed");
            }
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
        let txn = shared.begin_write(false)?;
        let mut tables = Tables::open(&txn).ctx(file)?;
        let mut pending = Pending::default();
        self.record.start(next.revision + 1);
        let mut applied = 0;
        loop {
            for queued in &batch[applied..] {
                outcomes.push(tables.decide(
                    &queued.request,
                    next,
                    &mut pending,
                    &mut self.record,
                    events,
                    file,
                )?);
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
        let stats = &shared.stats;
        stats
            .gather_nanos
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        if next.revision == self.counters.revision && next.compacted == self.counters.compacted {
            // Only conflicts, no-ops or a close: nothing to log or commit.
            drop(tables);
            txn.abort().ctx(file)?;
            return Ok(());
        }
        // From here on the log may hold the batch: any failure stops writes.
        self.syncer.submit(self.record.finish(next.compacted));
        let filled = tables.write(&pending.changes, next, &self.counters, file);
        drop(tables);
        let filled_at = Instant::now();
        let (synced, buffer) = self.syncer.wait();
        if let Some(buffer) = buffer {
            self.record.recycle(buffer);
        }
        let committed = synced.and(filled).and_then(|()| txn.commit().ctx(file));
        if let Err(err) = committed {
            self.fail(&err);
            return Err(err);
        }
        stats.apply_nanos.fetch_add(
            (filled_at - started - waited).as_nanos() as u64,
            Ordering::Relaxed,
        );
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.writes.fetch_add(
            (next.revision - self.counters.revision) as u64,
            Ordering::Relaxed,
        );
        stats
            .commit_nanos
            .fetch_add(filled_at.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Stops taking writes after a failure that may have left the log and
    /// the database apart.
    fn fail(&mut self, err: &Error) {
        tracing::error!(
            file = %self.shared.file.display(),
            error = %err,
            "a store write failed after its log record may have been written; the store takes \
             no more writes until it is reopened, which recovers from the log"
        );
        self.failed = Some(format!(
            "{}: an earlier write failed ({err}); the store takes no writes until it is \
             reopened",
            self.shared.file.display()
        ));
    }

    /// Makes the database durable and restarts the log. Returns whether it
    /// succeeded (a failure stops writes: the log is kept for recovery).
    fn checkpoint(&mut self) -> bool {
        let started = Instant::now();
        let file = self.shared.file.clone();
        let result = (|| {
            let txn = self.shared.begin_write(true)?;
            {
                // A durable commit with no change might be skipped; this
                // one rewrites the revision counter as it stands.
                let mut meta = txn.open_table(META).ctx(&file)?;
                meta.insert(META_REVISION, self.counters.revision)
                    .ctx(&file)?;
            }
            txn.commit().ctx(&file)?;
            self.syncer.checkpointed()
        })();
        match result {
            Ok(()) => {
                let stats = &self.shared.stats;
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                stats
                    .checkpoint_nanos
                    .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                true
            }
            Err(err) => {
                self.fail(&err);
                false
            }
        }
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
