//! What a plan found, as data: the object changes with their cause, the
//! external requests, events, the steps left pending and the errors. The
//! server answers it as JSON (`-o json`), the CLI renders it for people
//! (`render`); both read the same types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The outcome of planning a change: everything that would happen, in the
/// order it was found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Objects that would be created, changed or deleted, each once, with
    /// what it looks like before and after (net of every step).
    pub changes: Vec<Change>,
    /// External writes provider plugins would send (never sent by a plan).
    pub writes: Vec<ExternalRequest>,
    /// External reads made while planning, as the real reconcile would
    /// make them.
    pub observations: Vec<ExternalRequest>,
    /// Events the reconcilers would record.
    pub events: Vec<PlannedEvent>,
    /// Steps a plan cannot take: time-based looks again, and decisions that
    /// depend on the outcome of an external write.
    pub pending: Vec<PendingStep>,
    /// What could not be planned: a malformed or refused object, a plugin
    /// that failed. Everything else is still planned.
    pub errors: Vec<PlanError>,
    /// Reconciles that kept changing what they saw, stopped after
    /// [`super::MAX_RECONCILES_PER_OBJECT`] calls.
    pub cycles: Vec<ObjectRef>,
    /// Reconciler calls made while planning.
    pub reconciles: usize,
}

impl Plan {
    /// Whether applying changes nothing at all: no object, no external
    /// write, nothing pending, no error.
    ///
    /// ```
    /// assert!(setpoint::plan::Plan::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.writes.is_empty()
            && self.pending.is_empty()
            && self.errors.is_empty()
            && self.cycles.is_empty()
    }

    /// The changes to objects of `kind`, with that action.
    ///
    /// ```
    /// use setpoint::plan::{Action, Plan};
    /// assert!(Plan::default().changes_of("Pod", Action::Create).is_empty());
    /// ```
    pub fn changes_of(&self, kind: &str, action: Action) -> Vec<&Change> {
        self.changes
            .iter()
            .filter(|c| c.object.kind == kind && c.action == action)
            .collect()
    }

    /// Leave out what the reader may not see: for every object `may_read`
    /// refuses, the plan still says what happens to it (action, cause) but
    /// not its contents, nor the bodies and answers of the external
    /// requests made for it, nor its events' messages. The server redacts
    /// each plan for the caller's rights, as a `get` of each object.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::plan::{Action, Cause, Change, ObjectRef, Plan};
    ///
    /// let object = |kind: &str| ObjectRef {
    ///     api_version: "v1".into(), kind: kind.into(),
    ///     namespace: Some("default".into()), name: "x".into(),
    /// };
    /// let change = |kind: &str| Change {
    ///     action: Action::Create, object: object(kind), cause: Cause::Request,
    ///     then: vec![], before: None, after: Some(json!({"data": "..."})), hidden: false,
    /// };
    /// let mut plan = Plan { changes: vec![change("Secret"), change("ConfigMap")], ..Plan::default() };
    /// plan.redact(|object| object.kind != "Secret");
    /// assert!(plan.changes[0].hidden && plan.changes[0].after.is_none());
    /// assert!(!plan.changes[1].hidden && plan.changes[1].after.is_some());
    /// ```
    pub fn redact(&mut self, may_read: impl Fn(&ObjectRef) -> bool) {
        for change in &mut self.changes {
            if !may_read(&change.object) {
                change.before = None;
                change.after = None;
                change.hidden = true;
            }
        }
        for request in self.writes.iter_mut().chain(&mut self.observations) {
            if !may_read(&request.object) {
                request.body = None;
                request.result = None;
                request.hidden = true;
            }
        }
        for event in &mut self.events {
            if !may_read(&event.object) {
                event.message.clear();
                event.hidden = true;
            }
        }
    }
}

/// An object, by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace of a namespaced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// What happens to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// It would be created.
    Create,
    /// Its spec or metadata would change (its status may too).
    Update,
    /// Only its status would change.
    Status,
    /// It would be deleted.
    Delete,
    /// Its deletion would start and wait for finalizers.
    Deleting,
}

impl Action {
    /// The `terraform plan`-like sign: `+`, `~`, `-`.
    pub fn sign(self) -> &'static str {
        match self {
            Action::Create => "+",
            Action::Update | Action::Status => "~",
            Action::Delete | Action::Deleting => "-",
        }
    }
}

/// Who would make a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "camelCase")]
pub enum Cause {
    /// The manifest (or the deletion) being planned.
    Request,
    /// A plugin reconciling an object.
    #[serde(rename_all = "camelCase")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// The object it reconciled.
        reconciling: ObjectRef,
    },
    /// The garbage collector (dependents of deleted owners, foreground and
    /// orphan deletions).
    GarbageCollector,
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Request => f.write_str("requested"),
            Cause::Plugin {
                plugin,
                reconciling,
            } => write!(f, "plugin {plugin} reconciling {reconciling}"),
            Cause::GarbageCollector => f.write_str("garbage collector"),
        }
    }
}

/// One object's net change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// What happens to it.
    pub action: Action,
    /// Which object.
    pub object: ObjectRef,
    /// Who changes it first.
    pub cause: Cause,
    /// Everyone else who changes it afterwards, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<Cause>,
    /// The object now (`None` for a create).
    pub before: Option<Value>,
    /// The object afterwards (`None` for a delete).
    pub after: Option<Value>,
    /// Its contents were left out: whoever asked for the plan may not read
    /// this object ([`Plan::redact`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

/// An external request, as the plugin asked for it (secrets stay
/// references; their values never enter a plan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalRequest {
    /// The plugin asking.
    pub plugin: String,
    /// The object it reconciled.
    pub object: ObjectRef,
    /// The request's id in the plugin's response.
    pub id: String,
    /// The HTTP method.
    pub method: String,
    /// The URL.
    pub url: String,
    /// The body as text, when it is UTF-8 (writes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// For a read made while planning: the status code, or the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Body and result were left out: whoever asked for the plan may not
    /// read the object it is made for ([`Plan::redact`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

impl ExternalRequest {
    /// The request `plugin` asked for while reconciling `object`, with the
    /// answer of a read made while planning.
    pub(crate) fn asked(
        plugin: &str,
        object: &ObjectRef,
        request: &crate::controller::HttpRequest,
        result: Option<String>,
    ) -> Self {
        Self {
            plugin: plugin.to_owned(),
            object: object.clone(),
            id: request.id.clone(),
            method: request.method.clone(),
            url: request.url.clone(),
            body: request
                .body
                .as_deref()
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(str::to_owned),
            result,
            hidden: false,
        }
    }
}

/// An event a reconciler would record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedEvent {
    /// The object it is about.
    pub object: ObjectRef,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub severity: String,
    /// The machine-readable reason.
    pub reason: String,
    /// The message (empty when hidden).
    pub message: String,
    /// The message was left out: whoever asked for the plan may not read
    /// the object it is about ([`Plan::redact`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

impl PlannedEvent {
    /// The event a reconcile of `object` recorded, shown instead of written.
    pub(crate) fn recorded(object: &ObjectRef, event: crate::controller::EventRecord) -> Self {
        Self {
            object: object.clone(),
            severity: event.severity.as_str().to_owned(),
            reason: event.reason,
            message: event.message,
            hidden: false,
        }
    }
}

/// A step the plan shows but does not take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingStep {
    /// The object the step is about.
    pub object: ObjectRef,
    /// The plugin that would take it.
    pub plugin: String,
    /// What waits, and for what.
    pub reason: String,
}

/// Something that could not be planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanError {
    /// The object, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectRef>,
    /// Where it came from: the manifest document, or the plugin.
    pub origin: String,
    /// Why.
    pub message: String,
}
