//! Schema admission on every kind of write: violations with field paths,
//! defaults, pruning, status checked against the status schema.

use serde_json::json;

use super::*;
use crate::api::CauseType;
use crate::object::patch::JsonPatch;

fn causes(err: &Error) -> Vec<(String, String)> {
    match err {
        Error::Invalid { causes, .. } => causes
            .iter()
            .map(|c| (c.field.clone(), c.message.clone()))
            .collect(),
        other => panic!("not Invalid: {other}"),
    }
}

#[tokio::test]
async fn a_create_reports_every_violation_with_its_path_and_writes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let before = api.current_revision().await.unwrap();
    let err = api
        .create(
            &kind,
            json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Widget",
                   "metadata": {"name": "bad"},
                   "spec": {"replicas": "three", "color": "pink", "tags": ["a", "b", "c", "d"],
                            "template": {"metadata": {"labels": {"app": 1}}},
                            "ports": [{"port": 80}, {"protocol": "UDP"}]}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    assert_eq!(
        causes(&err),
        [
            ("spec.image".into(), "Required value".into()),
            (
                "spec.color".into(),
                "Unsupported value: \"pink\": supported values: \"red\", \"green\", \"blue\"".into()
            ),
            ("spec.ports[1].port".into(), "Required value".into()),
            (
                "spec.replicas".into(),
                "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".into()
            ),
            ("spec.tags".into(), "Too many: 4: must have at most 3 items".into()),
            (
                "spec.template.metadata.labels.app".into(),
                "Invalid value: \"integer\": spec.template.metadata.labels.app in body must be of type string: \"integer\"".into()
            ),
        ]
    );
    let Error::Invalid {
        causes,
        kind: k,
        name,
    } = &err
    else {
        unreachable!()
    };
    assert_eq!((k.as_str(), name.as_str()), ("Widget", "bad"));
    assert_eq!(causes[0].reason, CauseType::Required);
    assert_eq!(causes[3].reason, CauseType::TypeInvalid);
    assert_eq!(api.current_revision().await.unwrap(), before);
}

#[tokio::test]
async fn defaults_are_applied_and_unknown_fields_pruned_on_create_and_update() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut input = widget("a");
    input["spec"]["ports"] = json!([{"port": 80}]);
    input["spec"]["unknown"] = json!({"x": 1});
    input["extra"] = json!(true);
    input["metadata"]["labels"] = json!({"kept": "yes"});
    let created = api.create(&kind, input).await.unwrap();
    assert_eq!(
        created["spec"],
        json!({"image": "nginx", "replicas": 1, "ports": [{"port": 80, "protocol": "TCP"}]})
    );
    assert!(created.get("extra").is_none());
    assert_eq!(
        meta::label(&created, "kept"),
        Some("yes"),
        "metadata is not the schema's"
    );

    let mut update = created.clone();
    update["spec"] =
        json!({"image": "httpd", "template": {"spec": {"free": {"form": 1}}, "junk": 1}});
    let updated = api.update(&kind, update).await.unwrap();
    assert_eq!(
        updated["spec"],
        json!({"image": "httpd", "replicas": 1, "template": {"spec": {"free": {"form": 1}}}})
    );
}

#[tokio::test]
async fn status_writes_are_checked_and_pruned_against_the_status_schema() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();
    let mut bad = created.clone();
    bad["status"] = json!({"phase": "Exploded", "replicas": -1});
    let err = api.update_status(&kind, bad).await.unwrap_err();
    assert_eq!(
        causes(&err),
        [
            (
                "status.phase".into(),
                "Unsupported value: \"Exploded\": supported values: \"Pending\", \"Running\""
                    .into()
            ),
            (
                "status.replicas".into(),
                "Invalid value: -1: status.replicas in body should be greater than or equal to 0"
                    .into()
            ),
        ]
    );
    let mut good = created.clone();
    good["status"] = json!({"phase": "Running", "notInSchema": 1});
    let written = api.update_status(&kind, good).await.unwrap();
    assert_eq!(written["status"], json!({"phase": "Running"}));
}

#[tokio::test]
async fn patches_and_apply_are_admitted_like_updates() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, widget("a")).await.unwrap();
    let before = api.current_revision().await.unwrap();

    let err = api
        .merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"spec": {"replicas": 500}}),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&err),
        [(
            "spec.replicas".into(),
            "Invalid value: 500: spec.replicas in body should be less than or equal to 100".into()
        )]
    );
    let ops = JsonPatch::from_value(&json!([{"op": "remove", "path": "/spec/image"}])).unwrap();
    let err = api
        .json_patch(&kind, Some("default"), "a", &ops, false)
        .await
        .unwrap_err();
    assert_eq!(
        causes(&err),
        [("spec.image".into(), "Required value".into())]
    );
    let err = api
        .merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"status": {"replicas": "x"}}),
            true,
        )
        .await
        .unwrap_err();
    assert_eq!(causes(&err)[0].0, "status.replicas");
    let mut applied = widget("a");
    applied["spec"]["color"] = json!("mauve");
    let err = api
        .apply(&kind, applied, "tester", false)
        .await
        .unwrap_err();
    assert_eq!(causes(&err)[0].0, "spec.color");
    assert_eq!(api.current_revision().await.unwrap(), before);

    let patched = api
        .merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"spec": {"replicas": null}}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        patched["spec"]["replicas"], 1,
        "a removed field gets its default back"
    );
}

#[tokio::test]
async fn kinds_without_a_schema_take_any_fields() {
    let api = api().await;
    let kind = gadgets(&api).await;
    let mut input = gadget("g");
    input["spec"] = json!({"anything": [1, {"goes": null}]});
    let created = api.create(&kind, input).await.unwrap();
    assert_eq!(created["spec"], json!({"anything": [1, {"goes": null}]}));
    let events = api.kinds().by_plural("", "events").unwrap();
    let event = api
        .create(
            &events,
            json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e"}, "reason": "Tested", "extra": {"x": 1}}),
        )
        .await
        .unwrap();
    assert_eq!(event["extra"], json!({"x": 1}));
}

#[tokio::test]
async fn a_definition_cannot_reuse_a_kind_its_group_already_serves() {
    // Two resources answering to one apiVersion and kind would make every
    // lookup by kind (owner references, the garbage collector) pick one of
    // them by chance.
    let api = api().await;
    widgets(&api).await;
    let mut twin = widget_crd();
    twin["metadata"]["name"] = json!("widgetz.test.setpoint.dev");
    twin["spec"]["names"] = json!({"kind": "Widget", "plural": "widgetz"});
    let before = api.current_revision().await.unwrap();
    let err = api.create(&crd_kind(&api), twin).await.unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert!(
        err.to_string()
            .contains("already in use by widgets.test.setpoint.dev"),
        "{err}"
    );
    assert_eq!(api.current_revision().await.unwrap(), before);
    assert!(
        api.kinds()
            .by_plural("test.setpoint.dev", "widgetz")
            .is_none()
    );

    // The same definition may still be updated, and another group may use the name.
    let mut elsewhere = widget_crd();
    elsewhere["metadata"]["name"] = json!("widgets.other.setpoint.dev");
    elsewhere["spec"]["group"] = json!("other.setpoint.dev");
    api.create(&crd_kind(&api), elsewhere).await.unwrap();
    let mut stored = api
        .get(&crd_kind(&api), None, "widgets.test.setpoint.dev")
        .await
        .unwrap();
    stored["spec"]["names"]["shortNames"] = json!(["wg"]);
    api.update(&crd_kind(&api), stored).await.unwrap();
}
