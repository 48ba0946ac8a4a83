//! Work queue metrics: lock-free counters and duration histograms, and the snapshot type that exposes them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

/// Number of finite histogram buckets.
pub const BUCKET_COUNT: usize = 10;

/// Upper bounds (inclusive, in seconds) of the duration histogram buckets: 10 ns to 10 s in
/// powers of ten, the same as client-go's `ExponentialBuckets(10e-9, 10, 10)`.
pub const DURATION_BUCKETS_SECONDS: [f64; BUCKET_COUNT] =
    [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// [`DURATION_BUCKETS_SECONDS`] in nanoseconds.
const BUCKET_BOUNDS_NANOS: [u64; BUCKET_COUNT] = [
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// A point-in-time copy of a duration histogram.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use setpoint::queue::{Config, WorkQueue};
/// let queue = WorkQueue::new(Config::default());
/// queue.add("k");
/// let k = queue.get().await.unwrap();
/// queue.done(&k);
/// let work = queue.metrics().work_duration;
/// assert_eq!(work.count, 1);
/// assert_eq!(*work.buckets.last().unwrap(), 1, "cumulative: every bucket up to the last counts it");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// Number of observations (the Prometheus `_count`, and the `+Inf` bucket).
    pub count: u64,
    /// Sum of all observations (the Prometheus `_sum`).
    pub sum: Duration,
    /// Largest single observation (not exported by client-go; handy for tests and logs).
    pub max: Duration,
    /// Cumulative bucket counts: `buckets[i]` is the number of observations less than or equal
    /// to [`DURATION_BUCKETS_SECONDS`]`[i]` (Prometheus `le` semantics).
    pub buckets: [u64; BUCKET_COUNT],
}

impl HistogramSnapshot {
    /// Mean observation, or `None` if nothing was observed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::HistogramSnapshot;
    /// let h = HistogramSnapshot { count: 2, sum: Duration::from_millis(30), ..Default::default() };
    /// assert_eq!(h.mean(), Some(Duration::from_millis(15)));
    /// assert_eq!(HistogramSnapshot::default().mean(), None);
    /// ```
    #[must_use]
    pub fn mean(&self) -> Option<Duration> {
        let count = u32::try_from(self.count).ok().filter(|&c| c > 0)?;
        Some(self.sum / count)
    }
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

/// Lock-free duration histogram with the buckets of [`DURATION_BUCKETS_SECONDS`].
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Non-cumulative counts per finite bucket; observations above the last bound only count in `count`.
    buckets: [AtomicU64; BUCKET_COUNT],
    count: AtomicU64,
    sum_nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub(crate) fn observe(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        if let Some(i) = BUCKET_BOUNDS_NANOS.iter().position(|&bound| nanos <= bound) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Copies the current values, turning bucket counts cumulative.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = [0; BUCKET_COUNT];
        let mut running = 0;
        for (out, bucket) in buckets.iter_mut().zip(&self.buckets) {
            running += bucket.load(Ordering::Relaxed);
            *out = running;
        }
        HistogramSnapshot {
            count: self.count.load(Ordering::Relaxed),
            sum: Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)),
            max: Duration::from_nanos(self.max_nanos.load(Ordering::Relaxed)),
            buckets,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_inclusive_upper_bounds() {
        let h = Histogram::default();
        h.observe(Duration::from_nanos(10)); // exactly on the first bound
        h.observe(Duration::from_nanos(50));
        h.observe(Duration::from_secs(2));
        h.observe(Duration::from_secs(20)); // above the last bound: +Inf only
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets, [1, 2, 2, 2, 2, 2, 2, 2, 2, 3]);
        assert_eq!(s.sum, Duration::from_nanos(22_000_000_060));
        assert_eq!(s.max, Duration::from_secs(20));
        assert_eq!(s.mean(), Some(Duration::from_nanos(5_500_000_015)));
    }

    #[test]
    fn an_empty_histogram_has_no_mean() {
        let s = Histogram::default().snapshot();
        assert_eq!(s, HistogramSnapshot::default());
        assert_eq!(s.mean(), None);
    }

    #[test]
    fn bucket_bounds_in_nanos_match_the_published_seconds() {
        for (nanos, secs) in BUCKET_BOUNDS_NANOS.iter().zip(DURATION_BUCKETS_SECONDS) {
            assert_eq!(Duration::from_nanos(*nanos), Duration::from_secs_f64(secs));
        }
    }
}
