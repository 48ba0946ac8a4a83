//! The controller's side of external effects: the writes performed after
//! a response is applied, their outcomes kept for the next reconcile of
//! the object, and the `EffectsAllowed` condition and events that report
//! refusals and pending grants. The requests themselves, and the rounds
//! of reads before a response is final, are `crate::egress`'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::conditions::{conditions_with, set_conditions};
use super::{Answer, EventRecord, Manifest, Response, Severity, Shared, events};
use crate::api::Api;
use crate::egress::{Egress, Report, Scope};
use crate::object::{Object, ObjectKey, meta};

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
    /// Keys whose last requests failed at a destination, by destination:
    /// queued again when it recovers.
    failed_at: Mutex<HashMap<String, std::collections::HashSet<ObjectKey>>>,
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
        self.failed_at(key, &[]);
    }

    /// The destinations `key`'s last requests failed at (none: it waits
    /// for none any more).
    fn failed_at(&self, key: &ObjectKey, destinations: &[String]) {
        let mut failed = self.failed_at.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_empty() && destinations.is_empty() {
            return;
        }
        failed.retain(|destination, keys| {
            if !destinations.contains(destination) {
                keys.remove(key);
            }
            !keys.is_empty()
        });
        for destination in destinations {
            failed
                .entry(destination.clone())
                .or_default()
                .insert(key.clone());
        }
    }

    /// Destinations some key waits for.
    pub fn waiting_destinations(&self) -> Vec<String> {
        self.failed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Keys whose next reconcile this state still serves: outcomes to
    /// hand over, or a destination to wait for (a checkpoint owes them a
    /// reconcile).
    pub fn keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = self
            .outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        let failed = self.failed_at.lock().unwrap_or_else(|p| p.into_inner());
        keys.extend(failed.values().flatten().cloned());
        keys
    }

    /// The keys waiting for `destination` to recover; forgotten here.
    pub fn recovered(&self, destination: &str) -> Vec<ObjectKey> {
        self.failed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(destination)
            .map(|keys| keys.into_iter().collect())
            .unwrap_or_default()
    }
}

/// The reconcile's scope for egress: requests of an object being
/// finalized are urgent, and waiting on the network lets `parker` go.
pub(super) fn scope<'a>(
    shared: &Shared,
    manifest: &'a Manifest,
    object: &'a Object,
    key: &ObjectKey,
    egress: &Egress,
    finalizing: bool,
    parker: crate::egress::Parker,
) -> Scope<'a> {
    Scope {
        plugin: manifest,
        object,
        key: recent_key(&shared.kind.kind, key),
        deadline: tokio::time::Instant::now() + egress.config().reconcile_budget,
        wait_deadline: tokio::time::Instant::now() + egress.config().max_wait,
        urgent: finalizing,
        parker,
        waited: Default::default(),
    }
}

pub use crate::egress::recent_key;

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
    shared.effects.failed_at(key, &report.failed_at);
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
    // The host's own condition: its echo shows the reconciler nothing
    // new, so it does not queue the object again.
    let writing = shared.echoes.writing(key);
    let written = set_conditions(api, &shared.kind, key, |latest| {
        conditions_with(latest, EFFECTS_CONDITION, Some(condition.clone()))
    })
    .await;
    match written {
        Ok(Some(object)) => {
            writing.wrote(cached, &object);
            // Read your own writes: the key's next reconcile waits until
            // the cache shows this version, so its status patch is not made
            // on the version before (a conflict, and a turn more).
            if let Some(revision) = meta::resource_version(&object).and_then(|v| v.parse().ok()) {
                shared
                    .pending_writes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(key.clone())
                    .or_default()
                    .push((shared.kind.clone(), revision));
            }
        }
        Ok(None) => writing.wrote(cached, cached),
        Err(err) => {
            tracing::debug!(%err, "could not write the {EFFECTS_CONDITION} condition");
        }
    }
}
