//! Faults injected through the log's I/O seam (`wal/io.rs`) at exact
//! points: a failed fsync, a write torn part-way, a full disk. What must
//! hold: nothing unacknowledged is ever reported as written, a torn end is
//! recovered from, and a full disk refuses writes with
//! [`Error::InsufficientStorage`] (507 over HTTP) while reads go on,
//! readiness says so, and writes come back once there is room, without a
//! restart.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::EmbeddedBackend;
use super::wal::{Disk, LogFile, LogIo};
use crate::store::{Backend, Condition, Error, Range};

/// What the faulty file system does next.
#[derive(Debug, Default)]
struct Plan {
    /// No room: allocating fails (writes into room allocated before still
    /// work).
    full: AtomicBool,
    /// No room, on a file system that cannot allocate ahead: writes stop
    /// half-way.
    full_writes: AtomicBool,
    /// The next data sync fails.
    fail_sync: AtomicBool,
    /// The next write stops half-way with an I/O error.
    tear_write: AtomicBool,
    /// Data syncs done.
    syncs: AtomicUsize,
}

/// The real file system, failing as [`Plan`] says.
#[derive(Debug, Clone, Default)]
struct Faulty(Arc<Plan>);

struct FaultyFile {
    file: std::fs::File,
    plan: Arc<Plan>,
}

fn no_space() -> io::Error {
    io::Error::from(io::ErrorKind::StorageFull)
}

impl LogIo for Faulty {
    type File = FaultyFile;

    fn create(&self, path: &Path) -> io::Result<FaultyFile> {
        Ok(FaultyFile {
            file: Disk.create(path)?,
            plan: self.0.clone(),
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        Disk.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        Disk.sync_dir(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        Disk.remove(path)
    }
}

impl LogFile for FaultyFile {
    fn write_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let full = self.plan.full_writes.load(Ordering::Acquire);
        if full || self.plan.tear_write.swap(false, Ordering::AcqRel) {
            self.file.write_at(&bytes[..bytes.len() / 2], offset)?;
            return Err(if full {
                no_space()
            } else {
                io::Error::other("injected: the write stopped half-way")
            });
        }
        self.file.write_at(bytes, offset)
    }

    fn allocate(&mut self, len: u64) -> io::Result<()> {
        if self.plan.full.load(Ordering::Acquire) {
            return Err(no_space());
        }
        self.file.allocate(len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.plan.syncs.fetch_add(1, Ordering::Relaxed);
        if self.plan.fail_sync.swap(false, Ordering::AcqRel) {
            return Err(io::Error::other("injected: fsync failed"));
        }
        LogFile::sync_data(&mut self.file)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        LogFile::sync_all(&mut self.file)
    }
}

fn open(dir: &Path, plan: &Faulty) -> EmbeddedBackend {
    EmbeddedBackend::open_with(dir, super::wal::CHECKPOINT_BYTES, plan.clone()).unwrap()
}

async fn keys(store: &EmbeddedBackend) -> Vec<String> {
    store
        .range(Range {
            prefix: "/".into(),
            ..Range::default()
        })
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_acknowledgements_and_the_write_is_never_reported() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    let store = open(dir.path(), &plan);
    for i in 0..5 {
        store
            .put(&format!("/ok/{i}"), b"v".to_vec(), Condition::Any)
            .await
            .unwrap();
    }
    let mut watch = store.watch(5).await.unwrap();
    plan.0.fail_sync.store(true, Ordering::Release);
    let err = store
        .put("/lost", b"v".to_vec(), Condition::Any)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err:?}");
    // Not visible, not watched, not counted. A read may also be refused
    // (once the writer has marked the store failed, reads that wait for it
    // are), but it never shows the unacknowledged write.
    match store.get("/lost").await {
        Ok(None) | Err(Error::Unavailable(_)) => {}
        other => panic!("the unacknowledged write was read: {other:?}"),
    }
    match store.current_revision().await {
        Ok(5) | Err(Error::Unavailable(_)) => {}
        other => panic!("the unacknowledged write was counted: {other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), watch.recv())
            .await
            .is_err(),
        "a watcher saw an unacknowledged write"
    );
    // Acknowledgements stop, for good: the file system may have dropped
    // what the log held.
    let syncs = plan.0.syncs.load(Ordering::Relaxed);
    let err = store
        .put("/after", b"v".to_vec(), Condition::Any)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert_eq!(
        plan.0.syncs.load(Ordering::Relaxed),
        syncs,
        "nothing more synced"
    );
    assert!(store.writable().is_err());
    // Reads that do not wait on the failed writer go on; one that does may
    // be refused (a race the closing note of 2026-11-25 records), but none
    // ever shows the lost write.
    match store
        .range(Range {
            prefix: "/".into(),
            ..Range::default()
        })
        .await
    {
        Ok(read) => assert_eq!(read.kvs.len(), 5, "reads go on"),
        Err(Error::Unavailable(_)) => {}
        Err(other) => panic!("{other:?}"),
    }
    store.close().await.unwrap();

    // The log stays for the next open: every acknowledged write is there.
    // (The one whose fsync failed may be too: its outcome was unknown, like
    // a write whose answer was lost.)
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let found = keys(&store).await;
    for i in 0..5 {
        assert!(found.contains(&format!("/ok/{i}")), "{found:?}");
    }
    assert!(!found.contains(&"/after".to_owned()), "{found:?}");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_torn_by_a_failed_write_is_dropped_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    let store = open(dir.path(), &plan);
    for i in 0..5 {
        store
            .put(&format!("/ok/{i}"), vec![b'v'; 4096], Condition::Any)
            .await
            .unwrap();
    }
    plan.0.tear_write.store(true, Ordering::Release);
    store
        .put("/torn", vec![b't'; 4096], Condition::Any)
        .await
        .unwrap_err();
    // A read may be refused (the writer has marked the store failed), as
    // after a failed fsync above, but it never shows the torn write.
    match store.get("/torn").await {
        Ok(None) | Err(Error::Unavailable(_)) => {}
        other => panic!("the torn write was read: {other:?}"),
    }
    store.close().await.unwrap();
    // Half a record ends the newest segment, as a crash would leave it.
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let found = keys(&store).await;
    assert_eq!(found.len(), 5, "{found:?}");
    assert!(!found.contains(&"/torn".to_owned()));
    assert_eq!(store.current_revision().await.unwrap(), 5);
    let kv = store
        .put("/next", b"v".to_vec(), Condition::Any)
        .await
        .unwrap();
    assert_eq!(
        kv.mod_revision, 6,
        "revisions go on from the last whole record"
    );
    store.close().await.unwrap();
}

/// Writes 64 KiB values until one is refused for lack of room; returns the
/// keys written and the refusal.
async fn write_until_full(store: &EmbeddedBackend, prefix: &str) -> (Vec<String>, Error) {
    let mut written = Vec::new();
    for i in 0..100 {
        let key = format!("{prefix}/{i:03}");
        match store.put(&key, vec![b'x'; 64 << 10], Condition::Any).await {
            Ok(_) => written.push(key),
            Err(err) => return (written, err),
        }
    }
    panic!("100 writes of 64 KiB fit: the log never needed a new segment");
}

/// Waits until the store takes writes again.
async fn writable_again(store: &EmbeddedBackend) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(err) = store.writable() {
        assert!(Instant::now() < deadline, "still not writable: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    let store = open(dir.path(), &plan);
    store
        .put("/before", b"v".to_vec(), Condition::Any)
        .await
        .unwrap();
    plan.0.full.store(true, Ordering::Release);
    // The current segment takes what fits; the next one cannot be made.
    let (written, err) = write_until_full(&store, "/full").await;
    let Error::InsufficientStorage(msg) = &err else {
        panic!("expected InsufficientStorage, got {err:?}");
    };
    assert!(
        msg.contains("wal-") && msg.contains("writes are refused"),
        "{msg}"
    );
    let revision = store.current_revision().await.unwrap();
    assert_eq!(
        revision,
        1 + written.len() as i64,
        "a refused write takes no revision"
    );
    // Refused again, reads go on, and the store says it cannot write.
    assert!(matches!(
        store.put("/again", b"v".to_vec(), Condition::Any).await,
        Err(Error::InsufficientStorage(_))
    ));
    assert!(matches!(
        store.writable(),
        Err(Error::InsufficientStorage(_))
    ));
    assert_eq!(keys(&store).await.len(), 1 + written.len());
    assert!(store.get("/before").await.unwrap().is_some());
    let mut watch = store.watch(0).await.unwrap();
    assert_eq!(watch.recv().await.unwrap().unwrap().kv.key, "/before");

    // Room again: writes resume, without a restart.
    plan.0.full.store(false, Ordering::Release);
    writable_again(&store).await;
    let kv = store
        .put("/after", b"v".to_vec(), Condition::Any)
        .await
        .unwrap();
    assert_eq!(kv.mod_revision, revision + 1);
    let (more, _) = tokio::time::timeout(Duration::from_secs(30), async {
        let mut more = Vec::new();
        for i in 0..40 {
            let key = format!("/more/{i:03}");
            store
                .put(&key, vec![b'y'; 64 << 10], Condition::Any)
                .await
                .unwrap();
            more.push(key);
        }
        (more, ())
    })
    .await
    .unwrap();
    store.close().await.unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let found = keys(&store).await;
    for key in written.iter().chain(&more) {
        assert!(found.contains(key), "{key} lost");
    }
    assert!(!found.contains(&"/again".to_owned()));
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_found_the_disk_full_half_way_is_overwritten_by_the_next() {
    // A file system that cannot reserve room fails the write itself.
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    let store = open(dir.path(), &plan);
    store
        .put("/a", vec![b'a'; 8192], Condition::Any)
        .await
        .unwrap();
    plan.0.full.store(true, Ordering::Release);
    plan.0.full_writes.store(true, Ordering::Release);
    let err = store
        .put("/refused", vec![b'r'; 8192], Condition::Any)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientStorage(_)), "{err:?}");
    plan.0.full.store(false, Ordering::Release);
    plan.0.full_writes.store(false, Ordering::Release);
    writable_again(&store).await;
    store
        .put("/b", b"short".to_vec(), Condition::Any)
        .await
        .unwrap();
    assert_eq!(keys(&store).await, ["/a", "/b"]);
    // A crash now: the log ends in the refused record's second half.
    let image = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() && entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), image.path().join(entry.file_name())).unwrap();
        }
    }
    store.close().await.unwrap();
    let reopened = EmbeddedBackend::open(image.path()).unwrap();
    assert_eq!(keys(&reopened).await, ["/a", "/b"]);
    assert_eq!(reopened.current_revision().await.unwrap(), 2);
    reopened.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_wait_while_the_disk_is_full_and_a_close_keeps_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    // A checkpoint every 64 KiB: due at once.
    let store = EmbeddedBackend::open_with(dir.path(), 64 << 10, plan.clone()).unwrap();
    store
        .put("/a", vec![b'a'; 8192], Condition::Any)
        .await
        .unwrap();
    plan.0.full.store(true, Ordering::Release);
    let (written, _) = write_until_full(&store, "/x").await;
    let checkpoints = store.stats().checkpoints;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        store.stats().checkpoints,
        checkpoints,
        "no checkpoint while the disk is full"
    );
    // Closing without room: no final checkpoint, the log stays.
    store.close().await.unwrap();
    assert!(
        std::fs::read_dir(dir.path()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".log")),
        "the log is kept"
    );
    assert!(
        !dir.path().join(super::seal::FILE).exists(),
        "a database that needs its log is not sealed"
    );
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    assert!(!store.stats().opened_sealed);
    let found = keys(&store).await;
    assert_eq!(found.len(), 1 + written.len());
    store.close().await.unwrap();
}

/// The full-disk answers a host gives its clients (the HTTP server maps
/// these errors to 507 `InsufficientStorage`, `api::Error::code` and
/// `reason`; `tests/durability.rs` checks it through the binary on a real
/// full tmpfs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_writes_are_507_reads_go_on_and_the_store_says_not_writable() {
    use crate::api::Api;
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    let store = open(dir.path(), &plan);
    let host = crate::Host::builder()
        .backend(Arc::new(store.clone()))
        .build()
        .await
        .unwrap();
    let api: &Api = host.api();
    let crd = serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition", "metadata": {"name": "notes.test.setpoint.dev"},
        "spec": {"group": "test.setpoint.dev", "scope": "Namespaced",
          "names": {"kind": "Note", "plural": "notes", "singular": "note"},
          "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object",
              "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crds = api
        .kinds()
        .require("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        .unwrap();
    api.create(&crds, crd).await.unwrap();
    let notes = api.kinds().require("test.setpoint.dev/v1", "Note").unwrap();
    let note = |name: &str| {
        serde_json::json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Note",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"text": "x".repeat(64 << 10)}})
    };
    api.create(&notes, note("first")).await.unwrap();
    assert!(api.backend().writable().is_ok());

    plan.0.full.store(true, Ordering::Release);
    let mut created = vec!["first".to_owned()];
    let refused = loop {
        assert!(created.len() < 100, "never out of room");
        let name = format!("n{}", created.len());
        match api.create(&notes, note(&name)).await {
            Ok(_) => created.push(name),
            Err(err) => break err,
        }
    };
    assert_eq!(refused.code(), 507, "{refused}");
    assert_eq!(refused.reason(), "InsufficientStorage");
    assert!(
        refused.to_string().contains("writes are refused"),
        "{refused}"
    );
    // Reads are served; the store says why writes are not (`/readyz`).
    let list = api
        .list(&notes, &crate::api::ListOptions::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), created.len());
    api.get(&notes, Some("default"), "first").await.unwrap();
    let why = api.backend().writable().unwrap_err().to_string();
    assert!(why.contains("out of disk space"), "{why}");

    // Room again: writable, and writes are taken, with no restart.
    plan.0.full.store(false, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.backend().writable().is_err() {
        assert!(Instant::now() < deadline, "never writable again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    api.create(&notes, note("later")).await.unwrap();
    host.shutdown().await;
    store.close().await.unwrap();
}

/// The files of `dir` as they are on disk now (the store still open): what
/// a crash at this moment leaves, in a new directory.
///
/// The seal first and its journal last: a block the copy of the database
/// holds changed was recorded in the journal before it was written, as a
/// crash would find them (`seal.rs`).
pub(super) fn crash_copy(dir: &Path) -> tempfile::TempDir {
    let image = tempfile::tempdir().unwrap();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_file() && entry.file_name() != "LOCK")
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let order = |name: &str| match name {
        super::seal::FILE => 0,
        name if name.starts_with("store.redb.journal") => 2,
        _ => 1,
    };
    names.sort_by_key(|name| order(name));
    for name in names {
        match std::fs::copy(dir.join(&name), image.path().join(&name)) {
            Ok(_) => {}
            // Renamed or removed since listed (a seal written beside, a
            // log segment let go): as a crash after that finds it.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => panic!("copying {name}: {err}"),
        }
    }
    image
}

fn log_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("wal-") && name.ends_with(".log"))
        .collect()
}

/// A store closed cleanly (no log left) on a disk that then filled up
/// opens read-only: no log segment can be made, reads are served, writes
/// are refused with nothing written, and once there is room the first
/// write makes the segment. A crash at each of those moments loses
/// nothing acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_closed_cleanly_opens_read_only_on_a_full_disk_and_writes_once_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Faulty::default();
    let store = open(dir.path(), &plan);
    for key in ["/a", "/b"] {
        store.put(key, b"v".to_vec(), Condition::Any).await.unwrap();
    }
    store.close().await.unwrap();
    assert!(
        log_files(dir.path()).is_empty(),
        "a clean close leaves no log"
    );

    plan.0.full.store(true, Ordering::Release);
    let store = open(dir.path(), &plan);
    assert!(
        log_files(dir.path()).is_empty(),
        "no segment without room: {:?}",
        log_files(dir.path())
    );
    let why = store.writable().unwrap_err().to_string();
    assert!(
        why.contains("wal-") && why.contains("writes are refused"),
        "{why}"
    );
    assert_eq!(keys(&store).await, ["/a", "/b"]);
    let refused = store.put("/c", b"v".to_vec(), Condition::Any).await;
    assert!(
        matches!(refused, Err(Error::InsufficientStorage(_))),
        "{refused:?}"
    );
    assert_eq!(store.current_revision().await.unwrap(), 2);
    // A crash while read-only: the database alone holds everything.
    let while_full = crash_copy(dir.path());

    plan.0.full.store(false, Ordering::Release);
    writable_again(&store).await;
    let kv = store
        .put("/c", b"v".to_vec(), Condition::Any)
        .await
        .unwrap();
    assert_eq!(kv.mod_revision, 3);
    assert_eq!(
        log_files(dir.path()).len(),
        1,
        "{:?}",
        log_files(dir.path())
    );
    // A crash after the first write: only the log holds it.
    let after_write = crash_copy(dir.path());
    store.close().await.unwrap();

    let reopened = EmbeddedBackend::open(while_full.path()).unwrap();
    assert_eq!(keys(&reopened).await, ["/a", "/b"]);
    reopened.close().await.unwrap();
    let reopened = EmbeddedBackend::open(after_write.path()).unwrap();
    assert_eq!(keys(&reopened).await, ["/a", "/b", "/c"]);
    assert_eq!(reopened.current_revision().await.unwrap(), 3);
    reopened.close().await.unwrap();
    let reopened = EmbeddedBackend::open(dir.path()).unwrap();
    assert_eq!(keys(&reopened).await, ["/a", "/b", "/c"]);
    reopened.close().await.unwrap();
}

/// After a crash, on a full disk: the log's records are replayed into the
/// database, the old segments go (their room with them), and the store
/// opens read-only if there is still no room for a new segment; a crash
/// then, and after writes resume, loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_store_recovers_on_a_full_disk_and_its_log_starts_again_once_there_is_room() {
    let live = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(live.path()).unwrap();
    let mut written = Vec::new();
    for i in 0..50 {
        let key = format!("/k/{i:03}");
        store
            .put(&key, vec![b'x'; 4096], Condition::Any)
            .await
            .unwrap();
        written.push(key);
    }
    let crashed = crash_copy(live.path());
    store.close().await.unwrap();
    assert!(!log_files(crashed.path()).is_empty());

    let plan = Faulty::default();
    plan.0.full.store(true, Ordering::Release);
    let store = open(crashed.path(), &plan);
    assert_eq!(keys(&store).await, written, "every logged write replayed");
    assert!(
        log_files(crashed.path()).is_empty(),
        "replayed segments are gone"
    );
    assert!(matches!(
        store.writable(),
        Err(Error::InsufficientStorage(_))
    ));
    let again = crash_copy(crashed.path());

    plan.0.full.store(false, Ordering::Release);
    writable_again(&store).await;
    store
        .put("/later", b"v".to_vec(), Condition::Any)
        .await
        .unwrap();
    written.push("/later".into());
    let after = crash_copy(crashed.path());
    store.close().await.unwrap();

    let reopened = EmbeddedBackend::open(again.path()).unwrap();
    assert_eq!(keys(&reopened).await, written[..50]);
    reopened.close().await.unwrap();
    let reopened = EmbeddedBackend::open(after.path()).unwrap();
    let mut expected = written.clone();
    expected.sort();
    assert_eq!(keys(&reopened).await, expected);
    reopened.close().await.unwrap();
}
