//! Tests of the rate limiters: the delays they compute, and their waits on
//! paused time.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn backoff_doubles_per_failure_per_key_and_resets_after_forget() {
    let b = ExponentialBackoff::new(ms(5), Duration::from_secs(1000));
    let delays: Vec<_> = (0..5).map(|_| b.when(&"a")).collect();
    assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40), ms(80)]);
    assert_eq!(b.num_requeues(&"a"), 5);

    assert_eq!(b.when(&"b"), ms(5), "keys back off independently");
    assert_eq!(b.num_requeues(&"b"), 1);

    b.forget(&"a");
    assert_eq!(b.num_requeues(&"a"), 0);
    assert_eq!(b.when(&"a"), ms(5));
    assert_eq!(b.num_requeues(&"b"), 1, "forget only resets its own key");
}

#[test]
fn backoff_is_capped_at_max_and_never_overflows() {
    let max = Duration::from_secs(1000);
    let b = ExponentialBackoff::new(ms(5), max);
    assert_eq!(b.nominal_delay(17), Duration::from_millis(655_360));
    assert_eq!(b.nominal_delay(18), max);
    assert_eq!(b.nominal_delay(127), max);
    assert_eq!(b.nominal_delay(u32::MAX), max);
    let last = (0..300).map(|_| b.when(&1)).last();
    assert_eq!(last, Some(max));
    assert_eq!(b.num_requeues(&1), 300);
}

#[test]
fn backoff_with_huge_bounds_stays_exact() {
    let b = ExponentialBackoff::<u8>::new(Duration::new(3, 7), Duration::MAX);
    assert_eq!(b.nominal_delay(0), Duration::new(3, 7));
    assert_eq!(b.nominal_delay(10), Duration::new(3 * 1024, 7 * 1024));
    assert_eq!(b.nominal_delay(100), Duration::MAX);
}

#[test]
fn jitter_only_shortens_delays_within_the_factor() {
    let b = ExponentialBackoff::new(ms(5), Duration::from_secs(1000))
        .with_jitter(0.5)
        .with_seed(7);
    let mut jittered = 0;
    for n in 0..40 {
        let nominal = b.nominal_delay(n);
        let delay = b.when(&"k");
        assert!(delay <= nominal, "{delay:?} above nominal {nominal:?}");
        assert!(delay >= nominal / 2, "{delay:?} below half of {nominal:?}");
        if delay != nominal {
            jittered += 1;
        }
    }
    assert!(jittered > 30, "jitter should vary almost every delay");
}

#[test]
fn full_jitter_stays_above_zero_and_below_nominal() {
    let b = ExponentialBackoff::new(ms(5), Duration::from_secs(1000))
        .with_jitter(1.0)
        .with_seed(1);
    for n in 0..40 {
        let nominal = b.nominal_delay(n);
        let delay = b.when(&"k");
        assert!(delay > Duration::ZERO && delay <= nominal);
    }
}

#[test]
fn a_seeded_jitter_is_reproducible() {
    let run = || {
        let b = ExponentialBackoff::new(ms(5), Duration::from_secs(1000))
            .with_jitter(0.3)
            .with_seed(42);
        (0..20).map(|_| b.when(&0)).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn jitter_factor_is_clamped() {
    let b = ExponentialBackoff::<u8>::new(ms(1), ms(1)).with_jitter(7.0);
    assert_eq!(b.jitter, 1.0);
    let b = b.with_jitter(-1.0);
    assert_eq!(b.jitter, 0.0);
    let b = b.with_jitter(f64::NAN);
    assert_eq!(b.jitter, 0.0);
    assert_eq!(b.when(&0), ms(1));
}

#[tokio::test(start_paused = true)]
async fn token_bucket_allows_the_burst_then_spaces_reservations_by_its_rate() {
    let bucket = TokenBucket::new(10.0, 3);
    let when = || RateLimiter::<()>::when(&bucket, &());
    assert_eq!([when(), when(), when()], [Duration::ZERO; 3]);
    assert_eq!(when(), ms(100));
    assert_eq!(when(), ms(200));

    tokio::time::advance(Duration::from_secs(1)).await;
    // Refilled to the burst, not beyond: 10 tokens accrued but only 3 fit.
    assert_eq!([when(), when(), when()], [Duration::ZERO; 3]);
    assert_eq!(when(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn token_bucket_refills_gradually() {
    let bucket = TokenBucket::new(2.0, 1);
    let when = || RateLimiter::<()>::when(&bucket, &());
    assert_eq!(when(), Duration::ZERO);
    assert_eq!(when(), ms(500));
    tokio::time::advance(ms(250)).await;
    // The outstanding reservation still has 250 ms to go; this one queues behind it.
    assert_eq!(when(), ms(750));
}

#[tokio::test(start_paused = true)]
async fn token_bucket_edge_rates() {
    let unlimited = TokenBucket::new(f64::INFINITY, 1);
    for _ in 0..1000 {
        assert_eq!(RateLimiter::<()>::when(&unlimited, &()), Duration::ZERO);
    }
    let frozen = TokenBucket::new(0.0, 0);
    assert_eq!(RateLimiter::<()>::when(&frozen, &()), Duration::ZERO);
    assert_eq!(RateLimiter::<()>::when(&frozen, &()), FAR_FUTURE);
    let nan = TokenBucket::new(f64::NAN, 1);
    assert_eq!(RateLimiter::<()>::when(&nan, &()), Duration::ZERO);
    assert_eq!(RateLimiter::<()>::when(&nan, &()), FAR_FUTURE);
    assert_eq!(RateLimiter::<()>::num_requeues(&nan, &()), 0);
}

#[tokio::test(start_paused = true)]
async fn max_of_returns_the_longest_delay_and_forgets_everywhere() {
    let limiter = MaxOf::new(vec![])
        .with(ExponentialBackoff::new(ms(5), Duration::from_secs(1000)))
        .with(TokenBucket::new(1.0, 2));
    assert_eq!(limiter.when(&"a"), ms(5));
    assert_eq!(limiter.when(&"a"), ms(10));
    // The bucket is empty now and dominates the 20 ms backoff.
    assert_eq!(limiter.when(&"a"), Duration::from_secs(1));
    assert_eq!(limiter.num_requeues(&"a"), 3);
    limiter.forget(&"a");
    assert_eq!(limiter.num_requeues(&"a"), 0);
}

#[test]
fn a_retry_that_must_not_escalate_repeats_the_latest_delay() {
    let b = ExponentialBackoff::new(ms(5), Duration::from_secs(1000));
    assert_eq!(b.when_again(&"a"), ms(5), "a first failure counts");
    assert_eq!(b.when(&"a"), ms(10));
    assert_eq!(b.when_again(&"a"), ms(10));
    assert_eq!(b.when_again(&"a"), ms(10));
    assert_eq!(b.num_requeues(&"a"), 2);
    let limiter = MaxOf::new(vec![]).with(b);
    assert_eq!(limiter.when_again(&"a"), ms(10));
    assert_eq!(limiter.num_requeues(&"a"), 2);
}

#[test]
fn an_empty_max_of_never_delays() {
    let limiter = MaxOf::<u8>::new(Vec::new());
    assert_eq!(limiter.when(&1), Duration::ZERO);
    assert_eq!(limiter.num_requeues(&1), 0);
}

#[test]
fn shared_limiters_can_be_used_through_arc_and_box() {
    let shared = Arc::new(ExponentialBackoff::new(ms(1), ms(100)));
    let boxed: Box<dyn RateLimiter<u8>> = Box::new(Arc::clone(&shared));
    assert_eq!(boxed.when(&1), ms(1));
    assert_eq!(shared.num_requeues(&1), 1);
    boxed.forget(&1);
    assert_eq!(shared.num_requeues(&1), 0);
}
