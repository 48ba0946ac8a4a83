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
