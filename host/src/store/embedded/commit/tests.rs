//! The writer and the applier together: acknowledged writes are visible to
//! every read that starts after the acknowledgement, although the applier
//! commits them to the database later.

use std::sync::Arc;

use crate::store::embedded::EmbeddedBackend;
use crate::store::{Backend, Condition, Range};

fn under(prefix: &str) -> Range {
    Range {
        prefix: prefix.to_owned(),
        ..Range::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_started_after_an_acknowledgement_sees_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
    let mut tasks = Vec::new();
    for writer in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let prefix = format!("/visible/{writer:02}/");
            for i in 0..40 {
                let key = format!("{prefix}{i:03}");
                let written = store
                    .put(&key, vec![i as u8; 512], Condition::Any)
                    .await
                    .unwrap();
                let read = store.get(&key).await.unwrap().expect("acknowledged key");
                assert_eq!(read.mod_revision, written.mod_revision, "{key}");
                assert!(store.current_revision().await.unwrap() >= written.mod_revision);
                let listed = store.range(under(&prefix)).await.unwrap();
                assert_eq!(listed.kvs.len(), i + 1, "{prefix} after {key}");
                assert!(listed.revision >= written.mod_revision);
                // A past revision between the writes of others reads the same.
                let past = store
                    .range(Range {
                        revision: Some(written.mod_revision),
                        ..under(&prefix)
                    })
                    .await
                    .unwrap();
                assert_eq!(
                    past.kvs.len(),
                    i + 1,
                    "{prefix} at {}",
                    written.mod_revision
                );
                if i % 2 == 1 {
                    let deleted = store.delete(&key, Condition::Any).await.unwrap();
                    assert_eq!(deleted.prev.mod_revision, written.mod_revision);
                    assert!(store.get(&key).await.unwrap().is_none(), "{key} deleted");
                    store
                        .put(&key, vec![i as u8; 512], Condition::Any)
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Conditions were decided against writes the database did not hold yet.
    let stats = store.stats();
    assert!(stats.applies <= stats.commits, "{stats:?}");
    store.close().await.unwrap();

    let reopened = EmbeddedBackend::open(dir.path()).unwrap();
    let all = reopened.range(under("/visible/")).await.unwrap();
    assert_eq!(all.kvs.len(), 32 * 40);
    for kv in &all.kvs {
        let i: usize = kv.key.rsplit('/').next().unwrap().parse().unwrap();
        assert_eq!(&*kv.value, vec![i as u8; 512].as_slice(), "{}", kv.key);
        // Even keys were written once, odd ones deleted and created again.
        assert_eq!(kv.create_revision, kv.mod_revision, "{}", kv.key);
    }
    reopened.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_see_writes_the_database_does_not_hold_yet() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
    // Back-to-back conditional updates of one key from many tasks: each
    // succeeds only against the version the previous one left, whether or
    // not the applier has committed it yet.
    let first = store
        .put("/cas", b"0".to_vec(), Condition::Any)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = 0;
            for _ in 0..50 {
                let seen = store.get("/cas").await.unwrap().unwrap();
                let next = (std::str::from_utf8(&seen.value)
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
                    + 1)
                .to_string();
                if store
                    .put(
                        "/cas",
                        next.into_bytes(),
                        Condition::ModRevision(seen.mod_revision),
                    )
                    .await
                    .is_ok()
                {
                    won += 1;
                }
            }
            won
        }));
    }
    let mut won = 0;
    for task in tasks {
        won += task.await.unwrap();
    }
    let last = store.get("/cas").await.unwrap().unwrap();
    assert_eq!(std::str::from_utf8(&last.value).unwrap(), won.to_string());
    assert_eq!(last.create_revision, first.create_revision);
    assert_eq!(last.mod_revision, first.mod_revision + won as i64);
    store.close().await.unwrap();
}
