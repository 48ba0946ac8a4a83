//! The garbage collector: a background task that deletes dependents whose
//! owners are gone, and completes `Foreground` and `Orphan` deletions
//! (see `api::delete` for the request side). Owns the decisions; the owner
//! index it decides from is `graph`'s.
//!
//! # Expected Flow
//!
//! 1. On start (and after any break in the watch) the collector lists every
//!    object under `/registry/` at one revision, builds the owner index and
//!    subscribes to the watch hub from that revision, so it misses nothing.
//! 2. It queues, from that list, every dependent with an owner uid that is
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
//! - Failed work is retried with backoff; a restart redoes what is left.
//!   Work that keeps failing is logged, conflicts included.
//! - The collector relists every [`GcConfig::resync_every`], so a change it
//!   somehow missed is acted on then, not never.
//! - A watchdog restarts a collector that stops making progress (no step
//!   for [`GcConfig::stall_after`] while an item is in progress or changes
//!   or work wait; long work reports progress as it goes) or that ended,
//!   and says so in the log; [`Api::gc_health`] (and
//!   `/metrics`) shows restarts, the last progress and the lag.
//!
//! # Caveats
//!
//! - A dependent created moments before its owner's foreground or orphan
//!   deletion completes, and not yet seen by the collector, is not waited
//!   for (foreground) or not orphaned (and is then collected as dangling).
//! - The index holds every object's uid, key and owner references in memory.

mod graph;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::graph::{Graph, OwnerRef};
use super::{
    Api, DeleteOptions, Error, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Result,
};
use crate::object::{KindInfo, Object, meta};
use crate::store::{Range, Revision};
use crate::watch::{self, EventType, Subscription};

/// The key prefix of every object.
const ROOT: &str = "/registry/";
/// Objects per page of the initial list.
const PAGE: usize = 500;
/// Events handled in a row before a queued item gets its turn.
const EVENTS_PER_ITEM: usize = 64;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Failed attempts at one item after which even conflicts are logged.
const QUIET_FAILURES: u32 = 5;

/// How the garbage collector is watched over.
///
/// ```
/// use std::time::Duration;
/// use setpoint::api::GcConfig;
/// let config = GcConfig { stall_after: Duration::from_secs(10), ..GcConfig::default() };
/// assert_eq!(config.resync_every, GcConfig::default().resync_every);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcConfig {
    /// A collector that has made no progress for this long while it had
    /// something to do (an item in progress, changes or queued work) is
    /// restarted.
    pub stall_after: Duration,
    /// The collector lists the store again this often, acting on anything
    /// it missed.
    pub resync_every: Duration,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            stall_after: Duration::from_secs(60),
            resync_every: Duration::from_secs(600),
        }
    }
}

/// How the garbage collector is doing, from [`Api::gc_health`].
///
/// ```
/// use std::sync::Arc;
/// use setpoint::{api::Api, store::MemoryBackend};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), setpoint::api::Error> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let health = api.gc_health();
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

/// Shared between the collector, its watchdog and [`Api::gc_health`].
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

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn since_ms(then_ms: u64) -> Duration {
    Duration::from_millis(unix_ms(SystemTime::now()).saturating_sub(then_ms))
}

impl Api {
    /// Start the garbage collector (see the `gc` module docs) as a task that
    /// runs until the handle is aborted or the watch hub stops. One per
    /// store is enough; two are safe but do the work twice.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// use std::time::Duration;
    /// use setpoint::object::meta;
    /// let gc = api.start_garbage_collector();
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
    pub fn start_garbage_collector(&self) -> JoinHandle<()> {
        self.start_garbage_collector_with(GcConfig::default())
    }

    /// [`Api::start_garbage_collector`] with its watchdog and resync
    /// configured.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use setpoint::api::{Api, GcConfig};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let gc = api.start_garbage_collector_with(GcConfig {
    ///     stall_after: Duration::from_secs(5),
    ///     resync_every: Duration::from_secs(60),
    /// });
    /// while api.gc_health().last_progress.is_none() {
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// gc.abort();
    /// # Ok(()) }
    /// ```
    pub fn start_garbage_collector_with(&self, config: GcConfig) -> JoinHandle<()> {
        tokio::spawn(watch_over(self.clone(), config))
    }

    /// How the garbage collector is doing (see [`GcHealth`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let gc = api.start_garbage_collector();
    /// while api.gc_health().last_progress.is_none() {
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(api.gc_health().lag, 0);
    /// gc.abort();
    /// # Ok(()) }
    /// ```
    pub fn gc_health(&self) -> GcHealth {
        let progress = &self.gc;
        let last = progress.last_step_ms.load(Ordering::SeqCst);
        GcHealth {
            restarts: progress.restarts.load(Ordering::SeqCst),
            last_progress: (last != 0).then(|| UNIX_EPOCH + Duration::from_millis(last)),
            pending: progress.pending.load(Ordering::SeqCst),
            lag: if last == 0 {
                0
            } else {
                (self.hub.last_revision() - progress.seen.load(Ordering::SeqCst)).max(0)
            },
        }
    }
}

/// Run the collector and restart it when it stalls or ends. Aborting this
/// task aborts the collector too.
async fn watch_over(api: Api, config: GcConfig) {
    struct AbortOnDrop(JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let check = (config.stall_after / 4).max(Duration::from_millis(10));
    loop {
        let progress = api.gc.clone();
        progress.busy_since_ms.store(0, Ordering::SeqCst);
        let mut collector = AbortOnDrop(tokio::spawn(run(api.clone(), config)));
        // A fresh start counts as progress: the new collector lists first.
        progress
            .last_step_ms
            .store(unix_ms(SystemTime::now()), Ordering::SeqCst);
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
            let behind = (api.hub.last_revision() - progress.seen.load(Ordering::SeqCst)).max(0);
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

async fn run(api: Api, config: GcConfig) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let mut collector = Collector::new(api.clone());
        let subscription = match collector.load().await {
            Ok(subscription) => subscription,
            Err(err) => {
                tracing::warn!(%err, "garbage collector cannot list the store; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = MIN_BACKOFF;
        match collector.follow(subscription, config).await {
            Stop::Closed => return,
            Stop::Relist => tracing::info!("garbage collector fell behind the watch; relisting"),
            Stop::Resync => tracing::debug!("garbage collector relisting (periodic resync)"),
        }
    }
}

/// Why [`Collector::follow`] returned.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The watch hub stopped: so does the collector.
    Closed,
    /// The watch broke: list again.
    Relist,
    /// Time for the periodic relist.
    Resync,
}

/// A unit of work, by uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Item {
    /// Decide about a dependent whose owners may be gone or going.
    Dependent(String),
    /// Progress an owner's foreground or orphan deletion.
    Owner(String),
}

/// How an owner stands, from one dependent's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    Solid,
    Waiting,
    Dangling,
}

struct Collector {
    api: Api,
    graph: Graph,
    queue: VecDeque<Item>,
    queued: HashSet<Item>,
    delayed: Vec<(Instant, Item)>,
    failures: HashMap<Item, u32>,
}

impl Collector {
    fn new(api: Api) -> Self {
        Self {
            api,
            graph: Graph::default(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            delayed: Vec::new(),
            failures: HashMap::new(),
        }
    }

    /// List everything at one revision, queue leftover work and subscribe
    /// from that revision. The error is only logged.
    async fn load(&mut self) -> std::result::Result<Subscription, String> {
        let revision = self.index().await?;
        self.api
            .hub
            .subscribe(ROOT, revision)
            .map_err(|e| e.to_string())
    }

    /// List everything at one revision into the index and queue leftover
    /// work; returns the revision listed at.
    async fn index(&mut self) -> std::result::Result<Revision, String> {
        let mut revision: Option<Revision> = None;
        let mut start_after = None;
        loop {
            let page = self
                .api
                .backend
                .range(Range {
                    prefix: ROOT.into(),
                    start_after: start_after.take(),
                    limit: PAGE,
                    revision,
                })
                .await
                .map_err(|e| e.to_string())?;
            revision = Some(page.revision);
            self.heartbeat();
            for kv in &page.kvs {
                match Api::decode(kv) {
                    Ok(object) => {
                        self.graph.upsert(&kv.key, &object);
                    }
                    Err(err) => {
                        tracing::warn!(%err, "garbage collector skips an undecodable object")
                    }
                }
            }
            match page.kvs.last() {
                Some(last) if page.more => start_after = Some(last.key.clone()),
                _ => break,
            }
        }
        let mut work = Vec::new();
        for (uid, node) in self.graph.nodes() {
            if node.foreground || node.orphan {
                work.push(Item::Owner(uid.clone()));
            }
            if node.owners.iter().any(|o| self.needs_attention(o)) {
                work.push(Item::Dependent(uid.clone()));
            }
        }
        work.into_iter().for_each(|item| self.enqueue(item));
        Ok(revision.unwrap_or_default())
    }

    /// Whether a dependent with this owner reference needs a decision.
    fn needs_attention(&self, owner: &OwnerRef) -> bool {
        self.graph.node(&owner.uid).is_none_or(|n| n.foreground)
    }

    fn enqueue(&mut self, item: Item) {
        if self.queued.insert(item.clone()) {
            self.queue.push_back(item);
        }
    }

    /// Handle changes and queued work until the watch breaks or stops, or
    /// the periodic resync is due. Every step is recorded in `Progress`.
    async fn follow(&mut self, mut subscription: Subscription, config: GcConfig) -> Stop {
        let mut events_in_a_row = 0;
        let resync_at = Instant::now() + config.resync_every;
        let mut tick =
            tokio::time::interval((config.stall_after / 4).max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.record_step(&subscription);
            let due = self.delayed.iter().map(|(at, _)| *at).min();
            let work_turn = !self.queue.is_empty() && events_in_a_row >= EVENTS_PER_ITEM;
            tokio::select! {
                biased;
                () = std::future::ready(()), if work_turn => {
                    events_in_a_row = 0;
                    self.work_one().await;
                }
                event = subscription.next() => match event {
                    Ok(event) => {
                        events_in_a_row += 1;
                        self.on_event(event.kind, &event.key, &event.object);
                    }
                    Err(watch::Error::Closed) => return Stop::Closed,
                    Err(_) => return Stop::Relist,
                },
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    self.promote_due();
                }
                () = std::future::ready(()), if !self.queue.is_empty() => {
                    events_in_a_row = 0;
                    self.work_one().await;
                }
                () = tokio::time::sleep_until(resync_at) => return Stop::Resync,
                // Idle and caught up is progress too: the watchdog sees it.
                _ = tick.tick() => {}
            }
        }
    }

    /// Progress within a long step (a page of the list, one dependent of
    /// many), so that the watchdog does not take long work for a stall.
    fn heartbeat(&self) {
        self.api
            .gc
            .last_step_ms
            .store(unix_ms(SystemTime::now()), Ordering::SeqCst);
    }

    fn record_step(&self, subscription: &Subscription) {
        let progress = &self.api.gc;
        progress
            .seen
            .store(subscription.progress(&self.api.hub), Ordering::SeqCst);
        progress.pending.store(self.queue.len(), Ordering::SeqCst);
        progress
            .last_step_ms
            .store(unix_ms(SystemTime::now()), Ordering::SeqCst);
    }

    fn promote_due(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self.delayed.drain(..).partition(|(at, _)| *at <= now);
        self.delayed = later;
        for (_, item) in due {
            self.enqueue(item);
        }
    }

    fn on_event(&mut self, kind: EventType, key: &str, object: &Object) {
        let uid = meta::uid(object).to_owned();
        if uid.is_empty() {
            return;
        }
        if kind == EventType::Deleted {
            let gone = self.graph.remove(&uid);
            for dependent in self.graph.dependents_of(&uid) {
                self.enqueue(Item::Dependent(dependent));
            }
            if let Some(gone) = gone {
                self.requeue_foreground_owners(&gone.owners);
            }
            return;
        }
        let previous = self.graph.upsert(key, object);
        let Some(node) = self.graph.node(&uid).cloned() else {
            return;
        };
        if node.foreground || node.orphan {
            self.enqueue(Item::Owner(uid.clone()));
        }
        if let Some(previous) = previous {
            self.requeue_foreground_owners(&previous.owners);
        }
        self.requeue_foreground_owners(&node.owners);
        if node.owners.iter().any(|o| self.needs_attention(o)) {
            self.enqueue(Item::Dependent(uid));
        }
    }

    fn requeue_foreground_owners(&mut self, owners: &[OwnerRef]) {
        for owner in owners {
            if self.graph.node(&owner.uid).is_some_and(|n| n.foreground) {
                self.enqueue(Item::Owner(owner.uid.clone()));
            }
        }
    }

    async fn work_one(&mut self) {
        let Some(item) = self.queue.pop_front() else {
            return;
        };
        self.queued.remove(&item);
        self.api
            .gc
            .busy_since_ms
            .store(unix_ms(SystemTime::now()), Ordering::SeqCst);
        let result = match &item {
            Item::Dependent(uid) => self.process_dependent(uid).await,
            Item::Owner(uid) => self.process_owner(uid).await,
        };
        self.api.gc.busy_since_ms.store(0, Ordering::SeqCst);
        match result {
            Ok(()) => {
                self.failures.remove(&item);
            }
            Err(err @ Error::NotFound { .. }) => {
                // Something the item touched went while it was worked on:
                // perhaps the item's own object (then the next attempt finds
                // nothing to do), perhaps one of an owner's dependents (then
                // the owner still needs its pass). Dropping the item here
                // once left an owner in orphan deletion with its finalizer
                // for good, so it is tried again.
                tracing::debug!(%err, ?item, "garbage collection found an object gone; trying the item again");
                self.delayed.push((Instant::now() + MIN_BACKOFF, item));
            }
            Err(err) => {
                let failures = self.failures.entry(item.clone()).or_insert(0);
                *failures += 1;
                let delay = MIN_BACKOFF
                    .saturating_mul(1 << (*failures - 1).min(10))
                    .min(MAX_BACKOFF);
                // A conflict is normal once; one that keeps coming is not.
                if !matches!(err, Error::Conflict { .. }) || *failures >= QUIET_FAILURES {
                    tracing::warn!(%err, ?item, ?delay, attempts = *failures, "garbage collection failed; retrying");
                }
                self.delayed.push((Instant::now() + delay, item));
            }
        }
    }

    /// Read the object the index knows as `uid`, if it still exists.
    async fn live(&self, uid: &str) -> Result<Option<(Object, std::sync::Arc<KindInfo>)>> {
        let Some(node) = self.graph.node(uid) else {
            return Ok(None);
        };
        let Some(kv) = self.api.backend.get(&node.key).await? else {
            return Ok(None);
        };
        let object = Api::decode(&kv)?;
        if meta::uid(&object) != uid {
            return Ok(None);
        }
        // The kind whose key this is: two definitions may name the same
        // apiVersion and kind, and the body must not send writes elsewhere.
        let Some(kind) = self.kind_of_key(&node.key) else {
            tracing::warn!(key = %node.key, "garbage collector skips an object of no registered kind");
            return Ok(None);
        };
        Ok(Some((object, kind)))
    }

    /// The registered kind stored under `key` (`/registry/{group}/{plural}/…`).
    fn kind_of_key(&self, key: &str) -> Option<std::sync::Arc<KindInfo>> {
        let mut parts = key.strip_prefix(ROOT)?.split('/');
        let group = match parts.next()? {
            "core" => "",
            group => group,
        };
        self.api.kinds.by_plural(group, parts.next()?)
    }

    async fn process_dependent(&mut self, uid: &str) -> Result<()> {
        let Some((object, kind)) = self.live(uid).await? else {
            return Ok(());
        };
        if meta::deletion_timestamp(&object).is_some() {
            return Ok(());
        }
        let mut solid = false;
        let mut waiting = false;
        let mut stale = HashSet::new();
        for reference in meta::owner_references(&object) {
            match self.owner_state(reference, &object).await? {
                OwnerState::Solid => solid = true,
                OwnerState::Waiting => {
                    waiting = true;
                    stale.insert(ref_uid(reference).to_owned());
                }
                OwnerState::Dangling => {
                    stale.insert(ref_uid(reference).to_owned());
                }
            }
        }
        if stale.is_empty() {
            return Ok(());
        }
        if solid {
            return remove_owner_references(&self.api, &kind, object, &stale).await;
        }
        let propagation = if waiting && self.graph.has_dependents(uid) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        let options = DeleteOptions {
            resource_version: meta::resource_version(&object).map(str::to_owned),
            uid: Some(uid.to_owned()),
            propagation_policy: Some(propagation),
        };
        tracing::debug!(kind = %kind.kind, name = meta::name(&object), ?propagation, "collecting a dependent");
        self.api
            .delete(
                &kind,
                meta::namespace(&object),
                meta::name(&object),
                &options,
            )
            .await
            .map(drop)
    }

    /// Classify an owner; absence is confirmed with a live read.
    async fn owner_state(&self, reference: &Value, dependent: &Object) -> Result<OwnerState> {
        let uid = ref_uid(reference);
        if let Some(node) = self.graph.node(uid) {
            return Ok(if node.foreground {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            });
        }
        let field = |name: &str| reference.get(name).and_then(Value::as_str).unwrap_or("");
        let Some(kind) = self.api.kinds.by_kind(field("apiVersion"), field("kind")) else {
            return Ok(OwnerState::Dangling);
        };
        let namespace = match (kind.namespaced, meta::namespace(dependent)) {
            (true, None) => return Ok(OwnerState::Dangling),
            (true, ns) => ns,
            (false, _) => None,
        };
        match self.api.get(&kind, namespace, field("name")).await {
            Ok(owner) if meta::uid(&owner) == uid => {
                let foreground = meta::deletion_timestamp(&owner).is_some()
                    && meta::finalizers(&owner).contains(&FOREGROUND_FINALIZER);
                Ok(if foreground {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                })
            }
            Ok(_) | Err(Error::NotFound { .. }) => Ok(OwnerState::Dangling),
            Err(err) => Err(err),
        }
    }

    async fn process_owner(&mut self, uid: &str) -> Result<()> {
        let Some((owner, kind)) = self.live(uid).await? else {
            return Ok(());
        };
        if meta::deletion_timestamp(&owner).is_none() {
            return Ok(());
        }
        let finalizers = meta::finalizers(&owner);
        if finalizers.contains(&ORPHAN_FINALIZER) {
            let only_owner: HashSet<String> = [uid.to_owned()].into();
            for dependent in self.graph.dependents_of(uid) {
                if let Some((object, dep_kind)) = self.live(&dependent).await? {
                    match remove_owner_references(&self.api, &dep_kind, object, &only_owner).await {
                        // Deleted meanwhile: nothing of it left to orphan.
                        Err(Error::NotFound { .. }) => {}
                        other => other?,
                    }
                }
                self.heartbeat();
            }
            return remove_finalizer(&self.api, &kind, owner, ORPHAN_FINALIZER).await;
        }
        if finalizers.contains(&FOREGROUND_FINALIZER) {
            for dependent in self.graph.dependents_of(uid) {
                self.enqueue(Item::Dependent(dependent));
            }
            if self.graph.blocking_dependents(uid) == 0 {
                return remove_finalizer(&self.api, &kind, owner, FOREGROUND_FINALIZER).await;
            }
        }
        Ok(())
    }
}

/// The collector's decisions, run to completion over an API whose changes
/// are handed in rather than watched: what a plan (`crate::plan`) runs over
/// its overlay to show what a deletion cascades to. The same code decides
/// as in the running collector; only the waiting is left out (work that
/// fails is tried again at once, a bounded number of times).
pub(crate) struct Simulation {
    collector: Collector,
    loaded: bool,
}

/// Attempts at one item before a simulation gives up on it.
const SIMULATED_ATTEMPTS: u32 = 5;

impl Simulation {
    /// A collector over `api` that has seen nothing yet.
    pub(crate) fn new(api: Api) -> Self {
        Self {
            collector: Collector::new(api),
            loaded: false,
        }
    }

    /// A change made through the API. The first one that may need the
    /// collector (a deletion, or an object being deleted) makes it list
    /// the whole store through the API, the changes so far included.
    pub(crate) async fn on_change(
        &mut self,
        kind: EventType,
        key: &str,
        object: &Object,
    ) -> std::result::Result<(), String> {
        if !self.loaded {
            let deleting = kind == EventType::Deleted || meta::deletion_timestamp(object).is_some();
            if !deleting {
                return Ok(());
            }
            self.collector.index().await?;
            self.loaded = true;
        }
        self.collector.on_event(kind, key, object);
        Ok(())
    }

    /// Work the queue until it is empty; returns the items that kept
    /// failing, with their last error.
    pub(crate) async fn settle(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        loop {
            if self.collector.queue.is_empty() {
                let retry: Vec<Item> = self
                    .collector
                    .delayed
                    .drain(..)
                    .map(|(_, item)| item)
                    .collect();
                if retry.is_empty() {
                    return failed;
                }
                for item in retry {
                    if self.collector.failures.get(&item).copied().unwrap_or(0) < SIMULATED_ATTEMPTS
                    {
                        self.collector.enqueue(item);
                    } else {
                        failed.push(format!("garbage collection of {item:?} kept failing"));
                    }
                }
                continue;
            }
            let item = self.collector.queue.front().cloned();
            self.collector.work_one().await;
            // An item that found its object gone is retried without a
            // failure count; count it here so a simulation always ends.
            if let Some(item) = item
                && self.collector.delayed.iter().any(|(_, i)| *i == item)
            {
                *self.collector.failures.entry(item).or_insert(0) += 1;
            }
        }
    }
}

fn ref_uid(reference: &Value) -> &str {
    reference.get("uid").and_then(Value::as_str).unwrap_or("")
}

/// Drop the owner references to `uids` from `object` (conditional on its
/// resource version).
async fn remove_owner_references(
    api: &Api,
    kind: &KindInfo,
    mut object: Object,
    uids: &HashSet<String>,
) -> Result<()> {
    let before = meta::owner_references(&object).len();
    let kept: Vec<Value> = meta::owner_references(&object)
        .iter()
        .filter(|r| !uids.contains(ref_uid(r)))
        .cloned()
        .collect();
    if kept.len() == before {
        return Ok(());
    }
    let m = meta::metadata_mut(&mut object);
    if kept.is_empty() {
        m.remove("ownerReferences");
    } else {
        m.insert("ownerReferences".into(), Value::Array(kept));
    }
    api.update(kind, object).await.map(drop)
}

/// Remove one finalizer from `object` (conditional on its resource version).
async fn remove_finalizer(
    api: &Api,
    kind: &KindInfo,
    mut object: Object,
    finalizer: &str,
) -> Result<()> {
    let kept: Vec<Value> = meta::finalizers(&object)
        .into_iter()
        .filter(|f| *f != finalizer)
        .map(Value::from)
        .collect();
    meta::metadata_mut(&mut object).insert("finalizers".into(), Value::Array(kept));
    api.update(kind, object).await.map(drop)
}
