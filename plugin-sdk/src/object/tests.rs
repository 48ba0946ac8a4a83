//! Unit tests of typed and dynamic objects.

use super::*;
use serde_json::json;

#[derive(Debug, Deserialize, PartialEq)]
struct Spec {
    replicas: u32,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct Status {
    ready_replicas: u32,
}

fn pod() -> Value {
    json!({
        "apiVersion": "demo.setpoint.dev/v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "default", "uid": "u-1",
            "resourceVersion": "7", "generation": 2,
            "creationTimestamp": "2025-01-02T03:04:05Z",
            "labels": {"app": "web"}, "annotations": {"note": "x"},
            "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
                                 "name": "web", "uid": "u-0", "controller": true}],
            "somethingNew": true
        },
        "spec": {"replicas": 3},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "PodReady", "message": ""}]}
    })
}

#[test]
fn a_typed_object_deserializes_as_from_value_parses_it() {
    let object: Object<Spec, Status> = serde_json::from_value(pod()).unwrap();
    assert_eq!(object, Object::from_value(pod()).unwrap());
    let mut bad = pod();
    bad["spec"]["replicas"] = json!("three");
    let err = serde_json::from_value::<Object<Spec, Status>>(bad).unwrap_err();
    assert!(err.to_string().starts_with("spec: invalid type"), "{err}");
}

#[test]
fn typed_object_parses_metadata_spec_and_status() {
    let object = Object::<Spec, Status>::from_value(pod()).unwrap();
    assert_eq!(object.name(), "web-0");
    assert_eq!(object.namespace(), Some("default"));
    assert_eq!(object.metadata.generation, Some(2));
    assert_eq!(
        object.metadata.creation_timestamp,
        Some("2025-01-02T03:04:05Z".parse().unwrap())
    );
    assert_eq!(object.metadata.owner_references[0].controller, Some(true));
    assert_eq!(object.spec, Spec { replicas: 3 });
    assert_eq!(object.status, Status::default());
    assert_eq!(object.object_ref().name, "web-0");
    assert!(!object.is_deleting());
}

#[test]
fn typed_object_errors_name_the_part_that_failed() {
    let mut value = pod();
    value["spec"] = json!({});
    let err = Object::<Spec, Status>::from_value(value).unwrap_err();
    assert_eq!(err, Error::permanent("spec: missing field `replicas`"));

    let mut value = pod();
    value["status"] = json!({"readyReplicas": "two"});
    let err = Object::<Spec, Status>::from_value(value).unwrap_err();
    assert_eq!(
        err.message(),
        "status.readyReplicas: invalid type: string \"two\", expected u32"
    );

    let mut value = pod();
    value["metadata"]["labels"] = json!(["a"]);
    let err = Object::<Spec, Status>::from_value(value).unwrap_err();
    assert!(err.message().starts_with("metadata: invalid type"), "{err}");

    let err = Object::<Spec, Status>::from_json("{").unwrap_err();
    assert!(
        err.is_permanent() && err.message().starts_with("object: "),
        "{err}"
    );
}

#[test]
fn missing_spec_and_null_status_use_defaults() {
    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Empty {
        #[serde(default)]
        x: u32,
    }
    let value = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "status": null});
    let object = Object::<Empty, Empty>::from_value(value).unwrap();
    assert_eq!((object.spec.x, object.status.x), (0, 0));
}

#[test]
fn from_json_agrees_with_from_value() {
    let cases = [
        pod(),
        json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": {"replicas": 1}, "status": null}),
        json!({"kind": "K", "spec": {"replicas": 1}}),
        json!({"apiVersion": 5, "kind": "K", "spec": {"replicas": 1}}),
        json!({"apiVersion": "v1", "kind": "K"}),
        json!({"apiVersion": "v1", "kind": "K", "spec": {"replicas": "x"}}),
        json!({"apiVersion": "v1", "kind": "K", "spec": {"replicas": 1}, "status": {"readyReplicas": -1}}),
        json!({"apiVersion": "v1", "kind": "K", "metadata": {"labels": {"a": 1}}, "spec": {"replicas": 1}}),
        json!({"apiVersion": "v1", "kind": "K", "metadata": null, "spec": {"replicas": 1}, "extra": [1, {"x": null}]}),
        json!([1, 2]),
        json!("text"),
    ];
    for value in cases {
        let text = value.to_string();
        assert_eq!(
            Object::<Spec, Status>::from_json(&text),
            Object::<Spec, Status>::from_value(value),
            "{text}"
        );
    }
}

#[test]
fn from_json_reports_broken_text_and_repeated_parts() {
    let err = Object::<Spec, Status>::from_json(
        r#"{"apiVersion": "v1", "kind": "K", "spec": {"replicas": 1}} x"#,
    )
    .unwrap_err();
    assert!(
        err.message().starts_with("object: trailing characters"),
        "{err}"
    );
    let err =
        Object::<Spec, Status>::from_json(r#"{"spec": {"replicas": 1}, "spec": {}}"#).unwrap_err();
    assert_eq!(err, Error::permanent("object: duplicate field `spec`"));
    let err = Object::<Spec, Status>::from_json(r#"{"spec": {"replicas": 1"#).unwrap_err();
    assert!(
        err.message().starts_with("spec: EOF while parsing"),
        "{err}"
    );
    assert!(!err.message().contains(" at line "), "{err}");
}

#[test]
fn label_and_annotation_maps_accept_any_order_and_keep_the_last_duplicate() {
    let text = r#"{"apiVersion": "v1", "kind": "K", "spec": {"replicas": 1},
        "metadata": {"labels": {"b": "2", "a": "1", "c": "3", "a": "9"}, "annotations": {}}}"#;
    let object = Object::<Spec, Status>::from_json(text).unwrap();
    let labels: Vec<(&str, &str)> = object
        .metadata
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(labels, [("a", "9"), ("b", "2"), ("c", "3")]);
    assert!(object.metadata.annotations.is_empty());
    let err = Object::<Spec, Status>::from_json(
        r#"{"spec": {"replicas": 1}, "metadata": {"labels": null}}"#,
    )
    .unwrap_err();
    assert!(
        err.message()
            .starts_with("metadata: invalid type: null, expected a map"),
        "{err}"
    );
}

#[test]
fn field_follows_json_pointers() {
    let object = DynamicObject::from_value(json!({
        "apiVersion": "v1", "kind": "K",
        "metadata": {"annotations": {"example.com/a~b": "x"}},
        "spec": {"list": [10, 11], "": {"e": 1}}
    }))
    .unwrap();
    assert_eq!(object.field("/spec/list/1"), Some(&json!(11)));
    assert_eq!(object.field("/spec/list/01"), None);
    assert_eq!(object.field("/spec/list/+1"), None);
    assert_eq!(object.field("/spec/list/2"), None);
    assert_eq!(object.field("/spec//e"), Some(&json!(1)));
    assert_eq!(
        object.field("/metadata/annotations/example.com~1a~0b"),
        Some(&json!("x"))
    );
    assert_eq!(object.field("/kind/x"), None);
    assert_eq!(object.field("kind"), None);
    assert_eq!(object.field("/kind"), Some(&json!("K")));
}

#[test]
fn dynamic_object_reads_common_fields() {
    let pod = DynamicObject::from_value(pod()).unwrap();
    assert!(pod.is_kind("demo.setpoint.dev/v1", "Pod"));
    assert_eq!(
        (pod.name(), pod.namespace(), pod.uid()),
        ("web-0", Some("default"), "u-1")
    );
    assert_eq!(pod.generation(), Some(2));
    assert_eq!(pod.label("app"), Some("web"));
    assert_eq!(pod.labels().len(), 1);
    assert_eq!(pod.annotation("note"), Some("x"));
    assert_eq!(pod.status_field("phase"), Some(&json!("Running")));
    assert_eq!(pod.field("/spec/replicas"), Some(&json!(3)));
    assert!(pod.condition("Ready").is_some_and(|c| c.is_true()));
    assert!(pod.condition("Scheduled").is_none());
    assert!(!pod.is_deleting());
    assert_eq!(pod.metadata().unwrap().finalizers, ["f"]);
    let typed: Object<Spec, Status> = pod.parse().unwrap();
    assert_eq!(typed.spec.replicas, 3);
}

#[test]
fn dynamic_object_requires_api_version_and_kind() {
    assert!(DynamicObject::from_value(json!({"kind": "Pod"})).is_err());
    assert!(DynamicObject::from_value(json!([])).is_err());
    assert!(DynamicObject::from_json("{\"apiVersion\":\"v1\",\"kind\":\"K\"}").is_ok());
    assert!(serde_json::from_value::<DynamicObject>(json!({"apiVersion": "v1"})).is_err());
}

#[test]
fn builds_a_child_without_empty_maps() {
    let child = DynamicObject::new("demo.setpoint.dev/v1", "Pod", "web-0")
        .with_labels(BTreeMap::from([("app".into(), "web".into())]))
        .with_annotations(BTreeMap::new())
        .with_label("tier", "front")
        .with_spec(&json!({"image": "nginx"}))
        .unwrap();
    assert_eq!(
        child.to_value(),
        json!({
            "apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
            "metadata": {"name": "web-0", "labels": {"app": "web", "tier": "front"}},
            "spec": {"image": "nginx"}
        })
    );
    assert_eq!(DynamicObject::from_json(&child.to_json()).unwrap(), child);
}

#[derive(Debug, Deserialize)]
struct Ports {
    #[allow(dead_code)]
    port: u16,
    #[serde(default)]
    #[allow(dead_code)]
    names: Vec<String>,
}

#[test]
fn a_spec_that_does_not_parse_names_the_field_either_way_it_is_read() {
    let cases = [
        (
            json!({"port": "eighty"}),
            "spec.port: invalid type: string \"eighty\", expected u16",
        ),
        (
            json!({"port": 80, "names": ["a", 7]}),
            "spec.names[1]: invalid type: integer `7`, expected a string",
        ),
        (json!({}), "spec: missing field `port`"),
    ];
    for (spec, expected) in cases {
        let object = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"}, "spec": spec});
        let err = Object::<Ports, ()>::from_json(&object.to_string()).unwrap_err();
        assert_eq!(err.message(), expected);
        assert!(err.is_permanent());
        let err = Object::<Ports, ()>::from_value(object).unwrap_err();
        assert_eq!(err.message(), expected);
    }
}
