//! The seal of a clean close: an open that finds the file as sealed skips
//! the full check, and every way the file or the seal can differ — a bit
//! flipped in any chunk, a cut, a growth, a damaged or stale seal, a crash
//! at each step of sealing or after an open — sends the open to the full
//! check, which keeps every write.

use std::path::Path;

use super::*;
use crate::store::embedded::EmbeddedBackend;
use crate::store::embedded::fault_tests::crash_copy;
use crate::store::embedded::schema::DB_FILE;
use crate::store::embedded::tests::put;
use crate::store::{Backend, Range};

/// Keys written by [`sealed_store`], each with a value of about 1 KiB.
const KEYS: usize = 3000;

fn value(i: usize) -> String {
    format!("value-{i:05}-").repeat(80)
}

/// A store of [`KEYS`] keys (a file of several MiB), closed cleanly.
async fn sealed_store(dir: &Path) -> std::path::PathBuf {
    let store = EmbeddedBackend::open(dir).unwrap();
    for i in 0..KEYS {
        put(&store, &format!("/k/{i:05}"), &value(i)).await;
    }
    store.close().await.unwrap();
    dir.join(DB_FILE)
}

/// Opens `dir`, checks every key holds what [`sealed_store`] wrote, and
/// returns whether the open trusted the seal.
async fn open_and_read_all(dir: &Path) -> bool {
    let store = EmbeddedBackend::open(dir).unwrap();
    let sealed = store.stats().opened_sealed;
    assert!(
        !dir.join(FILE).exists(),
        "an open store's file has no seal: it may change"
    );
    let all = store
        .range(Range {
            prefix: "/k/".into(),
            ..Range::default()
        })
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), KEYS);
    for (i, kv) in all.kvs.iter().enumerate() {
        assert_eq!(&*kv.value, value(i).as_bytes(), "key {i}");
    }
    store.close().await.unwrap();
    sealed
}

fn mismatch(found: Found) -> String {
    match found {
        Found::Mismatch(why) => why,
        other => panic!("expected a mismatch, found {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_close_seals_the_file_and_the_next_open_trusts_the_seal_and_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    assert!(
        std::fs::metadata(&file).unwrap().len() > 3 * CHUNK,
        "the file spans several chunks"
    );
    assert!(matches!(check(dir.path(), &file), Found::Matches));
    assert!(open_and_read_all(dir.path()).await, "the seal was trusted");
    // The close after that open sealed the file again.
    assert!(matches!(check(dir.path(), &file), Found::Matches));
    assert!(open_and_read_all(dir.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_in_any_chunk_of_a_sealed_file_is_found_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let pristine = std::fs::read(&file).unwrap();
    let len = pristine.len() as u64;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    // Every chunk: its first and last byte and one at random, every bit
    // position once over the three.
    for chunk in 0..chunk_count(len) {
        let start = chunk * CHUNK;
        let end = (start + CHUNK).min(len);
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for (n, at) in [start, end - 1, start + state % (end - start)]
            .into_iter()
            .enumerate()
        {
            let mut bytes = pristine.clone();
            bytes[at as usize] ^= 1 << ((chunk as usize * 3 + n) % 8);
            std::fs::write(&file, &bytes).unwrap();
            let why = mismatch(check(dir.path(), &file));
            assert!(
                why.contains(&format!("bytes {start}..{end} differ")),
                "byte {at}: {why}"
            );
        }
    }
    std::fs::write(&file, &pristine).unwrap();
    assert!(matches!(check(dir.path(), &file), Found::Matches));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_or_grown_file_does_not_match_its_seal_and_is_checked_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let pristine = std::fs::read(&file).unwrap();
    for cut in [0, 1, 4096, pristine.len() / 2, pristine.len() - 1] {
        std::fs::write(&file, &pristine[..cut]).unwrap();
        let why = mismatch(check(dir.path(), &file));
        assert!(why.contains("bytes long"), "{why}");
    }
    // Zeros appended (as a crash while the file grew would leave them):
    // not what was sealed, yet a whole database; the full check opens it.
    let mut grown = pristine.clone();
    grown.extend_from_slice(&[0; 8192]);
    std::fs::write(&file, &grown).unwrap();
    assert!(mismatch(check(dir.path(), &file)).contains("bytes long"));
    assert!(!open_and_read_all(dir.path()).await, "checked in full");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_seal_is_never_trusted_and_the_file_is_checked_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let seal = std::fs::read(dir.path().join(FILE)).unwrap();
    // Every bit of every byte, then every cut.
    for at in 0..seal.len() {
        for bit in 0..8 {
            let mut bytes = seal.clone();
            bytes[at] ^= 1 << bit;
            std::fs::write(dir.path().join(FILE), &bytes).unwrap();
            let why = mismatch(check(dir.path(), &file));
            assert!(
                why.contains("the seal is damaged"),
                "byte {at} bit {bit}: {why}"
            );
        }
    }
    for cut in 0..seal.len() {
        std::fs::write(dir.path().join(FILE), &seal[..cut]).unwrap();
        let why = mismatch(check(dir.path(), &file));
        assert!(why.contains("the seal is damaged"), "cut at {cut}: {why}");
    }
    // A damaged seal opens through the full check, with every write.
    let mut bytes = seal.clone();
    bytes[MAGIC.len() + 20] ^= 0x10;
    std::fs::write(dir.path().join(FILE), &bytes).unwrap();
    assert!(!open_and_read_all(dir.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seal_of_an_earlier_close_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let earlier = std::fs::read(dir.path().join(FILE)).unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    put(&store, "/k/00007", "changed").await;
    store.close().await.unwrap();
    std::fs::write(dir.path().join(FILE), &earlier).unwrap();
    assert!(mismatch(check(dir.path(), &file)).contains("does not match its seal"));
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    assert!(!store.stats().opened_sealed);
    let kv = store.get("/k/00007").await.unwrap().unwrap();
    assert_eq!(&*kv.value, b"changed", "the later close's write is kept");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_step_of_sealing_leaves_no_seal_or_a_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let seal = std::fs::read(dir.path().join(FILE)).unwrap();
    std::fs::remove_file(dir.path().join(FILE)).unwrap();
    // Before the rename: a `.new` cut anywhere, or whole; no seal.
    for cut in [0, 7, seal.len() / 2, seal.len() - 1, seal.len()] {
        std::fs::write(dir.path().join(NEW_FILE), &seal[..cut]).unwrap();
        assert!(matches!(check(dir.path(), &file), Found::Missing));
        assert!(!open_and_read_all(dir.path()).await, "checked in full");
        assert!(
            !dir.path().join(NEW_FILE).exists(),
            "the open removed the half-written seal"
        );
        std::fs::remove_file(dir.path().join(FILE)).unwrap();
    }
    // After the rename: a whole seal, trusted (the close above sealed the
    // file again; that seal is as a crash after the rename leaves it).
    std::fs::write(dir.path().join(FILE), &seal).unwrap();
    assert!(mismatch(check(dir.path(), &file)).contains("does not match"));
    let fresh = Seal::take(&file).unwrap();
    fresh.write(dir.path()).unwrap();
    assert!(open_and_read_all(dir.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_an_open_leaves_no_seal_and_the_next_open_checks_in_full() {
    let dir = tempfile::tempdir().unwrap();
    sealed_store(dir.path()).await;
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    assert!(store.stats().opened_sealed);
    put(&store, "/k/00001", "after the open").await;
    let image = crash_copy(dir.path());
    assert!(
        !image.path().join(FILE).exists(),
        "a crash while open leaves no seal"
    );
    let crashed = EmbeddedBackend::open(image.path()).unwrap();
    assert!(!crashed.stats().opened_sealed, "checked in full");
    let kv = crashed.get("/k/00001").await.unwrap().unwrap();
    assert_eq!(&*kv.value, b"after the open");
    crashed.close().await.unwrap();
    store.close().await.unwrap();
}
