//! The writer's checkpoints, and what it does when the log cannot take a
//! batch: a full disk refuses writes (nothing was written) until the writer
//! finds room again; anything else that may have written stops writes.

use std::sync::mpsc::TryRecvError;
use std::time::Instant;

use super::apply::Job;
use super::{Queued, Request, SPACE_RETRY_BUSY, Writer};
use crate::store::Error;
use crate::store::embedded::wal::LogError;

impl Writer {
    /// What a failed append means: nothing written (a full disk: the store
    /// refuses writes until there is room), or possibly written (writes
    /// stop). Returns the error for the batch's callers.
    pub(super) fn log_failed(&mut self, err: LogError) -> Error {
        match err {
            LogError::NotWritten(Error::InsufficientStorage(why)) => {
                self.shared.set_out_of_space(&why);
                Error::InsufficientStorage(self.shared.out_of_space().unwrap_or(why))
            }
            LogError::NotWritten(err) => {
                tracing::warn!(file = %self.shared.file.display(), error = %err, "the store's log could not take a batch; nothing was written");
                err
            }
            LogError::MaybeWritten(err) => {
                self.fail(&err);
                err
            }
        }
    }

    /// While the disk is full: looks for room again (at most every
    /// [`SPACE_RETRY_BUSY`]) and, if there still is none, returns the error
    /// for `batch`'s writes. A batch holding only closes passes.
    pub(super) fn still_out_of_space(&mut self, batch: &[Queued]) -> Option<Error> {
        let why = self.out_of_space()?;
        if batch
            .iter()
            .all(|queued| matches!(queued.request, Request::Close { .. }))
        {
            return None;
        }
        if self.space_checked.elapsed() >= SPACE_RETRY_BUSY && self.look_for_space() {
            return None;
        }
        Some(Error::InsufficientStorage(
            self.shared.out_of_space().unwrap_or(why),
        ))
    }

    /// Why writes are refused for lack of room, if they are: the log found
    /// none, or the database file grew without room reserved (which a
    /// durable commit would then fail to write into).
    pub(super) fn out_of_space(&self) -> Option<String> {
        if let Some(why) = self.shared.room.short() {
            self.shared.set_out_of_space(&why);
        }
        self.shared.out_of_space()
    }

    /// After the disk was full: whether there is room again for the log's
    /// next segment (and so for the checkpoint, which may grow the
    /// database file). If there is, writes resume.
    pub(super) fn look_for_space(&mut self) -> bool {
        self.space_checked = Instant::now();
        let database = crate::store::embedded::room::retry(&self.shared.room, &self.shared.file)
            .map_err(|e| {
                LogError::NotWritten(Error::InsufficientStorage(format!(
                    "no room to grow {}: {e}",
                    self.shared.file.display()
                )))
            });
        match database.and_then(|()| self.syncer.make_room()) {
            Ok(()) => {
                self.shared.clear_out_of_space();
                // The checkpoints that waited for room.
                if self.syncer.checkpoint_due() {
                    self.start_checkpoint();
                }
                true
            }
            Err(err) => {
                let err = self.log_failed(err);
                if let Error::InsufficientStorage(_) = err {
                    tracing::debug!(error = %err, "still no room for the store's log");
                }
                false
            }
        }
    }

    /// Makes the database durable with every logged batch and restarts the
    /// log, waiting for it (a failure stops writes: the log is kept for
    /// recovery; a full disk makes it wait).
    pub(super) fn checkpoint(&mut self) {
        self.finish_checkpoint(true);
        self.start_checkpoint();
        self.finish_checkpoint(true);
    }

    /// At close: makes the database durable with every logged batch and
    /// records that it needs no log (which the close then deletes). Returns
    /// whether it succeeded; otherwise the log stays, and the next open
    /// recovers from it.
    pub(super) fn final_checkpoint(&mut self) -> bool {
        self.finish_checkpoint(true);
        if self.out_of_space().is_some() && !self.look_for_space() {
            tracing::warn!(
                file = %self.shared.file.display(),
                "closing without a final checkpoint: the disk is full; the write-ahead log is \
                 kept and replayed at the next start"
            );
            return false;
        }
        if self.shared.failed() {
            return false;
        }
        let (reply, outcome) = std::sync::mpsc::sync_channel(1);
        self.hand_over(Job::Checkpoint {
            log_segment: 0,
            reply,
        });
        match outcome.recv() {
            Ok(Ok(())) => true,
            Ok(Err(err)) => {
                if !self.shared.failed() {
                    self.fail(&err);
                }
                false
            }
            Err(_) => false,
        }
    }

    /// Starts a checkpoint unless one is in flight: later records go to a
    /// new log segment while the applier commits the database durably with
    /// every batch logged before, so writes go on meanwhile. Waits while
    /// the disk is full.
    pub(super) fn start_checkpoint(&mut self) {
        if self.checkpointing.is_some() || self.shared.failed() || self.out_of_space().is_some() {
            return;
        }
        match self.syncer.start_checkpoint() {
            Ok(segment) => {
                let (reply, outcome) = std::sync::mpsc::sync_channel(1);
                self.hand_over(Job::Checkpoint {
                    log_segment: segment,
                    reply,
                });
                self.checkpointing = Some((segment, self.counters.revision, outcome));
            }
            Err(err) => {
                self.log_failed(err);
            }
        }
    }

    /// Completes the checkpoint in flight if the applier has made it
    /// durable (or, with `wait`, once it has): deletes the log segments it
    /// covers.
    pub(super) fn finish_checkpoint(&mut self, wait: bool) {
        let Some((segment, revision, outcome)) = &self.checkpointing else {
            return;
        };
        let answer = if wait {
            outcome.recv().map_err(|_| TryRecvError::Disconnected)
        } else {
            outcome.try_recv()
        };
        let (segment, revision) = (*segment, *revision);
        let result = match answer {
            Err(TryRecvError::Empty) => return,
            Ok(result) => result,
            Err(TryRecvError::Disconnected) => Err(Error::Unavailable(format!(
                "{}: the store's applier thread stopped",
                self.shared.file.display()
            ))),
        };
        self.checkpointing = None;
        if let Err(err) = result.and_then(|()| self.syncer.checkpointed(segment, revision))
            && !self.shared.failed()
        {
            self.fail(&err);
        }
    }
}
