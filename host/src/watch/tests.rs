//! Tests of the watch hub against a backend whose watch the tests drive.

use std::sync::atomic::AtomicBool;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::*;
use crate::store::{Condition, Deleted, KeyValue, MemoryBackend, Range, RangeResult, WatchStream};

/// A memory store whose first watch breaks after two changes, as a lost
/// connection to etcd would.
struct BreaksOnce {
    inner: MemoryBackend,
    broken: AtomicBool,
}

#[async_trait]
impl Backend for BreaksOnce {
    async fn get(&self, key: &str) -> store::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }
    async fn range(&self, range: Range) -> store::Result<RangeResult> {
        self.inner.range(range).await
    }
    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
    ) -> store::Result<KeyValue> {
        self.inner.put(key, value, condition).await
    }
    async fn delete(&self, key: &str, condition: Condition) -> store::Result<Deleted> {
        self.inner.delete(key, condition).await
    }
    async fn current_revision(&self) -> store::Result<Revision> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: Revision) -> store::Result<()> {
        self.inner.compact(revision).await
    }
    async fn watch(&self, after: Revision) -> store::Result<WatchStream> {
        let mut stream = self.inner.watch(after).await?;
        if self.broken.swap(true, Ordering::SeqCst) {
            return Ok(stream);
        }
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            for _ in 0..2 {
                if let Some(event) = stream.recv().await {
                    let _ = tx.send(event).await;
                }
            }
        });
        Ok(rx)
    }
}

#[tokio::test]
async fn a_broken_store_watch_resumes_where_it_stopped_without_a_gap() {
    let backend = Arc::new(BreaksOnce {
        inner: MemoryBackend::new(),
        broken: AtomicBool::new(false),
    });
    let hub = WatchHub::start(backend.clone(), 64).await.unwrap();
    let mut sub = hub.subscribe("/", 0).unwrap();
    for i in 0..5 {
        let object = format!(r#"{{"metadata":{{"name":"o{i}"}}}}"#);
        backend
            .put(&format!("/o{i}"), object.into_bytes(), Condition::Any)
            .await
            .unwrap();
    }
    for revision in 1..=5 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next())
            .await
            .expect("the hub resumed")
            .expect("no subscriber was cut off: nothing was missed");
        assert_eq!(event.revision, revision);
    }
}

/// Fat changes written and then no more: past the freshness window the
/// history lets them go (down to the small allowance), so the memory they
/// took returns; a subscriber resuming from before them relists.
#[tokio::test(start_paused = true)]
async fn stale_fat_history_is_let_go_after_the_freshness_window() {
    let store = Arc::new(MemoryBackend::new());
    let hub = WatchHub::start(store.clone(), 1024).await.unwrap();
    let fat = format!(r#"{{"blob": "{}"}}"#, "x".repeat(3 << 20)).into_bytes();
    for _ in 0..3 {
        store
            .put("/fat", fat.clone(), Condition::Any)
            .await
            .unwrap();
    }
    hub.wait_for(3).await;
    let one = hub.history_bytes() / 3;
    assert!(one >= fat.len(), "fresh: all kept");
    tokio::time::sleep(super::HISTORY_FRESH + std::time::Duration::from_secs(10)).await;
    assert_eq!(
        hub.history_bytes(),
        one,
        "stale: down to what the allowance of 4 MiB holds (the last)"
    );
    assert!(matches!(
        hub.subscribe("/", 1),
        Err(Error::TooOldResourceVersion { .. })
    ));
    assert_eq!(
        hub.subscribe("/", 2)
            .unwrap()
            .next()
            .await
            .unwrap()
            .revision,
        3
    );
}

/// A subscriber cut off for falling behind is told a starting point it
/// cannot resume from, and the oldest one the hub still holds: never the
/// same revision twice ("too old resource version: 7 (oldest available
/// 7)" read as nonsense).
#[tokio::test]
async fn a_lagging_subscriber_is_told_the_oldest_revision_the_hub_holds() {
    let store = Arc::new(MemoryBackend::new());
    let hub = WatchHub::start(store.clone(), 4).await.unwrap();
    let mut slow = hub.subscribe("/", 0).unwrap();
    for i in 0..12 {
        store
            .put(&format!("/k{i}"), b"{}".to_vec(), Condition::Any)
            .await
            .unwrap();
    }
    hub.wait_for(12).await;
    match slow.next().await {
        Err(Error::TooOldResourceVersion { requested, oldest }) => {
            assert_eq!(requested, 0);
            assert_eq!(oldest, 8, "the hub keeps the last 4 changes: 9..=12");
            assert!(hub.subscribe("/", oldest).is_ok(), "resumable from there");
            assert!(hub.subscribe("/", oldest - 1).is_err());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn held_bytes_counts_decoded_maps_not_stored_bytes() {
    let string = serde_json::json!({"blob": "x".repeat(100_000)});
    let held = super::held_bytes(&string);
    assert!(
        (100_000..102_000).contains(&held),
        "a long string: its length, {held}"
    );
    // What a long managedFields looks like: many small maps.
    let entries: Vec<_> = (0..1000)
        .map(|i| {
            serde_json::json!({"manager": format!("m-{i}"), "operation": "Apply",
            "fieldsV1": {"f:data": {format!("f:key-{i}"): {}}}})
        })
        .collect();
    let managed = serde_json::json!({"metadata": {"managedFields": entries}});
    let stored = serde_json::to_vec(&managed).unwrap().len();
    let held = super::held_bytes(&managed);
    assert!(
        held > 10 * stored,
        "{held} bytes decoded for {stored} stored"
    );
}
