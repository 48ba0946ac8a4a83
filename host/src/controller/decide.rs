//! What a key's turn calls for next, as a pure function of how it ended
//! ([`decide`]): forget the key, drop it until it changes, retry soon,
//! requeue after a delay, back off, or report it not ready. The worker
//! gathers the facts (the breaker's verdict, a destination's hold) and
//! carries the decision out (queue, reports, history).

use std::time::Duration;

use super::TallyOutcome;

/// How a key's turn ended, with the facts the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ended {
    /// The object is gone (or being deleted without our finalizer).
    Gone,
    /// The circuit breaker holds the object.
    Stopped,
    /// The last reconcile failed permanently and nothing it saw changed.
    StillFailed,
    /// This host's lease is too close to expiry to call the reconciler.
    Postponed,
    /// The plugin is over its share (`pace`): not called, tried again
    /// when its debt is repaid.
    Paced(Duration),
    /// The response was applied.
    Applied {
        /// The requeue the reconciler asked for.
        requeue_after: Option<Duration>,
        /// How long a destination or limit asked to be left alone.
        hold: Option<Duration>,
        /// Whether the hot-loop breaker opened on this reconcile.
        hot_loop: bool,
        /// The generation reconciled.
        generation: i64,
    },
    /// A write found the object changed since the reconciler saw it.
    Conflicted(String),
    /// A transient error.
    Transient {
        message: String,
        /// A hold, as for `Applied`.
        hold: Option<Duration>,
        /// Whether this host no longer holds the key's shard.
        shard_moved: bool,
    },
    /// A permanent error.
    Permanent(String),
}

/// What the worker does next with the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// The object is gone: forget everything kept about the key.
    Forget,
    /// Nothing until the object changes (or another host takes it): drop
    /// the key, record nothing.
    Drop,
    /// Try again after this long, counting no failure and recording nothing.
    RetrySoon(Duration),
    /// Success; call again after this long if asked (subject to the requeue
    /// floor and throttle).
    Succeeded { requeue_after: Option<Duration> },
    /// The breaker opened: report `Ready=False` (`HotLoop`) with this message.
    HotLoop(String),
    /// Retry: after `hold` if a destination asked for it, else with
    /// per-key exponential backoff.
    Backoff {
        message: String,
        hold: Option<Duration>,
        /// A conflict: optimistic concurrency at work, not worth a warning.
        conflict: bool,
    },
    /// Report `Ready=False` (`ReconcileError`) and wait for a change.
    NotReady(String),
}

/// How soon a key is tried again when this host's lease is too close to
/// expiry to start work on it.
pub(super) const NOT_NOW_RETRY: Duration = Duration::from_millis(500);

/// How a turn that called the reconciler counts in the controller's
/// [`Tally`](super::Tally): failed when the reconciler failed, a write it
/// asked for failed, or its response could not be applied in full
/// (`clashed`: a desired child whose name another object holds); a
/// conflict apart. `wrote` is whether the applied response wrote anything.
pub(super) fn tallied(ended: &Ended, wrote: bool, clashed: bool) -> TallyOutcome {
    match ended {
        Ended::Conflicted(_) => TallyOutcome::Conflicted,
        Ended::Transient { .. } | Ended::Permanent(_) => TallyOutcome::Failed,
        Ended::Applied { .. } if clashed => TallyOutcome::Failed,
        // `Gone` after a call: the finalizer was let go by someone else
        // meanwhile. The others end a turn before any call.
        Ended::Applied { .. }
        | Ended::Gone
        | Ended::Stopped
        | Ended::StillFailed
        | Ended::Postponed
        | Ended::Paced(_) => TallyOutcome::Succeeded { wrote },
    }
}

/// What comes after a turn that ended as `ended`.
pub(super) fn decide(ended: Ended) -> Decision {
    match ended {
        Ended::Gone => Decision::Forget,
        Ended::Stopped | Ended::StillFailed => Decision::Drop,
        Ended::Postponed => Decision::RetrySoon(NOT_NOW_RETRY),
        Ended::Paced(wait) => Decision::RetrySoon(wait),
        Ended::Applied {
            hot_loop: true,
            generation,
            ..
        } => Decision::HotLoop(format!(
            "reconciles keep writing while the spec stays at generation {generation}: stopped until the spec changes"
        )),
        Ended::Applied {
            requeue_after,
            hold,
            ..
        } => Decision::Succeeded {
            // A destination asked to be left alone (Retry-After), or a
            // limit held a request: not before then.
            requeue_after: match (requeue_after, hold) {
                (Some(asked), Some(hold)) => Some(asked.max(hold)),
                (asked, hold) => asked.or(hold),
            },
        },
        Ended::Conflicted(message) => Decision::Backoff {
            message,
            hold: None,
            conflict: true,
        },
        // The shard went to another host meanwhile (its writes were fenced
        // out); the new owner queues the key.
        Ended::Transient {
            shard_moved: true, ..
        } => Decision::Drop,
        Ended::Transient { message, hold, .. } => Decision::Backoff {
            message,
            hold,
            conflict: false,
        },
        Ended::Permanent(message) => Decision::NotReady(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn applied(requeue_after: Option<Duration>, hold: Option<Duration>, hot_loop: bool) -> Ended {
        Ended::Applied {
            requeue_after,
            hold,
            hot_loop,
            generation: 7,
        }
    }

    fn transient(hold: Option<Duration>, shard_moved: bool) -> Ended {
        Ended::Transient {
            message: "boom".into(),
            hold,
            shard_moved,
        }
    }

    #[test]
    fn each_way_a_turn_ends_has_one_decision() {
        let backoff = |hold, conflict| Decision::Backoff {
            message: "boom".into(),
            hold,
            conflict,
        };
        let succeeded = |requeue_after| Decision::Succeeded { requeue_after };
        let table = [
            (Ended::Gone, Decision::Forget),
            (Ended::Stopped, Decision::Drop),
            (Ended::StillFailed, Decision::Drop),
            (Ended::Postponed, Decision::RetrySoon(NOT_NOW_RETRY)),
            (Ended::Paced(S(2)), Decision::RetrySoon(S(2))),
            (applied(None, None, false), succeeded(None)),
            (applied(Some(S(5)), None, false), succeeded(Some(S(5)))),
            // A hold pushes a requeue back, and asks for one by itself.
            (applied(Some(S(5)), Some(S(30)), false), succeeded(Some(S(30)))),
            (applied(Some(S(60)), Some(S(30)), false), succeeded(Some(S(60)))),
            (applied(None, Some(S(30)), false), succeeded(Some(S(30)))),
            (
                applied(Some(S(5)), Some(S(30)), true),
                Decision::HotLoop(
                    "reconciles keep writing while the spec stays at generation 7: stopped until the spec changes".into(),
                ),
            ),
            (Ended::Conflicted("boom".into()), backoff(None, true)),
            (transient(None, false), backoff(None, false)),
            (transient(Some(S(30)), false), backoff(Some(S(30)), false)),
            (transient(Some(S(30)), true), Decision::Drop),
            (Ended::Permanent("bad spec".into()), Decision::NotReady("bad spec".into())),
        ];
        for (ended, expected) in table {
            assert_eq!(decide(ended.clone()), expected, "{ended:?}");
        }
    }

    #[test]
    fn a_turn_counts_as_failed_when_anything_it_asked_for_was_not_done() {
        let ok = |wrote| TallyOutcome::Succeeded { wrote };
        let table = [
            (applied(None, None, false), true, false, ok(true)),
            (applied(None, None, false), false, false, ok(false)),
            // The breaker's verdict is the host's; the reconcile itself worked.
            (applied(None, None, true), true, false, ok(true)),
            (applied(None, None, false), true, true, TallyOutcome::Failed),
            (Ended::Gone, false, false, ok(false)),
            (
                Ended::Conflicted("x".into()),
                false,
                false,
                TallyOutcome::Conflicted,
            ),
            (transient(None, false), false, false, TallyOutcome::Failed),
            (transient(None, true), false, false, TallyOutcome::Failed),
            (
                Ended::Permanent("x".into()),
                false,
                false,
                TallyOutcome::Failed,
            ),
        ];
        for (ended, wrote, clashed, expected) in table {
            assert_eq!(
                tallied(&ended, wrote, clashed),
                expected,
                "{ended:?} wrote={wrote} clashed={clashed}"
            );
        }
    }
}
