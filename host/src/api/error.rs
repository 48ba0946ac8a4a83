//! `api::Error`: every way an object operation can fail, with the data a
//! client needs (kind, name, field path). Maps one-to-one to an HTTP
//! `Status` in `server`.

use crate::store;

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cause {
    /// The field path, e.g. `metadata.name` or `spec.replicas`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// An object operation failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// The kind (plural resource name for URLs).
        kind: String,
        /// The object's name.
        name: String,
    },
    /// Create of an object that exists.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// Optimistic concurrency: the object changed since it was read.
    #[error("conflict on {kind} {name:?}: {message}")]
    Conflict {
        /// The kind.
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
    pub fn invalid(kind: &str, name: &str, field: &str, message: impl Into<String>) -> Self {
        Error::Invalid {
            kind: kind.to_owned(),
            name: name.to_owned(),
            causes: vec![Cause {
                field: field.to_owned(),
                message: message.into(),
            }],
        }
    }

    /// The HTTP status code Kubernetes uses for this error.
    pub fn code(&self) -> u16 {
        match self {
            Error::NotFound { .. } | Error::UnknownKind(_) => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } => 409,
            Error::Invalid { .. } => 422,
            Error::BadRequest(_) => 400,
            Error::TooLarge { .. } => 413,
            Error::Gone { .. } => 410,
            Error::Store(store::Error::Compacted { .. }) => 410,
            Error::Store(_) => 500,
        }
    }

    /// The Kubernetes `Status.reason` for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound { .. } | Error::UnknownKind(_) => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } => "Conflict",
            Error::Invalid { .. } => "Invalid",
            Error::BadRequest(_) => "BadRequest",
            Error::TooLarge { .. } => "RequestEntityTooLarge",
            Error::Gone { .. } | Error::Store(store::Error::Compacted { .. }) => "Expired",
            Error::Store(_) => "InternalError",
        }
    }
}
