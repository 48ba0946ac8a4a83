//! Tests of the log: record format, torn and damaged ends, segments.

use super::*;

fn record(first: Revision, keys: &[&str], compacted: Revision) -> Vec<u8> {
    let mut builder = RecordBuilder::default();
    builder.start(first);
    for key in keys {
        builder.push(first, key, Some(key.as_bytes()));
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
    let mut syncer = Syncer::spawn(wal, Default::default(), CHECKPOINT_BYTES).unwrap();
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
    let started = syncer.start_checkpoint().unwrap();
    assert!(!syncer.has_records());
    // Records after the start of a checkpoint go to the new segment, which
    // stays when the checkpoint ends.
    syncer.submit(record(40, &["/c"], 0));
    assert!(syncer.wait().0.is_ok());
    assert_eq!(segments(dir.path()).len(), before.len() + 1);
    syncer.checkpointed(started).unwrap();
    let after = segments(dir.path());
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(
        after[0] > *before.last().unwrap(),
        "{before:?} then {after:?}"
    );
    let found = Found::read(dir.path()).unwrap();
    let kept = found.replay(39).unwrap().records;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].first_revision, 40);
    assert!(found.replay(44).unwrap().records.is_empty());
    syncer.remove().unwrap();
    assert!(
        fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no log and no prepared file is left"
    );
}
