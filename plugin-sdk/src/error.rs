//! The one error type a reconcile returns: transient (retried with backoff) or
//! permanent (reported on the object, not retried until the object changes).

use std::fmt;

/// Why a reconcile failed.
///
/// Choose [`Error::Transient`] when trying again later may help (a dependency
/// is not there yet, a lookup failed) and [`Error::Permanent`] when only a
/// change to the object can help (invalid spec). The host retries transient
/// errors with per-key exponential backoff; a permanent error is recorded on
/// the object as a condition and an event.
///
/// `?` works on [`serde_json::Error`], which becomes a permanent error: data
/// that does not parse will not parse on a retry either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Retry later, with backoff.
    Transient(String),
    /// Do not retry until the object changes.
    Permanent(String),
}

impl Error {
    /// A failure that may go away on its own; the host retries with backoff.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Transient(message.into())
    }

    /// A failure only a change to the object can fix; the host reports it and
    /// does not retry.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::Permanent(message.into())
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            Self::Transient(m) | Self::Permanent(m) => m,
        }
    }

    /// Whether this error is permanent.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent(_))
    }

    /// The same error with `context: ` put in front of its message, keeping
    /// its kind; e.g. `"spec: missing field `replicas`"`.
    pub fn context(self, context: impl fmt::Display) -> Self {
        match self {
            Self::Transient(m) => Self::Transient(format!("{context}: {m}")),
            Self::Permanent(m) => Self::Permanent(format!("{context}: {m}")),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transient(m) => write!(f, "transient: {m}"),
            Self::Permanent(m) => write!(f, "permanent: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Self::Permanent(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_kind_and_prefixes_the_message() {
        let err = Error::transient("not found").context("get pod web-0");
        assert_eq!(err, Error::Transient("get pod web-0: not found".into()));
        assert!(Error::permanent("x").context("spec").is_permanent());
    }

    #[test]
    fn json_errors_are_permanent() {
        let err: Error = serde_json::from_str::<u32>("\"x\"").unwrap_err().into();
        assert!(err.is_permanent(), "{err}");
    }
}
