//! JSON patch's tests: RFC 6902 operations, errors and the bounds.
use super::*;
use serde_json::json;

fn run(doc: Value, ops: Value) -> Result<Value, PatchError> {
    let mut doc = doc;
    JsonPatch::from_value(&ops)?.apply(&mut doc)?;
    Ok(doc)
}

#[test]
fn every_operation_follows_rfc6902() {
    let doc = json!({"a": {"b": 1}, "list": ["x", "y"]});
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "add", "path": "/a/c", "value": 2}])
        )
        .unwrap(),
        json!({"a": {"b": 1, "c": 2}, "list": ["x", "y"]})
    );
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "add", "path": "/list/-", "value": "z"}])
        )
        .unwrap()["list"],
        json!(["x", "y", "z"])
    );
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "add", "path": "/list/0", "value": "w"}])
        )
        .unwrap()["list"],
        json!(["w", "x", "y"])
    );
    assert_eq!(
        run(doc.clone(), json!([{"op": "remove", "path": "/a/b"}])).unwrap(),
        json!({"a": {}, "list": ["x", "y"]})
    );
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "replace", "path": "/list/1", "value": "q"}])
        )
        .unwrap()["list"],
        json!(["x", "q"])
    );
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "move", "from": "/a/b", "path": "/moved"}])
        )
        .unwrap(),
        json!({"a": {}, "list": ["x", "y"], "moved": 1})
    );
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "copy", "from": "/list", "path": "/a/copy"}])
        )
        .unwrap()["a"],
        json!({"b": 1, "copy": ["x", "y"]})
    );
    assert_eq!(
        run(
            doc.clone(),
            json!([{"op": "test", "path": "/a/b", "value": 1.0}])
        )
        .unwrap(),
        doc
    );
    assert_eq!(
        run(
            doc,
            json!([{"op": "replace", "path": "", "value": {"new": true}}])
        )
        .unwrap(),
        json!({"new": true})
    );
}

#[test]
fn pointer_escapes_name_keys_with_slashes_and_tildes() {
    let doc = json!({"labels": {"app.kubernetes.io/name": "a", "x~y": "b"}});
    let out = run(
        doc,
        json!([
            {"op": "replace", "path": "/labels/app.kubernetes.io~1name", "value": "c"},
            {"op": "remove", "path": "/labels/x~0y"},
        ]),
    )
    .unwrap();
    assert_eq!(out, json!({"labels": {"app.kubernetes.io/name": "c"}}));
}

#[test]
fn a_failing_operation_names_its_index_and_path_and_changes_nothing() {
    let mut doc = json!({"a": 1});
    let patch = JsonPatch::from_value(&json!([
        {"op": "replace", "path": "/a", "value": 2},
        {"op": "remove", "path": "/missing"},
    ]))
    .unwrap();
    let err = patch.apply(&mut doc).unwrap_err();
    assert!(
        matches!(&err, PatchError::Failed { index: 1, op: "remove", path, .. } if path == "/missing")
    );
    assert!(err.to_string().contains("operation 1 (remove /missing)"));
    assert_eq!(doc, json!({"a": 1}), "all or nothing");
    assert!(!err.is_malformed());
}

#[test]
fn a_failed_test_reports_expected_and_actual_values() {
    let err = run(
        json!({"spec": {"replicas": 2}}),
        json!([{"op": "test", "path": "/spec/replicas", "value": 3}]),
    )
    .unwrap_err();
    assert_eq!(
        err,
        PatchError::TestFailed {
            index: 0,
            path: "/spec/replicas".into(),
            expected: json!(3),
            actual: json!(2),
        }
    );
    assert!(
        run(
            json!({}),
            json!([{"op": "test", "path": "/x", "value": null}])
        )
        .is_err()
    );
}

#[test]
fn malformed_documents_are_told_apart_from_failed_operations() {
    for bad in [
        json!({"op": "add"}),
        json!([{"op": "frobnicate", "path": "/a"}]),
        json!([{"op": "add", "path": "/a"}]),
        json!([{"op": "move", "path": "/a"}]),
    ] {
        let err = JsonPatch::from_value(&bad).unwrap_err();
        assert!(err.is_malformed(), "{bad}: {err}");
    }
    let err = JsonPatch::from_value(&json!([{"op": "add", "path": "/a", "value": 1}, {"op": "x"}]))
        .unwrap_err();
    assert!(err.to_string().starts_with("operation 1:"), "{err}");
}

#[test]
fn move_into_a_child_and_appending_outside_add_are_refused() {
    let doc = json!({"a": {"b": {}}, "l": [1]});
    assert!(matches!(
        run(
            doc.clone(),
            json!([{"op": "move", "from": "/a", "path": "/a/b/c"}])
        ),
        Err(PatchError::MoveIntoChild { .. })
    ));
    assert!(
        run(
            doc.clone(),
            json!([{"op": "replace", "path": "/l/-", "value": 2}])
        )
        .is_err()
    );
    assert!(
        run(
            doc.clone(),
            json!([{"op": "add", "path": "/l/01", "value": 2}])
        )
        .is_err()
    );
    assert!(run(doc, json!([{"op": "add", "path": "no-slash", "value": 2}])).is_err());
}

#[test]
fn json_equality_ignores_number_representation_and_member_order() {
    assert!(json_equal(&json!(1), &json!(1.0)));
    assert!(json_equal(
        &json!({"a": 1, "b": [2]}),
        &json!({"b": [2.0], "a": 1})
    ));
    assert!(!json_equal(&json!([1, 2]), &json!([2, 1])));
    assert!(!json_equal(&json!("1"), &json!(1)));
}

#[test]
fn patches_serialise_in_the_wire_form() {
    let patch = JsonPatch(vec![PatchOperation::Remove { path: "/a".into() }]);
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!([{"op": "remove", "path": "/a"}])
    );
    assert!(patch.writes("/a"));
    assert!(!patch.writes("/b"));
}
