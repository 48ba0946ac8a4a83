//! One reconcile for every kind: check the spec, read the broker (an
//! observation: the host performs the reads and calls again with the
//! answers), [`decide`], and turn the step into a status, events and at
//! most one write ([`Response::effect`]) that the host sends after the
//! status is written. The reconcile after a write reads again: what the
//! broker shows is trusted, not what it answered.
//!
//! Failures are reported the way `docs/provider.md` §5 describes: written
//! once (`Ready=False` with the reason, a Warning event), then the same
//! failure ends in a transient error so the host's per-object backoff
//! paces the retries; a write the broker refused is held for the
//! generation until a resync period has passed; a request the host held
//! back reports nothing.

use std::time::Duration;

use setpoint_plugin_sdk::{
    Condition, Ctx, Error, Event, HttpErrorKind, HttpResult, KindRef, Manifest, Object, Response,
    Time, set_condition,
};

use crate::decide::{DELETE_ID, Failure, Memory, Step, Topology, WRITE_ID, decide};
use crate::{API_VERSION, Status};

/// The manifest of the plugin of kind `T`: the broker is the object's
/// choice, so any HTTP destination and any Secret are asked for; the
/// operator's PluginGrant says which it really gets.
pub fn manifest<T: Topology>(name: &str, version: &str) -> Manifest {
    Manifest::new(name, version, KindRef::new(API_VERSION, T::KIND))
        .finalizer(finalizer::<T>())
        .destination("http://*:*")
        .destination("https://*:*")
        .secret("*")
        .define(T::definition())
}

/// The finalizer of kind `T`, `rabbitmq.setpoint.dev/queue`.
pub fn finalizer<T: Topology>() -> String {
    format!("rabbitmq.setpoint.dev/{}", T::KIND.to_ascii_lowercase())
}

/// Reconcile one object of kind `T`.
pub fn reconcile<T: Topology>(
    object: &Object<T::Spec, Status<T::Observed>>,
    ctx: &Ctx,
) -> Result<Response<Status<T::Observed>>, Error> {
    if object.is_deleting() && !ctx.finalizing() {
        return Ok(Response::new());
    }
    let target = match T::from_spec(object.name(), &object.spec) {
        Ok(target) => target,
        // Nothing this object could name was written: let it go.
        Err(_) if ctx.finalizing() => return Ok(Response::new().remove_finalizer()),
        Err(failure) => return report::<T>(object, ctx, None, None, failure),
    };
    let observed = target.observe(ctx, max_age(&object.status, target.resync()))?;
    let read_ok = observed.is_ok();
    let memory = Memory {
        last_write: last_outcome(ctx, WRITE_ID).map(|o| {
            target
                .api()
                .written(&format!("write {}", target.describe()), o, false)
        }),
        last_delete: last_outcome(ctx, DELETE_ID).map(|o| {
            target
                .api()
                .written(&format!("delete {}", target.describe()), o, true)
        }),
        held: held_failure(&object.status, object.metadata.generation, ctx.now()),
    };
    let resync = target.resync();
    let step = decide(&target, ctx.finalizing(), observed, &memory);
    match step {
        Step::InSync(seen) => {
            let superseded = object
                .status
                .observed
                .as_ref()
                .and_then(|previous| target.superseded(previous, &seen));
            let message = format!("RabbitMQ has {} as specified", target.describe());
            let status = status_with(
                object,
                ctx,
                Some(Some(seen)),
                Condition::new("Ready", true, "InSync", message),
                None,
            );
            let mut response = Response::new().status(status).requeue_after(resync);
            // Best effort: the status now shows the new one, so a delete
            // that fails is not tried again (a leftover binding routes
            // more, never less).
            if let Some(delete) = superseded {
                response = response
                    .event(Event::normal(
                        "DeletingSuperseded",
                        format!(
                            "deleting what {} replaces: {}",
                            target.describe(),
                            delete.url
                        ),
                    ))
                    .effect(delete);
            }
            Ok(response)
        }
        Step::Create => write(
            object,
            ctx,
            &target,
            object
                .status
                .observed
                .clone()
                .filter(|_| T::REPLACED_BY_SPEC),
            "Creating",
            format!("creating {}", target.describe()),
            target.put(),
        ),
        Step::Update(seen, what) => {
            let message = format!("updating {}: RabbitMQ has {what}", target.describe());
            write(
                object,
                ctx,
                &target,
                Some(seen),
                "Updating",
                message,
                target.put(),
            )
        }
        Step::Recreate(seen, fields) => {
            // The delete and the declaration go in one response: the host
            // sends effects in order and stops at the first that fails, so
            // the new one is declared only once the old one is gone, and
            // `setpoint plan` shows the pair as one replacement.
            let message = target.recreate_message(&seen, &fields);
            let delete = target.delete(&seen);
            let response = write(
                object,
                ctx,
                &target,
                Some(seen),
                "Recreating",
                message,
                delete,
            )?;
            Ok(response.effect(target.redeclare()))
        }
        Step::Delete(seen) => {
            let message = format!("deleting {} from RabbitMQ", target.describe());
            let status = status_with(
                object,
                ctx,
                Some(Some(seen.clone())),
                Condition::new("Ready", false, "Deleting", message.clone()),
                None,
            );
            Ok(Response::new()
                .status(status)
                .event(Event::normal("Deleting", message))
                .effect(target.delete(&seen))
                .requeue_after(resync))
        }
        Step::Release => Ok(Response::new().remove_finalizer()),
        Step::Retain(seen) => {
            let message = match &seen {
                Ok(seen) => target.retained_message(seen.as_ref()),
                Err(failure) => format!(
                    "{} is left as it is in RabbitMQ (deletionPolicy Retain); it could not \
                     be seen: {}",
                    target.describe(),
                    failure.message()
                ),
            };
            Ok(Response::new()
                .event(Event::normal("Retained", message))
                .remove_finalizer())
        }
        Step::Fail(failure, seen) => {
            // What was seen, when the broker could be read at all. A kind
            // replaced by its spec keeps showing the one it replaces until
            // the new one exists, failures included: it is the only record
            // of what to delete then.
            let seen = match seen {
                None if T::REPLACED_BY_SPEC => object.status.observed.clone(),
                seen => seen,
            };
            let observed = read_ok.then_some(seen);
            report::<T>(object, ctx, Some(&target), observed, failure)
        }
    }
}

/// How old an answer a look accepts. Half the resync period in general:
/// reads of the same URL (every queue of a vhost reads the vhost's list)
/// are shared by the host, so the broker sees about two a period however
/// many objects read it, and drift is repaired within one and a half
/// periods. An object's own write ends that freshness for it, so the look
/// after a write sees what the write did. But an object waiting for
/// something another object creates (its vhost, applied in the same file)
/// would see the old "missing" answer for up to half a period after the
/// other's write: while it waits, it accepts only answers about a second
/// old.
pub fn max_age<O>(status: &Status<O>, resync: Duration) -> Duration {
    let waiting = ready_condition(status).is_some_and(|ready| {
        !ready.is_true()
            && matches!(
                ready.reason.as_str(),
                "VhostMissing" | "UserMissing" | "ExchangeMissing" | "DestinationMissing"
            )
    });
    if waiting {
        Duration::from_secs(1)
    } else {
        resync / 2
    }
}

/// The outcome of the previous reconcile's write with this id, unless the
/// host held it back or it could not reach the broker at all: then it was
/// not applied, and this look's read decides. (A failed connection while
/// the broker was down must not be reported once it answers again; writes
/// that reach nothing cannot loop: the host's breaker holds them.)
fn last_outcome<'a>(ctx: &'a Ctx, id: &str) -> Option<&'a HttpResult> {
    ctx.outcome(id).filter(|o| {
        !matches!(o, Err(e) if matches!(e.kind, HttpErrorKind::Throttled | HttpErrorKind::Connect))
    })
}

/// The `Ready` reasons of failures the host's backoff paces.
fn backs_off(reason: &str) -> bool {
    matches!(
        reason,
        "Unauthorized"
            | "Unreachable"
            | "NotGranted"
            | "VhostMissing"
            | "UserMissing"
            | "ExchangeMissing"
            | "DestinationMissing"
    )
}

fn write<T: Topology>(
    object: &Object<T::Spec, Status<T::Observed>>,
    ctx: &Ctx,
    target: &T,
    seen: Option<T::Observed>,
    reason: &str,
    message: String,
    request: setpoint_plugin_sdk::HttpRequest,
) -> Result<Response<Status<T::Observed>>, Error> {
    // Retrying after a failure that backs off, the condition keeps saying
    // so until the write lands: flipping between "Creating" and the
    // failure would be a status write per attempt, a loop the host's
    // breaker stops.
    let retrying = ready_condition(&object.status)
        .filter(|c| !c.is_true() && backs_off(&c.reason))
        .cloned();
    let ready = retrying
        .clone()
        .unwrap_or_else(|| Condition::new("Ready", false, reason, message.clone()));
    let status = status_with(object, ctx, Some(seen), ready, None);
    let mut response = Response::new()
        .status(status)
        .effect(request)
        .requeue_after(target.resync());
    if retrying.is_none() {
        response = response.event(Event::normal(reason, message));
    }
    Ok(response)
}

fn ready_condition<O>(status: &Status<O>) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// A failure that holds writes, as the status reports it for this
/// generation, while its hold lasts.
fn held_failure<O>(status: &Status<O>, generation: Option<i64>, now: Time) -> Option<Failure> {
    let until = status.writes_held_until?;
    if status.observed_generation != generation || now >= until {
        return None;
    }
    let ready = ready_condition(status)?;
    Failure::held(&ready.reason, &ready.message)
}

/// The status with `ready` set, `observed` replaced when given, and the
/// write hold set or cleared.
fn status_with<S, O: Clone>(
    object: &Object<S, Status<O>>,
    ctx: &Ctx,
    observed: Option<Option<O>>,
    ready: Condition,
    writes_held_until: Option<Time>,
) -> Status<O> {
    let mut status = object.status.clone();
    let generation = object.metadata.generation;
    status.observed_generation = generation;
    if let Some(observed) = observed {
        status.observed = observed;
    }
    status.writes_held_until = writes_held_until;
    set_condition(
        &mut status.conditions,
        ready.with_observed_generation(generation),
        ctx.now(),
    );
    status
}

/// How soon a failure that backs off is looked at again after it is first
/// reported; the host's backoff takes over from the next look.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// How soon an object waiting for a dependency (a vhost applied in the
/// same file, say) looks again the first time.
const FIRST_DEPENDENCY_RETRY: Duration = Duration::from_secs(2);

/// Report `failure` on the object. A failure time may cure that the status
/// already shows ends in a transient error instead, so the host's
/// per-object backoff paces the retries; one that holds writes requeues
/// when the hold ends; an immutable change looks again each resync period
/// (the queue may be deleted meanwhile, and then it is re-created); an
/// invalid spec waits for the spec to change.
fn report<T: Topology>(
    object: &Object<T::Spec, Status<T::Observed>>,
    ctx: &Ctx,
    target: Option<&T>,
    observed: Option<Option<T::Observed>>,
    failure: Failure,
) -> Result<Response<Status<T::Observed>>, Error> {
    let resync = target.map_or(Duration::from_secs(crate::default_resync()), T::resync);
    let hold = failure.holds_writes().then(|| {
        // A hold already running is kept, so reporting it again changes nothing.
        held_failure(&object.status, object.metadata.generation, ctx.now())
            .and(object.status.writes_held_until)
            .unwrap_or_else(|| ctx.now() + resync)
    });
    // A failure that backs off keeps the message it was first reported
    // with while its reason stays: a message that changes on every look
    // (a time, a counter) would be a status write per retry, a loop.
    let message = match ready_condition(&object.status) {
        Some(ready)
            if failure.retry_with_backoff()
                && !ready.is_true()
                && ready.reason == failure.reason() =>
        {
            ready.message.clone()
        }
        _ => failure.message().to_owned(),
    };
    let status = status_with(
        object,
        ctx,
        observed,
        Condition::new("Ready", false, failure.reason(), message),
        hold,
    );
    let changed = status != object.status;
    if !changed && failure.is_missing_dependency() {
        // Waiting for another object (its vhost, its ends, its user), which
        // may appear at any moment: looked at again at a pace that grows
        // with the wait so far, from 2 s up to the resync period. The
        // host's backoff grows to 1,000 s, and the object would wait that
        // long after what it waits for appeared (nothing requeues it then).
        let waited = ready_condition(&object.status)
            .and_then(|ready| ready.last_transition_time)
            .map_or(FIRST_DEPENDENCY_RETRY, |since| {
                ctx.now().saturating_duration_since(since)
            });
        return Ok(Response::new().requeue_after(
            waited.clamp(FIRST_DEPENDENCY_RETRY, resync.max(FIRST_DEPENDENCY_RETRY)),
        ));
    }
    if !changed && failure.retry_with_backoff() {
        return Err(Error::transient(format!(
            "{}: {}",
            failure.reason(),
            failure.message()
        )));
    }
    // An immutable change names the queue's message count, which moves
    // while it waits: the condition follows it, the events do not.
    let told = matches!(failure, Failure::ImmutableChange(_))
        && ready_condition(&object.status).is_some_and(|ready| {
            ready.reason == failure.reason()
                && ready.observed_generation == object.metadata.generation
        });
    let mut response = Response::new().status(status);
    if changed && !told {
        response = response.event(Event::warning(failure.reason(), failure.message()));
    }
    // Written now, a failure that backs off meets itself again in the
    // reconcile asked for here (the echo of the plugin's own status write
    // does not call it again), finds it reported, and from then on the
    // host's per-object backoff paces the retries.
    Ok(match hold {
        Some(until) => response.requeue_after(until.saturating_duration_since(ctx.now())),
        None if failure.is_missing_dependency() => response.requeue_after(FIRST_DEPENDENCY_RETRY),
        None if failure.retry_with_backoff() => response.requeue_after(FIRST_RETRY),
        None if matches!(failure, Failure::InvalidSpec(_)) => response,
        None => response.requeue_after(resync),
    })
}
