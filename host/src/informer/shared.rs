//! [`Informers`]: the host's set of informers, one per kind, shared by
//! every controller and held weakly, so an informer nobody holds stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::{Informer, Inner};
use crate::api::Api;
use crate::object::KindInfo;

/// Informers shared by every controller of one host: one watch per kind
/// however many plugins look at it. The set holds informers weakly: an
/// informer nobody holds is dropped (its watch stops) and started afresh on
/// the next [`for_kind`](Self::for_kind).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::informer::{Change, Informer, Informers};
/// use setpoint::object::ObjectKey;
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
///
/// let informers = Informers::new(api.clone());
/// let a = informers.for_kind(events.clone());
/// let b = informers.for_kind(events.clone());
/// assert_eq!(informers.running(), 1, "one informer per kind, shared");
/// drop((a, b));
/// assert_eq!(informers.running(), 0, "dropped with its last handle");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Informers {
    api: Api,
    informers: Arc<Mutex<HashMap<KindId, Weak<Inner>>>>,
}

/// A kind's group and plural.
type KindId = (String, String);

/// What one running informer holds, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformerStats {
    /// The kind's API group (empty for the core group).
    pub group: String,
    /// The kind's plural name.
    pub resource: String,
    /// Objects in the informer's cache.
    pub objects: usize,
    /// Objects whose content the cache holds itself: all of them over a
    /// store without version reads (memory, etcd); over the embedded store
    /// only those a watch event told a moment ago (the rest it reads back).
    pub held: usize,
    /// Handlers registered (one per controller that watches the kind).
    pub handlers: usize,
    /// Lists the cache was filled from: 1 after the first, one more per
    /// relist (after the watch fell too far behind).
    pub lists: u64,
}

impl Informers {
    /// An empty set over `api`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// assert_eq!(Informers::new(api).running(), 0);
    /// # Ok(()) }
    /// ```
    pub fn new(api: Api) -> Self {
        Self {
            api,
            informers: Arc::default(),
        }
    }

    /// The informer for `kind`, started unless someone holds one already.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informers = Informers::new(api.clone());
    /// let informer = informers.for_kind(events.clone());
    /// informer.wait_synced().await;
    /// assert!(informers.existing("", "events").is_some());
    /// # Ok(()) }
    /// ```
    pub fn for_kind(&self, kind: Arc<KindInfo>) -> Informer {
        let mut map = self.informers.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, weak| weak.strong_count() > 0);
        let id = (kind.group.clone(), kind.plural.clone());
        if let Some(inner) = map.get(&id).and_then(Weak::upgrade) {
            return Informer { inner };
        }
        let informer = Informer::start(self.api.clone(), kind);
        map.insert(id, Arc::downgrade(&informer.inner));
        informer
    }

    /// The informer for a kind if someone holds one.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informers = Informers::new(api.clone());
    /// assert!(informers.existing("", "events").is_none(), "not started by a lookup");
    /// # Ok(()) }
    /// ```
    pub fn existing(&self, group: &str, plural: &str) -> Option<Informer> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(group.to_owned(), plural.to_owned()))
            .and_then(Weak::upgrade)
            .map(|inner| Informer { inner })
    }

    /// How many informers are running (held by someone).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informers = Informers::new(api.clone());
    /// let _events = informers.for_kind(events.clone());
    /// assert_eq!(informers.running(), 1);
    /// # Ok(()) }
    /// ```
    pub fn running(&self) -> usize {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// What each running informer holds, by group and resource.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::Informers;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": "e"}})).await?;
    ///
    /// let informers = Informers::new(api.clone());
    /// let informer = informers.for_kind(events.clone());
    /// informer.add_handler(|_| {});
    /// informer.wait_synced().await;
    /// let stats = informers.stats();
    /// assert_eq!(stats.len(), 1);
    /// assert_eq!((stats[0].resource.as_str(), stats[0].objects), ("events", 1));
    /// assert_eq!((stats[0].handlers, stats[0].lists), (1, 1));
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> Vec<InformerStats> {
        let running: Vec<_> = self
            .informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let mut stats: Vec<_> = running
            .iter()
            .map(|inner| {
                let (objects, held) = cache_len(inner);
                InformerStats {
                    group: inner.kind.group.clone(),
                    resource: inner.kind.plural.clone(),
                    objects,
                    held,
                    handlers: inner
                        .handlers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .len(),
                    lists: inner.lists.load(std::sync::atomic::Ordering::Relaxed),
                }
            })
            .collect();
        stats.sort_by(|a, b| (&a.group, &a.resource).cmp(&(&b.group, &b.resource)));
        stats
    }

    /// Forget every informer; those still held keep running until dropped.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::informer::{Change, Informer, Informers};
    /// use setpoint::object::ObjectKey;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [
    ///     {"apiVersion": "v1", "kind": "Event", "name": "owner", "uid": "u1"}]}});
    ///
    /// let informers = Informers::new(api.clone());
    /// let held = informers.for_kind(events.clone());
    /// informers.clear();
    /// assert!(informers.existing("", "events").is_none());
    /// held.wait_synced().await; // still running for whoever holds it
    /// # Ok(()) }
    /// ```
    pub fn clear(&self) {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// An informer's objects and how many of them its cache holds itself.
fn cache_len(inner: &Inner) -> (usize, usize) {
    let cache = inner.cache.read().unwrap_or_else(|p| p.into_inner());
    (cache.len(), cache.held())
}
