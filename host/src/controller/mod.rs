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

mod apply;
pub mod events;
pub mod history;
mod reconciler;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

pub use history::{History, Outcome, ReconcileRecord};
pub use reconciler::{
    CacheView, EventRecord, Manifest, ReconcileError, Reconciler, Request, Response, Severity,
};

use crate::api::{self, Api};
use crate::informer::{Change, Informer, Informers};
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 2,
            queue: queue::Config::default(),
        }
    }
}

/// A running controller for one reconciler.
pub struct Controller {
    shared: Arc<Shared>,
    workers: Vec<tokio::task::JoinHandle<()>>,
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

        let q = queue.clone();
        informer.add_handler(move |change| {
            q.add(ObjectKey::of(change.object()));
        });
        for child_informer in &owned_informers {
            let q = queue.clone();
            let (owner_api_version, owner_kind) = (kind.api_version(), kind.kind.clone());
            child_informer.add_handler(move |change: &Change| {
                let child = change.object();
                for owner in meta::owner_references(child) {
                    if owner["controller"].as_bool() == Some(true)
                        && owner["kind"].as_str() == Some(owner_kind.as_str())
                        && owner["apiVersion"].as_str() == Some(owner_api_version.as_str())
                        && let Some(name) = owner["name"].as_str()
                    {
                        q.add(ObjectKey::new(meta::namespace(child), name));
                    }
                }
            });
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
        });
        let workers = (0..config.workers.max(1))
            .map(|_| tokio::spawn(worker(shared.clone())))
            .collect();
        tracing::info!(plugin = %manifest.name, kind = %manifest.reconciles, "controller started");
        Ok(Self { shared, workers })
    }

    /// The current reconciler's manifest.
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

    /// Stop taking keys, let in-flight reconciles finish, and stop.
    pub async fn shutdown(self) {
        self.shared.queue.shutdown();
        for worker in self.workers {
            let _ = worker.await;
        }
    }
}

impl Shared {
    fn reconciler(&self) -> Arc<dyn Reconciler> {
        self.reconciler
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

async fn worker(shared: Arc<Shared>) {
    while let Some(key) = shared.queue.get().await {
        let started = SystemTime::now();
        let clock = Instant::now();
        let reconciler = shared.reconciler();
        let outcome = reconcile_key(&shared, &reconciler, &key).await;
        let (outcome, next_in) = match outcome {
            Ok(None) => {
                shared.queue.forget(&key);
                (None, None)
            }
            Ok(Some(requeue_after)) => {
                shared.queue.forget(&key);
                if let Some(after) = requeue_after {
                    shared.queue.add_after(key.clone(), after);
                }
                (Some(Outcome::Success), requeue_after)
            }
            Err(ReconcileError::Transient(msg)) => {
                let delay = shared.queue.add_rate_limited(key.clone());
                tracing::warn!(plugin = %reconciler.manifest().name, object = %key, error = %msg, retry_in = ?delay, "reconcile failed; will retry");
                (Some(Outcome::TransientError(msg)), Some(delay))
            }
            Err(ReconcileError::Permanent(msg)) => {
                shared.queue.forget(&key);
                tracing::warn!(plugin = %reconciler.manifest().name, object = %key, error = %msg, "reconcile failed permanently");
                report_permanent(&shared, reconciler.manifest(), &key, &msg).await;
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
        shared.queue.done(&key);
    }
}

/// Reconcile one key. `Ok(None)`: nothing to reconcile (object gone);
/// `Ok(Some(requeue))`: applied.
async fn reconcile_key(
    shared: &Arc<Shared>,
    reconciler: &Arc<dyn Reconciler>,
    key: &ObjectKey,
) -> Result<Option<Option<Duration>>, ReconcileError> {
    let Some(object) = shared.informer.get(key) else {
        return Ok(None);
    };
    let manifest = reconciler.manifest();
    wait_for_own_writes(shared, key).await;
    let applier = apply::Applier {
        api: &shared.api,
        manifest,
        owned_kinds: &shared.owned_kinds,
        kind: &shared.kind,
        written: Default::default(),
    };
    let mut finalizing = false;
    if let Some(finalizer) = &manifest.finalizer {
        if meta::deletion_timestamp(&object).is_some() {
            if !meta::finalizers(&object).contains(&finalizer.as_str()) {
                return Ok(None);
            }
            finalizing = true;
        } else if applier
            .ensure_finalizer(&object, finalizer)
            .await
            .map_err(transient)?
        {
            // The write requeues the key through the informer.
            remember_writes(shared, key, &applier);
            return Ok(Some(None));
        }
    } else if meta::deletion_timestamp(&object).is_some() {
        return Ok(None);
    }

    let uid = meta::uid(&object).to_owned();
    let owned: Vec<_> = shared
        .owned_informers
        .iter()
        .flat_map(|i| i.owned_by(&uid))
        .collect();
    let request = Request {
        object: object.clone(),
        owned,
        finalizing,
        now_unix_ms: time::now_unix_ms(),
    };
    let reconciler = reconciler.clone();
    let view: Arc<dyn CacheView> = Arc::new(InformerView {
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
    remember_writes(shared, key, &applier);
    match result {
        Ok(()) => {}
        Err(Error::Refused(msg)) => {
            let event = EventRecord {
                severity: Severity::Warning,
                reason: "ResponseRefused".into(),
                message: msg.clone(),
            };
            let _ = events::record(&shared.api, &manifest.name, &object, &event).await;
            return Err(ReconcileError::Permanent(msg));
        }
        Err(err) => return Err(transient(err)),
    }
    if finalizing
        && response.remove_finalizer
        && let Some(finalizer) = &manifest.finalizer
    {
        let latest = shared
            .api
            .get(&shared.kind, key.namespace.as_deref(), &key.name)
            .await
            .map_err(|e| transient(e.into()))?;
        applier
            .remove_finalizer(&latest, finalizer)
            .await
            .map_err(transient)?;
    }
    Ok(Some(response.requeue_after))
}

/// How long a reconcile waits for the caches to show its key's last writes.
const OWN_WRITES_TIMEOUT: Duration = Duration::from_secs(5);

fn remember_writes(shared: &Shared, key: &ObjectKey, applier: &apply::Applier<'_>) {
    let written = std::mem::take(&mut *applier.written.lock().unwrap_or_else(|p| p.into_inner()));
    if !written.is_empty() {
        shared
            .pending_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), written);
    }
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

/// Report a permanent error on the object: a warning event and `Ready=False`.
async fn report_permanent(shared: &Shared, manifest: &Manifest, key: &ObjectKey, message: &str) {
    let Some(object) = shared.informer.get(key) else {
        return;
    };
    let event = EventRecord {
        severity: Severity::Warning,
        reason: "ReconcileError".into(),
        message: message.to_owned(),
    };
    if let Err(err) = events::record(&shared.api, &manifest.name, &object, &event).await {
        tracing::warn!(%err, "could not record event");
    }
    let mut conditions: Vec<serde_json::Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = json!({
        "type": "Ready", "status": "False", "reason": "ReconcileError", "message": message,
        "observedGeneration": meta::generation(&object),
    });
    let existing = conditions.iter_mut().find(|c| c["type"] == "Ready");
    match existing {
        Some(c)
            if c["status"] == "False"
                && c["message"] == message
                && c["observedGeneration"] == ready["observedGeneration"] =>
        {
            return;
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
    let mut next = (*object).clone();
    next["status"]["conditions"] = json!(conditions);
    let result = if shared.kind.status_subresource {
        shared.api.update_status(&shared.kind, next).await
    } else {
        shared.api.update(&shared.kind, next).await
    };
    if let Err(err) = result {
        tracing::debug!(%err, "could not write the Ready=False condition");
    }
}

/// The plugin's read-only view: informer caches where a kind is watched,
/// the store otherwise.
struct InformerView {
    informers: Informers,
    api: Api,
}

impl CacheView for InformerView {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<crate::object::Object>> {
        let info = self.api.kinds().by_kind(api_version, kind)?;
        let namespace = if info.namespaced {
            Some(namespace.unwrap_or("default"))
        } else {
            None
        };
        if let Some(informer) = self.informers.existing(&info.group, &info.plural) {
            return informer.get(&ObjectKey::new(namespace, name));
        }
        let api = self.api.clone();
        let name = name.to_owned();
        let namespace = namespace.map(str::to_owned);
        tokio::runtime::Handle::current()
            .block_on(async move { api.get(&info, namespace.as_deref(), &name).await })
            .ok()
            .map(Arc::new)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Arc<crate::object::Object>>, String> {
        let info = self
            .api
            .kinds()
            .by_kind(api_version, kind)
            .ok_or_else(|| format!("unknown kind {api_version}/{kind}"))?;
        let selector = crate::object::selector::LabelSelector::parse(label_selector)
            .map_err(|e| e.to_string())?;
        if let Some(informer) = self.informers.existing(&info.group, &info.plural) {
            return Ok(informer
                .list(namespace)
                .into_iter()
                .filter(|o| selector.matches(meta::labels(o)))
                .collect());
        }
        let api = self.api.clone();
        let options = api::ListOptions {
            namespace: namespace.map(str::to_owned),
            label_selector: Some(label_selector.to_owned()),
            ..Default::default()
        };
        tokio::runtime::Handle::current()
            .block_on(async move { api.list(&info, &options).await })
            .map(|l| l.items.into_iter().map(Arc::new).collect())
            .map_err(|e| e.to_string())
    }
}
