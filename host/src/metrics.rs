//! A lock-free latency histogram with client-go's buckets
//! ([`DURATION_BUCKETS_SECONDS`]), for the parts that time their own
//! operations (store requests, plugin calls) and hand the server a
//! [`HistogramSnapshot`] to render. The workqueue keeps its own copy of
//! the same type (`queue::metrics`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::queue::{DURATION_BUCKETS_SECONDS, HistogramSnapshot};

const BUCKETS: usize = DURATION_BUCKETS_SECONDS.len();

/// Durations observed; every update is a few relaxed atomic additions.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Non-cumulative counts per finite bucket.
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum_nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl Histogram {
    /// Record one observation.
    pub(crate) fn observe(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // Compared in whole nanoseconds, so that a bound is inclusive exactly.
        if let Some(i) = DURATION_BUCKETS_SECONDS
            .iter()
            .position(|&bound| nanos <= (bound * 1e9).round() as u64)
        {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    /// The current values, with cumulative buckets (Prometheus `le`).
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = [0; BUCKETS];
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
    fn buckets_are_cumulative_and_count_everything() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(1)); // exactly on a bound
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(20)); // above the last bound: +Inf only
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets, [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(s.max, Duration::from_secs(20));
        assert_eq!(
            s.sum,
            Duration::from_micros(1) + Duration::from_millis(3) + Duration::from_secs(20)
        );
    }
}
