//! The log's files and its thread: the segment being appended to, segments
//! prepared ahead of use ([`Wal`]), and the thread that appends and syncs
//! records for the writer ([`Syncer`]). Every file operation goes through
//! the I/O seam ([`LogIo`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use super::Found;
use super::io::{LogFile, LogIo, is_no_space};
use super::{
    CHECKPOINT_BYTES, NEXT_RECORD, SEGMENT_HEADER, checkpoint_record, next_record, seal,
    segment_header, segment_name,
};
use crate::store::embedded::open::io_context;
use crate::store::{Error, Result, Revision};

/// The first segment's size; each next one is twice as large, up to
/// [`SEGMENT_MAX`], so that a store that writes little reserves little.
const SEGMENT_FIRST: u64 = 1 << 20;

/// The largest segment prepared: a checkpoint's worth of log and some room.
const SEGMENT_MAX: u64 = CHECKPOINT_BYTES + (8 << 20);

/// Why the log did not take a record (or a checkpoint's new segment).
#[derive(Debug)]
pub(in crate::store::embedded) enum LogError {
    /// Nothing was written: the log is as it was and takes the next record
    /// (no room could be made for it, most often because the disk is full).
    NotWritten(Error),
    /// The record may be on disk, or a sync failed and the file system may
    /// have dropped what the log holds: writes must stop.
    MaybeWritten(Error),
}

impl LogError {
    /// The error to answer callers with.
    pub(in crate::store::embedded) fn into_error(self) -> Error {
        match self {
            LogError::NotWritten(err) | LogError::MaybeWritten(err) => err,
        }
    }

    /// The same error for an operation that touched only files the log
    /// never uses: nothing was written, whatever the failure.
    fn nothing_written(self) -> Self {
        LogError::NotWritten(self.into_error())
    }

    /// An I/O failure while `doing`: nothing written if it says the disk is
    /// full, possibly written otherwise.
    fn write(err: io::Error, doing: String) -> Self {
        if is_no_space(&err) {
            LogError::NotWritten(no_space(err, doing))
        } else {
            LogError::MaybeWritten(io_context(err, doing))
        }
    }
}

/// The error for a log that found no room: [`Error::InsufficientStorage`].
fn no_space(err: io::Error, doing: String) -> Error {
    Error::InsufficientStorage(format!("{doing}: {err}"))
}

/// A segment made ready ahead of use, under a temporary name until it is
/// used: its size allocated, its header written and synced.
struct Prepared<F> {
    file: F,
    tmp: PathBuf,
    size: u64,
}

/// Makes a segment of `size` bytes ready under `tmp`.
///
/// Why allocated: appending changes file-system metadata, which costs a
/// journal commit per sync (far more while other processes write to the
/// same file system); writing into allocated space (`fallocate`) costs less
/// (docs/benchmarks/store.md#with-the-write-ahead-log-before-the-applier). Allocating also makes a
/// full disk show up here, before a record is written, and lets a reader
/// tell a segment cut short from one the log did not fill. Allocated and
/// already written blocks would cost less still, but zero-filling cost as much
/// writing as the log itself, and recycling old segments needs care for
/// their stale records.
fn prepare<I: LogIo>(io: &I, tmp: &Path, size: u64) -> io::Result<Prepared<I::File>> {
    let made = io.create(tmp).and_then(|mut file| {
        file.allocate(size)?;
        file.write_at(&segment_header(size), 0)?;
        file.sync_all()?;
        Ok(file)
    });
    match made {
        Ok(file) => Ok(Prepared {
            file,
            tmp: tmp.to_owned(),
            size,
        }),
        Err(err) => {
            // Gives back whatever it had reserved.
            let _ = io.remove(tmp);
            Err(err)
        }
    }
}

/// The temporary name of segment `sequence` while it is being prepared.
fn tmp_name(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(segment_name(sequence)).with_extension("log.tmp")
}

/// The next segment: being prepared on another thread, or ready.
enum Next<F> {
    Preparing(JoinHandle<io::Result<Prepared<F>>>),
    Ready(Prepared<F>),
}

/// The segment being appended to, older segments not yet checkpointed, and
/// the next segment being prepared.
pub(in crate::store::embedded) struct Wal<I: LogIo> {
    io: Arc<I>,
    dir: PathBuf,
    /// The segment being appended to; `None` until the log can make its
    /// first one (a store opened on a disk too full for it: the database
    /// then holds every write and names no segment, so none is needed
    /// until a write comes).
    file: Option<I::File>,
    path: PathBuf,
    pub(super) sequence: u64,
    /// Where the next record goes.
    offset: u64,
    /// The segment's size: records and the next record stay inside it.
    size: u64,
    /// Earlier segments whose records are not checkpointed yet, oldest
    /// first, with their sequence numbers.
    older: Vec<(u64, PathBuf)>,
    /// Segment `sequence + 1`; `None` after preparing it failed.
    next: Option<Next<I::File>>,
    next_size: u64,
    /// Why there is no segment yet, while there is none.
    no_room: Option<String>,
}

impl<I: LogIo> Wal<I> {
    /// Starts a segment after every one `found` in `dir` and prepares the
    /// next one meanwhile, once the temporary files left by an earlier
    /// run's preparing are gone. On a disk too full for a segment the log
    /// starts without one ([`Wal::no_room`]) and makes it when a write
    /// comes and there is room: a store stopped cleanly on a disk that
    /// filled up afterwards still opens, to serve reads.
    pub(in crate::store::embedded) fn create(io: I, dir: &Path, found: &Found) -> Result<Self> {
        let io = Arc::new(io);
        for leftover in found.leftover_files() {
            remove(&*io, leftover)?;
        }
        let sequence = found.last_sequence() + 1;
        let mut wal = Self {
            io,
            dir: dir.to_owned(),
            file: None,
            path: dir.join(segment_name(sequence)),
            sequence,
            offset: SEGMENT_HEADER as u64,
            size: 0,
            older: Vec::new(),
            next: None,
            next_size: SEGMENT_FIRST * 2,
            no_room: None,
        };
        match wal.start_segment(0) {
            Ok(()) => Ok(wal),
            Err(LogError::NotWritten(Error::InsufficientStorage(why))) => {
                tracing::warn!(dir = %dir.display(), error = %why, "no room for the write-ahead log: the store opens read-only until there is");
                wal.no_room = Some(why);
                Ok(wal)
            }
            Err(err) => Err(err.into_error()),
        }
    }

    /// Why the log has no segment yet (the disk was too full to make
    /// one), while it has none: writes wait for room.
    pub(in crate::store::embedded) fn no_room(&self) -> Option<&str> {
        self.no_room.as_deref()
    }

    /// The segment the database must name as continuing it: this one, or 0
    /// (no log: the database holds every write) while there is none yet.
    pub(in crate::store::embedded) fn named_segment(&self) -> u64 {
        if self.file.is_some() {
            self.sequence
        } else {
            0
        }
    }

    /// Makes the log's first segment (`sequence`) with room for a record of
    /// `len` bytes and starts preparing the next one. Failing writes
    /// nothing a reader would take for the log: at most a segment with no
    /// record.
    fn start_segment(&mut self, len: usize) -> Result<(), LogError> {
        let needed = (SEGMENT_HEADER + len + NEXT_RECORD) as u64;
        let sequence = self.sequence;
        let (file, path, size) = prepare(
            &*self.io,
            &tmp_name(&self.dir, sequence),
            needed.max(SEGMENT_FIRST),
        )
        .and_then(|prepared| publish(&*self.io, &self.dir, prepared, sequence))
        .map_err(|err| {
            LogError::write(
                err,
                format!(
                    "creating log segment {} in {}",
                    segment_name(sequence),
                    self.dir.display()
                ),
            )
            .nothing_written()
        })?;
        self.file = Some(file);
        self.path = path;
        self.size = size;
        self.offset = SEGMENT_HEADER as u64;
        self.no_room = None;
        self.prepare_next();
        Ok(())
    }

    /// The error for a log asked to write with no segment (never after
    /// [`Wal::start_segment`] succeeded).
    fn no_segment(&self) -> LogError {
        LogError::NotWritten(Error::InsufficientStorage(
            self.no_room
                .clone()
                .unwrap_or_else(|| "the write-ahead log has no segment".into()),
        ))
    }

    /// Deletes the segments `found` at open, oldest first: call it only
    /// once their records are in the durable database.
    pub(in crate::store::embedded) fn forget(&self, found: &Found) -> Result<()> {
        for file in found.segment_files() {
            remove(&*self.io, file)?;
        }
        Ok(())
    }

    /// Starts preparing segment `sequence + 1` on another thread.
    fn prepare_next(&mut self) {
        let io = self.io.clone();
        let tmp = tmp_name(&self.dir, self.sequence + 1);
        let size = self.next_size;
        self.next = std::thread::Builder::new()
            .name("store-wal-prep".into())
            .spawn(move || prepare(&*io, &tmp, size))
            .ok()
            .map(Next::Preparing);
    }

    /// The prepared next segment, waiting for it; `None` if preparing it
    /// failed (logged) or was not started.
    fn take_next(&mut self) -> Option<Prepared<I::File>> {
        let preparing = match self.next.take()? {
            Next::Ready(prepared) => return Some(prepared),
            Next::Preparing(preparing) => preparing,
        };
        let result = preparing
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("preparing a log segment panicked")));
        result
            .inspect_err(
                |err| tracing::debug!(error = %err, "preparing the next log segment failed"),
            )
            .ok()
    }

    /// The next segment with room for a record of `len` bytes: the one
    /// prepared in the background, or one made now. Not finding room is
    /// [`LogError::NotWritten`]: nothing changed.
    fn ready_next(&mut self, len: usize) -> Result<Prepared<I::File>, LogError> {
        let needed = (SEGMENT_HEADER + len + NEXT_RECORD) as u64;
        match self.take_next() {
            Some(prepared) if prepared.size >= needed => return Ok(prepared),
            Some(small) => {
                let _ = self.io.remove(&small.tmp);
            }
            None => {}
        }
        let sequence = self.sequence + 1;
        prepare(
            &*self.io,
            &tmp_name(&self.dir, sequence),
            needed.max(self.next_size),
        )
        .map_err(|err| {
            let doing = format!(
                "making log segment {} ready in {}",
                segment_name(sequence),
                self.dir.display()
            );
            // Nothing was named or appended to: only a file that is never
            // used was touched.
            LogError::write(err, doing).nothing_written()
        })
    }

    /// Moves the log to segment `sequence + 1`, with room for a record of
    /// `len` bytes. The new segment gets its name (durably) before the
    /// current one ends with the next record naming it, so that a next
    /// record always names a file that was there.
    fn rotate(&mut self, len: usize) -> Result<(), LogError> {
        if self.file.is_none() {
            return self.start_segment(len);
        }
        let prepared = self.ready_next(len)?;
        let sequence = self.sequence + 1;
        let path = self.dir.join(segment_name(sequence));
        if let Err(err) = self.io.rename(&prepared.tmp, &path) {
            let _ = self.io.remove(&prepared.tmp);
            return Err(
                match LogError::write(err, format!("naming {}", path.display())) {
                    LogError::MaybeWritten(err) => LogError::NotWritten(err),
                    not_written => not_written,
                },
            );
        }
        self.io.sync_dir(&self.dir).map_err(|e| {
            LogError::MaybeWritten(io_context(e, format!("syncing {}", self.dir.display())))
        })?;
        let next = next_record(self.sequence, sequence);
        let Some(current) = self.file.as_mut() else {
            return Err(self.no_segment());
        };
        current
            .write_at(&next, self.offset)
            .and_then(|()| current.sync_data())
            .map_err(|e| {
                LogError::MaybeWritten(io_context(
                    e,
                    format!("ending {} with a next record", self.path.display()),
                ))
            })?;
        let old = std::mem::replace(&mut self.path, path);
        self.older.push((self.sequence, old));
        self.file = Some(prepared.file);
        self.sequence = sequence;
        self.offset = SEGMENT_HEADER as u64;
        self.size = prepared.size;
        self.next_size = (self.next_size * 2).min(SEGMENT_MAX);
        self.prepare_next();
        Ok(())
    }

    /// Appends a record and waits until it is on disk. A record that does
    /// not fit the current segment (with room left for a next record) goes
    /// to the next one.
    fn append(&mut self, record: &mut [u8]) -> Result<(), LogError> {
        if self.file.is_none() || self.offset + (record.len() + NEXT_RECORD) as u64 > self.size {
            self.rotate(record.len())?;
        }
        seal(record, self.sequence);
        // A write that found the disk full left at most part of the record,
        // which the next record overwrites (the offset stays), and a crash
        // meanwhile leaves as a torn append.
        let Some(current) = self.file.as_mut() else {
            return Err(self.no_segment());
        };
        current
            .write_at(record, self.offset)
            .map_err(|e| LogError::write(e, format!("writing {}", self.path.display())))?;
        current.sync_data().map_err(|e| {
            LogError::MaybeWritten(io_context(e, format!("syncing {}", self.path.display())))
        })?;
        self.offset += record.len() as u64;
        Ok(())
    }

    /// Makes sure the next segment can be had: after the disk was full,
    /// whether there is room again.
    fn make_room(&mut self) -> Result<(), LogError> {
        if self.file.is_none() {
            return self.start_segment(0);
        }
        let prepared = self.ready_next(0)?;
        self.next = Some(Next::Ready(prepared));
        Ok(())
    }

    /// Bytes of records in the current segment.
    fn records_len(&self) -> u64 {
        self.offset - SEGMENT_HEADER as u64
    }

    /// Once a checkpoint is durable (the database holds every write up to
    /// `revision` and names segment `sequence`): records that in the log,
    /// then deletes the segments before `sequence`, whose records are all
    /// in the database now. Without room for the record, they stay until a
    /// later checkpoint.
    fn checkpointed(&mut self, sequence: u64, revision: Revision) -> Result<(), LogError> {
        match self.append(&mut checkpoint_record(revision, sequence)) {
            Ok(()) => {}
            Err(LogError::NotWritten(err)) => {
                tracing::warn!(error = %err, "no room to record a checkpoint in the log; its older segments stay for now");
                return Ok(());
            }
            Err(err) => return Err(err),
        }
        self.drop_before(sequence).map_err(LogError::MaybeWritten)
    }

    /// Deletes the segments before `sequence`.
    fn drop_before(&mut self, sequence: u64) -> Result<()> {
        while let Some((older, _)) = self.older.first()
            && *older < sequence
        {
            let (_, path) = self.older.remove(0);
            remove(&*self.io, &path)?;
        }
        Ok(())
    }

    /// At a clean close, after the final checkpoint: no log is left.
    fn remove(mut self) -> Result<()> {
        if let Some(prepared) = self.take_next() {
            remove(&*self.io, &prepared.tmp)?;
        }
        for (_, old) in std::mem::take(&mut self.older) {
            remove(&*self.io, &old)?;
        }
        remove(&*self.io, &self.path)?;
        self.io
            .sync_dir(&self.dir)
            .map_err(|e| io_context(e, format!("syncing directory {}", self.dir.display())))
    }
}

/// Puts a prepared segment in place as segment `sequence` (a durable
/// rename, so a `.log` file always has its whole size and header) and
/// returns its file, path and size.
fn publish<I: LogIo>(
    io: &I,
    dir: &Path,
    prepared: Prepared<I::File>,
    sequence: u64,
) -> io::Result<(I::File, PathBuf, u64)> {
    let path = dir.join(segment_name(sequence));
    io.rename(&prepared.tmp, &path)?;
    io.sync_dir(dir)?;
    Ok((prepared.file, path, prepared.size))
}

fn remove<I: LogIo>(io: &I, path: &Path) -> Result<()> {
    match io.remove(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_context(e, format!("removing {}", path.display()))),
    }
}

/// What the writer asks of the log thread.
enum Job {
    Append(Vec<u8>),
    StartCheckpoint,
    Checkpointed(u64, Revision),
    MakeRoom,
    Remove,
}

/// What the log thread answers a job with: its outcome, the record's
/// buffer (for reuse) and the sequence of the segment appended to now.
type Answer = (Result<(), LogError>, Option<Vec<u8>>, u64);

/// The log's own thread: appends and syncs records, and moves to new
/// segments and deletes old ones around checkpoints.
pub(in crate::store::embedded) struct Syncer {
    jobs: Sender<Job>,
    done: Receiver<Answer>,
    /// Log bytes since the last checkpoint.
    since_checkpoint: u64,
    /// Log bytes after which a checkpoint is due.
    checkpoint_bytes: u64,
    path: PathBuf,
}

impl Syncer {
    /// Starts the thread that owns `wal`; it adds the time it spends
    /// appending and syncing to `log_nanos`.
    pub(in crate::store::embedded) fn spawn<I: LogIo>(
        wal: Wal<I>,
        log_nanos: Arc<std::sync::atomic::AtomicU64>,
        checkpoint_bytes: u64,
    ) -> Result<Self> {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel();
        let path = wal.path.clone();
        let since_checkpoint = wal.records_len();
        std::thread::Builder::new()
            .name("store-wal".into())
            .spawn(move || {
                let mut wal = Some(wal);
                let mut sequence = wal.as_ref().map_or(0, |w| w.sequence);
                for job in job_rx {
                    let Some(mut log) = wal.take() else {
                        let gone = Error::Unavailable("the store's log was removed".into());
                        if done_tx
                            .send((Err(LogError::MaybeWritten(gone)), None, sequence))
                            .is_err()
                        {
                            break;
                        }
                        continue;
                    };
                    let (result, buffer) = match job {
                        Job::Append(mut record) => {
                            let started = std::time::Instant::now();
                            let result = log.append(&mut record);
                            log_nanos.fetch_add(
                                started.elapsed().as_nanos() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            (result, Some(record))
                        }
                        Job::StartCheckpoint => (log.rotate(0), None),
                        Job::MakeRoom => (log.make_room(), None),
                        Job::Checkpointed(before, revision) => {
                            (log.checkpointed(before, revision), None)
                        }
                        Job::Remove => {
                            let result = log.remove().map_err(LogError::MaybeWritten);
                            if done_tx.send((result, None, sequence)).is_err() {
                                break;
                            }
                            continue;
                        }
                    };
                    sequence = log.sequence;
                    wal = Some(log);
                    if done_tx.send((result, buffer, sequence)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| io_context(e, "starting the store's log thread".into()))?;
        Ok(Self {
            jobs,
            done,
            since_checkpoint,
            checkpoint_bytes,
            path,
        })
    }

    /// Starts appending `record`; [`Syncer::wait`] gives the outcome.
    pub(in crate::store::embedded) fn submit(&mut self, record: Vec<u8>) {
        self.since_checkpoint += record.len() as u64;
        let _ = self.jobs.send(Job::Append(record));
    }

    /// Waits for the last job; returns the record's buffer for reuse.
    pub(in crate::store::embedded) fn wait(&self) -> (Result<(), LogError>, Option<Vec<u8>>) {
        let (result, buffer, _) = self.answer();
        (result, buffer)
    }

    fn answer(&self) -> Answer {
        self.done.recv().unwrap_or_else(|_| {
            (
                Err(LogError::MaybeWritten(Error::Unavailable(format!(
                    "{}: the log thread stopped",
                    self.path.display()
                )))),
                None,
                0,
            )
        })
    }

    /// Whether enough log has accumulated for a checkpoint.
    pub(in crate::store::embedded) fn checkpoint_due(&self) -> bool {
        self.since_checkpoint >= self.checkpoint_bytes
    }

    /// Whether any record was appended since the last checkpoint.
    pub(in crate::store::embedded) fn has_records(&self) -> bool {
        self.since_checkpoint > 0
    }

    /// Before a checkpoint: later records go to a new segment. Returns its
    /// sequence, for [`Syncer::checkpointed`] once the checkpoint is
    /// durable.
    pub(in crate::store::embedded) fn start_checkpoint(&mut self) -> Result<u64, LogError> {
        let _ = self.jobs.send(Job::StartCheckpoint);
        let (result, _, sequence) = self.answer();
        result.map(|()| {
            self.since_checkpoint = 0;
            sequence
        })
    }

    /// After a durable checkpoint that [`Syncer::start_checkpoint`] began
    /// at segment `sequence`, holding every write up to `revision`: records
    /// it in the log and deletes the segments before `sequence`.
    pub(in crate::store::embedded) fn checkpointed(
        &mut self,
        sequence: u64,
        revision: Revision,
    ) -> Result<()> {
        let _ = self.jobs.send(Job::Checkpointed(sequence, revision));
        self.wait().0.map_err(LogError::into_error)
    }

    /// After the disk was full: whether the log has room for its next
    /// segment again.
    pub(in crate::store::embedded) fn make_room(&mut self) -> Result<(), LogError> {
        let _ = self.jobs.send(Job::MakeRoom);
        self.wait().0
    }

    /// After the final checkpoint of a clean close: deletes the log.
    pub(in crate::store::embedded) fn remove(&mut self) -> Result<()> {
        self.since_checkpoint = 0;
        let _ = self.jobs.send(Job::Remove);
        self.wait().0.map_err(LogError::into_error)
    }
}
