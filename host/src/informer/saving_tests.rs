//! Tests of an informer's saved cache (`saving`, `cache/saved.rs`): a
//! start from it holds what a list would, with the changes made while no
//! informer ran; a file that is damaged, cut, of another store, ahead of
//! the store or older than its compaction is never trusted (the informer
//! lists), and a save torn by a crash leaves a file that is whole or
//! refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::read_back_tests::names;
use super::*;
use crate::object::ObjectKey;
use crate::store::EmbeddedBackend;

async fn open(dir: &Path) -> (Api, Arc<KindInfo>) {
    let store = EmbeddedBackend::open(dir).unwrap();
    let api = Api::open(Arc::new(store)).await.unwrap();
    let kind = api.kinds().by_plural("", "events").unwrap();
    (api, kind)
}

fn saved_file(dir: &Path) -> PathBuf {
    dir.join("informers").join("v1.Event")
}

/// An event with a label, an owner and, for some, a `Ready` condition
/// that is not `True`.
fn event(i: usize, app: &str) -> Object {
    let mut event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("e{i}"), "namespace": if i.is_multiple_of(4) { "other" } else { "default" },
            "labels": {"app": app, "tier": format!("t{}", i % 2)},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "o", "uid": format!("o{}", i % 3)}]},
        "count": i});
    if i.is_multiple_of(5) {
        event["status"] = json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": if i.is_multiple_of(10) { "HotLoop" } else { "Failing" },
            "lastTransitionTime": "2026-11-28T10:00:00Z"}]});
    }
    event
}

/// Everything an informer answers, in an order that does not depend on
/// its maps.
fn answers(informer: &Informer) -> Vec<String> {
    let mut answers: Vec<String> = informer
        .list(None)
        .iter()
        .map(|o| serde_json::to_string(&**o).unwrap())
        .collect();
    for namespace in ["default", "other"] {
        answers.push(format!(
            "ns {namespace}: {:?}",
            names(&informer.list(Some(namespace)))
        ));
    }
    for owner in ["o0", "o1", "o2"] {
        answers.push(format!(
            "owner {owner}: {:?}",
            names(&informer.owned_by(owner))
        ));
    }
    for (label, value) in [
        ("app", "web"),
        ("app", "db"),
        ("app", "moved"),
        ("tier", "t0"),
        ("tier", "t1"),
    ] {
        answers.push(format!(
            "{label}={value}: {:?}",
            names(&informer.with_label(label, value))
        ));
    }
    let mut not_ready: Vec<String> = informer
        .not_ready()
        .iter()
        .map(|(key, n)| format!("{key} {n:?}"))
        .collect();
    not_ready.sort();
    answers.extend(not_ready);
    answers.sort();
    answers
}

/// An informer that saves a cache of any size, synced.
async fn informer(api: &Api, kind: &Arc<KindInfo>) -> Informer {
    let informer = Informer::start(api.clone(), kind.clone());
    informer
        .inner
        .save_from
        .store(1, std::sync::atomic::Ordering::Relaxed);
    informer.wait_synced().await;
    informer
}

fn restored(informer: &Informer) -> bool {
    informer
        .inner
        .restored
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits until `file` holds a save at `revision` or later; its bytes.
async fn wait_for_save(file: &Path, revision: i64) -> Vec<u8> {
    for _ in 0..200 {
        if let Ok(bytes) = std::fs::read(file)
            && bytes.len() > 28
        {
            let saved = i64::from_le_bytes(bytes[20..28].try_into().unwrap());
            if saved >= revision {
                return bytes;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} was not saved at {revision}", file.display());
}

/// Waits until the history after `revision` is held for a reader.
async fn wait_for_hold(api: &Api, revision: i64) {
    for _ in 0..200 {
        if api.history_held_after() == Some(revision) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "history held after {:?}, not {revision}",
        api.history_held_after()
    );
}

/// Puts `bytes` where a store in `dir` keeps the Events' saved cache.
fn place_saved(dir: &Path, bytes: &[u8]) {
    let file = saved_file(dir);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, bytes).unwrap();
}

/// What an informer that lists (nothing saved) answers over `api`.
async fn listed_answers(api: &Api, kind: &Arc<KindInfo>, file: &Path) -> Vec<String> {
    let kept = std::fs::read(file).ok();
    let _ = std::fs::remove_file(file);
    let listing = Informer::start(api.clone(), kind.clone());
    listing.wait_synced().await;
    assert!(!restored(&listing));
    let answers = answers(&listing);
    drop(listing);
    if let Some(kept) = kept {
        std::fs::write(file, kept).unwrap();
    }
    answers
}

async fn fill(api: &Api, kind: &KindInfo, n: usize) {
    for i in 0..n {
        let app = if i % 2 == 0 { "web" } else { "db" };
        api.create(kind, event(i, app)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_cache_stands_for_the_first_list_with_the_changes_made_since() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kind) = open(dir.path()).await;
    fill(&api, &kind, 60).await;
    let first = informer(&api, &kind).await;
    assert!(!restored(&first), "nothing saved yet: it lists");
    assert!(
        !first.not_ready().is_empty(),
        "the readiness index is exercised"
    );
    let revision = api.current_revision().await.unwrap();
    wait_for_save(&saved_file(dir.path()), revision).await;
    // The save holds the history after it back from the compactor.
    wait_for_hold(&api, revision).await;
    let before = answers(&first);
    drop(first);

    // Restored as it was; the start that read the file holds its history
    // too (the file stays at its revision until the next save).
    api.release_history(&super::saving::holder(&saved_file(dir.path())));
    let second = informer(&api, &kind).await;
    assert!(restored(&second));
    assert_eq!(answers(&second), before);
    assert_eq!(api.history_held_after(), Some(revision));
    drop(second);

    // Changes while no informer ran: an update moving index entries, a
    // deletion, a creation, a status that turns Ready.
    let mut moved = event(7, "moved");
    moved["metadata"]["ownerReferences"][0]["uid"] = json!("o0");
    api.update(&kind, moved).await.unwrap();
    api.delete(&kind, Some("default"), "e6", &Default::default())
        .await
        .unwrap();
    api.create(&kind, event(100, "web")).await.unwrap();
    let mut ready = event(15, "db");
    ready["status"]["conditions"][0]["status"] = json!("True");
    api.update(&kind, ready).await.unwrap();
    // Writes of another kind in between are skipped.
    let secrets = api.kinds().by_plural("", "secrets").unwrap();
    api.create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"}}),
    )
    .await
    .unwrap();

    let third = informer(&api, &kind).await;
    assert!(restored(&third), "caught up from the store's history");
    let listed = listed_answers(&api, &kind, &saved_file(dir.path())).await;
    assert_eq!(answers(&third), listed, "what a list would hold");
    assert_ne!(answers(&third), before);

    // And it follows the watch from there.
    api.create(&kind, event(101, "web")).await.unwrap();
    let last = api.current_revision().await.unwrap();
    assert!(third.wait_for_revision(last, Duration::from_secs(5)).await);
    assert_eq!(third.len(), 61);
    assert!(
        third
            .get(&ObjectKey::new(Some("default"), "e101"))
            .is_some()
    );

    // Removals leave slots free in its table: the file numbers the
    // objects it holds, and a start from it holds what a list would.
    for name in ["e9", "e21", "e33"] {
        api.delete(&kind, Some("default"), name, &Default::default())
            .await
            .unwrap();
    }
    let last = api.current_revision().await.unwrap();
    assert!(third.wait_for_revision(last, Duration::from_secs(5)).await);
    wait_for_save(&saved_file(dir.path()), last).await;
    drop(third);
    let fourth = informer(&api, &kind).await;
    assert!(restored(&fourth));
    assert_eq!(fourth.len(), 58);
    let listed = listed_answers(&api, &kind, &saved_file(dir.path())).await;
    assert_eq!(answers(&fourth), listed);
}

/// A kind that does not change in a store that does: its file is saved
/// again at the revision the informer delivered through once the store
/// moved far enough past it, so that the next start has only the changes
/// after that to read through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_cache_is_saved_again_once_the_store_moved_far_past_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kind) = open(dir.path()).await;
    fill(&api, &kind, 30).await;
    let first = informer(&api, &kind).await;
    let revision = api.current_revision().await.unwrap();
    wait_for_save(&saved_file(dir.path()), revision).await;
    let before = answers(&first);
    drop(first);
    let secrets = api.kinds().by_plural("", "secrets").unwrap();
    for i in 0..12 {
        api.create(
            &secrets,
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("s{i}"), "namespace": "default"}}),
        )
        .await
        .unwrap();
    }
    let later = api.current_revision().await.unwrap();
    assert_eq!(later, revision + 12);
    let second = informer(&api, &kind).await;
    // Lowered before the first save falls due (the kind quiet for 2 s).
    second
        .inner
        .resave_behind
        .store(10, std::sync::atomic::Ordering::Relaxed);
    assert!(restored(&second));
    assert_eq!(answers(&second), before, "no Event changed");
    // Saved again at the store's revision, though no Event changed.
    wait_for_save(&saved_file(dir.path()), later).await;
    wait_for_hold(&api, later).await;
    drop(second);
    let third = informer(&api, &kind).await;
    assert!(restored(&third));
    assert_eq!(answers(&third), before);
}

/// A store of 12 Events whose informer saved its cache: the store, the
/// kind, the file, its bytes and what the informer answered.
async fn twelve_saved(dir: &Path) -> (Api, Arc<KindInfo>, PathBuf, Vec<u8>, Vec<String>) {
    let (api, kind) = open(dir).await;
    fill(&api, &kind, 12).await;
    let first = informer(&api, &kind).await;
    let revision = api.current_revision().await.unwrap();
    let file = saved_file(dir);
    let whole = wait_for_save(&file, revision).await;
    let expected = answers(&first);
    drop(first);
    (api, kind, file, whole, expected)
}

/// Asserts that an informer started now does not trust the file in place
/// (`how` it was made) and answers `expected`, as a list does.
async fn lists_instead(api: &Api, kind: &Arc<KindInfo>, expected: &[String], how: &str) {
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;
    assert!(!restored(&informer), "{how}: trusted");
    assert_eq!(answers(&informer), expected, "{how}: listed instead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_cut_saved_cache_is_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kind, file, whole, expected) = twelve_saved(dir.path()).await;

    let mut damaged: Vec<(String, Vec<u8>)> = Vec::new();
    for at in 0..whole.len() {
        for bit in [0, 3, 7] {
            let mut bytes = whole.clone();
            bytes[at] ^= 1 << bit;
            damaged.push((format!("bit {bit} of byte {at} flipped"), bytes));
        }
    }
    for len in (0..whole.len()).step_by(3) {
        damaged.push((format!("cut at {len}"), whole[..len].to_vec()));
    }
    let mut longer = whole.clone();
    longer.extend_from_slice(b"more");
    damaged.push(("bytes after its end".into(), longer));
    for (how, bytes) in damaged {
        std::fs::write(&file, &bytes).unwrap();
        lists_instead(&api, &kind, &expected, &how).await;
    }

    // A save torn by a crash before its rename leaves the last file whole.
    std::fs::write(&file, &whole).unwrap();
    std::fs::write(file.with_extension("new"), &whole[..whole.len() / 2]).unwrap();
    let after_torn = informer(&api, &kind).await;
    assert!(restored(&after_torn), "the whole file beside a torn one");
    assert_eq!(answers(&after_torn), expected);
}

/// A file whole by its CRC that names one object twice (no save writes
/// one; a bug or a hand-made file would) is not trusted: two slots for
/// one key would leave one of them unreachable yet indexed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_cache_naming_an_object_twice_is_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kind, file, whole, expected) = twelve_saved(dir.path()).await;

    // `e1` renamed `e2` (both in `default`), the CRC made right again.
    const MAGIC: usize = b"setpoint-informer 1\n".len();
    const HEADER: usize = 36;
    let mut bytes = whole.clone();
    let body = MAGIC + HEADER + 4;
    let at = bytes[body..]
        .windows(3)
        .position(|w| w == b"\x02e1")
        .expect("e1 in the body")
        + body;
    bytes[at + 2] = b'2';
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[MAGIC..MAGIC + HEADER]);
    crc.update(&bytes[body..]);
    bytes[MAGIC + HEADER..body].copy_from_slice(&crc.finalize().to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    lists_instead(&api, &kind, &expected, "a file naming e2 twice").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_cache_of_another_store_ahead_or_behind_compaction_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let (api, kind) = open(dir.path()).await;
    fill(&api, &kind, 20).await;
    let first = informer(&api, &kind).await;
    let revision = api.current_revision().await.unwrap();
    let saved = wait_for_save(&saved_file(dir.path()), revision).await;
    drop(first);

    // Another store with the same objects written in the same order
    // (other uids and times): only the stamp's bytes tell it apart.
    let other = tempfile::tempdir().unwrap();
    let (other_api, _) = open(other.path()).await;
    fill(&other_api, &kind, 20).await;
    place_saved(other.path(), &saved);
    let foreign = informer(&other_api, &kind).await;
    assert!(!restored(&foreign), "another store's cache");
    let uid = |informer: &Informer| {
        informer
            .get(&ObjectKey::new(Some("default"), "e1"))
            .unwrap()["metadata"]["uid"]
            .clone()
    };
    let theirs = other_api.get(&kind, Some("default"), "e1").await.unwrap();
    assert_eq!(uid(&foreign), theirs["metadata"]["uid"], "its own objects");
    drop(foreign);

    // A store behind the file (restored from an older backup).
    let behind = tempfile::tempdir().unwrap();
    let (behind_api, _) = open(behind.path()).await;
    fill(&behind_api, &kind, 5).await;
    place_saved(behind.path(), &saved);
    let ahead = informer(&behind_api, &kind).await;
    assert!(!restored(&ahead), "a cache ahead of the store");
    assert_eq!(ahead.len(), 5);
    drop(ahead);

    // History compacted past the file: it cannot catch up.
    api.delete(&kind, Some("default"), "e1", &Default::default())
        .await
        .unwrap();
    let now = api.current_revision().await.unwrap();
    api.compact(now).await.unwrap();
    let compacted = informer(&api, &kind).await;
    assert!(!restored(&compacted), "older than the compaction");
    assert_eq!(compacted.len(), 19);
    assert!(
        compacted
            .get(&ObjectKey::new(Some("default"), "e1"))
            .is_none()
    );
}
