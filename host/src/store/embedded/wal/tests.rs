//! Tests of the log: record format, torn and damaged ends, segments that
//! are cut short, missing or out of order.

use std::fs;
use std::path::PathBuf;

use super::*;
use crate::store::Error;

fn record(first: Revision, keys: &[&str], compacted: Revision) -> Vec<u8> {
    let mut builder = RecordBuilder::default();
    builder.start(first);
    for key in keys {
        builder.push(first, key, Some(key.as_bytes()));
    }
    builder.finish(compacted)
}

/// The bytes of segment `sequence` as the log writes it: its header, the
/// records, a next record if `next`, and zeros up to its size (the records'
/// length rounded up to 4 KiB, plus 4 KiB).
fn segment_bytes(sequence: u64, records: &[Vec<u8>], next: bool) -> Vec<u8> {
    let mut body = Vec::new();
    for r in records {
        let mut r = r.clone();
        seal(&mut r, sequence);
        body.extend_from_slice(&r);
    }
    if next {
        body.extend_from_slice(&next_record(sequence, sequence + 1));
    }
    let size = (SEGMENT_HEADER + body.len()).div_ceil(4096) * 4096 + 4096;
    let mut bytes = segment_header(size as u64).to_vec();
    bytes.extend_from_slice(&body);
    bytes.resize(size, 0);
    bytes
}

fn segment(dir: &Path, sequence: u64, records: &[Vec<u8>], next: bool) -> PathBuf {
    let path = dir.join(segment_name(sequence));
    fs::write(&path, segment_bytes(sequence, records, next)).unwrap();
    path
}

/// Where the used part of a segment written by [`segment`] ends.
fn used(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).unwrap() + 1
}

fn refused(dir: &Path, revision: Revision, log_segment: Option<u64>) -> String {
    match Found::read(dir).unwrap().replay(revision, log_segment) {
        Err(Error::Corrupt(msg)) => msg,
        Err(other) => panic!("expected Corrupt, got {other:?}"),
        Ok(replay) => panic!("expected Corrupt, got {} records", replay.records.len()),
    }
}

#[test]
fn records_round_trip_and_skip_what_the_database_has() {
    let dir = tempfile::tempdir().unwrap();
    segment(dir.path(), 1, &[record(1, &["/a", "/b"], 0)], true);
    segment(
        dir.path(),
        2,
        &[record(3, &["/c"], 2), record(4, &[], 2)],
        false,
    );
    let found = Found::read(dir.path()).unwrap();
    let replay = found.replay(2, Some(1)).unwrap();
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
fn segments_before_the_one_the_database_names_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    // Left from before the checkpoint (its deletion was cut short), even
    // damaged: the database holds its writes.
    fs::write(dir.path().join(segment_name(1)), b"SPWAL\x00\x00\x02 junk").unwrap();
    segment(dir.path(), 2, &[record(2, &["/b"], 0)], false);
    let found = Found::read(dir.path()).unwrap();
    let replay = found.replay(1, Some(2)).unwrap();
    assert_eq!(replay.records.len(), 1);
}

#[test]
fn a_torn_end_of_the_newest_segment_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let whole = record(1, &["/a"], 0);
    let mut torn = record(2, &["/b"], 0);
    seal(&mut torn, 7);
    let path = segment(dir.path(), 7, std::slice::from_ref(&whole), false);
    let clean = fs::read(&path).unwrap();
    let at = used(&clean);
    // A crash persists any prefix of the append (in allocated space: the
    // file keeps its size).
    for cut in 1..torn.len() {
        let mut bytes = clean.clone();
        bytes[at..at + cut].copy_from_slice(&torn[..cut]);
        fs::write(&path, &bytes).unwrap();
        let found = Found::read(dir.path()).unwrap();
        let replay = found.replay(0, Some(7)).unwrap();
        assert_eq!(replay.records.len(), 1, "cut {cut}");
        let kept = &torn[..cut];
        let expected = kept.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        assert_eq!(replay.torn_bytes, expected, "cut {cut}");
    }
}

#[test]
fn a_segment_cut_short_is_refused_naming_it_and_the_last_whole_revision() {
    let dir = tempfile::tempdir().unwrap();
    let path = segment(
        dir.path(),
        3,
        &[
            record(1, &["/a"], 0),
            record(2, &["/b"], 0),
            record(3, &["/c"], 0),
        ],
        false,
    );
    let full = fs::read(&path).unwrap();
    let end = used(&full);
    for cut in [end / 2, end - 1, end, end + 10, full.len() - 1] {
        fs::write(&path, &full[..cut]).unwrap();
        let msg = refused(dir.path(), 0, Some(3));
        assert!(msg.contains(&segment_name(3)), "{msg}");
        assert!(msg.contains("cut short"), "{msg}");
        assert!(msg.contains(&format!("it is {cut} bytes long")), "{msg}");
        assert!(msg.contains("lost"), "{msg}");
    }
    fs::write(&path, &full[..end - 1]).unwrap();
    let msg = refused(dir.path(), 0, Some(3));
    assert!(
        msg.contains("the last whole record before the cut ends at revision 2"),
        "{msg}"
    );
}

#[test]
fn a_missing_segment_is_refused_naming_it_and_the_writes_lost() {
    let dir = tempfile::tempdir().unwrap();
    let one = segment(dir.path(), 1, &[record(1, &["/a"], 0)], true);
    let two = segment(dir.path(), 2, &[record(2, &["/b", "/c"], 0)], true);
    let three = segment(dir.path(), 3, &[record(4, &["/d"], 0)], false);
    assert_eq!(
        Found::read(dir.path())
            .unwrap()
            .replay(0, Some(1))
            .unwrap()
            .records
            .len(),
        3
    );

    // The one the database names.
    fs::remove_file(&one).unwrap();
    let msg = refused(dir.path(), 0, Some(1));
    assert!(
        msg.contains(&format!("{} is missing", segment_name(1))),
        "{msg}"
    );
    assert!(
        msg.contains("the writes of revisions 1 to 1 are lost"),
        "{msg}"
    );
    segment(dir.path(), 1, &[record(1, &["/a"], 0)], true);

    // One in the middle.
    fs::remove_file(&two).unwrap();
    let msg = refused(dir.path(), 0, Some(1));
    assert!(
        msg.contains(&format!("{} is missing", segment_name(2))),
        "{msg}"
    );
    assert!(
        msg.contains("the writes of revisions 2 to 3 are lost"),
        "{msg}"
    );
    segment(dir.path(), 2, &[record(2, &["/b", "/c"], 0)], true);

    // The newest: the one before names it.
    fs::remove_file(&three).unwrap();
    let msg = refused(dir.path(), 0, Some(1));
    assert!(
        msg.contains(&format!("{} is missing", segment_name(3))),
        "{msg}"
    );
    assert!(
        msg.contains("every write acknowledged after revision 3 is lost"),
        "{msg}"
    );

    // All of them.
    for sequence in 1..=2 {
        fs::remove_file(dir.path().join(segment_name(sequence))).unwrap();
    }
    let msg = refused(dir.path(), 7, Some(1));
    assert!(
        msg.contains(&format!("{} is missing", segment_name(1))),
        "{msg}"
    );
    assert!(
        msg.contains("every write acknowledged after revision 7 is lost"),
        "{msg}"
    );
    // A database closed cleanly needs none.
    assert!(
        Found::read(dir.path())
            .unwrap()
            .replay(7, Some(0))
            .unwrap()
            .records
            .is_empty()
    );
}

#[test]
fn a_segment_made_before_a_crash_may_follow_one_that_does_not_name_it() {
    // The log moves on by naming the new file first and writing the next
    // record after; a crash between the two, or at open before the first
    // record, leaves an empty newest segment.
    let dir = tempfile::tempdir().unwrap();
    segment(dir.path(), 4, &[record(1, &["/a"], 0)], false);
    let five = segment(dir.path(), 5, &[], false);
    let found = Found::read(dir.path()).unwrap();
    assert_eq!(found.replay(0, Some(4)).unwrap().records.len(), 1);

    // With writes in it, the segment before lost its end.
    segment(dir.path(), 5, &[record(2, &["/b"], 0)], false);
    let msg = refused(dir.path(), 0, Some(4));
    assert!(msg.contains(&segment_name(4)), "{msg}");
    assert!(msg.contains("without naming the segment after it"), "{msg}");
    fs::remove_file(five).unwrap();
}

#[test]
fn a_database_older_than_a_checkpoint_the_log_records_is_named() {
    // The log says a checkpoint made the database hold revision 2; a
    // database at 1 lost its latest commits, whatever the log holds.
    let dir = tempfile::tempdir().unwrap();
    segment(
        dir.path(),
        2,
        &[checkpoint_record(2, 2), record(3, &["/c"], 0)],
        false,
    );
    let found = Found::read(dir.path()).unwrap();
    assert_eq!(found.replay(2, Some(2)).unwrap().records.len(), 1);
    let msg = refused(dir.path(), 1, Some(1));
    assert!(
        msg.contains("store.redb is older than its write-ahead log"),
        "{msg}"
    );
    assert!(msg.contains("up to revision 2"), "{msg}");
}

#[test]
fn damage_before_the_end_is_refused() {
    // The last record of an older segment, before its next record.
    let dir = tempfile::tempdir().unwrap();
    let path = segment(dir.path(), 1, &[record(1, &["/a"], 0)], true);
    segment(dir.path(), 2, &[record(2, &["/b"], 0)], false);
    let mut bytes = fs::read(&path).unwrap();
    let end = used(&bytes);
    bytes[end - NEXT_RECORD - 1] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(refused(dir.path(), 0, Some(1)).contains("yet a valid record follows"));

    // Its next record.
    let dir = tempfile::tempdir().unwrap();
    let path = segment(dir.path(), 1, &[record(1, &["/a"], 0)], true);
    segment(dir.path(), 2, &[record(2, &["/b"], 0)], false);
    let mut bytes = fs::read(&path).unwrap();
    bytes[end - 1] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(refused(dir.path(), 0, Some(1)).contains("newer log segments follow"));

    // The payload, then the header, of a record followed by another.
    let first = record(1, &["/a"], 0);
    for (at, expected) in [
        (
            SEGMENT_HEADER + first.len() - 1,
            "fails its checksum, yet a valid record follows",
        ),
        (
            SEGMENT_HEADER + 1,
            "damaged header, yet a valid record follows",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = segment(
            dir.path(),
            1,
            &[first.clone(), record(2, &["/b"], 0)],
            false,
        );
        let mut bytes = fs::read(&path).unwrap();
        bytes[at] ^= 0x10;
        fs::write(&path, &bytes).unwrap();
        let msg = refused(dir.path(), 0, Some(1));
        assert!(msg.contains(expected), "{msg}");
    }
}

#[test]
fn zeros_after_the_last_record_end_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = segment(dir.path(), 1, &[record(1, &["/a"], 0)], false);
    let found = Found::read(dir.path()).unwrap();
    let replay = found.replay(0, Some(1)).unwrap();
    assert_eq!((replay.records.len(), replay.torn_bytes), (1, 0));

    // A record torn by the crash: its first sector written, the rest still
    // zeros.
    let mut torn = record(2, &["/b"], 0);
    seal(&mut torn, 1);
    let whole = torn.len();
    torn.truncate(whole / 2);
    let mut bytes = fs::read(&path).unwrap();
    let start = used(&bytes);
    bytes[start..start + torn.len()].copy_from_slice(&torn);
    fs::write(&path, &bytes).unwrap();
    let found = Found::read(dir.path()).unwrap();
    let replay = found.replay(0, Some(1)).unwrap();
    let nonzero = torn.iter().rposition(|&b| b != 0).unwrap() + 1;
    assert_eq!((replay.records.len(), replay.torn_bytes), (1, nonzero));
}

#[test]
fn records_left_from_a_recycled_segment_end_the_log() {
    let dir = tempfile::tempdir().unwrap();
    // Segment 5's file, recycled as segment 9: new records over the
    // start of the old ones.
    let mut bytes = segment_bytes(
        5,
        &[
            record(1, &["/old-a", "/old-b"], 0),
            record(3, &["/old-c"], 0),
        ],
        false,
    );
    let mut new = record(10, &["/n"], 0);
    seal(&mut new, 9);
    bytes[SEGMENT_HEADER..SEGMENT_HEADER + new.len()].copy_from_slice(&new);
    fs::write(dir.path().join(segment_name(9)), &bytes).unwrap();
    let found = Found::read(dir.path()).unwrap();
    let replay = found.replay(9, Some(9)).unwrap();
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
        false,
    );
    let msg = refused(dir.path(), 0, Some(1));
    assert!(msg.contains("was expected"), "{msg}");
    assert!(
        msg.contains("the writes of revisions 2 to 2 are lost"),
        "{msg}"
    );
    let dir = tempfile::tempdir().unwrap();
    segment(dir.path(), 1, &[record(5, &["/a"], 0)], false);
    let msg = refused(dir.path(), 2, Some(1));
    assert!(
        msg.contains("the writes of revisions 3 to 4 are lost"),
        "{msg}"
    );
}

#[test]
fn a_foreign_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(segment_name(1)), b"not a log").unwrap();
    assert!(refused(dir.path(), 0, Some(1)).contains("header"));
    fs::write(
        dir.path().join(segment_name(1)),
        b"not a log, but as long as a header",
    )
    .unwrap();
    assert!(refused(dir.path(), 0, Some(1)).contains("does not start with the log header"));
}

#[test]
fn segments_of_older_builds_are_read() {
    // Format 3: the old magic, records right after it, no size, no next
    // records; the database does not name a segment.
    let dir = tempfile::tempdir().unwrap();
    for (sequence, r) in [(1, record(1, &["/a"], 0)), (2, record(2, &["/b"], 0))] {
        let mut bytes = MAGIC_V1.to_vec();
        let mut r = r;
        seal(&mut r, sequence);
        bytes.extend_from_slice(&r);
        fs::write(dir.path().join(segment_name(sequence)), bytes).unwrap();
    }
    let found = Found::read(dir.path()).unwrap();
    assert_eq!(found.replay(0, None).unwrap().records.len(), 2);
}

/// The segments in `dir` (not the temporary file of the one being
/// prepared).
fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| segment_sequence(name).is_some())
        .collect();
    names.sort();
    names
}

#[test]
fn segments_rotate_name_their_successor_and_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    segment(dir.path(), 3, &[record(1, &["/a"], 0)], false);
    // Left by the previous run, preparing its next segment: the name the
    // new log prepares its next one under.
    let leftover = dir.path().join(segment_name(5)).with_extension("log.tmp");
    fs::write(&leftover, b"half made").unwrap();
    let found = Found::read(dir.path()).unwrap();
    let wal = Wal::create(Disk, dir.path(), &found).unwrap();
    assert_eq!(wal.sequence, 4);
    wal.forget(&found).unwrap();
    let mut syncer = Syncer::spawn(wal, Default::default(), CHECKPOINT_BYTES).unwrap();
    assert_eq!(segments(dir.path()), [segment_name(4)], "3 was replaced");
    // 1 MiB segments then 2 MiB: these records fill the first.
    let value = "v".repeat(64 << 10);
    for revision in 2..40 {
        syncer.submit(record(revision, &[&value], 0));
        assert!(syncer.wait().0.is_ok());
    }
    assert!(syncer.has_records());
    assert!(
        segments(dir.path()).len() >= 2,
        "{:?}",
        segments(dir.path())
    );
    let found = Found::read(dir.path()).unwrap();
    assert_eq!(found.replay(1, Some(4)).unwrap().records.len(), 38);
    // Every segment is as long as it was made; records stay inside.
    for name in segments(dir.path()) {
        let bytes = fs::read(dir.path().join(&name)).unwrap();
        let (size, _) = parse_segment_header(&bytes).unwrap();
        assert_eq!(Some(bytes.len() as u64), size, "{name}");
    }
    let before = segments(dir.path());
    let started = syncer.start_checkpoint().unwrap();
    assert!(!syncer.has_records());
    // Records after the start of a checkpoint go to the new segment, which
    // stays when the checkpoint ends.
    syncer.submit(record(40, &["/c"], 0));
    assert!(syncer.wait().0.is_ok());
    assert_eq!(segments(dir.path()).len(), before.len() + 1);
    syncer.checkpointed(started, 39).unwrap();
    let after = segments(dir.path());
    assert_eq!(after, [segment_name(started)]);
    assert!(
        after[0] > *before.last().unwrap(),
        "{before:?} then {after:?}"
    );
    let found = Found::read(dir.path()).unwrap();
    let kept = found.replay(39, Some(started)).unwrap().records;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].first_revision, 40);
    assert!(found.replay(44, Some(started)).unwrap().records.is_empty());
    syncer.remove().unwrap();
    assert!(
        fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no log and no prepared file is left"
    );
}

#[test]
fn a_record_larger_than_a_segment_gets_a_segment_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::create(Disk, dir.path(), &Found::default()).unwrap();
    let mut syncer = Syncer::spawn(wal, Default::default(), CHECKPOINT_BYTES).unwrap();
    let big = "b".repeat(3 << 20);
    syncer.submit(record(1, &["/small"], 0));
    assert!(syncer.wait().0.is_ok());
    syncer.submit(record(2, &[&big], 0));
    assert!(syncer.wait().0.is_ok());
    let found = Found::read(dir.path()).unwrap();
    let replay = found.replay(0, Some(1)).unwrap();
    assert_eq!(replay.records.len(), 2);
    assert_eq!(replay.records[1].entries[0].key.len(), big.len());
    syncer.remove().unwrap();
}

#[test]
fn a_last_record_written_whole_then_changed_is_damage_not_a_torn_append() {
    // Two acknowledged writes in the last record, every byte of it written;
    // one byte changed afterwards, anywhere in its payload.
    let last = record(2, &["/b-acknowledged", "/c-acknowledged"], 0);
    for at in [RECORD_HEADER + 3, last.len() / 2, last.len() - 2] {
        let dir = tempfile::tempdir().unwrap();
        let path = segment(dir.path(), 1, &[record(1, &["/a"], 0), last.clone()], false);
        let mut bytes = fs::read(&path).unwrap();
        let start = used(&bytes) - last.len();
        bytes[start + at] ^= 0x10;
        fs::write(&path, &bytes).unwrap();
        let msg = refused(dir.path(), 0, Some(1));
        assert!(
            msg.contains("written whole") && msg.contains("after revision 1 is lost"),
            "byte {at}: {msg}"
        );
    }
}
