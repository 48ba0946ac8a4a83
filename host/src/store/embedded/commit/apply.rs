//! The applier: the thread that owns the database's write transactions.
//!
//! The writer hands it each batch once the batch's log record is synced,
//! and goes on deciding the next batch at once: the B-tree work of a batch
//! runs on this thread, beside the writer, instead of between a batch's
//! fsync and its answer. Every batch that queued up meanwhile goes into one
//! transaction, committed without an fsync (the log holds the writes), and
//! that commit is what makes the writes visible to reads
//! ([`Shared::caught_up`](super::super::Shared)). The applier also makes the
//! database durable at checkpoints and runs compaction cleanup
//! (`compact.rs`) between its commits.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::time::Instant;

use tokio::sync::oneshot;

use super::compact;
use super::duplicate;
use super::tables::{Change, Tables, record_versions};
use crate::store::embedded::Shared;
use crate::store::embedded::open::Counters;
use crate::store::embedded::schema::{
    Context, META, META_LOG_SEGMENT, META_REVISION, log_segment_value,
};
use crate::store::{Error, Result, Revision};

/// The most changes written in one transaction: a backlog is caught up in
/// steps, so that reads waiting for the commit are not held for long.
const MAX_CHANGES: usize = 16 * 1024;

/// What the writer hands the applier.
pub(in crate::store::embedded) enum Job {
    /// A logged batch: its changes, the counters after it, and the
    /// compactions it accepted, answered once their history is cleaned.
    Batch {
        changes: Vec<Change>,
        counters: Counters,
        compactions: Vec<(Revision, oneshot::Sender<Result<()>>)>,
    },
    /// Commit durably everything handed over so far, naming `log_segment`
    /// as the first log segment the database lacks writes of (0: none, at
    /// a clean close); answered with the outcome.
    Checkpoint {
        log_segment: u64,
        reply: SyncSender<Result<()>>,
    },
    /// Save the version index for the next open, where the database and
    /// the index agree (between jobs and cleanup chunks), if it moved
    /// enough since the last save ([`index_file::save_when_idle`]).
    ///
    /// [`index_file::save_when_idle`]: crate::store::embedded::index_file::save_when_idle
    SaveIndex,
}

/// The applier thread's state.
pub(super) struct Applier {
    pub(super) shared: Arc<Shared>,
    jobs: Receiver<Job>,
    /// The counters as the database holds them.
    pub(super) counters: Counters,
    /// Callers of `compact` waiting for the cleanup to reach their revision.
    pub(super) compact_waiters: Vec<(Revision, oneshot::Sender<Result<()>>)>,
    /// Set when a cleanup chunk failed; cleared by the next compaction.
    pub(super) cleanup_failed: bool,
    /// The revision and cleanup point the version index was last saved
    /// at (or read, or rebuilt, at the open).
    index_saved: (Revision, Revision),
    /// Revisions the next compaction chunk cleans.
    pub(super) clean_chunk: usize,
    /// No compaction chunk starts before this while batches are waiting.
    pub(super) clean_after: Instant,
    /// Whether a batch was applied since the last compaction chunk.
    pub(super) wrote_since_clean: bool,
    /// Whether a commit without an fsync (a batch, a cleanup chunk) came
    /// after the last durable one: see [`Applier::settle`]. Set at the
    /// start too: a store opened on a killed host's directory read every
    /// page through that mark until its first write (the open's own
    /// commits had left it), so the first quiet second settles whatever
    /// the open did.
    pub(super) unsettled: bool,
}

impl Applier {
    pub(super) fn new(shared: Arc<Shared>, jobs: Receiver<Job>, counters: Counters) -> Self {
        Self {
            shared,
            jobs,
            counters,
            compact_waiters: Vec::new(),
            cleanup_failed: false,
            clean_chunk: compact::CLEAN_FIRST,
            clean_after: Instant::now(),
            wrote_since_clean: false,
            unsettled: true,
            index_saved: (counters.revision, counters.cleaned),
        }
    }

    fn cleanup_pending(&self) -> bool {
        self.counters.cleaned < self.counters.compacted
            && !self.cleanup_failed
            && !self.shared.failed()
    }

    /// Serves jobs until the writer hangs up.
    ///
    /// Compaction cleanup runs between commits, in chunks; while batches
    /// keep coming, each chunk is followed by at least as much time for
    /// them as it took, so that reads wait at most about one chunk for a
    /// write to become visible. An idle store cleans flat out.
    pub(super) fn run(mut self) {
        let mut jobs = Vec::new();
        let mut released = crate::memory::IdleRelease::default();
        loop {
            let first = if self.cleanup_pending() {
                let now = Instant::now();
                if now >= self.clean_after {
                    match self.jobs.try_recv() {
                        Ok(job) => job,
                        Err(TryRecvError::Empty) => {
                            self.clean_chunk();
                            released.worked();
                            continue;
                        }
                        Err(TryRecvError::Disconnected) => break,
                    }
                } else {
                    match self.jobs.recv_timeout(self.clean_after - now) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            } else {
                match self.jobs.recv_timeout(crate::memory::IDLE_AFTER) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => {
                        self.settle();
                        // A transaction's pages are freed here; give them
                        // back once the store goes quiet.
                        released.idle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            released.worked();
            if matches!(first, Job::SaveIndex) {
                self.save_index();
                continue;
            }
            jobs.push(first);
            // Whatever queued meanwhile shares the transaction, up to a
            // checkpoint, which must follow the batches before it.
            let (mut changes, mut save_index) = (0, false);
            while !matches!(jobs.last(), Some(Job::Checkpoint { .. })) && changes < MAX_CHANGES {
                if let Some(Job::Batch { changes: c, .. }) = jobs.last() {
                    changes += c.len();
                }
                match self.jobs.try_recv() {
                    // After this transaction, as if it came next.
                    Ok(Job::SaveIndex) => {
                        save_index = true;
                        break;
                    }
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            let checkpoint = match jobs.pop_if(|job| matches!(job, Job::Checkpoint { .. })) {
                Some(Job::Checkpoint { log_segment, reply }) => Some((log_segment, reply)),
                _ => None,
            };
            if !jobs.is_empty() {
                self.apply(&mut jobs);
            }
            if let Some((log_segment, reply)) = checkpoint {
                let _ = reply.send(self.checkpoint(log_segment));
            }
            if save_index {
                self.save_index();
            }
        }
        for (_, waiter) in self.compact_waiters.drain(..) {
            // The compaction point is durable; the cleanup resumes on reopen.
            let _ = waiter.send(Ok(()));
        }
    }

    /// [`Job::SaveIndex`]: a failure only means the next open rebuilds
    /// the index.
    fn save_index(&mut self) {
        if self.shared.failed() {
            return;
        }
        if let Err(err) =
            super::super::index_file::save_when_idle(&self.shared, &mut self.index_saved)
        {
            tracing::warn!(file = %self.shared.file.display(), %err, "saving the version index failed: the next open rebuilds it");
        }
    }

    /// Writes `jobs` (batches, in order) into one transaction and commits
    /// it, then lets reads see them.
    fn apply(&mut self, jobs: &mut Vec<Job>) {
        let mut compactions = Vec::new();
        let mut next = self.counters;
        let started = Instant::now();
        // After a failure later batches are dropped: the log holds them and
        // reopening recovers them.
        let result = if self.shared.failed() {
            Err(self.shared.failure())
        } else {
            self.write(jobs, &mut next)
        };
        for job in jobs.drain(..) {
            if let Job::Batch {
                compactions: waiting,
                ..
            } = job
            {
                compactions.extend(waiting);
            }
        }
        match result {
            Ok(filled) => {
                let stats = &self.shared.stats;
                stats.applies.fetch_add(1, Ordering::Relaxed);
                stats
                    .apply_nanos
                    .fetch_add((filled - started).as_nanos() as u64, Ordering::Relaxed);
                stats
                    .db_commit_nanos
                    .fetch_add(filled.elapsed().as_nanos() as u64, Ordering::Relaxed);
                if next.compacted != self.counters.compacted {
                    self.cleanup_failed = false;
                }
                self.counters = next;
                self.wrote_since_clean = true;
                self.unsettled = true;
                self.compact_waiters.extend(compactions);
                self.shared.set_committed(next.revision);
            }
            Err(err) => {
                if !self.shared.failed() {
                    self.fail(&err);
                }
                for (_, waiter) in compactions {
                    let _ = waiter.send(Err(duplicate(&err)));
                }
            }
        }
    }

    /// Fills and commits the transaction of `jobs`; returns when filling
    /// ended (the rest is the commit).
    fn write(&mut self, jobs: &[Job], next: &mut Counters) -> Result<Instant> {
        let file = &self.shared.file;
        let txn = self.shared.begin_write(false)?;
        {
            let mut tables = Tables::open(&txn).ctx(file)?;
            for job in jobs {
                if let Job::Batch {
                    changes, counters, ..
                } = job
                {
                    tables.write_changes(changes, file)?;
                    next.revision = counters.revision;
                    next.compacted = counters.compacted;
                }
            }
            tables.write_counters(next, &self.counters, file)?;
        }
        // Before the commit, so that a read of the commit's snapshot finds
        // every version it holds (later ones it skips).
        let mut history = self.shared.history_mut();
        for job in jobs {
            if let Job::Batch { changes, .. } = job {
                record_versions(changes, &mut history);
            }
        }
        drop(history);
        let filled = Instant::now();
        txn.commit().ctx(file)?;
        Ok(filled)
    }

    /// Stops applying after a failed commit: the database may now lag the
    /// log, which only reopening the store recovers.
    fn fail(&mut self, err: &Error) {
        tracing::error!(
            file = %self.shared.file.display(),
            error = %err,
            "committing acknowledged writes to the store's database failed; they are in the \
             log, and the store takes no more writes until it is reopened, which recovers them"
        );
        self.shared.fail(err);
    }

    /// Commits the database durably once the store has gone quiet after
    /// commits without an fsync that no checkpoint followed (the writer
    /// checkpoints after its writes, but a cleanup chunk, or a batch
    /// applied after the writer's last checkpoint, has none behind it).
    /// Until a durable commit, redb keeps such a commit's pages in its
    /// write buffer and marks it as holding committed pages, and while that
    /// mark stands each read that misses its cache looks through every
    /// stripe of the write buffer for a page to write out, found or not: a
    /// LIST of a million objects spent a tenth of its CPU there
    /// (docs/benchmarks/scale.md, "A LIST written where the store reads
    /// it; a store that settles").
    fn settle(&mut self) {
        if !self.unsettled || self.shared.failed() {
            return;
        }
        // A durable commit writes where room may not be reserved while the
        // disk is full, and a failed write ends the database (`room.rs`):
        // it waits, as checkpoints do, for room again.
        if self.shared.out_of_space().is_some() || self.shared.room.short().is_some() {
            return;
        }
        match self.commit_durably(None) {
            Ok(()) => {
                self.unsettled = false;
                self.shared.stats.settles.fetch_add(1, Ordering::Relaxed);
                self.shared.sealer.request();
            }
            // As a failed checkpoint: redb fails every commit after a
            // failed write, and the log holds every write for the reopen.
            Err(err) => self.fail(&err),
        }
    }

    /// One durable commit of everything applied so far: the revision
    /// counter rewritten as it stands (a durable commit with no change
    /// might be skipped) and, at a checkpoint, the log segment the log
    /// continues in (left as it is otherwise: the database then holds more
    /// than the log after it needs, which an open skips).
    fn commit_durably(&self, log_segment: Option<u64>) -> Result<()> {
        let file = &self.shared.file;
        let txn = self.shared.begin_write(true)?;
        {
            let mut meta = txn.open_table(META).ctx(file)?;
            meta.insert(META_REVISION, self.counters.revision)
                .ctx(file)?;
            if let Some(segment) = log_segment {
                meta.insert(META_LOG_SEGMENT, log_segment_value(segment))
                    .ctx(file)?;
            }
        }
        txn.commit().ctx(file)
    }

    /// Commits the database durably, with everything applied so far, and
    /// the log segment its log continues in.
    fn checkpoint(&mut self, log_segment: u64) -> Result<()> {
        if self.shared.failed() {
            return Err(self.shared.failure());
        }
        let started = Instant::now();
        let result = self.commit_durably(Some(log_segment));
        match &result {
            Ok(()) => {
                self.unsettled = false;
                let stats = &self.shared.stats;
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                stats
                    .checkpoint_nanos
                    .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                // What the checkpoint wrote is sealed on the sealer's
                // thread, while writes go on.
                self.shared.sealer.request();
            }
            Err(err) => self.fail(err),
        }
        result
    }
}
