//! The reconcile loop: for one reconciler, workers take keys from a
//! workqueue, read the latest object and its owned children from the
//! informer caches, call the reconciler on a blocking thread and apply its
//! response. Talks to the [`Reconciler`] trait, never to wasmtime.
//!
//! # Flow of one key
//!
//! 1. A change to the object, or to a child whose controller owner reference
//!    names it, queues the object's key (coalesced by the queue).
//! 2. A worker takes the key; the queue guarantees no other worker holds it.
//! 3. A missing object ends the work. A declared finalizer is added first;
//!    an object being deleted is reconciled with `finalizing` only while it
//!    still carries that finalizer.
//! 4. The response is applied (see `apply`); success forgets the key's
//!    failures and schedules `requeue_after` if asked.
//! 5. A transient error (or a conflict) requeues with per-key exponential
//!    backoff; a permanent error is recorded as a warning event and a
//!    `Ready=False` condition and waits for the object to change.
//! 6. An object whose reconciles keep writing at one generation, with its
//!    children unchanged, is stopped by the circuit breaker (see
//!    [`HotLoopConfig`]): a warning event and `Ready=False` with reason
//!    `HotLoop`, and no reconcile until its spec changes.
//!
//! Real changes are queued at normal priority; the initial list, late
//! handler replays and the periodic resync ([`Config::resync`]) at low
//! priority, so they never delay real work. Stopping a controller removes its
//! informer handlers and drops its informers, so a plugin that goes away
//! releases its watches.

mod apply;
mod breaker;
pub mod events;
pub mod history;
mod native;
mod reconciler;
mod view;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

pub use breaker::HotLoopConfig;
pub use history::{History, Outcome, ReconcileRecord};
pub use native::Native;
pub use reconciler::{
    CacheView, EventRecord, Manifest, ReconcileError, Reconciler, Request, Response, Severity,
};

use crate::api::{self, Api};
use crate::cluster::{Cluster, Ownership, ShardClaim};
use crate::informer::{Change, HandlerId, Informer, Informers};
use crate::object::{KindInfo, ObjectKey, meta, time};
use crate::queue::{self, WorkQueue};

/// Why applying a response failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A write failed (conflicts included); retried with backoff.
    #[error(transparent)]
    Api(#[from] api::Error),
    /// The response asked for something the plugin may not do.
    #[error("response refused: {0}")]
    Refused(String),
    /// The reconciler's kinds are not registered.
    #[error("unknown kind {0}")]
    UnknownKind(String),
    /// A swapped-in reconciler reconciles or owns other kinds than the
    /// running controller; it needs a controller of its own.
    #[error("reconciler changes its kinds: {0}")]
    KindsChanged(String),
}

/// Settings of one controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// Concurrent workers (distinct keys reconcile in parallel).
    pub workers: usize,
    /// Workqueue settings (backoff, rate limit).
    pub queue: queue::Config,
    /// Every cached object of the reconciled kind is queued again (at low
    /// priority) this often; `None` disables the periodic resync. Default
    /// 10 minutes.
    pub resync: Option<Duration>,
    /// The hot-loop circuit breaker's limits.
    pub hot_loop: HotLoopConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 2,
            queue: queue::Config::default(),
            resync: Some(Duration::from_secs(600)),
            hot_loop: HotLoopConfig::default(),
        }
    }
}

/// Counters of one controller, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Reconciler calls made.
    pub reconciles: u64,
    /// Times a worker started on a key another worker was still reconciling.
    /// The queue makes this impossible; the controller checks it anyway.
    pub concurrent_reconciles_of_one_key: u64,
    /// Times the hot-loop breaker opened.
    pub hot_loops: u64,
}

/// A running controller for one reconciler.
pub struct Controller {
    shared: Arc<Shared>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    /// Queues the keys of shards this host takes (cluster mode only).
    acquisitions: Option<tokio::task::JoinHandle<()>>,
    /// Handlers this controller registered, removed when it stops.
    handlers: Vec<(Informer, HandlerId)>,
}

struct Shared {
    api: Api,
    /// Swapped by [`Controller::swap_reconciler`]; each reconcile takes its
    /// own reference, so a swap never changes a call in flight.
    reconciler: std::sync::RwLock<Arc<dyn Reconciler>>,
    kind: Arc<KindInfo>,
    owned_kinds: Vec<Arc<KindInfo>>,
    informer: Informer,
    owned_informers: Vec<Informer>,
    informers: Informers,
    queue: WorkQueue<ObjectKey>,
    history: History,
    /// Revisions each key's last reconcile wrote, per kind; see
    /// [`wait_for_own_writes`].
    pending_writes: std::sync::Mutex<HashMap<ObjectKey, apply::Writes>>,
    breaker: breaker::Breaker,
    /// Keys being reconciled right now, to check that none is reconciled twice at once.
    in_flight: std::sync::Mutex<HashSet<ObjectKey>>,
    /// With several hosts on one etcd: which keys are this host's, and the
    /// fenced API to write them through.
    cluster: Option<Cluster>,
    reconciles: AtomicU64,
    concurrent: AtomicU64,
    hot_loops: AtomicU64,
}

/// Queue a key at the priority its change deserves.
fn enqueue(queue: &WorkQueue<ObjectKey>, change: &Change, key: ObjectKey) {
    match change {
        Change::Listed(_) => queue.add_low_priority(key),
        Change::Applied(_) | Change::Deleted(_) => queue.add(key),
    }
}

impl Controller {
    /// Start a controller: informers for the reconciled and owned kinds,
    /// handlers that queue keys, and `config.workers` workers.
    pub async fn start(
        api: Api,
        informers: Informers,
        reconciler: Arc<dyn Reconciler>,
        config: Config,
    ) -> Result<Self, Error> {
        Self::start_in(api, informers, reconciler, config, None).await
    }

    /// [`Controller::start`] as one host of a [`Cluster`] (when given): only
    /// keys of shards this host holds are queued and reconciled, every
    /// write goes through the shard claim's fenced API, and the keys of
    /// shards it takes later are queued then.
    pub async fn start_in(
        api: Api,
        informers: Informers,
        reconciler: Arc<dyn Reconciler>,
        config: Config,
        cluster: Option<Cluster>,
    ) -> Result<Self, Error> {
        let manifest = reconciler.manifest().clone();
        let resolve = |r: &crate::object::KindRef| {
            api.kinds()
                .by_kind(&r.api_version, &r.kind)
                .ok_or_else(|| Error::UnknownKind(r.to_string()))
        };
        let kind = resolve(&manifest.reconciles)?;
        let owned_kinds = manifest
            .owns
            .iter()
            .map(resolve)
            .collect::<Result<Vec<_>, _>>()?;
        let queue = WorkQueue::new(config.queue.clone());
        let informer = informers.for_kind(kind.clone());
        let owned_informers: Vec<Informer> = owned_kinds
            .iter()
            .map(|k| informers.for_kind(k.clone()))
            .collect();

        let mut handlers = Vec::new();
        let q = queue.clone();
        let mine = ownership_filter(&cluster, &kind);
        let handler = move |change: &Change| {
            let key = ObjectKey::of(change.object());
            if mine(&key) {
                enqueue(&q, change, key);
            }
        };
        let id = match config.resync {
            Some(period) if !period.is_zero() => informer.add_handler_with_resync(handler, period),
            _ => informer.add_handler(handler),
        };
        handlers.push((informer.clone(), id));
        for child_informer in &owned_informers {
            let q = queue.clone();
            let (owner_api_version, owner_kind) = (kind.api_version(), kind.kind.clone());
            let mine = ownership_filter(&cluster, &kind);
            let id = child_informer.add_handler(move |change: &Change| {
                let child = change.object();
                for owner in meta::owner_references(child) {
                    if owner["controller"].as_bool() == Some(true)
                        && owner["kind"].as_str() == Some(owner_kind.as_str())
                        && owner["apiVersion"].as_str() == Some(owner_api_version.as_str())
                        && let Some(name) = owner["name"].as_str()
                    {
                        let key = ObjectKey::new(meta::namespace(child), name);
                        if mine(&key) {
                            enqueue(&q, change, key);
                        }
                    }
                }
            });
            handlers.push((child_informer.clone(), id));
        }
        informer.wait_synced().await;
        for i in &owned_informers {
            i.wait_synced().await;
        }

        let shared = Arc::new(Shared {
            api,
            reconciler: std::sync::RwLock::new(reconciler),
            kind,
            owned_kinds,
            informer,
            owned_informers,
            informers,
            queue,
            history: History::default(),
            pending_writes: Default::default(),
            breaker: breaker::Breaker::new(config.hot_loop),
            in_flight: Default::default(),
            cluster,
            reconciles: AtomicU64::new(0),
            concurrent: AtomicU64::new(0),
            hot_loops: AtomicU64::new(0),
        });
        let workers = (0..config.workers.max(1))
            .map(|_| tokio::spawn(worker(shared.clone())))
            .collect();
        let acquisitions = shared.cluster.as_ref().map(|cluster| {
            let mut taken = cluster.acquisitions();
            let shared = shared.clone();
            tokio::spawn(async move {
                while taken.changed().await.is_ok() {
                    shared.queue_owned();
                }
            })
        });
        tracing::info!(plugin = %manifest.name, kind = %manifest.reconciles, "controller started");
        Ok(Self {
            shared,
            workers,
            acquisitions,
            handlers,
        })
    }

    /// The controller's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            reconciles: self.shared.reconciles.load(Ordering::Relaxed),
            concurrent_reconciles_of_one_key: self.shared.concurrent.load(Ordering::Relaxed),
            hot_loops: self.shared.hot_loops.load(Ordering::Relaxed),
        }
    }

    /// The reconciler's manifest.
    pub fn manifest(&self) -> Manifest {
        self.shared.reconciler().manifest().clone()
    }

    /// Replace the reconciler without stopping the controller: queued keys
    /// stay queued, reconciles in flight finish with the old reconciler and
    /// every later one uses the new. The new reconciler must reconcile and
    /// own the same kinds (the informers stay as they are); otherwise
    /// nothing changes and the new manifest's kinds are returned as the
    /// error. Call [`Controller::requeue_all`] afterwards to apply new logic
    /// to every object.
    pub fn swap_reconciler(&self, reconciler: Arc<dyn Reconciler>) -> Result<(), Error> {
        let mut current = self
            .shared
            .reconciler
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let (old, new) = (current.manifest(), reconciler.manifest());
        if old.reconciles != new.reconciles || old.owns != new.owns {
            return Err(Error::KindsChanged(format!(
                "{} instead of {}",
                new.reconciles, old.reconciles
            )));
        }
        *current = reconciler;
        Ok(())
    }

    /// Recent reconcile results of one object.
    pub fn history(&self, key: &ObjectKey) -> Vec<ReconcileRecord> {
        self.shared.history.of(key)
    }

    /// The controller's workqueue (for metrics and tests).
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.shared.queue
    }

    /// Queue every cached object of the kind (after a plugin upgrade, say).
    pub fn requeue_all(&self) {
        for object in self.shared.informer.list(None) {
            self.shared.queue.add(ObjectKey::of(&object));
        }
    }

    /// Stop: remove the informer handlers, drop pending keys, let in-flight
    /// reconciles finish, then release the informers (an informer nobody
    /// else holds stops its watch).
    pub async fn shutdown(mut self) {
        self.stop_handlers();
        self.shared.queue.shutdown();
        for worker in self.workers {
            let _ = worker.await;
        }
    }

    /// Stop taking new changes, but reconcile every key already queued (and
    /// requeued while draining) before stopping, waiting at most `timeout`
    /// before falling back to [`shutdown`](Self::shutdown).
    pub async fn shutdown_with_drain(mut self, timeout: Duration) {
        self.stop_handlers();
        let drained = self.shared.queue.shutdown_with_drain();
        if tokio::time::timeout(timeout, drained).await.is_err() {
            tracing::warn!(plugin = %self.manifest().name, "drain timed out; stopping");
        }
        self.shared.queue.shutdown();
        for worker in self.workers {
            let _ = worker.await;
        }
    }

    fn stop_handlers(&mut self) {
        for (informer, id) in &self.handlers {
            informer.remove_handler(*id);
        }
        if let Some(task) = self.acquisitions.take() {
            task.abort();
        }
    }
}

/// How a key's turn ended, when it did not fail.
enum Step {
    /// The object is gone (or being deleted without our finalizer).
    Gone,
    /// The circuit breaker holds the object.
    Stopped,
    /// This host's cluster lease is too close to expiry to call the
    /// reconciler; try again shortly.
    Postponed,
    /// The response was applied.
    Applied {
        requeue_after: Option<Duration>,
        generation: i64,
        /// Fingerprint of the owned children the reconciler saw.
        children: u64,
        wrote: bool,
    },
}

/// A fingerprint of a set of children: their uids and resource versions.
fn fingerprint(children: &[Arc<crate::object::Object>]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut ids: Vec<(&str, Option<&str>)> = children
        .iter()
        .map(|c| (meta::uid(c), meta::resource_version(c)))
        .collect();
    ids.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ids.hash(&mut hasher);
    hasher.finish()
}

impl Shared {
    fn reconciler(&self) -> Arc<dyn Reconciler> {
        self.reconciler
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Queue (at low priority) every cached object whose shard this host holds.
    fn queue_owned(&self) {
        let mine = ownership_filter(&self.cluster, &self.kind);
        for object in self.informer.list(None) {
            let key = ObjectKey::of(&object);
            if mine(&key) {
                self.queue.add_low_priority(key);
            }
        }
    }

    /// May this host reconcile `key` now, and through which API?
    fn ownership(&self, key: &ObjectKey) -> Ownership {
        match &self.cluster {
            Some(cluster) => {
                cluster.claim(&Api::key(&self.kind, key.namespace.as_deref(), &key.name))
            }
            None => Ownership::Local,
        }
    }
}

/// Whether a key of `kind` is this host's to queue: always on one host; in
/// a cluster, when this host holds the key's shard.
fn ownership_filter(
    cluster: &Option<Cluster>,
    kind: &Arc<KindInfo>,
) -> impl Fn(&ObjectKey) -> bool + Send + Sync + 'static {
    let cluster = cluster.clone();
    let kind = kind.clone();
    move |key: &ObjectKey| {
        cluster
            .as_ref()
            .is_none_or(|c| c.owns(&Api::key(&kind, key.namespace.as_deref(), &key.name)))
    }
}

async fn worker(shared: Arc<Shared>) {
    while let Some(key) = shared.queue.get().await {
        let claim = match shared.ownership(&key) {
            Ownership::Local => None,
            Ownership::Owned(claim) => Some(claim),
            Ownership::NotMine => {
                // Its owner queues it; nothing of it is ours to remember.
                shared.queue.forget(&key);
                shared.queue.done(&key);
                continue;
            }
            Ownership::NotNow => {
                shared.queue.done(&key);
                shared.queue.add_after(key, NOT_NOW_RETRY);
                continue;
            }
        };
        let api = claim.as_ref().map_or(&shared.api, |c| c.api());
        let started = SystemTime::now();
        let clock = Instant::now();
        if !shared
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone())
        {
            shared.concurrent.fetch_add(1, Ordering::Relaxed);
            tracing::error!(object = %key, "a key was handed to two workers at once");
        }
        let reconciler = shared.reconciler();
        let mut called = None;
        let outcome =
            reconcile_key(&shared, api, claim.as_ref(), &reconciler, &key, &mut called).await;
        if let Some(called) = called {
            record_reconcile(&shared, &key, called, &outcome);
        }
        shared
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        let (outcome, next_in) = match outcome {
            Ok(Step::Gone) => {
                shared.queue.forget(&key);
                shared.breaker.forget(&key);
                (None, None)
            }
            Ok(Step::Stopped) => {
                shared.queue.forget(&key);
                shared.queue.done(&key);
                continue;
            }
            Ok(Step::Postponed) => {
                drop(claim);
                shared.queue.done(&key);
                shared.queue.add_after(key, NOT_NOW_RETRY);
                continue;
            }
            Ok(Step::Applied {
                requeue_after,
                generation,
                children,
                wrote,
            }) => {
                shared.queue.forget(&key);
                if shared.breaker.record(&key, generation, children, wrote) {
                    shared.hot_loops.fetch_add(1, Ordering::Relaxed);
                    let message = format!(
                        "reconciles keep writing while the spec stays at generation {generation}: stopped until the spec changes"
                    );
                    tracing::warn!(plugin = %reconciler.manifest().name, object = %key, "hot loop; circuit breaker open");
                    report_not_ready(
                        &shared,
                        api,
                        reconciler.manifest(),
                        &key,
                        "HotLoop",
                        &message,
                    )
                    .await;
                    (Some(Outcome::PermanentError(message)), None)
                } else {
                    if let Some(after) = requeue_after {
                        shared.queue.add_after(key.clone(), after);
                    }
                    (Some(Outcome::Success), requeue_after)
                }
            }
            Err(ReconcileError::Transient(_))
                if shared.cluster.as_ref().is_some_and(|c| {
                    !c.owns(&Api::key(&shared.kind, key.namespace.as_deref(), &key.name))
                }) =>
            {
                // The shard went to another host meanwhile (its writes were
                // fenced out); the new owner queues the key.
                shared.queue.forget(&key);
                shared.queue.done(&key);
                continue;
            }
            Err(ReconcileError::Transient(msg)) => {
                let delay = shared.queue.add_rate_limited(key.clone());
                tracing::warn!(plugin = %reconciler.manifest().name, object = %key, error = %msg, retry_in = ?delay, "reconcile failed; will retry");
                (Some(Outcome::TransientError(msg)), Some(delay))
            }
            Err(ReconcileError::Permanent(msg)) => {
                shared.queue.forget(&key);
                tracing::warn!(plugin = %reconciler.manifest().name, object = %key, error = %msg, "reconcile failed permanently");
                report_not_ready(
                    &shared,
                    api,
                    reconciler.manifest(),
                    &key,
                    "ReconcileError",
                    &msg,
                )
                .await;
                (Some(Outcome::PermanentError(msg)), None)
            }
        };
        if let Some(outcome) = outcome {
            shared.history.push(
                &key,
                ReconcileRecord {
                    started,
                    duration: clock.elapsed(),
                    version: reconciler.manifest().version.clone(),
                    outcome,
                    next_in,
                },
            );
        } else {
            shared.history.forget(&key);
        }
        drop(claim);
        shared.queue.done(&key);
    }
}

/// How soon a key is tried again when this host's lease is too close to
/// expiry to start work on it.
const NOT_NOW_RETRY: Duration = Duration::from_millis(500);

/// One debug event per reconciler call on target `setpoint::reconcile`,
/// with the wall clock time of the call and of the end of its writes: the
/// record tests use to prove that no key is ever reconciled by two hosts at
/// once.
fn record_reconcile(
    shared: &Shared,
    key: &ObjectKey,
    started: SystemTime,
    outcome: &Result<Step, ReconcileError>,
) {
    if !tracing::enabled!(target: "setpoint::reconcile", tracing::Level::DEBUG) {
        return;
    }
    let micros = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    };
    let host = shared.cluster.as_ref().map_or("local", |c| c.host_id());
    let outcome = match outcome {
        Ok(_) => "ok",
        Err(ReconcileError::Transient(_)) => "transient",
        Err(ReconcileError::Permanent(_)) => "permanent",
    };
    tracing::debug!(
        target: "setpoint::reconcile",
        host,
        kind = %shared.kind.kind,
        object = %key,
        start_us = micros(started) as u64,
        end_us = micros(SystemTime::now()) as u64,
        outcome,
        "reconciled"
    );
}

/// Reconcile one key, writing through `api`; `called` is set when the
/// reconciler is called.
async fn reconcile_key(
    shared: &Arc<Shared>,
    api: &Api,
    claim: Option<&ShardClaim>,
    reconciler: &Arc<dyn Reconciler>,
    key: &ObjectKey,
    called: &mut Option<SystemTime>,
) -> Result<Step, ReconcileError> {
    let Some(object) = shared.informer.get(key) else {
        return Ok(Step::Gone);
    };
    let generation = meta::generation(&object);
    if meta::deletion_timestamp(&object).is_none() && shared.breaker.is_open(key, generation) {
        return Ok(Step::Stopped);
    }
    let manifest = reconciler.manifest();
    wait_for_own_writes(shared, key).await;
    let applier = apply::Applier {
        api,
        manifest,
        owned_kinds: &shared.owned_kinds,
        kind: &shared.kind,
        written: Default::default(),
    };
    let mut finalizing = false;
    if let Some(finalizer) = &manifest.finalizer {
        if meta::deletion_timestamp(&object).is_some() {
            if !meta::finalizers(&object).contains(&finalizer.as_str()) {
                return Ok(Step::Gone);
            }
            finalizing = true;
        } else if applier
            .ensure_finalizer(&object, finalizer)
            .await
            .map_err(transient)?
        {
            // The write requeues the key through the informer.
            remember_writes(shared, key, &applier);
            return Ok(Step::Applied {
                requeue_after: None,
                generation,
                children: 0,
                wrote: true,
            });
        }
    } else if meta::deletion_timestamp(&object).is_some() {
        return Ok(Step::Gone);
    }

    let uid = meta::uid(&object).to_owned();
    let owned: Vec<_> = shared
        .owned_informers
        .iter()
        .flat_map(|i| i.owned_by(&uid))
        .collect();
    let children = fingerprint(&owned);
    let request = Request {
        object: object.clone(),
        owned,
        finalizing,
        now_unix_ms: time::now_unix_ms(),
    };
    let reconciler = reconciler.clone();
    if claim.is_some_and(|c| !c.is_fresh()) {
        // Waiting for the caches took long enough that the lease may lapse
        // during the call; whoever holds the shard then reconciles it.
        return Ok(Step::Postponed);
    }
    *called = Some(SystemTime::now());
    shared.reconciles.fetch_add(1, Ordering::Relaxed);
    let view: Arc<dyn CacheView> = Arc::new(view::InformerView {
        informers: shared.informers.clone(),
        api: shared.api.clone(),
    });
    let response = tokio::task::spawn_blocking(move || {
        let response = reconciler.reconcile(&request, &view);
        (request, response)
    })
    .await
    .map_err(|e| ReconcileError::Transient(format!("reconcile task failed: {e}")))?;
    let (request, response) = response;
    let response = response?;

    let result = applier.apply(&object, &request.owned, &response).await;
    let wrote = remember_writes(shared, key, &applier);
    match result {
        Ok(()) => {}
        Err(Error::Refused(msg)) => {
            let event = EventRecord {
                severity: Severity::Warning,
                reason: "ResponseRefused".into(),
                message: msg.clone(),
            };
            let _ = events::record(api, &manifest.name, &object, &event).await;
            return Err(ReconcileError::Permanent(msg));
        }
        Err(err) => return Err(transient(err)),
    }
    if finalizing
        && response.remove_finalizer
        && let Some(finalizer) = &manifest.finalizer
    {
        let latest = api
            .get(&shared.kind, key.namespace.as_deref(), &key.name)
            .await
            .map_err(|e| transient(e.into()))?;
        applier
            .remove_finalizer(&latest, finalizer)
            .await
            .map_err(transient)?;
    }
    Ok(Step::Applied {
        requeue_after: response.requeue_after,
        generation,
        children,
        wrote,
    })
}

/// How long a reconcile waits for the caches to show its key's last writes.
const OWN_WRITES_TIMEOUT: Duration = Duration::from_secs(5);

/// Remember what a reconcile wrote; returns whether it wrote anything.
fn remember_writes(shared: &Shared, key: &ObjectKey, applier: &apply::Applier<'_>) -> bool {
    let written = std::mem::take(&mut *applier.written.lock().unwrap_or_else(|p| p.into_inner()));
    if written.is_empty() {
        return false;
    }
    shared
        .pending_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), written);
    true
}

/// Read your own writes: before reconciling a key again, wait until the
/// informers have seen what its last reconcile wrote, so a reconciler is
/// never handed a cache that predates its own changes (which would make it
/// create children again or write status from an old version).
async fn wait_for_own_writes(shared: &Shared, key: &ObjectKey) {
    let pending = shared
        .pending_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
    for (kind, revision) in pending.into_iter().flatten() {
        let informer = std::iter::once(&shared.informer)
            .chain(&shared.owned_informers)
            .find(|i| i.kind().group == kind.group && i.kind().plural == kind.plural);
        if let Some(informer) = informer
            && !informer
                .wait_for_revision(revision, OWN_WRITES_TIMEOUT)
                .await
        {
            tracing::warn!(object = %key, kind = %kind.kind, revision, "cache did not catch up with our own write in time");
        }
    }
}

fn transient(err: Error) -> ReconcileError {
    ReconcileError::Transient(err.to_string())
}

/// Report why an object stopped on the object itself: a warning event and
/// `Ready=False` with `reason` (`ReconcileError`, `HotLoop`).
async fn report_not_ready(
    shared: &Shared,
    api: &Api,
    manifest: &Manifest,
    key: &ObjectKey,
    reason: &str,
    message: &str,
) {
    let Some(object) = shared.informer.get(key) else {
        return;
    };
    let event = EventRecord {
        severity: Severity::Warning,
        reason: reason.into(),
        message: message.to_owned(),
    };
    if let Err(err) = events::record(api, &manifest.name, &object, &event).await {
        tracing::warn!(%err, "could not record event");
    }
    // The cache may not show this reconcile's own last write yet: read the
    // stored object, and retry on a conflict with a concurrent writer.
    for _ in 0..5 {
        let latest = match api
            .get(&shared.kind, key.namespace.as_deref(), &key.name)
            .await
        {
            Ok(latest) => latest,
            Err(err) => {
                tracing::debug!(%err, "could not read the object to report it not ready");
                return;
            }
        };
        let Some(next) = with_not_ready(&latest, reason, message) else {
            return;
        };
        let result = if shared.kind.status_subresource {
            api.update_status(&shared.kind, next).await
        } else {
            api.update(&shared.kind, next).await
        };
        match result {
            Err(api::Error::Conflict { .. }) => continue,
            Err(err) => {
                tracing::debug!(%err, "could not write the Ready=False condition");
                return;
            }
            Ok(_) => return,
        }
    }
}

/// `object` with a `Ready=False` condition carrying `reason` and `message`,
/// or `None` if it already has that condition.
fn with_not_ready(
    object: &crate::object::Object,
    reason: &str,
    message: &str,
) -> Option<crate::object::Object> {
    let mut conditions: Vec<serde_json::Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = json!({
        "type": "Ready", "status": "False", "reason": reason, "message": message,
        "observedGeneration": meta::generation(object),
    });
    let existing = conditions.iter_mut().find(|c| c["type"] == "Ready");
    match existing {
        Some(c)
            if c["status"] == "False"
                && c["reason"] == reason
                && c["message"] == message
                && c["observedGeneration"] == ready["observedGeneration"] =>
        {
            return None;
        }
        Some(c) => {
            let mut next = ready;
            next["lastTransitionTime"] = if c["status"] == "False" {
                c["lastTransitionTime"].clone()
            } else {
                json!(time::now_rfc3339())
            };
            *c = next;
        }
        None => {
            let mut next = ready;
            next["lastTransitionTime"] = json!(time::now_rfc3339());
            conditions.push(next);
        }
    }
    let mut next = object.clone();
    next["status"]["conditions"] = json!(conditions);
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::KindRef;
    use crate::store::MemoryBackend;

    struct Noop(Manifest);

    impl Reconciler for Noop {
        fn manifest(&self) -> &Manifest {
            &self.0
        }

        fn reconcile(
            &self,
            _request: &Request,
            _cache: &Arc<dyn CacheView>,
        ) -> Result<Response, ReconcileError> {
            Ok(Response::default())
        }
    }

    fn noop(name: &str) -> Arc<dyn Reconciler> {
        Arc::new(Noop(Manifest {
            name: name.to_owned(),
            version: "1".to_owned(),
            reconciles: KindRef::new("v1", "Event"),
            owns: vec![],
            definitions: vec![],
            finalizer: None,
        }))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_controller_releases_the_informers_nobody_else_uses() {
        let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
        let informers = Informers::new(api.clone());
        let a = Controller::start(api.clone(), informers.clone(), noop("a"), Config::default())
            .await
            .unwrap();
        let b = Controller::start(api.clone(), informers.clone(), noop("b"), Config::default())
            .await
            .unwrap();
        assert_eq!(informers.running(), 1, "one informer shared by both");
        a.shutdown().await;
        assert_eq!(informers.running(), 1, "b still uses it");
        b.shutdown_with_drain(Duration::from_secs(5)).await;
        assert_eq!(informers.running(), 0, "released with the last controller");
    }
}
