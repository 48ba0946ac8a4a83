//! What a plan reports of one object: its net change between the store
//! and the overlay (created, changed, status only, deleted, deletion
//! started, or nothing), told apart from what only the store's bookkeeping
//! changes, and shown without the overlay's own resource versions.

use serde_json::Value;

use super::report::{Action, Cause, Change, ObjectRef};
use crate::object::{Object, meta};

/// An object by kind, namespace and name.
pub(super) fn object_ref(object: &Object) -> ObjectRef {
    ObjectRef {
        api_version: meta::api_version(object).to_owned(),
        kind: meta::kind(object).to_owned(),
        namespace: meta::namespace(object).map(str::to_owned),
        name: meta::name(object).to_owned(),
    }
}

/// An object with what only the store's bookkeeping changes taken out,
/// for comparing two versions (and its status, unless `keep_status`).
pub(super) fn without_bookkeeping(object: &Object, keep_status: bool) -> Value {
    let mut object = object.clone();
    if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["resourceVersion", "managedFields", "generation"] {
            m.remove(field);
        }
    }
    if !keep_status && let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    object
}

/// An object as a plan shows it: without the resource version (the
/// overlay's own, never the store's) and managed fields.
fn shown(mut object: Object) -> Value {
    if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    object
}

/// The change from `before` (the store's object) to `after` (the
/// overlay's), put down to `causes` in order; `None` when nothing but
/// bookkeeping differs (or the object came and went within the plan).
pub(super) fn net_change(
    before: Option<Object>,
    after: Option<Object>,
    causes: Vec<Cause>,
) -> Option<Change> {
    let action = match (&before, &after) {
        (None, None) => return None,
        (None, Some(_)) => Action::Create,
        (Some(_), None) => Action::Delete,
        (Some(before), Some(after)) => {
            if without_bookkeeping(before, true) == without_bookkeeping(after, true) {
                return None;
            }
            if meta::deletion_timestamp(after).is_some()
                && meta::deletion_timestamp(before).is_none()
            {
                Action::Deleting
            } else if without_bookkeeping(before, false) == without_bookkeeping(after, false) {
                Action::Status
            } else {
                Action::Update
            }
        }
    };
    let object = object_ref(after.as_ref().or(before.as_ref())?);
    let mut causes = causes.into_iter();
    Some(Change {
        action,
        object,
        cause: causes.next().unwrap_or(Cause::Request),
        then: causes.collect(),
        before: before.map(shown),
        after: after.map(shown),
        hidden: false,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(rv: &str, spec: Value, status: Value) -> Object {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "resourceVersion": rv, "generation": 1},
            "spec": spec, "status": status})
    }

    #[test]
    fn each_object_is_classified_by_what_really_changed() {
        let action = |before: Option<Object>, after: Option<Object>| {
            net_change(before, after, vec![Cause::Request]).map(|c| c.action)
        };
        let base = pod("1", json!({"a": 1}), json!({"ready": false}));
        assert_eq!(action(None, Some(base.clone())), Some(Action::Create));
        assert_eq!(action(Some(base.clone()), None), Some(Action::Delete));
        assert_eq!(action(None, None), None);
        assert_eq!(
            action(
                Some(base.clone()),
                Some(pod("9", json!({"a": 1}), json!({"ready": false})))
            ),
            None,
            "a new resource version alone is no change"
        );
        assert_eq!(
            action(
                Some(base.clone()),
                Some(pod("9", json!({"a": 1}), json!({"ready": true})))
            ),
            Some(Action::Status)
        );
        assert_eq!(
            action(
                Some(base.clone()),
                Some(pod("9", json!({"a": 2}), json!({"ready": true})))
            ),
            Some(Action::Update)
        );
        let mut deleting = base.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-26T00:00:00Z");
        assert_eq!(action(Some(base), Some(deleting)), Some(Action::Deleting));
    }

    #[test]
    fn the_first_cause_leads_and_the_overlays_versions_are_not_shown() {
        let change = net_change(
            None,
            Some(pod("7", json!({}), json!({}))),
            vec![Cause::Request, Cause::GarbageCollector],
        )
        .unwrap();
        assert_eq!(
            (change.cause, change.then),
            (Cause::Request, vec![Cause::GarbageCollector])
        );
        let after = change.after.unwrap();
        assert!(
            after["metadata"].get("resourceVersion").is_none(),
            "{after}"
        );
        assert_eq!(after["metadata"]["generation"], 1, "generation is shown");
    }
}
