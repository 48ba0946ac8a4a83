//! What the informer's cache indexes of an object (its key, owners,
//! labels and whether it is not `Ready`), read from the decoded object or
//! from its JSON text with only `metadata` and `status.conditions` decoded: the cache keeps text, and decoding a whole 1 KiB
//! object to find its labels costs ten times the text in allocations.

use crate::object::{Object, ObjectKey, meta};

/// An object's key and the index entries it belongs to.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Terms {
    pub key: ObjectKey,
    /// `metadata.resourceVersion`, if set.
    pub version: Option<Box<str>>,
    /// The uids of its owner references.
    pub owners: Vec<String>,
    /// Its labels with string values, as `(key, value)`.
    pub labels: Vec<(String, String)>,
    /// Its `Ready` condition, when that is not `True`.
    pub not_ready: Option<NotReady>,
}

/// An object whose `Ready` condition is not `True`, as the informer's
/// readiness index keeps it (objects without a `Ready` condition are not
/// in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotReady {
    /// `Ready` is `False` (not `Unknown` or another word).
    pub failed: bool,
    /// Its reason is `HotLoop`: the circuit breaker holds the object.
    pub hot_loop: bool,
    /// When `Ready` last changed (`lastTransitionTime`), Unix milliseconds.
    pub since_unix_ms: Option<i64>,
}

impl NotReady {
    /// The `Ready` condition of `object`, if it is there and not `True`.
    pub fn of(object: &Object) -> Option<Self> {
        let ready = meta::condition(object, "Ready")?;
        let text = |field: &str| ready.get(field).and_then(serde_json::Value::as_str);
        let status = text("status").unwrap_or("Unknown");
        (status != "True").then(|| Self {
            failed: status == "False",
            hot_loop: text("reason") == Some("HotLoop"),
            since_unix_ms: text("lastTransitionTime")
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.timestamp_millis()),
        })
    }
}

impl Terms {
    /// The terms of a decoded object.
    pub(super) fn of(object: &Object) -> Self {
        Self {
            key: ObjectKey::of(object),
            version: meta::resource_version(object).map(Into::into),
            owners: meta::owner_uids(object).map(str::to_owned).collect(),
            labels: meta::labels(object)
                .into_iter()
                .flatten()
                .filter_map(|(label, value)| Some((label.clone(), value.as_str()?.to_owned())))
                .collect(),
            not_ready: NotReady::of(object),
        }
    }

    /// The terms of an object given as JSON text: the same as
    /// [`Terms::of`] the decoded text. Only `metadata` and
    /// `status.conditions` are decoded, the rest skipped; text this does not take (a repeated `metadata`, nesting past
    /// the parser's limit) is decoded whole, as the store reads it.
    pub(super) fn of_json(json: &[u8]) -> Option<Self> {
        crate::object::codec::decode_head(json)
            .ok()
            .map(|head| Self::of(&head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_gives_the_terms_the_decoded_object_gives() {
        let objects = [
            json!({"kind": "Pod", "metadata": {"name": "web-0", "namespace": "ns", "resourceVersion": "7",
                "labels": {"app": "web", "n": 3}, "ownerReferences": [{"uid": "rs-1"}, {"name": "no-uid"}]},
                "spec": {"deep": [[[1]]]}}),
            json!({"metadata": {"name": "cluster-wide", "namespace": ""}}),
            json!({"metadata": null, "spec": {}}),
            json!({"spec": {"metadata": {"name": "not this one"}}}),
            json!({"metadata": {"name": 5, "labels": [], "ownerReferences": {}}}),
            json!({"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [
                {"type": "Scheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "HotLoop",
                 "lastTransitionTime": "2026-11-28T03:00:00Z"}]}}),
            json!({"metadata": {"name": "q"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"metadata": {"name": "r"}, "status": {"conditions": "not a list"}}),
        ];
        for object in objects {
            let text = serde_json::to_vec(&object).unwrap();
            assert_eq!(Terms::of_json(&text), Some(Terms::of(&object)), "{object}");
        }
        assert_eq!(
            Terms::of(&objects_first())
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
            ["app=web"],
            "labels with other values are not indexed"
        );
    }

    #[test]
    fn only_a_ready_condition_that_is_not_true_is_indexed() {
        let ready = |conditions: serde_json::Value| {
            Terms::of(&json!({"metadata": {"name": "p"}, "status": {"conditions": conditions}}))
                .not_ready
        };
        assert_eq!(ready(json!([{"type": "Ready", "status": "True"}])), None);
        assert_eq!(ready(json!([{"type": "Other", "status": "False"}])), None);
        assert_eq!(
            ready(
                json!([{"type": "Ready", "status": "False", "reason": "HotLoop",
                "lastTransitionTime": "1970-01-01T00:00:01Z"}])
            ),
            Some(NotReady {
                failed: true,
                hot_loop: true,
                since_unix_ms: Some(1000)
            })
        );
        assert_eq!(
            ready(json!([{"type": "Ready", "status": "Unknown"}])),
            Some(NotReady {
                failed: false,
                hot_loop: false,
                since_unix_ms: None
            })
        );
    }

    fn objects_first() -> Object {
        json!({"metadata": {"labels": {"app": "web", "n": 3}}})
    }

    #[test]
    fn text_the_head_parse_does_not_take_is_decoded_whole() {
        let repeated = br#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#;
        let whole: Object = serde_json::from_slice(repeated).unwrap();
        assert_eq!(Terms::of_json(repeated), Some(Terms::of(&whole)));
        assert_eq!(Terms::of_json(repeated).unwrap().key.name, "b");

        let mut deep = json!("bottom");
        for _ in 0..300 {
            deep = json!([deep]);
        }
        let object = json!({"metadata": {"name": "deep", "labels": {"a": "b"}}, "spec": deep});
        let text = serde_json::to_vec(&object).unwrap();
        assert_eq!(Terms::of_json(&text), Some(Terms::of(&object)));
        assert_eq!(Terms::of_json(b"not json"), None);
    }
}
