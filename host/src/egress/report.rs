//! What the requests of one reconcile came to, beyond their answers: the
//! requests refused, the hold before the object is looked at again, how
//! many were sent.

use std::time::Duration;

/// One request not sent, for the object's condition and event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The destination, `scheme://host:port`, or the URL when it has none.
    pub destination: String,
    /// `DestinationNotGranted`, `DestinationNotDeclared`, `PrivateAddress`,
    /// `SecretNotGranted`, `SecretNotFound`, `ForbiddenHeader`, `BadRequest`.
    pub reason: &'static str,
    /// What was refused and why.
    pub message: String,
}

/// What the requests of one reconcile came to, beyond their answers.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    /// Requests not sent.
    pub refused: Vec<Refusal>,
    /// The object should be looked at again no sooner than this: a rate
    /// limit or breaker held a request, or a destination answered
    /// 429/503 with `Retry-After`.
    pub hold: Option<Duration>,
    /// Requests sent.
    pub sent: usize,
    /// Destinations a request got no answer from (or a 5xx, or was held
    /// back by): the object waits for them to recover
    /// ([`super::Egress::recovered`]).
    pub failed_at: Vec<String>,
}

impl Report {
    pub(super) fn hold_for(&mut self, after: Duration) {
        self.hold = Some(self.hold.map_or(after, |h| h.max(after)));
    }

    pub(super) fn failed_at(&mut self, destination: &str) {
        if !self.failed_at.iter().any(|d| d == destination) {
            self.failed_at.push(destination.to_owned());
        }
    }
}

/// Fold one request's report into the reconcile's.
pub(super) fn merge(into: &mut Report, from: Report) {
    into.refused.extend(from.refused);
    into.sent += from.sent;
    for destination in &from.failed_at {
        into.failed_at(destination);
    }
    if let Some(h) = from.hold {
        into.hold_for(h);
    }
}
