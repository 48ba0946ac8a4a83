//! The embedded store's write-ahead log: what makes a write durable before
//! it is acknowledged, so that the database itself can commit without an
//! fsync.
//!
//! Why: a durable redb commit writes every B-tree page a batch touched
//! (values, the index and the current table, spread over the file) and
//! waits for all of them, many pages per commit at 64 concurrent writers
//! (docs/benchmarks/store.md#with-the-write-ahead-log-before-the-applier). The log instead appends one record per batch (the
//! encoded entries, ~1 KiB per 1 KiB put) and syncs that one sequential
//! write; the database commits with `Durability::None` and is made durable
//! only at a *checkpoint* (every [`CHECKPOINT_BYTES`] of log, when idle, and
//! at close), where the pages rewritten by many batches are flushed once.
//! The sync runs on its own thread ([`Syncer`]); the database's B-tree
//! work runs on the applier's, after the batch is acknowledged.
//!
//! # Files
//!
//! `wal-<sequence, 16 hex digits>.log` in the data directory. A segment
//! starts with a header: [`MAGIC`] ‖ the segment's size (u64 LE) ‖ CRC-32
//! of those 16 bytes (u32 LE) ‖ 4 zero bytes. Its whole size is allocated
//! when it is made (`fallocate`), before it gets its name, and no record is
//! ever written past it, so a segment shorter than its header says was cut
//! short afterwards. Then records, each `payload length (u32 LE) ‖ segment
//! sequence (u64 LE) ‖ CRC-32 of the payload (u32 LE) ‖ CRC-32 of the 16
//! bytes before (u32 LE) ‖ payload`. A batch's payload is `first revision
//! (i64 LE) ‖ compaction point after the batch (i64 LE) ‖ entry count (u32
//! LE) ‖ entries`, each entry `length (u32 LE) ‖` an entry as the
//! `revisions` table stores it (`schema::encode`), for consecutive
//! revisions from the first. A segment the log has moved on from ends with
//! a *next* record, whose 8-byte payload is the next segment's sequence:
//! the log moves on by naming the new segment (made ready under a
//! temporary name, then renamed, durably) and only then writing the record
//! that names it, so a segment that names a successor that is not there
//! lost it. Once a checkpoint is durable, a *checkpoint* record (16-byte
//! payload: the revision the database now holds ‖ the segment it names) is
//! appended before the older segments are deleted, so that a database
//! found older than that (a damaged latest commit rolled back, an old copy
//! put in its place) is told from a damaged log. Segments made by builds
//! before format 4 start with the previous magic, have no size and no next
//! or checkpoint records, and are still read.
//!
//! The segment written after open is new; the next ones are made ready in
//! the background and taken when the current one is full. On a disk too
//! full for that first segment the store opens read-only with no segment
//! (the database, replayed, names none: `log_segment` 0) and makes it once
//! there is room, before the first record. When a checkpoint
//! starts the log moves to the next segment, and the checkpoint's durable
//! commit records that segment's sequence in the database (`log_segment` in
//! `meta`: the first segment whose writes the database may lack; 0 after a
//! clean close, when there is no log); once the checkpoint is durable the
//! older segments are deleted. Records carry their segment's sequence, so
//! that a file reused as a later segment would read its old records as the
//! end of the log; segments are not reused yet.
//!
//! # Recovery
//!
//! On open, records newer than the database's revision are applied again
//! (`commit::replay`), from the segment the database names on (`read.rs`).
//! Only the end of the newest segment may be incomplete (a record being
//! appended when the process died; it was never acknowledged) and is
//! ignored: an invalid record after which no valid record of the segment
//! starts anywhere (a crash may persist any subset of the sectors of the
//! record being appended, so nothing about the invalid record itself tells
//! torn from damaged; a valid record after it does). Zeros, and records of
//! an older sequence, end the log. Everything else is [`Error::Corrupt`],
//! naming the file and the writes lost, reported before anything is
//! written: the segment the database names missing, a gap in the
//! segments' sequence or in the revisions, a segment cut short, a segment
//! that names a successor that is not there (or holds writes after a
//! segment that names none), an invalid record followed by a valid one, a
//! bad record in an older segment, a foreign file. As with any log, damage
//! to exactly the last record cannot be told from a torn append and loses
//! that record's batch.

mod io;
mod read;
mod segment;
#[cfg(test)]
mod tests;

use std::path::Path;

#[cfg(test)]
pub(super) use self::io::LogFile;
pub(super) use self::io::{Disk, LogIo, is_no_space, reserve};
pub(super) use self::read::Found;
pub(super) use self::segment::{LogError, Syncer, Wal};
use super::schema::{Entry, encode, encoded_len};
use crate::store::Revision;

/// The first bytes of every segment: the format of what follows.
pub(super) const MAGIC: &[u8; 8] = b"SPWAL\x00\x00\x02";

/// The magic of segments written before format 4: no header after it.
const MAGIC_V1: &[u8; 8] = b"SPWAL\x00\x00\x01";

/// Bytes of a segment's header, before its first record.
const SEGMENT_HEADER: usize = 24;

/// Log bytes after which the writer checkpoints the database.
pub(super) const CHECKPOINT_BYTES: u64 = 32 << 20;

/// Bytes in front of a record's payload: length, the segment's sequence
/// number, CRC of the payload, CRC of those three (so that a damaged length
/// is told from a record cut short).
const RECORD_HEADER: usize = 20;

/// Bytes in front of a payload's entries.
const PAYLOAD_HEADER: usize = 20;

/// The payload of a next record: the next segment's sequence.
const NEXT_PAYLOAD: usize = 8;

/// The bytes of a next record, which every segment keeps room for.
const NEXT_RECORD: usize = RECORD_HEADER + NEXT_PAYLOAD;

/// The payload of a checkpoint record: the revision a durable checkpoint
/// made the database hold, and the log segment it named.
const CHECKPOINT_PAYLOAD: usize = 16;

/// The bytes of a checkpoint record.
const CHECKPOINT_RECORD: usize = RECORD_HEADER + CHECKPOINT_PAYLOAD;

/// The largest payload a record may claim (a batch is at most 512 writes of
/// objects far below this in total), so that a damaged length is caught
/// before it is believed.
const MAX_PAYLOAD: usize = 1 << 30;

/// The file name of segment `sequence`.
pub(super) fn segment_name(sequence: u64) -> String {
    format!("wal-{sequence:016x}.log")
}

/// The sequence number of a segment file name, if it is one.
fn segment_sequence(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The header of a segment of `size` bytes.
fn segment_header(size: u64) -> [u8; SEGMENT_HEADER] {
    let mut header = [0; SEGMENT_HEADER];
    header[..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&size.to_le_bytes());
    let crc = crc32fast::hash(&header[..16]);
    header[16..20].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Reads a segment's header: the size it was made with (`None` for a
/// segment of an older build, which has none) and where its records start.
fn parse_segment_header(bytes: &[u8]) -> Result<(Option<u64>, usize), &'static str> {
    if bytes.starts_with(MAGIC_V1) {
        return Ok((None, MAGIC_V1.len()));
    }
    let Some(header) = bytes.first_chunk::<SEGMENT_HEADER>() else {
        let start = &bytes[..bytes.len().min(MAGIC.len())];
        return Err(if MAGIC.starts_with(start) {
            "it was cut short inside its header, and everything it logged is lost"
        } else {
            "it is shorter than the log's header"
        });
    };
    if !header.starts_with(MAGIC) {
        return Err("it does not start with the log header");
    }
    let crc = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
    if crc32fast::hash(&header[..16]) != crc {
        return Err("its header is damaged");
    }
    let size = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    Ok((Some(size), SEGMENT_HEADER))
}

/// Builds one record: the batch's changes, in revision order.
#[derive(Debug, Default)]
pub(super) struct RecordBuilder {
    bytes: Vec<u8>,
    entries: u32,
}

impl RecordBuilder {
    /// Starts a record whose first entry gets revision `first`.
    pub(super) fn start(&mut self, first: Revision) {
        self.bytes.clear();
        self.bytes.resize(RECORD_HEADER + PAYLOAD_HEADER, 0);
        self.bytes[RECORD_HEADER..RECORD_HEADER + 8].copy_from_slice(&first.to_le_bytes());
        self.entries = 0;
    }

    /// Adds the entry of the next revision (the first one's plus the
    /// entries before): a put of `value` (created at `create_revision`), or a
    /// deletion when `value` is `None`.
    pub(super) fn push(&mut self, create_revision: Revision, key: &str, value: Option<&[u8]>) {
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
        let header = RECORD_HEADER + 8;
        self.bytes[header..header + 8].copy_from_slice(&compacted.to_le_bytes());
        self.bytes[header + 8..header + 12].copy_from_slice(&self.entries.to_le_bytes());
        checksum_payload(&mut self.bytes);
        std::mem::take(&mut self.bytes)
    }

    /// Gives back a buffer for the next record.
    pub(super) fn recycle(&mut self, mut buffer: Vec<u8>) {
        buffer.clear();
        self.bytes = buffer;
    }
}

/// Fills in a record's payload length and payload CRC.
fn checksum_payload(record: &mut [u8]) {
    let payload_len = record.len() - RECORD_HEADER;
    let crc = crc32fast::hash(&record[RECORD_HEADER..]);
    record[..4].copy_from_slice(
        &u32::try_from(payload_len)
            .expect("a batch is far below 4 GiB")
            .to_le_bytes(),
    );
    record[12..16].copy_from_slice(&crc.to_le_bytes());
    // The sequence and header CRC are set by `seal` when the log knows
    // which segment the record goes to.
}

/// The checkpoint record saying that the database durably holds every write
/// up to `revision` and names `log_segment`, ready to append.
fn checkpoint_record(revision: Revision, log_segment: u64) -> Vec<u8> {
    let mut record = vec![0; CHECKPOINT_RECORD];
    record[RECORD_HEADER..RECORD_HEADER + 8].copy_from_slice(&revision.to_le_bytes());
    record[RECORD_HEADER + 8..].copy_from_slice(&log_segment.to_le_bytes());
    checksum_payload(&mut record);
    record
}

/// The next record naming segment `next`, sealed for segment `sequence`.
fn next_record(sequence: u64, next: u64) -> [u8; NEXT_RECORD] {
    let mut record = [0; NEXT_RECORD];
    record[RECORD_HEADER..].copy_from_slice(&next.to_le_bytes());
    checksum_payload(&mut record);
    seal(&mut record, sequence);
    record
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
    /// A whole, valid next record: the segment continues in the one named.
    Next(u64),
    /// A whole, valid checkpoint record: the database was made to hold
    /// every write up to this revision, durably.
    Checkpoint(Revision),
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
        // Left from the file's use as an older segment (were segments
        // reused): the log ends here.
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
    if let Ok(next) = <[u8; NEXT_PAYLOAD]>::try_from(payload) {
        return Parsed::Next(u64::from_le_bytes(next));
    }
    if let Ok(checkpoint) = <[u8; CHECKPOINT_PAYLOAD]>::try_from(payload) {
        let revision = i64::from_le_bytes(checkpoint[..8].try_into().expect("8 bytes"));
        return Parsed::Checkpoint(revision);
    }
    match decode_payload(payload, file) {
        Some(record) => Parsed::Record(record, RECORD_HEADER + len),
        None => Parsed::Invalid("has a valid checksum but a wrong structure"),
    }
}

/// Whether the invalid record at the start of `rest` (of segment
/// `sequence`) was written whole and changed afterwards, rather than torn
/// by a crash. A crash leaves the sectors of the append it interrupted
/// unwritten, which read as the zeros the segment was made with: a torn
/// record ends in zeros (running on into the zeros after it) or holds a
/// run of them. A record whose header is sound, which fits the file, ends
/// in a byte that is not zero and holds no run of [`TORN_RUN`] zeros was
/// written whole: its failing checksum is damage, and the writes it held
/// were acknowledged. (Where this cannot tell, the record counts as torn.)
fn written_whole(rest: &[u8], sequence: u64) -> bool {
    let Some((header, tail)) = rest.split_first_chunk::<RECORD_HEADER>() else {
        return false;
    };
    let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
    if crc32fast::hash(&header[..16]) != word(16)
        || u64::from_le_bytes(header[4..12].try_into().expect("8 bytes")) != sequence
    {
        return false;
    }
    let len = word(0) as usize;
    if len > MAX_PAYLOAD || tail.len() < len || len == 0 {
        return false;
    }
    let record = &rest[..RECORD_HEADER + len];
    let mut run = 0;
    for &b in record {
        run = if b == 0 { run + 1 } else { 0 };
        if run >= TORN_RUN {
            return false;
        }
    }
    record.last() != Some(&0)
}

/// The shortest run of zeros taken for sectors a crash left unwritten.
const TORN_RUN: usize = 32;

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
                Parsed::Record(..) | Parsed::Next(_) | Parsed::Checkpoint(_)
            )
    })
}
