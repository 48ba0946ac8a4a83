//! The decisions, as pure functions with no host in sight. A kind says
//! what it is through [`Topology`] (how its spec is checked, what it reads,
//! how an observed object differs from the spec, which requests create and
//! delete it); [`decide`] then picks the [`Step`] from what was observed
//! and what the previous writes did, the same way for every kind:
//!
//! | situation | step |
//! |---|---|
//! | the broker's object is as the spec says | `InSync`: look again after `resyncSeconds` |
//! | absent | `Create` (drift: deleted behind the object's back is re-created) |
//! | differs in what can change in place | `Update` |
//! | differs in what cannot, no opt-in | `Fail(ImmutableChange)`: nothing written |
//! | differs in what cannot, `recreateOnChange` | `Recreate`: delete, then create, in one response |
//! | the last write was refused, or a refusal holds writes | `Fail` with it |
//! | the last write succeeded but the broker still differs | `Fail(NotConverging)` |
//! | being deleted, `Retain` | `Retain`: say so in an event, let the object go |
//! | being deleted, present | `Delete` |
//! | being deleted, absent (or its vhost gone) | `Release` |
//! | a read failed, or a dependency is missing | `Fail` (when deleting, the finalizer stays unless it is a missing dependency) |

use std::fmt::Debug;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use setpoint_plugin_sdk::{Ctx, Definition, Error, HttpRequest};

use crate::DeletionPolicy;
use crate::broker::Api;

/// Why the broker's object is not as the spec says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The spec cannot name anything in the broker.
    InvalidSpec(String),
    /// The broker refused the credentials (401/403).
    Unauthorized(String),
    /// No answer, or a server error (5xx).
    Unreachable(String),
    /// The host did not send the request: not granted (or not allowed).
    NotGranted(String),
    /// The broker refused a write (400, ...): its `reason` says why.
    Rejected(String),
    /// A write the broker accepted did not make it show what is wanted.
    NotConverging(String),
    /// The vhost the object lives in does not exist (yet).
    VhostMissing(String),
    /// The user a permission is for does not exist (yet).
    UserMissing(String),
    /// A binding's source exchange does not exist (yet).
    ExchangeMissing(String),
    /// A binding's destination does not exist (yet).
    DestinationMissing(String),
    /// The spec changes what the broker cannot change in place, and the
    /// object does not opt into re-creating it.
    ImmutableChange(String),
}

impl Failure {
    /// The `Ready` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::InvalidSpec(_) => "InvalidSpec",
            Failure::Unauthorized(_) => "Unauthorized",
            Failure::Unreachable(_) => "Unreachable",
            Failure::NotGranted(_) => "NotGranted",
            Failure::Rejected(_) => "Rejected",
            Failure::NotConverging(_) => "NotConverging",
            Failure::VhostMissing(_) => "VhostMissing",
            Failure::UserMissing(_) => "UserMissing",
            Failure::ExchangeMissing(_) => "ExchangeMissing",
            Failure::DestinationMissing(_) => "DestinationMissing",
            Failure::ImmutableChange(_) => "ImmutableChange",
        }
    }

    /// The condition's message.
    pub fn message(&self) -> &str {
        match self {
            Failure::InvalidSpec(m)
            | Failure::Unauthorized(m)
            | Failure::Unreachable(m)
            | Failure::NotGranted(m)
            | Failure::Rejected(m)
            | Failure::NotConverging(m)
            | Failure::VhostMissing(m)
            | Failure::UserMissing(m)
            | Failure::ExchangeMissing(m)
            | Failure::DestinationMissing(m)
            | Failure::ImmutableChange(m) => m,
        }
    }

    /// Something the object depends on does not exist yet: it may any
    /// moment (applied in the same file), so the first look again is soon.
    pub fn is_missing_dependency(&self) -> bool {
        matches!(
            self,
            Failure::VhostMissing(_)
                | Failure::UserMissing(_)
                | Failure::ExchangeMissing(_)
                | Failure::DestinationMissing(_)
        )
    }

    /// Whether trying again soon may help without anyone changing the
    /// object: then the host's backoff paces the retries.
    pub fn retry_with_backoff(&self) -> bool {
        self.is_missing_dependency()
            || matches!(
                self,
                Failure::Unauthorized(_) | Failure::Unreachable(_) | Failure::NotGranted(_)
            )
    }

    /// Whether no further write should be sent for this generation until
    /// the resync period has passed.
    pub fn holds_writes(&self) -> bool {
        matches!(self, Failure::Rejected(_) | Failure::NotConverging(_))
    }

    /// The failure a `Ready` condition reports, when it holds writes.
    pub fn held(reason: &str, message: &str) -> Option<Self> {
        match reason {
            "Rejected" => Some(Failure::Rejected(message.to_owned())),
            "NotConverging" => Some(Failure::NotConverging(message.to_owned())),
            _ => None,
        }
    }
}

/// How the broker's object differs from the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Diff {
    /// Not at all.
    Same,
    /// In what a write changes in place; says what, for messages.
    Mutable(String),
    /// In what the broker cannot change in place: the fields, each with
    /// both values (`durable (RabbitMQ: true, spec: false)`).
    Immutable(Vec<String>),
}

/// A kind of RabbitMQ object, as the shared decisions and reconcile see it.
/// A value is one object's target: its spec checked, its names resolved.
pub trait Topology: Sized {
    /// The kind's name (`Queue`).
    const KIND: &'static str;
    /// The spec.
    type Spec: DeserializeOwned;
    /// What the broker has, as the status shows it.
    type Observed: Clone + Debug + PartialEq + Serialize + DeserializeOwned;

    /// The kind's definition (schema, printer columns).
    fn definition() -> Definition;

    /// Check the spec of the object `name` and work out what it names.
    fn from_spec(name: &str, spec: &Self::Spec) -> Result<Self, Failure>;

    /// The broker.
    fn api(&self) -> &Api;

    /// How often the broker is looked at again.
    fn resync(&self) -> Duration;

    /// The object for messages: `queue "q" in vhost "/"`.
    fn describe(&self) -> String;

    /// Read what the broker has, accepting answers up to `max_age` old:
    /// `Ok(Ok(None))` when it has nothing of this name, `Ok(Err)` when the
    /// reads say why nothing can be seen (or a dependency is missing),
    /// `Err` when the round ends waiting for answers (or the host holds
    /// the reads back).
    #[allow(clippy::type_complexity)]
    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<Self::Observed>, Failure>, Error>;

    /// How the broker's object differs from the spec.
    fn diff(&self, observed: &Self::Observed) -> Diff;

    /// The write that creates (or updates) the object; id [`WRITE_ID`].
    fn put(&self) -> HttpRequest;

    /// The write that declares the object again right after deleting it
    /// (a replacement); id [`WRITE_ID`]. The same as [`Topology::put`]
    /// unless that goes through a shared path (a vhost's definitions):
    /// a replacement names the object's own URL, as `setpoint plan` shows
    /// a delete and a create of the same URL as one replacement.
    fn redeclare(&self) -> HttpRequest {
        self.put()
    }

    /// The write that deletes the observed object; id [`DELETE_ID`].
    fn delete(&self, observed: &Self::Observed) -> HttpRequest;

    /// Whether the broker's object is never changed, only replaced by the
    /// one a new spec names (a binding): while that one is created, the
    /// status keeps showing the one it replaces, so that
    /// [`Topology::superseded`] can delete it once the new one exists.
    const REPLACED_BY_SPEC: bool = false;

    /// A write that removes what the object had before and has no more
    /// (a binding whose spec now names another): `previous` is what the
    /// status showed, `current` what is in sync now.
    fn superseded(
        &self,
        previous: &Self::Observed,
        current: &Self::Observed,
    ) -> Option<HttpRequest> {
        let _ = (previous, current);
        None
    }

    /// Whether deleting the object leaves the broker's.
    fn deletion_policy(&self) -> DeletionPolicy {
        DeletionPolicy::Delete
    }

    /// Whether a change of what cannot change in place re-creates it.
    fn recreate_on_change(&self) -> bool {
        false
    }

    /// What is said of an immutable change the object does not opt into.
    fn immutable_message(&self, _observed: &Self::Observed, fields: &[String]) -> String {
        format!(
            "RabbitMQ cannot change {} of {} in place: {}; nothing was written \
             (set recreateOnChange: true to delete and re-create it)",
            if fields.len() == 1 { "this" } else { "these" },
            self.describe(),
            fields.join(", ")
        )
    }

    /// What is said when the object opts into re-creating what cannot
    /// change in place, before it is deleted.
    fn recreate_message(&self, _observed: &Self::Observed, fields: &[String]) -> String {
        format!(
            "re-creating {} (recreateOnChange): deleting it, then creating it again, as \
             RabbitMQ cannot change {} in place",
            self.describe(),
            fields.join(", ")
        )
    }

    /// What is said when the object goes and the broker's stays.
    fn retained_message(&self, observed: Option<&Self::Observed>) -> String {
        let _ = observed;
        format!(
            "{} stays in RabbitMQ (deletionPolicy Retain)",
            self.describe()
        )
    }
}

/// The id of the write that creates or updates, as the next reconcile
/// finds its outcome.
pub const WRITE_ID: &str = "write";
/// The id of the write that deletes.
pub const DELETE_ID: &str = "delete";

/// What the reconcile does.
#[derive(Clone, Debug, PartialEq)]
pub enum Step<O> {
    /// The broker has what is wanted.
    InSync(O),
    /// Absent: create it.
    Create,
    /// Differs in place: write it; says what differs.
    Update(O, String),
    /// Differs in what cannot change, and the object opts in: delete it
    /// and create it again (in that order, in one response).
    Recreate(O, Vec<String>),
    /// Being deleted and present: delete it.
    Delete(O),
    /// Being deleted and gone (or never there): let the object go.
    Release,
    /// Being deleted with `Retain`: say so, and let the object go; what
    /// was seen, or why nothing was.
    Retain(Result<Option<O>, Failure>),
    /// Report the failure; what was seen, if anything.
    Fail(Failure, Option<O>),
}

/// What the previous reconcile left that [`decide`] must know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The outcome of the previous reconcile's create or update.
    pub last_write: Option<Result<(), Failure>>,
    /// The outcome of the previous reconcile's delete.
    pub last_delete: Option<Result<(), Failure>>,
    /// A failure that holds writes reported for this generation, still
    /// within the resync period.
    pub held: Option<Failure>,
}

/// Decide what to do from the target, whether the object is being
/// finalized, what the reads showed and what the previous writes did.
pub fn decide<T: Topology>(
    target: &T,
    finalizing: bool,
    observed: Result<Option<T::Observed>, Failure>,
    memory: &Memory,
) -> Step<T::Observed> {
    if finalizing {
        if target.deletion_policy() == DeletionPolicy::Retain {
            return match observed {
                // Its vhost is gone, and it with it: nothing is retained.
                Err(failure) if failure.is_missing_dependency() => Step::Release,
                observed => Step::Retain(observed),
            };
        }
        return match observed {
            // What it lived in is gone, and it with it.
            Err(failure) if failure.is_missing_dependency() => Step::Release,
            Err(failure) => Step::Fail(failure, None),
            Ok(None) => Step::Release,
            Ok(Some(seen)) => match &memory.last_delete {
                Some(Err(failure)) => Step::Fail(failure.clone(), Some(seen)),
                _ => Step::Delete(seen),
            },
        };
    }
    let observed = match observed {
        Ok(observed) => observed,
        Err(failure) => return Step::Fail(failure, None),
    };
    let Some(seen) = observed else {
        return match guard(target, memory, None) {
            Some(failure) => Step::Fail(failure, None),
            None => Step::Create,
        };
    };
    match target.diff(&seen) {
        Diff::Same => Step::InSync(seen),
        Diff::Mutable(what) => match guard(target, memory, Some(&what)) {
            Some(failure) => Step::Fail(failure, Some(seen)),
            None => Step::Update(seen, what),
        },
        Diff::Immutable(fields) if !target.recreate_on_change() => {
            let message = target.immutable_message(&seen, &fields);
            Step::Fail(Failure::ImmutableChange(message), Some(seen))
        }
        Diff::Immutable(fields) => {
            let refused = match &memory.last_delete {
                Some(Err(failure)) => Some(failure.clone()),
                _ => memory.held.clone(),
            };
            match refused {
                Some(failure) => Step::Fail(failure, Some(seen)),
                None => Step::Recreate(seen, fields),
            }
        }
    }
}

/// Why a write must not be sent now: the last one was refused, or went
/// through without the broker showing it, or a refusal holds writes.
fn guard<T: Topology>(target: &T, memory: &Memory, differs: Option<&str>) -> Option<Failure> {
    match &memory.last_write {
        Some(Err(failure)) => return Some(failure.clone()),
        Some(Ok(())) => {
            let seen = match differs {
                None => "does not show it".to_owned(),
                Some(what) => format!("still shows {what}"),
            };
            return Some(Failure::NotConverging(format!(
                "RabbitMQ accepted the write of {} but {seen}",
                target.describe()
            )));
        }
        None => {}
    }
    memory.held.clone()
}
