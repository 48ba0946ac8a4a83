//! `api::Error`: every way an object operation can fail, with the data a
//! client needs (kind, name, field path). Maps one-to-one to an HTTP
//! `Status` in `server`.

use crate::object::field::FieldError;
use crate::object::patch::PatchError;
use crate::store;

pub use crate::object::field::ErrorType as CauseType;

/// One invalid field.
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
/// # let crds = api.kinds().require("apiextensions.k8s.io/v1", "CustomResourceDefinition")?;
/// # api.create(&crds, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
/// #     "metadata": {"name": "widgets.example.com"},
/// #     "spec": {"group": "example.com", "scope": "Namespaced",
/// #         "names": {"kind": "Widget", "plural": "widgets"},
/// #         "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
/// #             "schema": {"openAPIV3Schema": {"type": "object", "properties": {
/// #                 "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "image": {"type": "string"}}},
/// #                 "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})).await?;
/// let widgets = api.kinds().require("example.com/v1", "Widget")?;
///
/// let bad = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
///                  "spec": {"replicas": "three"}});
/// let Err(Error::Invalid { causes, .. }) = api.create(&widgets, bad).await else { panic!() };
/// assert_eq!(causes[0].field, "spec.replicas");
/// assert_eq!(causes[0].reason.cause_type(), "FieldValueTypeInvalid");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cause {
    /// The field path, e.g. `metadata.name` or `spec.replicas`.
    pub field: String,
    /// What is wrong with it, e.g. `Required value` or
    /// `Invalid value: 5: spec.replicas in body should be less than or equal to 3`.
    pub message: String,
    /// The Kubernetes `StatusCause.reason` (`FieldValueInvalid`, …).
    pub reason: CauseType,
}

impl From<&FieldError> for Cause {
    fn from(err: &FieldError) -> Self {
        Cause {
            field: err.field.to_string(),
            message: err.body(),
            reason: err.error_type,
        }
    }
}

/// A field that another manager owns with a different value, refusing an
/// apply without `force`.
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
/// # let crds = api.kinds().require("apiextensions.k8s.io/v1", "CustomResourceDefinition")?;
/// # api.create(&crds, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
/// #     "metadata": {"name": "widgets.example.com"},
/// #     "spec": {"group": "example.com", "scope": "Namespaced",
/// #         "names": {"kind": "Widget", "plural": "widgets"},
/// #         "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
/// #             "schema": {"openAPIV3Schema": {"type": "object", "properties": {
/// #                 "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "image": {"type": "string"}}},
/// #                 "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})).await?;
/// let widgets = api.kinds().require("example.com/v1", "Widget")?;
///
/// let config = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"image": "a"}});
/// api.apply(&widgets, config.clone(), "alice", false).await?;
/// let mut other = config;
/// other["spec"]["image"] = json!("b");
/// let Err(Error::ApplyConflict { conflicts, .. }) = api.apply(&widgets, other, "bob", false).await else { panic!() };
/// assert_eq!((conflicts[0].manager.as_str(), conflicts[0].field.as_str()), ("alice", ".spec.image"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldConflict {
    /// The manager that owns the field.
    pub manager: String,
    /// The field, as `.spec.replicas`.
    pub field: String,
}

/// The most conflicts an apply's error message lists (and the most
/// characters of each field path): an apply over 20,000 fields that
/// conflicts answers a short message, not megabytes.
pub const MAX_LISTED_CONFLICTS: usize = 20;
const MAX_FIELD_CHARS: usize = 256;

/// "Apply failed with N conflicts: conflict with "m": .f, …", listing at
/// most [`MAX_LISTED_CONFLICTS`].
fn conflicts_message(conflicts: &[FieldConflict]) -> String {
    let listed: Vec<String> = conflicts
        .iter()
        .take(MAX_LISTED_CONFLICTS)
        .map(|c| {
            let field: String = c.field.chars().take(MAX_FIELD_CHARS).collect();
            let cut = if field.len() < c.field.len() {
                "…"
            } else {
                ""
            };
            format!("conflict with {:?}: {field}{cut}", c.manager)
        })
        .collect();
    let more = conflicts.len().saturating_sub(MAX_LISTED_CONFLICTS);
    format!(
        "Apply failed with {} conflict{}: {}{}",
        conflicts.len(),
        if conflicts.len() == 1 { "" } else { "s" },
        listed.join(", "),
        if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        }
    )
}

/// An object operation failure.
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
/// let missing = api.get(&events, Some("default"), "nope").await.unwrap_err();
/// assert!(matches!(missing, Error::NotFound { .. }));
/// assert_eq!((missing.code(), missing.reason()), (404, "NotFound"));
/// api.create(&events, event("e")).await?;
/// let twice = api.create(&events, event("e")).await.unwrap_err();
/// assert_eq!(twice.code(), 409);
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// The resource, as Kubernetes names it in messages: plural and
        /// group, `widgets.example.dev` (see [`Api::resource`](super::Api::resource)).
        kind: String,
        /// The object's name.
        name: String,
    },
    /// Create of an object that exists.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// The resource (plural and group, as in `NotFound`).
        kind: String,
        /// The object's name.
        name: String,
    },
    /// Optimistic concurrency: the object changed since it was read.
    #[error("Operation cannot be fulfilled on {kind} {name:?}: {message}")]
    Conflict {
        /// The resource (plural and group, as in `NotFound`).
        kind: String,
        /// The object's name.
        name: String,
        /// What did not match.
        message: String,
    },
    /// The object breaks the rules of its kind.
    #[error("{kind} {name:?} is invalid: {}", causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The kind.
        kind: String,
        /// The object's name (may be empty).
        name: String,
        /// Every invalid field.
        causes: Vec<Cause>,
    },
    /// A JSON patch could not be applied to the object (a path that does not
    /// exist, a failed `test`). Kubernetes answers 422 for these.
    #[error("{kind} {name:?}: the JSON patch cannot be applied: {source}")]
    PatchFailed {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The operation that failed and why.
        source: Box<PatchError>,
    },
    /// Server-side apply would change fields another manager owns.
    #[error("{}", conflicts_message(conflicts))]
    ApplyConflict {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Every conflicting field with its owner.
        conflicts: Vec<FieldConflict>,
    },
    /// The kind is not registered.
    #[error("unknown kind {0}: no CustomResourceDefinition registers it")]
    UnknownKind(String),
    /// A malformed request (bad selector, bad patch, wrong kind for the path).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The object exceeds the size limit.
    #[error("object is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The requested resource version is no longer available.
    #[error("too old resource version: {requested} (oldest available {oldest})")]
    Gone {
        /// The revision requested.
        requested: i64,
        /// The oldest available.
        oldest: i64,
    },
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl Error {
    /// An `Invalid` error with a single cause.
    ///
    /// ```
    /// use setpoint::api::Error;
    /// let err = Error::invalid("Widget", "w", "spec.size", "must be even");
    /// assert_eq!(err.to_string(), r#"Widget "w" is invalid: spec.size: must be even"#);
    /// assert_eq!(err.code(), 422);
    /// ```
    pub fn invalid(kind: &str, name: &str, field: &str, message: impl Into<String>) -> Self {
        Error::Invalid {
            kind: kind.to_owned(),
            name: name.to_owned(),
            causes: vec![Cause {
                field: field.to_owned(),
                message: message.into(),
                reason: CauseType::Invalid,
            }],
        }
    }

    /// An `Invalid` error listing field errors (from schema validation).
    ///
    /// ```
    /// use setpoint::api::Error;
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = Error::invalid_fields("Widget", "w", &[
    ///     FieldError::required(FieldPath::new("spec.image"), ""),
    ///     FieldError::too_long(FieldPath::new("spec.name"), 63),
    /// ]);
    /// assert_eq!(err.to_string(),
    ///     r#"Widget "w" is invalid: spec.image: Required value; spec.name: Too long: may not be longer than 63"#);
    /// ```
    pub fn invalid_fields(kind: &str, name: &str, errors: &[FieldError]) -> Self {
        Error::Invalid {
            kind: kind.to_owned(),
            name: name.to_owned(),
            causes: errors.iter().map(Cause::from).collect(),
        }
    }

    /// The HTTP status code Kubernetes uses for this error.
    ///
    /// ```
    /// use setpoint::api::Error;
    /// assert_eq!(Error::BadRequest("bad selector".into()).code(), 400);
    /// assert_eq!(Error::TooLarge { size: 2, limit: 1 }.code(), 413);
    /// ```
    pub fn code(&self) -> u16 {
        match self {
            Error::NotFound { .. } | Error::UnknownKind(_) => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } | Error::ApplyConflict { .. } => {
                409
            }
            Error::Invalid { .. } | Error::PatchFailed { .. } => 422,
            Error::BadRequest(_) => 400,
            Error::TooLarge { .. } => 413,
            Error::Gone { .. } => 410,
            Error::Store(store::Error::Compacted { .. }) => 410,
            Error::Store(store::Error::InsufficientStorage(_)) => 507,
            Error::Store(_) => 500,
        }
    }

    /// The Kubernetes `Status.reason` for this error.
    ///
    /// ```
    /// use setpoint::api::Error;
    /// assert_eq!(Error::Gone { requested: 1, oldest: 5 }.reason(), "Expired");
    /// ```
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound { .. } | Error::UnknownKind(_) => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } | Error::ApplyConflict { .. } => "Conflict",
            Error::Invalid { .. } | Error::PatchFailed { .. } => "Invalid",
            Error::BadRequest(_) => "BadRequest",
            Error::TooLarge { .. } => "RequestEntityTooLarge",
            Error::Gone { .. } | Error::Store(store::Error::Compacted { .. }) => "Expired",
            Error::Store(store::Error::InsufficientStorage(_)) => "InsufficientStorage",
            Error::Store(_) => "InternalError",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::field::FieldPath;

    #[test]
    fn each_error_maps_to_the_kubernetes_code_and_reason() {
        let cases: Vec<(Error, u16, &str)> = vec![
            (
                Error::NotFound {
                    kind: "k".into(),
                    name: "n".into(),
                },
                404,
                "NotFound",
            ),
            (Error::UnknownKind("x".into()), 404, "NotFound"),
            (
                Error::AlreadyExists {
                    kind: "k".into(),
                    name: "n".into(),
                },
                409,
                "AlreadyExists",
            ),
            (
                Error::Conflict {
                    kind: "k".into(),
                    name: "n".into(),
                    message: "m".into(),
                },
                409,
                "Conflict",
            ),
            (
                Error::ApplyConflict {
                    kind: "k".into(),
                    name: "n".into(),
                    conflicts: vec![FieldConflict {
                        manager: "m".into(),
                        field: ".spec.x".into(),
                    }],
                },
                409,
                "Conflict",
            ),
            (Error::invalid("K", "n", "spec.x", "bad"), 422, "Invalid"),
            (
                Error::PatchFailed {
                    kind: "k".into(),
                    name: "n".into(),
                    source: Box::new(PatchError::NotAList),
                },
                422,
                "Invalid",
            ),
            (Error::BadRequest("b".into()), 400, "BadRequest"),
            (
                Error::TooLarge { size: 2, limit: 1 },
                413,
                "RequestEntityTooLarge",
            ),
            (
                Error::Gone {
                    requested: 1,
                    oldest: 2,
                },
                410,
                "Expired",
            ),
            (
                Error::Store(store::Error::Compacted {
                    requested: 1,
                    compacted: 2,
                }),
                410,
                "Expired",
            ),
            (
                Error::Store(store::Error::Unavailable("x".into())),
                500,
                "InternalError",
            ),
            (
                Error::Store(store::Error::InsufficientStorage("disk full".into())),
                507,
                "InsufficientStorage",
            ),
        ];
        for (err, code, reason) in cases {
            assert_eq!((err.code(), err.reason()), (code, reason), "{err}");
        }
    }

    #[test]
    fn apply_conflicts_name_every_field_and_its_manager() {
        let err = Error::ApplyConflict {
            kind: "widgets".into(),
            name: "w".into(),
            conflicts: vec![
                FieldConflict {
                    manager: "alice".into(),
                    field: ".spec.replicas".into(),
                },
                FieldConflict {
                    manager: "bob".into(),
                    field: ".spec.image".into(),
                },
            ],
        };
        assert_eq!(
            err.to_string(),
            "Apply failed with 2 conflicts: conflict with \"alice\": .spec.replicas, conflict with \"bob\": .spec.image"
        );
    }

    #[test]
    fn field_errors_become_causes_with_their_reason() {
        let err = Error::invalid_fields(
            "Widget",
            "w",
            &[FieldError::required(FieldPath::new("spec.image"), "")],
        );
        let Error::Invalid { causes, .. } = &err else {
            panic!()
        };
        assert_eq!(
            causes[0],
            Cause {
                field: "spec.image".into(),
                message: "Required value".into(),
                reason: CauseType::Required,
            }
        );
        assert_eq!(
            err.to_string(),
            "Widget \"w\" is invalid: spec.image: Required value"
        );
    }

    #[test]
    fn a_conflict_over_many_fields_answers_a_short_message() {
        let conflicts: Vec<FieldConflict> = (0..20_000)
            .map(|i| FieldConflict {
                manager: "alice".into(),
                field: format!(".spec.items{i}.{}", "x".repeat(1_000)),
            })
            .collect();
        let message = Error::ApplyConflict {
            kind: "widgets".into(),
            name: "w".into(),
            conflicts,
        }
        .to_string();
        assert!(message.len() < 8 * 1024, "{} bytes", message.len());
        assert!(
            message.starts_with(
                "Apply failed with 20000 conflicts: conflict with \"alice\": .spec.items0."
            ),
            "{message}"
        );
        assert!(message.ends_with(", and 19980 more"), "{message}");
    }
}
