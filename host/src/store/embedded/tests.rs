//! Tests of the embedded backend: the shared conformance suite, plus what
//! only a durable store has (reopening, damaged files, the directory lock,
//! surviving `kill -9`).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::ReadableTableMetadata;

use super::EmbeddedBackend;
use super::schema::{DB_FILE, REVISIONS};
use crate::store::{Backend, Condition, Error, EventKind, Range, Revision};

async fn make() -> (Arc<dyn Backend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    (Arc::new(store), dir)
}

crate::store::conformance::conformance_tests!(make);

pub(super) async fn put(store: &EmbeddedBackend, key: &str, value: &str) -> Revision {
    store
        .put(key, value.as_bytes().to_vec(), Condition::Any)
        .await
        .unwrap()
        .mod_revision
}

fn is_corrupt(err: &Error, file: &Path) -> bool {
    matches!(err, Error::Corrupt(msg) if msg.contains(&file.display().to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_keeps_data_revisions_and_the_compaction_point() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(&dir.path().join("nested/data")).unwrap();
    for i in 0..10 {
        put(&store, &format!("/k/{i}"), &format!("v{i}")).await;
    }
    put(&store, "/k/0", "v0b").await; // 11
    store.delete("/k/1", Condition::Any).await.unwrap(); // 12
    store.compact(11).await.unwrap();
    let before_12 = store
        .range(Range {
            prefix: "/k/".into(),
            revision: Some(12),
            ..Range::default()
        })
        .await
        .unwrap();
    store.close().await.unwrap();
    assert!(matches!(
        store.get("/k/0").await,
        Err(Error::Unavailable(_))
    ));

    let store = EmbeddedBackend::open(&dir.path().join("nested/data")).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), 12);
    assert_eq!(&*store.get("/k/0").await.unwrap().unwrap().value, b"v0b");
    assert_eq!(store.get("/k/1").await.unwrap(), None);
    let after_12 = store
        .range(Range {
            prefix: "/k/".into(),
            revision: Some(12),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(after_12, before_12);
    assert!(matches!(
        store
            .range(Range {
                prefix: "/k/".into(),
                revision: Some(11),
                ..Range::default()
            })
            .await,
        Err(Error::Compacted {
            requested: 11,
            compacted: 11
        })
    ));
    assert!(matches!(
        store.watch(10).await,
        Err(Error::Compacted { .. })
    ));
    let kv = store
        .put("/k/new", b"x".to_vec(), Condition::Absent)
        .await
        .unwrap();
    assert_eq!(kv.mod_revision, 13, "revisions continue after a reopen");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    put(&store, "/w/a", "1").await;
    put(&store, "/w/b", "1").await;
    store.delete("/w/a", Condition::Any).await.unwrap();
    store.close().await.unwrap();

    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let mut watch = store.watch(0).await.unwrap();
    put(&store, "/w/c", "1").await;
    let mut got = Vec::new();
    for _ in 0..4 {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.push((
            event.revision(),
            event.kind,
            event.kv.key.clone(),
            event.kv.value.to_vec(),
            event.created,
        ));
    }
    assert_eq!(
        got,
        [
            (1, EventKind::Put, "/w/a".into(), b"1".to_vec(), true),
            (2, EventKind::Put, "/w/b".into(), b"1".to_vec(), true),
            (3, EventKind::Delete, "/w/a".into(), b"1".to_vec(), false),
            (4, EventKind::Put, "/w/c".into(), b"1".to_vec(), true),
        ]
    );
    // Closing ends the watch with an error rather than leaving it hanging.
    store.close().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .unwrap();
    assert!(matches!(end, Some(Err(Error::Unavailable(_))) | None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_open_of_the_directory_is_refused_until_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let err = EmbeddedBackend::open(dir.path()).unwrap_err();
    match &err {
        Error::Unavailable(msg) => {
            assert!(msg.contains("is in use by another process"), "{msg}");
            assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    put(&store, "/a", "1").await;
    store.close().await.unwrap();
    let again = EmbeddedBackend::open(dir.path()).unwrap();
    assert_eq!(again.current_revision().await.unwrap(), 1);
    // Dropping every handle also releases the directory, in the background.
    drop(again);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match EmbeddedBackend::open(dir.path()) {
            Ok(store) => {
                store.close().await.unwrap();
                break;
            }
            Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reopen after drop: {e}"),
        }
    }
}

/// Creates a closed store with some data and returns its database file.
async fn closed_store(dir: &Path) -> std::path::PathBuf {
    let store = EmbeddedBackend::open(dir).unwrap();
    for i in 0..200 {
        store
            .put(
                &format!("/data/{i:04}"),
                format!("SENTINEL-{i:04}-").repeat(64).into_bytes(),
                Condition::Any,
            )
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    dir.join(DB_FILE)
}

/// Opens a damaged file, expecting `Corrupt` naming it and no change to it.
fn assert_refused_untouched(dir: &Path, file: &Path) -> String {
    let before = std::fs::read(file).unwrap();
    let err = EmbeddedBackend::open(dir).unwrap_err();
    assert!(
        is_corrupt(&err, file),
        "expected Corrupt naming the file, got {err:?}"
    );
    assert_eq!(
        std::fs::read(file).unwrap(),
        before,
        "the damaged file was modified"
    );
    // Refusing twice gives the same answer (nothing was half-repaired).
    let again = EmbeddedBackend::open(dir).unwrap_err();
    assert_eq!(again.to_string(), err.to_string());
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = closed_store(dir.path()).await;
    std::fs::File::create(&file).unwrap();
    let msg = assert_refused_untouched(dir.path(), &file);
    assert!(msg.contains("empty"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = closed_store(dir.path()).await;
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let garbage: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(&file, garbage).unwrap();
    let msg = assert_refused_untouched(dir.path(), &file);
    assert!(
        msg.contains("not a redb database") || msg.contains("magic"),
        "{msg}"
    );
    // A short file of garbage, too.
    std::fs::write(&file, b"hello").unwrap();
    assert_refused_untouched(dir.path(), &file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = closed_store(dir.path()).await;
    let len = std::fs::metadata(&file).unwrap().len();
    for cut in [len / 2, 4096, len - 1, 100] {
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        assert_refused_untouched(dir.path(), &file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_page_in_a_closed_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = closed_store(dir.path()).await;
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes
        .windows(b"SENTINEL-0150-".len())
        .position(|w| w == b"SENTINEL-0150-")
        .expect("value bytes are stored verbatim");
    bytes[at] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let msg = assert_refused_untouched(dir.path(), &file);
    assert!(msg.contains("damaged"), "{msg}");
}

/// The closed store in `dir` as if its process died right after it
/// committed the compaction point `revision`: nothing cleaned yet.
fn died_after_compacting_to(dir: &Path, revision: Revision) {
    let db = redb::Database::open(dir.join(DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(super::schema::META)
        .unwrap()
        .insert(super::schema::META_COMPACTED, revision)
        .unwrap();
    txn.commit().unwrap();
}

/// The compaction cleanup's commits go without an fsync, and when no write
/// comes after them no checkpoint follows (a cleanup resumed at an open; at
/// a million objects, the part of a cleanup that outlasts the writes'
/// checkpoint): once the store is quiet, one durable commit settles them,
/// so that reads stop finding redb's write buffer marked as holding
/// committed pages. Then nothing more while it stays quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_no_checkpoint_follows_is_settled_once_the_store_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    for i in 0..2000 {
        put(&store, &format!("/h/{}", i % 10), &i.to_string()).await;
    }
    store.close().await.unwrap();
    // The open resumes the cleanup, and nothing is written.
    died_after_compacting_to(dir.path(), 1990);
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let waited = Instant::now();
    while store.stats().settles == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the cleanup was never settled: {:?}",
            store.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.stats().checkpoints, 0, "no write, no checkpoint");
    // Each key's newest version at or below 1990, and the ten after it.
    assert_eq!(
        store.shared.history().len(),
        20,
        "settled once the cleanup was done"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        (store.stats().settles, store.stats().applies),
        (1, 0),
        "a quiet store commits nothing more"
    );
    store.close().await.unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let all = store
        .range(Range {
            prefix: "/h/".into(),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), 10);
    assert_eq!(&*all.kvs[9].value, b"1999");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_removes_superseded_revisions_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    for i in 0..5000 {
        put(&store, &format!("/h/{}", i % 10), &i.to_string()).await;
    }
    store.delete("/h/0", Condition::Any).await.unwrap();
    store.compact(5001).await.unwrap();
    let txn = store.shared.begin_read().unwrap();
    let revisions = txn.open_table(REVISIONS).unwrap().len().unwrap();
    let index = store.shared.history().len() as u64;
    drop(txn);
    assert_eq!(
        (revisions, index),
        (9, 9),
        "one live version per remaining key"
    );
    let all = store
        .range(Range {
            prefix: "/h/".into(),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), 9);
    assert_eq!(&*all.kvs[0].value, b"4991");
    store.close().await.unwrap();
}

/// The environment variable that turns [`crash_child`] into a writer.
const CRASH_DIR: &str = "SETPOINT_STORE_CRASH_DIR";

/// Optional: the child's checkpoint interval in log bytes.
const CRASH_CHECKPOINT: &str = "SETPOINT_STORE_CRASH_CHECKPOINT";

/// Child half of [`acknowledged_writes_survive_kill_9`]: writes with many
/// tasks and prints every acknowledged write until it is killed. Does
/// nothing in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else {
        return;
    };
    let checkpoint = std::env::var(CRASH_CHECKPOINT)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(super::wal::CHECKPOINT_BYTES);
    let store = EmbeddedBackend::open_checkpointing_every(Path::new(&dir), checkpoint).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let run = std::process::id();
    for t in 0..32 {
        let store = store.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let key = format!("/crash/{run}/{t:02}/{i:06}");
                let kv = store
                    .put(&key, key.as_bytes().repeat(16), Condition::Absent)
                    .await
                    .unwrap();
                tx.send(format!("{} {key}", kv.mod_revision)).unwrap();
            }
        });
    }
    let mut out = std::io::stdout().lock();
    while let Some(line) = rx.recv().await {
        writeln!(out, "ACK {line}").unwrap();
        out.flush().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    kill_9_rounds(None, 3, 2000).await;
}

/// The same with a checkpoint every 16 KiB of log: every round crosses many
/// checkpoints and segments, so the crash finds a database made durable
/// part-way and a log of several segments to replay on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_across_checkpoints_and_segments() {
    kill_9_rounds(Some(16 << 10), 3, 3000).await;
}

/// Rounds of: a child process writing with many tasks, `kill -9` after at
/// least `acks` acknowledgements (more each round), reopen, check.
async fn kill_9_rounds(checkpoint: Option<u64>, rounds: usize, acks: usize) {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "store::embedded::tests::crash_child",
                "--nocapture",
            ])
            .env(CRASH_DIR, dir.path())
            .env(
                CRASH_CHECKPOINT,
                checkpoint.map(|c| c.to_string()).unwrap_or_default(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut acked = Vec::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let target = acks + round * 500;
        while acked.len() < target {
            let line = lines.next().expect("child ended early").unwrap();
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (rev, key) = rest.split_once(' ').unwrap();
                acked.push((rev.parse::<Revision>().unwrap(), key.to_owned()));
            }
        }
        // Another process holds the directory meanwhile.
        match EmbeddedBackend::open(dir.path()) {
            Err(Error::Unavailable(msg)) => assert!(msg.contains("in use"), "{msg}"),
            other => panic!("open while another process has the store: {other:?}"),
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The file was not closed: redb refuses a read-only open, and the
        // store goes through crash recovery.
        assert!(matches!(
            redb::Builder::new().open_read_only(dir.path().join(DB_FILE)),
            Err(redb::DatabaseError::RepairAborted)
        ));
        // Lines the child printed before dying are acknowledged writes too.
        for line in lines.map_while(Result::ok) {
            if let Some((rev, key)) = line.strip_prefix("ACK ").and_then(|r| r.split_once(' ')) {
                acked.push((rev.parse().unwrap(), key.to_owned()));
            }
        }

        // The log the crash left: with small checkpoints, segments moved on.
        let segment = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                let hex = name.strip_prefix("wal-")?.strip_suffix(".log")?.to_owned();
                u64::from_str_radix(&hex, 16).ok()
            })
            .max()
            .expect("a crashed store has a log");
        // (A clean close leaves no log, so each round's child starts again
        // at segment 1.)
        if checkpoint.is_some() {
            assert!(
                segment >= 4,
                "round {round}: the log should have moved through many segments, is at {segment}"
            );
        }

        let store = EmbeddedBackend::open(dir.path()).unwrap();
        let current = store.current_revision().await.unwrap();
        let all = store
            .range(Range {
                prefix: "/crash/".into(),
                ..Range::default()
            })
            .await
            .unwrap();
        assert_eq!(all.kvs.len() as Revision, current, "revisions are dense");
        let stored: std::collections::HashMap<&str, Revision> = all
            .kvs
            .iter()
            .map(|kv| (kv.key.as_str(), kv.mod_revision))
            .collect();
        for (rev, key) in &acked {
            assert_eq!(
                stored.get(key.as_str()),
                Some(rev),
                "round {round}: acknowledged write {key}@{rev} lost (current {current})"
            );
        }
        for kv in &all.kvs {
            assert_eq!(&*kv.value, kv.key.as_bytes().repeat(16).as_slice());
        }
        store.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_is_committed_at_once_and_concurrent_ones_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    for i in 0..50 {
        put(&store, &format!("/seq/{i}"), "v").await;
    }
    let stats = store.stats();
    assert_eq!((stats.commits, stats.writes), (50, 50));
    assert_eq!(
        stats.gather_time,
        Duration::ZERO,
        "a lone writer never waits"
    );

    let mut tasks = Vec::new();
    for t in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                put(&store, &format!("/par/{t}/{i}"), "v").await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let after = store.stats();
    let (commits, writes) = (after.commits - 50, after.writes - 50);
    assert_eq!(writes, 64 * 50);
    assert!(
        commits * 8 <= writes,
        "{writes} concurrent writes took {commits} commits"
    );
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_compaction_resumes_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    for i in 0..3000 {
        put(&store, &format!("/r/{}", i % 30), &i.to_string()).await;
    }
    store.delete("/r/0", Condition::Any).await.unwrap(); // 3001
    let expected = store
        .range(Range {
            prefix: "/r/".into(),
            ..Range::default()
        })
        .await
        .unwrap();
    store.close().await.unwrap();
    died_after_compacting_to(dir.path(), 2990);
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let txn = store.shared.begin_read().unwrap();
        let revisions = txn.open_table(REVISIONS).unwrap().len().unwrap();
        let index = store.shared.history().len() as u64;
        // Each key's newest version at or below 2990 (/r/0's too: it is
        // deleted only at 3001), plus everything after: 2991..=3001.
        if (revisions, index) == (30 + 11, 30 + 11) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cleanup did not resume: {revisions} revisions, {index} index entries"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let now = store
        .range(Range {
            prefix: "/r/".into(),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(now, expected);
    let at_2991 = store
        .range(Range {
            prefix: "/r/".into(),
            revision: Some(2991),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(at_2991.kvs.len(), 30);
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_or_newer_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(DB_FILE);
    // A valid redb file that is not a store.
    redb::Database::create(&file).unwrap();
    let msg = assert_refused_untouched(dir.path(), &file);
    assert!(msg.contains("missing"), "{msg}");
    std::fs::remove_file(&file).unwrap();
    // A store written by a future version.
    EmbeddedBackend::open(dir.path())
        .unwrap()
        .close()
        .await
        .unwrap();
    {
        let db = redb::Database::open(&file).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(super::schema::META)
            .unwrap()
            .insert(super::schema::META_FORMAT, 99)
            .unwrap();
        txn.commit().unwrap();
    }
    let msg = assert_refused_untouched(dir.path(), &file);
    assert!(msg.contains("format 99"), "{msg}");
}

/// 400 closed files with random bit flips or truncations: each one either
/// opens with exactly the data written (the damage hit unused space) or is
/// refused as `Corrupt`/`Io` and left byte-for-byte untouched; never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_damage_to_a_closed_file_is_refused_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let file = closed_store(dir.path()).await;
    let pristine = std::fs::read(&file).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut refused, mut opened) = (0, 0);
    for trial in 0..400 {
        let mut bytes = pristine.clone();
        if trial % 5 == 4 {
            // A truncation anywhere.
            bytes.truncate((rand() % pristine.len() as u64) as usize);
        }
        let flips = if trial % 5 == 4 { 0 } else { 1 + rand() % 8 };
        for _ in 0..flips {
            // Half the damage in the first pages (headers, roots), half anywhere.
            let span = if trial % 2 == 0 {
                16384
            } else {
                bytes.len() as u64
            };
            let at = (rand() % span) as usize;
            bytes[at] ^= 1 << (rand() % 8);
        }
        std::fs::write(&file, &bytes).unwrap();
        match EmbeddedBackend::open(dir.path()) {
            Ok(store) => {
                opened += 1;
                // Whatever opened must hold exactly the data written.
                let all = store
                    .range(Range {
                        prefix: "/".into(),
                        ..Range::default()
                    })
                    .await;
                match all {
                    Ok(all) => {
                        assert_eq!(all.kvs.len(), 200, "trial {trial}: keys lost");
                        for (i, kv) in all.kvs.iter().enumerate() {
                            let expected = format!("SENTINEL-{i:04}-").repeat(64);
                            assert_eq!(&*kv.value, expected.as_bytes(), "trial {trial}");
                        }
                    }
                    Err(e) => panic!("trial {trial}: opened but unreadable: {e}"),
                }
                store.close().await.unwrap();
            }
            Err(err) => {
                refused += 1;
                assert!(
                    matches!(err, Error::Corrupt(_) | Error::Io(_)),
                    "trial {trial}: {err:?}"
                );
                assert_eq!(
                    std::fs::read(&file).unwrap(),
                    bytes,
                    "trial {trial}: file modified"
                );
            }
        }
    }
    assert!(
        refused > 0 && opened > 0,
        "{refused} refused, {opened} opened"
    );
}

/// The files of a data directory (the lock file aside), by name.
fn read_dir_files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// A crash image: the data directory's files as they are on disk while the
/// store is open, after 200 acknowledged puts by a lone writer (so 200 log
/// records, and a database file that has not been checkpointed since open).
async fn crash_image() -> std::collections::BTreeMap<String, Vec<u8>> {
    let live = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(live.path()).unwrap();
    for i in 0..200 {
        store
            .put(
                &format!("/data/{i:04}"),
                format!("SENTINEL-{i:04}-").repeat(64).into_bytes(),
                Condition::Any,
            )
            .await
            .unwrap();
    }
    let image = read_dir_files(live.path());
    assert_eq!(store.stats().checkpoints, 0, "the image must need the log");
    store.close().await.unwrap();
    assert!(
        image.keys().any(|name| name.starts_with("wal-")),
        "{:?}",
        image.keys()
    );
    image
}

/// Opens a damaged crash image in `dir`. Refused: every file untouched.
/// Opened: the keys must be exactly the first N written, with their values.
async fn open_damaged(
    dir: &Path,
    image: &std::collections::BTreeMap<String, Vec<u8>>,
    trial: usize,
) -> String {
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    for (name, bytes) in image {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    match EmbeddedBackend::open(dir) {
        Ok(store) => {
            let all = store
                .range(Range {
                    prefix: "/".into(),
                    ..Range::default()
                })
                .await
                .unwrap_or_else(|e| panic!("trial {trial}: opened but unreadable: {e}"));
            for (i, kv) in all.kvs.iter().enumerate() {
                assert_eq!(kv.key, format!("/data/{i:04}"), "trial {trial}");
                let expected = format!("SENTINEL-{i:04}-").repeat(64);
                assert_eq!(&*kv.value, expected.as_bytes(), "trial {trial}");
                assert_eq!(kv.mod_revision, i as Revision + 1, "trial {trial}");
            }
            assert_eq!(
                store.current_revision().await.unwrap(),
                all.kvs.len() as Revision,
                "trial {trial}: revisions only go forward from what is there"
            );
            store.close().await.unwrap();
            format!("opened with {} keys", all.kvs.len())
        }
        Err(err) => {
            assert!(
                matches!(err, Error::Corrupt(_) | Error::Io(_)),
                "trial {trial}: {err:?}"
            );
            assert_eq!(&read_dir_files(dir), image, "trial {trial}: files modified");
            "refused".to_owned()
        }
    }
}

/// A tiny deterministic generator for damage positions.
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// Random damage to the database file of a crash image. Crash recovery may
/// roll the file back to its previous commit; the log then brings back
/// every acknowledged write. Nothing may be lost or wrong, and refused
/// directories stay untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_damage_to_a_crashed_database_file_is_refused_or_recovered_from_the_log() {
    let image = crash_image().await;
    let dir = tempfile::tempdir().unwrap();
    let mut rand = xorshift(0x2545_f491_4f6c_dd1d);
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for trial in 0..300 {
        let mut damaged = image.clone();
        if trial > 0 {
            let bytes = damaged.get_mut(DB_FILE).unwrap();
            for _ in 0..1 + rand() % 4 {
                let at = (rand() % bytes.len() as u64) as usize;
                bytes[at] ^= 1 << (rand() % 8);
            }
        }
        let outcome = open_damaged(dir.path(), &damaged, trial).await;
        *outcomes.entry(outcome).or_default() += 1;
    }
    for outcome in outcomes.keys() {
        assert!(
            ["refused", "opened with 200 keys"].contains(&outcome.as_str()),
            "{outcomes:?}"
        );
    }
}

/// Random damage to the write-ahead log of a crash image: bit flips refuse
/// the directory untouched, except in the very last record, which cannot be
/// told from an append torn by the crash and is dropped (at most that one
/// write); a truncation is refused too (a segment is as long as it was made
/// from the start, so a shorter one was cut), naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_damage_to_the_log_is_refused_or_loses_at_most_the_torn_end() {
    let image = crash_image().await;
    // The segment holding the records (others may be empty or prepared).
    let log = image
        .iter()
        .filter(|(name, _)| name.ends_with(".log"))
        .max_by_key(|(_, bytes)| bytes.iter().filter(|&&b| b != 0).count())
        .unwrap()
        .0
        .clone();
    let used = image[&log].iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let dir = tempfile::tempdir().unwrap();
    let mut rand = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for trial in 0..300 {
        let mut damaged = image.clone();
        let bytes = damaged.get_mut(&log).unwrap();
        // Damage where the records are, and a little beyond.
        let len = (used + 64).min(bytes.len() as u64);
        let truncated = trial % 5 == 4;
        if truncated {
            bytes.truncate((rand() % len) as usize);
        } else if trial > 0 {
            for _ in 0..1 + rand() % 4 {
                let at = (rand() % len) as usize;
                bytes[at] ^= 1 << (rand() % 8);
            }
        }
        let outcome = open_damaged(dir.path(), &damaged, trial).await;
        if truncated {
            assert_eq!(
                outcome, "refused",
                "trial {trial}: a truncated log was accepted"
            );
            let msg = match EmbeddedBackend::open(dir.path()) {
                Err(Error::Corrupt(msg)) => msg,
                other => panic!("trial {trial}: {other:?}"),
            };
            assert!(
                msg.contains(&log) && msg.contains("cut short"),
                "trial {trial}: {msg}"
            );
        } else {
            assert!(
                ["refused", "opened with 200 keys", "opened with 199 keys"]
                    .contains(&outcome.as_str()),
                "trial {trial}: {outcome}"
            );
        }
        *outcomes.entry(outcome).or_default() += 1;
    }
    assert!(outcomes.contains_key("refused"), "{outcomes:?}");
}

/// A backup larger than one copy batch (16 MiB) is copied over several
/// transactions and still restores every key at the backup's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_larger_than_a_copy_batch_restores_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let value = vec![b'x'; 1 << 20];
    for i in 0..40 {
        store
            .put(&format!("/big/{i:02}"), value.clone(), Condition::Any)
            .await
            .unwrap();
    }
    let mut backup = store.backup().await.unwrap();
    assert_eq!(backup.revision, 40);
    store.close().await.unwrap();
    let restored = tempfile::tempdir().unwrap();
    let file = restored.path().join(DB_FILE);
    std::io::copy(&mut backup.file, &mut std::fs::File::create(&file).unwrap()).unwrap();
    assert_eq!(EmbeddedBackend::check_backup(&file).unwrap(), 40);
    let reopened = EmbeddedBackend::open(restored.path()).unwrap();
    let listed = reopened
        .range(Range {
            prefix: "/big/".into(),
            start_after: None,
            limit: 0,
            revision: None,
        })
        .await
        .unwrap();
    assert_eq!(listed.kvs.len(), 40);
    assert!(listed.kvs.iter().all(|kv| *kv.value == *value));
    assert_eq!(reopened.current_revision().await.unwrap(), 40);
    reopened.close().await.unwrap();
}
