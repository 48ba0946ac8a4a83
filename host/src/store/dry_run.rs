//! `DryRunBackend`: a [`Backend`] that answers every write as the inner
//! backend would at this moment (the same condition checks, the same
//! conflicts and not-founds) and writes nothing. Reads pass through.
//!
//! This is what makes server-side dry run (`dryRun=All`) exact by
//! construction: the object API runs its whole write path — validation,
//! defaulting, admission, preconditions, finalizers, the size and depth
//! limits — over this backend, so the answer is the one the real write would
//! give, while no revision moves and no watcher sees an event.

use std::sync::Arc;

use async_trait::async_trait;

use super::{
    Backend, Condition, Deleted, Error, Fence, KeyValue, Range, RangeResult, Result, Revision,
    WatchStream,
};

/// Checks writes against `inner` without making them.
///
/// A put answers with the key's current revisions (0 for a key that does
/// not exist yet): nothing was written, so no new revision exists to report.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, DryRunBackend, Error, MemoryBackend};
///
/// let store = Arc::new(MemoryBackend::new());
/// store.put("/a", b"1".to_vec(), Condition::Absent).await.unwrap();
/// let dry = DryRunBackend::new(store.clone());
///
/// // The same answers as the real store …
/// let err = dry.put("/a", b"2".to_vec(), Condition::Absent).await.unwrap_err();
/// assert!(matches!(err, Error::Conflict { .. }));
/// let kv = dry.put("/a", b"2".to_vec(), Condition::ModRevision(1)).await.unwrap();
/// assert_eq!((&*kv.value, kv.mod_revision), (&b"2"[..], 1));
/// assert!(matches!(dry.delete("/b", Condition::Any).await, Err(Error::NotFound { .. })));
/// dry.delete("/a", Condition::Any).await.unwrap();
///
/// // … and nothing written.
/// assert_eq!(store.current_revision().await.unwrap(), 1);
/// assert_eq!(&*store.get("/a").await.unwrap().unwrap().value, b"1");
/// # });
/// ```
pub struct DryRunBackend {
    inner: Arc<dyn Backend>,
}

impl DryRunBackend {
    /// Answer writes as `inner` would, without writing.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self { inner }
    }

    async fn check_put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        // A store that cannot take writes (a full disk) refuses the dry run
        // as it would refuse the write.
        self.inner.writable()?;
        let current = self.inner.get(key).await?;
        condition.check(key, current.as_ref().map(|kv| kv.mod_revision))?;
        Ok(KeyValue {
            key: key.to_owned(),
            value: value.into(),
            create_revision: current.as_ref().map_or(0, |kv| kv.create_revision),
            mod_revision: current.as_ref().map_or(0, |kv| kv.mod_revision),
        })
    }

    async fn check_delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        self.inner.writable()?;
        let current = self.inner.get(key).await?;
        // The order the backends check in: the condition, then existence.
        condition.check(key, current.as_ref().map(|kv| kv.mod_revision))?;
        let Some(prev) = current else {
            return Err(Error::NotFound {
                key: key.to_owned(),
            });
        };
        Ok(Deleted {
            revision: prev.mod_revision,
            prev,
        })
    }
}

#[async_trait]
impl Backend for DryRunBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(key).await
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        self.inner.range(range).await
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        self.check_put(key, value, condition).await
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        self.check_delete(key, condition).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compact(&self, _revision: Revision) -> Result<()> {
        // Compaction is maintenance, never part of a request's answer.
        Ok(())
    }

    async fn watch(&self, after: Revision) -> Result<WatchStream> {
        self.inner.watch(after).await
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        _fence: &Fence,
    ) -> Result<KeyValue> {
        self.check_put(key, value, condition).await
    }

    async fn delete_fenced(
        &self,
        key: &str,
        condition: Condition,
        _fence: &Fence,
    ) -> Result<Deleted> {
        self.check_delete(key, condition).await
    }

    fn metrics(&self) -> Option<&super::StoreMetrics> {
        self.inner.metrics()
    }

    fn engine_metrics(&self) -> Vec<super::EngineMetric> {
        self.inner.engine_metrics()
    }

    fn writable(&self) -> Result<()> {
        self.inner.writable()
    }

    async fn backup(&self) -> Result<super::Backup> {
        // A backup only reads.
        self.inner.backup().await
    }
}
