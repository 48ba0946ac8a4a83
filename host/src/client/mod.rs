//! The typed client handle for programs that embed a host: reads, writes
//! and watches through the host's own object API, in process (no HTTP, no
//! serialisation to text). Owns how an embedding program names kinds,
//! namespaces and its own types; what a write means stays `api`'s, and the
//! order and lag rules of a watch stay `watch`'s.
//!
//! A [`Client`] (from [`Host::client`](crate::Host::client), or
//! [`Client::new`] over any [`Api`]) hands out [`Resource`] handles, one per
//! kind, in the spirit of kube-rs' `Api<K>`:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use serde_json::json;
//! use setpoint::controller::Native;
//!
//! let host = setpoint::Host::builder().in_memory().build().await?;
//! // The replicaset example reconciler, compiled in: it creates the Pods.
//! host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler))).await?;
//!
//! let client = host.client().with_field_manager("my-program");
//! let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet").namespace("default");
//! sets.apply(&json!({
//!     "metadata": {"name": "web"},
//!     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
//!              "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}},
//! }))
//! .await?;
//! let web = tokio::time::timeout(
//!     Duration::from_secs(30),
//!     sets.wait_until("web", |rs| rs["status"]["replicas"] == 2),
//! )
//! .await??;
//! println!("{}", web["status"]);
//! host.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Rules
//!
//! - A handle names its kind by `apiVersion` and `kind`, resolved at each
//!   call, so a handle made before a plugin registers its kind works once it
//!   has; until then calls fail with [`Error::UnknownKind`].
//! - A handle is for one namespace (`default` unless
//!   [`Resource::namespace`] says otherwise) or for all of them
//!   ([`Resource::all_namespaces`]); namespaces mean nothing to
//!   cluster-scoped kinds. Objects written through a namespaced handle get
//!   its namespace when they name none, and are refused
//!   ([`Error::NamespaceMismatch`]) when they name another.
//! - Objects written through a handle get its `apiVersion` and `kind` when
//!   they lack them, so partial objects (as for apply) may leave them out.
//! - A handle's type `T` is [`Object`] (JSON) unless [`Resource::typed`]
//!   chooses another: anything serde can read an object into, such as the
//!   plugin SDK's `Object<Spec, Status>`, the types a reconciler uses.

mod error;
mod read;
mod watch;
mod write;

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use error::{Error, Result};
pub use watch::{WatchEvent, WatchStream};

use crate::api::{self, Api};
use crate::object::patch::JsonPatch;
use crate::object::{KindInfo, Object, meta};
use crate::store::Revision;

/// The field manager server-side apply records for a [`Client`] that was not
/// given one ([`Client::with_field_manager`]).
pub const DEFAULT_FIELD_MANAGER: &str = "setpoint-client";

/// The namespace of a new [`Resource`] handle, as in kubectl.
pub const DEFAULT_NAMESPACE: &str = "default";

/// An in-process client of one host's objects. Cheap to clone; every clone
/// and every [`Resource`] made from it share the host's store.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let host = setpoint::Host::builder().in_memory().build().await?;
/// let client = host.client();
/// let events = client.resource("v1", "Event");
/// assert!(events.list(&Default::default()).await?.items.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    api: Api,
    field_manager: Arc<str>,
}

impl Client {
    /// A client over `api` (a host's is [`Host::client`](crate::Host::client)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use setpoint::{Client, api::Api, store::MemoryBackend};
    ///
    /// let client = Client::new(Api::open(Arc::new(MemoryBackend::new())).await?);
    /// assert_eq!(client.field_manager(), "setpoint-client");
    /// # Ok(()) }
    /// ```
    pub fn new(api: Api) -> Self {
        Self {
            api,
            field_manager: Arc::from(DEFAULT_FIELD_MANAGER),
        }
    }

    /// This client, applying as `manager` ([`Resource::apply`] records the
    /// fields each manager set and refuses to change another manager's).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// let client = client.with_field_manager("billing-sync");
    /// assert_eq!(client.field_manager(), "billing-sync");
    /// # Ok(()) }
    /// ```
    pub fn with_field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Arc::from(manager.into());
        self
    }

    /// The field manager apply records.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// The object API underneath, for what the client does not cover.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// A handle on the objects of one kind, in namespace `default` (see
    /// [`Resource::namespace`]), as JSON (see [`Resource::typed`]). The kind
    /// need not be registered yet.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// let pods = client.resource("demo.setpoint.dev/v1", "Pod").namespace("team-a");
    /// assert_eq!(pods.namespace_name(), Some("team-a"));
    /// assert_eq!(pods.kind_info()?.plural, "pods");
    /// # Ok(()) }
    /// ```
    pub fn resource(&self, api_version: impl Into<String>, kind: impl Into<String>) -> Resource {
        Resource {
            api: self.api.clone(),
            field_manager: self.field_manager.clone(),
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some(DEFAULT_NAMESPACE.to_owned()),
            _type: PhantomData,
        }
    }

    /// Server-side apply a whole manifest, whatever its kind (read from its
    /// `apiVersion` and `kind`), in the namespace it names (`default` if
    /// none): what `kubectl apply -f` does with one document.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// let manifest: serde_json::Value = serde_json::from_str(
    ///     r#"{"apiVersion": "v1", "kind": "Event", "metadata": {"name": "hello"}, "reason": "Hi"}"#,
    /// )?;
    /// let applied = client.apply(&manifest).await?;
    /// assert_eq!(applied["metadata"]["namespace"], "default");
    /// # Ok(()) }
    /// ```
    pub async fn apply(&self, manifest: &impl Serialize) -> Result<Object> {
        let manifest = encode(manifest)?;
        let (api_version, kind) = (meta::api_version(&manifest), meta::kind(&manifest));
        if api_version.is_empty() || kind.is_empty() {
            return Err(Error::Encode(
                "a manifest must name its apiVersion and kind".into(),
            ));
        }
        self.resource(api_version, kind)
            .all_namespaces()
            .apply(&manifest)
            .await
    }

    /// The revision of the last write to the store: a watch from here sees
    /// every later change.
    pub async fn current_revision(&self) -> Result<Revision> {
        self.api.current_revision().await.map_err(Error::Api)
    }
}

/// A handle on the objects of one kind in one namespace (or all), read and
/// written as `T`; from [`Client::resource`]. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
/// # let client = setpoint::Client::new(api);
/// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
/// #     client.apply(&crd).await?;
/// # }
/// use serde_json::json;
/// use setpoint::api::ListOptions;
///
/// let events = client.resource("v1", "Event").namespace("ops");
/// events.create(&json!({"metadata": {"name": "e1", "labels": {"app": "web"}}})).await?;
/// let web = events.list(&ListOptions::default().with_label_selector("app=web")).await?;
/// assert_eq!(web.items.len(), 1);
/// events.delete("e1").await?;
/// assert!(events.get_opt("e1").await?.is_none());
/// # Ok(()) }
/// ```
pub struct Resource<T = Object> {
    api: Api,
    field_manager: Arc<str>,
    api_version: String,
    kind: String,
    /// `None`: every namespace.
    namespace: Option<String>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Resource<T> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            field_manager: self.field_manager.clone(),
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Resource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("api_version", &self.api_version)
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

/// One page of a [`Resource::list`].
#[derive(Debug, Clone, PartialEq)]
pub struct List<T> {
    /// The objects, ordered by namespace then name.
    pub items: Vec<T>,
    /// The store revision the list reflects: watch from here to follow on.
    pub resource_version: Revision,
    /// Pass as [`ListOptions::continue_token`](crate::api::ListOptions::continue_token) for the next page, if any.
    pub continue_token: Option<String>,
}

/// What a delete did.
///
/// ```
/// use setpoint::client::Deletion;
///
/// let pending = Deletion::Pending(serde_json::json!({"metadata": {"finalizers": ["x"]}}));
/// assert!(!pending.is_removed());
/// assert_eq!(pending.into_object()["metadata"]["finalizers"][0], "x");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Deletion<T> {
    /// The object is gone; this is its last state.
    Removed(T),
    /// The object has finalizers: it is marked for deletion
    /// (`deletionTimestamp`) and goes once they are removed.
    Pending(T),
}

impl<T> Deletion<T> {
    /// Whether the object is gone already.
    pub fn is_removed(&self) -> bool {
        matches!(self, Deletion::Removed(_))
    }

    /// The object, removed or pending.
    pub fn into_object(self) -> T {
        match self {
            Deletion::Removed(o) | Deletion::Pending(o) => o,
        }
    }
}

/// A patch for [`Resource::patch`] and [`Resource::patch_status`].
///
/// Both kinds re-read and retry on a conflict with a concurrent writer,
/// unless the patch pins `metadata.resourceVersion`; then the conflict is
/// the answer ([`Error::Conflict`]).
///
/// ```
/// use serde_json::json;
/// use setpoint::client::Patch;
///
/// let merge = Patch::Merge(json!({"spec": {"replicas": 3}}));
/// let json = Patch::json(&json!([{"op": "replace", "path": "/spec/replicas", "value": 3}])).unwrap();
/// assert!(Patch::json(&json!({"op": "replace"})).is_err(), "a JSON patch is a list");
/// # let _ = (merge, json);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// A JSON merge patch (RFC 7386): objects merge, `null` removes, anything
    /// else replaces.
    Merge(Value),
    /// A JSON patch (RFC 6902): a list of operations, all or nothing.
    Json(JsonPatch),
}

impl Patch {
    /// A JSON patch from its JSON form (a list of operations).
    pub fn json(operations: &Value) -> Result<Self> {
        JsonPatch::from_value(operations)
            .map(Patch::Json)
            .map_err(|e| Error::Api(api::Error::BadRequest(e.to_string())))
    }
}

impl<T> Resource<T> {
    /// This handle, for namespace `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// This handle, for every namespace: lists and watches span them all,
    /// and objects are written to the namespace they name. Calls that name
    /// one object by name alone need a namespace ([`Error::NamespaceRequired`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// use serde_json::json;
    ///
    /// let events = client.resource("v1", "Event");
    /// events.clone().namespace("a").create(&json!({"metadata": {"name": "e"}})).await?;
    /// events.clone().namespace("b").create(&json!({"metadata": {"name": "e"}})).await?;
    /// let everywhere = events.all_namespaces();
    /// assert_eq!(everywhere.list(&Default::default()).await?.items.len(), 2);
    /// assert!(everywhere.get("e").await.is_err(), "which namespace?");
    /// # Ok(()) }
    /// ```
    pub fn all_namespaces(mut self) -> Self {
        self.namespace = None;
        self
    }

    /// The handle's namespace (`None`: every namespace).
    pub fn namespace_name(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// This handle, reading and writing `U` instead: any type serde can read
    /// an object into and write it from.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// # let web = serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
    /// #     "metadata": {"name": "web"},
    /// #     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    /// #              "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
    /// # client.apply(&web).await?;
    /// use replicaset::{ReplicaSetSpec, ReplicaSetStatus};
    /// use setpoint_plugin_sdk::Object;
    ///
    /// // The types the replicaset reconciler itself reads.
    /// let sets = client
    ///     .resource("demo.setpoint.dev/v1", "ReplicaSet")
    ///     .typed::<Object<ReplicaSetSpec, ReplicaSetStatus>>();
    /// let web = sets.get("web").await?;
    /// assert_eq!(web.spec.replicas, 2);
    /// println!("{} of {} ready", web.status.ready_replicas, web.spec.replicas);
    /// # Ok(()) }
    /// ```
    pub fn typed<U>(self) -> Resource<U> {
        Resource {
            api: self.api,
            field_manager: self.field_manager,
            api_version: self.api_version,
            kind: self.kind,
            namespace: self.namespace,
            _type: PhantomData,
        }
    }

    /// What the host knows about the kind (plural, scope, schema), or
    /// [`Error::UnknownKind`] while nothing registers it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// let info = client.resource("v1", "Event").kind_info()?;
    /// assert_eq!(info.plural, "events");
    /// assert!(info.namespaced);
    /// let unknown = client.resource("example.com/v1", "Nothing").kind_info().unwrap_err();
    /// assert!(matches!(unknown, setpoint::client::Error::UnknownKind { .. }));
    /// # Ok(()) }
    /// ```
    pub fn kind_info(&self) -> Result<Arc<KindInfo>> {
        self.api
            .kinds()
            .by_kind(&self.api_version, &self.kind)
            .ok_or_else(|| Error::UnknownKind {
                api_version: self.api_version.clone(),
                kind: self.kind.clone(),
            })
    }

    /// The namespace a call on the object `name` addresses.
    fn namespace_of(&self, info: &KindInfo, name: &str) -> Result<Option<&str>> {
        if !info.namespaced {
            return Ok(None);
        }
        match self.namespace.as_deref() {
            Some(ns) => Ok(Some(ns)),
            None => Err(Error::NamespaceRequired {
                kind: self.kind.clone(),
                name: name.to_owned(),
            }),
        }
    }

    fn err(&self, info: &KindInfo, namespace: Option<&str>, err: api::Error) -> Error {
        Error::from_api(err, &self.kind, namespace.filter(|_| info.namespaced))
    }

    /// `value` made ready to write through this handle: a JSON object with
    /// the handle's kind and (when it has one) namespace.
    fn prepare(&self, info: &KindInfo, value: &impl Serialize) -> Result<Object> {
        let mut object = encode(value)?;
        let Some(map) = object.as_object_mut() else {
            return Err(Error::Encode(format!(
                "a {} must be a JSON object",
                self.kind
            )));
        };
        for (field, want) in [("apiVersion", &self.api_version), ("kind", &self.kind)] {
            if map.get(field).is_none_or(Value::is_null) {
                map.insert(field.into(), Value::String(want.clone()));
            }
        }
        let found = |field: &str| map.get(field).and_then(Value::as_str);
        if found("apiVersion") != Some(&self.api_version) || found("kind") != Some(&self.kind) {
            return Err(Error::KindMismatch {
                expected: format!("{}/{}", self.api_version, self.kind),
                found: format!(
                    "{}/{}",
                    found("apiVersion").unwrap_or("?"),
                    found("kind").unwrap_or("?")
                ),
            });
        }
        if info.namespaced
            && let Some(expected) = &self.namespace
        {
            match meta::namespace(&object) {
                None => {
                    meta::metadata_mut(&mut object)
                        .insert("namespace".into(), Value::String(expected.clone()));
                }
                Some(found) if found == expected => {}
                Some(found) => {
                    return Err(Error::NamespaceMismatch {
                        kind: self.kind.clone(),
                        name: meta::name(&object).to_owned(),
                        expected: expected.clone(),
                        found: found.to_owned(),
                    });
                }
            }
        }
        Ok(object)
    }
}

fn encode(value: &impl Serialize) -> Result<Object> {
    serde_json::to_value(value).map_err(|e| Error::Encode(e.to_string()))
}

#[cfg(test)]
mod tests;
