//! The embedded store's write-ahead log: what makes a write durable before
//! it is acknowledged, so that the database itself can commit without an
//! fsync.
//!
//! Why: a durable redb commit writes every B-tree page a batch touched
//! (values, the index and the current table, spread over the file) and
//! waits for all of them; at 64 concurrent writers that was ~150 pages and
//! 1.2–1.6 ms per commit. The log instead appends one record per batch (the
//! encoded entries, ~1 KiB per 1 KiB put) and syncs that one sequential
//! write; the database commits with `Durability::None` and is made durable
//! only at a *checkpoint* (every [`CHECKPOINT_BYTES`] of log, when idle, and
//! at close), where the pages rewritten by many batches are flushed once.
//! The sync runs on its own thread ([`Syncer`]) while the writer fills the
//! batch's transaction, so the two overlap.
//!
//! # Files
//!
//! `wal-<sequence, 16 hex digits>.log` in the data directory. A segment
//! starts with [`MAGIC`]; then records, each `payload length (u32 LE) ‖
//! segment sequence (u64 LE) ‖ CRC-32 of the payload (u32 LE) ‖ CRC-32 of
//! the 16 bytes before (u32 LE) ‖ payload`, the payload being `first
//! revision (i64 LE) ‖ compaction point after the batch (i64 LE) ‖ entry
//! count (u32 LE) ‖ entries`, each entry `length (u32 LE) ‖` an entry as the
//! `revisions` table stores it (`schema::encode`), for consecutive
//! revisions from the first.
//!
//! The segment written after open is new; the next ones are made ready in
//! the background (under a temporary name, header synced, space allocated)
//! and taken when the current one is full. After a checkpoint the log moves
//! to the next segment; the older ones are deleted, except the one just
//! left, whose file becomes a later segment (recycled: its space is
//! allocated and written, so syncs over it are data-only; its old records
//! carry an older sequence and so read as the end of the log).
//!
//! # Recovery
//!
//! On open, records newer than the database's revision are applied again
//! (`commit::replay`). Only the end of the newest segment may be incomplete
//! (a record being appended when the process died; it was never
//! acknowledged) and is ignored: an invalid record after which no valid
//! record of the segment starts anywhere (a crash may persist any subset of
//! the sectors of the record being appended, so nothing about the invalid
//! record itself tells torn from damaged; a valid record after it does).
//! Zeros, and records of an older sequence, end the log. An invalid record
//! followed by a valid one, a bad record in an older segment, a gap in
//! revisions or a foreign file is [`Error::Corrupt`], reported before
//! anything is written. As with any log, damage to exactly the last record
//! cannot be told from a torn append and loses that record's batch.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};

use super::open::io_context;
use super::schema::{Entry, encode, encoded_len};
use crate::store::{Error, Result, Revision};

/// The first bytes of every segment: the format of what follows.
pub(super) const MAGIC: &[u8; 8] = b"SPWAL\x00\x00\x01";

/// Log bytes after which the writer checkpoints the database.
pub(super) const CHECKPOINT_BYTES: u64 = 32 << 20;

/// Bytes in front of a record's payload: length, the segment's sequence
/// number, CRC of the payload, CRC of those three (so that a damaged length
/// is told from a record cut short).
const RECORD_HEADER: usize = 20;

/// Bytes in front of a payload's entries.
const PAYLOAD_HEADER: usize = 20;

/// The largest payload a record may claim (a batch is at most 512 writes of
/// objects far below this in total), so that a damaged length is caught
/// before it is believed.
const MAX_PAYLOAD: usize = 1 << 30;

/// The file name of segment `sequence`.
fn segment_name(sequence: u64) -> String {
    format!("wal-{sequence:016x}.log")
}

/// The sequence number of a segment file name, if it is one.
fn segment_sequence(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// Builds one record: the batch's changes, in revision order.
#[derive(Debug, Default)]
pub(super) struct RecordBuilder {
    bytes: Vec<u8>,
    entries: u32,
    next_revision: Revision,
}

impl RecordBuilder {
    /// Starts a record whose first entry gets revision `first`.
    pub(super) fn start(&mut self, first: Revision) {
        self.bytes.clear();
        self.bytes.resize(RECORD_HEADER + PAYLOAD_HEADER, 0);
        self.bytes[RECORD_HEADER..RECORD_HEADER + 8].copy_from_slice(&first.to_le_bytes());
        self.entries = 0;
        self.next_revision = first;
    }

    /// Adds the entry of the next revision: a put of `value` (created at
    /// `create_revision`), or a deletion when `value` is `None`.
    pub(super) fn push(
        &mut self,
        revision: Revision,
        create_revision: Revision,
        key: &str,
        value: Option<&[u8]>,
    ) {
        debug_assert_eq!(revision, self.next_revision, "entries are consecutive");
        self.next_revision = revision + 1;
        let value = value.unwrap_or_default();
        let len = encoded_len(key, value.len());
        self.bytes
            .extend_from_slice(&u32::try_from(len).expect("an entry fits").to_le_bytes());
        let at = self.bytes.len();
        self.bytes.resize(at + len, 0);
        encode(&mut self.bytes[at..], create_revision, key, value);
        self.entries += 1;
    }

    /// Seals the record with the compaction point after the batch and
    /// returns its bytes, ready to append.
    pub(super) fn finish(&mut self, compacted: Revision) -> Vec<u8> {
        let payload_len = self.bytes.len() - RECORD_HEADER;
        let header = RECORD_HEADER + 8;
        self.bytes[header..header + 8].copy_from_slice(&compacted.to_le_bytes());
        self.bytes[header + 8..header + 12].copy_from_slice(&self.entries.to_le_bytes());
        let crc = crc32fast::hash(&self.bytes[RECORD_HEADER..]);
        self.bytes[..4].copy_from_slice(
            &u32::try_from(payload_len)
                .expect("a batch is far below 4 GiB")
                .to_le_bytes(),
        );
        self.bytes[12..16].copy_from_slice(&crc.to_le_bytes());
        // The sequence and header CRC are set by `seal` when the log knows
        // which segment the record goes to.
        std::mem::take(&mut self.bytes)
    }

    /// Gives back a buffer for the next record.
    pub(super) fn recycle(&mut self, mut buffer: Vec<u8>) {
        buffer.clear();
        self.bytes = buffer;
    }
}

/// Stamps a finished record with the sequence of the segment it is written
/// to, and checksums its header.
fn seal(record: &mut [u8], sequence: u64) {
    record[4..12].copy_from_slice(&sequence.to_le_bytes());
    let header_crc = crc32fast::hash(&record[..16]);
    record[16..20].copy_from_slice(&header_crc.to_le_bytes());
}

/// One decoded record.
#[derive(Debug)]
pub(super) struct Record<'a> {
    pub first_revision: Revision,
    pub compacted: Revision,
    pub entries: Vec<Entry<'a>>,
}

impl Record<'_> {
    /// The revision of the last entry (the first minus one if none).
    pub(super) fn last_revision(&self) -> Revision {
        self.first_revision + self.entries.len() as Revision - 1
    }
}

/// Decodes a payload whose CRC matched; `None` if its structure is wrong.
fn decode_payload<'a>(payload: &'a [u8], file: &Path) -> Option<Record<'a>> {
    let (header, mut rest) = payload.split_first_chunk::<PAYLOAD_HEADER>()?;
    let first_revision = i64::from_le_bytes(header[..8].try_into().ok()?);
    let compacted = i64::from_le_bytes(header[8..16].try_into().ok()?);
    let count = u32::from_le_bytes(header[16..20].try_into().ok()?);
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return None;
        }
        let (entry, tail) = tail.split_at(len);
        entries.push(Entry::decode(entry, first_revision + i as Revision, file).ok()?);
        rest = tail;
    }
    rest.is_empty().then_some(Record {
        first_revision,
        compacted,
        entries,
    })
}

/// One step of reading a segment.
enum Parsed<'a> {
    /// A whole, valid record and its length in bytes.
    Record(Record<'a>, usize),
    /// Only zeros are left: space prepared for records not yet written.
    End,
    /// Not a valid record, for the reason given.
    Invalid(&'static str),
}

/// Reads the record at the start of `rest`, in segment `sequence`.
fn parse_record<'a>(rest: &'a [u8], sequence: u64, file: &Path) -> Parsed<'a> {
    if rest.iter().all(|&b| b == 0) {
        return Parsed::End;
    }
    let Some((header, tail)) = rest.split_first_chunk::<RECORD_HEADER>() else {
        return Parsed::Invalid("is shorter than a record header");
    };
    let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
    if crc32fast::hash(&header[..16]) != word(16) {
        return Parsed::Invalid("has a damaged header");
    }
    if u64::from_le_bytes(header[4..12].try_into().expect("8 bytes")) != sequence {
        // Left from the file's use as an older segment (segments are
        // recycled): the log ends here.
        return Parsed::End;
    }
    let len = word(0) as usize;
    if len > MAX_PAYLOAD || tail.len() < len {
        return Parsed::Invalid("runs past the end of the file");
    }
    let payload = &tail[..len];
    if crc32fast::hash(payload) != word(12) {
        return Parsed::Invalid("fails its checksum");
    }
    match decode_payload(payload, file) {
        Some(record) => Parsed::Record(record, RECORD_HEADER + len),
        None => Parsed::Invalid("has a valid checksum but a wrong structure"),
    }
}

/// The offset in `rest` of the first valid record of segment `sequence`
/// after its first byte, if any. Records are appended one at a time, each
/// synced before the next is written, so a valid record after an invalid
/// one proves that the invalid one was once whole: it was damaged, not torn
/// by a crash. (A crash may persist any subset of the sectors of the record
/// being appended, so the invalid record's own length cannot be trusted to
/// say where to look.)
fn valid_record_after(rest: &[u8], sequence: u64, file: &Path) -> Option<usize> {
    let stamp = sequence.to_le_bytes();
    (1..rest.len().saturating_sub(RECORD_HEADER)).find(|&at| {
        let header = &rest[at..at + RECORD_HEADER];
        header[4..12] == stamp
            && crc32fast::hash(&header[..16])
                == u32::from_le_bytes(header[16..].try_into().expect("4 bytes"))
            && matches!(
                parse_record(&rest[at..], sequence, file),
                Parsed::Record(..)
            )
    })
}

/// The log found in a data directory at open.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Segment files, oldest first, with their contents.
    segments: Vec<(u64, PathBuf, Vec<u8>)>,
    /// The highest segment sequence number seen.
    last_sequence: u64,
    /// Temporary files of segments being prepared or created: never used.
    leftovers: Vec<PathBuf>,
}

/// What reading the log found: the records to apply, in order.
#[derive(Debug)]
pub(super) struct Replay<'a> {
    pub records: Vec<Record<'a>>,
    /// Bytes after the newest segment's last record that are neither zeros
    /// nor a whole record: an append the crash interrupted, or what is left
    /// from the file's earlier use as an older segment.
    pub torn_bytes: usize,
}

impl Found {
    /// Reads every segment of `dir` (without changing anything). Leftover
    /// temporary segments are ignored (and removed by [`Wal::create`]).
    pub(super) fn read(dir: &Path) -> Result<Self> {
        let mut numbered = Vec::new();
        let mut found = Found::default();
        let listing =
            fs::read_dir(dir).map_err(|e| io_context(e, format!("listing {}", dir.display())))?;
        for entry in listing {
            let entry = entry.map_err(|e| io_context(e, format!("listing {}", dir.display())))?;
            let name = entry.file_name();
            let name = name.to_str().unwrap_or_default();
            if let Some(sequence) = segment_sequence(name) {
                numbered.push((sequence, entry.path()));
            } else if name
                .strip_suffix(".log.tmp")
                .and_then(|stem| segment_sequence(&format!("{stem}.log")))
                .is_some()
            {
                found.leftovers.push(entry.path());
            }
        }
        numbered.sort();
        for (sequence, path) in numbered {
            let bytes = fs::read(&path)
                .map_err(|e| io_context(e, format!("reading {}", path.display())))?;
            found.last_sequence = sequence;
            found.segments.push((sequence, path, bytes));
        }
        Ok(found)
    }

    /// Whether there is no log at all (a clean close, or a new store).
    pub(super) fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Parses the segments into the records that follow `revision` (the
    /// database's), checking that they continue it without a gap.
    pub(super) fn replay(&self, revision: Revision) -> Result<Replay<'_>> {
        let mut records = Vec::new();
        let mut torn_bytes = 0;
        let mut expected = None::<Revision>;
        let newest = self.segments.len().saturating_sub(1);
        for (n, (sequence, path, bytes)) in self.segments.iter().enumerate() {
            let corrupt = |what: String| {
                Error::Corrupt(format!(
                    "{} is damaged: {what}. It was left untouched: restore the data directory \
                     from a backup",
                    path.display()
                ))
            };
            let Some(mut rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
                return Err(corrupt("it does not start with the log header".into()));
            };
            let mut offset = MAGIC.len();
            while !rest.is_empty() {
                let (record, len) = match parse_record(rest, *sequence, path) {
                    Parsed::Record(record, len) => (record, len),
                    Parsed::End => break,
                    Parsed::Invalid(what) => {
                        if let Some(at) = valid_record_after(rest, *sequence, path) {
                            return Err(corrupt(format!(
                                "the record at byte {offset} {what}, yet a valid record follows \
                                 at byte {}",
                                offset + at
                            )));
                        }
                        if n != newest {
                            return Err(corrupt(format!(
                                "the record at byte {offset} {what}, and newer log segments \
                                 follow"
                            )));
                        }
                        // The append the crash interrupted: never acknowledged.
                        torn_bytes = rest.iter().rposition(|&b| b != 0).map_or(0, |end| end + 1);
                        break;
                    }
                };
                if let Some(expected) = expected
                    && record.first_revision != expected
                {
                    return Err(corrupt(format!(
                        "the record at byte {offset} starts at revision {} where {expected} \
                         was expected",
                        record.first_revision
                    )));
                }
                expected = Some(record.last_revision() + 1);
                // A record without entries (a compaction) is news if it was
                // written after the database's revision.
                if record.last_revision() > revision
                    || (record.entries.is_empty() && record.first_revision > revision)
                {
                    records.push(record);
                }
                rest = &rest[len..];
                offset += len;
            }
        }
        if let Some(first) = records.first()
            && first.first_revision > revision + 1
        {
            return Err(Error::Corrupt(format!(
                "the write-ahead log resumes at revision {} but the database ends at {revision}: \
                 the revisions between are missing. The data directory was left untouched",
                first.first_revision
            )));
        }
        Ok(Replay {
            records,
            torn_bytes,
        })
    }
}

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

/// Makes segment space ready under `tmp`: a segment file recycled after a
/// checkpoint (`recycled`, whose blocks are allocated and written, and whose
/// old records carry an older sequence, so they read as the end of the
/// log), or else a new file with `size` bytes allocated.
///
/// Why: a record written over allocated, initialised blocks is synced by
/// `fdatasync` alone; appending also changes file-system metadata, which
/// costs a journal commit per sync (~260 vs ~130 µs for a 64 KiB record
/// here, and far more while other processes write to the same file
/// system). Allocated but never written space (`fallocate`) is in between
/// (~180 µs); zero-filling it instead would cost as much writing as the log
/// itself, so space is written once and then recycled.
fn prepare(tmp: &Path, size: u64, recycled: Option<&Path>) -> io::Result<Prepared> {
    if let Some(old) = recycled {
        fs::rename(old, tmp)?;
    }
    let mut file = File::options()
        .create(true)
        .truncate(recycled.is_none())
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
        size: size.max(len),
    })
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
pub(super) struct Wal {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    sequence: u64,
    /// Where the next record goes.
    offset: u64,
    /// The file's prepared size; records beyond it extend the file.
    size: u64,
    /// Earlier segments whose records are not checkpointed yet.
    older: Vec<PathBuf>,
    /// Segment `sequence + 1`, being prepared.
    next: Option<std::thread::JoinHandle<io::Result<Prepared>>>,
    next_size: u64,
    /// An obsolete segment to prepare the next one from.
    recycle: Option<PathBuf>,
}

impl Wal {
    /// Starts a fresh segment after `found`'s newest and deletes the ones in
    /// `found` (and leftover temporary files): call it only once their
    /// records are in the durable database. The segment is not prepared, so
    /// that opening a store stays quick; the next one is prepared meanwhile.
    pub(super) fn create(dir: &Path, found: &Found) -> Result<Self> {
        let sequence = found.last_sequence + 1;
        let path = dir.join(segment_name(sequence));
        let tmp = path.with_extension("log.tmp");
        let created = (|| {
            let mut file = File::options()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&tmp)?;
            file.write_all(MAGIC)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            File::open(dir)?.sync_all()?;
            io::Result::Ok(file)
        })();
        let file = created.map_err(|e| io_context(e, format!("creating {}", path.display())))?;
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
            size: MAGIC.len() as u64,
            older: Vec::new(),
            next: None,
            next_size: SEGMENT_FIRST,
            recycle: None,
        };
        wal.prepare_next();
        Ok(wal)
    }

    /// Starts preparing segment `sequence + 1` on another thread.
    fn prepare_next(&mut self) {
        let tmp = self
            .dir
            .join(segment_name(self.sequence + 1))
            .with_extension("log.tmp");
        let size = self.next_size;
        self.next_size = (self.next_size * 2).min(SEGMENT_MAX);
        let recycled = self.recycle.take();
        self.next = std::thread::Builder::new()
            .name("setpoint-store-wal-prepare".into())
            .spawn(move || prepare(&tmp, size, recycled.as_deref()))
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
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(err) => {
                tracing::warn!(error = %err, "preparing the next log segment failed; appending instead");
                let sequence = self.sequence + 1;
                let tmp = self
                    .dir
                    .join(segment_name(sequence))
                    .with_extension("log.tmp");
                prepare(&tmp, 0, None)?
            }
        };
        let sequence = self.sequence + 1;
        let path = self.dir.join(segment_name(sequence));
        fs::rename(&prepared.tmp, &path)?;
        File::open(&self.dir)?.sync_all()?;
        let old = std::mem::replace(&mut self.path, path);
        self.older.push(old);
        self.file = prepared.file;
        self.sequence = sequence;
        self.offset = MAGIC.len() as u64;
        self.size = prepared.size.max(MAGIC.len() as u64);
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

    /// After a checkpoint: continues in a new segment and deletes the
    /// others, whose records are all in the durable database now.
    fn rotate(&mut self) -> Result<()> {
        let current = self.path.clone();
        self.switch(true).map_err(|e| {
            io_context(
                e,
                format!("starting a log segment after {}", current.display()),
            )
        })?;
        for old in std::mem::take(&mut self.older) {
            remove(&old)?;
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
        for old in std::mem::take(&mut self.older)
            .into_iter()
            .chain(self.recycle.take())
        {
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
    Rotate,
    Remove,
}

/// The log's own thread: appends and syncs records while the writer goes on
/// filling the batch's database transaction.
pub(super) struct Syncer {
    jobs: Sender<Job>,
    done: Receiver<(io::Result<()>, Option<Vec<u8>>)>,
    /// Log bytes since the last checkpoint.
    since_checkpoint: u64,
    path: PathBuf,
}

impl Syncer {
    /// Starts the thread that owns `wal`; it adds the time it spends
    /// appending and syncing to `log_nanos`.
    pub(super) fn spawn(
        wal: Wal,
        log_nanos: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<Self> {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel();
        let path = wal.path.clone();
        let since_checkpoint = wal.records_len();
        std::thread::Builder::new()
            .name("setpoint-store-wal".into())
            .spawn(move || {
                let mut wal = Some(wal);
                for job in job_rx {
                    let answer = match (job, wal.take()) {
                        (Job::Append(mut record), Some(mut log)) => {
                            let started = std::time::Instant::now();
                            let result = log.append(&mut record);
                            log_nanos.fetch_add(
                                started.elapsed().as_nanos() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            wal = Some(log);
                            (result, Some(record))
                        }
                        (Job::Rotate, Some(mut log)) => {
                            let result = log.rotate().map_err(into_io);
                            wal = Some(log);
                            (result, None)
                        }
                        (Job::Remove, Some(log)) => (log.remove().map_err(into_io), None),
                        (_, None) => (Err(io::Error::other("the log was removed")), None),
                    };
                    if done_tx.send(answer).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| io_context(e, "starting the store's log thread".into()))?;
        Ok(Self {
            jobs,
            done,
            since_checkpoint,
            path,
        })
    }

    /// Starts appending `record`; [`Syncer::wait`] gives the outcome.
    pub(super) fn submit(&mut self, record: Vec<u8>) {
        self.since_checkpoint += record.len() as u64;
        let _ = self.jobs.send(Job::Append(record));
    }

    /// Waits for the last job; returns the record's buffer for reuse.
    pub(super) fn wait(&self) -> (Result<()>, Option<Vec<u8>>) {
        match self.done.recv() {
            Ok((result, buffer)) => (
                result.map_err(|e| io_context(e, format!("writing {}", self.path.display()))),
                buffer,
            ),
            Err(_) => (
                Err(Error::Unavailable(format!(
                    "{}: the log thread stopped",
                    self.path.display()
                ))),
                None,
            ),
        }
    }

    /// Whether enough log has accumulated for a checkpoint.
    pub(super) fn checkpoint_due(&self) -> bool {
        self.since_checkpoint >= CHECKPOINT_BYTES
    }

    /// Whether any record was appended since the last checkpoint.
    pub(super) fn has_records(&self) -> bool {
        self.since_checkpoint > 0
    }

    /// After a durable checkpoint: starts a new segment, deletes the old.
    pub(super) fn checkpointed(&mut self) -> Result<()> {
        self.since_checkpoint = 0;
        let _ = self.jobs.send(Job::Rotate);
        self.wait().0
    }

    /// After the final checkpoint of a clean close: deletes the log.
    pub(super) fn remove(&mut self) -> Result<()> {
        self.since_checkpoint = 0;
        let _ = self.jobs.send(Job::Remove);
        self.wait().0
    }
}

fn into_io(err: Error) -> io::Error {
    match err {
        Error::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(first: Revision, keys: &[&str], compacted: Revision) -> Vec<u8> {
        let mut builder = RecordBuilder::default();
        builder.start(first);
        for (i, key) in keys.iter().enumerate() {
            let value = key.as_bytes();
            builder.push(first + i as Revision, first, key, Some(value));
        }
        builder.finish(compacted)
    }

    fn segment(dir: &Path, sequence: u64, records: &[Vec<u8>]) -> PathBuf {
        let path = dir.join(segment_name(sequence));
        let mut bytes = MAGIC.to_vec();
        for r in records {
            let mut r = r.clone();
            seal(&mut r, sequence);
            bytes.extend_from_slice(&r);
        }
        fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn records_round_trip_and_skip_what_the_database_has() {
        let dir = tempfile::tempdir().unwrap();
        segment(dir.path(), 1, &[record(1, &["/a", "/b"], 0)]);
        segment(dir.path(), 2, &[record(3, &["/c"], 2), record(4, &[], 2)]);
        let found = Found::read(dir.path()).unwrap();
        let replay = found.replay(2).unwrap();
        assert_eq!(replay.torn_bytes, 0);
        let firsts: Vec<_> = replay.records.iter().map(|r| r.first_revision).collect();
        assert_eq!(
            firsts,
            [3, 4],
            "records at or below the database's revision are skipped, not a later compaction"
        );
        let record = &replay.records[0];
        assert_eq!((record.compacted, record.entries.len()), (2, 1));
        assert_eq!(record.entries[0].key, "/c");
        assert_eq!(record.entries[0].value, Some(b"/c".as_slice()));
    }

    #[test]
    fn a_torn_end_of_the_newest_segment_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let whole = record(1, &["/a"], 0);
        let mut torn = record(2, &["/b"], 0);
        seal(&mut torn, 7);
        let path = segment(dir.path(), 7, &[whole, torn.clone()]);
        let full = fs::read(&path).unwrap();
        for cut in 1..torn.len() {
            fs::write(&path, &full[..full.len() - cut]).unwrap();
            let found = Found::read(dir.path()).unwrap();
            let replay = found.replay(0).unwrap();
            assert_eq!(replay.records.len(), 1, "cut {cut}");
            // Up to its last non-zero byte.
            let kept = &torn[..torn.len() - cut];
            let expected = kept.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            assert_eq!(replay.torn_bytes, expected, "cut {cut}");
        }
    }

    #[test]
    fn damage_before_the_end_is_refused() {
        let refused = |dir: &Path| match Found::read(dir).unwrap().replay(0) {
            Err(Error::Corrupt(msg)) => msg,
            other => panic!("expected Corrupt, got {other:?}"),
        };
        // The last record of an older segment.
        let dir = tempfile::tempdir().unwrap();
        let path = segment(dir.path(), 1, &[record(1, &["/a"], 0)]);
        segment(dir.path(), 2, &[record(2, &["/b"], 0)]);
        let mut bytes = fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(refused(dir.path()).contains("newer log segments follow"));

        // The payload, then the header, of a record followed by another.
        let first = record(1, &["/a"], 0);
        for (at, expected) in [
            (
                MAGIC.len() + first.len() - 1,
                "fails its checksum, yet a valid record follows",
            ),
            (
                MAGIC.len() + 1,
                "damaged header, yet a valid record follows",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = segment(dir.path(), 1, &[first.clone(), record(2, &["/b"], 0)]);
            let mut bytes = fs::read(&path).unwrap();
            bytes[at] ^= 0x10;
            fs::write(&path, &bytes).unwrap();
            let msg = refused(dir.path());
            assert!(msg.contains(expected), "{msg}");
        }
    }

    #[test]
    fn zeros_after_the_last_record_are_a_torn_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = segment(dir.path(), 1, &[record(1, &["/a"], 0)]);
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0; 4096]);
        fs::write(&path, &bytes).unwrap();
        let found = Found::read(dir.path()).unwrap();
        let replay = found.replay(0).unwrap();
        assert_eq!((replay.records.len(), replay.torn_bytes), (1, 0));

        // A record torn by the crash in prepared space: its first sector
        // written, the rest still zeros.
        let mut torn = record(2, &["/b"], 0);
        seal(&mut torn, 1);
        let whole = torn.len();
        torn.truncate(whole / 2);
        let start = fs::read(&path).unwrap().len() - 4096;
        let mut bytes = fs::read(&path).unwrap();
        bytes[start..start + torn.len()].copy_from_slice(&torn);
        fs::write(&path, &bytes).unwrap();
        let found = Found::read(dir.path()).unwrap();
        let replay = found.replay(0).unwrap();
        let nonzero = torn.iter().rposition(|&b| b != 0).unwrap() + 1;
        assert_eq!((replay.records.len(), replay.torn_bytes), (1, nonzero));
    }

    #[test]
    fn records_left_from_a_recycled_segment_end_the_log() {
        let dir = tempfile::tempdir().unwrap();
        // Segment 5's file, recycled as segment 9: new records over the
        // start of the old ones.
        let old = segment(
            dir.path(),
            5,
            &[
                record(1, &["/old-a", "/old-b"], 0),
                record(3, &["/old-c"], 0),
            ],
        );
        let mut bytes = fs::read(&old).unwrap();
        fs::remove_file(&old).unwrap();
        let mut new = record(10, &["/n"], 0);
        seal(&mut new, 9);
        bytes[MAGIC.len()..MAGIC.len() + new.len()].copy_from_slice(&new);
        fs::write(dir.path().join(segment_name(9)), &bytes).unwrap();
        let found = Found::read(dir.path()).unwrap();
        let replay = found.replay(9).unwrap();
        assert_eq!(replay.records.len(), 1);
        assert_eq!(replay.records[0].entries[0].key, "/n");
        // What follows is the rest of an old record, then old records: not
        // part of this log, whatever it looks like.
        assert!(replay.torn_bytes > 0);
    }

    #[test]
    fn a_gap_in_revisions_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        segment(
            dir.path(),
            1,
            &[record(1, &["/a"], 0), record(3, &["/c"], 0)],
        );
        let found = Found::read(dir.path()).unwrap();
        assert!(matches!(found.replay(0), Err(Error::Corrupt(m)) if m.contains("was expected")));
        let dir = tempfile::tempdir().unwrap();
        segment(dir.path(), 1, &[record(5, &["/a"], 0)]);
        let found = Found::read(dir.path()).unwrap();
        assert!(matches!(found.replay(2), Err(Error::Corrupt(m)) if m.contains("missing")));
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(segment_name(1)), b"not a log").unwrap();
        let found = Found::read(dir.path()).unwrap();
        assert!(matches!(found.replay(0), Err(Error::Corrupt(m)) if m.contains("header")));
    }

    #[test]
    fn segments_rotate_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        segment(dir.path(), 3, &[record(1, &["/a"], 0)]);
        let found = Found::read(dir.path()).unwrap();
        let wal = Wal::create(dir.path(), &found).unwrap();
        assert_eq!(wal.sequence, 4);
        let mut syncer = Syncer::spawn(wal, Default::default()).unwrap();
        // Segments (not the temporary file of the one being prepared).
        let segments = |dir: &Path| {
            let mut names: Vec<_> = fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|name| segment_sequence(name).is_some())
                .collect();
            names.sort();
            names
        };
        assert_eq!(segments(dir.path()), [segment_name(4)], "3 was replaced");
        for revision in 2..40 {
            syncer.submit(record(revision, &["/b"], 0));
            assert!(syncer.wait().0.is_ok());
        }
        assert!(syncer.has_records());
        let found = Found::read(dir.path()).unwrap();
        assert_eq!(found.replay(1).unwrap().records.len(), 38);
        let before = segments(dir.path());
        syncer.checkpointed().unwrap();
        let after = segments(dir.path());
        assert_eq!(after.len(), 1, "{after:?}");
        assert!(
            after[0] > *before.last().unwrap(),
            "{before:?} then {after:?}"
        );
        let found = Found::read(dir.path()).unwrap();
        assert!(found.replay(44).unwrap().records.is_empty());
        syncer.remove().unwrap();
        assert!(
            fs::read_dir(dir.path()).unwrap().next().is_none(),
            "no log and no prepared file is left"
        );
    }
}
