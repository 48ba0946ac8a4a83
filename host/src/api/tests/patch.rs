//! Merge patch and JSON patch through the API: main resource and status,
//! failures, pinned versions and retries under concurrent writers.

use serde_json::json;

use super::*;
use crate::object::patch::{JsonPatch, PatchError};

fn ops(doc: Value) -> JsonPatch {
    JsonPatch::from_value(&doc).unwrap()
}

#[tokio::test]
async fn a_json_patch_changes_the_spec_and_only_the_status_through_status() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, widget("a")).await.unwrap();
    let patched = api
        .json_patch(
            &kind,
            Some("default"),
            "a",
            &ops(json!([
                {"op": "test", "path": "/spec/image", "value": "nginx"},
                {"op": "replace", "path": "/spec/image", "value": "httpd"},
                {"op": "add", "path": "/spec/tags", "value": ["a"]},
                {"op": "add", "path": "/spec/tags/-", "value": "b"},
                {"op": "copy", "from": "/spec/image", "path": "/metadata/labels"},
            ])),
            false,
        )
        .await;
    // `labels` must be a map: the copy makes the whole patch invalid.
    assert!(matches!(patched, Err(Error::Invalid { .. })), "{patched:?}");
    let patched = api
        .json_patch(
            &kind,
            Some("default"),
            "a",
            &ops(json!([
                {"op": "test", "path": "/spec/image", "value": "nginx"},
                {"op": "replace", "path": "/spec/image", "value": "httpd"},
                {"op": "add", "path": "/spec/tags", "value": ["a"]},
                {"op": "add", "path": "/spec/tags/-", "value": "b"},
                {"op": "add", "path": "/metadata/labels", "value": {"app.kubernetes.io/name": "w"}},
                {"op": "move", "from": "/metadata/labels/app.kubernetes.io~1name",
                 "path": "/metadata/labels/name"},
            ])),
            false,
        )
        .await
        .unwrap();
    assert_eq!(patched["spec"]["image"], "httpd");
    assert_eq!(patched["spec"]["tags"], json!(["a", "b"]));
    assert_eq!(patched["metadata"]["labels"], json!({"name": "w"}));
    assert_eq!(meta::generation(&patched), 2);

    let status = api
        .json_patch(
            &kind,
            Some("default"),
            "a",
            &ops(json!([
                {"op": "add", "path": "/status", "value": {"phase": "Running"}},
                {"op": "replace", "path": "/spec/image", "value": "ignored"},
            ])),
            true,
        )
        .await
        .unwrap();
    assert_eq!(status["status"], json!({"phase": "Running"}));
    assert_eq!(status["spec"]["image"], "httpd");
    assert_eq!(meta::generation(&status), 2);
}

#[tokio::test]
async fn a_failed_test_operation_is_unprocessable_and_writes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, widget("a")).await.unwrap();
    let before = api.current_revision().await.unwrap();
    let err = api
        .json_patch(
            &kind,
            Some("default"),
            "a",
            &ops(json!([
                {"op": "replace", "path": "/spec/image", "value": "httpd"},
                {"op": "test", "path": "/spec/replicas", "value": 3},
            ])),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (422, "Invalid"));
    let Error::PatchFailed { source, name, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(name, "a");
    assert!(
        matches!(&**source, PatchError::TestFailed { index: 1, path, .. } if path == "/spec/replicas")
    );
    let err = api
        .json_patch(
            &kind,
            Some("default"),
            "a",
            &ops(json!([{"op": "remove", "path": "/spec/missing"}])),
            false,
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("operation 0 (remove /spec/missing)"),
        "{err}"
    );
    assert_eq!(api.current_revision().await.unwrap(), before);
    assert_eq!(
        api.get(&kind, Some("default"), "a").await.unwrap()["spec"]["image"],
        "nginx"
    );
}

#[tokio::test]
async fn a_pinned_resource_version_makes_a_stale_patch_a_conflict() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();
    let rv = meta::resource_version(&created).unwrap().to_owned();
    api.merge_patch(
        &kind,
        Some("default"),
        "a",
        &json!({"spec": {"image": "v2"}}),
        false,
    )
    .await
    .unwrap();
    let err = api
        .merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"metadata": {"resourceVersion": rv}, "spec": {"image": "v3"}}),
            false,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    let err = api
        .json_patch(
            &kind,
            Some("default"),
            "a",
            &ops(json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "replace", "path": "/spec/image", "value": "v3"},
            ])),
            false,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert_eq!(
        api.get(&kind, Some("default"), "a").await.unwrap()["spec"]["image"],
        "v2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_patches_are_retried_until_each_lands() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut input = widget("a");
    input["spec"]["options"] = json!({});
    api.create(&kind, input).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (api, kind) = (api.clone(), kind.clone());
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let patch = json!({"metadata": {"labels": {format!("m{i}"): "x"}}});
                api.merge_patch(&kind, Some("default"), "a", &patch, false)
                    .await
            } else {
                let patch = ops(json!([
                    {"op": "add", "path": format!("/spec/options/j{i}"), "value": "x"}
                ]));
                api.json_patch(&kind, Some("default"), "a", &patch, false)
                    .await
            }
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let done = api.get(&kind, Some("default"), "a").await.unwrap();
    assert_eq!(meta::labels(&done).unwrap().len(), 8);
    assert_eq!(done["spec"]["options"].as_object().unwrap().len(), 8);
    assert_eq!(meta::generation(&done), 9, "one generation per spec patch");
}

#[tokio::test]
async fn a_patch_cannot_rename_or_move_an_object() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, widget("a")).await.unwrap();
    for patch in [
        json!({"metadata": {"name": "b"}}),
        json!({"metadata": {"namespace": "other"}}),
    ] {
        let err = api
            .merge_patch(&kind, Some("default"), "a", &patch, false)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BadRequest(_)), "{err}");
    }
    assert!(!exists(&api, &kind, "b").await);
    let err = api
        .merge_patch(&kind, Some("default"), "missing", &json!({}), false)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    let err = api
        .merge_patch(&kind, Some("default"), "a", &json!([1]), false)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest(_)));
}

#[tokio::test]
async fn a_strategic_merge_patch_takes_directives_on_builtins_and_is_refused_for_custom_kinds() {
    let api = api().await;
    let events = api.kinds().require("v1", "Event").unwrap();
    api.create(
        &events,
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]}}),
    )
    .await
    .unwrap();
    let patched = api
        .strategic_merge_patch(
            &events,
            None,
            "e",
            &json!({"metadata": {"labels": {"$patch": "replace", "c": "3"},
                "$deleteFromPrimitiveList/finalizers": ["x"]}}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(patched["metadata"]["labels"], json!({"c": "3"}));
    assert_eq!(patched["metadata"]["finalizers"], json!(["y"]));
    let kind = widgets(&api).await;
    api.create(&kind, widget("w")).await.unwrap();
    let err = api
        .strategic_merge_patch(&kind, Some("default"), "w", &json!({"spec": {}}), false)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("strategic merge patch is not supported"),
        "{err}"
    );
}

/// How many reads (`get`) the store behind `api` has answered.
fn reads(api: &Api) -> u64 {
    let metrics = api.backend().metrics().expect("a metered store");
    let snapshot = metrics.snapshot();
    let get = snapshot.iter().find(|op| op.operation == "get").unwrap();
    get.latency.count
}

#[tokio::test]
async fn a_status_written_over_the_object_seen_reads_nothing_and_replaces_the_status() {
    let metered = crate::store::Metered::new(Arc::new(crate::store::MemoryBackend::new()));
    let api = Api::open(Arc::new(metered)).await.unwrap();
    let kind = widgets(&api).await;
    api.create(&kind, widget("a")).await.unwrap();
    let first = api
        .patch_status(
            &kind,
            Some("default"),
            "a",
            None,
            &json!({"phase": "Pending", "replicas": 2}),
        )
        .await
        .unwrap();
    let before = reads(&api);
    let (written, bytes) = api
        .write_status_seen(&kind, &first, json!({"phase": "Running"}))
        .await
        .unwrap();
    assert_eq!(reads(&api), before, "the object seen is not read again");
    let stored_bytes = api
        .backend()
        .get(&Api::key(&kind, Some("default"), "a"))
        .await
        .unwrap()
        .unwrap()
        .value
        .len();
    assert_eq!(
        bytes, stored_bytes,
        "the bytes written are the stored text's"
    );
    assert_eq!(
        written["status"],
        json!({"phase": "Running"}),
        "the status is the one given: `replicas`, not in it, is gone"
    );
    assert_eq!(written["spec"], first["spec"]);
    assert_eq!(written["metadata"]["uid"], first["metadata"]["uid"]);
    let stored = api.get(&kind, Some("default"), "a").await.unwrap();
    assert_eq!(stored, written, "what it returns is what is stored");
    assert_ne!(
        meta::resource_version(&stored),
        meta::resource_version(&first)
    );
}

#[tokio::test]
async fn a_status_written_over_a_stale_or_deleted_object_changes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let seen = api.create(&kind, widget("a")).await.unwrap();
    // Someone else writes after the object was seen.
    let mut changed = seen.clone();
    changed["spec"]["image"] = json!("httpd");
    let newer = api.update(&kind, changed).await.unwrap();
    let stale = api
        .write_status_seen(&kind, &seen, json!({"phase": "Running"}))
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    let stored = api.get(&kind, Some("default"), "a").await.unwrap();
    assert_eq!(stored, newer, "the newer write stands, untouched");
    api.delete(&kind, Some("default"), "a", &Default::default())
        .await
        .unwrap();
    let gone = api
        .write_status_seen(&kind, &newer, json!({"phase": "Running"}))
        .await;
    assert!(matches!(gone, Err(Error::NotFound { .. })), "{gone:?}");
    assert!(matches!(
        api.get(&kind, Some("default"), "a").await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn a_status_written_over_the_object_seen_is_admitted_like_any_write() {
    let api = api().await;
    let kind = widgets(&api).await;
    let seen = api.create(&kind, widget("a")).await.unwrap();
    let refused = api
        .write_status_seen(&kind, &seen, json!({"phase": "Exploded"}))
        .await;
    assert!(matches!(refused, Err(Error::Invalid { .. })), "{refused:?}");
    let stored = api.get(&kind, Some("default"), "a").await.unwrap();
    assert_eq!(stored, seen, "a refused status writes nothing");
}

#[tokio::test]
async fn a_status_written_over_a_definition_seen_takes_the_read_path_and_conflicts_alike() {
    let api = api().await;
    let crd = crd_kind(&api);
    let seen = api.create(&crd, widget_crd()).await.unwrap();
    let name = meta::name(&seen).to_owned();
    let status = json!({"conditions": [{"type": "Established", "status": "True"}]});
    let (written, _) = api
        .write_status_seen(&crd, &seen, status.clone())
        .await
        .unwrap();
    assert_eq!(written["status"], status);
    let stale = api.write_status_seen(&crd, &seen, json!({})).await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    let stored = api.get(&crd, None, &name).await.unwrap();
    assert_eq!(stored["status"], status);
}
