//! `Metered`: a [`Backend`] wrapper that times every operation of the
//! backend it wraps, by operation, the way kube-apiserver's
//! `etcd_request_duration_seconds` does, and counts the ones that failed.
//! A failed precondition ([`Error::Conflict`]), a delete of a missing key
//! ([`Error::NotFound`]) or a write refused by its fence
//! ([`Error::Fenced`]) is an answer, not a failure, so it is not counted as
//! an error. Fenced writes (etcd transactions) are timed apart from plain
//! ones. Owns the counters; rendering them is the server's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;

use super::{
    Backend, Condition, Deleted, EngineMetric, Error, Fence, KeyValue, Range, RangeResult, Result,
    Revision, WatchStream,
};
use crate::metrics::Histogram;
use crate::queue::HistogramSnapshot;

/// The backend operations, in the order [`StoreMetrics::snapshot`] lists them.
pub const OPERATIONS: [&str; 9] = [
    "get",
    "range",
    "put",
    "delete",
    "current_revision",
    "compact",
    "watch",
    "put_fenced",
    "delete_fenced",
];

#[derive(Debug, Default)]
struct Operation {
    latency: Histogram,
    errors: AtomicU64,
}

/// Latencies and failures of a backend's operations.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    operations: [Operation; OPERATIONS.len()],
}

/// One operation's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationSnapshot {
    /// The operation, one of [`OPERATIONS`].
    pub operation: &'static str,
    /// How long each call took (for `watch`, until the stream was set up).
    pub latency: HistogramSnapshot,
    /// Calls that failed (conflicts and missing keys excepted).
    pub errors: u64,
}

impl StoreMetrics {
    /// Every operation's numbers, in the order of [`OPERATIONS`].
    pub fn snapshot(&self) -> Vec<OperationSnapshot> {
        OPERATIONS
            .iter()
            .zip(&self.operations)
            .map(|(name, op)| OperationSnapshot {
                operation: name,
                latency: op.latency.snapshot(),
                errors: op.errors.load(Ordering::Relaxed),
            })
            .collect()
    }

    fn record<T>(&self, index: usize, started: Instant, result: &Result<T>) {
        let op = &self.operations[index];
        op.latency.observe(started.elapsed());
        if matches!(
            result,
            Err(e) if !matches!(
                e,
                Error::Conflict { .. } | Error::NotFound { .. } | Error::Fenced { .. }
            )
        ) {
            op.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A backend whose operations are timed and counted (see the module docs).
///
/// ```
/// # tokio_test_block_on(async {
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, MemoryBackend, Metered};
/// let store = Metered::new(Arc::new(MemoryBackend::new()));
/// store.put("/a", b"1".to_vec(), Condition::Absent).await.unwrap();
/// let put = &store.metrics().unwrap().snapshot()[2];
/// assert_eq!((put.operation, put.latency.count), ("put", 1));
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
pub struct Metered {
    inner: Arc<dyn Backend>,
    metrics: StoreMetrics,
}

impl Metered {
    /// Time and count every operation of `inner`.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            metrics: StoreMetrics::default(),
        }
    }
}

#[async_trait]
impl Backend for Metered {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let started = Instant::now();
        let result = self.inner.get(key).await;
        self.metrics.record(0, started, &result);
        result
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        let started = Instant::now();
        let result = self.inner.range(range).await;
        self.metrics.record(1, started, &result);
        result
    }

    async fn range_written(
        &self,
        range: Range,
        write: Arc<crate::store::WriteVersion>,
    ) -> Result<crate::store::WrittenRange> {
        let started = Instant::now();
        let result = self.inner.range_written(range, write).await;
        self.metrics.record(1, started, &result);
        result
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        let started = Instant::now();
        let result = self.inner.put(key, value, condition).await;
        self.metrics.record(2, started, &result);
        result
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        let started = Instant::now();
        let result = self.inner.delete(key, condition).await;
        self.metrics.record(3, started, &result);
        result
    }

    async fn current_revision(&self) -> Result<Revision> {
        let started = Instant::now();
        let result = self.inner.current_revision().await;
        self.metrics.record(4, started, &result);
        result
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.compact(revision).await;
        self.metrics.record(5, started, &result);
        result
    }

    async fn watch(&self, after: Revision) -> Result<WatchStream> {
        let started = Instant::now();
        let result = self.inner.watch(after).await;
        self.metrics.record(6, started, &result);
        result
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        fence: &Fence,
    ) -> Result<KeyValue> {
        let started = Instant::now();
        let result = self.inner.put_fenced(key, value, condition, fence).await;
        self.metrics.record(7, started, &result);
        result
    }

    async fn delete_fenced(
        &self,
        key: &str,
        condition: Condition,
        fence: &Fence,
    ) -> Result<Deleted> {
        let started = Instant::now();
        let result = self.inner.delete_fenced(key, condition, fence).await;
        self.metrics.record(8, started, &result);
        result
    }

    fn metrics(&self) -> Option<&StoreMetrics> {
        Some(&self.metrics)
    }

    fn engine_metrics(&self) -> Vec<EngineMetric> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryBackend;

    #[tokio::test]
    async fn every_operation_is_timed_and_only_real_failures_count_as_errors() {
        let store = Metered::new(Arc::new(MemoryBackend::new()));
        store
            .put("/a", b"1".to_vec(), Condition::Absent)
            .await
            .unwrap();
        // A failed precondition and a missing key are answers, not failures.
        assert!(
            store
                .put("/a", b"2".to_vec(), Condition::Absent)
                .await
                .is_err()
        );
        assert!(store.delete("/nope", Condition::Any).await.is_err());
        store.get("/a").await.unwrap();
        store
            .range(Range {
                prefix: "/".into(),
                ..Range::default()
            })
            .await
            .unwrap();
        store.compact(1).await.unwrap();
        // Reading below the compaction point is a failure.
        assert!(
            store
                .range(Range {
                    prefix: "/".into(),
                    revision: Some(1),
                    ..Range::default()
                })
                .await
                .is_err()
        );
        let _watch = store.watch(1).await.unwrap();
        // Fenced writes reach the wrapped backend (which, without leases,
        // cannot do them: a real failure).
        let fence = Fence {
            key: "/claim".into(),
            create_revision: 1,
        };
        assert!(matches!(
            store
                .put_fenced("/b", b"1".to_vec(), Condition::Any, &fence)
                .await,
            Err(Error::Unsupported(_))
        ));
        let snapshot = store.metrics().unwrap().snapshot();
        let counts: Vec<(&str, u64, u64)> = snapshot
            .iter()
            .map(|o| (o.operation, o.latency.count, o.errors))
            .collect();
        assert_eq!(
            counts,
            [
                ("get", 1, 0),
                ("range", 2, 1),
                ("put", 2, 0),
                ("delete", 1, 0),
                ("current_revision", 0, 0),
                ("compact", 1, 0),
                ("watch", 1, 0),
                ("put_fenced", 1, 1),
                ("delete_fenced", 0, 0),
            ]
        );
        assert!(MemoryBackend::new().metrics().is_none());
    }
}
