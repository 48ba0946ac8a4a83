//! The embedded store's data directory through the real binary, beyond
//! `kill -9` (`crash.rs`): a stop on SIGTERM or SIGINT leaves `store.redb`
//! alone holding every write; a backup taken under write load restores
//! every write acknowledged before it; a log cut short or missing a
//! segment, a missing log, and a database damaged after a crash are each
//! refused at start with a message naming the file and what is lost; a
//! full disk answers writes 507 while reads and readiness go on.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::crash::{CRD, NOTES};
use crate::support::{ServeProcess, eventually, setpoint_bin};

/// `setpoint serve` on a data directory, with no plugins (an empty
/// directory inside it).
pub(crate) fn serve(data: &Path) -> ServeProcess {
    let plugins = data.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    ServeProcess::start([
        std::ffi::OsStr::new("--data"),
        data.as_os_str(),
        "--plugins".as_ref(),
        plugins.as_os_str(),
    ])
}

/// Defines the Note kind and waits until it is served.
pub(crate) async fn create_crd(url: &str) {
    let crd: Value = serde_json::from_str(CRD).unwrap();
    let response = reqwest::Client::new()
        .post(format!(
            "{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        ))
        .json(&crd)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    eventually(
        "the Note kind is served",
        Duration::from_secs(20),
        || async {
            let status = reqwest::get(format!("{url}{NOTES}"))
                .await
                .map(|r| r.status());
            match status {
                Ok(status) if status == 200 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Waits until `acked` holds `n` names (failing if every writer stopped).
async fn until_acked(acked: &Acked, n: usize, tasks: &[tokio::task::JoinHandle<()>]) {
    while acked.lock().unwrap().len() < n {
        assert!(
            !tasks.iter().all(|t| t.is_finished()),
            "the writers stopped after {} writes",
            acked.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn note(name: &str, text_len: usize) -> Value {
    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Note",
        "metadata": {"name": name}, "spec": {"text": "x".repeat(text_len)}})
}

/// Names acknowledged (201) so far.
type Acked = Arc<Mutex<Vec<String>>>;

/// `writers` tasks creating notes of `text_len` bytes until the host stops
/// answering (or refuses one).
fn writers(
    url: &str,
    prefix: &str,
    writers: usize,
    text_len: usize,
    acked: &Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..writers)
        .map(|w| {
            let (url, prefix, acked) = (url.to_owned(), prefix.to_owned(), acked.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for i in 0.. {
                    let name = format!("{prefix}-w{w}-n{i}");
                    let sent = http
                        .post(format!("{url}{NOTES}"))
                        .json(&note(&name, text_len))
                        .send()
                        .await;
                    match sent {
                        Ok(response) if response.status() == 201 => {
                            acked.lock().unwrap().push(name)
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect()
}

/// Writes `n` notes with 8 writers and waits for them.
async fn write_notes(url: &str, prefix: &str, n: usize, text_len: usize) -> Vec<String> {
    let acked = Acked::default();
    let tasks = writers(url, prefix, 8, text_len, &acked);
    until_acked(&acked, n, &tasks).await;
    for task in tasks {
        task.abort();
    }
    acked.lock().unwrap().clone()
}

/// The notes the host lists.
async fn names(url: &str) -> HashSet<String> {
    let listed: Value = reqwest::get(format!("{url}{NOTES}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every name in `acked` that `present` lacks.
fn lost(acked: &[String], present: &HashSet<String>) -> Vec<String> {
    acked
        .iter()
        .filter(|name| !present.contains(*name))
        .cloned()
        .collect()
}

/// Sends `signal` (`TERM`, `INT`, `KILL`) to the process.
fn send(server: &ServeProcess, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the process to exit, at most `timeout`.
fn wait_exit(server: &mut ServeProcess, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the host did not exit within {timeout:?}: {:?}",
            server.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The log segments (and prepared segments) in a data directory.
fn log_files(data: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("wal-"))
        .collect();
    names.sort();
    names
}

/// A new data directory holding only a copy of `file` as its database.
fn restore(file: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(file, dir.path().join("store.redb")).unwrap();
    dir
}

/// Every file of a data directory (the lock file and caches aside), by name.
fn files(data: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file() && e.file_name() != "LOCK")
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Runs `setpoint serve` on a damaged data directory: it must refuse to
/// start, leave every file as it was, and say why. Returns what it said.
fn refused(data: &Path) -> String {
    use std::io::Read;
    let before = files(data);
    let plugins = tempfile::tempdir().unwrap();
    let mut child = Command::new(setpoint_bin())
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--plugins")
        .arg(plugins.path())
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // A host that accepted the directory serves until it is stopped.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = said.join().unwrap();
    assert!(
        status.is_some_and(|s| !s.success()),
        "a damaged data directory was accepted: {stderr}"
    );
    assert!(stderr.contains("corrupt"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        files(data) == before,
        "a refused data directory was modified"
    );
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigint_stop_cleanly_leaving_store_redb_alone_with_every_write() {
    for signal in ["TERM", "INT"] {
        let data = tempfile::tempdir().unwrap();
        let data = data.path().join("data");
        let mut server = serve(&data);
        create_crd(&server.url).await;
        // A watch stays open through the stop; writers keep writing.
        let watch_url = format!("{}{NOTES}?watch=true", server.url);
        let watch = tokio::spawn(async move {
            if let Ok(mut response) = reqwest::get(watch_url).await {
                while let Ok(Some(_)) = response.chunk().await {}
            }
        });
        let acked = Acked::default();
        let tasks = writers(&server.url, &signal.to_lowercase(), 8, 512, &acked);
        until_acked(&acked, 300, &tasks).await;
        send(&server, signal);
        let status = wait_exit(&mut server, Duration::from_secs(30));
        for task in tasks {
            task.await.unwrap();
        }
        watch.abort();
        let log = server.log.lock().unwrap().join("\n");
        assert!(status.success(), "SIG{signal}: exited with {status}: {log}");
        assert!(log.contains("store closed"), "SIG{signal}: {log}");
        assert_eq!(
            log_files(&data),
            Vec::<String>::new(),
            "SIG{signal}: a clean stop leaves no log"
        );

        // store.redb alone is the whole store.
        let restored = restore(&data.join("store.redb"));
        let again = serve(restored.path());
        let acked = acked.lock().unwrap().clone();
        let missing = lost(&acked, &names(&again.url).await);
        assert!(
            missing.is_empty(),
            "SIG{signal}: {} of {} acknowledged writes are not in store.redb: {missing:?}",
            missing.len(),
            acked.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_write_load_restores_every_write_acknowledged_before_it() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let acked = Acked::default();
    let tasks = writers(&server.url, "b", 16, 512, &acked);
    until_acked(&acked, 500, &tasks).await;
    // The documented procedure: `setpoint backup` against the running host.
    let before = acked.lock().unwrap().clone();
    let saved = data.path().join("backups/store-backup.redb");
    std::fs::create_dir_all(saved.parent().unwrap()).unwrap();
    let (url, out) = (server.url.clone(), saved.clone());
    let backup = tokio::task::spawn_blocking(move || {
        Command::new(setpoint_bin())
            .args(["backup", "--server", &url, "-o"])
            .arg(&out)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&backup.stdout);
    assert!(
        backup.status.success(),
        "setpoint backup failed: {stdout}{}",
        String::from_utf8_lossy(&backup.stderr)
    );
    assert!(stdout.contains("revision"), "{stdout}");
    let after_backup = acked.lock().unwrap().len();
    // Writes went on during and after the backup; then the host crashes.
    until_acked(&acked, after_backup + 100, &tasks).await;
    server.kill9();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(!saved.with_extension("redb.part").exists());

    // Restored elsewhere: every write acknowledged before the backup began.
    let restored = restore(&saved);
    let again = serve(restored.path());
    let present = names(&again.url).await;
    let missing = lost(&before, &present);
    assert!(
        missing.is_empty(),
        "{} of the {} writes acknowledged before the backup are missing: {missing:?}",
        missing.len(),
        before.len()
    );
    // New writes on the restored store go on from its revision.
    let created: Value = reqwest::Client::new()
        .post(format!("{}{NOTES}", again.url))
        .json(&note("after-restore", 8))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["metadata"]["name"], "after-restore");
}

/// A host on `data` that wrote notes and was killed: its log holds them.
async fn crashed_with_notes(data: &Path, n: usize, text_len: usize) -> Vec<String> {
    let server = serve(data);
    create_crd(&server.url).await;
    let acked = write_notes(&server.url, "c", n, text_len).await;
    server.kill9();
    acked
}

/// The log segment files, oldest first, and their sequence numbers.
fn segments(data: &Path) -> Vec<PathBuf> {
    log_files(data)
        .into_iter()
        .filter(|name| name.ends_with(".log"))
        .map(|name| data.join(name))
        .collect()
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newest_log_segment_cut_short_is_refused_naming_it_and_what_is_lost() {
    let data = tempfile::tempdir().unwrap();
    crashed_with_notes(data.path(), 200, 512).await;
    let newest = segments(data.path())
        .pop()
        .expect("a crashed host has a log");
    let bytes = std::fs::read(&newest).unwrap();
    let used = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    // Cut in the middle of the records.
    std::fs::write(&newest, &bytes[..used / 2]).unwrap();
    let said = refused(data.path());
    assert!(said.contains(&name_of(&newest)), "{said}");
    assert!(said.contains("cut short"), "{said}");
    assert!(said.contains("lost"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_log_segment_or_log_is_refused_naming_it_and_what_is_lost() {
    let data = tempfile::tempdir().unwrap();
    // 16 KiB notes: more than the first 1 MiB segment holds.
    crashed_with_notes(data.path(), 150, 16 << 10).await;
    let all = segments(data.path());
    assert!(all.len() >= 2, "the log should have moved on: {all:?}");
    let saved: Vec<(PathBuf, Vec<u8>)> = all
        .iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    let put_back = || {
        for (path, bytes) in &saved {
            std::fs::write(path, bytes).unwrap();
        }
    };
    // The newest, the oldest, one in the middle (if any).
    let mut victims = vec![all.last().unwrap().clone(), all[0].clone()];
    if all.len() >= 3 {
        victims.push(all[1].clone());
    }
    for victim in victims {
        std::fs::remove_file(&victim).unwrap();
        let said = refused(data.path());
        assert!(
            said.contains(&format!("{} is missing", name_of(&victim))),
            "deleting {}: {said}",
            name_of(&victim)
        );
        assert!(said.contains("lost"), "{said}");
        put_back();
    }
    // The whole log.
    for path in &all {
        std::fs::remove_file(path).unwrap();
    }
    for tmp in log_files(data.path()) {
        std::fs::remove_file(data.path().join(tmp)).unwrap();
    }
    let said = refused(data.path());
    assert!(said.contains("is missing"), "{said}");
    assert!(
        said.contains("every write acknowledged after revision"),
        "{said}"
    );
    // Put back, the directory opens with every write.
    put_back();
    let server = serve(data.path());
    assert!(names(&server.url).await.len() >= 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_damaged_after_a_crash_is_named_as_the_database() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    write_notes(&server.url, "early", 100, 512).await;
    // Idle: the store checkpoints, and the log moves on without the
    // segments before.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    write_notes(&server.url, "late", 100, 512).await;
    server.kill9();
    // The latest commit's slot in the header fails its checksum: redb
    // would fall back to the commit before, which the log no longer
    // continues.
    let file = data.path().join("store.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let primary = usize::from(bytes[9] & 1);
    bytes[64 + 128 * primary + 20] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let said = refused(data.path());
    let first = said
        .lines()
        .find(|line| line.contains("corrupt"))
        .unwrap_or_default();
    let subject = first.split("store is corrupt: ").nth(1).unwrap_or_default();
    assert!(
        subject.starts_with(&file.display().to_string()),
        "the database should be named as the damaged file: {said}"
    );
    // Either redb falls back to the commit before, which the log no longer
    // continues (what was lost is said), or that commit's pages were reused
    // since and redb's own check fails: both name the database as damaged.
    assert!(
        subject.contains("lost") || subject.contains("integrity check failed"),
        "{said}"
    );
}

/// A tmpfs of `mib` MiB mounted on a new directory, unmounted on drop; `None`
/// where mounting is not allowed (not root).
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(mib: u64) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(Self(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Fill `disk` but for a little with a ballast file, then create notes
/// through `url` until one is refused, adding those created to `created`;
/// the ballast's path and the refusal.
async fn fill_up(
    disk: &Tmpfs,
    url: &str,
    created: &mut Vec<String>,
) -> (PathBuf, reqwest::Response) {
    let ballast = disk.0.path().join("ballast");
    let fill = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M"])
        .arg(format!("of={}", ballast.display()))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!fill.success(), "dd stops when the disk is full");
    let http = reqwest::Client::new();
    loop {
        assert!(
            created.len() < 5000,
            "the disk never filled up for the store"
        );
        let name = format!("fill-{}", created.len());
        let response = http
            .post(format!("{url}{NOTES}"))
            .json(&note(&name, 16 << 10))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            201 => created.push(name),
            _ => return (ballast, response),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_really_full_disk_answers_507_keeps_reads_and_recovers_when_space_returns() {
    let Some(disk) = Tmpfs::mount(64) else {
        eprintln!("not run: mounting a tmpfs needs root (the I/O seam's tests cover the logic)");
        return;
    };
    let data = disk.0.path().join("data");
    let mut server = serve(&data);
    create_crd(&server.url).await;
    let before = write_notes(&server.url, "pre", 20, 1024).await;
    let mut created = before.clone();
    let (ballast, refusal) = fill_up(&disk, &server.url, &mut created).await;
    assert_eq!(refusal.status().as_u16(), 507);
    let body: Value = refusal.json().await.unwrap();
    assert_eq!(body["reason"], "InsufficientStorage", "{body}");
    // Reads are served; readiness says why writes are not.
    let present = names(&server.url).await;
    assert!(lost(&created, &present).is_empty());
    let ready = reqwest::get(format!("{}/readyz", server.url))
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    assert!(ready.text().await.unwrap().contains("out of disk space"));

    // Room again: ready again, writes taken, no restart.
    std::fs::remove_file(&ballast).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = reqwest::get(format!("{}/readyz", server.url))
            .await
            .unwrap();
        if ready.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready again: {}",
            ready.text().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = write_notes(&server.url, "post", 20, 1024).await;
    // And a clean stop leaves store.redb with all of it.
    send(&server, "TERM");
    assert!(wait_exit(&mut server, Duration::from_secs(30)).success());
    assert!(log_files(&data).is_empty(), "{:?}", log_files(&data));
    let restored = restore(&data.join("store.redb"));
    let again = serve(restored.path());
    let present = names(&again.url).await;
    assert!(lost(&created, &present).is_empty());
    assert!(lost(&after, &present).is_empty());
}

/// One backup runs at a time: while one is being sent (its answer not read
/// yet), another is answered 429 with a Retry-After, and once the first
/// answer is dropped the next backup is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_backup_runs_at_a_time_and_the_others_are_told_to_retry() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let http = reqwest::Client::new();
    // More than the answer's buffers hold, so the first stays in progress.
    for i in 0..48 {
        let status = http
            .post(format!("{}{NOTES}", server.url))
            .json(&note(&format!("big-{i}"), 1 << 20))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 201);
    }
    let url = format!("{}/setpoint/v1/backup", server.url);
    let first = http.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let second = http.get(&url).send().await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(
        second.headers()["retry-after"].to_str().unwrap(),
        "10",
        "{:?}",
        second.headers()
    );
    let body: Value = second.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("one runs at a time"),
        "{body}"
    );
    // The first read through: whole, and then the next one is served.
    let bytes = first.bytes().await.unwrap();
    assert!(bytes.len() > 48 << 20, "{} bytes", bytes.len());
    eventually(
        "the next backup served",
        Duration::from_secs(30),
        || async {
            let response = http.get(&url).send().await.unwrap();
            match response.status().as_u16() {
                200 => Ok(()),
                other => Err(format!("{other}")),
            }
        },
    )
    .await;
}

/// Stopped while the disk is full, the host cannot make its final
/// checkpoint: it keeps the log and says so (not "store.redb holds every
/// write"), and the next start, with room again, has every acknowledged
/// write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_on_a_full_disk_keeps_the_log_and_says_so() {
    let Some(disk) = Tmpfs::mount(64) else {
        eprintln!("not run: mounting a tmpfs needs root (the I/O seam's tests cover the logic)");
        return;
    };
    let StoppedFull {
        data,
        ballast,
        created,
        said,
    } = stop_on_a_full_disk(&disk).await;
    assert!(
        said.contains("write-ahead log is kept") && !said.contains("holds every write"),
        "{said}"
    );
    assert!(!log_files(&data).is_empty(), "the log stays");
    std::fs::remove_file(&ballast).unwrap();
    let again = serve(&data);
    let present = names(&again.url).await;
    let missing = lost(&created, &present);
    assert!(missing.is_empty(), "{missing:?}");
}

/// A stop signal at any moment of start-up (the store opening, plugins
/// loading, caches filling, serving) stops the host cleanly: status 0, the
/// store closed with its log folded in, every acknowledged write there at
/// the next start. (Before, a signal before the API listened killed the
/// process uncleanly, and a stop waited for reconciles without a bound.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_at_any_moment_of_start_up_stops_cleanly() {
    let data = tempfile::tempdir().unwrap();
    let plugins = crate::support::plugins_dir(&["replicaset", "podsim"]);
    let start = || {
        let log = std::fs::File::create(data.path().join("serve.log")).unwrap();
        Command::new(setpoint_bin())
            .arg("serve")
            .args(["--addr", "127.0.0.1:0", "--data"])
            .arg(data.path())
            .arg("--plugins")
            .arg(plugins.path())
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    // Some objects to open and cache.
    let mut first = ServeProcess::start([
        std::ffi::OsStr::new("--data"),
        data.path().as_os_str(),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
    ]);
    create_crd(&first.url).await;
    let acked = write_notes(&first.url, "n", 300, 2000).await;
    send(&first, "TERM");
    assert!(wait_exit(&mut first, Duration::from_secs(60)).success());
    drop(first);
    let mut phases = Vec::new();
    for delay in [100, 300, 700, 1500, 3000] {
        let mut child = start();
        std::thread::sleep(Duration::from_millis(delay));
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        let exit = loop {
            if let Some(exit) = child.try_wait().unwrap() {
                break exit;
            }
            assert!(Instant::now() < deadline, "no exit within 60 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(data.path().join("serve.log")).unwrap();
        assert!(exit.success(), "SIGTERM after {delay} ms: {exit:?}\n{log}");
        assert!(
            log.contains("store closed: ") && log.contains("holds every write"),
            "SIGTERM after {delay} ms: the store is closed cleanly\n{log}"
        );
        assert!(
            log_files(data.path()).is_empty(),
            "no log left after {delay} ms"
        );
        let phase = if log.contains("stopping once the store is open") {
            "opening the store"
        } else if log.contains("while starting") {
            "loading plugins"
        } else {
            "serving"
        };
        phases.push((delay, phase));
    }
    eprintln!("stops by phase: {phases:?}");
    let server = serve(data.path());
    let listed = names(&server.url).await;
    assert!(
        acked.iter().all(|n| listed.contains(n)),
        "every acknowledged write is there"
    );
}

/// A host stopped on a full disk (its log kept) starts again on it,
/// read-only: reads are served, writes are answered 507 and `/readyz` is
/// not ready, until space returns, when it takes writes without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_on_a_full_disk_starts_read_only_and_takes_writes_when_space_returns() {
    let Some(disk) = Tmpfs::mount(64) else {
        eprintln!("not run: mounting a tmpfs needs root (the I/O seam's tests cover the logic)");
        return;
    };
    let stopped = stop_on_a_full_disk(&disk).await;
    start_read_only(&stopped.data, &stopped.ballast, &stopped.created).await;
}

/// A host stopped cleanly (no log left), whose disk then filled up to the
/// last byte, starts on it read-only as well: the log makes its first
/// segment only once there is room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_stopped_cleanly_starts_read_only_on_a_disk_that_filled_up_since() {
    let Some(disk) = Tmpfs::mount(64) else {
        eprintln!("not run: mounting a tmpfs needs root (the I/O seam's tests cover the logic)");
        return;
    };
    let data = disk.0.path().join("data");
    let mut server = serve(&data);
    create_crd(&server.url).await;
    let created = write_notes(&server.url, "pre", 20, 1024).await;
    send(&server, "TERM");
    assert!(wait_exit(&mut server, Duration::from_secs(30)).success());
    assert!(
        log_files(&data).is_empty(),
        "a clean stop leaves no log: {:?}",
        log_files(&data)
    );
    let ballast = disk.0.path().join("ballast");
    let fill = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", ballast.display()))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!fill.success(), "dd stops when the disk is full");
    start_read_only(&data, &ballast, &created).await;
}

/// A host stopped by SIGTERM on `disk` once it was full.
struct StoppedFull {
    data: PathBuf,
    /// The file filling the disk.
    ballast: PathBuf,
    /// The notes it acknowledged.
    created: Vec<String>,
    /// What it said on stderr.
    said: String,
}

/// Serve on `disk`, write notes until it is full (507), stop with SIGTERM.
async fn stop_on_a_full_disk(disk: &Tmpfs) -> StoppedFull {
    let data = disk.0.path().join("data");
    let mut server = serve(&data);
    create_crd(&server.url).await;
    let mut created = write_notes(&server.url, "pre", 20, 1024).await;
    let (ballast, refusal) = fill_up(disk, &server.url, &mut created).await;
    assert_eq!(refusal.status().as_u16(), 507);
    send(&server, "TERM");
    assert!(wait_exit(&mut server, Duration::from_secs(30)).success());
    let said = server.log.lock().unwrap().join("\n");
    StoppedFull {
        data,
        ballast,
        created,
        said,
    }
}

/// Start a host on `data` with the disk full (`ballast` filling it): it
/// serves `created` and refuses writes until the ballast goes.
async fn start_read_only(data: &Path, ballast: &Path, created: &[String]) {
    // Start again with the disk still full.
    let again = serve(data);
    let present = names(&again.url).await;
    let missing = lost(created, &present);
    assert!(missing.is_empty(), "reads serve every write: {missing:?}");
    let http = reqwest::Client::new();
    let refused = http
        .post(format!("{}{NOTES}", again.url))
        .json(&note("while-full", 10))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 507);
    let ready = reqwest::get(format!("{}/readyz", again.url)).await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    std::fs::remove_file(ballast).unwrap();
    eventually(
        "writes are taken again",
        Duration::from_secs(20),
        || async {
            let response = reqwest::Client::new()
                .post(format!("{}{NOTES}", again.url))
                .json(&note("after", 10))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            match response.status().as_u16() {
                201 => Ok(()),
                other => Err(format!("status {other}")),
            }
        },
    )
    .await;
    let ready = reqwest::get(format!("{}/readyz", again.url)).await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
}
