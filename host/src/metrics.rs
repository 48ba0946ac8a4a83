//! The lock-free latency histogram with client-go's buckets
//! ([`DURATION_BUCKETS_SECONDS`]), shared by everything that times its own
//! operations (the workqueues, store requests, plugin calls) and hands the
//! server a [`HistogramSnapshot`] to render. Public as
//! `setpoint::queue::{HistogramSnapshot, DURATION_BUCKETS_SECONDS, BUCKET_COUNT}`,
//! where the workqueue's metrics first exposed them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
