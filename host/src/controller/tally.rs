//! What a controller's reconciles came to: how many, how each ended and how
//! long each took. Counted once, where a worker's turn with a key ends, and
//! read by everything that reports reconciles: [`Controller::stats`],
//! `setpoint plugins` (through the host's plugin files, whose tally a
//! reload keeps) and `/metrics` (`controller_runtime_reconcile_*`,
//! `setpoint_plugin_reconcile*`).
//!
//! A reconcile is one turn in which the reconciler was called, its effect
//! rounds included; a turn that ends before the call (the object is gone,
//! the breaker holds it) is none. Wasm call times and guest faults are the
//! runtime's (`runtime::PluginCallStats`): a call is not a reconcile.
//!
//! [`Controller::stats`]: super::Controller::stats

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::metrics::{Histogram, HistogramSnapshot};

/// The counters one controller's reconciles are tallied in; cheap to clone
/// (clones share them).
///
/// Given in [`Config::tally`](super::Config::tally), one tally outlives
/// the controller: a host gives each plugin file's controllers the same
/// one, so its figures survive reloads.
///
/// ```
/// use std::time::Duration;
/// use setpoint::controller::{Tally, TallyOutcome};
///
/// let tally = Tally::default();
/// tally.record(TallyOutcome::Succeeded { wrote: true }, Duration::from_millis(3));
/// tally.record(TallyOutcome::Succeeded { wrote: false }, Duration::from_millis(1));
/// tally.clone().record(TallyOutcome::Failed, Duration::from_millis(2));
/// tally.record(TallyOutcome::Conflicted, Duration::from_millis(2));
/// let seen = tally.snapshot();
/// assert_eq!((seen.reconciles, seen.errors, seen.conflicts, seen.wrote), (4, 1, 1, 1));
/// assert_eq!(seen.duration.count, 4);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    reconciles: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    wrote: AtomicU64,
    events_dropped: AtomicU64,
    /// Keys made to wait over the plugin's share, by `pace::Resource`
    /// (cpu, writes).
    paced: [AtomicU64; 2],
    written_bytes: AtomicU64,
    /// Nanoseconds of CPU its calls took on their threads.
    call_cpu_nanos: AtomicU64,
    duration: Histogram,
    recent: Recent,
}

/// How many of the latest reconciles' durations are kept for
/// [`Tally::recent_quantile`].
const RECENT: usize = 1024;

/// The durations of the latest [`RECENT`] reconciles (nanoseconds, 0 for
/// a slot not written yet), written round-robin without a lock: the
/// histogram's powers-of-ten buckets cannot tell a p99 of 3 ms from 9 ms.
#[derive(Debug)]
struct Recent {
    next: AtomicU64,
    nanos: Box<[AtomicU64]>,
}

impl Default for Recent {
    fn default() -> Self {
        Self {
            next: AtomicU64::new(0),
            nanos: (0..RECENT).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// How one reconcile ended, as the tally counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TallyOutcome {
    /// The response was applied in full.
    Succeeded {
        /// Whether applying it wrote anything (an object, a status, an
        /// event): a change converged, not a look that found nothing to do.
        wrote: bool,
    },
    /// A write it asked for found the object (or a child) changed since
    /// the reconciler saw it: optimistic concurrency at work, retried, and
    /// not the plugin's failure.
    Conflicted,
    /// The reconciler failed, the host refused its response, a write it
    /// asked for failed, or a child it wanted clashed with another's.
    Failed,
}

/// A tally's figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TallySnapshot {
    /// Reconciles made.
    pub reconciles: u64,
    /// Of them, the ones that ended as [`TallyOutcome::Failed`].
    pub errors: u64,
    /// Of them, the ones that ended as [`TallyOutcome::Conflicted`].
    pub conflicts: u64,
    /// Of them, the successful ones that wrote something.
    pub wrote: u64,
    /// How long each took, from taking the key to the end of its writes.
    pub duration: HistogramSnapshot,
    /// Events of its responses not recorded: over the event budget
    /// (`events::EventBudget`).
    pub events_dropped: u64,
    /// Turns of keys made to wait because the plugin was over its share
    /// of call time (`controller::Pace`).
    pub paced_cpu: u64,
    /// Turns of keys made to wait because the plugin was over its share
    /// of bytes written.
    pub paced_writes: u64,
    /// Bytes of objects its responses had the store write.
    pub written_bytes: u64,
    /// CPU time its calls took on the threads that ran them: what the
    /// pace charges against the plugin's share of the cores.
    pub call_cpu: Duration,
}

impl Tally {
    /// Count one reconcile that took `took`.
    pub fn record(&self, outcome: TallyOutcome, took: Duration) {
        let counters = &self.0;
        counters.reconciles.fetch_add(1, Ordering::Relaxed);
        match outcome {
            TallyOutcome::Succeeded { wrote: true } => {
                counters.wrote.fetch_add(1, Ordering::Relaxed);
            }
            TallyOutcome::Succeeded { wrote: false } => {}
            TallyOutcome::Conflicted => {
                counters.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            TallyOutcome::Failed => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        counters.duration.observe(took);
        let slot = counters.recent.next.fetch_add(1, Ordering::Relaxed) as usize % RECENT;
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        counters.recent.nanos[slot].store(nanos, Ordering::Relaxed);
    }

    /// The `q` quantile (0.0–1.0) of the latest reconciles' durations (up
    /// to 1,024 of them), or `None` before the first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::controller::{Tally, TallyOutcome};
    ///
    /// let tally = Tally::default();
    /// assert_eq!(tally.recent_quantile(0.99), None);
    /// for ms in 1..=100 {
    ///     tally.record(TallyOutcome::Succeeded { wrote: false }, Duration::from_millis(ms));
    /// }
    /// assert_eq!(tally.recent_quantile(0.99), Some(Duration::from_millis(99)));
    /// assert_eq!(tally.recent_quantile(0.5), Some(Duration::from_millis(50)));
    /// ```
    #[must_use]
    pub fn recent_quantile(&self, q: f64) -> Option<Duration> {
        let mut seen: Vec<u64> = self
            .0
            .recent
            .nanos
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .filter(|&n| n > 0)
            .collect();
        if seen.is_empty() {
            return None;
        }
        seen.sort_unstable();
        let rank = ((q.clamp(0.0, 1.0) * seen.len() as f64).ceil() as usize).clamp(1, seen.len());
        Some(Duration::from_nanos(seen[rank - 1]))
    }

    /// Count events a response could not record: over the budget.
    pub fn events_dropped(&self, n: u64) {
        self.0.events_dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Count a key's turn made to wait over the plugin's `resource` share.
    pub fn paced(&self, resource: super::Resource) {
        let index = match resource {
            super::Resource::Cpu => 0,
            super::Resource::Writes => 1,
        };
        self.0.paced[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Count CPU time one of the plugin's calls took.
    pub fn called(&self, cpu: Duration) {
        let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        self.0.call_cpu_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Count bytes of objects written for the plugin's responses.
    pub fn written(&self, bytes: u64) {
        self.0.written_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The figures so far.
    #[must_use]
    pub fn snapshot(&self) -> TallySnapshot {
        let counters = &self.0;
        TallySnapshot {
            reconciles: counters.reconciles.load(Ordering::Relaxed),
            errors: counters.errors.load(Ordering::Relaxed),
            conflicts: counters.conflicts.load(Ordering::Relaxed),
            wrote: counters.wrote.load(Ordering::Relaxed),
            events_dropped: counters.events_dropped.load(Ordering::Relaxed),
            paced_cpu: counters.paced[0].load(Ordering::Relaxed),
            paced_writes: counters.paced[1].load(Ordering::Relaxed),
            written_bytes: counters.written_bytes.load(Ordering::Relaxed),
            call_cpu: Duration::from_nanos(counters.call_cpu_nanos.load(Ordering::Relaxed)),
            duration: counters.duration.snapshot(),
        }
    }
}
