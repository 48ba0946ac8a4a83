//! The work queue feeding reconcilers: a deduplicating, delaying, rate-limited queue of keys
//! with client-go `workqueue` semantics, shared by many tokio tasks.
//!
//! # Contract
//!
//! [`WorkQueue<K>`] is a handle (an `Arc` inside): clones share one queue. Each key is in some
//! of these states: *ready* (queued, will be handed out), *processing* (handed out by
//! [`get`](WorkQueue::get), not yet [`done`](WorkQueue::done)), *dirty* (needs processing:
//! every ready key, plus a processing key that was added again), *delayed* (waiting for a
//! ready time). The queue guarantees:
//!
//! 1. **Deduplication.** A key is ready at most once: adding a ready key does nothing.
//! 2. **Exclusive processing.** A key handed out by `get` is not handed out again until its
//!    `done`. Adding it meanwhile marks it dirty; `done` then requeues it exactly once, however
//!    many adds happened. So no key is ever held by two workers at once, and every accepted
//!    add is followed by a `get` of that key that starts after the add, as long as workers
//!    keep calling `get` and `done` (also while draining).
//! 3. **FIFO.** Ready keys are handed out in the order they became ready; a requeued key goes
//!    to the back.
//! 4. **Delays.** [`add_after`](WorkQueue::add_after) makes a key ready once its delay has
//!    passed (a zero delay is a plain add). A key waits at most once: adding it again with a
//!    later ready time is ignored, with an earlier one moves it earlier — the earliest wins. A
//!    delayed key is independent of the ready/processing states until its time comes, then it
//!    is added as by `add` (an `add` of a waiting key does not cancel its delayed add).
//!    Delays are capped at about 30 years. Time is [`tokio::time`]'s, so paused test time
//!    works; no task or timer is spawned per key — waiting getters sleep until the earliest
//!    ready time.
//! 5. **Rate limiting.** [`add_rate_limited`](WorkQueue::add_rate_limited) is
//!    `add_after(key, limiter.when(key))`; [`forget`](WorkQueue::forget) resets the key's
//!    history (call it after a success) and [`num_requeues`](WorkQueue::num_requeues) reads it.
//!    The default limiter ([`Config::rate_limiter`]) is the max of a per-key exponential
//!    backoff (`min(5 ms * 2^failures, 1000 s)`, shortened by up to 10 % random jitter so it
//!    never exceeds the cap) and an overall token bucket (10 qps, burst 100), all configurable
//!    in [`Config`]; any [`RateLimiter`] can be plugged in instead.
//! 6. **Priorities and event-caused retries.** [`add_low_priority`](WorkQueue::add_low_priority)
//!    queues a key in a second, low-priority lane (initial lists, resyncs) that is served only
//!    when nothing normal is ready; a normal `add` of a key waiting there promotes it. A key
//!    handed out because of a new event that fails again does not escalate its backoff (see
//!    [`add_rate_limited`](WorkQueue::add_rate_limited)).
//! 7. **Shutdown.** After [`shutdown`](WorkQueue::shutdown) or
//!    [`shutdown_with_drain`](WorkQueue::shutdown_with_drain), every add is ignored and
//!    delayed keys are dropped. `shutdown` is immediate: pending keys are dropped, a `done`
//!    no longer requeues, and every `get` — including those already waiting — returns `None`.
//!    `shutdown_with_drain` keeps handing out pending keys (and requeues dirty keys on `done`);
//!    `get` returns `None` once nothing is ready and no processing key awaits a requeue, and
//!    the returned future completes once nothing is ready or processing.
//!    [`is_shutting_down`](WorkQueue::is_shutting_down) is `true` from then on.
//! 8. **Cancellation.** `get` is cancel safe: dropping its future never loses a key, and a
//!    wake-up meant for it passes to another waiting `get`.
//! 9. **Metrics.** [`metrics`](WorkQueue::metrics) snapshots client-go's `workqueue_*` metrics
//!    (see [`MetricsSnapshot`] and [`names`]); recording them costs a few atomic operations.
//!
//! `done` for a key that is not being processed is ignored. [`len`](WorkQueue::len) counts
//! ready keys only.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use setpoint::queue::{Config, WorkQueue};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let queue: WorkQueue<String> = WorkQueue::new(Config::named("pods"));
//! queue.add("default/web".to_owned());
//! queue.add("default/web".to_owned()); // deduplicated
//!
//! let worker = {
//!     let queue = queue.clone();
//!     tokio::spawn(async move {
//!         while let Some(key) = queue.get().await {
//!             let succeeded = !key.is_empty(); // reconcile `key` here
//!             if succeeded {
//!                 queue.forget(&key);
//!             } else {
//!                 queue.add_rate_limited(key.clone());
//!             }
//!             queue.done(&key);
//!         }
//!     })
//! };
//!
//! tokio::time::timeout(Duration::from_secs(5), queue.shutdown_with_drain()).await.unwrap();
//! worker.await.unwrap();
//! assert_eq!(queue.metrics().adds_total, 1);
//! # });
//! ```

mod config;
mod delay;
mod metrics;
mod rate_limit;
mod shutdown;
mod state;
#[cfg(test)]
mod tests;

use std::fmt;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use self::config::Config;
pub use self::metrics::{
    BUCKET_COUNT, DURATION_BUCKETS_SECONDS, HistogramSnapshot, MetricsSnapshot, names,
};
pub use self::rate_limit::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};

use self::metrics::Metrics;
use self::rate_limit::FAR_FUTURE;
use self::state::{State, Take};

/// A deduplicating, delaying, rate-limited work queue of keys; see the [module docs](self)
/// for its contract. Cloning is cheap and yields a handle to the same queue.
///
/// ```
/// use std::time::Duration;
/// use setpoint::queue::{Config, WorkQueue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue: WorkQueue<&str> = WorkQueue::new(Config::named("widgets"));
/// queue.add("default/a");
/// let key = queue.get().await.unwrap();
/// queue.add(key); // changed while processing: requeued once `done`
/// assert!(queue.is_empty(), "never handed to a second worker meanwhile");
/// queue.done(&key);
/// assert_eq!(queue.try_get(), Some("default/a"));
/// # Ok(()) }
/// ```
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    /// Wakes `get` callers: one (`notify_one`) per newly ready key; all (`notify_waiters`) when
    /// the next deadline moves earlier, on shutdown, and on `done` while shutting down. A taker
    /// that leaves keys ready also passes a wake on; that is defensive, as the waiters' deadline
    /// timers already cover keys promoted from the delay heap.
    wake_getters: Notify,
    /// Wakes `shutdown_with_drain` futures when the queue may have drained.
    wake_drained: Notify,
    limiter: Box<dyn RateLimiter<K>>,
    metrics: Metrics,
}

impl<K> Inner<K> {
    /// Locks the state, ignoring poisoning: no code path leaves it half-updated across a panic
    /// point other than a key's own `Hash`/`Eq`.
    fn state(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl<K> Default for WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new(Config::default())
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A queue using the default rate limiter built from `config` ([`Config::rate_limiter`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue: WorkQueue<String> = WorkQueue::new(Config { qps: 50.0, ..Config::named("pods") });
    /// assert_eq!(queue.name(), "pods");
    /// ```
    #[must_use]
    pub fn new(config: Config) -> Self {
        let limiter = config.rate_limiter();
        Self::with_rate_limiter(config, limiter)
    }

    /// A queue using `limiter` for [`add_rate_limited`](Self::add_rate_limited); the rate-limit
    /// fields of `config` are ignored. Pass an `Arc` to keep a handle on the limiter.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, ExponentialBackoff, RateLimiter, WorkQueue};
    ///
    /// let backoff = Arc::new(ExponentialBackoff::new(Duration::from_secs(1), Duration::from_secs(60)));
    /// let queue = WorkQueue::with_rate_limiter(Config::named("slow"), backoff.clone());
    /// # let _guard = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// # let _enter = _guard.enter();
    /// assert_eq!(queue.add_rate_limited("k"), Duration::from_secs(1));
    /// assert_eq!(backoff.num_requeues(&"k"), 1);
    /// ```
    pub fn with_rate_limiter(config: Config, limiter: impl RateLimiter<K> + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: config.name,
                state: Mutex::new(State::new()),
                wake_getters: Notify::new(),
                wake_drained: Notify::new(),
                limiter: Box::new(limiter),
                metrics: Metrics::default(),
            }),
        }
    }

    /// The queue's name, from [`Config::name`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// assert_eq!(WorkQueue::<u32>::new(Config::default()).name(), "workqueue");
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Makes `key` ready unless it already is; if it is being processed, marks it to be
    /// requeued on `done`. Ignored after shutdown.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("a");
    /// queue.add("a");
    /// assert_eq!(queue.len(), 1, "a key is ready at most once");
    /// ```
    pub fn add(&self, key: K) {
        self.add_now(key, State::add);
    }

    /// Adds `key` now through `lane` (normal or low priority), waking a
    /// getter if it became ready.
    fn add_now(&self, key: K, lane: fn(&mut State<K>, K, Instant, &Metrics) -> bool) {
        let queued = lane(
            &mut self.inner.state(),
            key,
            Instant::now(),
            &self.inner.metrics,
        );
        if queued {
            self.inner.wake_getters.notify_one();
        }
    }

    /// Adds `key` once `delay` has passed, keeping the earlier ready time if `key` is already
    /// waiting. A zero delay is a plain [`add`](Self::add). Ignored after shutdown.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add_after("later", Duration::from_millis(20));
    /// assert_eq!(queue.try_get(), None, "not yet");
    /// assert_eq!(queue.get().await, Some("later"));
    /// # Ok(()) }
    /// ```
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let ready_at = Instant::now() + delay.min(FAR_FUTURE);
        let earlier = self.inner.state().add_after(key, ready_at);
        if earlier {
            // Waiting getters sleep until the previous deadline (or indefinitely): re-arm them.
            self.inner.wake_getters.notify_waiters();
        }
    }

    /// Adds `key` to the low-priority lane: it is handed out only when no normally added key
    /// is ready (initial lists and periodic resyncs, which should never delay real changes).
    /// Ignored if `key` is already pending at either priority; a later [`add`](Self::add)
    /// promotes it. Ignored after shutdown.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add_low_priority("resync");
    /// queue.add("change");
    /// assert_eq!(queue.try_get(), Some("change"), "real changes first");
    /// assert_eq!(queue.try_get(), Some("resync"));
    /// ```
    pub fn add_low_priority(&self, key: K) {
        self.add_now(key, State::add_low);
    }

    /// Adds `key` after the rate limiter's delay for it, counting a retry, and returns that
    /// delay (zero after shutdown, when the key is ignored).
    ///
    /// A key that was handed out because of a new event ([`add`](Self::add)) and that had
    /// already failed before does not escalate its backoff: it waits as long as after its
    /// latest failure ([`RateLimiter::when_again`]). Only retries escalate.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// # let _enter = rt.enter();
    /// let config = Config { jitter: 0.0, ..Config::default() };
    /// let queue = WorkQueue::new(config);
    /// assert_eq!(queue.add_rate_limited("failing"), Duration::from_millis(5));
    /// assert_eq!(queue.add_rate_limited("failing"), Duration::from_millis(10));
    /// assert_eq!(queue.num_requeues(&"failing"), 2);
    /// ```
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let for_event = {
            let state = self.inner.state();
            if state.is_shutting_down() {
                return Duration::ZERO;
            }
            state.processing_for_event(&key)
        };
        let delay = if for_event && self.inner.limiter.num_requeues(&key) > 0 {
            self.inner.limiter.when_again(&key)
        } else {
            self.inner.limiter.when(&key)
        };
        self.inner.metrics.record_retry();
        self.add_after(key, delay);
        delay
    }

    /// Resets the rate limiter's history for `key`, typically after it was processed successfully.
    /// It does not remove `key` from the queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// # let _enter = rt.enter();
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add_rate_limited("k");
    /// queue.forget(&"k");
    /// assert_eq!(queue.num_requeues(&"k"), 0, "the backoff starts over");
    /// ```
    pub fn forget(&self, key: &K) {
        self.inner.limiter.forget(key);
    }

    /// How many times `key` was rate-limited since it was last forgotten.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// assert_eq!(WorkQueue::<&str>::new(Config::default()).num_requeues(&"never"), 0);
    /// ```
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.limiter.num_requeues(key)
    }

    /// Waits for the next ready key and marks it as processing; the caller must call
    /// [`done`](Self::done) with it. Returns `None` once shut down and nothing more will be
    /// handed out. Cancel safe.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add(1);
    /// queue.add(2);
    /// assert_eq!(queue.get().await, Some(1), "first in, first out");
    /// queue.shutdown();
    /// assert_eq!(queue.get().await, None);
    /// # Ok(()) }
    /// ```
    pub async fn get(&self) -> Option<K> {
        loop {
            // Created before the state check so a wake-up sent after it is not lost; enabled
            // under the lock so `notify_one` can reach it.
            let mut notified = pin!(self.inner.wake_getters.notified());
            let deadline = {
                let mut state = self.inner.state();
                match state.take(Instant::now(), &self.inner.metrics) {
                    Take::Key(key) => return Some(self.hand_out(state, key)),
                    Take::Closed => return None,
                    Take::Wait(deadline) => {
                        notified.as_mut().enable();
                        deadline
                    }
                }
            };
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Like [`get`](Self::get) without waiting: the next ready key (marked as processing), if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::default());
    /// assert_eq!(queue.try_get(), None::<u8>);
    /// queue.add(7);
    /// assert_eq!(queue.try_get(), Some(7));
    /// ```
    #[must_use]
    pub fn try_get(&self) -> Option<K> {
        let mut state = self.inner.state();
        match state.take(Instant::now(), &self.inner.metrics) {
            Take::Key(key) => Some(self.hand_out(state, key)),
            Take::Wait(_) | Take::Closed => None,
        }
    }

    /// Hand out `key`, just taken under `state`'s lock, passing the wake-up
    /// on to another getter if more keys are ready.
    fn hand_out(&self, state: MutexGuard<'_, State<K>>, key: K) -> K {
        let more = state.has_ready();
        drop(state);
        if more {
            self.inner.wake_getters.notify_one();
        }
        key
    }

    /// Marks `key` as processed. If it was added while being processed, it is requeued (once).
    /// Ignored if `key` is not being processed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("k");
    /// let k = queue.try_get().unwrap();
    /// queue.done(&k);
    /// assert!(queue.is_empty(), "processed and not added again: gone");
    /// assert_eq!(queue.metrics().in_flight, 0);
    /// ```
    pub fn done(&self, key: &K) {
        let mut state = self.inner.state();
        let Some(requeued) = state.done(key, Instant::now(), &self.inner.metrics) else {
            drop(state);
            tracing::trace!(queue = %self.inner.name, "done called for a key that is not being processed");
            return;
        };
        let shutting_down = state.is_shutting_down();
        let drained = state.is_drained();
        drop(state);
        if requeued {
            self.inner.wake_getters.notify_one();
        }
        if shutting_down {
            // Draining getters may now have nothing left to wait for.
            self.inner.wake_getters.notify_waiters();
            if drained {
                self.inner.wake_drained.notify_waiters();
            }
        }
    }

    /// Number of ready keys (excluding keys being processed and delayed keys not yet due).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("a");
    /// queue.add("b");
    /// let _a = queue.try_get();
    /// assert_eq!(queue.len(), 1, "keys being processed are not counted");
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        let mut state = self.inner.state();
        let promoted = state.promote_due(Instant::now(), &self.inner.metrics);
        let len = state.ready_len();
        drop(state);
        if promoted > 0 {
            self.inner.wake_getters.notify_one();
        }
        len
    }

    /// Whether no key is ready.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// assert!(WorkQueue::<u8>::new(Config::default()).is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key the queue still owes to a worker, at one moment, unless
    /// there are more than `most` (a queue of a million keys is not copied
    /// to find that out): pending or being processed (`None`: due now), or
    /// waiting for a delay (`Some`: when it becomes ready). What a consumer
    /// that stops now would have to queue again to lose nothing (a
    /// controller's checkpoint).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("taken");
    /// queue.add("waiting");
    /// queue.add_after("later", Duration::from_secs(60));
    /// assert_eq!(queue.try_get(), Some("taken"));
    /// let mut owed = queue.owed_up_to(3).unwrap();
    /// owed.sort_by_key(|(key, _)| *key);
    /// assert_eq!(owed.iter().map(|(k, due)| (*k, due.is_some())).collect::<Vec<_>>(),
    ///     [("later", true), ("taken", false), ("waiting", false)]);
    /// assert!(queue.owed_up_to(2).is_none());
    /// # }
    /// ```
    #[must_use]
    pub fn owed_up_to(&self, most: usize) -> Option<Vec<(K, Option<Instant>)>> {
        let state = self.inner.state();
        if state.owed_at_least() > most {
            return None;
        }
        let owed = state.owed();
        (owed.len() <= most).then_some(owed)
    }

    /// A lower bound of how many keys [`WorkQueue::owed_up_to`] would
    /// list, counted without copying them: what a consumer checks before
    /// paying for the list.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("a");
    /// queue.add("b");
    /// queue.add_after("c", Duration::from_secs(60));
    /// assert!((2..=3).contains(&queue.owed_at_least()));
    /// # }
    /// ```
    #[must_use]
    pub fn owed_at_least(&self) -> usize {
        self.inner.state().owed_at_least()
    }

    /// A snapshot of the queue's metrics.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::named("pods"));
    /// queue.add("a");
    /// queue.add("a");
    /// let metrics = queue.metrics();
    /// assert_eq!((metrics.name.as_str(), metrics.depth, metrics.adds_total), ("pods", 1, 1));
    /// ```
    #[must_use]
    pub fn metrics(&self) -> MetricsSnapshot {
        let gauges = self.inner.state().gauges(Instant::now());
        self.inner.metrics.snapshot(&self.inner.name, gauges)
    }
}
