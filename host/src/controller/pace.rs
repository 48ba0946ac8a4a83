//! What one plugin may make the host spend per second: CPU time in its
//! calls (a share of the cores; the call pool measures it on the call's
//! thread) and bytes its responses have the store write
//! (statuses, children, finalizers). Each is a bucket that a call or a
//! write may take into debt; while either is in debt the plugin's keys
//! wait for it to be repaid instead of being called ("paced"), whatever
//! mix of requeues, writes and watch events brings them. A plugin within
//! its share never waits.
//!
//! The defaults ([`PaceLimits::default`]) leave a busy legitimate plugin
//! alone (podsim bringing 100,000 Pods up fits the write burst) and hold
//! a faulty one to half a core and a few MiB a second; the plugin's
//! `PluginGrant` raises them (`spec.limits.cpu`,
//! `spec.limits.writeMiBPerSecond`). Measured in BENCHMARKS.md, "Plugins
//! that write fat statuses".

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::Api;
use crate::contract::{EventRecord, Severity};
use crate::object::ObjectKey;

use super::events;

/// A plugin's share: call time and bytes written, each a rate and the
/// burst it may spend at once.
///
/// ```
/// use setpoint::controller::PaceLimits;
///
/// let limits = PaceLimits::default();
/// assert_eq!(limits.cores, 0.5);
/// assert_eq!(limits.write_bytes_per_second, 4.0 * 1024.0 * 1024.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaceLimits {
    /// Cores' worth of call time a second (0.5: half a core).
    pub cores: f64,
    /// Bytes of objects written a second.
    pub write_bytes_per_second: f64,
}

impl Default for PaceLimits {
    fn default() -> Self {
        Self {
            cores: DEFAULT_CORES,
            write_bytes_per_second: DEFAULT_WRITE_MIB_PER_SECOND * MIB,
        }
    }
}

/// The default share of call time: half a core.
pub const DEFAULT_CORES: f64 = 0.5;
/// The default write rate, MiB a second.
pub const DEFAULT_WRITE_MIB_PER_SECOND: f64 = 4.0;
const MIB: f64 = 1024.0 * 1024.0;
/// How many seconds of its rate a plugin may spend at once: a plugin
/// that starts work on many objects (or one slow call) is not paced.
const CPU_BURST_SECONDS: f64 = 4.0;
const WRITE_BURST_SECONDS: f64 = 64.0;
/// How often the limits are read again from the plugin's grant.
pub(super) const LIMITS_REFRESH: Duration = Duration::from_secs(2);

/// How long a plugin must have stayed within its shares for its pacing
/// episode to end. A plugin working at its share flips in and out of it
/// call after call: with an episode ending at the first call within it,
/// each flip was a new episode, a warning and an Event written (54,081 of
/// them in a run at a million Pods; docs/benchmarks/scale.md).
pub(super) const EPISODE_QUIET: Duration = Duration::from_secs(60);

/// Which share a plugin ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Call time.
    Cpu,
    /// Bytes written.
    Writes,
}

impl Resource {
    /// The label used in metrics and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Writes => "writes",
        }
    }
}

/// A bucket that may go into debt: `level` is what is left (negative
/// while in debt), refilled at `rate` a second up to `burst`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: f64, burst_seconds: f64, now: Instant) -> Self {
        Self {
            level: rate * burst_seconds,
            at: now,
        }
    }

    fn refill(&mut self, rate: f64, burst_seconds: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * rate).min(rate * burst_seconds);
        self.at = now;
    }

    /// How long until the debt is repaid, if in debt.
    fn wait(&self, rate: f64) -> Option<Duration> {
        (self.level < 0.0)
            .then(|| Duration::from_secs_f64(-self.level / rate.max(f64::MIN_POSITIVE)))
    }
}

#[derive(Debug)]
struct State {
    limits: PaceLimits,
    /// When the limits were last read from the grant.
    limits_read: Option<Instant>,
    cpu: Bucket,
    writes: Bucket,
    /// The resource the plugin is paced on now, if any: a new episode is
    /// reported once.
    paced_on: Option<Resource>,
    /// When a call last had to wait.
    last_paced: Option<Instant>,
    /// How long within its shares ends an episode ([`EPISODE_QUIET`]).
    quiet: Duration,
}

impl State {
    /// Both buckets refilled to now at the limits in force.
    fn refill(&mut self) {
        let now = Instant::now();
        self.cpu.refill(self.limits.cores, CPU_BURST_SECONDS, now);
        self.writes
            .refill(self.limits.write_bytes_per_second, WRITE_BURST_SECONDS, now);
    }

    /// The longer of the two buckets' waits, and whose it is.
    fn wait(&self) -> Option<(Duration, Resource)> {
        let waits = [
            self.cpu.wait(self.limits.cores).map(|w| (w, Resource::Cpu)),
            self.writes
                .wait(self.limits.write_bytes_per_second)
                .map(|w| (w, Resource::Writes)),
        ];
        waits.into_iter().flatten().max_by_key(|(w, _)| *w)
    }
}

/// One plugin's pace; see the module docs.
///
/// ```
/// use std::time::Duration;
/// use setpoint::controller::{Pace, PaceLimits, Resource};
///
/// let pace = Pace::new(PaceLimits { cores: 0.5, write_bytes_per_second: 1000.0 });
/// assert!(pace.wait().is_none(), "a new plugin has its whole burst");
/// pace.charge_call(Duration::from_secs(3));
/// assert!(pace.wait().is_some(), "3 s of calls is past half a core's 2 s burst");
/// let (wait, resource) = pace.wait().unwrap();
/// assert_eq!(resource, Resource::Cpu);
/// assert!(wait <= Duration::from_secs(2), "{wait:?}: the 1 s debt at half a core");
/// ```
#[derive(Debug)]
pub struct Pace {
    state: Mutex<State>,
}

/// What [`Pace::wait`] found changed: the plugin started or stopped being
/// paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Episode {
    /// Nothing new.
    Same,
    /// Pacing started on this resource.
    Started(Resource),
}

impl Pace {
    /// A pace with `limits` and full buckets.
    pub fn new(limits: PaceLimits) -> Self {
        let now = Instant::now();
        Self {
            state: Mutex::new(State {
                limits,
                limits_read: None,
                cpu: Bucket::full(limits.cores, CPU_BURST_SECONDS, now),
                writes: Bucket::full(limits.write_bytes_per_second, WRITE_BURST_SECONDS, now),
                paced_on: None,
                last_paced: None,
                quiet: EPISODE_QUIET,
            }),
        }
    }

    /// [`Pace::new`] whose episodes end after `quiet` within its shares.
    #[cfg(test)]
    fn with_quiet(limits: PaceLimits, quiet: Duration) -> Self {
        let pace = Self::new(limits);
        pace.lock().quiet = quiet;
        pace
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The limits in force.
    pub fn limits(&self) -> PaceLimits {
        self.lock().limits
    }

    /// Whether the limits are due to be read again from the grant.
    pub(super) fn limits_due(&self) -> bool {
        self.lock()
            .limits_read
            .is_none_or(|at| at.elapsed() >= LIMITS_REFRESH)
    }

    /// Set the limits (read from the plugin's grant), keeping what the
    /// buckets hold.
    pub fn set_limits(&self, limits: PaceLimits) {
        let mut state = self.lock();
        state.refill();
        state.limits = limits;
        state.limits_read = Some(Instant::now());
    }

    /// Charge `took` of call time.
    pub fn charge_call(&self, took: Duration) {
        let mut state = self.lock();
        state.refill();
        state.cpu.level -= took.as_secs_f64();
    }

    /// Charge `bytes` written.
    pub fn charge_writes(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut state = self.lock();
        state.refill();
        state.writes.level -= bytes as f64;
    }

    /// How long the plugin's next call must wait, and for which share;
    /// `None` when it is within both.
    pub fn wait(&self) -> Option<(Duration, Resource)> {
        self.wait_noting().0
    }

    /// [`Pace::wait`] without noting it: what a worker checks before it
    /// takes another key, leaving the episode to the turn that is paced.
    pub(super) fn debt(&self) -> Option<(Duration, Resource)> {
        let mut state = self.lock();
        state.refill();
        state.wait()
    }

    /// [`Pace::wait`], and whether a pacing episode started with it.
    pub(super) fn wait_noting(&self) -> (Option<(Duration, Resource)>, Episode) {
        let mut state = self.lock();
        state.refill();
        let wait = state.wait();
        let State {
            paced_on,
            last_paced,
            quiet,
            ..
        } = &mut *state;
        let now = Instant::now();
        let episode = match (wait, *paced_on) {
            (Some((_, resource)), None) => {
                *paced_on = Some(resource);
                *last_paced = Some(now);
                Episode::Started(resource)
            }
            (Some(_), Some(_)) => {
                *last_paced = Some(now);
                Episode::Same
            }
            (None, Some(_)) => {
                if last_paced.is_none_or(|at| now.duration_since(at) >= *quiet) {
                    *paced_on = None;
                }
                Episode::Same
            }
            (None, None) => Episode::Same,
        };
        (wait, episode)
    }
}

impl Default for Pace {
    fn default() -> Self {
        Self::new(PaceLimits::default())
    }
}

/// The limits a plugin's `PluginGrant` sets, over the defaults.
pub(super) fn limits_from(grant: Option<&crate::egress::Grant>) -> PaceLimits {
    let defaults = PaceLimits::default();
    let Some(limits) = grant.map(|g| &g.limits) else {
        return defaults;
    };
    PaceLimits {
        cores: limits.cpu.unwrap_or(defaults.cores),
        write_bytes_per_second: limits
            .write_mib_per_second
            .map_or(defaults.write_bytes_per_second, |m| m * MIB),
    }
}

/// Whether the plugin is over its share (`pace`): how long `key` waits.
/// The limits (and the event budget's) are read from the plugin's grant
/// every few seconds; the
/// first wait of an episode is said in a warning log line and an Event on
/// the object it held.
pub(super) async fn paced(
    shared: &super::Shared,
    api: &Api,
    manifest: &super::Manifest,
    key: &ObjectKey,
) -> Option<Duration> {
    if shared.pace.limits_due() {
        let grant = shared.egress.grant(&manifest.name).await.ok().flatten();
        shared.pace.set_limits(limits_from(grant.as_ref()));
        shared.event_budget.set_burst(
            grant
                .and_then(|g| g.limits.events)
                .unwrap_or(super::events::OBJECT_BURST),
        );
    }
    let (wait, episode) = shared.pace.wait_noting();
    let (wait, resource) = wait?;
    shared.tally.paced(resource);
    if let Episode::Started(resource) = episode {
        let limits = shared.pace.limits();
        let (share, field) = match resource {
            super::Resource::Cpu => (
                format!("{} cores of call time", limits.cores),
                "spec.limits.cpu",
            ),
            super::Resource::Writes => (
                format!(
                    "{} MiB a second of objects written",
                    limits.write_bytes_per_second / (1024.0 * 1024.0)
                ),
                "spec.limits.writeMiBPerSecond",
            ),
        };
        let message = format!(
            "plugin {} is over its share of {share}: its reconciles wait until it is back within it \
             (its PluginGrant raises it: {field}; setpoint_plugin_paced_total counts the waits)",
            manifest.name
        );
        tracing::warn!(plugin = %manifest.name, object = %key, resource = resource.as_str(), retry_in = ?wait, "{message}");
        let event = EventRecord {
            severity: Severity::Warning,
            reason: "Paced".into(),
            message,
        };
        // Read only here, once an episode: a paced turn reads nothing.
        if let Some(object) = shared.informer.get(key) {
            let _ = events::record(api, &manifest.name, &object, &event).await;
        }
    }
    Some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_burst_nothing_waits_and_past_it_the_debt_sets_the_wait() {
        let pace = Pace::new(PaceLimits {
            cores: 1.0,
            write_bytes_per_second: 100.0,
        });
        pace.charge_writes(6_400);
        assert!(pace.wait().is_none(), "exactly the 64 s burst");
        pace.charge_writes(200);
        let (wait, resource) = pace.wait().unwrap();
        assert_eq!(resource, Resource::Writes);
        assert!(
            wait > Duration::from_millis(1_900) && wait <= Duration::from_secs(2),
            "{wait:?}: 200 bytes at 100 a second"
        );
    }

    #[test]
    fn an_episode_starts_once_and_ends_once_the_plugin_stayed_within_its_share() {
        let quiet = Duration::from_millis(300);
        let pace = Pace::with_quiet(
            PaceLimits {
                cores: 100.0,
                write_bytes_per_second: 1.0,
            },
            quiet,
        );
        pace.charge_call(Duration::from_secs(401));
        let (wait, episode) = pace.wait_noting();
        assert_eq!(episode, Episode::Started(Resource::Cpu));
        assert!(wait.is_some());
        assert_eq!(pace.wait_noting().1, Episode::Same, "reported once");
        // In and out of its share, call after call: one episode.
        let repaid = |pace: &Pace| {
            for _ in 0..200 {
                let (wait, episode) = pace.wait_noting();
                assert_eq!(episode, Episode::Same, "never a new episode meanwhile");
                if wait.is_none() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            panic!("not repaid");
        };
        for _ in 0..3 {
            repaid(&pace);
            // Just repaid: far more than the bucket refilled since (at 100
            // cores, a tenth of a second of refill) is a debt.
            pace.charge_call(Duration::from_secs(10));
            let (wait, episode) = pace.wait_noting();
            assert!(wait.is_some());
            assert_eq!(episode, Episode::Same, "still the same episode");
        }
        // Within its share for the quiet period: the episode ends, and the
        // next wait starts a new one.
        repaid(&pace);
        std::thread::sleep(quiet);
        assert_eq!(pace.wait_noting(), (None, Episode::Same));
        pace.charge_call(Duration::from_secs(800));
        assert_eq!(
            pace.wait_noting().1,
            Episode::Started(Resource::Cpu),
            "a new episode"
        );
    }

    #[test]
    fn raising_the_limits_keeps_the_debt_but_repays_it_faster() {
        let pace = Pace::new(PaceLimits {
            cores: 0.5,
            write_bytes_per_second: 1.0,
        });
        pace.charge_call(Duration::from_secs(4));
        let (slow, _) = pace.wait().unwrap();
        pace.set_limits(PaceLimits {
            cores: 4.0,
            write_bytes_per_second: 1.0,
        });
        let (fast, _) = pace.wait().unwrap();
        assert!(fast * 4 < slow, "{fast:?} vs {slow:?}");
    }
}
