//! `dns`: a provider plugin. It keeps each `DnsRecord`
//! (`dns.setpoint.dev/v1`) served by a PowerDNS authoritative server, through
//! PowerDNS's HTTP API, with the API key from a `v1 Secret` that the host
//! puts into the request: the plugin never sees it.
//!
//! Every reconcile reads the zone (an observation: the host performs the
//! `GET` and calls again with the answer), compares the RRset served with
//! the spec, and when they differ asks the host to send one `PATCH`
//! (`REPLACE`) after the reconcile. The next reconcile reads again, so
//! drift made behind the object's back is repaired on the next look
//! (`spec.resyncSeconds`). Deleting the object sends a `DELETE` of the
//! RRset under the finalizer `dns.setpoint.dev/record`, released once the
//! record is gone.
//!
//! Failures go to the `Ready` condition with a reason (`Unauthorized`,
//! `Unreachable`, `ZoneNotFound`, `NotGranted`, `Rejected`, ...). The
//! first time a failure is seen it is written; when the status already says
//! so, the reconcile ends in a transient error, so the host's per-object
//! backoff paces the retries rather than a loop of status writes. A write
//! PowerDNS refuses is not sent again for that generation until the resync
//! period has passed. A request the host held back (rate limit, breaker)
//! reports nothing: it says nothing about PowerDNS; nor does a write that
//! could not connect once a later read gets an answer.
//!
//! The decisions are pure functions in [`plan`].

pub mod plan;
#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::Value;
use setpoint_plugin_sdk::{
    Condition, Ctx, Definition, Error, Event, HttpErrorKind, KindRef, Manifest, Object,
    PrinterColumn, Reconciler, Response, Time, export_reconciler, set_condition,
};

use plan::{DnsRecordSpec, Failure, Memory, Rrset, Step, Target, WRITE_ID};

/// The API version of `DnsRecord`.
pub const API_VERSION: &str = "dns.setpoint.dev/v1";
/// The finalizer that keeps a deleted object until its record is gone.
pub const FINALIZER: &str = "dns.setpoint.dev/record";

/// What a `DnsRecord` reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DnsRecordStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The record's absolute name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fqdn: Option<String>,
    /// What PowerDNS served at the last look (`null`: no such record).
    pub observed: Option<Rrset>,
    /// Writes for this generation wait until then after PowerDNS refused
    /// one or did not serve what it accepted (`null`: no wait).
    pub writes_held_until: Option<Time>,
    /// `Ready`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The DnsRecord kind's definition. The status stays free-form, as it
/// always was: the plugin writes it whole, and an older plugin's fields
/// are kept through an upgrade.
pub fn definition() -> Definition {
    let ready = "Ready";
    Definition::of::<DnsRecordSpec, Value>(KindRef::new(API_VERSION, "DnsRecord"))
        .short_name("dnsr")
        .column(PrinterColumn::string("FQDN", ".status.fqdn"))
        .column(PrinterColumn::string("Type", ".spec.type"))
        .column(PrinterColumn::condition("Ready", ready))
        .column(PrinterColumn::string(
            "Reason",
            format!(".status.conditions[?(@.type==\"{ready}\")].reason"),
        ))
}

/// The reconciler.
#[derive(Debug, Default)]
pub struct DnsRecordReconciler;

impl Reconciler for DnsRecordReconciler {
    type Spec = DnsRecordSpec;
    type Status = DnsRecordStatus;

    fn manifest(&self) -> Manifest {
        // The server is the object's choice, so the plugin asks for any
        // HTTP destination and any Secret; the operator's PluginGrant
        // says which ones it really gets.
        Manifest::new(
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
            KindRef::new(API_VERSION, "DnsRecord"),
        )
        .finalizer(FINALIZER)
        .destination("http://*:*")
        .destination("https://*:*")
        .secret("*")
        .define(definition())
    }

    fn reconcile(
        &self,
        record: &Object<DnsRecordSpec, DnsRecordStatus>,
        ctx: &Ctx,
    ) -> Result<Response<DnsRecordStatus>, Error> {
        if record.is_deleting() && !ctx.finalizing() {
            return Ok(Response::new());
        }
        let generation = record.metadata.generation;
        let target = match Target::from_spec(&record.spec) {
            Ok(target) => target,
            // Nothing this object could name was written: let it go.
            Err(_) if ctx.finalizing() => return Ok(Response::new().remove_finalizer()),
            Err(failure) => return report(record, ctx, None, failure),
        };
        let answer = ctx.fetch_result(&target.read())?;
        // The host held the read back (a rate limit, its breaker): nothing
        // was learnt about PowerDNS, so nothing is reported; the host
        // requeues the object when the hold ends. Reporting it would flip
        // the status between this and the next look's, a write each time.
        if let Err(held) = &answer
            && held.kind == HttpErrorKind::Throttled
        {
            return Err(Error::transient(format!(
                "the host holds requests to PowerDNS for now: {}",
                held.message
            )));
        }
        let observed = target.observe(&answer);
        let read_ok = observed.is_ok();
        // A write the host held back, or that could not reach PowerDNS at
        // all, was not applied: as if never asked, and this look's read
        // decides. (A failed connection while PowerDNS was down must not
        // be reported once it answers again: that would cost the record a
        // look of its own after the outage. Writes that reach nothing
        // cannot loop: the host's breaker holds them after a few.)
        let last_write = ctx.outcome(WRITE_ID).filter(|o| {
            !matches!(o, Err(e) if matches!(e.kind, HttpErrorKind::Throttled | HttpErrorKind::Connect))
        });
        let memory = Memory {
            last_write: last_write.map(|o| target.written(o)),
            held: held_failure(&record.status, generation, ctx.now()),
        };
        let resync = Duration::from_secs(target.resync_seconds);
        match plan::decide(&target, ctx.finalizing(), observed, &memory) {
            Step::InSync(rrset) => {
                let status = status_with(
                    record,
                    ctx,
                    Some(&target),
                    Some(Some(rrset)),
                    Condition::new("Ready", true, "InSync", "PowerDNS serves the record"),
                    None,
                );
                Ok(Response::new().status(status).requeue_after(resync))
            }
            Step::Write(observed) => {
                let (reason, verb) = match observed {
                    None => ("Creating", "creating"),
                    Some(_) => ("Updating", "updating"),
                };
                let message = format!(
                    "{verb} {}: PowerDNS serves {}, want {}",
                    target.describe(),
                    plan::show(observed.as_ref()),
                    plan::show(Some(&target.wanted))
                );
                // Retrying after a failure that backs off, the condition
                // keeps saying so until the write lands: flipping between
                // "Creating" and the failure would be a status write per
                // attempt, a loop the host's breaker stops.
                let retrying = ready_condition(&record.status)
                    .filter(|c| !c.is_true() && BACKOFF_REASONS.contains(&c.reason.as_str()))
                    .cloned();
                let ready = retrying
                    .clone()
                    .unwrap_or_else(|| Condition::new("Ready", false, reason, message.clone()));
                let status = status_with(record, ctx, Some(&target), Some(observed), ready, None);
                let mut response = Response::new()
                    .status(status)
                    .effect(target.replace())
                    .requeue_after(resync);
                if retrying.is_none() {
                    response = response.event(Event::normal(reason, message));
                }
                Ok(response)
            }
            Step::Delete(rrset) => {
                let message = format!("deleting {} from PowerDNS", target.describe());
                let status = status_with(
                    record,
                    ctx,
                    Some(&target),
                    Some(Some(rrset)),
                    Condition::new("Ready", false, "Deleting", message.clone()),
                    None,
                );
                Ok(Response::new()
                    .status(status)
                    .event(Event::normal("Deleting", message))
                    .effect(target.delete())
                    .requeue_after(resync))
            }
            Step::Release => Ok(Response::new().remove_finalizer()),
            Step::Fail(failure, observed) => {
                // What was seen, when the zone could be read at all.
                let observed = read_ok.then_some(observed);
                report(record, ctx, Some((&target, observed)), failure)
            }
        }
    }
}

/// The `Ready` reasons of failures the host's backoff paces
/// ([`Failure::retry_with_backoff`]).
const BACKOFF_REASONS: [&str; 4] = ["Unauthorized", "ZoneNotFound", "Unreachable", "NotGranted"];

fn ready_condition(status: &DnsRecordStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// A failure that holds writes, as the status reports it for this
/// generation, while its hold lasts.
fn held_failure(status: &DnsRecordStatus, generation: Option<i64>, now: Time) -> Option<Failure> {
    let until = status.writes_held_until?;
    if status.observed_generation != generation || now >= until {
        return None;
    }
    let ready = ready_condition(status)?;
    match ready.reason.as_str() {
        "Rejected" => Some(Failure::Rejected(ready.message.clone())),
        "NotConverging" => Some(Failure::NotConverging(ready.message.clone())),
        _ => None,
    }
}

/// The status with `ready` set, `observed` replaced when given, and the
/// write hold set or cleared.
fn status_with(
    record: &Object<DnsRecordSpec, DnsRecordStatus>,
    ctx: &Ctx,
    target: Option<&Target>,
    observed: Option<Option<Rrset>>,
    ready: Condition,
    writes_held_until: Option<Time>,
) -> DnsRecordStatus {
    let mut status = record.status.clone();
    let generation = record.metadata.generation;
    status.observed_generation = generation;
    if let Some(target) = target {
        status.fqdn = Some(target.fqdn.clone());
    }
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

/// Report `failure` on the object. A failure time may cure that the
/// status already shows ends in a transient error instead, so the host's
/// per-object backoff paces the retries; one that holds writes requeues
/// when the hold ends; an invalid spec waits for the spec to change.
fn report(
    record: &Object<DnsRecordSpec, DnsRecordStatus>,
    ctx: &Ctx,
    seen: Option<(&Target, Option<Option<Rrset>>)>,
    failure: Failure,
) -> Result<Response<DnsRecordStatus>, Error> {
    let (target, observed) = match seen {
        Some((target, observed)) => (Some(target), observed),
        None => (None, None),
    };
    let hold = failure.holds_writes().then(|| {
        // A hold already running is kept, so reporting it again changes nothing.
        held_failure(&record.status, record.metadata.generation, ctx.now())
            .and(record.status.writes_held_until)
            .unwrap_or_else(|| {
                let resync = target.map_or(30, |t| t.resync_seconds);
                ctx.now() + Duration::from_secs(resync)
            })
    });
    // A failure that backs off keeps the message it was first reported
    // with while its reason stays: a message that changes on every look
    // (a time, a counter) would be a status write per retry, a loop.
    let message = match ready_condition(&record.status) {
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
        record,
        ctx,
        target,
        observed,
        Condition::new("Ready", false, failure.reason(), message),
        hold,
    );
    let changed = status != record.status;
    if !changed && failure.retry_with_backoff() {
        return Err(Error::transient(format!(
            "{}: {}",
            failure.reason(),
            failure.message()
        )));
    }
    let mut response = Response::new().status(status);
    if changed {
        response = response.event(Event::warning(failure.reason(), failure.message()));
    }
    // Written now, a failure that backs off meets itself again in the
    // reconcile asked for here (the echo of the plugin's own status write
    // does not call it again), finds it reported, and from then on the
    // host's per-object backoff paces the retries.
    Ok(match hold {
        Some(until) => response.requeue_after(until.saturating_duration_since(ctx.now())),
        None if failure.retry_with_backoff() => response.requeue_after(FIRST_RETRY),
        None => response,
    })
}

export_reconciler!(DnsRecordReconciler);
