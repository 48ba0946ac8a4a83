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
    duration: Histogram,
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
            duration: counters.duration.snapshot(),
        }
    }
}
