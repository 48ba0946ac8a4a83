//! Object semantics, written once above any [`Backend`]: the rules
//! Kubernetes clients rely on. Owns what a write means (never how bytes are
//! stored, which is `store`'s, nor how changes fan out, which is `watch`'s).
//!
//! - `uid` and `creationTimestamp` are set by the host; `generation` moves
//!   only when the spec changes; a write that changes nothing is not
//!   written; objects are limited in size ([`Api::with_max_object_bytes`]).
//! - Objects of kinds registered by a CustomResourceDefinition are pruned,
//!   defaulted and validated against the version's schema on every write
//!   (`object::schema`); the definitions themselves are checked (`crd`).
//! - `status` is written only through its sub-resource ([`Api::update_status`],
//!   `status: true` on patches) when the kind has one, and the main resource
//!   never writes it.
//! - Writes are compare-and-swap on the revision read; a `resourceVersion`
//!   in the request is a precondition (`write`, `patch`, `apply`).
//! - Deletion honours finalizers and the propagation policy (`delete`);
//!   dependents are garbage-collected through owner references by a
//!   system controller above this layer ([`crate::system::gc`]).
//! - Core `v1 Secret`s fold `stringData` into `data` and check it on
//!   every write (`secret`).
//! - Lists page through one snapshot (`list`); compaction (`compact`)
//!   answers older pages and watches with 410, and is run periodically by
//!   the compactor ([`crate::system::compactor`]).
//!
//! The controllers the host runs for itself (garbage collection,
//! compaction, following stored definitions) are `crate::system`'s: this
//! module is the object rules they call.

mod apply;
pub use apply::MAX_FIELD_MANAGERS;
mod compact;
mod crd;
mod delete;
mod error;
pub mod kinds;
mod list;
mod list_pages;
mod patch;
pub mod secret;
mod validate;
mod write;

#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

pub use delete::{DeleteOptions, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation};
pub use error::{Cause, CauseType, Error, FieldConflict, MAX_LISTED_CONFLICTS};
pub use kinds::KindRegistry;
pub use list::{ListOptions, ObjectList};
pub use list_pages::{JsonListPages, MAX_PAGE_BYTES, PAGE_BYTES};
pub(crate) use write::Next;

use crate::object::{KindInfo, Object, codec, meta, shape};
use crate::store::{self, Backend, KeyValue, Revision};
use crate::watch::WatchHub;

/// Result alias for object operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The largest encoded object accepted, as in Kubernetes (etcd's request limit).
pub const DEFAULT_MAX_OBJECT_BYTES: usize = crate::object::shape::DEFAULT_MAX_OBJECT_BYTES;

/// The object API over one store. Cheap to clone.
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
/// let created = api.create(&events, event("e")).await?;
/// assert_eq!(created["metadata"]["generation"], 1);
/// assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Api {
    backend: Arc<dyn Backend>,
    hub: WatchHub,
    kinds: KindRegistry,
    max_object_bytes: usize,
    /// The revision the store was last compacted to through this API.
    compacted: Arc<AtomicI64>,
    /// History someone will read again, by holder ([`Api::hold_history`]).
    holds: Arc<std::sync::Mutex<std::collections::BTreeMap<String, Revision>>>,
    /// Whether writes are only checked (see [`Api::dry_run`]).
    dry_run: bool,
    /// Streamed lists being written ([`JsonListPages`]): their pages share
    /// a budget.
    streaming: Arc<std::sync::atomic::AtomicUsize>,
}

impl Api {
    /// Open the object API on a backend: start its watch hub and load the
    /// kinds registered by stored `CustomResourceDefinition`s.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// assert!(api.kinds().by_kind("v1", "Event").is_some());
    /// # Ok(()) }
    /// ```
    pub async fn open(backend: Arc<dyn Backend>) -> Result<Self> {
        Self::open_with_history(backend, crate::watch::DEFAULT_HISTORY).await
    }

    /// [`Api::open`] with a watch hub keeping `history` changes (also how far
    /// a watcher may fall behind before it must relist).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open_with_history(Arc::new(MemoryBackend::new()), 1024).await?;
    /// assert_eq!(api.hub().max_lag(), 1024);
    /// # Ok(()) }
    /// ```
    pub async fn open_with_history(backend: Arc<dyn Backend>, history: usize) -> Result<Self> {
        let hub = WatchHub::start(backend.clone(), history).await?;
        let api = Self {
            backend,
            hub,
            kinds: KindRegistry::with_builtins(),
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            compacted: Arc::new(AtomicI64::new(0)),
            streaming: Arc::default(),
            holds: Arc::default(),
            dry_run: false,
        };
        let crd_kind = api.crd_kind();
        for crd in api.list(&crd_kind, &ListOptions::default()).await?.items {
            match kinds::kind_from_crd(&crd) {
                Ok(info) => api.kinds.insert(info),
                Err(err) => tracing::warn!(%err, "stored CustomResourceDefinition ignored"),
            }
        }
        Ok(api)
    }

    /// This API with a different object size limit (encoded bytes); larger
    /// creates, updates, patches and applies fail with [`Error::TooLarge`]
    /// and write nothing. Clones made before keep their limit.
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
    /// let small = api.clone().with_max_object_bytes(200);
    /// let mut big = event("big");
    /// big["message"] = json!("x".repeat(500));
    /// assert!(matches!(small.create(&events, big.clone()).await, Err(Error::TooLarge { .. })));
    /// api.create(&events, big).await?; // the original keeps its limit
    /// # Ok(()) }
    /// ```
    pub fn with_max_object_bytes(mut self, limit: usize) -> Self {
        self.max_object_bytes = limit;
        self
    }

    /// The object size limit in encoded bytes.
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
    /// assert_eq!(api.max_object_bytes(), setpoint::api::DEFAULT_MAX_OBJECT_BYTES);
    /// # Ok(()) }
    /// ```
    pub fn max_object_bytes(&self) -> usize {
        self.max_object_bytes
    }

    /// The registered kinds.
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
    /// assert_eq!(events.plural, "events");
    /// assert!(api.kinds().by_plural("apiextensions.k8s.io", "customresourcedefinitions").is_some());
    /// # Ok(()) }
    /// ```
    pub fn kinds(&self) -> &KindRegistry {
        &self.kinds
    }

    /// The watch hub over this store.
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
    /// let written = api.create(&events, event("e")).await?;
    /// let revision = written["metadata"]["resourceVersion"].as_str().unwrap().parse()?;
    /// api.hub().wait_for(revision).await;
    /// assert_eq!(api.hub().last_revision(), revision);
    /// # Ok(()) }
    /// ```
    pub fn hub(&self) -> &WatchHub {
        &self.hub
    }

    /// The backend.
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
    /// api.create(&events, event("e")).await?;
    /// let stored = api.backend().get(&Api::key(&events, Some("default"), "e")).await?;
    /// assert!(stored.is_some());
    /// # Ok(()) }
    /// ```
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// This API with every write fenced by `fence` (see
    /// [`store::Fence`]): once the fence's claim is gone, writes fail with
    /// `store::Error::Fenced` and change nothing. Reads are unchanged.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::{self, Fence, MemoryBackend};
    ///
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    /// let fenced = api.fenced(Fence { key: "/claims/0".into(), create_revision: 1 });
    /// let kind = api.kinds().require("v1", "Event").unwrap();
    /// let event = serde_json::json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": "e", "namespace": "default"}});
    /// // The memory store has no leases, so it cannot honour a fence.
    /// let err = fenced.create(&kind, event).await.unwrap_err();
    /// assert!(matches!(err, Error::Store(store::Error::Unsupported(_))));
    /// # });
    /// ```
    pub fn fenced(&self, fence: store::Fence) -> Self {
        Self {
            backend: Arc::new(store::FencedBackend::new(self.backend.clone(), fence)),
            ..self.clone()
        }
    }

    /// This API over `overlay` (an [`store::OverlayBackend`] over this
    /// API's store, say), with a registry of kinds of its own: every write
    /// runs the whole write path and lands in the overlay, a definition
    /// created there registers its kind for this API alone, and the real
    /// store, registry and garbage collector never see any of it. What a
    /// plan (`crate::plan`) runs the cascade over.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::store::{MemoryBackend, OverlayBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let overlay = Arc::new(OverlayBackend::new(api.backend().clone()).await?);
    /// let planning = api.over(overlay);
    /// let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    ///     "metadata": {"name": "widgets.example.com"},
    ///     "spec": {"group": "example.com", "scope": "Namespaced",
    ///         "names": {"kind": "Widget", "plural": "widgets"},
    ///         "versions": [{"name": "v1", "served": true, "storage": true,
    ///             "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    /// let crds = api.kinds().require("apiextensions.k8s.io/v1", "CustomResourceDefinition")?;
    /// planning.create(&crds, crd).await?;
    /// assert!(planning.kinds().by_kind("example.com/v1", "Widget").is_some());
    /// assert!(api.kinds().by_kind("example.com/v1", "Widget").is_none());
    /// assert_eq!(api.current_revision().await?, 0);
    /// # Ok(()) }
    /// ```
    pub fn over(&self, overlay: Arc<dyn Backend>) -> Self {
        Self {
            backend: overlay,
            kinds: self.kinds.fork(),
            dry_run: false,
            ..self.clone()
        }
    }

    /// This API in dry-run mode (Kubernetes' `dryRun=All`): every write runs
    /// its whole path — validation, defaulting, schema admission,
    /// preconditions and conflicts, finalizers and propagation, size and
    /// depth limits — and answers what the real write would answer, but
    /// nothing is stored: no revision moves, no watcher sees an event, no
    /// kind is registered or removed, no controller wakes. A created object
    /// comes back without a `resourceVersion` (it has none yet); an updated
    /// one keeps the stored version's.
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
    /// let answer = api.dry_run().create(&events, event("e")).await?;
    /// assert_eq!(answer["metadata"]["generation"], 1);
    /// assert!(answer["metadata"].get("resourceVersion").is_none());
    /// assert_eq!(api.current_revision().await?, 0, "nothing was written");
    ///
    /// api.create(&events, event("e")).await?;
    /// let again = api.dry_run().create(&events, event("e")).await;
    /// assert!(matches!(again, Err(Error::AlreadyExists { .. })), "the real write's answer");
    /// # Ok(()) }
    /// ```
    pub fn dry_run(&self) -> Self {
        if self.dry_run {
            return self.clone();
        }
        Self {
            backend: Arc::new(store::DryRunBackend::new(self.backend.clone())),
            dry_run: true,
            ..self.clone()
        }
    }

    /// Whether this API only checks writes ([`Api::dry_run`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// assert!(!api.is_dry_run() && api.dry_run().is_dry_run());
    /// # Ok(()) }
    /// ```
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The built-in `CustomResourceDefinition` kind.
    pub(crate) fn crd_kind(&self) -> Arc<KindInfo> {
        self.kinds
            .by_plural(kinds::CRD_GROUP, "customresourcedefinitions")
            .expect("built-in kind")
    }

    fn is_crd(&self, kind: &KindInfo) -> bool {
        kind.group == kinds::CRD_GROUP && kind.plural == "customresourcedefinitions"
    }

    /// The store key prefix of a kind, optionally narrowed to one namespace.
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
    /// assert_eq!(Api::prefix(&events, Some("ops")), "/registry/core/events/ops/");
    /// assert_eq!(Api::prefix(&events, None), "/registry/core/events/");
    /// # Ok(()) }
    /// ```
    pub fn prefix(kind: &KindInfo, namespace: Option<&str>) -> String {
        let group = if kind.group.is_empty() {
            "core"
        } else {
            &kind.group
        };
        match namespace.filter(|_| kind.namespaced) {
            Some(ns) => format!("/registry/{group}/{}/{ns}/", kind.plural),
            None => format!("/registry/{group}/{}/", kind.plural),
        }
    }

    /// The store key of one object.
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
    /// assert_eq!(Api::key(&events, Some("ops"), "e1"), "/registry/core/events/ops/e1");
    /// # Ok(()) }
    /// ```
    pub fn key(kind: &KindInfo, namespace: Option<&str>, name: &str) -> String {
        let mut key = Self::prefix(kind, namespace);
        key.push_str(name);
        key
    }

    /// A kind's resource as Kubernetes names it in errors: the plural, then
    /// the group (`widgets.example.dev`; `events` in the core group).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let crds = api.kinds().require("apiextensions.k8s.io/v1", "CustomResourceDefinition")?;
    /// assert_eq!(Api::resource(&crds), "customresourcedefinitions.apiextensions.k8s.io");
    /// let events = api.kinds().require("v1", "Event")?;
    /// assert_eq!(Api::resource(&events), "events");
    /// # Ok(()) }
    /// ```
    pub fn resource(kind: &KindInfo) -> String {
        if kind.group.is_empty() {
            kind.plural.clone()
        } else {
            format!("{}.{}", kind.plural, kind.group)
        }
    }

    fn not_found(kind: &KindInfo, name: &str) -> Error {
        Error::NotFound {
            kind: Api::resource(kind),
            name: name.to_owned(),
        }
    }

    fn conflict(kind: &KindInfo, name: &str, err: store::Error) -> Error {
        match err {
            store::Error::Conflict { .. } => Error::Conflict {
                kind: Api::resource(kind),
                name: name.to_owned(),
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            },
            other => Error::Store(other),
        }
    }

    /// A stored object as the API serves it (its `resourceVersion` is the
    /// key's last write); undecodable bytes are a corrupt store.
    pub(crate) fn decode(kv: &KeyValue) -> Result<Object> {
        codec::decode(&kv.value, kv.mod_revision)
            .map_err(|e| Error::Store(store::Error::Corrupt(format!("{}: {e}", kv.key))))
    }

    /// Encode an object for a write, holding it to the bounds every stored
    /// object keeps: the size limit and [`shape::MAX_DEPTH`] (so that every
    /// stored object can be read back, see `object::shape`).
    fn encode_checked(&self, object: &Object) -> Result<Vec<u8>> {
        if shape::deeper_than(object, shape::MAX_DEPTH)
            && let Some(at) = shape::too_deep_at(object, shape::MAX_DEPTH)
        {
            return Err(Error::invalid(
                meta::kind(object),
                meta::name(object),
                &at,
                format!(
                    "nested too deeply: objects may nest at most {} levels of maps and lists",
                    shape::MAX_DEPTH
                ),
            ));
        }
        let bytes = codec::encode(object);
        if bytes.len() > self.max_object_bytes {
            return Err(Error::TooLarge {
                size: bytes.len(),
                limit: self.max_object_bytes,
            });
        }
        Ok(bytes)
    }

    /// Read one object.
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
    /// api.create(&events, event("e")).await?;
    /// let e = api.get(&events, None, "e").await?; // no namespace: `default`
    /// assert_eq!(e["metadata"]["namespace"], "default");
    /// assert!(matches!(api.get(&events, Some("ops"), "e").await, Err(Error::NotFound { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn get(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Object> {
        let kv = self.get_kv(kind, namespace, name).await?;
        Self::decode(&kv)
    }

    async fn get_kv(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<KeyValue> {
        let namespace = validate::namespace_for(kind, namespace);
        self.backend
            .get(&Self::key(kind, namespace, name))
            .await?
            .ok_or_else(|| Self::not_found(kind, name))
    }

    /// The revision of the last write to the store.
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
    /// assert_eq!(api.current_revision().await?, 0);
    /// api.create(&events, event("e")).await?;
    /// assert_eq!(api.current_revision().await?, 1);
    /// # Ok(()) }
    /// ```
    pub async fn current_revision(&self) -> Result<Revision> {
        Ok(self.backend.current_revision().await?)
    }
}
