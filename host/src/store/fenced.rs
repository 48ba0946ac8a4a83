//! `FencedBackend`: a [`Backend`] whose writes all carry one [`Fence`], so
//! code above the store (the object API, controllers) writes fenced without
//! knowing it. Reads pass through unchanged.

use std::sync::Arc;

use async_trait::async_trait;

use super::{
    Backend, Condition, Deleted, Fence, KeyValue, Range, RangeResult, Result, Revision, WatchStream,
};

/// Writes through `inner` only while `fence` holds.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, Error, Fence, FencedBackend, MemoryBackend};
///
/// let fence = Fence { key: "/claims/0".into(), create_revision: 1 };
/// let fenced = FencedBackend::new(Arc::new(MemoryBackend::new()), fence);
/// // Only a backend with leases (etcd) can check a fence.
/// let err = fenced.put("/a", b"1".to_vec(), Condition::Any).await.unwrap_err();
/// assert!(matches!(err, Error::Unsupported(_)));
/// # });
/// ```
pub struct FencedBackend {
    inner: Arc<dyn Backend>,
    fence: Fence,
}

impl FencedBackend {
    /// Fence every write to `inner` with `fence`.
    pub fn new(inner: Arc<dyn Backend>, fence: Fence) -> Self {
        Self { inner, fence }
    }
}

#[async_trait]
impl Backend for FencedBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(key).await
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        self.inner.range(range).await
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        self.inner
            .put_fenced(key, value, condition, &self.fence)
            .await
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        self.inner.delete_fenced(key, condition, &self.fence).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn watch(&self, after: Revision) -> Result<WatchStream> {
        self.inner.watch(after).await
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        fence: &Fence,
    ) -> Result<KeyValue> {
        self.inner.put_fenced(key, value, condition, fence).await
    }

    async fn delete_fenced(
        &self,
        key: &str,
        condition: Condition,
        fence: &Fence,
    ) -> Result<Deleted> {
        self.inner.delete_fenced(key, condition, fence).await
    }

    fn metrics(&self) -> Option<&super::StoreMetrics> {
        self.inner.metrics()
    }

    fn engine_metrics(&self) -> Vec<super::EngineMetric> {
        self.inner.engine_metrics()
    }

    fn version_reader(&self) -> Option<std::sync::Arc<dyn super::VersionReader>> {
        self.inner.version_reader()
    }

    fn writable(&self) -> Result<()> {
        self.inner.writable()
    }

    async fn backup(&self) -> Result<super::Backup> {
        self.inner.backup().await
    }
}
