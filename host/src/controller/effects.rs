//! The controller's side of external effects: rounds (a response that
//! wants reads gets them performed and the reconciler called again, a
//! bounded number of times), the writes performed after a response is
//! applied, their outcomes kept for the next reconcile of the object, and
//! the `EffectsAllowed` condition and events that report refusals and
//! pending grants. The requests themselves are `crate::egress`'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::conditions::{conditions_with, set_conditions};
use super::{
    Answer, EventRecord, Manifest, ReconcileError, Request, Response, Severity, Shared, events,
};
use crate::api::Api;
use crate::egress::{Egress, Report, Scope};
use crate::object::{Object, ObjectKey};

/// The condition that says whether the plugin's external requests are
/// allowed: `False` with the refusal's reason (`DestinationNotGranted`, ...)
/// or `GrantPending` (no grant yet), `True` when its requests were allowed
/// (`Granted` when all it declared is granted, `PartlyGranted` listing
/// what is not).
pub const EFFECTS_CONDITION: &str = "EffectsAllowed";

/// Per-key state between reconciles: outcomes of writes, and how long a
/// destination asked to be left alone.
#[derive(Default)]
pub(super) struct KeyState {
    outcomes: Mutex<HashMap<ObjectKey, Vec<Answer>>>,
    holds: Mutex<HashMap<ObjectKey, Duration>>,
}

impl KeyState {
    /// The outcomes of the last writes of `key`. Kept until the plugin has
    /// answered a reconcile that saw them ([`KeyState::seen_outcomes`]),
    /// and again when that answer could not be applied because the object
    /// moved on ([`KeyState::keep_outcomes`]): a conflict must not lose
    /// them, and an answer that is an error must not see them forever.
    pub fn outcomes(&self, key: &ObjectKey) -> Vec<Answer> {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// The plugin answered a reconcile that saw the outcomes: they are done with.
    pub fn seen_outcomes(&self, key: &ObjectKey) {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Hand `outcomes` to the next reconcile of `key`.
    pub fn keep_outcomes(&self, key: &ObjectKey, outcomes: Vec<Answer>) {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), outcomes);
    }

    /// How long `key` should wait before its next reconcile, if a limit
    /// or `Retry-After` said so in its last one; handed over once.
    pub fn take_hold(&self, key: &ObjectKey) -> Option<Duration> {
        self.holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)
    }

    fn hold(&self, key: &ObjectKey, after: Duration) {
        self.holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), after);
    }

    /// Forget a key that is gone.
    pub fn forget(&self, key: &ObjectKey) {
        self.seen_outcomes(key);
        self.take_hold(key);
    }
}

/// The reconcile's scope for egress.
pub(super) fn scope<'a>(
    shared: &Shared,
    manifest: &'a Manifest,
    object: &'a Object,
    key: &ObjectKey,
    egress: &Egress,
) -> Scope<'a> {
    Scope {
        plugin: manifest,
        object,
        key: recent_key(&shared.kind.kind, key),
        deadline: tokio::time::Instant::now() + egress.config().reconcile_budget,
    }
}

/// The key `describe` finds an object's recent requests by.
pub fn recent_key(kind: &str, key: &ObjectKey) -> String {
    format!("{kind}/{key}")
}

/// The reads of `response` that `request` has no answer to.
fn unanswered<'a>(
    request: &Request,
    response: &'a Response,
) -> Vec<&'a crate::controller::HttpRequest> {
    response
        .observe
        .iter()
        .filter(|r| !request.observations.iter().any(|(id, _)| *id == r.id))
        .collect()
}

/// Call the reconciler again while its response wants reads it has no
/// answer to: perform them, add the answers to the request and call again,
/// at most `max_rounds` calls in all. `call` makes one call.
pub(crate) async fn rounds<F, Fut>(
    egress: &Egress,
    scope: &Scope<'_>,
    mut request: Request,
    mut response: Response,
    report: &mut Report,
    call: F,
) -> Result<(Request, Response), ReconcileError>
where
    F: Fn(Request) -> Fut,
    Fut: std::future::Future<
            Output = Result<(Request, Result<Response, ReconcileError>), ReconcileError>,
        >,
{
    let config = egress.config();
    loop {
        check_sizes(config.max_requests, &response)?;
        let wanted: Vec<_> = unanswered(&request, &response)
            .into_iter()
            .cloned()
            .collect();
        if wanted.is_empty() {
            return Ok((request, response));
        }
        if request.round + 1 >= config.max_rounds {
            return Err(ReconcileError::Transient(format!(
                "the reconciler still wants reads after {} calls ({}); \
                 ask for reads together (fetch_all) or in fewer steps",
                config.max_rounds,
                wanted
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let answers = egress.observe(scope, &wanted, report).await;
        request.observations.extend(answers);
        request.round += 1;
        let (back, result) = call(request).await?;
        request = back;
        response = result?;
    }
}

fn check_sizes(max: usize, response: &Response) -> Result<(), ReconcileError> {
    for (list, n) in [
        ("observe", response.observe.len()),
        ("effects", response.effects.len()),
    ] {
        if n > max {
            return Err(ReconcileError::Permanent(format!(
                "the response asks for {n} {list} requests, over the limit of {max}"
            )));
        }
    }
    Ok(())
}

/// Perform the writes of an applied response, in order, and keep their
/// outcomes for the object's next reconcile. Returns whether every write
/// got a successful answer.
pub(super) async fn write(
    shared: &Shared,
    egress: &Egress,
    scope: &Scope<'_>,
    key: &ObjectKey,
    response: &Response,
    report: &mut Report,
) -> bool {
    if response.effects.is_empty() {
        return true;
    }
    let outcomes = egress.write(scope, &response.effects, report).await;
    let all_ok = outcomes
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|r| r.status < 400));
    shared.effects.keep_outcomes(key, outcomes);
    all_ok
}

/// Report what the requests came to: a hold for the next requeue, a
/// Warning event per refusal, and the `EffectsAllowed` condition (for
/// plugins that declare destinations or secrets, or that were refused).
pub(super) async fn report(
    shared: &Shared,
    api: &Api,
    egress: &Egress,
    manifest: &Manifest,
    key: &ObjectKey,
    report: &Report,
) {
    if let Some(after) = report.hold {
        shared.effects.hold(key, after);
    }
    let declares = !manifest.destinations.is_empty() || !manifest.secrets.is_empty();
    if !declares && report.refused.is_empty() {
        return;
    }
    let Some(object) = shared.informer.get(key) else {
        return;
    };
    let mut seen = Vec::new();
    for refusal in &report.refused {
        let id = (refusal.destination.as_str(), refusal.reason);
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let event = EventRecord {
            severity: Severity::Warning,
            reason: refusal.reason.to_owned(),
            message: format!("external request refused, not sent: {}", refusal.message),
        };
        if let Err(err) = events::record(api, &manifest.name, &object, &event).await {
            tracing::warn!(%err, "could not record event");
        }
    }
    let condition = if let Some(first) = report.refused.first() {
        let messages: Vec<&str> = report.refused.iter().map(|r| r.message.as_str()).collect();
        json!({"type": EFFECTS_CONDITION, "status": "False", "reason": first.reason,
               "message": messages.join("; ")})
    } else {
        let pending = egress.pending(manifest).await;
        if pending.items.is_empty() {
            json!({"type": EFFECTS_CONDITION, "status": "True", "reason": "Granted",
                   "message": "every destination and secret the plugin declares is granted"})
        } else if pending.granted {
            // An operator who grants less than a plugin declares (one
            // server for a plugin that may talk to any) is practising least
            // privilege, not forgetting: the object's requests so far were
            // allowed, and one outside the grant turns this False, naming
            // its destination. What is left out stays visible here.
            json!({"type": EFFECTS_CONDITION, "status": "True", "reason": "PartlyGranted",
                   "message": format!(
                       "requests allowed; declared by plugin {} but not granted (PluginGrant {}), \
                        refused if used: {}",
                       manifest.name, manifest.name, pending.items.join("; "))})
        } else {
            json!({"type": EFFECTS_CONDITION, "status": "False", "reason": "GrantPending",
                   "message": format!(
                       "declared by plugin {} but not granted (PluginGrant {}): {}",
                       manifest.name, manifest.name, pending.items.join("; "))})
        }
    };
    write_condition(shared, api, key, &object, condition).await;
}

async fn write_condition(
    shared: &Shared,
    api: &Api,
    key: &ObjectKey,
    cached: &Arc<Object>,
    condition: serde_json::Value,
) {
    // The cached object answers the usual case (nothing to change) without
    // a read of the store.
    if conditions_with(cached, EFFECTS_CONDITION, Some(condition.clone())).is_none() {
        return;
    }
    let written = set_conditions(api, &shared.kind, key, |latest| {
        conditions_with(latest, EFFECTS_CONDITION, Some(condition.clone()))
    })
    .await;
    if let Err(err) = written {
        tracing::debug!(%err, "could not write the {EFFECTS_CONDITION} condition");
    }
}
