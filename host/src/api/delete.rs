//! Deletion: preconditions, finalizers and the propagation policy that says
//! what happens to an object's dependents. Owns the delete request; the
//! work done afterwards on dependents is the garbage collector's (`gc`).
//!
//! # Expected Flow
//!
//! 1. A client deletes an object, optionally with `resourceVersion` and
//!    `uid` preconditions (a mismatch is a 409 Conflict) and a
//!    [`Propagation`] policy (default [`Propagation::Background`], as
//!    Kubernetes does for custom resources).
//! 2. If the object is already being deleted (`deletionTimestamp` is set),
//!    nothing changes and the object is returned as it is.
//! 3. The policy may add a finalizer of its own: `foregroundDeletion` for
//!    [`Propagation::Foreground`], `orphan` for [`Propagation::Orphan`].
//! 4. Without finalizers the object is removed now. With finalizers it gets
//!    `deletionTimestamp` (and `deletionGracePeriodSeconds: 0`) and stays,
//!    read-only as far as finalizers go: none can be added any more.
//! 5. Each finalizer's owner does its pre-delete work and removes its
//!    finalizer with an update or patch. The write that removes the last one
//!    removes the object (its watchers see `DELETED`).
//! 6. The garbage collector (`gc`) reacts to the deletion: with `Background`
//!    it deletes the dependents once the owner is gone; with `Foreground` it
//!    deletes them first and removes `foregroundDeletion` once no dependent
//!    with `blockOwnerDeletion: true` is left; with `Orphan` it removes the
//!    owner's reference from every dependent and then removes `orphan`.
//!
//! # Guarantees
//!
//! - Every step is a compare-and-swap on the revision read: a concurrent
//!   write makes the delete re-read and decide again (preconditions
//!   included), never act on a stale object.
//! - An object with finalizers is never removed while one remains, and
//!   `deletionTimestamp` is never cleared once set.
//! - The returned object is the object after the call: the last state with
//!   the deletion's `resourceVersion` when removed, the stored object with
//!   `deletionTimestamp` when pending.
//!
//! # Caveats
//!
//! - `Foreground` and `Orphan` deletions complete only while the garbage
//!   collector runs ([`crate::system::GarbageCollector`]): their finalizers are
//!   its to remove.
//! - Grace periods are not modelled: deletion is always immediate once no
//!   finalizer remains.

use serde_json::Value;

use super::write::At;
use super::{Api, Error, Result};
use crate::object::{KindInfo, Object, codec, meta, time};
use crate::store::{self, Condition};

/// The finalizer that holds an owner until its blocking dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// The finalizer that holds an owner until its dependents no longer refer to it.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// What a deletion does to the object's dependents (objects whose
/// `ownerReferences` name it).
///
/// ```
/// use setpoint::api::{DeleteOptions, Propagation};
/// let keep_dependents = DeleteOptions::default().with_propagation(Propagation::Orphan);
/// assert_eq!(keep_dependents.propagation_policy.unwrap().as_str(), "Orphan");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the owner now and the dependents afterwards, in the background.
    #[default]
    Background,
    /// Delete the dependents first; the owner goes once every dependent with
    /// `blockOwnerDeletion: true` is gone.
    Foreground,
    /// Keep the dependents, removing their references to the owner.
    Orphan,
}

impl Propagation {
    /// Parse the Kubernetes `propagationPolicy` value.
    ///
    /// ```
    /// use setpoint::api::Propagation;
    /// assert_eq!(Propagation::parse("Foreground"), Some(Propagation::Foreground));
    /// assert_eq!(Propagation::parse("foreground"), None);
    /// ```
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }

    /// The Kubernetes `propagationPolicy` value.
    ///
    /// ```
    /// use setpoint::api::Propagation;
    /// assert_eq!(Propagation::Foreground.as_str(), "Foreground");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }

    fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Background => None,
            Propagation::Foreground => Some(FOREGROUND_FINALIZER),
            Propagation::Orphan => Some(ORPHAN_FINALIZER),
        }
    }
}

/// Preconditions and policy of a delete.
///
/// ```
/// use setpoint::api::{DeleteOptions, Propagation};
/// let careful = DeleteOptions::default()
///     .with_resource_version("42")
///     .with_propagation(Propagation::Foreground);
/// assert_eq!(careful.uid, None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Delete only if the object is at this resource version.
    pub resource_version: Option<String>,
    /// Delete only if the object has this uid.
    pub uid: Option<String>,
    /// What happens to dependents; `None` is [`Propagation::Background`].
    pub propagation_policy: Option<Propagation>,
}

impl DeleteOptions {
    /// These options, with propagation policy `policy`.
    ///
    /// ```
    /// use setpoint::api::{DeleteOptions, Propagation};
    /// let options = DeleteOptions::default().with_propagation(Propagation::Orphan);
    /// assert_eq!(options.propagation_policy, Some(Propagation::Orphan));
    /// ```
    pub fn with_propagation(mut self, policy: Propagation) -> Self {
        self.propagation_policy = Some(policy);
        self
    }

    /// These options, deleting only the object at `resource_version`.
    ///
    /// ```
    /// use setpoint::api::DeleteOptions;
    /// let options = DeleteOptions::default().with_resource_version("42");
    /// assert_eq!(options.resource_version.as_deref(), Some("42"));
    /// ```
    pub fn with_resource_version(mut self, resource_version: impl Into<String>) -> Self {
        self.resource_version = Some(resource_version.into());
        self
    }

    /// These options, deleting only the object with `uid` (not a namesake
    /// created since).
    ///
    /// ```
    /// use setpoint::api::DeleteOptions;
    /// let options = DeleteOptions::default().with_uid("4c1b…");
    /// assert_eq!(options.uid.as_deref(), Some("4c1b…"));
    /// ```
    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }
}

impl Api {
    /// Delete an object following the module's flow: preconditions, then the
    /// propagation policy's finalizer, then removal now (no finalizers) or a
    /// `deletionTimestamp`. Deleting an object already being deleted changes
    /// nothing. Returns the object as it is after the call.
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
    /// use setpoint::api::DeleteOptions;
    /// api.create(&events, event("plain")).await?;
    /// let gone = api.delete(&events, None, "plain", &DeleteOptions::default()).await?;
    /// assert!(gone["metadata"].get("deletionTimestamp").is_none(), "removed at once");
    ///
    /// let mut held = event("held");
    /// held["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    /// api.create(&events, held).await?;
    /// let pending = api.delete(&events, None, "held", &DeleteOptions::default()).await?;
    /// assert!(pending["metadata"]["deletionTimestamp"].is_string(), "waits for its finalizer");
    /// # Ok(()) }
    /// ```
    pub async fn delete(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Object> {
        loop {
            let kv = self.get_kv(kind, namespace, name).await?;
            let current = Self::decode(&kv)?;
            check_preconditions(kind, name, options, &current)?;
            if meta::deletion_timestamp(&current).is_some() {
                return Ok(current);
            }
            let mut finalizers: Vec<String> = meta::finalizers(&current)
                .into_iter()
                .map(str::to_owned)
                .collect();
            let policy = options.propagation_policy.unwrap_or_default();
            if let Some(extra) = policy.finalizer()
                && !finalizers.iter().any(|f| f == extra)
            {
                finalizers.push(extra.to_owned());
            }
            if finalizers.is_empty() {
                match self.remove_stored(kind, At::from(&kv), current).await {
                    Err(Error::Conflict { .. }) => continue,
                    other => return other,
                }
            }
            let mut next = current;
            {
                let m = meta::metadata_mut(&mut next);
                m.insert(
                    "deletionTimestamp".into(),
                    Value::String(time::now_rfc3339()),
                );
                m.insert("deletionGracePeriodSeconds".into(), Value::from(0));
                m.insert("finalizers".into(), Value::from(finalizers));
            }
            // Not held to the write limits: marking an object for deletion
            // adds a few fields, and deleting must stay possible for an
            // object stored before a limit was tightened.
            let bytes = codec::encode(&next);
            match self
                .backend
                .put(&kv.key, bytes, Condition::ModRevision(kv.mod_revision))
                .await
            {
                Ok(kv) => return Self::decode(&kv),
                Err(store::Error::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn check_preconditions(
    kind: &KindInfo,
    name: &str,
    options: &DeleteOptions,
    current: &Object,
) -> Result<()> {
    let failed = |message: String| Error::Conflict {
        kind: Api::resource(kind),
        name: name.to_owned(),
        message,
    };
    if let Some(rv) = &options.resource_version
        && Some(rv.as_str()) != meta::resource_version(current)
    {
        return Err(failed(format!(
            "precondition failed: resourceVersion {rv}, stored {}",
            meta::resource_version(current).unwrap_or("")
        )));
    }
    if let Some(uid) = &options.uid
        && uid != meta::uid(current)
    {
        return Err(failed(format!(
            "precondition failed: uid {uid}, stored {}",
            meta::uid(current)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_from_and_print_as_their_kubernetes_names() {
        for policy in [
            Propagation::Background,
            Propagation::Foreground,
            Propagation::Orphan,
        ] {
            assert_eq!(Propagation::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(Propagation::default(), Propagation::Background);
        assert_eq!(Propagation::parse("Cascade"), None);
        assert_eq!(
            Propagation::Foreground.finalizer(),
            Some("foregroundDeletion")
        );
        assert_eq!(Propagation::Orphan.finalizer(), Some("orphan"));
        assert_eq!(Propagation::Background.finalizer(), None);
    }
}
