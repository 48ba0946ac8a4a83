//! The saved version index: its encoding, every way the file can be
//! damaged or outdated (each refused and the index rebuilt), a crash at
//! each step of a save, and that an index read from the file plus the
//! changes after it answers every read as the rebuilt one does.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::store::embedded::EmbeddedBackend;
use crate::store::embedded::fault_tests::crash_copy;
use crate::store::embedded::tests::put;
use crate::store::{Backend, Condition, Range};

fn history() -> History {
    let mut history = History::default();
    for i in 0..300 {
        history.record(&format!("/registry/pods/default/web-{i:04}"), 1 + i, false);
    }
    history.record("/registry/pods/default/web-0007", 400, false);
    history.record("/registry/pods/default/web-0008", 401, true);
    history.record("/a", 402, false);
    history.record("/registry/pods/default/web-0007", 403, false);
    history
}

fn stamp() -> Stamp {
    Stamp {
        revision: 403,
        cleaned: 12,
        entry_crc: 0xdead_beef,
    }
}

#[test]
fn an_index_decodes_to_itself() {
    let history = history();
    let bytes = encode(&history, &stamp());
    let (read, decoded) = decode(&bytes).unwrap();
    assert_eq!(read, stamp());
    assert_eq!(decoded.encode(), history.encode());
    assert_eq!(decoded.len(), history.len());
    let key = "/registry/pods/default/web-0007";
    assert_eq!(decoded.at(key, 402), history.at(key, 402));
    assert_eq!(decoded.between(key, ..).collect::<Vec<_>>(), [8, 400, 403]);
    assert!(
        decoded
            .at("/registry/pods/default/web-0008", 401)
            .unwrap()
            .deleted
    );
    // Shared prefixes are written once.
    assert!(bytes.len() < 300 * 12, "{} bytes", bytes.len());
}

/// Every cut and every flipped bit is refused, or reads as a file of
/// another state (another stamp), which the open compares with the
/// database and refuses.
#[test]
fn every_cut_and_every_flipped_bit_is_refused_or_names_another_state() {
    let bytes = encode(&history(), &stamp());
    for cut in 0..bytes.len() {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} accepted");
    }
    for bit in 0..bytes.len() * 8 {
        let mut damaged = bytes.clone();
        damaged[bit / 8] ^= 1 << (bit % 8);
        if let Ok((read, _)) = decode(&damaged) {
            assert_ne!(read, stamp(), "bit {bit} flipped unnoticed");
        }
    }
}

#[test]
fn bodies_out_of_order_or_past_their_bounds_are_refused() {
    let mut body = Vec::new();
    for key in ["/b", "/a"] {
        put_test_key(&mut body, key, &[1]);
    }
    assert!(History::decode(&body).unwrap_err().contains("out of order"));
    let mut body = Vec::new();
    put_test_key(&mut body, "/a", &[5, 3]);
    assert!(History::decode(&body).unwrap_err().contains("out of order"));
    let mut body = Vec::new();
    put_test_key(&mut body, "/a", &[]);
    assert!(History::decode(&body).is_err(), "a key without versions");
    // A count far past the bytes left is refused before anything is made.
    let body = [0, 2, b'/', b'a', 0xff, 0xff, 0xff, 0xff, 0x0f];
    assert!(History::decode(&body).is_err());
}

/// One key of a body as `History::encode` writes it (no prefix shared
/// with the key before; small numbers, one byte each).
fn put_test_key(out: &mut Vec<u8>, key: &str, revisions: &[i64]) {
    out.extend_from_slice(&[0, key.len() as u8]);
    out.extend_from_slice(key.as_bytes());
    out.push(revisions.len() as u8);
    // Zigzag: a positive revision r is 2r.
    out.extend(revisions.iter().map(|r| (2 * r) as u8));
}

/// Every key and value at every revision the store still reads, and how
/// many versions its index holds: what the index answers.
async fn reads(store: &EmbeddedBackend) -> (Vec<Vec<(String, Vec<u8>, Revision)>>, u64) {
    let current = store.current_revision().await.unwrap();
    let mut all = Vec::new();
    for revision in 1..=current {
        let range = Range {
            prefix: "/".into(),
            revision: Some(revision),
            ..Range::default()
        };
        match store.range(range).await {
            Ok(found) => all.push(
                found
                    .kvs
                    .into_iter()
                    .map(|kv| (kv.key, kv.value.to_vec(), kv.mod_revision))
                    .collect(),
            ),
            Err(crate::store::Error::Compacted { .. }) => all.push(Vec::new()),
            Err(err) => panic!("read at {revision}: {err}"),
        }
    }
    (all, store.stats().versions)
}

/// Writes that leave several versions per key, deletions among them.
async fn churn(store: &EmbeddedBackend, round: usize) {
    for i in 0..40 {
        put(store, &format!("/k/{i:03}"), &format!("v{round}-{i}")).await;
    }
    for i in (0..40).step_by(7) {
        store
            .delete(&format!("/k/{i:03}"), Condition::Any)
            .await
            .unwrap();
    }
    put(store, &format!("/round/{round}"), "x").await;
}

fn saved_stamp(dir: &Path) -> Option<Stamp> {
    decode(&std::fs::read(dir.join(FILE)).ok()?)
        .ok()
        .map(|(s, _)| s)
}

/// Waits until the directory's index file is `bytes`: what an open that
/// refused the file does (it rebuilds the index and saves it again).
async fn rewritten_to(dir: &Path, bytes: &[u8]) -> bool {
    for _ in 0..100 {
        if std::fs::read(dir.join(FILE)).is_ok_and(|found| found == bytes) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The index read from the file a clean close saved, plus the changes
/// made after it until a crash, answers every read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_index_and_the_changes_after_it_answer_as_the_store_did() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    churn(&store, 0).await;
    let closed_at = store.current_revision().await.unwrap();
    store.close().await.unwrap();
    let saved = saved_stamp(dir.path()).expect("a clean close saves the index");
    assert_eq!(saved.revision, closed_at);

    let store = EmbeddedBackend::open(dir.path()).unwrap();
    assert_eq!(saved_stamp(dir.path()), Some(saved), "used, not rewritten");
    churn(&store, 1).await;
    churn(&store, 2).await;
    let expected = reads(&store).await;
    // Killed now: the file is of the first close; the changes after it
    // are in the database and the log.
    let crashed = crash_copy(dir.path());
    store.close().await.unwrap();
    assert_eq!(saved_stamp(crashed.path()), Some(saved));
    let reopened = EmbeddedBackend::open(crashed.path()).unwrap();
    assert_eq!(reads(&reopened).await, expected);
    reopened.close().await.unwrap();

    // The same with the index rebuilt from nothing.
    let rebuilt = crash_copy(dir.path());
    std::fs::remove_file(rebuilt.path().join(FILE)).unwrap();
    let store = EmbeddedBackend::open(rebuilt.path()).unwrap();
    assert_eq!(reads(&store).await, expected);
    store.close().await.unwrap();
}

/// A cleanup removes versions: an index saved before it (a close whose
/// save failed, say, on a full disk) is refused, the index rebuilt and
/// saved again; else it would hold versions the database no longer has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_saved_before_a_cleanup_is_refused_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    churn(&store, 0).await;
    churn(&store, 1).await;
    store.close().await.unwrap();
    let before = std::fs::read(dir.path().join(FILE)).unwrap();

    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let point = store.current_revision().await.unwrap() - 10;
    store.compact(point).await.unwrap();
    let expected = reads(&store).await;
    store.close().await.unwrap();
    let after = std::fs::read(dir.path().join(FILE)).unwrap();
    assert_eq!(decode(&after).unwrap().0.cleaned, point);
    assert!(
        decode(&after).unwrap().1.len() < decode(&before).unwrap().1.len(),
        "the cleanup removed versions"
    );

    std::fs::write(dir.path().join(FILE), &before).unwrap();
    let reopened = EmbeddedBackend::open(dir.path()).unwrap();
    assert!(
        rewritten_to(dir.path(), &after).await,
        "refused, rebuilt and saved again"
    );
    assert_eq!(reads(&reopened).await, expected);
    reopened.close().await.unwrap();
}

/// Damaged, cut short, another database's, or ahead of the database (a
/// directory restored from an older backup): each refused, the index
/// rebuilt from the stored changes and saved again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_foreign_or_future_index_is_refused_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    churn(&store, 0).await;
    let expected = reads(&store).await;
    let revision = store.current_revision().await.unwrap();
    store.close().await.unwrap();
    let good = std::fs::read(dir.path().join(FILE)).unwrap();

    let other = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(other.path()).unwrap();
    for i in 0..revision {
        put(&store, &format!("/other/{i}"), "o").await;
    }
    store.close().await.unwrap();
    let foreign = std::fs::read(other.path().join(FILE)).unwrap();

    let (stamp, history) = decode(&good).unwrap();
    let future = encode(
        &history,
        &Stamp {
            revision: stamp.revision + 5,
            ..stamp
        },
    );
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    let cut = good[..good.len() / 2].to_vec();

    for (what, bytes) in [
        ("flipped", flipped),
        ("cut", cut),
        ("foreign", foreign),
        ("future", future),
    ] {
        std::fs::write(dir.path().join(FILE), &bytes).unwrap();
        let store = EmbeddedBackend::open(dir.path()).unwrap();
        assert!(
            rewritten_to(dir.path(), &good).await,
            "{what}: not refused and rebuilt"
        );
        assert_eq!(reads(&store).await, expected, "{what}");
        store.close().await.unwrap();
    }
}

/// A crash at each step of a save: before the rename the new file is
/// beside (never read) and the old one stands; after it the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_step_of_a_save_leaves_the_old_index_or_the_new() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    churn(&store, 0).await;
    store.close().await.unwrap();
    let old = std::fs::read(dir.path().join(FILE)).unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    churn(&store, 1).await;
    let expected = reads(&store).await;
    store.close().await.unwrap();
    let new = std::fs::read(dir.path().join(FILE)).unwrap();
    assert_ne!(old, new);

    // Killed while writing beside: any prefix of the new file there.
    for cut in [0, 7, new.len() / 2, new.len()] {
        let image = crash_copy(dir.path());
        std::fs::write(image.path().join(FILE), &old).unwrap();
        std::fs::write(image.path().join(NEW_FILE), &new[..cut]).unwrap();
        let store = EmbeddedBackend::open(image.path()).unwrap();
        assert_eq!(reads(&store).await, expected, "torn beside at {cut}");
        store.close().await.unwrap();
    }
    // Killed after the rename.
    let image = crash_copy(dir.path());
    let store = EmbeddedBackend::open(image.path()).unwrap();
    assert_eq!(reads(&store).await, expected);
    store.close().await.unwrap();
}

/// A running store saves its index once idle after a cleanup (or many
/// changes), durably with the database it describes: an open after a
/// crash then reads it as it is, and answers every read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_saved_while_idle_is_read_by_the_open_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    churn(&store, 0).await;
    churn(&store, 1).await;
    let point = store.current_revision().await.unwrap() - 10;
    store.compact(point).await.unwrap();
    let mut saved = None;
    for _ in 0..200 {
        saved = saved_stamp(dir.path()).filter(|stamp| stamp.cleaned == point);
        if saved.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let saved = saved.expect("saved once idle after the cleanup, without a close");
    assert_eq!(saved.revision, store.current_revision().await.unwrap());
    let expected = reads(&store).await;
    let bytes = std::fs::read(dir.path().join(FILE)).unwrap();

    let crashed = crash_copy(dir.path());
    store.close().await.unwrap();
    let reopened = EmbeddedBackend::open(crashed.path()).unwrap();
    assert_eq!(reads(&reopened).await, expected);
    assert_eq!(
        std::fs::read(crashed.path().join(FILE)).unwrap(),
        bytes,
        "read as it is, not refused and rebuilt"
    );
    reopened.close().await.unwrap();
}
