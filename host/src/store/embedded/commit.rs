//! The single writer of the embedded store: group commit through the
//! write-ahead log, with the database's B-tree work on its own thread
//! (`commit/apply.rs`).
//!
//! One std thread decides every write. It takes all pending requests (up to
//! [`MAX_BATCH`]), checks each request's condition against the state left
//! by the earlier requests of the batch, by logged batches the database
//! does not hold yet, and by a snapshot of the database, and assigns
//! revisions in order, building the batch's log record as it goes. The
//! record is appended and synced on the log's thread (`wal/`); once it is on
//! disk the batch is durable: the writer answers its callers, tells watchers
//! and hands the changes to the applier, which commits them to the database
//! (without an fsync of its own) while the writer decides the next batch.
//! Reads wait for the applier to commit every answered write
//! ([`Shared::caught_up`](super::Shared)), so a reader never misses a write
//! that was acknowledged before the read started, and never sees one that a
//! crash could take back.
//!
//! A lone writer is committed at once. After a batch of several writers,
//! the next batch gives them a moment (while requests keep arriving, at most
//! [`GATHER_MAX`]) to come back, so that concurrent writers keep sharing one
//! fsync instead of splitting into alternating half-size batches.
//!
//! Every [`CHECKPOINT_BYTES`](super::wal::CHECKPOINT_BYTES) of log, after
//! [`IDLE_CHECKPOINT`] without writes, and at close, the log moves on to a
//! new segment and the applier commits the database durably with every
//! batch before it; writes go on meanwhile, and once the commit is durable
//! the older segments are deleted. At close the final checkpoint records
//! that the database holds every write, and the log is deleted.
//!
//! If the log or the database fails to write, the store stops taking
//! writes (the log may hold a batch the database does not): reopening it
//! recovers from the log. A full disk is different when nothing was written
//! (the log found no room for its next segment, or the database file could
//! not reserve room to grow): the batch is refused with
//! [`Error::InsufficientStorage`], reads go on, checkpoints wait, and the
//! writer looks again every [`SPACE_RETRY`] (and at the next write, at most
//! every [`SPACE_RETRY_BUSY`]) until there is room, when writes resume.

mod apply;
mod checkpoint;
mod compact;
mod tables;

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, oneshot};

use self::apply::{Applier, Job};
pub(super) use self::tables::replay;
use self::tables::{Change, Decider, Pending, Snapshot, Unapplied};
use super::Shared;
use super::open::Counters;
use super::wal::{RecordBuilder, Syncer};
use crate::store::{Condition, Deleted, Error, KeyValue, Result, Revision, WatchEvent};

/// The most requests committed in one transaction.
pub(super) const MAX_BATCH: usize = 512;

/// How often an idle writer looks whether the checkpoint in flight is done.
const CHECKPOINT_POLL: Duration = Duration::from_millis(5);

/// How long a batch being gathered waits for one more request.
const GATHER_STEP: Duration = Duration::from_micros(50);

/// The longest a batch keeps taking more requests from concurrent writers.
const GATHER_MAX: Duration = Duration::from_millis(1);

/// A store without writes for this long is checkpointed, so that an idle
/// host has nothing to replay after a crash.
const IDLE_CHECKPOINT: Duration = Duration::from_secs(1);

/// While the disk is full, how often an idle writer looks for room again.
const SPACE_RETRY: Duration = Duration::from_secs(1);

/// While the disk is full, how often writes that keep coming look for room
/// (each look may try to allocate a log segment).
const SPACE_RETRY_BUSY: Duration = Duration::from_millis(100);

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
    /// The counters after the last logged batch.
    counters: Counters,
    /// Requests in the previous batch.
    last_batch: usize,
    /// The write-ahead log's thread.
    syncer: Syncer,
    /// The record of the batch being built.
    record: RecordBuilder,
    /// Logged batches the applier may not have committed yet.
    unapplied: Unapplied,
    /// The applier's queue and thread.
    applier: Option<(Sender<Job>, JoinHandle<()>)>,
    /// The checkpoint in flight: the log segment it began, the revision it
    /// makes durable, and where the applier answers.
    checkpointing: Option<(u64, Revision, Receiver<Result<()>>)>,
    /// When the writer last looked for room after the disk was full.
    space_checked: Instant,
}

impl Writer {
    /// A writer for `shared`, starting the applier thread.
    pub(super) fn new(
        shared: Arc<Shared>,
        requests: Receiver<Queued>,
        counters: Counters,
        syncer: Syncer,
    ) -> Result<Self> {
        let (jobs, receiver) = std::sync::mpsc::channel();
        let applier = Applier::new(shared.clone(), receiver, counters);
        let on_panic = shared.clone();
        let thread = std::thread::Builder::new()
            .name("store-apply".into())
            .spawn(move || {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| applier.run())).is_err()
                {
                    tracing::error!(file = %on_panic.file.display(), "store applier panicked");
                    on_panic.fail("the store's applier thread panicked");
                }
            })
            .map_err(|e| super::open::io_context(e, "starting the store applier thread".into()))?;
        Ok(Self {
            shared,
            requests,
            counters,
            syncer,
            record: RecordBuilder::default(),
            unapplied: Unapplied::default(),
            applier: Some((jobs, thread)),
            checkpointing: None,
            last_batch: 0,
            space_checked: Instant::now(),
        })
    }

    /// Serves requests until every handle is dropped or `close` is called,
    /// then closes the database.
    pub(super) fn run(mut self) {
        let mut batch: Vec<Queued> = Vec::with_capacity(MAX_BATCH);
        let mut closers = Vec::new();
        let mut released = crate::memory::IdleRelease::default();
        loop {
            let first = if self.checkpointing.is_some() {
                match self.requests.recv_timeout(CHECKPOINT_POLL) {
                    Ok(queued) => queued,
                    Err(RecvTimeoutError::Timeout) => {
                        self.finish_checkpoint(false);
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else if self.out_of_space().is_some() && !self.shared.failed() {
                match self.requests.recv_timeout(SPACE_RETRY) {
                    Ok(queued) => queued,
                    Err(RecvTimeoutError::Timeout) => {
                        self.look_for_space();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else if self.syncer.has_records() && !self.shared.failed() {
                match self.requests.recv_timeout(IDLE_CHECKPOINT) {
                    Ok(queued) => queued,
                    Err(RecvTimeoutError::Timeout) => {
                        self.checkpoint();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match self.requests.recv_timeout(IDLE_CHECKPOINT) {
                    Ok(queued) => queued,
                    Err(RecvTimeoutError::Timeout) => {
                        self.save_index_when_idle();
                        released.idle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            released.worked();
            batch.push(first);
            drain(&self.requests, &mut batch);
            if self.commit_batch(&mut batch, &mut closers) {
                break;
            }
            self.finish_checkpoint(false);
            if self.syncer.checkpoint_due() && !self.shared.failed() {
                self.start_checkpoint();
            }
        }
        // A clean close leaves a durable database and no log; after a failed
        // write the log stays for the next open to recover from.
        if self.shared.failed() || !self.final_checkpoint() {
            self.shared.log_kept.store(true, Ordering::Release);
        } else if let Err(err) = self.syncer.remove() {
            tracing::warn!(error = %err, "removing the store's log after the final checkpoint failed");
        }
        // Requests still queued are refused by dropping them: their callers
        // see the store closed.
        drop(self.requests);
        if let Some((jobs, thread)) = self.applier.take() {
            drop(jobs);
            let _ = thread.join();
        }
        // Nothing changes the index any more: saved for the next open
        // (after a clean close only: a kept log holds writes the database
        // does not, which the index may already count).
        let holds_every_write = !self.shared.log_kept.load(Ordering::Acquire);
        if holds_every_write {
            super::index_file::save(&self.shared);
        }
        self.shared.close(holds_every_write);
        for closer in closers {
            let _ = closer.send(());
        }
    }

    /// Idle with nothing logged since the last checkpoint: the applier
    /// saves the version index for the next open if it moved far enough
    /// ([`super::index_file::save_when_idle`]).
    fn save_index_when_idle(&mut self) {
        if !self.shared.failed() && self.checkpointing.is_none() {
            self.hand_over(Job::SaveIndex);
        }
    }

    /// Decides and logs one batch, then answers it and hands it to the
    /// applier. Returns whether a close was requested.
    fn commit_batch(
        &mut self,
        batch: &mut Vec<Queued>,
        closers: &mut Vec<oneshot::Sender<()>>,
    ) -> bool {
        let mut outcomes = Vec::with_capacity(MAX_BATCH);
        let mut events = Vec::with_capacity(MAX_BATCH);
        let mut next = self.counters;
        let written = if self.shared.failed() {
            Err(self.shared.failure())
        } else if let Some(full) = self.still_out_of_space(batch) {
            Err(full)
        } else {
            self.write_batch(batch, &mut next, &mut outcomes, &mut events)
        };
        self.last_batch = batch.len();
        let changes = match written {
            Err(err) => {
                if !self.shared.failed() && !matches!(err, Error::InsufficientStorage(_)) {
                    tracing::error!(file = %self.shared.file.display(), error = %err, "store write failed");
                }
                // Nothing was logged: the revision counter stays where it was.
                outcomes = batch
                    .iter()
                    .map(|queued| match &queued.request {
                        Request::Put { .. } => Outcome::Put(Err(duplicate(&err))),
                        Request::Delete { .. } => Outcome::Delete(Err(duplicate(&err))),
                        Request::Compact { .. } => Outcome::Compact(Err(duplicate(&err))),
                        Request::Close { .. } => Outcome::Close,
                    })
                    .collect();
                None
            }
            Ok(None) => None,
            Ok(Some(changes)) => {
                let compacted_moved = next.compacted != self.counters.compacted;
                self.counters = next;
                if compacted_moved {
                    self.shared
                        .compacted
                        .store(next.compacted, Ordering::Release);
                }
                self.unapplied.extend(&changes);
                if !events.is_empty() {
                    self.shared.recent().push(std::mem::take(&mut events));
                    self.shared.set_acknowledged(next.revision);
                }
                Some(changes)
            }
        };
        let mut close = false;
        let mut compactions = Vec::new();
        for (queued, outcome) in batch.drain(..).zip(outcomes) {
            match (queued.request, outcome) {
                (Request::Put { reply, .. }, Outcome::Put(result)) => {
                    let _ = reply.send(result);
                }
                (Request::Delete { reply, .. }, Outcome::Delete(result)) => {
                    let _ = reply.send(result);
                }
                (Request::Compact { reply, .. }, Outcome::Compact(result)) => match result {
                    Ok(Some(revision)) => compactions.push((revision, reply)),
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
        if let Some(changes) = changes {
            self.hand_over(Job::Batch {
                changes,
                counters: self.counters,
                compactions,
            });
        }
        close
    }

    /// Queues a job for the applier.
    fn hand_over(&mut self, job: Job) {
        let sent = match &self.applier {
            Some((jobs, _)) => jobs.send(job).is_ok(),
            None => false,
        };
        if !sent {
            self.fail(&Error::Unavailable(format!(
                "{}: the store's applier thread stopped",
                self.shared.file.display()
            )));
        }
    }

    /// Decides every request of `batch` and logs the batch. `next` ends as
    /// the counters after it and `outcomes` gets one entry per request;
    /// returns the changes to apply, or `None` if there are none (only
    /// conflicts, no-ops or a close).
    ///
    /// When the previous batch had several writers, they are given a moment
    /// to send their next request so that they join this batch rather than
    /// queue behind it (concurrent writers otherwise settle into two
    /// alternating half-size batches). The requests already taken are decided
    /// meanwhile; the wait lasts only while requests keep arriving, at most
    /// [`GATHER_MAX`], and never follows a lone write.
    fn write_batch(
        &mut self,
        batch: &mut Vec<Queued>,
        next: &mut Counters,
        outcomes: &mut Vec<Outcome>,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Option<Vec<Change>>> {
        let shared = self.shared.clone();
        let file = &shared.file;
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        let target = self.last_batch.max(batch.len()).min(MAX_BATCH);
        // What the database holds is dropped from memory before the
        // snapshot is taken, so that the two always overlap.
        self.unapplied
            .trim(shared.committed.load(Ordering::Acquire));
        while self.unapplied.is_full() && !shared.failed() {
            // The applier fell behind (a slow disk, a compaction chunk):
            // wait rather than let memory grow without bound.
            std::thread::sleep(GATHER_STEP);
            self.unapplied
                .trim(shared.committed.load(Ordering::Acquire));
        }
        let txn = shared.begin_read()?;
        let snapshot = Snapshot::open(&txn, file)?;
        let decider = Decider {
            snapshot: &snapshot,
            unapplied: &self.unapplied,
            file,
        };
        let mut pending = Pending::default();
        self.record.start(next.revision + 1);
        let mut decided = 0;
        loop {
            for queued in &batch[decided..] {
                outcomes.push(decider.decide(
                    &queued.request,
                    next,
                    &mut pending,
                    &mut self.record,
                    events,
                )?);
            }
            decided = batch.len();
            if self.last_batch <= 1 || decided >= target || started.elapsed() >= GATHER_MAX {
                break;
            }
            if drain(&self.requests, batch) == 0 {
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
        drop(snapshot);
        drop(txn);
        let stats = &shared.stats;
        stats
            .gather_nanos
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        if next.revision == self.counters.revision && next.compacted == self.counters.compacted {
            return Ok(None);
        }
        // From here on the log may hold the batch: a failure stops writes,
        // unless nothing was written (the disk is full).
        let decided_at = Instant::now();
        self.syncer.submit(self.record.finish(next.compacted));
        let (synced, buffer) = self.syncer.wait();
        if let Some(buffer) = buffer {
            self.record.recycle(buffer);
        }
        if let Err(err) = synced {
            return Err(self.log_failed(err));
        }
        stats.decide_nanos.fetch_add(
            (decided_at - started - waited).as_nanos() as u64,
            Ordering::Relaxed,
        );
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.writes.fetch_add(
            (next.revision - self.counters.revision) as u64,
            Ordering::Relaxed,
        );
        stats
            .commit_nanos
            .fetch_add(decided_at.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Some(pending.changes))
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
        self.shared.fail(err);
    }
}

/// Moves queued requests into `batch`, up to [`MAX_BATCH`]. Returns how
/// many were added.
fn drain(requests: &Receiver<Queued>, batch: &mut Vec<Queued>) -> usize {
    let before = batch.len();
    while batch.len() < MAX_BATCH {
        match requests.try_recv() {
            Ok(request) => batch.push(request),
            Err(_) => break,
        }
    }
    batch.len() - before
}

/// A copy of an error for each request of a failed batch.
fn duplicate(err: &Error) -> Error {
    match err {
        Error::Io(e) => Error::Io(io::Error::new(e.kind(), e.to_string())),
        Error::Corrupt(msg) => Error::Corrupt(msg.clone()),
        Error::Unavailable(msg) => Error::Unavailable(msg.clone()),
        Error::InsufficientStorage(msg) => Error::InsufficientStorage(msg.clone()),
        other => Error::Unavailable(other.to_string()),
    }
}

#[cfg(test)]
mod tests;
