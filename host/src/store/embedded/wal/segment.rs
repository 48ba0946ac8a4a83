//! The log's files and its thread: the segment being appended to, segments
//! prepared ahead of use ([`Wal`]), and the
//! thread that appends and syncs records for the writer ([`Syncer`]).

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};

use super::{CHECKPOINT_BYTES, Found, MAGIC, seal, segment_name};
use crate::store::embedded::open::io_context;
use crate::store::{Error, Result};

/// The first segment prepared after open; each next one is twice as large,
/// up to [`SEGMENT_MAX`], so that a store that writes little writes few
/// zeros.
const SEGMENT_FIRST: u64 = 1 << 20;

/// The largest segment prepared: a checkpoint's worth of log and some room.
const SEGMENT_MAX: u64 = CHECKPOINT_BYTES + (8 << 20);

/// A segment made ready ahead of use, under a temporary name until it is
/// used: its header, then allocated space.
struct Prepared {
    file: File,
    tmp: PathBuf,
    size: u64,
}

/// Makes segment space ready under `tmp`: a new file with its header and
/// `size` bytes allocated.
///
/// Why: appending changes file-system metadata, which costs a journal commit
/// per sync (~260 µs for a 64 KiB record here, and far more while other
/// processes write to the same file system); writing into allocated space
/// (`fallocate`) costs ~180 µs. Allocated and already written blocks would
/// cost ~130 µs, but zero-filling cost as much writing as the log itself,
/// and recycling old segments needs an end marker first (a segment left
/// before it is full would otherwise end in stale records).
fn prepare(tmp: &Path, size: u64) -> io::Result<Prepared> {
    let mut file = File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(tmp)?;
    file.write_all(MAGIC)?;
    let len = file.metadata()?.len();
    if len < size {
        allocate(&file, size);
    }
    file.sync_all()?;
    Ok(Prepared {
        file,
        tmp: tmp.to_owned(),
        size: size.max(len).max(MAGIC.len() as u64),
    })
}

/// The temporary name of segment `sequence` while it is being prepared.
fn tmp_name(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(segment_name(sequence)).with_extension("log.tmp")
}

/// Puts a prepared segment in place as segment `sequence` (a durable
/// rename, so a `.log` file always has a whole header) and returns its
/// file, path and prepared size.
fn publish(dir: &Path, prepared: Prepared, sequence: u64) -> io::Result<(File, PathBuf, u64)> {
    let path = dir.join(segment_name(sequence));
    fs::rename(&prepared.tmp, &path)?;
    File::open(dir)?.sync_all()?;
    Ok((prepared.file, path, prepared.size))
}

/// Allocates `size` bytes for `file` without writing them; where the file
/// system cannot, records simply extend the file.
fn allocate(file: &File, size: u64) {
    if let Err(err) = rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size) {
        tracing::debug!(error = %err, "allocating space for a log segment failed");
    }
}

/// The segment being appended to, older segments not yet checkpointed, and
/// the next segment being prepared.
pub(in crate::store::embedded) struct Wal {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    pub(super) sequence: u64,
    /// Where the next record goes.
    offset: u64,
    /// The file's prepared size; records beyond it extend the file.
    size: u64,
    /// Earlier segments whose records are not checkpointed yet, oldest
    /// first, with their sequence numbers.
    older: Vec<(u64, PathBuf)>,
    /// Segment `sequence + 1`, being prepared.
    next: Option<std::thread::JoinHandle<io::Result<Prepared>>>,
    next_size: u64,
}

impl Wal {
    /// Starts a fresh segment after `found`'s newest and deletes the ones in
    /// `found` (and leftover temporary files): call it only once their
    /// records are in the durable database. The segment is not prepared, so
    /// that opening a store stays quick; the next one is prepared meanwhile.
    pub(in crate::store::embedded) fn create(dir: &Path, found: &Found) -> Result<Self> {
        let sequence = found.last_sequence + 1;
        let (file, path, size) = prepare(&tmp_name(dir, sequence), 0)
            .and_then(|prepared| publish(dir, prepared, sequence))
            .map_err(|e| {
                io_context(
                    e,
                    format!("creating log segment {sequence} in {}", dir.display()),
                )
            })?;
        for (_, old, _) in &found.segments {
            remove(old)?;
        }
        for leftover in &found.leftovers {
            remove(leftover)?;
        }
        let mut wal = Self {
            dir: dir.to_owned(),
            file,
            path,
            sequence,
            offset: MAGIC.len() as u64,
            size,
            older: Vec::new(),
            next: None,
            next_size: SEGMENT_FIRST,
        };
        wal.prepare_next();
        Ok(wal)
    }

    /// Starts preparing segment `sequence + 1` on another thread.
    fn prepare_next(&mut self) {
        let tmp = tmp_name(&self.dir, self.sequence + 1);
        let size = self.next_size;
        self.next_size = (self.next_size * 2).min(SEGMENT_MAX);
        self.next = std::thread::Builder::new()
            .name("store-wal-prep".into())
            .spawn(move || prepare(&tmp, size))
            .ok();
    }

    /// Takes the prepared next segment if it is ready (or, with `wait`, once
    /// it is) and continues in it; the current one joins `older`.
    fn switch(&mut self, wait: bool) -> io::Result<bool> {
        if !wait && !self.next.as_ref().is_some_and(|next| next.is_finished()) {
            return Ok(false);
        }
        let prepared = match self.next.take() {
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("preparing a log segment panicked"))),
            None => return Ok(false),
        };
        let sequence = self.sequence + 1;
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(err) => {
                tracing::warn!(error = %err, "preparing the next log segment failed; appending instead");
                prepare(&tmp_name(&self.dir, sequence), 0)?
            }
        };
        let (file, path, size) = publish(&self.dir, prepared, sequence)?;
        let old = std::mem::replace(&mut self.path, path);
        self.older.push((self.sequence, old));
        self.file = file;
        self.sequence = sequence;
        self.offset = MAGIC.len() as u64;
        self.size = size;
        self.prepare_next();
        Ok(true)
    }

    /// Appends a record and waits until it is on disk. A record that would
    /// grow the current segment goes to the prepared next one if it is
    /// ready.
    fn append(&mut self, record: &mut [u8]) -> io::Result<()> {
        if self.offset + record.len() as u64 > self.size {
            self.switch(false)?;
        }
        seal(record, self.sequence);
        self.file.write_all_at(record, self.offset)?;
        self.file.sync_data()?;
        self.offset += record.len() as u64;
        Ok(())
    }

    /// Bytes of records in the current segment.
    fn records_len(&self) -> u64 {
        self.offset - MAGIC.len() as u64
    }

    /// When a checkpoint starts: continues in a new segment, so that every
    /// older one holds only records the checkpoint covers.
    fn start_checkpoint(&mut self) -> Result<()> {
        let current = self.path.clone();
        self.switch(true).map(|_| ()).map_err(|e| {
            io_context(
                e,
                format!("starting a log segment after {}", current.display()),
            )
        })
    }

    /// Once a checkpoint is durable: deletes the segments before
    /// `sequence`, whose records are all in the database now.
    fn drop_before(&mut self, sequence: u64) -> Result<()> {
        while let Some((older, _)) = self.older.first()
            && *older < sequence
        {
            let (_, path) = self.older.remove(0);
            remove(&path)?;
        }
        Ok(())
    }

    /// At a clean close, after the final checkpoint: no log is left.
    fn remove(mut self) -> Result<()> {
        if let Some(next) = self.next.take()
            && let Ok(Ok(prepared)) = next.join()
        {
            remove(&prepared.tmp)?;
        }
        for (_, old) in std::mem::take(&mut self.older) {
            remove(&old)?;
        }
        remove(&self.path)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_context(e, format!("syncing directory {}", self.dir.display())))
    }
}

fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_context(e, format!("removing {}", path.display()))),
    }
}

/// What the writer asks of the log thread.
enum Job {
    Append(Vec<u8>),
    StartCheckpoint,
    DropBefore(u64),
    Remove,
}

/// What the log thread answers a job with: its outcome, the record's
/// buffer (for reuse) and the sequence of the segment appended to now.
type Answer = (Result<()>, Option<Vec<u8>>, u64);

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
    pub(in crate::store::embedded) fn spawn(
        wal: Wal,
        log_nanos: std::sync::Arc<std::sync::atomic::AtomicU64>,
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
                    let (result, buffer) = match (job, wal.take()) {
                        (Job::Append(mut record), Some(mut log)) => {
                            let started = std::time::Instant::now();
                            let result = log.append(&mut record).map_err(|e| {
                                io_context(e, format!("writing {}", log.path.display()))
                            });
                            log_nanos.fetch_add(
                                started.elapsed().as_nanos() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            wal = Some(log);
                            (result, Some(record))
                        }
                        (Job::StartCheckpoint, Some(mut log)) => {
                            let result = log.start_checkpoint();
                            wal = Some(log);
                            (result, None)
                        }
                        (Job::DropBefore(before), Some(mut log)) => {
                            let result = log.drop_before(before);
                            wal = Some(log);
                            (result, None)
                        }
                        (Job::Remove, Some(log)) => (log.remove(), None),
                        (_, None) => (
                            Err(Error::Unavailable("the store's log was removed".into())),
                            None,
                        ),
                    };
                    if let Some(log) = &wal {
                        sequence = log.sequence;
                    }
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
    pub(in crate::store::embedded) fn wait(&self) -> (Result<()>, Option<Vec<u8>>) {
        let (result, buffer, _) = self.answer();
        (result, buffer)
    }

    fn answer(&self) -> Answer {
        self.done.recv().unwrap_or_else(|_| {
            (
                Err(Error::Unavailable(format!(
                    "{}: the log thread stopped",
                    self.path.display()
                ))),
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
    pub(in crate::store::embedded) fn start_checkpoint(&mut self) -> Result<u64> {
        self.since_checkpoint = 0;
        let _ = self.jobs.send(Job::StartCheckpoint);
        let (result, _, sequence) = self.answer();
        result.map(|()| sequence)
    }

    /// After a durable checkpoint that [`Syncer::start_checkpoint`] began
    /// at segment `sequence`: deletes the segments before it.
    pub(in crate::store::embedded) fn checkpointed(&mut self, sequence: u64) -> Result<()> {
        let _ = self.jobs.send(Job::DropBefore(sequence));
        self.wait().0
    }

    /// After the final checkpoint of a clean close: deletes the log.
    pub(in crate::store::embedded) fn remove(&mut self) -> Result<()> {
        self.since_checkpoint = 0;
        let _ = self.jobs.send(Job::Remove);
        self.wait().0
    }
}
