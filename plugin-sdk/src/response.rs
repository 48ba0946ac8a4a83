//! What a reconcile returns: the desired children, the new status, events,
//! when to look again, and whether pre-delete work is done.

use std::time::Duration;

use crate::{DynamicObject, HttpRequest};

/// The outcome of one successful reconcile, built with chained calls:
///
/// ```
/// # use setpoint_plugin_sdk::{Event, Response};
/// # use std::time::Duration;
/// let response = Response::new()
///     .status(serde_json::json!({"phase": "Pending"}))
///     .event(Event::normal("Scheduled", "Assigned to a simulated node"))
///     .requeue_after(Duration::from_secs(1));
/// assert_eq!(response.requeue_after, Some(Duration::from_secs(1)));
/// ```
///
/// An empty response (`Response::new()`) changes nothing: children are left
/// as they are, status is untouched, and the object is looked at again only
/// when something changes.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Response<Status> {
    /// The full desired set of owned children, or `None` to leave children
    /// untouched. The host diffs this set against the children that exist:
    /// it creates what is missing, updates what differs, deletes owned
    /// children that are not in the set, and sets namespace and owner
    /// references itself.
    pub children: Option<Vec<DynamicObject>>,
    /// The new status, sent as a JSON merge patch (RFC 7386) of `.status`:
    /// fields it sets replace the stored ones, fields that serialise as
    /// `null` are removed, and fields it leaves out (an `Option` skipped
    /// when `None`, fields the type does not know) are *kept*. To remove
    /// one of those, name it in [`Response::clear_status`]. `None` leaves
    /// the status untouched.
    pub status: Option<Status>,
    /// Top-level status fields to remove, sent as `null` in the merge
    /// patch (see [`Response::clear_status`]).
    pub cleared: Vec<String>,
    /// Events to record on the object.
    pub events: Vec<Event>,
    /// Look at the object again after this long (rounded up to whole
    /// milliseconds), even if nothing changes.
    pub requeue_after: Option<Duration>,
    /// Pre-delete work is done: the host may remove the plugin's finalizer.
    pub remove_finalizer: bool,
    /// External writes, performed by the host after the rest of the
    /// response is applied, in order; the first that fails stops the rest.
    /// The next reconcile sees their outcomes in
    /// [`Ctx::outcomes`](crate::Ctx::outcomes). Build them to be idempotent:
    /// the host adds an `Idempotency-Key` header made of the object's uid,
    /// generation and the request's id.
    pub effects: Vec<HttpRequest>,
    /// Reads wanted besides those [`Ctx::fetch`](crate::Ctx::fetch) asked
    /// for; if any has no answer yet, the host fetches it and calls again.
    pub observe: Vec<HttpRequest>,
}

impl<Status> Response<Status> {
    /// A response that changes nothing.
    pub fn new() -> Self {
        Self {
            children: None,
            status: None,
            cleared: Vec::new(),
            events: Vec::new(),
            requeue_after: None,
            remove_finalizer: false,
            effects: Vec::new(),
            observe: Vec::new(),
        }
    }

    /// Adds an external write, performed after the response is applied.
    pub fn effect(mut self, request: HttpRequest) -> Self {
        self.effects.push(request);
        self
    }

    /// Asks the host for a read (see [`Response::observe`]).
    pub fn observe(mut self, request: HttpRequest) -> Self {
        self.observe.push(request);
        self
    }

    /// Sets the full desired set of owned children.
    pub fn children(mut self, children: Vec<DynamicObject>) -> Self {
        self.children = Some(children);
        self
    }

    /// Sets the new status, a merge patch of the stored one (see
    /// [`Response::status`](Response#structfield.status)).
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Removes the top-level status field `field` (as the status types
    /// name it, `lastError`), whatever [`Response::status`] says of it.
    ///
    /// The status is a merge patch, so a field the new status leaves out is
    /// kept: an `Option` skipped when `None` cannot clear itself. Name it
    /// here instead:
    ///
    /// ```
    /// # use setpoint_plugin_sdk::Response;
    /// # #[derive(serde::Serialize)]
    /// # struct Status { #[serde(skip_serializing_if = "Option::is_none")] last_error: Option<String> }
    /// let status = Status { last_error: None };
    /// let response = Response::new().status(status).clear_status("lastError");
    /// assert_eq!(response.cleared, ["lastError"]);
    /// ```
    pub fn clear_status(mut self, field: impl Into<String>) -> Self {
        self.cleared.push(field.into());
        self
    }

    /// Adds an event.
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Adds several events.
    pub fn events(mut self, events: impl IntoIterator<Item = Event>) -> Self {
        self.events.extend(events);
        self
    }

    /// Asks to be called again after `delay`.
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// Says pre-delete work is done, so the host may remove the finalizer.
    pub fn remove_finalizer(mut self) -> Self {
        self.remove_finalizer = true;
        self
    }
}

impl<Status> Default for Response<Status> {
    fn default() -> Self {
        Self::new()
    }
}

/// How noteworthy an [`Event`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Routine progress.
    Normal,
    /// Something needs attention.
    Warning,
}

/// An event recorded on the reconciled object. The host records
/// `SuccessfulCreate` / `SuccessfulDelete` itself for each child it creates
/// or deletes from [`Response::children`]: a plugin need not predict them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or warning.
    pub severity: Severity,
    /// A short UpperCamelCase machine-readable reason, e.g. `"ScalingReplicaSet"`.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
}

impl Event {
    /// A normal event.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A warning event.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }
}
