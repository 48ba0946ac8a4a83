//! What the informer's cache indexes of an object (its key, owners,
//! labels and whether it is not `Ready`), read from the decoded object or
//! from its JSON text with only `metadata` and `status.conditions` read:
//! a list brings text, and decoding a whole 1 KiB object to find its
//! labels costs ten times the text in allocations.

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

    /// The terms of an object's JSON text, the same as [`Terms::of`] of
    /// the decoded text: read straight from the text where it has the
    /// shape objects have (no value built, nothing but the kept strings
    /// allocated), else from its decoded head
    /// ([`codec::decode_head`](crate::object::codec::decode_head)), which
    /// takes any text the store reads.
    pub(super) fn of_json(json: &[u8]) -> Option<Self> {
        if let Ok(head) = serde_json::from_slice::<text::Head>(json) {
            return Some(head.terms());
        }
        crate::object::codec::decode_head(json)
            .ok()
            .map(|head| Self::of(&head))
    }

    /// The terms of an object's bytes as stored, written at `revision`:
    /// stored bytes carry no resource version, the store's revision is it.
    pub(super) fn of_stored(bytes: &[u8], revision: i64) -> Option<Self> {
        let mut terms = Self::of_json(bytes)?;
        terms.version = Some(revision.to_string().into());
        Some(terms)
    }
}

/// The terms read straight from an object's text, as [`Terms::of`] reads
/// them from the decoded object: a member of another type than a string
/// where a string is read counts as absent, as `as_str` makes it. Text of
/// another shape (a member repeated, a list that is not one) fails the
/// parse, and the caller decodes it instead.
mod text {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use super::{NotReady, Terms};
    use crate::object::ObjectKey;

    #[derive(Deserialize)]
    pub(super) struct Head<'a> {
        #[serde(borrow, default)]
        metadata: Option<Metadata<'a>>,
        #[serde(borrow, default)]
        status: Option<Status<'a>>,
    }

    #[derive(Deserialize)]
    struct Metadata<'a> {
        #[serde(borrow, default)]
        name: Str<'a>,
        #[serde(borrow, default)]
        namespace: Str<'a>,
        #[serde(borrow, default, rename = "resourceVersion")]
        resource_version: Str<'a>,
        #[serde(default, deserialize_with = "labels")]
        labels: Option<Vec<Label<'a>>>,
        #[serde(borrow, default, rename = "ownerReferences")]
        owner_references: Option<Vec<Owner<'a>>>,
    }

    #[derive(Deserialize)]
    struct Owner<'a> {
        #[serde(borrow, default)]
        uid: Str<'a>,
    }

    #[derive(Deserialize)]
    struct Status<'a> {
        #[serde(borrow, default)]
        conditions: Option<Vec<Condition<'a>>>,
    }

    #[derive(Deserialize)]
    struct Condition<'a> {
        #[serde(borrow, default, rename = "type")]
        kind: Str<'a>,
        #[serde(borrow, default)]
        status: Str<'a>,
        #[serde(borrow, default)]
        reason: Str<'a>,
        #[serde(borrow, default, rename = "lastTransitionTime")]
        last_transition_time: Str<'a>,
    }

    /// A JSON value kept only if it is a string.
    #[derive(Default)]
    struct Str<'a>(Option<Cow<'a, str>>);

    impl Str<'_> {
        fn get(&self) -> Option<&str> {
            self.0.as_deref()
        }
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
        fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct StrVisitor;
            impl<'de> Visitor<'de> for StrVisitor {
                type Value = Str<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("any JSON value")
                }
                fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                    Ok(Str(Some(Cow::Borrowed(v))))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(Str(Some(Cow::Owned(v.to_owned()))))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                    Ok(Str(Some(Cow::Owned(v))))
                }
                fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                    Ok(Str(None))
                }
                fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                    Ok(Str(None))
                }
                fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                    Ok(Str(None))
                }
                fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                    Ok(Str(None))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                    Ok(Str(None))
                }
                fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                    Ok(Str(None))
                }
                fn visit_some<D: de::Deserializer<'de>>(
                    self,
                    d: D,
                ) -> Result<Self::Value, D::Error> {
                    Str::deserialize(d)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Str(None))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Str(None))
                }
            }
            deserializer.deserialize_any(StrVisitor)
        }
    }

    /// One label: a map entry read as a pair.
    struct Label<'a>(Cow<'a, str>, Str<'a>);

    /// `labels` as a list of pairs, read from the JSON object (a repeated
    /// label fails the parse, as the decoded object keeps only the last).
    fn labels<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Vec<Label<'de>>>, D::Error> {
        struct LabelsVisitor;
        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = Option<Vec<Label<'de>>>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of labels")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut labels: Vec<Label<'de>> = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let value: Str<'de> = map.next_value()?;
                    if labels.iter().any(|l| l.0 == key) {
                        return Err(de::Error::custom("a repeated label"));
                    }
                    labels.push(Label(key, value));
                }
                Ok(Some(labels))
            }
        }
        d.deserialize_any(LabelsVisitor)
    }

    impl Head<'_> {
        pub(super) fn terms(self) -> Terms {
            let metadata = self.metadata;
            let meta = metadata.as_ref();
            let key = ObjectKey::new(
                meta.and_then(|m| m.namespace.get())
                    .filter(|ns| !ns.is_empty()),
                meta.and_then(|m| m.name.get()).unwrap_or(""),
            );
            let version = meta
                .and_then(|m| m.resource_version.get())
                .filter(|rv| !rv.is_empty())
                .map(Into::into);
            let owners = meta
                .and_then(|m| m.owner_references.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|o| o.uid.get().map(str::to_owned))
                .collect();
            let mut labels: Vec<(String, String)> = meta
                .and_then(|m| m.labels.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|Label(k, v)| Some((k.to_string(), v.get()?.to_owned())))
                .collect();
            // As the decoded object's map orders them.
            labels.sort();
            let ready = self
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.kind.get() == Some("Ready"));
            let not_ready = ready.and_then(|c| {
                let status = c.status.get().unwrap_or("Unknown");
                (status != "True").then(|| NotReady {
                    failed: status == "False",
                    hot_loop: c.reason.get() == Some("HotLoop"),
                    since_unix_ms: c
                        .last_transition_time
                        .get()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| t.timestamp_millis()),
                })
            });
            Terms {
                key,
                version,
                owners,
                labels,
                not_ready,
            }
        }
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
            json!({"metadata": {"name": "esc\"aped\u{e9}", "namespace": "", "resourceVersion": "",
                "labels": {"a": "1", "b": null, "c": {"x": 1}, "d": [1], "e": true, "f": "t\tab"},
                "ownerReferences": [{"uid": 7}, {"uid": "u"}, {"kind": "X"}],
                "annotations": {"big": "x"}, "managedFields": [{"fieldsV1": {"f:spec": {}}}]},
                "status": null}),
            json!({"metadata": {"name": "s", "labels": null, "ownerReferences": null},
                "status": {"conditions": null}}),
            json!({"metadata": {"name": "t", "labels": ["a"], "ownerReferences": [1, "x"]}}),
            json!({"metadata": {"name": "u"}, "status": {"conditions": [
                {"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]}}),
            json!({"metadata": {"name": "v"}, "status": {"conditions": [5, {"type": "Ready", "status": "False"}]}}),
            json!({"metadata": {"name": "w"}, "status": {"conditions": [
                {"type": "Ready", "status": 1, "reason": ["HotLoop"], "lastTransitionTime": "not a time"}]}}),
            json!({"metadata": {"name": "x"}, "status": 5}),
            json!({"metadata": 5}),
            json!([1, 2]),
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

    /// Text with members repeated, as the decoded object reads it (the
    /// last one wins), and the usual shape read without a decode.
    #[test]
    fn repeated_members_read_as_decoded_and_the_usual_shape_reads_straight() {
        for text in [
            &br#"{"metadata":{"name":"a","labels":{"k":"1","k":"2"}}}"#[..],
            br#"{"metadata":{"name":"a","name":"b"}}"#,
            br#"{"metadata":{"ownerReferences":[{"uid":"1","uid":"2"}]}}"#,
            br#"{"status":{"conditions":[{"type":"Ready","status":"True","status":"False"}]}}"#,
        ] {
            let whole: Object = serde_json::from_slice(text).unwrap();
            assert_eq!(
                Terms::of_json(text),
                Some(Terms::of(&whole)),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "default",
            "uid": "u-1", "resourceVersion": "12", "labels": {"app": "web", "tier": "db"},
            "annotations": {"note": "x"}, "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet",
            "name": "web", "uid": "rs-1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False",
            "reason": "Crash", "lastTransitionTime": "2026-11-28T03:00:00Z"}]}});
        let text = serde_json::to_vec(&pod).unwrap();
        let straight =
            serde_json::from_slice::<text::Head>(&text).expect("the usual shape reads straight");
        assert_eq!(straight.terms(), Terms::of(&pod));
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
