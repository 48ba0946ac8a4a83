//! How fast and how much a plugin may send: a token bucket and a
//! concurrency cap per plugin, a token bucket per plugin and destination,
//! a `Retry-After` the destination asked for, and a circuit breaker per
//! plugin and destination. Keyed per plugin so that one plugin's flood
//! never holds back another's requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// Defaults of the limits (a `PluginGrant`'s `spec.limits` overrides the
/// per-plugin rate and concurrency).
#[derive(Debug, Clone, Copy)]
pub struct LimitsConfig {
    /// Requests per second per plugin.
    pub plugin_rps: f64,
    /// Requests in flight per plugin.
    pub plugin_concurrency: usize,
    /// Requests per second per plugin and destination, unless the grant
    /// sets the plugin's rate (which then applies per destination too).
    pub destination_rps: f64,
    /// Consecutive failures (no answer, or 5xx) that open a destination's
    /// breaker.
    pub breaker_failures: u32,
    /// How long an open breaker refuses before it lets one request try.
    pub breaker_open: Duration,
    /// Once `breaker_open` has passed, how far apart the breaker lets
    /// single requests try, until one is answered (closing it) or fails
    /// (opening it again for `breaker_open`). Short, so that the requests
    /// held meanwhile go soon after the destination is back, not a whole
    /// `breaker_open` later.
    pub breaker_probe_every: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            plugin_rps: 50.0,
            plugin_concurrency: 8,
            destination_rps: 20.0,
            breaker_failures: 5,
            breaker_open: Duration::from_secs(30),
            breaker_probe_every: Duration::from_secs(2),
        }
    }
}

/// A token bucket: `rate` tokens a second, up to `rate` (at least 1) saved.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Self {
        Self {
            rate,
            tokens: rate.max(1.0),
            last: Instant::now(),
        }
    }

    /// Take a token, or say how long until one is there.
    fn take(&mut self, rate: f64, now: Instant) -> Result<(), Duration> {
        self.rate = rate;
        let burst = rate.max(1.0);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
        }
    }
}

#[derive(Debug, Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
}

/// Why a request may not go now, and when it may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// What holds it: `rate limit`, `Retry-After`, `circuit breaker`.
    pub reason: &'static str,
    /// When to try again.
    pub after: Duration,
}

#[derive(Default)]
struct State {
    plugins: HashMap<String, Bucket>,
    destinations: HashMap<(String, String), Bucket>,
    retry_after: HashMap<(String, String), Instant>,
    breakers: HashMap<(String, String), Breaker>,
    concurrency: HashMap<String, (usize, Arc<Semaphore>)>,
}

/// The limits of every plugin and destination.
pub struct Limits {
    config: LimitsConfig,
    state: Mutex<State>,
}

impl Limits {
    /// Limits with these defaults.
    pub fn new(config: LimitsConfig) -> Self {
        Self {
            config,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take what one request to `destination` needs, or say what holds it.
    pub fn admit(
        &self,
        plugin: &str,
        destination: &str,
        plugin_rps: Option<f64>,
    ) -> Result<(), Held> {
        let now = Instant::now();
        let key = (plugin.to_owned(), destination.to_owned());
        let mut state = self.state();
        if let Some(until) = state.retry_after.get(&key).copied() {
            if until > now {
                return Err(Held {
                    reason: "Retry-After",
                    after: until - now,
                });
            }
            state.retry_after.remove(&key);
        }
        let probe_every = self
            .config
            .breaker_probe_every
            .min(self.config.breaker_open);
        if let Some(breaker) = state.breakers.get_mut(&key)
            && let Some(until) = breaker.open_until
        {
            if until > now {
                return Err(Held {
                    reason: "circuit breaker",
                    after: until - now,
                });
            }
            // Half open: this request tries, the others wait for the next
            // probe; its failure opens the breaker again, its answer closes it.
            breaker.open_until = Some(now + probe_every);
        }
        let rate = plugin_rps.unwrap_or(self.config.plugin_rps);
        state
            .plugins
            .entry(plugin.to_owned())
            .or_insert_with(|| Bucket::new(rate))
            .take(rate, now)
            .map_err(|after| Held {
                reason: "rate limit",
                after,
            })?;
        // A grant's rate is the operator's word for this plugin's
        // destinations too; without one, each destination gets less than
        // the plugin as a whole.
        let rate = match plugin_rps {
            Some(granted) => granted,
            None => self.config.destination_rps.min(rate),
        };
        state
            .destinations
            .entry(key)
            .or_insert_with(|| Bucket::new(rate))
            .take(rate, now)
            .map_err(|after| Held {
                reason: "rate limit",
                after,
            })
    }

    /// The semaphore bounding `plugin`'s requests in flight.
    pub fn concurrency(&self, plugin: &str, granted: Option<usize>) -> Arc<Semaphore> {
        let permits = granted.unwrap_or(self.config.plugin_concurrency).max(1);
        let mut state = self.state();
        let entry = state
            .concurrency
            .entry(plugin.to_owned())
            .or_insert_with(|| (permits, Arc::new(Semaphore::new(permits))));
        if entry.0 != permits {
            *entry = (permits, Arc::new(Semaphore::new(permits)));
        }
        entry.1.clone()
    }

    /// Record how a request to `destination` went: `failed` (no answer or
    /// 5xx) counts towards the breaker, anything else closes it; a
    /// `retry_after` holds the destination's requests until it passes.
    pub fn record(
        &self,
        plugin: &str,
        destination: &str,
        failed: bool,
        retry_after: Option<Duration>,
    ) {
        let key = (plugin.to_owned(), destination.to_owned());
        let mut state = self.state();
        if let Some(after) = retry_after {
            state
                .retry_after
                .insert(key.clone(), Instant::now() + after);
        }
        let breaker = state.breakers.entry(key).or_default();
        if failed {
            breaker.failures += 1;
            if breaker.failures >= self.config.breaker_failures {
                breaker.open_until = Some(Instant::now() + self.config.breaker_open);
            }
        } else {
            *breaker = Breaker::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_says_when_the_next_token_comes() {
        let limits = Limits::new(LimitsConfig::default());
        for _ in 0..2 {
            limits.admit("p", "http://a:1", Some(2.0)).unwrap();
        }
        let held = limits.admit("p", "http://a:1", Some(2.0)).unwrap_err();
        assert_eq!(held.reason, "rate limit");
        assert!(held.after <= Duration::from_millis(500), "{held:?}");
        // Another plugin has its own bucket.
        limits.admit("q", "http://a:1", Some(2.0)).unwrap();
    }

    #[test]
    fn failures_open_the_breaker_and_retry_after_holds_the_destination() {
        let config = LimitsConfig {
            breaker_failures: 2,
            ..LimitsConfig::default()
        };
        let limits = Limits::new(config);
        limits.record("p", "d", true, None);
        limits.admit("p", "d", None).unwrap();
        limits.record("p", "d", true, None);
        assert_eq!(
            limits.admit("p", "d", None).unwrap_err().reason,
            "circuit breaker"
        );
        limits.admit("p", "other", None).unwrap();
        limits.record("p", "e", false, Some(Duration::from_secs(5)));
        let held = limits.admit("p", "e", None).unwrap_err();
        assert_eq!(held.reason, "Retry-After");
        assert!(held.after > Duration::from_secs(4));
    }

    #[test]
    fn an_open_breaker_lets_one_request_try_per_probe_interval_until_one_is_answered() {
        let config = LimitsConfig {
            breaker_failures: 1,
            breaker_open: Duration::from_millis(40),
            breaker_probe_every: Duration::from_millis(20),
            ..LimitsConfig::default()
        };
        let limits = Limits::new(config);
        limits.record("p", "d", true, None);
        let held = limits.admit("p", "d", None).unwrap_err();
        assert_eq!(held.reason, "circuit breaker");
        assert!(held.after > Duration::from_millis(20), "{held:?}");

        std::thread::sleep(Duration::from_millis(45));
        limits.admit("p", "d", None).expect("the first probe tries");
        let held = limits.admit("p", "d", None).unwrap_err();
        assert!(
            held.after <= Duration::from_millis(20),
            "the next request waits for the next probe, not a whole open period: {held:?}"
        );

        // The probe failed: open again for the whole period.
        limits.record("p", "d", true, None);
        let held = limits.admit("p", "d", None).unwrap_err();
        assert!(held.after > Duration::from_millis(20), "{held:?}");

        // A probe answered: closed, everyone goes.
        std::thread::sleep(Duration::from_millis(45));
        limits.admit("p", "d", None).expect("a probe tries");
        limits.record("p", "d", false, None);
        for _ in 0..3 {
            limits.admit("p", "d", None).expect("closed");
        }
    }
}
