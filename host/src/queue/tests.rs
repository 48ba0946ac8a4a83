//! Behavioural tests of [`WorkQueue`], run on tokio's paused clock.

use std::collections::HashSet;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::task::{JoinHandle, yield_now};
use tokio::time::{Instant, advance};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Default settings without jitter, so delays are exact.
fn config() -> Config {
    Config {
        jitter: 0.0,
        ..Config::named("test")
    }
}

fn queue() -> WorkQueue<u32> {
    WorkQueue::new(config())
}

/// Polls a future once without a real waker.
fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// Lets spawned tasks run until they block; yields never advance the paused clock.
async fn settle() {
    for _ in 0..10 {
        yield_now().await;
    }
}

/// Awaits `fut`, failing instead of hanging if it can never complete: on the paused clock
/// the timeout fires as soon as nothing else can make progress.
async fn finish<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(secs(24 * 60 * 60), fut)
        .await
        .expect("never completed: a wake-up was lost")
}

fn spawn_get(q: &WorkQueue<u32>) -> JoinHandle<Option<u32>> {
    let q = q.clone();
    tokio::spawn(async move { q.get().await })
}

/// Takes every ready key, marking each done.
fn drain_ready(q: &WorkQueue<u32>) -> Vec<u32> {
    std::iter::from_fn(|| {
        let key = q.try_get()?;
        q.done(&key);
        Some(key)
    })
    .collect()
}

/// A limiter with a fixed delay that counts its calls.
#[derive(Debug, Default)]
struct FixedDelay {
    delay: Duration,
    calls: AtomicU32,
    forgotten: AtomicU32,
}

impl RateLimiter<u32> for FixedDelay {
    fn when(&self, _key: &u32) -> Duration {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.delay
    }
    fn forget(&self, _key: &u32) {
        self.forgotten.fetch_add(1, Ordering::SeqCst);
    }
    fn num_requeues(&self, _key: &u32) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

// ---- deduplication, FIFO, exclusive processing ----

#[tokio::test(start_paused = true)]
async fn adding_a_ready_key_again_queues_it_only_once() {
    let q = queue();
    q.add(1);
    q.add(1);
    q.add(2);
    q.add(1);
    assert_eq!(q.len(), 2);
    assert_eq!(drain_ready(&q), [1, 2]);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn ready_keys_are_handed_out_in_fifo_order() {
    let q = queue();
    for key in [5, 3, 9, 1, 7] {
        q.add(key);
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(finish(q.get()).await.unwrap());
    }
    assert_eq!(got, [5, 3, 9, 1, 7]);
}

#[tokio::test(start_paused = true)]
async fn a_requeued_key_goes_to_the_back_of_the_queue() {
    let q = queue();
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    q.add(1);
    q.add(2);
    q.add(3);
    q.done(&1);
    assert_eq!(drain_ready(&q), [2, 3, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_key_being_processed_is_not_handed_out_again_until_done() {
    let q = queue();
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    q.add(1);
    q.add(1);
    assert_eq!(q.try_get(), None, "key 1 is still being processed");
    assert_eq!(q.len(), 0);

    q.done(&1);
    assert_eq!(q.try_get(), Some(1), "re-added key is requeued on done");
    q.done(&1);
    assert_eq!(q.try_get(), None, "and handed out exactly once more");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_getter_receives_a_re_added_key_only_after_done() {
    let q = queue();
    q.add(1);
    assert_eq!(finish(q.get()).await, Some(1));
    let getter = spawn_get(&q);
    settle().await;
    q.add(1);
    settle().await;
    assert!(
        !getter.is_finished(),
        "key 1 must not be handed out while processing"
    );
    q.done(&1);
    assert_eq!(finish(getter).await.unwrap(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn done_for_a_key_not_being_processed_is_ignored() {
    let q = queue();
    q.done(&4);
    q.add(4);
    q.done(&4); // queued, not processing
    assert_eq!(q.len(), 1);
    assert_eq!(q.try_get(), Some(4));
    q.done(&4);
    q.done(&4);
    assert_eq!(q.try_get(), None);
    assert_eq!(q.metrics().work_duration.count, 1);
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_queue() {
    let q = queue();
    let other = q.clone();
    other.add(8);
    assert_eq!(q.try_get(), Some(8));
    other.done(&8);
    assert_eq!(q.metrics().work_duration.count, 1);
    other.shutdown();
    assert!(q.is_shutting_down());
}

#[tokio::test(start_paused = true)]
async fn each_added_key_wakes_a_waiting_getter() {
    let q = queue();
    let getters: Vec<_> = (0..3).map(|_| spawn_get(&q)).collect();
    settle().await;
    for key in [1, 2, 3] {
        q.add(key);
    }
    let mut got = Vec::new();
    for getter in getters {
        got.push(finish(getter).await.unwrap().unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_notified_get_passes_the_key_to_another_getter() {
    let q = queue();
    let mut first = Box::pin(q.get());
    assert!(poll_once(first.as_mut()).is_pending());
    let second = spawn_get(&q);
    settle().await;
    q.add(5); // wakes the longest waiter: `first`
    drop(first);
    assert_eq!(finish(second).await.unwrap(), Some(5));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_get_loses_no_key() {
    let q = queue();
    let timed_out = tokio::time::timeout(secs(1), q.get()).await;
    assert!(timed_out.is_err());
    q.add(3);
    assert_eq!(finish(q.get()).await, Some(3));
}

/// Random adds from a producer and several workers; checks that no key is ever held by two
/// workers at once and that every add is followed by a processing of that key.
async fn hammer(workers: usize, adds: usize, keys: u32, seed: u64, use_time: bool) {
    let q = queue();
    let held = Arc::new(Mutex::new(HashSet::new()));
    let needs: Arc<Vec<AtomicBool>> = Arc::new((0..keys).map(|_| AtomicBool::new(false)).collect());
    let processed = Arc::new(AtomicUsize::new(0));

    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (q, held, needs, processed) =
                (q.clone(), held.clone(), needs.clone(), processed.clone());
            let mut rng = fastrand::Rng::with_seed(seed ^ w as u64);
            tokio::spawn(async move {
                while let Some(key) = q.get().await {
                    needs[key as usize].store(false, Ordering::SeqCst);
                    assert!(
                        held.lock().unwrap().insert(key),
                        "key {key} handed to two workers at once"
                    );
                    processed.fetch_add(1, Ordering::SeqCst);
                    for _ in 0..rng.u8(..3) {
                        yield_now().await;
                    }
                    if use_time && rng.u8(..8) == 0 {
                        tokio::time::sleep(ms(1)).await;
                    }
                    held.lock().unwrap().remove(&key);
                    q.done(&key);
                }
            })
        })
        .collect();

    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..adds {
        let key = rng.u32(..keys);
        needs[key as usize].store(true, Ordering::SeqCst);
        if use_time && rng.u8(..10) == 0 {
            q.add_after(key, ms(rng.u64(1..20)));
        } else {
            q.add(key);
        }
        yield_now().await;
        if use_time && rng.u8(..16) == 0 {
            tokio::time::sleep(ms(1)).await;
        }
    }
    if use_time {
        // Let every delayed key come due; waiting workers wake and pick them up.
        tokio::time::sleep(ms(50)).await;
    }
    finish(q.shutdown_with_drain()).await;
    for handle in handles {
        finish(handle).await.expect("worker panicked");
    }

    for (key, need) in needs.iter().enumerate() {
        assert!(
            !need.load(Ordering::SeqCst),
            "key {key} was added but not processed after"
        );
    }
    let m = q.metrics();
    let processed = processed.load(Ordering::SeqCst) as u64;
    assert_eq!(
        m.adds_total, processed,
        "every counted add is handed out exactly once"
    );
    assert_eq!(m.queue_duration.count, processed);
    assert_eq!(m.work_duration.count, processed);
    assert_eq!((m.depth, m.in_flight, m.delayed), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn several_workers_never_hold_the_same_key_across_thousands_of_random_adds() {
    hammer(6, 5_000, 32, 0x5e7, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_several_threads_never_hold_the_same_key() {
    for seed in [0xfeed, 0xbeef, 0xcafe] {
        hammer(4, 20_000, 16, seed, false).await;
    }
}

// ---- delays ----

#[tokio::test(start_paused = true)]
async fn a_delayed_add_becomes_ready_only_after_its_delay() {
    let q = queue();
    q.add_after(7, secs(1));
    assert_eq!(q.try_get(), None);
    assert_eq!(q.metrics().delayed, 1);
    advance(ms(999)).await;
    assert_eq!(q.try_get(), None);
    assert_eq!(q.len(), 0);
    advance(ms(1)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.try_get(), Some(7));
    assert_eq!(q.metrics().delayed, 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_getter_wakes_exactly_when_a_delayed_key_is_due() {
    let q = queue();
    let start = Instant::now();
    q.add_after(7, secs(1));
    let getter = spawn_get(&q);
    settle().await;
    advance(ms(999)).await;
    settle().await;
    assert!(!getter.is_finished());
    advance(ms(1)).await;
    assert_eq!(finish(getter).await.unwrap(), Some(7));
    assert_eq!(start.elapsed(), secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_getter_already_waiting_picks_up_a_delayed_key_added_later() {
    let q = queue();
    let getter = spawn_get(&q);
    settle().await;
    let start = Instant::now();
    q.add_after(3, secs(2));
    assert_eq!(finish(getter).await.unwrap(), Some(3));
    assert_eq!(start.elapsed(), secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_getter_re_arms_when_an_earlier_delayed_key_arrives() {
    let q = queue();
    q.add_after(1, secs(10));
    let getter = spawn_get(&q);
    settle().await;
    let start = Instant::now();
    q.add_after(2, secs(3));
    assert_eq!(finish(getter).await.unwrap(), Some(2));
    assert_eq!(start.elapsed(), secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_delayed_add_keeps_the_earlier_ready_time() {
    let q = queue();
    q.add_after(1, secs(5));
    q.add_after(1, secs(1)); // earlier: wins
    q.add_after(2, secs(1));
    q.add_after(2, secs(5)); // later: ignored
    assert_eq!(q.metrics().delayed, 2);

    advance(secs(1)).await;
    assert_eq!(drain_ready(&q), [1, 2]);
    advance(secs(10)).await;
    assert_eq!(q.try_get(), None, "superseded delays never fire");
    assert_eq!(q.metrics().adds_total, 2);
}

#[tokio::test(start_paused = true)]
async fn delayed_keys_become_ready_in_deadline_order() {
    let q = queue();
    q.add_after(1, secs(3));
    q.add_after(2, secs(1));
    q.add_after(3, secs(2));
    q.add_after(4, secs(1));
    advance(secs(3)).await;
    assert_eq!(drain_ready(&q), [2, 4, 3, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_is_a_plain_add() {
    let q = queue();
    q.add_after(1, Duration::ZERO);
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.metrics().delayed, 0);
}

#[tokio::test(start_paused = true)]
async fn a_due_delayed_key_that_is_already_ready_is_deduplicated() {
    let q = queue();
    q.add_after(1, secs(1));
    q.add(1);
    advance(secs(1)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(drain_ready(&q), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_key_due_while_processing_is_requeued_on_done() {
    let q = queue();
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    q.add_after(1, secs(1));
    advance(secs(1)).await;
    assert_eq!(q.try_get(), None);
    q.done(&1);
    assert_eq!(q.try_get(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn huge_delays_do_not_overflow() {
    let q = queue();
    q.add_after(1, Duration::MAX);
    advance(secs(3600)).await;
    assert_eq!(q.try_get(), None);
    assert_eq!(q.metrics().delayed, 1);
}

#[tokio::test(start_paused = true)]
async fn many_due_keys_wake_several_waiting_getters() {
    let q = queue();
    let getters: Vec<_> = (0..3).map(|_| spawn_get(&q)).collect();
    settle().await;
    for key in [1, 2, 3] {
        q.add_after(key, secs(1));
    }
    let mut got = Vec::new();
    for getter in getters {
        got.push(finish(getter).await.unwrap().unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3]);
}

// ---- rate limiting ----

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_back_off_exponentially_and_reset_after_forget() {
    let q = queue();
    for expected in [ms(5), ms(10), ms(20), ms(40)] {
        q.add_rate_limited(1);
        advance(expected - ms(1)).await;
        assert_eq!(q.try_get(), None, "not ready before {expected:?}");
        advance(ms(1)).await;
        assert_eq!(q.try_get(), Some(1), "ready after {expected:?}");
        q.done(&1);
    }
    assert_eq!(q.num_requeues(&1), 4);
    q.forget(&1);
    assert_eq!(q.num_requeues(&1), 0);
    q.add_rate_limited(1);
    advance(ms(5)).await;
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.metrics().retries_total, 5);
}

#[tokio::test(start_paused = true)]
async fn the_token_bucket_limits_a_burst_of_rate_limited_adds() {
    let q = WorkQueue::new(Config {
        qps: 1.0,
        burst: 2,
        ..config()
    });
    for key in [1, 2, 3, 4] {
        q.add_rate_limited(key);
    }
    advance(ms(5)).await;
    assert_eq!(
        drain_ready(&q),
        [1, 2],
        "the burst only waits for the backoff"
    );
    advance(secs(1) - ms(5)).await;
    assert_eq!(drain_ready(&q), [3]);
    advance(secs(1)).await;
    assert_eq!(drain_ready(&q), [4]);
}

#[tokio::test(start_paused = true)]
async fn a_plugged_in_rate_limiter_decides_the_delay() {
    let limiter = Arc::new(FixedDelay {
        delay: secs(7),
        ..FixedDelay::default()
    });
    let q = WorkQueue::with_rate_limiter(config(), Arc::clone(&limiter));
    q.add_rate_limited(1);
    advance(secs(6)).await;
    assert_eq!(q.try_get(), None);
    advance(secs(1)).await;
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.num_requeues(&1), 1);
    q.forget(&1);
    assert_eq!(limiter.forgotten.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_default_config_matches_client_go_with_some_jitter() {
    let c = Config::default();
    assert_eq!(c.name, "workqueue");
    assert_eq!((c.base_delay, c.max_delay), (ms(5), secs(1000)));
    assert_eq!((c.qps, c.burst), (10.0, 100));
    assert_eq!(c.jitter, 0.1);
    assert_eq!(c.jitter_seed, None);

    let limiter = Config {
        jitter_seed: Some(3),
        ..Config::default()
    }
    .rate_limiter::<u32>();
    for n in 0..10 {
        let nominal = ms(5) * 2u32.pow(n);
        let delay = limiter.when(&0);
        assert!(
            delay <= nominal && delay >= nominal.mul_f64(0.9),
            "{delay:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_after_shutdown_are_ignored_and_not_counted() {
    let limiter = Arc::new(FixedDelay::default());
    let q = WorkQueue::with_rate_limiter(config(), Arc::clone(&limiter));
    q.shutdown();
    q.add_rate_limited(1);
    assert_eq!(limiter.calls.load(Ordering::SeqCst), 0);
    assert_eq!(q.metrics().retries_total, 0);
}

// ---- shutdown ----

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_waiting_getter_with_none() {
    let q = queue();
    let start = Instant::now();
    let getters: Vec<_> = (0..3).map(|_| spawn_get(&q)).collect();
    settle().await;
    q.shutdown();
    for getter in getters {
        assert_eq!(finish(getter).await.unwrap(), None);
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "woken by shutdown, not by a timer"
    );
    assert_eq!(finish(q.get()).await, None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_getters_sleeping_until_a_delayed_key() {
    let q = queue();
    q.add_after(9, secs(1));
    let start = Instant::now();
    let getter = spawn_get(&q);
    settle().await;
    q.shutdown();
    assert_eq!(finish(getter).await.unwrap(), None);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn after_shutdown_adds_are_ignored() {
    let q = queue();
    assert!(!q.is_shutting_down());
    q.shutdown();
    assert!(q.is_shutting_down());
    q.add(1);
    q.add_after(2, secs(1));
    q.add_rate_limited(3);
    advance(secs(10)).await;
    assert_eq!(q.len(), 0);
    assert_eq!(finish(q.get()).await, None);
    let m = q.metrics();
    assert_eq!((m.adds_total, m.depth, m.delayed), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn immediate_shutdown_drops_pending_keys_and_stops_requeues() {
    let q = queue();
    q.add(1);
    q.add(2);
    q.add_after(3, secs(1));
    assert_eq!(q.try_get(), Some(1));
    q.add(1); // dirty while processing
    q.shutdown();
    assert_eq!(q.metrics().depth, 0);
    q.done(&1);
    assert_eq!(finish(q.get()).await, None);
    assert_eq!(
        q.metrics().work_duration.count,
        1,
        "done still records work"
    );
    q.shutdown(); // idempotent
    assert_eq!(q.try_get(), None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_hands_out_pending_keys_then_none() {
    let q = queue();
    q.add(1);
    q.add(2);
    q.add_after(3, secs(1));
    assert_eq!(finish(q.get()).await, Some(1));
    q.add(1); // dirty while processing

    let mut drained = pin!(q.shutdown_with_drain());
    assert!(q.is_shutting_down());
    q.add(9);
    assert!(poll_once(drained.as_mut()).is_pending());

    assert_eq!(finish(q.get()).await, Some(2));
    q.done(&2);
    assert!(
        poll_once(drained.as_mut()).is_pending(),
        "key 1 still in flight"
    );
    q.done(&1);
    assert_eq!(
        finish(q.get()).await,
        Some(1),
        "the dirty key is requeued while draining"
    );
    assert!(poll_once(drained.as_mut()).is_pending());
    q.done(&1);
    assert_eq!(
        finish(q.get()).await,
        None,
        "delayed and post-shutdown keys were dropped"
    );
    finish(drained).await;
}

#[tokio::test(start_paused = true)]
async fn a_draining_getter_waits_for_a_requeue_instead_of_returning_none() {
    let q = queue();
    q.add(1);
    assert_eq!(finish(q.get()).await, Some(1));
    q.add(1);
    let drained = tokio::spawn(q.shutdown_with_drain());
    let getter = spawn_get(&q);
    settle().await;
    assert!(!getter.is_finished(), "key 1 will be requeued");
    q.done(&1);
    assert_eq!(finish(getter).await.unwrap(), Some(1));
    let last = spawn_get(&q);
    settle().await;
    assert!(!drained.is_finished());
    q.done(&1);
    assert_eq!(finish(last).await.unwrap(), None);
    finish(drained).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn draining_getters_beyond_the_last_requeued_key_return_none() {
    let q = queue();
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    q.add(1);
    let drained = tokio::spawn(q.shutdown_with_drain());
    let getters = [spawn_get(&q), spawn_get(&q)];
    settle().await;
    assert!(getters.iter().all(|g| !g.is_finished()));
    q.done(&1);
    let mut results = Vec::new();
    for getter in getters {
        results.push(finish(getter).await.unwrap());
    }
    results.sort_unstable();
    assert_eq!(
        results,
        [None, Some(1)],
        "one takes the requeue, the other is told to stop"
    );
    assert!(!drained.is_finished(), "key 1 is in flight again");
    q.done(&1);
    finish(drained).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_of_an_idle_queue_completes_at_once() {
    let q = queue();
    let getter = spawn_get(&q);
    settle().await;
    let mut drained = pin!(q.shutdown_with_drain());
    assert!(poll_once(drained.as_mut()).is_ready());
    assert_eq!(finish(getter).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_takes_effect_without_being_awaited() {
    let q = queue();
    drop(q.shutdown_with_drain());
    assert!(q.is_shutting_down());
    q.add(1);
    assert_eq!(finish(q.get()).await, None);
}

#[tokio::test(start_paused = true)]
async fn an_immediate_shutdown_completes_a_drain_with_only_pending_keys() {
    let q = queue();
    q.add(1);
    q.add(2);
    let drained = tokio::spawn(q.shutdown_with_drain());
    settle().await;
    assert!(!drained.is_finished(), "keys 1 and 2 are still pending");
    q.shutdown();
    finish(drained).await.unwrap();
    assert_eq!(q.try_get(), None);
}

#[tokio::test(start_paused = true)]
async fn an_immediate_shutdown_ends_a_drain() {
    let q = queue();
    q.add(1);
    q.add(2);
    assert_eq!(q.try_get(), Some(1));
    let drained = tokio::spawn(q.shutdown_with_drain());
    q.shutdown();
    assert_eq!(q.try_get(), None, "pending key 2 was dropped");
    settle().await;
    assert!(!drained.is_finished(), "key 1 is still in flight");
    q.done(&1);
    finish(drained).await.unwrap();
}

// ---- metrics ----

#[tokio::test(start_paused = true)]
async fn metrics_count_adds_depth_and_retries() {
    let q = queue();
    q.add(1);
    q.add(1);
    q.add(2);
    let m = q.metrics();
    assert_eq!(m.name, "test");
    assert_eq!((m.adds_total, m.depth, m.in_flight), (2, 2, 0));

    assert_eq!(q.try_get(), Some(1));
    q.add(1); // dirty while processing: counted, and part of the depth
    let m = q.metrics();
    assert_eq!((m.adds_total, m.depth, m.in_flight), (3, 2, 1));

    q.add_rate_limited(3);
    let m = q.metrics();
    assert_eq!((m.retries_total, m.delayed, m.depth), (1, 1, 2));
}

#[tokio::test(start_paused = true)]
async fn metrics_measure_queue_and_work_durations() {
    let q = queue();
    q.add(1);
    q.add(2);
    advance(secs(2)).await;
    assert_eq!(q.try_get(), Some(1));
    advance(secs(3)).await;
    let m = q.metrics();
    assert_eq!(m.queue_duration.count, 1);
    assert_eq!(m.queue_duration.sum, secs(2));
    assert_eq!(m.unfinished_work, secs(3));
    assert_eq!(m.longest_running_processor, secs(3));

    assert_eq!(q.try_get(), Some(2));
    advance(secs(1)).await;
    let m = q.metrics();
    assert_eq!(m.queue_duration.count, 2);
    assert_eq!(m.queue_duration.sum, secs(7));
    assert_eq!(m.queue_duration.max, secs(5));
    assert_eq!(m.unfinished_work, secs(5));
    assert_eq!(m.longest_running_processor, secs(4));
    assert_eq!(m.in_flight, 2);

    q.done(&1);
    q.done(&2);
    let m = q.metrics();
    assert_eq!(m.work_duration.count, 2);
    assert_eq!(m.work_duration.sum, secs(5));
    assert_eq!(m.work_duration.max, secs(4));
    // 1 s is in the `le 1` bucket, 4 s only in `le 10`.
    assert_eq!(m.work_duration.buckets[8], 1);
    assert_eq!(m.work_duration.buckets[9], 2);
    assert_eq!(
        (m.unfinished_work, m.longest_running_processor),
        (Duration::ZERO, Duration::ZERO)
    );
}

#[tokio::test(start_paused = true)]
async fn queue_latency_of_a_delayed_key_starts_when_it_is_due() {
    let q = queue();
    q.add_after(1, secs(10));
    advance(secs(10)).await;
    assert_eq!(q.len(), 1); // promoted here
    advance(secs(1)).await;
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.metrics().queue_duration.sum, secs(1));
}

#[tokio::test(start_paused = true)]
async fn queue_latency_of_a_requeued_key_starts_at_its_re_add() {
    let q = queue();
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    advance(secs(1)).await;
    q.add(1);
    advance(secs(2)).await;
    q.done(&1);
    advance(secs(4)).await;
    assert_eq!(q.try_get(), Some(1));
    let m = q.metrics();
    assert_eq!(m.queue_duration.sum, secs(6));
    assert_eq!(m.queue_duration.max, secs(6));
}

#[test]
fn metric_names_match_client_go() {
    assert_eq!(names::DEPTH, "workqueue_depth");
    assert_eq!(names::ADDS_TOTAL, "workqueue_adds_total");
    assert_eq!(
        names::QUEUE_DURATION_SECONDS,
        "workqueue_queue_duration_seconds"
    );
    assert_eq!(
        names::WORK_DURATION_SECONDS,
        "workqueue_work_duration_seconds"
    );
    assert_eq!(names::RETRIES_TOTAL, "workqueue_retries_total");
    assert_eq!(
        names::UNFINISHED_WORK_SECONDS,
        "workqueue_unfinished_work_seconds"
    );
    assert_eq!(
        names::LONGEST_RUNNING_PROCESSOR_SECONDS,
        "workqueue_longest_running_processor_seconds"
    );
}

#[test]
fn the_queue_and_its_futures_can_move_between_threads() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}
    let q: WorkQueue<String> = WorkQueue::default();
    assert_send_sync(&q);
    assert_send(&q.get());
    assert_send(&q.shutdown_with_drain());
    assert_eq!(q.name(), "workqueue");
    assert!(format!("{q:?}").contains("workqueue"));
}

#[tokio::test(start_paused = true)]
async fn low_priority_keys_are_handed_out_only_when_no_normal_key_is_ready() {
    let q = queue();
    q.add_low_priority(1);
    q.add_low_priority(2);
    q.add(3);
    q.add_low_priority(1); // already pending: deduplicated
    assert_eq!(q.len(), 3);
    assert_eq!(q.try_get(), Some(3));
    q.add(4);
    assert_eq!(drain_ready(&q), [4, 1, 2]);
    assert_eq!(q.metrics().adds_total, 4);
}

#[tokio::test(start_paused = true)]
async fn a_real_change_promotes_a_key_waiting_at_low_priority() {
    let q = queue();
    q.add_low_priority(1);
    q.add_low_priority(2);
    q.add(5);
    q.add(2);
    assert_eq!(drain_ready(&q), [5, 2, 1], "2 jumped the low lane, once");
}

#[tokio::test(start_paused = true)]
async fn a_low_priority_add_while_processing_requeues_in_the_low_lane() {
    let q = queue();
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    q.add_low_priority(1);
    q.add(2);
    q.done(&1);
    assert_eq!(drain_ready(&q), [2, 1]);

    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    q.add_low_priority(1);
    q.add(1); // a real change while processing wins over the resync
    q.add(2);
    q.done(&1);
    assert_eq!(drain_ready(&q), [2, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_drain_also_hands_out_low_priority_keys() {
    let q = queue();
    q.add_low_priority(1);
    let drained = q.shutdown_with_drain();
    assert_eq!(finish(q.get()).await, Some(1));
    q.done(&1);
    assert_eq!(finish(q.get()).await, None);
    finish(drained).await;
}

#[tokio::test(start_paused = true)]
async fn failures_of_event_caused_reconciles_never_escalate_the_backoff() {
    let q = queue();
    // A real failure: retried after 5 ms, then 10 ms (the retry failed too).
    q.add(1);
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.add_rate_limited(1), ms(5), "a first failure counts");
    q.done(&1);
    advance(ms(5)).await;
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.add_rate_limited(1), ms(10), "a failed retry escalates");
    q.done(&1);
    // New events keep arriving and every reconcile they cause fails: the key keeps waiting
    // 10 ms, never longer.
    for _ in 0..20 {
        q.add(1);
        assert_eq!(q.try_get(), Some(1));
        assert_eq!(q.add_rate_limited(1), ms(10));
        q.done(&1);
    }
    assert_eq!(q.num_requeues(&1), 2);
    // The pending retry fires and fails: that escalates again.
    advance(ms(10)).await;
    assert_eq!(q.try_get(), Some(1));
    assert_eq!(q.add_rate_limited(1), ms(20));
    q.done(&1);
}
