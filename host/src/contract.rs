//! The reconcile contract: the `Reconciler` trait the controller loop
//! drives, and the request and response types that cross it, external
//! requests and their answers included. Wasm plugins implement it through
//! `runtime`; embedders and tests can implement it natively.
//!
//! It sits below every part that speaks it: `egress` performs the
//! requests a response asks for, `controller` drives reconcilers and
//! `plan` runs them over an overlay; none of those imports another for
//! these types. `setpoint::controller` re-exports them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::object::{KindRef, Object};

/// An external HTTP request a reconciler asks the host to make (see
/// `crate::egress`); the SDK's type, shared so a native reconciler needs
/// no conversion.
pub use setpoint_plugin_sdk::{
    HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpResult, SecretKeyRef, SecretTarget,
    SecretUse,
};

/// The answer to one request, by the request's id.
pub type Answer = (String, HttpResult);

/// What a reconciler is and what it may touch.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Unique name, e.g. `replicaset`.
    pub name: String,
    /// The reconciler's own version.
    pub version: String,
    /// The one kind it reconciles.
    pub reconciles: KindRef,
    /// Child kinds it owns; their changes requeue the owner.
    pub owns: Vec<KindRef>,
    /// CustomResourceDefinitions it brings.
    pub definitions: Vec<Value>,
    /// A finalizer the host manages for it.
    pub finalizer: Option<String>,
    /// External destinations it talks to (`scheme://host:port` patterns),
    /// subject to the operator's grant.
    pub destinations: Vec<String>,
    /// Secrets its requests name (`name` or `name/key` patterns), subject
    /// to the operator's grant.
    pub secrets: Vec<String>,
}

impl Manifest {
    /// A manifest that reconciles `reconciles` and declares nothing else:
    /// no children, definitions, finalizer, destinations or secrets. Set
    /// the public fields for more; building it this way keeps compiling
    /// when a later version adds a field.
    ///
    /// ```
    /// use setpoint::controller::Manifest;
    /// use setpoint::object::KindRef;
    ///
    /// let mut manifest = Manifest::new("copier", "1.0.0", KindRef::new("example.dev/v1", "Copy"));
    /// manifest.finalizer = Some("example.dev/cleanup".into());
    /// assert!(manifest.owns.is_empty() && manifest.destinations.is_empty());
    /// ```
    pub fn new(name: impl Into<String>, version: impl Into<String>, reconciles: KindRef) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            reconciles,
            owns: Vec::new(),
            definitions: Vec::new(),
            finalizer: None,
            destinations: Vec::new(),
            secrets: Vec::new(),
        }
    }
}

/// One reconcile call: the whole current object and its owned children.
#[derive(Debug, Clone)]
pub struct Request {
    /// The object, as cached.
    pub object: Arc<Object>,
    /// Every cached child whose owner references name the object.
    pub owned: Vec<Arc<Object>>,
    /// Deletion has started and the object still carries the finalizer.
    pub finalizing: bool,
    /// The host's clock, milliseconds since the Unix epoch.
    pub now_unix_ms: u64,
    /// Answers to the reads of earlier rounds of this reconcile.
    pub observations: Vec<Answer>,
    /// Outcomes of the previous reconcile's writes, in order.
    pub outcomes: Vec<Answer>,
    /// Which round of this reconcile the call is (0 first).
    pub round: u32,
}

impl Request {
    /// The first call's request about `object`, made now: no observations
    /// yet, and the outcomes of the writes of the key's last reconcile.
    pub(crate) fn first(
        object: Arc<Object>,
        owned: Vec<Arc<Object>>,
        finalizing: bool,
        outcomes: Vec<Answer>,
    ) -> Self {
        Self {
            object,
            owned,
            finalizing,
            now_unix_ms: crate::object::time::now_unix_ms(),
            observations: Vec::new(),
            outcomes,
            round: 0,
        }
    }
}

/// How important an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Routine.
    Normal,
    /// Something a user should look at.
    Warning,
}

impl Severity {
    /// The Kubernetes `Event.type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        }
    }
}

/// An event to record on the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Normal or warning.
    pub severity: Severity,
    /// Machine-readable reason, e.g. `ScalingReplicaSet` (`SuccessfulCreate`
    /// and `SuccessfulDelete` for children are the host's own).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// What a reconciler wants.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    /// The full desired set of owned children; `None` leaves them alone.
    pub children: Option<Vec<Object>>,
    /// A JSON merge patch for `.status`.
    pub status: Option<Value>,
    /// Events to record.
    pub events: Vec<EventRecord>,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
    /// Pre-delete work is done; remove the finalizer.
    pub remove_finalizer: bool,
    /// Reads wanted: if any lacks an answer in the request's observations,
    /// the rest of the response is not applied; the host performs them
    /// and calls again.
    pub observe: Vec<HttpRequest>,
    /// Writes wanted, performed in order after the response is applied.
    pub effects: Vec<HttpRequest>,
}

/// Why a reconcile failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// Retry with backoff.
    #[error("{0}")]
    Transient(String),
    /// Do not retry until the object changes.
    #[error("{0}")]
    Permanent(String),
}

/// Read-only access to the host's caches during a reconcile.
pub trait CacheView: Send + Sync {
    /// One object, if known.
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Object>>;
    /// Objects of a kind, optionally in one namespace and matching a label selector.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Arc<Object>>, String>;
}

/// Drives one kind towards its desired state.
///
/// Implementations must be stateless between calls: whatever must be
/// remembered lives in the object's status.
pub trait Reconciler: Send + Sync + 'static {
    /// What this reconciler is and may touch.
    fn manifest(&self) -> &Manifest;

    /// Reconcile one object. Called off the async threads, on one of the
    /// host's reconcile threads or, when all are busy, on a tokio blocking
    /// thread; either way inside the host's tokio runtime (see
    /// [`Reconciler::runs_inline`] for the exception). Must not block on
    /// I/O: return
    /// `requeue_after` instead of waiting.
    fn reconcile(
        &self,
        request: &Request,
        cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError>;

    /// What a controller's checkpoint is tied to (see
    /// [`Checkpoint`](crate::controller::Checkpoint)): a restart resumes
    /// from a checkpoint taken with the same identity, and reconciles every
    /// object again otherwise, as new logic may want other results. Wasm
    /// plugins answer their name and the sha256 of their bytes; the default
    /// is the manifest's name and version, so a native reconciler whose
    /// logic changes should change its version.
    ///
    /// ```
    /// use setpoint::controller::{Manifest, Reconciler, from_fn};
    /// use setpoint::object::KindRef;
    ///
    /// let manifest = Manifest::new("widgets", "1.2.0", KindRef::new("example.com/v1", "Widget"));
    /// let reconciler = from_fn(manifest, |_, _| Ok(Default::default()));
    /// assert_eq!(reconciler.identity(), "widgets@1.2.0");
    /// ```
    fn identity(&self) -> String {
        let manifest = self.manifest();
        format!("{}@{}", manifest.name, manifest.version)
    }

    /// Whether [`Reconciler::reconcile`] always returns within microseconds,
    /// so that it may run on the async task that took the key instead of on
    /// a reconcile thread (which costs a hand-off there and back, often a
    /// thread wake-up each way, more than a small reconcile itself). Such a reconciler's
    /// cache view answers only from informers (the kinds it reconciles and
    /// owns): a read of any other kind finds nothing, since it would have to
    /// wait for the store.
    ///
    /// Defaults to `false`. Wasm plugins never run inline: an untrusted
    /// plugin may compute until its deadline.
    fn runs_inline(&self) -> bool {
        false
    }
}
