//! The reconcile loop: for one reconciler, workers take keys from a
//! workqueue, read the latest object and its owned children from the
//! informer caches, call the reconciler on a thread of the call pool (see
//! `pool`; tokio's blocking pool when every pool thread is busy) and apply
//! its response. Talks to the [`Reconciler`] trait, never to wasmtime.
//!
//! # Flow of one key
//!
//! 1. A change to the object, or to a child whose controller owner reference
//!    names it, queues the object's key (coalesced by the queue). The echo
//!    of the controller's own status write does not (see `echo`): a
//!    reconciler that wants another look after writing asks for
//!    `requeue_after`.
//! 2. A worker takes the key; the queue guarantees no other worker holds it.
//! 3. A missing object ends the work. A declared finalizer is added first;
//!    an object being deleted is reconciled with `finalizing` only while it
//!    still carries that finalizer.
//! 4. The response is applied (see `respond`); success forgets the key's
//!    failures and schedules `requeue_after` if asked.
//! 5. A transient error (or a conflict) requeues with per-key exponential
//!    backoff; a permanent error is recorded as a warning event and a
//!    `Ready=False` condition and waits for the object to change.
//! 6. An object whose reconciles keep writing at one generation, with its
//!    children unchanged by anyone else, is stopped by the circuit breaker
//!    (see [`HotLoopConfig`]): a warning event and `Ready=False` with reason
//!    `HotLoop`, and no reconcile until its spec changes.
//! 7. A requested requeue waits at least a floor, and one that keeps
//!    finding nothing to do is slowed down (see [`RequeueConfig`]), with a
//!    warning event `RequeueThrottled` when that starts.
//!
//! Real changes are queued at normal priority; the initial list, late
//! handler replays and the periodic resync ([`Config::resync`]) at low
//! priority, so they never delay real work. Stopping a controller removes its
//! informer handlers and drops its informers, so a plugin that goes away
//! releases its watches.

mod breaker;
mod checkpoint;
#[cfg(test)]
mod checkpoint_tests;
mod concurrency;
mod conditions;
mod config;
mod decide;
pub(crate) mod echo;
pub mod effects;
pub mod events;
mod failures;
mod from_fn;
pub mod history;
mod native;
#[cfg(test)]
mod own_writes_tests;
mod pace;
mod parked;
pub(crate) mod pool;
mod requeue;
pub(crate) mod respond;
mod resume;
mod tally;
mod triggers;
pub(crate) mod view;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use crate::contract::{
    Answer, CacheView, EventRecord, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResult, Manifest, ReconcileError, Reconciler, Request, Response, SecretKeyRef,
    SecretTarget, SecretUse, Severity,
};
pub use breaker::HotLoopConfig;
pub use checkpoint::Checkpoint;
pub use concurrency::Concurrency;
pub use config::{Config, DEFAULT_RESYNC, Stats};
pub use from_fn::{FnReconciler, from_fn};
pub use history::{History, Outcome, ReconcileRecord};
pub use native::Native;
pub use pace::{DEFAULT_CORES, DEFAULT_WRITE_MIB_PER_SECOND, Pace, PaceLimits, Resource};
pub use requeue::RequeueConfig;
pub use respond::MAX_CHILDREN;
pub use tally::{Tally, TallyOutcome, TallySnapshot};

use crate::api::{self, Api};
use crate::cluster::{Cluster, Ownership};
use crate::informer::{HandlerId, Informer, Informers};
use crate::object::{KindInfo, ObjectKey};
use crate::queue::WorkQueue;

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

/// A running controller for one reconciler.
pub struct Controller {
    shared: Arc<Shared>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    /// Queues the keys of shards this host takes (cluster mode only).
    acquisitions: Option<tokio::task::JoinHandle<()>>,
    /// Drops per-key bookkeeping of converged keys (see `Shared::sweep`).
    sweeper: tokio::task::JoinHandle<()>,
    /// Queues the keys that wait for a destination when it recovers.
    recoveries: tokio::task::JoinHandle<()>,
    /// Takes the checkpoint every [`checkpoint::EVERY`], when there is one
    /// (`resume`).
    checkpointer: Option<tokio::task::JoinHandle<()>>,
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
    queue: WorkQueue<ObjectKey>,
    /// How many workers may take a key now.
    gate: concurrency::Gate,
    /// The controller's own status writes, whose echoes queue nothing.
    echoes: Arc<echo::Echoes>,
    history: History,
    /// Revisions each key's last reconcile wrote, per kind; see
    /// [`wait_for_own_writes`].
    pending_writes: std::sync::Mutex<HashMap<ObjectKey, respond::Writes>>,
    breaker: breaker::Breaker,
    /// Names of desired children another object holds, to requeue their
    /// would-be owner when they change.
    clash_watch: Arc<triggers::ClashWatch>,
    /// Idle requeues per key.
    requeues: requeue::Requeues,
    /// Keys waiting for a change after a permanent error.
    failures: failures::Failures,
    /// Keys being reconciled right now, to check that none is reconciled twice at once.
    /// Since when, for `Controller::in_progress`.
    in_flight: std::sync::Mutex<HashMap<ObjectKey, std::time::SystemTime>>,
    /// With several hosts on one etcd: which keys are this host's, and the
    /// fenced API to write them through.
    cluster: Option<Cluster>,
    /// The cache views handed to reconcilers (for calls off the async
    /// threads, and inline ones); made once, not per call.
    view: Arc<dyn CacheView>,
    inline_view: Arc<dyn CacheView>,
    /// Where non-inline reconciler calls run: the host's pool, or the
    /// controller's own when started on its own.
    pool: pool::CallPool,
    /// Every reconcile, counted once (see `tally`).
    tally: Tally,
    concurrent: AtomicU64,
    hot_loops: AtomicU64,
    /// What the plugin's events may still record, per object.
    event_budget: events::EventBudget,
    /// What the plugin may still spend of call time and writes.
    pace: Arc<Pace>,
    /// Performs the reconciler's external requests.
    egress: crate::egress::Egress,
    /// Outcomes of writes and holds between a key's reconciles.
    effects: effects::KeyState,
    /// Turns that let their worker go to wait on the network.
    parked: Arc<parked::Parked>,
    /// The turns in progress, which a change of their object supersedes.
    turns: Arc<parked::Turns>,
    /// Where the controller keeps its checkpoint, if anywhere.
    checkpoint: Option<Checkpoint>,
}

impl Controller {
    /// Start a controller: informers for the reconciled and owned kinds,
    /// handlers that queue keys, and `config.workers` workers (of which as
    /// many work as `config.concurrency` lets).
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
        let pool = pool::CallPool::new(pool::default_threads());
        Self::start_on(api, informers, reconciler, config, cluster, pool).await
    }

    /// [`Controller::start_in`], calling the reconciler on `pool` (shared
    /// by every controller of a host).
    pub(crate) async fn start_on(
        api: Api,
        informers: Informers,
        reconciler: Arc<dyn Reconciler>,
        config: Config,
        cluster: Option<Cluster>,
        pool: pool::CallPool,
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

        // Shards move between a cluster's hosts: no checkpoint there.
        let checkpoint = config.checkpoint.clone().filter(|_| cluster.is_none());
        let resume = match &checkpoint {
            Some(checkpoint) => resume::resumable(&api, checkpoint, &*reconciler).await,
            None => None,
        };
        // Subscribed before the handlers list the cache, so a shard taken
        // while they do is queued afterwards rather than missed.
        let taken = cluster.as_ref().map(Cluster::acquisitions);
        let turns = Arc::new(parked::Turns::default());
        let triggers::Triggers {
            handlers,
            triggers,
            echoes,
            clash_watch,
        } = triggers::register(
            &queue,
            &informer,
            &owned_informers,
            &kind,
            &cluster,
            config.resync,
            turns.clone(),
            resume.is_some(),
        );
        informer.wait_synced().await;
        for i in &owned_informers {
            i.wait_synced().await;
        }
        if let Some(saved) = &resume {
            resume::catch_up(&api, saved, &triggers, &handlers, &queue, &manifest.name).await;
        }

        let view = |inline| -> Arc<dyn CacheView> {
            Arc::new(view::InformerView {
                informers: informers.clone(),
                api: api.clone(),
                inline,
            })
        };
        let (view, inline_view) = (view(false), view(true));
        let egress = config
            .egress
            .clone()
            .unwrap_or_else(|| crate::egress::Egress::new(api.clone(), Default::default()));
        let shared = Arc::new(Shared {
            egress,
            effects: Default::default(),
            parked: Default::default(),
            turns,
            view,
            inline_view,
            api,
            reconciler: std::sync::RwLock::new(reconciler),
            kind,
            owned_kinds,
            informer,
            owned_informers,
            queue,
            gate: concurrency::Gate::new(config.concurrency, config.workers),
            echoes,
            history: History::default(),
            pending_writes: Default::default(),
            failures: Default::default(),
            breaker: breaker::Breaker::new(config.hot_loop),
            clash_watch,
            requeues: requeue::Requeues::new(config.requeue),
            in_flight: Default::default(),
            cluster,
            pool,
            tally: config.tally.clone().unwrap_or_default(),
            concurrent: AtomicU64::new(0),
            hot_loops: AtomicU64::new(0),
            event_budget: events::EventBudget::default(),
            pace: Arc::default(),
            checkpoint,
        });
        let workers = (0..shared.gate.workers())
            .map(|index| tokio::spawn(worker::worker(shared.clone(), index)))
            .collect();
        let acquisitions = taken.map(|mut taken| {
            let shared = shared.clone();
            tokio::spawn(async move {
                while taken.changed().await.is_ok() {
                    shared.queue_owned();
                }
            })
        });
        let egress_recovered = shared.egress.recovered();
        let sweeper = {
            let shared = Arc::downgrade(&shared);
            let period = config.hot_loop.window.max(Duration::from_secs(1));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    // Weak: a controller dropped without `shutdown` is not
                    // kept alive by its sweeper.
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    shared.sweep();
                }
            })
        };
        let recoveries = {
            let shared = Arc::downgrade(&shared);
            let mut recovered = egress_recovered;
            tokio::spawn(async move {
                loop {
                    let destinations = match recovered.recv().await {
                        Ok((plugin, destination)) => vec![(plugin, destination)],
                        // Missed some: wake every key that waits.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Vec::new(),
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    };
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    shared.wake_recovered(&destinations);
                }
            })
        };
        let checkpointer = resume::keep(&shared);
        tracing::info!(plugin = %manifest.name, kind = %manifest.reconciles, "controller started");
        Ok(Self {
            shared,
            workers,
            acquisitions,
            sweeper,
            recoveries,
            checkpointer,
            handlers,
        })
    }

    /// The controller's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            reconciles: self.shared.tally.snapshot().reconciles,
            concurrent_reconciles_of_one_key: self.shared.concurrent.load(Ordering::Relaxed),
            hot_loops: self.shared.hot_loops.load(Ordering::Relaxed),
            concurrency: self.shared.gate.limit(),
        }
    }

    /// The shares of call time and write bandwidth the plugin is paced to
    /// (see [`PaceLimits`]).
    pub fn pace_limits(&self) -> PaceLimits {
        self.shared.pace.limits()
    }

    /// What the controller's reconciles came to: how many, how many failed
    /// or wrote, how long they took.
    pub fn tally(&self) -> TallySnapshot {
        self.shared.tally.snapshot()
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
        // The new version may well succeed where the old one gave up.
        self.shared.failures.clear();
        Ok(())
    }

    /// Recent reconcile results of one object.
    pub fn history(&self, key: &ObjectKey) -> Vec<ReconcileRecord> {
        self.shared.history.of(key)
    }

    /// When the reconcile of `key` in progress started, if one is.
    pub fn in_progress(&self, key: &ObjectKey) -> Option<std::time::SystemTime> {
        self.shared
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
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

    /// Queue every cached object of the kind in `namespace` (after a
    /// Secret there changed, say).
    pub fn requeue_namespace(&self, namespace: Option<&str>) {
        for object in self.shared.informer.list(namespace) {
            self.shared.queue.add(ObjectKey::of(&object));
        }
    }

    /// Queue every cached object, those whose last reconcile failed
    /// permanently included: what the plugin may do changed (its
    /// `PluginGrant`), and a refusal that named the grant may now pass.
    pub fn retry_all(&self) {
        self.shared.failures.clear();
        self.requeue_all();
    }

    /// [`Controller::retry_all`] for the objects in `namespace` (a Secret
    /// there changed: a reconcile that failed for want of it may pass).
    pub fn retry_namespace(&self, namespace: Option<&str>) {
        self.shared.failures.forget_namespace(namespace);
        self.requeue_namespace(namespace);
    }

    /// Stop: remove the informer handlers, drop pending keys, let in-flight
    /// reconciles finish, then release the informers (an informer nobody
    /// else holds stops its watch).
    pub async fn shutdown(mut self) {
        self.save_last_checkpoint().await;
        self.stop_handlers();
        self.shared.queue.shutdown();
        self.shared.gate.open();
        for (index, worker) in self.workers.into_iter().enumerate() {
            let _ = worker.await;
            tracing::trace!(plugin = %self.shared.kind.kind, index, "shutdown: worker done");
        }
        tracing::debug!(kind = %self.shared.kind.kind, "shutdown: workers done; stopping parked requests");
        self.shared.parked.stop().await;
    }

    /// Stop taking new changes, but reconcile every key already queued (and
    /// requeued while draining) before stopping, waiting at most `timeout`
    /// before falling back to [`shutdown`](Self::shutdown).
    pub async fn shutdown_with_drain(mut self, timeout: Duration) {
        self.save_last_checkpoint().await;
        self.stop_handlers();
        let drained = self.shared.queue.shutdown_with_drain();
        let parked = self.shared.parked.clone();
        let drained = async move {
            drained.await;
            parked.idle().await;
        };
        if tokio::time::timeout(timeout, drained).await.is_err() {
            tracing::warn!(plugin = %self.manifest().name, "drain timed out; stopping");
        }
        self.shared.queue.shutdown();
        self.shared.gate.open();
        for worker in self.workers {
            let _ = worker.await;
        }
        self.shared.parked.stop().await;
    }

    /// Write the last checkpoint of a controller that stops, taken before its
    /// handlers are removed (a change they would not queue is after its
    /// revision) and before the queue lets go of its delayed keys (which
    /// a stop, drained or not, drops). Keys a drain then reconciles are
    /// owed in it all the same: once more at the next start.
    async fn save_last_checkpoint(&mut self) {
        if let Some(task) = self.checkpointer.take() {
            task.abort();
        }
        if let Some((checkpoint, saved)) = self.shared.checkpoint() {
            resume::save_last(checkpoint, saved).await;
        }
    }

    fn stop_handlers(&mut self) {
        for (informer, id) in &self.handlers {
            informer.remove_handler(*id);
        }
        if let Some(task) = self.acquisitions.take() {
            task.abort();
        }
        self.sweeper.abort();
        self.recoveries.abort();
    }
}

/// One running controller, as a plan calls it.
pub(crate) struct PlanTarget {
    /// The reconciler running now.
    pub reconciler: Arc<dyn Reconciler>,
    /// The kind it reconciles.
    pub kind: Arc<KindInfo>,
    /// The kinds it owns.
    pub owned_kinds: Vec<Arc<KindInfo>>,
}

impl Controller {
    /// What a plan calls of this controller: the reconciler running now,
    /// its kind and the kinds it owns.
    pub(crate) fn plan_target(&self) -> PlanTarget {
        PlanTarget {
            reconciler: self.shared.reconciler(),
            kind: self.shared.kind.clone(),
            owned_kinds: self.shared.owned_kinds.clone(),
        }
    }
}

impl Shared {
    /// Destinations answer again (`(plugin, destination)`; none: any may
    /// have): queue now, backoff forgotten, the keys whose requests failed
    /// there, so their held changes follow at once.
    fn wake_recovered(&self, destinations: &[(String, String)]) {
        let plugin = self.reconciler().manifest().name.clone();
        let keys: Vec<ObjectKey> = if destinations.is_empty() {
            let all: Vec<String> = self.effects.waiting_destinations();
            all.iter().flat_map(|d| self.effects.recovered(d)).collect()
        } else {
            destinations
                .iter()
                .filter(|(p, _)| *p == plugin)
                .flat_map(|(_, d)| self.effects.recovered(d))
                .collect()
        };
        if !keys.is_empty() {
            tracing::info!(
                plugin,
                keys = keys.len(),
                "a destination answers again; its waiting objects are queued"
            );
        }
        for key in keys {
            self.queue.forget(&key);
            self.queue.add(key);
        }
    }

    fn reconciler(&self) -> Arc<dyn Reconciler> {
        self.reconciler
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Drop the bookkeeping converged keys no longer need: hot-loop streaks
    /// that can no longer trip, and read-your-writes revisions the
    /// informers have reached (waiting for them would return at once).
    fn sweep(&self) {
        let streaks = self.breaker.sweep();
        let reached: Vec<(&KindInfo, i64)> = std::iter::once(&self.informer)
            .chain(&self.owned_informers)
            .map(|i| (&**i.kind(), i.revision()))
            .collect();
        let mut pending = self
            .pending_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let before = pending.len();
        pending.retain(|_, writes| {
            writes.iter().any(|(kind, revision)| {
                reached.iter().any(|(k, reached)| {
                    k.group == kind.group && k.plural == kind.plural && reached < revision
                })
            })
        });
        if pending.capacity() > 4 * pending.len().max(64) {
            pending.shrink_to_fit();
        }
        tracing::debug!(
            kind = %self.kind.kind,
            streaks,
            writes = before - pending.len(),
            "forgot the bookkeeping of converged keys"
        );
    }

    /// Queue (at low priority) every cached object whose shard this host holds.
    fn queue_owned(&self) {
        let mine = triggers::ownership_filter(&self.cluster, &self.kind);
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
            destinations: vec![],
            secrets: vec![],
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
