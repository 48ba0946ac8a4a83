//! A controller's settings ([`Config`]) and counters ([`Stats`]).

use std::time::Duration;

use super::{Checkpoint, Concurrency, HotLoopConfig, RequeueConfig, Tally, concurrency};
use crate::queue;

/// Settings of one controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// The most keys reconciled at once (distinct keys reconcile in
    /// parallel, one key never twice at once). Default: 16 per reconcile
    /// pool thread, of which [`Concurrency::Adaptive`] uses what pays.
    pub workers: usize,
    /// Whether the keys in flight adapt between a floor of 8 per reconcile
    /// pool thread and `workers` (the default), or are always `workers`.
    pub concurrency: Concurrency,
    /// Workqueue settings (backoff, rate limit).
    pub queue: queue::Config,
    /// Every cached object of the reconciled kind is queued again (at low
    /// priority) this often; `None` disables the periodic resync. Default
    /// [`DEFAULT_RESYNC`], 10 hours.
    pub resync: Option<Duration>,
    /// The hot-loop circuit breaker's limits.
    pub hot_loop: HotLoopConfig,
    /// The floor and per-key rate of requested requeues.
    pub requeue: RequeueConfig,
    /// The host's egress for external requests (shared by a host's
    /// controllers); `None` makes one for this controller alone.
    pub egress: Option<crate::egress::Egress>,
    /// Where the controller's reconciles are counted; `None` starts a new
    /// tally. A host gives each plugin file's controllers the same one, so
    /// that its figures survive reloads.
    pub tally: Option<Tally>,
    /// Where the controller keeps its checkpoint, so that a restart
    /// resumes instead of reconciling every object again; `None` (the
    /// default) keeps none. A host on the embedded store gives each
    /// plugin one; a controller of a cluster's host keeps none (shards move
    /// between hosts).
    pub checkpoint: Option<Checkpoint>,
}

/// The default period of a controller's resync: 10 hours, as
/// controller-runtime's `SyncPeriod`. A resync calls the plugin once for
/// every object it holds: every 10 minutes (the default before) that was
/// half a core for ever at a million objects, and a load longer than the
/// period had its whole million queued again behind the new objects
/// (docs/benchmarks/scale.md, "Reading your own writes"). A plugin that
/// keeps something outside the host in line asks for its own look
/// (`requeue_after`, as the DNS and RabbitMQ providers do).
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(10 * 60 * 60);

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: concurrency::default_max(),
            concurrency: Concurrency::Adaptive,
            queue: queue::Config::default(),
            resync: Some(DEFAULT_RESYNC),
            hot_loop: HotLoopConfig::default(),
            requeue: RequeueConfig::default(),
            egress: None,
            tally: None,
            checkpoint: None,
        }
    }
}

/// Counters of one controller, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Reconciles made (see [`Tally`]).
    pub reconciles: u64,
    /// Times a worker started on a key another worker was still reconciling.
    /// The queue makes this impossible; the controller checks it anyway.
    pub concurrent_reconciles_of_one_key: u64,
    /// Times the hot-loop breaker opened.
    pub hot_loops: u64,
    /// Keys that may be reconciled at once now (see [`Concurrency`]).
    pub concurrency: usize,
}
