//! The lock-free latency histogram with client-go's buckets
//! ([`DURATION_BUCKETS_SECONDS`](crate::queue::DURATION_BUCKETS_SECONDS)),
//! for the parts that time their own operations (store requests, plugin
//! calls) and hand the server a
//! [`HistogramSnapshot`](crate::queue::HistogramSnapshot) to render. It is
//! the workqueue's own histogram, shared rather than copied.

pub(crate) use crate::queue::Histogram;

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
