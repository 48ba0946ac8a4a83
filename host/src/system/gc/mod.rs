//! The garbage collector: a system controller that deletes dependents
//! whose owners are gone, and completes `Foreground` and `Orphan`
//! deletions (see `api::delete` for the request side). This module owns
//! running it: its loop over the store's changes and its workqueue, the
//! watchdog and the health figures. The decisions are `collector`'s, the
//! owner index it decides from is `graph`'s, and `simulation` runs the same
//! decisions for a plan.
//!
//! # Expected Flow
//!
//! 1. The collector follows every object under `/registry/` through the
//!    [`watcher`](crate::informer::watcher): a list at one revision, then
//!    the changes after it, so it misses nothing. Each list (the first, a
//!    relist after a broken watch, the periodic resync) rebuilds the owner
//!    index.
//! 2. It queues, from each list, every dependent with an owner uid that is
//!    not a live object or is being deleted in the foreground, and every
//!    owner with a pending `foregroundDeletion` or `orphan` finalizer: work
//!    left over from before a restart is picked up.
//! 3. Each change updates the index and queues what it affects: a deleted
//!    object queues its dependents; an object entering foreground or orphan
//!    deletion queues itself; a dependent that changes or goes queues its
//!    foreground-deleting owners.
//! 4. A queued dependent is read live. Its owners are classified: *solid*
//!    (exists, not being deleted in the foreground), *waiting* (being
//!    deleted in the foreground) or *dangling* (no live object with that
//!    uid; absence is verified with a live read, so a uid that never
//!    existed is dangling too). With a solid owner left, references to
//!    dangling and waiting owners are removed; otherwise the dependent is
//!    deleted (in the foreground when a waiting owner needs its own
//!    dependents gone first, else in the background).
//! 5. A queued owner in orphan deletion has the reference to it removed
//!    from every dependent, then loses its `orphan` finalizer. An owner in
//!    foreground deletion queues its dependents and loses its
//!    `foregroundDeletion` finalizer once no dependent with
//!    `blockOwnerDeletion: true` remains.
//!
//! # Guarantees
//!
//! - Every write is conditional on the revision read (and the uid): a
//!   dependent that changed since is re-read and decided again.
//! - Nothing is deleted because of a stale index: "the owner is gone" is
//!   always confirmed against the store.
//! - Work is queued on a [`WorkQueue`] (deduplicated; an item queued while
//!   it is worked on is worked on again after). Failed work is retried with
//!   the queue's per-item exponential backoff (50 ms doubling to 5 s); a
//!   restart redoes what is left. Work that keeps failing is logged,
//!   conflicts included.
//! - Changes and queued work take turns: after 64 changes in a row a
//!   queued item is worked on. While a list is read no item is.
//! - The collector relists every [`GcConfig::resync_every`] (10 hours by
//!   default, as the controllers' resync), so a change it somehow missed
//!   is acted on then, not never.
//! - A watchdog restarts a collector that stops making progress (no step
//!   for [`GcConfig::stall_after`] while an item is in progress or changes
//!   or work wait; long work reports progress as it goes) or that ended,
//!   and says so in the log; [`GarbageCollector::health`] (and `/metrics`)
//!   shows restarts, the last progress and the lag.
//!
//! # Caveats
//!
//! - A dependent created moments before its owner's foreground or orphan
//!   deletion completes, and not yet seen by the collector, is not waited
//!   for (foreground) or not orphaned (and is then collected as dangling).
//! - The index holds every object's uid, key and owner references in memory.

mod collector;
mod graph;
mod simulation;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::collector::{Collector, Item};
use crate::api::{Api, Error};
use crate::informer::watcher::Watcher;
use crate::queue::{self, ExponentialBackoff, WorkQueue};

pub(crate) use simulation::Simulation;

/// The key prefix of every object.
const ROOT: &str = "/registry/";
/// Changes handled in a row before a queued item gets its turn.
const EVENTS_PER_ITEM: usize = 64;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Failed attempts at one item after which even conflicts are logged.
const QUIET_FAILURES: u32 = 5;

/// How the garbage collector is watched over.
///
/// ```
/// use std::time::Duration;
/// use setpoint::system::{DEFAULT_GC_RESYNC, GcConfig};
/// let config = GcConfig { stall_after: Duration::from_secs(10), ..GcConfig::default() };
/// assert_eq!(config.resync_every, DEFAULT_GC_RESYNC);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcConfig {
    /// A collector that has made no progress for this long while it had
    /// something to do (an item in progress, changes or queued work) is
    /// restarted.
    pub stall_after: Duration,
    /// The collector lists the store again this often, acting on anything
    /// it missed. Default [`DEFAULT_GC_RESYNC`].
    pub resync_every: Duration,
}

/// The default period of the collector's relist: 10 hours, as the
/// controllers' resync ([`DEFAULT_RESYNC`](crate::controller::DEFAULT_RESYNC)).
/// A relist reads and indexes every object again: at a million objects
/// and their Events that is half a minute of a core, and every 10 minutes
/// (the default before) it fell, at the end of a load, into the minutes a
/// converged host should be idle, where a client's LIST shared the cores
/// with it (docs/benchmarks/scale.md, "Quiet after the load").
pub const DEFAULT_GC_RESYNC: Duration = crate::controller::DEFAULT_RESYNC;

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            stall_after: Duration::from_secs(60),
            resync_every: DEFAULT_GC_RESYNC,
        }
    }
}

/// How the garbage collector is doing, from [`GarbageCollector::health`].
///
/// ```
/// use std::sync::Arc;
/// use setpoint::{api::Api, store::MemoryBackend, system::GarbageCollector};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), setpoint::api::Error> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let health = GarbageCollector::new(api, Default::default()).health();
/// assert_eq!((health.restarts, health.last_progress), (0, None), "not started");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcHealth {
    /// Times the watchdog restarted a stalled or ended collector.
    pub restarts: u64,
    /// When the collector last completed a step (handled a change, worked
    /// an item, or found itself caught up); `None` before it started.
    pub last_progress: Option<SystemTime>,
    /// Work queued and ready, not yet done.
    pub pending: usize,
    /// Store revisions the collector has not handled yet.
    pub lag: i64,
}

/// The garbage collector of one store: started (and, on a cluster, stopped
/// and started again as leadership moves) as tasks, with one health record
/// across them. Cheap to clone; clones share the health record.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::object::meta;
/// use setpoint::store::MemoryBackend;
/// use setpoint::system::{GarbageCollector, GcConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
///
/// let gc = GarbageCollector::new(api.clone(), GcConfig::default()).start();
/// let owner = api.create(&events, event("owner")).await?;
/// let mut child = event("child");
/// child["metadata"]["ownerReferences"] = json!([meta::controller_reference(&owner)]);
/// api.create(&events, child).await?;
/// api.delete(&events, None, "owner", &Default::default()).await?;
/// while api.get(&events, None, "child").await.is_ok() {
///     tokio::time::sleep(Duration::from_millis(10)).await;
/// }
/// gc.abort();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct GarbageCollector {
    api: Api,
    config: GcConfig,
    progress: Arc<Progress>,
}

impl std::fmt::Debug for GarbageCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GarbageCollector")
            .field("config", &self.config)
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl GarbageCollector {
    /// A collector of `api`'s store, not started.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// use setpoint::system::{GarbageCollector, GcConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let gc = GarbageCollector::new(api, GcConfig {
    ///     stall_after: Duration::from_secs(5),
    ///     resync_every: Duration::from_secs(60),
    /// });
    /// assert_eq!(gc.health().restarts, 0);
    /// # Ok(()) }
    /// ```
    pub fn new(api: Api, config: GcConfig) -> Self {
        Self {
            api,
            config,
            progress: Arc::default(),
        }
    }

    /// Start the collector (see the module docs) and its watchdog as a task
    /// that runs until the handle is aborted or the watch hub stops. One
    /// running per store is enough; two are safe but do the work twice.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use setpoint::{api::Api, store::MemoryBackend, system::GarbageCollector};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let collector = GarbageCollector::new(api, Default::default());
    /// let task = collector.start();
    /// while collector.health().last_progress.is_none() {
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// task.abort();
    /// # Ok(()) }
    /// ```
    pub fn start(&self) -> JoinHandle<()> {
        tokio::spawn(watch_over(
            self.api.clone(),
            self.config,
            self.progress.clone(),
        ))
    }

    /// How the collector is doing (see [`GcHealth`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use setpoint::{api::Api, store::MemoryBackend, system::GarbageCollector};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let collector = GarbageCollector::new(api, Default::default());
    /// let task = collector.start();
    /// while collector.health().last_progress.is_none() {
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(collector.health().lag, 0);
    /// task.abort();
    /// # Ok(()) }
    /// ```
    pub fn health(&self) -> GcHealth {
        let progress = &self.progress;
        let last = progress.last_step_ms.load(Ordering::SeqCst);
        GcHealth {
            restarts: progress.restarts.load(Ordering::SeqCst),
            last_progress: (last != 0).then(|| UNIX_EPOCH + Duration::from_millis(last)),
            pending: progress.pending.load(Ordering::SeqCst),
            lag: if last == 0 {
                0
            } else {
                (self.api.hub().last_revision() - progress.seen.load(Ordering::SeqCst)).max(0)
            },
        }
    }
}

/// Shared between the collector, its watchdog and [`GarbageCollector::health`].
#[derive(Debug, Default)]
pub(super) struct Progress {
    restarts: AtomicU64,
    /// Unix milliseconds of the last step; 0: none yet.
    last_step_ms: AtomicU64,
    /// Unix milliseconds at which the item in progress started; 0: none.
    busy_since_ms: AtomicU64,
    pending: AtomicUsize,
    /// Every change up to this revision has been handled.
    seen: AtomicI64,
}

impl Progress {
    /// Progress within a long step (a page of a list, one dependent of
    /// many), so that the watchdog does not take long work for a stall.
    fn heartbeat(&self) {
        self.last_step_ms
            .store(unix_ms(SystemTime::now()), Ordering::SeqCst);
    }

    fn set_busy(&self, busy: bool) {
        let since = if busy { unix_ms(SystemTime::now()) } else { 0 };
        self.busy_since_ms.store(since, Ordering::SeqCst);
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn since_ms(then_ms: u64) -> Duration {
    Duration::from_millis(unix_ms(SystemTime::now()).saturating_sub(then_ms))
}

/// Run the collector and restart it when it stalls or ends. Aborting this
/// task aborts the collector too.
async fn watch_over(api: Api, config: GcConfig, progress: Arc<Progress>) {
    struct AbortOnDrop(JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let check = (config.stall_after / 4).max(Duration::from_millis(10));
    loop {
        progress.set_busy(false);
        let mut collector = AbortOnDrop(tokio::spawn(run(api.clone(), config, progress.clone())));
        // A fresh start counts as progress: the new collector lists first.
        progress.heartbeat();
        let reason = loop {
            tokio::time::sleep(check).await;
            if collector.0.is_finished() {
                match (&mut collector.0).await {
                    // The collector returns only when the watch hub stopped.
                    Ok(()) => return,
                    Err(err) => break format!("it ended: {err}"),
                }
            }
            // An idle collector steps on its tick, a busy one on every
            // change, item and page: quiet for this long means stuck, if
            // there is anything it should be doing.
            let quiet = since_ms(progress.last_step_ms.load(Ordering::SeqCst));
            if quiet <= config.stall_after {
                continue;
            }
            let busy = progress.busy_since_ms.load(Ordering::SeqCst) != 0;
            let behind = (api.hub().last_revision() - progress.seen.load(Ordering::SeqCst)).max(0);
            let queued = progress.pending.load(Ordering::SeqCst);
            if busy || behind > 0 || queued > 0 {
                break format!(
                    "no progress for {quiet:?} (working on an item: {busy}, changes not handled: {behind}, items queued: {queued})"
                );
            }
        };
        drop(collector);
        progress.restarts.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(
            %reason,
            restarts = progress.restarts.load(Ordering::SeqCst),
            "garbage collector stalled; restarting it"
        );
    }
}

/// Follow the store and work the queue, until the watch hub stops. Every
/// step is recorded in `progress`.
async fn run(api: Api, config: GcConfig, progress: Arc<Progress>) {
    let queue = WorkQueue::with_rate_limiter(
        queue::Config::named("garbage-collector"),
        ExponentialBackoff::new(MIN_BACKOFF, MAX_BACKOFF),
    );
    let mut collector = Collector::new(api.clone(), queue.clone(), progress.clone());
    let mut watcher = Watcher::new(&api, ROOT);
    let mut resync_at = Instant::now() + config.resync_every;
    let mut tick = tokio::time::interval((config.stall_after / 4).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut events_in_a_row = 0;
    loop {
        if let Some(seen) = watcher.progress() {
            progress.seen.store(seen, Ordering::SeqCst);
        }
        progress.pending.store(queue.len(), Ordering::SeqCst);
        progress.heartbeat();
        // No item while a list is read: the index is being rebuilt.
        let watching = watcher.is_watching();
        let work_turn = watching && events_in_a_row >= EVENTS_PER_ITEM;
        tokio::select! {
            biased;
            Some(item) = queue.get(), if work_turn => {
                events_in_a_row = 0;
                work(&mut collector, item).await;
            }
            event = watcher.next() => match event {
                Some(event) => {
                    events_in_a_row += 1;
                    collector.on_watch_event(event);
                }
                None => return,
            },
            Some(item) = queue.get(), if watching => {
                events_in_a_row = 0;
                work(&mut collector, item).await;
            }
            () = tokio::time::sleep_until(resync_at) => {
                tracing::debug!("garbage collector relisting (periodic resync)");
                watcher.relist();
                resync_at = Instant::now() + config.resync_every;
            }
            // Idle and caught up is progress too: the watchdog sees it.
            _ = tick.tick() => {}
        }
    }
}

/// Work one item handed out by the queue, and queue it again if it failed.
async fn work(collector: &mut Collector, item: Item) {
    let queue = collector.queue().clone();
    match collector.process(&item).await {
        Ok(()) => queue.forget(&item),
        Err(err @ Error::NotFound { .. }) => {
            // Something the item touched went while it was worked on:
            // perhaps the item's own object (then the next attempt finds
            // nothing to do), perhaps one of an owner's dependents (then
            // the owner still needs its pass). Dropping the item here once
            // left an owner in orphan deletion with its finalizer for good,
            // so it is tried again, without counting as a failure.
            tracing::debug!(%err, ?item, "garbage collection found an object gone; trying the item again");
            queue.add_after(item.clone(), MIN_BACKOFF);
        }
        Err(err) => {
            let delay = queue.add_rate_limited(item.clone());
            let attempts = queue.num_requeues(&item);
            // A conflict is normal once; one that keeps coming is not.
            if !matches!(err, Error::Conflict { .. }) || attempts >= QUIET_FAILURES {
                tracing::warn!(%err, ?item, ?delay, attempts, "garbage collection failed; retrying");
            }
        }
    }
    queue.done(&item);
}

#[cfg(test)]
mod tests;
