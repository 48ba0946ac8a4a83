//! What the informer's cache indexes of an object (its key, owners and
//! labels), read from the decoded object or from its JSON text with only
//! `metadata` decoded: the cache keeps text, and decoding a whole 1 KiB
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
        }
    }

    /// The terms of an object given as JSON text: the same as
    /// [`Terms::of`] the decoded text. Only `metadata` is decoded, the rest
    /// skipped; text this does not take (a repeated `metadata`, nesting past
    /// the parser's limit) is decoded whole, as the store reads it.
    pub(super) fn of_json(json: &[u8]) -> Option<Self> {
        crate::object::codec::decode_metadata(json)
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
