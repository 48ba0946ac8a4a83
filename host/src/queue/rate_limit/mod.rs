//! Rate limiters that decide how long a key waits before a retry: the [`RateLimiter`] trait,
//! per-key exponential backoff, an overall token bucket, and their maximum.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Stand-in for "never": delays are capped at about 30 years so that deadlines stay representable.
pub(super) const FAR_FUTURE: Duration = Duration::from_secs(60 * 60 * 24 * 365 * 30);

/// Decides how long a key should wait before it is retried (client-go's `TypedRateLimiter`).
///
/// Implementations use interior mutability and are shared between tasks. Time-based
/// implementations should read [`tokio::time::Instant`] so that they follow paused test time.
///
/// ```
/// use std::time::Duration;
/// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
///
/// /// Every retry waits one second, whatever happened before.
/// struct Fixed;
/// impl<K> RateLimiter<K> for Fixed {
///     fn when(&self, _key: &K) -> Duration { Duration::from_secs(1) }
///     fn forget(&self, _key: &K) {}
///     fn num_requeues(&self, _key: &K) -> u32 { 0 }
/// }
/// let queue = setpoint::queue::WorkQueue::with_rate_limiter(Default::default(), Fixed);
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// # let _enter = rt.enter();
/// assert_eq!(queue.add_rate_limited("k"), Duration::from_secs(1));
/// ```
pub trait RateLimiter<K>: Send + Sync {
    /// Records a retry of `key` and returns how long it should wait before being processed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(1));
    /// assert_eq!(backoff.when(&"k"), Duration::from_millis(10));
    /// assert_eq!(backoff.when(&"k"), Duration::from_millis(20));
    /// ```
    fn when(&self, key: &K) -> Duration;
    /// Stops tracking `key`: its retry history is reset, as after a success.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(1));
    /// backoff.when(&"k");
    /// backoff.forget(&"k");
    /// assert_eq!(backoff.when(&"k"), Duration::from_millis(10));
    /// ```
    fn forget(&self, key: &K);
    /// How many times `key` has been retried since it was last forgotten.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(1));
    /// backoff.when(&"k");
    /// assert_eq!(backoff.num_requeues(&"k"), 1);
    /// ```
    fn num_requeues(&self, key: &K) -> u32;
    /// The delay for a retry that must not escalate `key`'s backoff: its failure count stays
    /// as it is and the delay is that of its latest failure. The queue uses it when a key that
    /// was already failing fails again on a reconcile caused by a new event, so that a stream
    /// of events cannot push a key to the maximum backoff. Defaults to [`when`](Self::when).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(1));
    /// backoff.when(&"k");
    /// backoff.when(&"k");
    /// assert_eq!(backoff.when_again(&"k"), Duration::from_millis(20), "no escalation");
    /// assert_eq!(backoff.num_requeues(&"k"), 2);
    /// ```
    fn when_again(&self, key: &K) -> Duration {
        self.when(key)
    }
}

/// A shared or boxed rate limiter is the rate limiter it points to.
macro_rules! forward_rate_limiter {
    ($($pointer:ident),*) => {$(
        impl<K, T: RateLimiter<K> + ?Sized> RateLimiter<K> for $pointer<T> {
            fn when(&self, key: &K) -> Duration {
                (**self).when(key)
            }
            fn when_again(&self, key: &K) -> Duration {
                (**self).when_again(key)
            }
            fn forget(&self, key: &K) {
                (**self).forget(key);
            }
            fn num_requeues(&self, key: &K) -> u32 {
                (**self).num_requeues(key)
            }
        }
    )*};
}

forward_rate_limiter!(Arc, Box);

/// Locks a mutex, ignoring poisoning: the guarded data stays consistent between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per-key exponential backoff with optional proportional jitter (client-go's
/// `ItemExponentialFailureRateLimiter`, plus jitter).
///
/// The `n`-th call to [`when`](RateLimiter::when) for a key (counting from 0 since it was last
/// forgotten) has the nominal delay `min(base * 2^n, max)`. With a jitter factor `j` in `[0, 1]`
/// the returned delay is `nominal * (1 - j * r)` with `r` uniform in `[0, 1)`, i.e. it lies in
/// `((1 - j) * nominal, nominal]`: jitter only ever shortens a delay, so `max` is never exceeded
/// and keys that all hit the cap still spread out. `j = 0` (the default of [`new`](Self::new))
/// is deterministic; `j = 1` is "full jitter".
///
/// ```
/// use std::time::Duration;
/// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
///
/// let backoff = ExponentialBackoff::new(Duration::from_millis(5), Duration::from_millis(12));
/// let delays: Vec<_> = (0..4).map(|_| backoff.when(&"k")).collect();
/// assert_eq!(delays, [5, 10, 12, 12].map(Duration::from_millis), "capped at max");
/// ```
pub struct ExponentialBackoff<K> {
    base: Duration,
    max: Duration,
    jitter: f64,
    state: Mutex<BackoffState<K>>,
}

struct BackoffState<K> {
    failures: HashMap<K, u32>,
    rng: fastrand::Rng,
}

impl<K> ExponentialBackoff<K> {
    /// Backoff from `base` doubling up to `max`, without jitter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::<&str>::new(Duration::from_millis(5), Duration::from_secs(1000));
    /// assert_eq!(backoff.nominal_delay(3), Duration::from_millis(40));
    /// ```
    #[must_use]
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            jitter: 0.0,
            state: Mutex::new(BackoffState {
                failures: HashMap::new(),
                rng: fastrand::Rng::new(),
            }),
        }
    }

    /// Sets the jitter factor, clamped to `[0, 1]` (NaN means 0).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::new(Duration::from_secs(1), Duration::from_secs(60)).with_jitter(0.5);
    /// let delay = backoff.when(&"k");
    /// assert!(delay > Duration::from_millis(500) && delay <= Duration::from_secs(1), "only ever shorter");
    /// ```
    #[must_use]
    pub fn with_jitter(mut self, factor: f64) -> Self {
        self.jitter = if factor.is_nan() {
            0.0
        } else {
            factor.clamp(0.0, 1.0)
        };
        self
    }

    /// Seeds the jitter's random number generator, making delays reproducible.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let delays = |seed| {
    ///     let backoff = ExponentialBackoff::new(Duration::from_secs(1), Duration::from_secs(60))
    ///         .with_jitter(1.0)
    ///         .with_seed(seed);
    ///     (0..3).map(|_| backoff.when(&"k")).collect::<Vec<_>>()
    /// };
    /// assert_eq!(delays(7), delays(7), "reproducible");
    /// ```
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self {
        lock(&self.state).rng = fastrand::Rng::with_seed(seed);
        self
    }

    /// The nominal (un-jittered) delay after `failures` previous failures: `min(base * 2^failures, max)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let backoff = ExponentialBackoff::<u8>::new(Duration::from_millis(5), Duration::from_secs(1000));
    /// assert_eq!(backoff.nominal_delay(0), Duration::from_millis(5));
    /// assert_eq!(backoff.nominal_delay(40), Duration::from_secs(1000));
    /// ```
    pub fn nominal_delay(&self, failures: u32) -> Duration {
        const NANOS_PER_SEC: u128 = 1_000_000_000;
        let nanos = 1u128
            .checked_shl(failures)
            .and_then(|factor| self.base.as_nanos().checked_mul(factor));
        match nanos {
            Some(n) if n < self.max.as_nanos() => {
                // `n < max` so the seconds fit in a u64, as they do for `max`.
                let secs = u64::try_from(n / NANOS_PER_SEC).unwrap_or(u64::MAX);
                let sub_nanos = u32::try_from(n % NANOS_PER_SEC).unwrap_or(0);
                Duration::new(secs, sub_nanos)
            }
            _ => self.max,
        }
    }
}

impl<K: Clone + Eq + Hash + Send + Sync> RateLimiter<K> for ExponentialBackoff<K> {
    fn when(&self, key: &K) -> Duration {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let failures = state.failures.entry(key.clone()).or_insert(0);
        let exponent = *failures;
        *failures = failures.saturating_add(1);
        let nominal = self.nominal_delay(exponent);
        if self.jitter > 0.0 {
            nominal.mul_f64(1.0 - self.jitter * state.rng.f64())
        } else {
            nominal
        }
    }

    fn when_again(&self, key: &K) -> Duration {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let Some(&failures) = state.failures.get(key).filter(|f| **f > 0) else {
            drop(guard);
            return self.when(key);
        };
        let nominal = self.nominal_delay(failures - 1);
        if self.jitter > 0.0 {
            nominal.mul_f64(1.0 - self.jitter * state.rng.f64())
        } else {
            nominal
        }
    }

    fn forget(&self, key: &K) {
        lock(&self.state).failures.remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        lock(&self.state).failures.get(key).copied().unwrap_or(0)
    }
}

impl<K> fmt::Debug for ExponentialBackoff<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExponentialBackoff")
            .field("base", &self.base)
            .field("max", &self.max)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

/// Overall token bucket shared by all keys (client-go's `TypedBucketRateLimiter`, i.e.
/// `golang.org/x/time/rate` reservations).
///
/// The bucket starts full with `burst` tokens and refills at `qps` tokens per second up to
/// `burst`. Each [`when`](RateLimiter::when) reserves one token and returns the time until that
/// token is available — zero while tokens remain; reservations beyond the burst queue up behind
/// each other (`1/qps` apart). `qps = f64::INFINITY` disables the bucket (always zero);
/// `qps <= 0` or NaN never refills, so reservations beyond the burst wait "forever" (~30 years).
/// A `burst` of 0 is treated as 1. It keeps no per-key state: `forget` does nothing and
/// `num_requeues` is always 0.
///
/// ```
/// use std::time::Duration;
/// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// # let _enter = rt.enter();
/// let bucket = TokenBucket::new(10.0, 2);
/// assert_eq!(bucket.when(&"a"), Duration::ZERO);
/// assert_eq!(bucket.when(&"b"), Duration::ZERO);
/// assert!(bucket.when(&"c") > Duration::ZERO, "the burst is spent: wait for a refill");
/// ```
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// `None` until the first reservation, so the bucket fills on the clock that first uses it.
    state: Mutex<Option<BucketState>>,
}

#[derive(Debug, Clone, Copy)]
struct BucketState {
    /// Available tokens; negative when reservations are outstanding.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilling at `qps` tokens per second.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// # let _enter = rt.enter();
    /// let unlimited = TokenBucket::new(f64::INFINITY, 1);
    /// assert!((0..1000).all(|i| unlimited.when(&i) == Duration::ZERO));
    /// ```
    #[must_use]
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst.max(1)),
            state: Mutex::new(None),
        }
    }

    /// Reserves one token and returns how long until it is available.
    fn reserve(&self) -> Duration {
        if self.qps == f64::INFINITY {
            return Duration::ZERO;
        }
        let refills = self.qps > 0.0;
        let now = Instant::now();
        let mut guard = lock(&self.state);
        let state = guard.get_or_insert(BucketState {
            tokens: self.burst,
            updated: now,
        });
        if refills {
            let elapsed = now.saturating_duration_since(state.updated).as_secs_f64();
            state.tokens = (state.tokens + elapsed * self.qps).min(self.burst);
        }
        state.updated = now;
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else if refills {
            Duration::try_from_secs_f64(-state.tokens / self.qps)
                .map_or(FAR_FUTURE, |wait| wait.min(FAR_FUTURE))
        } else {
            FAR_FUTURE
        }
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

/// Combines limiters by taking the longest delay (client-go's `TypedMaxOfRateLimiter`).
///
/// `when` consults every limiter (so each records the retry) and returns the maximum;
/// `forget` forgets in all of them; `num_requeues` is the maximum over them. With no limiters
/// every delay is zero.
///
/// ```
/// use std::time::Duration;
/// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// # let _enter = rt.enter();
/// let limiter = MaxOf::new(Vec::new())
///     .with(ExponentialBackoff::new(Duration::from_millis(5), Duration::from_secs(1)))
///     .with(TokenBucket::new(1.0, 1));
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
/// assert!(limiter.when(&"b") > Duration::from_millis(900), "the bucket is empty now");
/// ```
pub struct MaxOf<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOf<K> {
    /// Combines the given limiters.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let none: MaxOf<&str> = MaxOf::new(Vec::new());
    /// assert_eq!(none.when(&"k"), Duration::ZERO);
    /// ```
    #[must_use]
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }

    /// Adds one more limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{ExponentialBackoff, MaxOf, RateLimiter, TokenBucket};
    ///
    /// let limiter = MaxOf::new(Vec::new())
    ///     .with(ExponentialBackoff::new(Duration::from_millis(1), Duration::from_secs(1)))
    ///     .with(ExponentialBackoff::new(Duration::from_millis(3), Duration::from_secs(1)));
    /// assert_eq!(limiter.when(&"k"), Duration::from_millis(3), "the longest delay wins");
    /// ```
    #[must_use]
    pub fn with(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.limiters.push(Box::new(limiter));
        self
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&self, key: &K) -> Duration {
        self.limiters
            .iter()
            .map(|limiter| limiter.when(key))
            .fold(Duration::ZERO, Duration::max)
    }

    fn when_again(&self, key: &K) -> Duration {
        self.limiters
            .iter()
            .map(|limiter| limiter.when_again(key))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, key: &K) {
        for limiter in &self.limiters {
            limiter.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

impl<K> fmt::Debug for MaxOf<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
