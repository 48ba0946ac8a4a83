//! Server-side apply: creation, managed fields, conflicts and force,
//! shared ownership, removal of fields a manager stops applying.

use serde_json::json;

use super::*;
use crate::api::FieldConflict;

fn config(spec: Value) -> Object {
    json!({
        "apiVersion": "test.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": spec,
    })
}

/// The managers of `object` with their owned fields, as `fieldsV1`.
fn managers(object: &Object) -> Vec<(String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_owned(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_creates_an_absent_object_and_records_the_managers_fields() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut applied = config(json!({"image": "nginx", "tags": ["a"]}));
    applied["metadata"]["labels"] = json!({"app": "web"});
    applied["status"] = json!({"phase": "Running"});
    let created = api.apply(&kind, applied, "alice", false).await.unwrap();
    assert_eq!(meta::generation(&created), 1);
    assert!(
        created.get("status").is_none(),
        "status is the sub-resource's"
    );
    assert_eq!(created["spec"]["replicas"], 1, "defaults still apply");
    let entries = created["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry["manager"], "alice");
    assert_eq!(entry["operation"], "Apply");
    assert_eq!(entry["apiVersion"], "test.setpoint.dev/v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].is_string());
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:app": {}}},
               "f:spec": {"f:image": {}, "f:tags": {}}})
    );
}

#[tokio::test]
async fn applying_the_same_configuration_again_writes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let first = api
        .apply(&kind, config(json!({"image": "nginx"})), "alice", false)
        .await
        .unwrap();
    let before = api.current_revision().await.unwrap();
    let second = api
        .apply(&kind, config(json!({"image": "nginx"})), "alice", false)
        .await
        .unwrap();
    assert_eq!(second, first);
    assert_eq!(api.current_revision().await.unwrap(), before);
}

#[tokio::test]
async fn a_different_value_for_another_managers_field_is_a_conflict_unless_forced() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.apply(
        &kind,
        config(json!({"image": "nginx", "replicas": 2})),
        "alice",
        false,
    )
    .await
    .unwrap();
    let before = api.current_revision().await.unwrap();
    let err = api
        .apply(
            &kind,
            config(json!({"image": "httpd", "replicas": 2, "color": "red"})),
            "bob",
            false,
        )
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (409, "Conflict"));
    let Error::ApplyConflict { conflicts, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        conflicts,
        &[FieldConflict {
            manager: "alice".into(),
            field: ".spec.image".into()
        }],
        "the same value for replicas is no conflict"
    );
    assert!(
        err.to_string()
            .contains("conflict with \"alice\": .spec.image"),
        "{err}"
    );
    assert_eq!(api.current_revision().await.unwrap(), before);

    let forced = api
        .apply(
            &kind,
            config(json!({"image": "httpd", "replicas": 2, "color": "red"})),
            "bob",
            true,
        )
        .await
        .unwrap();
    assert_eq!(forced["spec"]["image"], "httpd");
    assert_eq!(
        managers(&forced),
        [
            ("alice".to_owned(), json!({"f:spec": {"f:replicas": {}}})),
            (
                "bob".to_owned(),
                json!({"f:spec": {"f:color": {}, "f:image": {}, "f:replicas": {}}})
            ),
        ]
    );
}

#[tokio::test]
async fn a_field_a_manager_stops_applying_goes_unless_someone_else_owns_it() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut first = config(json!({"image": "nginx", "color": "red", "tags": ["x"]}));
    first["metadata"]["labels"] = json!({"app": "web", "tier": "front"});
    api.apply(&kind, first, "alice", false).await.unwrap();
    api.apply(
        &kind,
        config(json!({"image": "nginx", "tags": ["x"]})),
        "bob",
        false,
    )
    .await
    .unwrap();

    // alice drops color, tags and one label; bob still owns tags.
    let mut second = config(json!({"image": "nginx"}));
    second["metadata"]["labels"] = json!({"app": "web"});
    let after = api.apply(&kind, second, "alice", false).await.unwrap();
    assert!(after["spec"].get("color").is_none());
    assert_eq!(after["spec"]["tags"], json!(["x"]));
    assert_eq!(after["metadata"]["labels"], json!({"app": "web"}));

    // bob drops everything; image stays because alice owns it.
    let after = api
        .apply(&kind, config(json!({})), "bob", false)
        .await
        .unwrap();
    assert!(after["spec"].get("tags").is_none());
    assert_eq!(after["spec"]["image"], "nginx");
    assert_eq!(
        managers(&after)
            .into_iter()
            .map(|(m, _)| m)
            .collect::<Vec<_>>(),
        ["alice"],
        "a manager with no fields left is dropped"
    );
}

#[tokio::test]
async fn apply_leaves_fields_set_by_other_writers_alone() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.apply(&kind, config(json!({"image": "nginx"})), "alice", false)
        .await
        .unwrap();
    api.merge_patch(
        &kind,
        Some("default"),
        "a",
        &json!({"spec": {"color": "blue"}}),
        false,
    )
    .await
    .unwrap();
    let after = api
        .apply(&kind, config(json!({"image": "httpd"})), "alice", false)
        .await
        .unwrap();
    assert_eq!(after["spec"]["color"], "blue");
    assert_eq!(after["spec"]["image"], "httpd");
    assert_eq!(meta::generation(&after), 3);
}

#[tokio::test]
async fn apply_checks_its_preconditions_and_needs_a_manager() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api
        .apply(&kind, config(json!({"image": "nginx"})), "alice", false)
        .await
        .unwrap();
    let err = api
        .apply(&kind, config(json!({"image": "x"})), "", false)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest(_)), "{err}");

    api.apply(&kind, config(json!({"image": "v2"})), "alice", false)
        .await
        .unwrap();
    let mut stale = config(json!({"image": "v3"}));
    stale["metadata"]["resourceVersion"] = json!(meta::resource_version(&created).unwrap());
    let err = api.apply(&kind, stale, "alice", false).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    let mut other_uid = config(json!({"image": "v3"}));
    other_uid["metadata"]["uid"] = json!("not-this-one");
    let err = api
        .apply(&kind, other_uid, "alice", false)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert_eq!(
        api.get(&kind, Some("default"), "a").await.unwrap()["spec"]["image"],
        "v2"
    );
}

#[tokio::test]
async fn updates_keep_managed_fields_they_do_not_mention() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api
        .apply(&kind, config(json!({"image": "nginx"})), "alice", false)
        .await
        .unwrap();
    let mut update = created.clone();
    meta::metadata_mut(&mut update).remove("managedFields");
    update["spec"]["color"] = json!("red");
    let updated = api.update(&kind, update).await.unwrap();
    assert_eq!(managers(&updated), managers(&created));
    let err = api
        .apply(&kind, config(json!({"image": "httpd"})), "bob", false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ApplyConflict { .. }),
        "ownership survived: {err}"
    );
}

#[tokio::test]
async fn managers_are_bounded_per_object_and_those_listed_still_apply() {
    let api = api().await;
    let kind = widgets(&api).await;
    // Each manager owns a label of its own, and the image in turn.
    let labelled = |manager: &str, image: &str| {
        let mut applied = config(json!({"image": image}));
        applied["metadata"]["labels"] = json!({manager: "x"});
        applied
    };
    for i in 0..crate::api::MAX_FIELD_MANAGERS {
        let manager = format!("m-{i}");
        api.apply(&kind, labelled(&manager, &format!("v{i}")), &manager, true)
            .await
            .unwrap();
    }
    let before = api.get(&kind, Some("default"), "a").await.unwrap();
    assert_eq!(managers(&before).len(), crate::api::MAX_FIELD_MANAGERS);
    let err = api
        .apply(&kind, labelled("one-too-many", "new"), "one-too-many", true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert!(
        err.to_string().contains(
            "metadata.managedFields: Too many: 101: must have at most 100 field managers"
        ),
        "{err}"
    );
    let after = api.get(&kind, Some("default"), "a").await.unwrap();
    assert_eq!(after, before, "a refused apply changes nothing");
    // A manager already listed applies as before.
    let taken = api
        .apply(&kind, labelled("m-7", "again"), "m-7", true)
        .await
        .unwrap();
    assert_eq!(taken["spec"]["image"], "again");
    assert_eq!(managers(&taken).len(), crate::api::MAX_FIELD_MANAGERS);
}
