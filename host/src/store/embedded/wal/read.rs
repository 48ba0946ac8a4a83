//! Reading the log at open: every segment of the data directory, checked
//! against the database (which names the segment its log starts in) before
//! anything is written, and the records the database lacks.
//!
//! Every way the log can be found damaged is refused with a message that
//! names the file and the writes lost; only an append torn by a crash (the
//! invalid end of the newest segment) is dropped, since it was never
//! acknowledged.

use std::fs;
use std::path::{Path, PathBuf};

use super::{
    CHECKPOINT_RECORD, NEXT_RECORD, Parsed, Record, parse_record, parse_segment_header,
    segment_name, segment_sequence, valid_record_after,
};
use crate::store::embedded::open::io_context;
use crate::store::embedded::schema::DB_FILE;
use crate::store::{Error, Result, Revision};

/// One segment file found at open, with its contents.
#[derive(Debug)]
struct Segment {
    sequence: u64,
    path: PathBuf,
    bytes: Vec<u8>,
}

/// The log found in a data directory at open.
#[derive(Debug, Default)]
pub(in crate::store::embedded) struct Found {
    dir: PathBuf,
    /// Segment files, oldest first.
    segments: Vec<Segment>,
    /// Temporary files of segments being prepared or created: never used.
    leftovers: Vec<PathBuf>,
}

/// What reading the log found: the records to apply, in order.
#[derive(Debug)]
pub(in crate::store::embedded) struct Replay<'a> {
    pub records: Vec<Record<'a>>,
    /// Bytes after the newest segment's last record that are neither zeros
    /// nor a whole record: an append the crash interrupted, or what is left
    /// from the file's earlier use as an older segment.
    pub torn_bytes: usize,
}

/// One segment, parsed.
struct Scanned<'a> {
    segment: &'a Segment,
    records: Vec<Record<'a>>,
    /// The segment this one names as its successor, if it ends in a next
    /// record.
    next: Option<u64>,
    /// Where its records end (where a torn append starts).
    end: usize,
    /// The first invalid record after the records: its offset and why,
    /// when no valid record follows it.
    invalid: Option<(usize, &'static str)>,
    /// Whether the segment says how long it was made (format 4).
    sized: bool,
    /// The highest revision a checkpoint record in it says the database
    /// durably holds.
    checkpointed: Option<Revision>,
}

impl Scanned<'_> {
    /// Whether the log went on in this segment: it holds a record or names
    /// a successor. Segments after the last such one are empty: made ready
    /// just before a crash.
    fn used(&self) -> bool {
        !self.records.is_empty() || self.next.is_some() || self.checkpointed.is_some()
    }

    fn last_revision(&self) -> Option<Revision> {
        self.records.last().map(Record::last_revision)
    }

    fn first_revision(&self) -> Option<Revision> {
        self.records.first().map(|r| r.first_revision)
    }
}

/// What is lost when the log breaks after revision `after`, and resumes
/// (in a later segment) at `resumes`, if it does.
fn lost(after: Revision, resumes: Option<Revision>) -> String {
    match resumes {
        Some(resumes) if resumes > after + 1 => format!(
            "the writes of revisions {} to {} are lost",
            after + 1,
            resumes - 1
        ),
        _ => format!("every write acknowledged after revision {after} is lost"),
    }
}

impl Found {
    /// Reads every segment of `dir` (without changing anything). Leftover
    /// temporary segments are ignored (and removed by `Wal::create`).
    pub(in crate::store::embedded) fn read(dir: &Path) -> Result<Self> {
        let mut numbered = Vec::new();
        let mut found = Found {
            dir: dir.to_owned(),
            ..Found::default()
        };
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
            found.segments.push(Segment {
                sequence,
                path,
                bytes,
            });
        }
        Ok(found)
    }

    /// Whether there is no log at all (a clean close, or a new store).
    pub(in crate::store::embedded) fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The highest segment sequence found (0 if none).
    pub(in crate::store::embedded) fn last_sequence(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.sequence)
    }

    /// The segments found, oldest first. Once their records are in the
    /// durable database they are deleted in this order, so that a crash
    /// part-way leaves the newest.
    pub(in crate::store::embedded) fn segment_files(&self) -> impl Iterator<Item = &Path> {
        self.segments.iter().map(|s| s.path.as_path())
    }

    /// Temporary files of segments that were being prepared: never used,
    /// and deleted before the log makes new ones.
    pub(in crate::store::embedded) fn leftover_files(&self) -> impl Iterator<Item = &Path> {
        self.leftovers.iter().map(PathBuf::as_path)
    }

    /// The path of segment `sequence` in this directory.
    fn path_of(&self, sequence: u64) -> PathBuf {
        self.dir.join(segment_name(sequence))
    }

    /// Parses the segments the database needs into the records that follow
    /// `revision` (the database's), checking that they continue it without
    /// a gap. `log_segment` is the first segment the database names as
    /// holding writes it may lack (`Some(0)`: none, it was closed cleanly;
    /// `None`: a database of an older format, which does not say).
    pub(in crate::store::embedded) fn replay(
        &self,
        revision: Revision,
        log_segment: Option<u64>,
    ) -> Result<Replay<'_>> {
        let start = log_segment.filter(|&s| s > 0);
        // Segments before the one the database names are left from before
        // its checkpoint (their deletion was cut short): never needed.
        let segments: Vec<&Segment> = self
            .segments
            .iter()
            .filter(|s| start.is_none_or(|start| s.sequence >= start))
            .collect();
        let parsed = segments
            .iter()
            .map(|segment| parse_segment(segment))
            .collect::<Result<Vec<_>>>()?;
        let resumes_from = |i: usize| parsed[i..].iter().find_map(Scanned::first_revision);
        // The log says the database was made durable further than it is:
        // the database lost its latest commits, whatever the log lacks.
        if let Some(durable) = parsed.iter().filter_map(|s| s.checkpointed).max()
            && durable > revision
        {
            return Err(Error::Corrupt(format!(
                "{} is older than its write-ahead log: the log records that it was made durable \
                 up to revision {durable}, but it holds only revision {revision}, so its latest \
                 commits were lost (it was damaged, or an older copy was put in its place). It \
                 was left untouched: restore the data directory from a backup",
                self.dir.join(DB_FILE).display(),
            )));
        }
        if let Some(start) = start
            && segments.first().map(|s| s.sequence) != Some(start)
        {
            return Err(Error::Corrupt(format!(
                "{} is missing: the database's last checkpoint (revision {revision}) is continued \
                 by the log in that file; {}. The data directory was left untouched: restore it \
                 from a backup",
                self.path_of(start).display(),
                lost(revision, resumes_from(0)),
            )));
        }
        let last_used = parsed.iter().rposition(Scanned::used).unwrap_or(0);
        let mut after = revision;
        for (i, segment) in parsed.iter().enumerate() {
            let path = segment.segment.path.display();
            let sequence = segment.segment.sequence;
            let corrupt = |what: String| {
                Error::Corrupt(format!(
                    "{path} is damaged: {what}. It was left untouched: restore the data \
                     directory from a backup"
                ))
            };
            if let Some(later) = parsed.get(i + 1) {
                let later = later.segment.sequence;
                if later != sequence + 1 {
                    let missing = if later == sequence + 2 {
                        format!("{} is missing", self.path_of(sequence + 1).display())
                    } else {
                        format!(
                            "{} to {} are missing",
                            self.path_of(sequence + 1).display(),
                            self.path_of(later - 1).display()
                        )
                    };
                    return Err(Error::Corrupt(format!(
                        "{missing} (the log goes from {path} to {}); {}. The data directory was \
                         left untouched: restore it from a backup",
                        self.path_of(later).display(),
                        lost(
                            segment.last_revision().unwrap_or(after),
                            resumes_from(i + 1)
                        ),
                    )));
                }
            }
            if let Some((offset, what)) = segment.invalid
                && i < last_used
            {
                return Err(corrupt(format!(
                    "the record at byte {offset} {what}, and newer log segments follow"
                )));
            }
            match segment.next {
                Some(next) if next != sequence + 1 => {
                    return Err(corrupt(format!(
                        "it names segment {next} as the next one, where {} was expected",
                        sequence + 1
                    )));
                }
                Some(next) if i == parsed.len() - 1 => {
                    return Err(Error::Corrupt(format!(
                        "{} is missing: {path} ends by naming it as the next log segment; {}. \
                         The data directory was left untouched: restore it from a backup",
                        self.path_of(next).display(),
                        lost(segment.last_revision().unwrap_or(after), None),
                    )));
                }
                None if segment.sized && i < last_used => {
                    return Err(corrupt(format!(
                        "it ends at byte {} without naming the segment after it, yet {} holds \
                         later writes: its end was cut off or overwritten; {}",
                        segment.end,
                        parsed[last_used].segment.path.display(),
                        lost(
                            segment.last_revision().unwrap_or(after),
                            resumes_from(i + 1)
                        ),
                    )));
                }
                _ => {}
            }
            if let Some(last) = segment.last_revision() {
                after = after.max(last);
            }
        }
        let mut records = Vec::new();
        let mut expected = None::<Revision>;
        for segment in &parsed {
            for record in &segment.records {
                if let Some(expected) = expected
                    && record.first_revision != expected
                {
                    return Err(Error::Corrupt(format!(
                        "{} is damaged: a record starts at revision {} where {expected} was \
                         expected; {}. It was left untouched: restore the data directory from a \
                         backup",
                        segment.segment.path.display(),
                        record.first_revision,
                        lost(expected - 1, Some(record.first_revision)),
                    )));
                }
                expected = Some(record.last_revision() + 1);
            }
        }
        let mut torn_bytes = 0;
        for segment in parsed {
            if let Some((offset, what)) = segment.invalid
                && super::written_whole(&segment.segment.bytes[offset..], segment.segment.sequence)
            {
                return Err(Error::Corrupt(format!(
                    "{} is damaged: its last record, at byte {offset}, {what} though it was                      written whole (a crash leaves part of a record unwritten): it changed                      after it was written; {}. It was left untouched: restore the data                      directory from a backup",
                    segment.segment.path.display(),
                    lost(expected.map_or(revision, |e| e - 1), None),
                )));
            }
            if let Some((offset, _)) = segment.invalid {
                let rest = &segment.segment.bytes[offset..];
                torn_bytes += rest.iter().rposition(|&b| b != 0).map_or(0, |end| end + 1);
            }
            // A record without entries (a compaction) is news if it was
            // written after the database's revision.
            records.extend(segment.records.into_iter().filter(|record| {
                record.last_revision() > revision
                    || (record.entries.is_empty() && record.first_revision > revision)
            }));
        }
        if let Some(first) = records.first()
            && first.first_revision > revision + 1
        {
            return Err(Error::Corrupt(format!(
                "the write-ahead log in {} resumes at revision {} but the database ends at \
                 revision {revision}: {}, and no log segment holding them is left. The data \
                 directory was left untouched: restore it from a backup",
                self.dir.display(),
                first.first_revision,
                lost(revision, Some(first.first_revision)),
            )));
        }
        Ok(Replay {
            records,
            torn_bytes,
        })
    }
}

/// Reads one segment's records, up to its next record, zeros, or the first
/// invalid record. An invalid record followed by a valid one, a segment
/// shorter than it was made, or a foreign file is refused here.
fn parse_segment(segment: &Segment) -> Result<Scanned<'_>> {
    let Segment {
        sequence,
        path,
        bytes,
    } = segment;
    let corrupt = |what: String| {
        Error::Corrupt(format!(
            "{} is damaged: {what}. It was left untouched: restore the data directory from a \
             backup",
            path.display()
        ))
    };
    let (size, start) = parse_segment_header(bytes).map_err(|what| corrupt(what.into()))?;
    let mut parsed = Scanned {
        segment,
        records: Vec::new(),
        next: None,
        end: start,
        invalid: None,
        sized: size.is_some(),
        checkpointed: None,
    };
    // Records never go past the size a segment was made with.
    let usable = size.map_or(bytes.len(), |size| {
        usize::try_from(size).unwrap_or(usize::MAX).min(bytes.len())
    });
    let mut rest = &bytes[start..usable];
    let mut offset = start;
    while !rest.is_empty() {
        match parse_record(rest, *sequence, path) {
            Parsed::Record(record, len) => {
                parsed.records.push(record);
                rest = &rest[len..];
                offset += len;
            }
            Parsed::Next(next) => {
                parsed.next = Some(next);
                offset += NEXT_RECORD;
                break;
            }
            Parsed::Checkpoint(revision) => {
                parsed.checkpointed = parsed.checkpointed.max(Some(revision));
                rest = &rest[CHECKPOINT_RECORD..];
                offset += CHECKPOINT_RECORD;
            }
            Parsed::End => break,
            Parsed::Invalid(what) => {
                if let Some(at) = valid_record_after(rest, *sequence, path) {
                    return Err(corrupt(format!(
                        "the record at byte {offset} {what}, yet a valid record follows at byte \
                         {}",
                        offset + at
                    )));
                }
                parsed.invalid = Some((offset, what));
                break;
            }
        }
    }
    parsed.end = offset;
    if let Some(size) = size
        && (bytes.len() as u64) < size
    {
        let whole = match parsed.records.last() {
            Some(record) => format!(
                "the last whole record before the cut ends at revision {}",
                record.last_revision()
            ),
            None => "no whole record is left before the cut".into(),
        };
        return Err(Error::Corrupt(format!(
            "{} was cut short: it is {} bytes long, but the log made it {size} bytes, and \
             whatever it logged after byte {} is lost ({whole}). It was left untouched: \
             restore the data directory from a backup",
            path.display(),
            bytes.len(),
            bytes.len(),
        )));
    }
    Ok(parsed)
}
