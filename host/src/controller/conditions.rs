//! What the controller says on the object itself when a reconcile did not
//! simply succeed: `Ready=False` with an event for a permanent error or a
//! hot loop, `ChildrenApplied=False` for desired children another object
//! holds, `RequeueThrottled`; and [`set_conditions`], the one way the
//! controller writes a condition of its own (through the narrow status
//! write).

use std::time::Duration;

use serde_json::{Value, json};

use super::{EventRecord, Manifest, Severity, Shared, events, respond};
use crate::api::{self, Api};
use crate::object::{KindInfo, Object, ObjectKey, meta, time};

/// The condition that reports desired children whose names another object
/// holds.
const CLASH_CONDITION: &str = "ChildrenApplied";

/// The condition types the host itself sets on reconciled objects: a
/// plugin's status patch keeps them unless it names them
/// (`respond::keep_host_conditions`).
pub(super) const HOST_CONDITIONS: [&str; 2] = [CLASH_CONDITION, super::effects::EFFECTS_CONDITION];

/// Report desired children whose names another object holds: a warning
/// event naming the holder for each, and `ChildrenApplied=False` with all of
/// them; once none is left, the condition goes.
pub(super) async fn report_clashes(
    shared: &Shared,
    api: &Api,
    manifest: &Manifest,
    key: &ObjectKey,
    clashes: &[respond::Clash],
) {
    let Some(object) = shared.informer.get(key) else {
        return;
    };
    let has_condition = object["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == CLASH_CONDITION));
    if clashes.is_empty() && !has_condition {
        return;
    }
    for clash in clashes {
        let event = EventRecord {
            severity: Severity::Warning,
            reason: "ChildNameClash".into(),
            message: format!(
                "{}; the other children were applied, and this one will be when the name is free",
                clash.describe()
            ),
        };
        if let Err(err) = events::record(api, &manifest.name, &object, &event).await {
            tracing::warn!(%err, "could not record event");
        }
    }
    let condition = (!clashes.is_empty()).then(|| {
        let described: Vec<String> = clashes.iter().map(respond::Clash::describe).collect();
        json!({
            "type": CLASH_CONDITION, "status": "False", "reason": "NameClash",
            "message": format!("{}; the other children were applied", described.join("; ")),
        })
    });
    let written = set_conditions(api, &shared.kind, key, |latest| {
        conditions_with(latest, CLASH_CONDITION, condition.clone())
    })
    .await;
    if let Err(err) = written {
        tracing::debug!(%err, "could not write the {CLASH_CONDITION} condition");
    }
}

/// The controller's one way to write its own conditions: the narrow status
/// write ([`Api::patch_status`]), `conditions` computed from the stored
/// object (the cache may not show this reconcile's own last write yet) and
/// computed again over a concurrent write. `conditions` answers the whole
/// new list (a merge patch replaces lists), or `None` when nothing changes.
pub(super) async fn set_conditions(
    api: &Api,
    kind: &KindInfo,
    key: &ObjectKey,
    mut conditions: impl FnMut(&Object) -> Option<Value>,
) -> Result<Option<Object>, api::Error> {
    api.patch_status_with(kind, key.namespace.as_deref(), &key.name, None, |latest| {
        conditions(latest).map(|list| json!({ "conditions": list }))
    })
    .await
}

/// `object`'s conditions with the one of type `kind` replaced by
/// `condition` (or removed, for `None`); `None` if that changes nothing.
pub(super) fn conditions_with(
    object: &Object,
    kind: &str,
    condition: Option<Value>,
) -> Option<Value> {
    let mut conditions: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let position = conditions.iter().position(|c| c["type"] == kind);
    match (position, condition) {
        (None, None) => return None,
        (Some(i), None) => {
            conditions.remove(i);
        }
        (Some(i), Some(mut next)) => {
            let current = &conditions[i];
            if ["status", "reason", "message"]
                .iter()
                .all(|f| current[*f] == next[*f])
            {
                return None;
            }
            next["lastTransitionTime"] = if current["status"] == next["status"] {
                current["lastTransitionTime"].clone()
            } else {
                json!(time::now_rfc3339())
            };
            conditions[i] = next;
        }
        (None, Some(mut next)) => {
            next["lastTransitionTime"] = json!(time::now_rfc3339());
            conditions.push(next);
        }
    }
    Some(json!(conditions))
}

/// Report on the object that its requeues are being slowed down: a
/// warning event (once per idle streak, see `requeue`).
pub(super) async fn report_throttled(
    shared: &Shared,
    api: &Api,
    manifest: &Manifest,
    key: &ObjectKey,
    requested: Duration,
    after: Duration,
) {
    let Some(object) = shared.informer.get(key) else {
        return;
    };
    let message = format!(
        "the reconciler keeps asking to be called again after {requested:?} with nothing to do; \
         its calls of this object are slowed down (next in {after:?}, at most one every {:?}) until something changes",
        shared.requeues.ceiling()
    );
    tracing::warn!(plugin = %manifest.name, object = %key, "{message}");
    let event = EventRecord {
        severity: Severity::Warning,
        reason: "RequeueThrottled".into(),
        message,
    };
    if let Err(err) = events::record(api, &manifest.name, &object, &event).await {
        tracing::warn!(%err, "could not record event");
    }
}

/// Report why an object stopped on the object itself (`reason`:
/// `ReconcileError`, `HotLoop`): record a warning event and write a `Ready=False` condition with
/// `reason` and `message`. Returns the version that write made, if it was
/// made on top of the version `based_on` (what the failed reconcile saw).
pub(super) async fn report_not_ready(
    shared: &Shared,
    api: &Api,
    manifest: &Manifest,
    key: &ObjectKey,
    (reason, message): (&str, &str),
    based_on: Option<&str>,
) -> Option<String> {
    let object = shared.informer.get(key)?;
    let event = EventRecord {
        severity: Severity::Warning,
        reason: reason.into(),
        message: message.to_owned(),
    };
    if let Err(err) = events::record(api, &manifest.name, &object, &event).await {
        tracing::warn!(%err, "could not record event");
    }
    let mut on_what_failed = false;
    let written = set_conditions(api, &shared.kind, key, |latest| {
        on_what_failed = based_on.is_some() && meta::resource_version(latest) == based_on;
        not_ready_conditions(latest, reason, message)
    })
    .await;
    match written {
        Ok(written) => written
            .filter(|_| on_what_failed)
            .and_then(|w| meta::resource_version(&w).map(str::to_owned)),
        Err(err) => {
            tracing::debug!(%err, "could not write the Ready=False condition");
            None
        }
    }
}

/// `object`'s conditions with `Ready=False` carrying `reason` and
/// `message`, or `None` if it already has that condition.
fn not_ready_conditions(object: &Object, reason: &str, message: &str) -> Option<Value> {
    let mut conditions: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = json!({
        "type": "Ready", "status": "False", "reason": reason, "message": message,
        "observedGeneration": meta::generation(object),
    });
    let existing = conditions.iter_mut().find(|c| c["type"] == "Ready");
    match existing {
        Some(c)
            if c["status"] == "False"
                && c["reason"] == reason
                && c["message"] == message
                && c["observedGeneration"] == ready["observedGeneration"] =>
        {
            return None;
        }
        Some(c) => {
            let mut next = ready;
            next["lastTransitionTime"] = if c["status"] == "False" {
                c["lastTransitionTime"].clone()
            } else {
                json!(time::now_rfc3339())
            };
            *c = next;
        }
        None => {
            let mut next = ready;
            next["lastTransitionTime"] = json!(time::now_rfc3339());
            conditions.push(next);
        }
    }
    Some(json!(conditions))
}
