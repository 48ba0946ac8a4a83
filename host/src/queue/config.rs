//! Work queue configuration: the queue's name and its default rate limiter's settings.

use std::hash::Hash;
use std::time::Duration;

use super::rate_limit::{ExponentialBackoff, MaxOf, TokenBucket};

/// Settings for a [`WorkQueue`](super::WorkQueue).
///
/// The rate-limit fields configure the default limiter built by [`Config::rate_limiter`]: the
/// maximum of a per-key [`ExponentialBackoff`] and an overall [`TokenBucket`], like client-go's
/// `DefaultTypedControllerRateLimiter` (plus optional jitter). They are ignored by
/// [`WorkQueue::with_rate_limiter`](super::WorkQueue::with_rate_limiter).
///
/// ```
/// use std::time::Duration;
/// use setpoint::queue::Config;
/// let gentle = Config { base_delay: Duration::from_millis(100), qps: 5.0, ..Config::named("gentle") };
/// assert_eq!(gentle.max_delay, Duration::from_secs(1000));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Queue name: the `name` label of its metrics, and a tracing field. Default `"workqueue"`.
    pub name: String,
    /// Backoff after a key's first failure. Default 5 ms.
    pub base_delay: Duration,
    /// Upper bound of the per-key backoff. Default 1000 s.
    pub max_delay: Duration,
    /// Proportional jitter factor in `[0, 1]`: each backoff is shortened by up to this fraction
    /// (see [`ExponentialBackoff`]). `0.0` is deterministic. Default `0.1`.
    pub jitter: f64,
    /// Seed for the jitter's random numbers, for reproducible delays. Default `None` (random).
    pub jitter_seed: Option<u64>,
    /// Overall token bucket refill rate in tokens per second; `f64::INFINITY` disables the
    /// bucket (see [`TokenBucket`]). Default 10.
    pub qps: f64,
    /// Overall token bucket size. Default 100.
    pub burst: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "workqueue".to_owned(),
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            jitter: 0.1,
            jitter_seed: None,
            qps: 10.0,
            burst: 100,
        }
    }
}

impl Config {
    /// The default configuration with the given name.
    ///
    /// ```
    /// use setpoint::queue::Config;
    /// assert_eq!(Config::named("pods").name, "pods");
    /// ```
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Builds the default rate limiter from these settings: the maximum of the per-key
    /// exponential backoff and the overall token bucket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, RateLimiter};
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// # let _enter = rt.enter();
    /// let limiter = Config { jitter: 0.0, ..Config::default() }.rate_limiter::<&str>();
    /// assert_eq!(limiter.when(&"k"), Duration::from_millis(5));
    /// assert_eq!(limiter.when(&"k"), Duration::from_millis(10));
    /// ```
    #[must_use]
    pub fn rate_limiter<K>(&self) -> MaxOf<K>
    where
        K: Clone + Eq + Hash + Send + Sync + 'static,
    {
        let mut backoff =
            ExponentialBackoff::new(self.base_delay, self.max_delay).with_jitter(self.jitter);
        if let Some(seed) = self.jitter_seed {
            backoff = backoff.with_seed(seed);
        }
        MaxOf::new(Vec::new())
            .with(backoff)
            .with(TokenBucket::new(self.qps, self.burst))
    }
}
