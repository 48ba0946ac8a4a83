//! Informers: list-then-watch caches of one kind (kube-rs' watcher plus
//! reflector), with an index by owner, change handlers, and a relist when the
//! watch is cut off.
//!
//! # Guarantees
//!
//! - The cache is filled by a list at one revision, then follows the watch
//!   hub from exactly that revision: no gap, no duplicate.
//! - When the hub answers "too old" (the informer fell behind, or history was
//!   lost), the informer relists and reconciles its cache with the new list:
//!   objects gone in the meantime are reported as deleted, changed ones as
//!   applied, unchanged ones not at all — no reconcile storm.
//! - Handlers see every change after they are added; a handler added late is
//!   first told about every object already cached.

mod cache;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, Weak};

use tokio::sync::watch;

pub use cache::Cache;

use crate::api::{Api, ListOptions};
use crate::object::{KindInfo, Object, ObjectKey};
use crate::watch::{Error as WatchError, EventType};

/// A change the informer observed.
#[derive(Debug, Clone)]
pub enum Change {
    /// The object was created or changed (or first seen).
    Applied(Arc<Object>),
    /// The object was deleted; this is its last known state.
    Deleted(Arc<Object>),
}

impl Change {
    /// The object the change is about.
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Change::Applied(o) | Change::Deleted(o) => o,
        }
    }
}

type Handler = Arc<dyn Fn(&Change) + Send + Sync>;

/// A shared list-then-watch cache of one kind. Cheap to clone; the watch
/// stops when the last clone is dropped.
#[derive(Clone)]
pub struct Informer {
    inner: Arc<Inner>,
}

struct Inner {
    kind: Arc<KindInfo>,
    cache: RwLock<Cache>,
    handlers: Mutex<Vec<Handler>>,
    synced: watch::Sender<bool>,
    /// The revision the cache reflects, for read-your-writes waits.
    revision: watch::Sender<i64>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

impl Informer {
    /// Start an informer for `kind`.
    pub fn start(api: Api, kind: Arc<KindInfo>) -> Self {
        let (synced, _) = watch::channel(false);
        let (revision, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            kind,
            cache: RwLock::new(Cache::default()),
            handlers: Mutex::new(Vec::new()),
            synced,
            revision,
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&inner), api));
        *inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Self { inner }
    }

    /// The kind this informer follows.
    pub fn kind(&self) -> &Arc<KindInfo> {
        &self.inner.kind
    }

    /// Register a handler; it is first called with every cached object.
    pub fn add_handler(&self, handler: impl Fn(&Change) + Send + Sync + 'static) {
        let handler: Handler = Arc::new(handler);
        // Hold the cache lock while replaying so no change slips between the
        // replay and the registration.
        let cache = self.inner.cache.read().unwrap_or_else(|p| p.into_inner());
        for object in cache.iter() {
            handler(&Change::Applied(object.clone()));
        }
        self.inner
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handler);
    }

    /// Wait until the first list has filled the cache.
    pub async fn wait_synced(&self) {
        let mut rx = self.inner.synced.subscribe();
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Wait until the cache reflects store revision `revision` (or newer),
    /// giving up after `timeout`; returns whether it got there. Used after a
    /// write so that the next reconcile reads its own writes.
    pub async fn wait_for_revision(&self, revision: i64, timeout: std::time::Duration) -> bool {
        let mut rx = self.inner.revision.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= revision))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// One cached object.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        self.read().get(key)
    }

    /// Cached objects whose owner references include `owner_uid`.
    pub fn owned_by(&self, owner_uid: &str) -> Vec<Arc<Object>> {
        self.read().owned_by(owner_uid)
    }

    /// Every cached object, optionally in one namespace.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        self.read()
            .iter()
            .filter(|o| namespace.is_none() || crate::object::meta::namespace(o) == namespace)
            .cloned()
            .collect()
    }

    /// The store revision the cache reflects.
    pub fn revision(&self) -> i64 {
        self.read().revision()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.inner.cache.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn apply(&self, changes: impl FnOnce(&mut Cache) -> Vec<Change>) {
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        let changes = changes(&mut cache);
        self.revision.send_replace(cache.revision());
        // Handlers run under the write lock so that `add_handler`'s replay and
        // later changes are ordered; handlers must be quick (they enqueue keys).
        let handlers = self
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for change in &changes {
            for handler in &handlers {
                handler(change);
            }
        }
        drop(cache);
    }
}

async fn run(inner: Weak<Inner>, api: Api) {
    let Some(kind) = inner.upgrade().map(|i| i.kind.clone()) else {
        return;
    };
    let prefix = Api::prefix(&kind, None);
    loop {
        // List, then watch from the list's revision.
        let list = match api.list(&kind, &ListOptions::default()).await {
            Ok(list) => list,
            Err(err) => {
                tracing::warn!(kind = %kind.kind, %err, "informer list failed; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut subscription = match api.hub().subscribe(&prefix, list.resource_version) {
            Ok(s) => s,
            Err(err) => {
                tracing::debug!(kind = %kind.kind, %err, "informer subscribe failed; relisting");
                continue;
            }
        };
        {
            let Some(inner) = inner.upgrade() else { return };
            inner.apply(|cache| cache.replace(list.items, list.resource_version));
            inner.synced.send_replace(true);
        }
        loop {
            match subscription.next().await {
                Ok(event) => {
                    let Some(inner) = inner.upgrade() else { return };
                    inner.apply(|cache| {
                        let change = match event.kind {
                            EventType::Deleted => cache.remove(&event.object, event.revision),
                            EventType::Added | EventType::Modified => {
                                cache.upsert(event.object.clone(), event.revision)
                            }
                        };
                        change.into_iter().collect()
                    });
                }
                Err(WatchError::TooOldResourceVersion { .. }) => {
                    tracing::info!(kind = %kind.kind, "informer fell behind; relisting");
                    break;
                }
                Err(err) => {
                    tracing::warn!(kind = %kind.kind, %err, "informer watch ended");
                    return;
                }
            }
        }
    }
}

/// Informers shared by every controller of one host: one watch per kind
/// however many plugins look at it.
#[derive(Clone)]
pub struct Informers {
    api: Api,
    informers: Arc<Mutex<HashMap<(String, String), Informer>>>,
}

impl Informers {
    /// An empty set over `api`.
    pub fn new(api: Api) -> Self {
        Self {
            api,
            informers: Arc::default(),
        }
    }

    /// The informer for `kind`, started on first use.
    pub fn for_kind(&self, kind: Arc<KindInfo>) -> Informer {
        let mut map = self.informers.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((kind.group.clone(), kind.plural.clone()))
            .or_insert_with(|| Informer::start(self.api.clone(), kind))
            .clone()
    }

    /// The informer for a kind if one is running.
    pub fn existing(&self, group: &str, plural: &str) -> Option<Informer> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(group.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// Stop every informer.
    pub fn clear(&self) {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Keys present in `a` but not in `b`.
fn missing<'a>(
    a: &'a HashMap<ObjectKey, Arc<Object>>,
    b: &HashSet<ObjectKey>,
) -> Vec<&'a ObjectKey> {
    a.keys().filter(|k| !b.contains(*k)).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::json;

    use super::*;
    use crate::store::MemoryBackend;

    async fn api_with_small_history() -> (Api, Arc<KindInfo>) {
        let api = Api::open_with_history(Arc::new(MemoryBackend::new()), 16)
            .await
            .unwrap();
        let kind = api.kinds().by_plural("", "events").unwrap();
        (api, kind)
    }

    fn event(name: &str, n: i64) -> Object {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"}, "count": n})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_informer_cut_off_by_the_hub_relists_without_gaps_or_a_storm() {
        let (api, kind) = api_with_small_history().await;
        for i in 0..5 {
            api.create(&kind, event(&format!("still-{i}"), 0))
                .await
                .unwrap();
        }
        api.create(&kind, event("churn", 0)).await.unwrap();
        api.create(&kind, event("doomed", 0)).await.unwrap();
        let informer = Informer::start(api.clone(), kind.clone());
        informer.wait_synced().await;

        // A handler that stalls the informer once, long enough for the hub
        // to cut it off, and counts what it is told per object.
        let stall = Arc::new(AtomicBool::new(false));
        let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        {
            let (stall, calls) = (stall.clone(), calls.clone());
            informer.add_handler(move |change| {
                if stall.swap(false, Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                }
                *calls
                    .lock()
                    .unwrap()
                    .entry(crate::object::meta::name(change.object()).to_owned())
                    .or_default() += 1;
            });
        }
        calls.lock().unwrap().clear();
        stall.store(true, Ordering::SeqCst);
        for n in 1..=100 {
            api.update(&kind, event("churn", n)).await.unwrap();
        }
        api.delete(&kind, Some("default"), "doomed", &Default::default())
            .await
            .unwrap();
        let last = api.current_revision().await.unwrap();
        let caught_up = informer
            .wait_for_revision(last, std::time::Duration::from_secs(10))
            .await;
        assert!(caught_up, "the informer relisted and caught up");

        assert_eq!(
            informer
                .get(&ObjectKey::new(Some("default"), "churn"))
                .unwrap()["count"],
            100
        );
        assert!(
            informer
                .get(&ObjectKey::new(Some("default"), "doomed"))
                .is_none(),
            "a delete missed while cut off is seen"
        );
        assert_eq!(informer.list(None).len(), 6);
        let calls = calls.lock().unwrap();
        assert!(
            calls.get("churn").copied().unwrap_or(0) < 100,
            "the relist coalesced the missed changes: {calls:?}"
        );
        assert_eq!(calls.get("doomed"), Some(&1), "{calls:?}");
        assert!(
            (0..5).all(|i| !calls.contains_key(&format!("still-{i}"))),
            "unchanged objects were not re-announced: {calls:?}"
        );
    }
}
