//! Core Secrets through every write: `stringData` folded into `data` on
//! create, update, both patches and apply; bad data refused with nothing
//! written; a failed JSON patch test does not echo a value.

use serde_json::json;

use super::*;
use crate::object::patch::JsonPatch;

fn secrets(api: &Api) -> Arc<KindInfo> {
    api.kinds().require("v1", "Secret").unwrap()
}

fn secret(body: Value) -> Object {
    let mut s = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"}});
    for (k, v) in body.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

#[tokio::test]
async fn string_data_is_folded_into_data_by_every_write() {
    let api = api().await;
    let kind = secrets(&api);
    let created = api
        .create(&kind, secret(json!({"stringData": {"user": "admin"}})))
        .await
        .unwrap();
    assert_eq!(created["data"], json!({"user": "YWRtaW4="}));
    assert_eq!(created["type"], "Opaque");
    assert!(created.get("stringData").is_none());

    let mut next = created.clone();
    next["stringData"] = json!({"pass": "pw"});
    let updated = api.update(&kind, next).await.unwrap();
    assert_eq!(updated["data"], json!({"user": "YWRtaW4=", "pass": "cHc="}));

    let merged = api
        .merge_patch(
            &kind,
            Some("default"),
            "creds",
            &json!({"stringData": {"user": "root"}}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(merged["data"]["user"], "cm9vdA==");
    assert!(merged.get("stringData").is_none());

    let ops = JsonPatch::from_value(&json!([
        {"op": "add", "path": "/stringData", "value": {"pass": "x"}}]))
    .unwrap();
    let patched = api
        .json_patch(&kind, Some("default"), "creds", &ops, false)
        .await
        .unwrap();
    assert_eq!(patched["data"]["pass"], "eA==");

    let applied = api
        .apply(
            &kind,
            secret(json!({"stringData": {"token": "t"}})),
            "ops",
            false,
        )
        .await
        .unwrap();
    assert_eq!(applied["data"]["token"], "dA==");
    // In another second: an apply that wrote stamps its manager's entry
    // with the time, so only a real no-op keeps the version.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = api
        .apply(
            &kind,
            secret(json!({"stringData": {"token": "t"}})),
            "ops",
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        meta::resource_version(&again),
        meta::resource_version(&applied),
        "applying the same stringData again writes nothing"
    );
}

#[tokio::test]
async fn bad_base64_is_refused_naming_the_key_and_writes_nothing() {
    let api = api().await;
    let kind = secrets(&api);
    let err = api
        .create(&kind, secret(json!({"data": {"apiKey": "s3cr3t value"}})))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    let text = err.to_string();
    assert!(text.contains("data[apiKey]"), "{text}");
    assert!(!text.contains("s3cr3t"), "{text}");
    assert!(matches!(
        api.get(&kind, Some("default"), "creds").await,
        Err(Error::NotFound { .. })
    ));

    api.create(&kind, secret(json!({"data": {"apiKey": "eA=="}})))
        .await
        .unwrap();
    let err = api
        .merge_patch(
            &kind,
            Some("default"),
            "creds",
            &json!({"data": {"apiKey": "%%%"}}),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    let stored = api.get(&kind, Some("default"), "creds").await.unwrap();
    assert_eq!(stored["data"]["apiKey"], "eA==");
}

#[tokio::test]
async fn an_immutable_secret_refuses_new_data() {
    let api = api().await;
    let kind = secrets(&api);
    api.create(
        &kind,
        secret(json!({"immutable": true, "stringData": {"k": "v"}})),
    )
    .await
    .unwrap();
    let err = api
        .merge_patch(
            &kind,
            Some("default"),
            "creds",
            &json!({"stringData": {"k": "w"}}),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    let labelled = api
        .merge_patch(
            &kind,
            Some("default"),
            "creds",
            &json!({"metadata": {"labels": {"a": "b"}}}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(labelled["data"]["k"], "dg==");
}

#[tokio::test]
async fn a_failed_test_on_a_secret_does_not_echo_its_value() {
    let api = api().await;
    let kind = secrets(&api);
    api.create(&kind, secret(json!({"data": {"k": "c2VjcmV0"}})))
        .await
        .unwrap();
    let ops = JsonPatch::from_value(&json!([
        {"op": "test", "path": "/data/k", "value": "guess"}]))
    .unwrap();
    let err = api
        .json_patch(&kind, Some("default"), "creds", &ops, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    let text = err.to_string();
    assert!(
        !text.contains("c2VjcmV0") && !text.contains("guess"),
        "{text}"
    );
    assert!(text.contains("/data/k"), "{text}");
}
