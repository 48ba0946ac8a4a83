//! The seal and its journal: an open after a clean close or a crash finds
//! the file as sealed but for the blocks recorded since, and skips the
//! full check; every way the file, the seal or the journal can differ — a
//! bit flipped in any block not written since, a cut, a growth, a damaged
//! or stale seal, a damaged journal — sends the open to the full check,
//! which keeps every write, and the open seals the file anew.

use std::os::unix::fs::FileExt;
use std::path::Path;

use super::journal::FILES;
use super::*;
use crate::store::embedded::EmbeddedBackend;
use crate::store::embedded::fault_tests::crash_copy;
use crate::store::embedded::schema::DB_FILE;
use crate::store::embedded::tests::put;
use crate::store::{Backend, Error, Range};

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
/// returns whether the open trusted the seal. The open seals the file
/// anew: a second look finds it matching.
async fn open_and_read_all(dir: &Path) -> bool {
    let store = EmbeddedBackend::open(dir).unwrap();
    let sealed = store.stats().opened_sealed;
    assert!(
        matches!(check(dir, &dir.join(DB_FILE)), Found::Matches(_)),
        "an open seals the file as it found it"
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

fn matches(found: Found) -> Verified {
    match found {
        Found::Matches(verified) => verified,
        other => panic!("expected a match, found {other:?}"),
    }
}

/// Flips `bit` of the byte at `at` in `file`, in place.
fn flip(file: &Path, at: u64, bit: u32) {
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut byte = [0u8];
    handle.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= 1 << bit;
    handle.write_all_at(&byte, at).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_close_seals_the_file_and_every_open_verifies_it_instead_of_the_full_check() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    assert!(
        std::fs::metadata(&file).unwrap().len() > 40 * BLOCK,
        "the file spans many blocks"
    );
    assert_eq!(
        matches(check(dir.path(), &file)).written(),
        0,
        "closed: nothing written since"
    );
    assert!(open_and_read_all(dir.path()).await, "the seal was trusted");
    // The close after that open sealed the file again.
    assert_eq!(matches(check(dir.path(), &file)).written(), 0);
    assert!(open_and_read_all(dir.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_in_any_block_of_a_sealed_file_is_found_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let len = std::fs::metadata(&file).unwrap().len();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    // Every block: its first and last byte and one at random, every bit
    // position once over the three.
    for block in 0..block_count(len) {
        let start = block * BLOCK;
        let end = (start + BLOCK).min(len);
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for (n, at) in [start, end - 1, start + state % (end - start)]
            .into_iter()
            .enumerate()
        {
            let bit = ((block as usize * 3 + n) % 8) as u32;
            flip(&file, at, bit);
            let why = mismatch(check(dir.path(), &file));
            assert!(
                why.contains(&format!("bytes {start}..{end} differ")),
                "byte {at}: {why}"
            );
            flip(&file, at, bit);
        }
    }
    matches(check(dir.path(), &file));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_or_grown_file_the_journal_does_not_explain_is_checked_in_full() {
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
async fn a_damaged_seal_is_never_trusted_and_the_open_seals_the_file_anew() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let seal = std::fs::read(dir.path().join(FILE)).unwrap();
    // Every bit of the header and of a stretch of CRCs, then every cut.
    for at in (0..seal.len()).filter(|&at| at < 64 || at % 97 == 0 || at >= seal.len() - 8) {
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
    for cut in (0..seal.len()).filter(|&cut| cut < 64 || cut % 101 == 0 || cut >= seal.len() - 8) {
        std::fs::write(dir.path().join(FILE), &seal[..cut]).unwrap();
        let why = mismatch(check(dir.path(), &file));
        assert!(why.contains("the seal is damaged"), "cut at {cut}: {why}");
    }
    // A damaged seal opens through the full check, with every write, and
    // the open leaves a seal that holds.
    let mut bytes = seal.clone();
    bytes[MAGIC.len() + 30] ^= 0x10;
    std::fs::write(dir.path().join(FILE), &bytes).unwrap();
    assert!(!open_and_read_all(dir.path()).await);
    assert!(open_and_read_all(dir.path()).await, "sealed anew");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seal_of_an_earlier_generation_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let file = sealed_store(dir.path()).await;
    let earlier = std::fs::read(dir.path().join(FILE)).unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    put(&store, "/k/00007", "changed").await;
    store.close().await.unwrap();
    // The journal's records of that generation are gone with the seals
    // after it.
    std::fs::write(dir.path().join(FILE), &earlier).unwrap();
    assert!(mismatch(check(dir.path(), &file)).contains("does not match its seal"));
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    assert!(!store.stats().opened_sealed);
    let kv = store.get("/k/00007").await.unwrap().unwrap();
    assert_eq!(&*kv.value, b"changed", "the later close's write is kept");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_the_open_verifies_every_block_not_written_since_the_seal() {
    let dir = tempfile::tempdir().unwrap();
    sealed_store(dir.path()).await;
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    assert!(store.stats().opened_sealed);
    put(&store, "/k/00001", "after the open").await;
    let image = crash_copy(dir.path());
    let file = image.path().join(DB_FILE);
    let verified = matches(check(image.path(), &file));
    let len = std::fs::metadata(&file).unwrap().len();
    assert!(
        verified.written() < block_count(len) / 4,
        "few blocks written since the seal: {} of {}",
        verified.written(),
        block_count(len)
    );
    // A bit flipped in any block not written since is found.
    for block in (0..block_count(len)).filter(|&b| !verified.written.contains(b)) {
        let at = block * BLOCK + (block * 7919) % BLOCK.min(len - block * BLOCK);
        flip(&file, at, (block % 8) as u32);
        let why = mismatch(check(image.path(), &file));
        assert!(why.contains("not written since"), "block {block}: {why}");
        flip(&file, at, (block % 8) as u32);
    }
    let crashed = EmbeddedBackend::open(image.path()).unwrap();
    assert!(crashed.stats().opened_sealed, "verified by its seal");
    let kv = crashed.get("/k/00001").await.unwrap().unwrap();
    assert_eq!(&*kv.value, b"after the open");
    crashed.close().await.unwrap();
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_is_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    sealed_store(dir.path()).await;
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    put(&store, "/k/00002", "after the open").await;
    let image = crash_copy(dir.path());
    store.close().await.unwrap();
    let file = image.path().join(DB_FILE);
    let (name, journal) = FILES
        .iter()
        .map(|name| (*name, std::fs::read(image.path().join(name)).unwrap()))
        .find(|(_, bytes)| !bytes.is_empty())
        .expect("the writes after the open were recorded");
    matches(check(image.path(), &file));
    for at in 0..journal.len() {
        for bit in 0..8 {
            let mut bytes = journal.clone();
            bytes[at] ^= 1 << bit;
            std::fs::write(image.path().join(name), &bytes).unwrap();
            let why = mismatch(check(image.path(), &file));
            assert!(why.contains("journal"), "byte {at} bit {bit}: {why}");
        }
    }
    for cut in [1, journal.len() - 1] {
        std::fs::write(image.path().join(name), &journal[..cut]).unwrap();
        assert!(mismatch(check(image.path(), &file)).contains("not a whole number"));
    }
    // Records lost (as a power loss may lose them): the blocks they named
    // differ unexplained.
    std::fs::write(image.path().join(name), b"").unwrap();
    assert!(mismatch(check(image.path(), &file)).contains("does not match its seal"));
    let crashed = EmbeddedBackend::open(image.path()).unwrap();
    assert!(!crashed.stats().opened_sealed, "checked in full");
    let kv = crashed.get("/k/00002").await.unwrap().unwrap();
    assert_eq!(&*kv.value, b"after the open");
    crashed.close().await.unwrap();
}

/// A crash at any moment of a write load crossing many checkpoints (each
/// followed by a seal on the sealer's thread): every image opens verified
/// by its seal, with every acknowledged write. Also a half-written seal
/// beside is ignored and removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_moment_of_the_sealing_cycle_is_verified_by_the_seal_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open_checkpointing_every(dir.path(), 32 << 10).unwrap();
    let mut written = 0;
    for round in 0..30 {
        for _ in 0..(round % 4) * 20 + 1 {
            put(&store, &format!("/k/{written:05}"), &value(written)).await;
            written += 1;
        }
        // A copy is file by file, not one instant: a checkpoint that
        // lets go of a log segment between the database's copy and the
        // log's leaves an image no crash makes (the database names a
        // segment the copy lacks). Such a copy is taken again.
        let mut attempts = 0;
        let (image, crashed) = loop {
            let image = crash_copy(dir.path());
            if round % 5 == 0 {
                std::fs::write(image.path().join(NEW_FILE), b"setpoint-seal 2\n half").unwrap();
            }
            match EmbeddedBackend::open(image.path()) {
                Ok(crashed) => break (image, crashed),
                Err(Error::Corrupt(why)) if why.contains(".log is missing") && attempts < 5 => {
                    attempts += 1;
                }
                Err(err) => panic!("round {round}: {err}"),
            }
        };
        assert!(
            crashed.stats().opened_sealed,
            "round {round}: verified by its seal"
        );
        assert!(!image.path().join(NEW_FILE).exists());
        let all = crashed
            .range(Range {
                prefix: "/k/".into(),
                ..Range::default()
            })
            .await
            .unwrap();
        assert_eq!(all.kvs.len(), written, "round {round}");
        crashed.close().await.unwrap();
    }
    assert!(
        store.stats().checkpoints > 10,
        "the load crossed many checkpoints"
    );
    store.close().await.unwrap();
}
