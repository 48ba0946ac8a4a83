//! The read side of an [`Informer`]'s cache: one object by key, and lists
//! by namespace, owner, label and label selector, each served from an index.

use std::sync::Arc;

use super::{Cache, Informer};
use crate::object::{Object, ObjectKey};

impl Informer {
    /// One cached object.
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
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert!(informer.get(&ObjectKey::new(Some("default"), "missing")).is_none());
    /// # Ok(()) }
    /// ```
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        self.read().get(key)
    }

    /// Cached objects whose owner references include `owner_uid`.
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
    /// api.create(&events, event("child")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert_eq!(informer.owned_by("u1").len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn owned_by(&self, owner_uid: &str) -> Vec<Arc<Object>> {
        self.read().owned_by(owner_uid)
    }

    /// Every cached object, optionally in one namespace (through the
    /// namespace index).
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
    /// api.create(&events, event("e")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert_eq!(informer.list(Some("default")).len(), 1);
    /// assert!(informer.list(Some("elsewhere")).is_empty());
    /// # Ok(()) }
    /// ```
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        let cache = self.read();
        match namespace {
            Some(ns) => cache.in_namespace(Some(ns)),
            None => cache.iter().collect(),
        }
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The cached objects whose `Ready` condition is not `True`, through
    /// the readiness index (nothing is decoded); see [`Cache::not_ready`].
    ///
    /// [`Cache::not_ready`]: super::Cache::not_ready
    pub fn not_ready(&self) -> Vec<(ObjectKey, super::NotReady)> {
        self.read().not_ready()
    }

    /// Cached objects carrying the label `key=value` (through the label index).
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
    /// api.create(&events, event("e")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert_eq!(informer.with_label("app", "web").len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn with_label(&self, key: &str, value: &str) -> Vec<Arc<Object>> {
        self.read().with_label(key, value)
    }

    /// Cached objects, optionally in one namespace, matching `selector`.
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
    /// use setpoint::object::selector::LabelSelector;
    /// api.create(&events, event("e")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// let selector = LabelSelector::parse("app in (web, api)")?;
    /// assert_eq!(informer.select(None, &selector).len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn select(
        &self,
        namespace: Option<&str>,
        selector: &crate::object::selector::LabelSelector,
    ) -> Vec<Arc<Object>> {
        self.list(namespace)
            .into_iter()
            .filter(|o| selector.matches(crate::object::meta::labels(o)))
            .collect()
    }

    /// The store revision the cache reflects.
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
    /// let written = api.create(&events, event("e")).await?;
    /// let informer = Informer::start(api.clone(), events.clone());
    /// informer.wait_synced().await;
    /// assert_eq!(informer.revision().to_string(), written["metadata"]["resourceVersion"]);
    /// # Ok(()) }
    /// ```
    pub fn revision(&self) -> i64 {
        self.read().revision()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.inner.cache.read().unwrap_or_else(|p| p.into_inner())
    }
}
