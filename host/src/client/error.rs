//! `client::Error`: what a [`Client`](super::Client) call can fail with, one
//! variant per case an embedding program handles differently (retry on a
//! conflict, create on not-found, relist on expired), named in the terms of
//! the handle the call went through (its kind and namespace).

use crate::api::{self, Cause, FieldConflict};
use crate::object::patch::PatchError;
use crate::store::{self, Revision};
use crate::watch;

/// Result alias for client calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a client call failed.
///
/// ```
/// use setpoint::client::Error;
///
/// let err = Error::NotFound {
///     kind: "Widget".into(),
///     namespace: Some("default".into()),
///     name: "w".into(),
/// };
/// assert!(err.is_not_found());
/// assert_eq!(err.to_string(), "Widget default/w not found");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No built-in kind or CustomResourceDefinition registers this kind.
    #[error("unknown kind {api_version}/{kind}: no CustomResourceDefinition registers it")]
    UnknownKind {
        /// The `apiVersion` asked for.
        api_version: String,
        /// The kind asked for.
        kind: String,
    },
    /// The object does not exist.
    #[error("{kind} {} not found", display_key(namespace, name))]
    NotFound {
        /// The kind.
        kind: String,
        /// The namespace looked in (`None` for cluster-scoped kinds).
        namespace: Option<String>,
        /// The object's name.
        name: String,
    },
    /// A create of an object that exists.
    #[error("{kind} {} already exists", display_key(namespace, name))]
    AlreadyExists {
        /// The kind.
        kind: String,
        /// The namespace (`None` for cluster-scoped kinds).
        namespace: Option<String>,
        /// The object's name.
        name: String,
    },
    /// Optimistic concurrency: the object changed since the `resourceVersion`
    /// (or `uid`) the call named. Read it again and retry.
    #[error("conflict on {kind} {name:?}: {message}")]
    Conflict {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// What did not match.
        message: String,
    },
    /// Server-side apply would change fields another field manager owns;
    /// [`Resource::force_apply`](super::Resource::force_apply) takes them over.
    #[error(
        "apply of {kind} {name:?} conflicts with {}",
        conflicts.iter().map(|c| format!("{:?} on {}", c.manager, c.field)).collect::<Vec<_>>().join(", ")
    )]
    ApplyConflict {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Every conflicting field with its owner.
        conflicts: Vec<FieldConflict>,
    },
    /// The object breaks the rules of its kind (schema, name, metadata).
    #[error("{kind} {name:?} is invalid: {}", causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The kind.
        kind: String,
        /// The object's name (may be empty).
        name: String,
        /// Every invalid field.
        causes: Vec<Cause>,
    },
    /// The revision asked for is no longer available: a `continue` token or
    /// a watch start older than the last compaction, or a watch that fell
    /// too far behind. List again and watch from the list's revision.
    #[error("resource version {requested} is too old (oldest available {oldest}); list again")]
    Expired {
        /// The revision asked for (or the last one delivered).
        requested: Revision,
        /// The oldest revision still available.
        oldest: Revision,
    },
    /// The object names another namespace than the handle it was written
    /// through (or than the list options).
    #[error(
        "{kind} {name:?} is in namespace {found:?}, but the handle is for namespace {expected:?}"
    )]
    NamespaceMismatch {
        /// The kind.
        kind: String,
        /// The object's name (empty for a list).
        name: String,
        /// The handle's namespace.
        expected: String,
        /// The object's (or the options') namespace.
        found: String,
    },
    /// A call that names one object of a namespaced kind, through a handle
    /// for every namespace ([`Resource::all_namespaces`](super::Resource::all_namespaces)).
    #[error("{kind} is namespaced: pick a namespace with .namespace(..) to address {name:?}")]
    NamespaceRequired {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// The object's `apiVersion` or `kind` is not the handle's.
    #[error("the object is a {found}, but the handle is for {expected}")]
    KindMismatch {
        /// The handle's `apiVersion/kind`.
        expected: String,
        /// The object's `apiVersion/kind`.
        found: String,
    },
    /// A JSON patch that cannot be applied to the object (a path that does
    /// not exist, a failed `test`); nothing was written.
    #[error("{kind} {name:?}: the JSON patch cannot be applied: {source}")]
    PatchFailed {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The operation that failed and why.
        source: Box<PatchError>,
    },
    /// The value given could not be turned into JSON, or is not a JSON object.
    #[error("cannot encode the object: {0}")]
    Encode(String),
    /// A stored object does not fit the handle's type.
    #[error("cannot decode {kind} {name:?} into the handle's type: {source}")]
    Decode {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// What did not fit.
        source: serde_json::Error,
    },
    /// The watch hub stopped (the store was closed).
    #[error("the watch ended: the store's watch hub is closed")]
    WatchClosed,
    /// Any other failure of the object API: a bad request (a malformed
    /// selector or patch), an object over the size limit, or the store
    /// failing.
    #[error(transparent)]
    Api(api::Error),
}

fn display_key(namespace: &Option<String>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

impl Error {
    /// Whether the object does not exist.
    ///
    /// ```
    /// # use setpoint::client::Error;
    /// assert!(!Error::WatchClosed.is_not_found());
    /// ```
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether the write lost a race ([`Error::Conflict`] or
    /// [`Error::ApplyConflict`]); reading again and retrying is the cure.
    ///
    /// ```
    /// # use setpoint::client::Error;
    /// let err = Error::Conflict { kind: "Widget".into(), name: "w".into(), message: "stale".into() };
    /// assert!(err.is_conflict());
    /// ```
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::ApplyConflict { .. })
    }

    /// An object API error, in the terms of a handle for `kind` in `namespace`.
    pub(super) fn from_api(err: api::Error, kind: &str, namespace: Option<&str>) -> Self {
        let namespace = namespace.map(str::to_owned);
        match err {
            api::Error::NotFound { name, .. } => Error::NotFound {
                kind: kind.to_owned(),
                namespace,
                name,
            },
            api::Error::AlreadyExists { name, .. } => Error::AlreadyExists {
                kind: kind.to_owned(),
                namespace,
                name,
            },
            api::Error::Conflict { name, message, .. } => Error::Conflict {
                kind: kind.to_owned(),
                name,
                message,
            },
            api::Error::ApplyConflict {
                name, conflicts, ..
            } => Error::ApplyConflict {
                kind: kind.to_owned(),
                name,
                conflicts,
            },
            api::Error::PatchFailed { name, source, .. } => Error::PatchFailed {
                kind: kind.to_owned(),
                name,
                source,
            },
            api::Error::Invalid { name, causes, .. } => Error::Invalid {
                kind: kind.to_owned(),
                name,
                causes,
            },
            api::Error::Gone { requested, oldest }
            | api::Error::Store(store::Error::Compacted {
                requested,
                compacted: oldest,
            }) => Error::Expired { requested, oldest },
            other => Error::Api(other),
        }
    }
}

impl From<watch::Error> for Error {
    fn from(err: watch::Error) -> Self {
        match err {
            watch::Error::TooOldResourceVersion { requested, oldest } => {
                Error::Expired { requested, oldest }
            }
            watch::Error::Closed => Error::WatchClosed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_become_the_specific_variant_with_the_handles_namespace() {
        let err = Error::from_api(
            api::Error::NotFound {
                kind: "widgets".into(),
                name: "w".into(),
            },
            "Widget",
            Some("team-a"),
        );
        assert!(
            matches!(&err, Error::NotFound { kind, namespace: Some(ns), name } if kind == "Widget" && ns == "team-a" && name == "w"),
            "{err:?}"
        );
        let compacted = Error::from_api(
            api::Error::Store(store::Error::Compacted {
                requested: 3,
                compacted: 9,
            }),
            "Widget",
            None,
        );
        assert!(matches!(
            compacted,
            Error::Expired {
                requested: 3,
                oldest: 9
            }
        ));
        let other = Error::from_api(
            api::Error::BadRequest("bad selector".into()),
            "Widget",
            None,
        );
        assert!(matches!(other, Error::Api(api::Error::BadRequest(_))));
        assert_eq!(other.to_string(), "bad request: bad selector");
    }

    #[test]
    fn a_watch_cut_off_is_expired_and_a_closed_hub_says_so() {
        let err: Error = watch::Error::TooOldResourceVersion {
            requested: 5,
            oldest: 7,
        }
        .into();
        assert_eq!(
            err.to_string(),
            "resource version 5 is too old (oldest available 7); list again"
        );
        assert!(matches!(
            Error::from(watch::Error::Closed),
            Error::WatchClosed
        ));
    }
}
