//! Work queue metrics: lock-free counters and duration histograms (the
//! shared [`Histogram`] of `crate::metrics`), and the snapshot type that
//! exposes them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::metrics::Histogram;
pub use crate::metrics::{BUCKET_COUNT, DURATION_BUCKETS_SECONDS, HistogramSnapshot};

/// Prometheus metric names matching client-go's `workqueue` metrics, one per [`MetricsSnapshot`] field.
///
/// Every metric is labelled with `name` = [`MetricsSnapshot::name`] in client-go.
pub mod names {
    /// Gauge, [`MetricsSnapshot::depth`](super::MetricsSnapshot::depth).
    pub const DEPTH: &str = "workqueue_depth";
    /// Counter, [`MetricsSnapshot::adds_total`](super::MetricsSnapshot::adds_total).
    pub const ADDS_TOTAL: &str = "workqueue_adds_total";
    /// Histogram in seconds, [`MetricsSnapshot::queue_duration`](super::MetricsSnapshot::queue_duration).
    pub const QUEUE_DURATION_SECONDS: &str = "workqueue_queue_duration_seconds";
    /// Histogram in seconds, [`MetricsSnapshot::work_duration`](super::MetricsSnapshot::work_duration).
    pub const WORK_DURATION_SECONDS: &str = "workqueue_work_duration_seconds";
    /// Counter, [`MetricsSnapshot::retries_total`](super::MetricsSnapshot::retries_total).
    pub const RETRIES_TOTAL: &str = "workqueue_retries_total";
    /// Gauge in seconds, [`MetricsSnapshot::unfinished_work`](super::MetricsSnapshot::unfinished_work).
    pub const UNFINISHED_WORK_SECONDS: &str = "workqueue_unfinished_work_seconds";
    /// Gauge in seconds, [`MetricsSnapshot::longest_running_processor`](super::MetricsSnapshot::longest_running_processor).
    pub const LONGEST_RUNNING_PROCESSOR_SECONDS: &str =
        "workqueue_longest_running_processor_seconds";
}

/// A point-in-time copy of a queue's metrics, returned by [`WorkQueue::metrics`](super::WorkQueue::metrics).
///
/// Counters and histograms are read individually without a common lock, so fields may be
/// mutually off by in-flight operations; gauges are computed together under the queue lock.
///
/// ```
/// use setpoint::queue::{Config, WorkQueue};
/// let queue = WorkQueue::new(Config::named("pods"));
/// queue.add("a");
/// let _a = queue.try_get();
/// let metrics = queue.metrics();
/// assert_eq!((metrics.depth, metrics.in_flight), (0, 1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// The queue's name ([`Config::name`](super::Config::name)), the `name` label in client-go.
    pub name: String,
    /// `workqueue_depth`: keys waiting to be handed out by `get` — the ready keys plus keys that
    /// were re-added while being processed. Delayed keys are not counted (as in client-go).
    pub depth: usize,
    /// Keys waiting for a delayed or rate-limited add to become ready (no client-go equivalent).
    pub delayed: usize,
    /// Keys currently handed out by `get` and not yet `done` (no client-go equivalent).
    pub in_flight: usize,
    /// `workqueue_adds_total`: adds that were not deduplicated, i.e. that made a key pending.
    pub adds_total: u64,
    /// `workqueue_retries_total`: `add_rate_limited` calls made while the queue was running.
    /// (client-go counts every `AddAfter`; plain `add_after` calls are not retries here.)
    pub retries_total: u64,
    /// `workqueue_queue_duration_seconds`: time from a key becoming pending (ready, or re-added
    /// while processing) until `get` hands it out.
    pub queue_duration: HistogramSnapshot,
    /// `workqueue_work_duration_seconds`: time from `get` handing a key out until its `done`.
    pub work_duration: HistogramSnapshot,
    /// `workqueue_unfinished_work_seconds`: sum over in-flight keys of the time since `get`.
    pub unfinished_work: Duration,
    /// `workqueue_longest_running_processor_seconds`: the largest time since `get` among
    /// in-flight keys.
    pub longest_running_processor: Duration,
}

/// Gauges computed from the queue state under its lock.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Gauges {
    pub(super) depth: usize,
    pub(super) delayed: usize,
    pub(super) in_flight: usize,
    pub(super) unfinished_work: Duration,
    pub(super) longest_running_processor: Duration,
}

/// The counters and histograms a queue updates as it runs.
#[derive(Debug, Default)]
pub(super) struct Metrics {
    adds: AtomicU64,
    retries: AtomicU64,
    pub(super) queue_duration: Histogram,
    pub(super) work_duration: Histogram,
}

impl Metrics {
    pub(super) fn record_add(&self) {
        self.adds.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self, name: &str, gauges: Gauges) -> MetricsSnapshot {
        MetricsSnapshot {
            name: name.to_owned(),
            depth: gauges.depth,
            delayed: gauges.delayed,
            in_flight: gauges.in_flight,
            adds_total: self.adds.load(Ordering::Relaxed),
            retries_total: self.retries.load(Ordering::Relaxed),
            queue_duration: self.queue_duration.snapshot(),
            work_duration: self.work_duration.snapshot(),
            unfinished_work: gauges.unfinished_work,
            longest_running_processor: gauges.longest_running_processor,
        }
    }
}
