//! Deletion: immediate removal, finalizer-blocked deletion, preconditions
//! and the finalizers the propagation policies add.

use serde_json::json;

use super::*;
use crate::api::{DeleteOptions, Propagation};
use crate::object::patch::JsonPatch;

fn with_finalizers(name: &str, finalizers: &[&str]) -> Object {
    let mut object = widget(name);
    object["metadata"]["finalizers"] = json!(finalizers);
    object
}

#[tokio::test]
async fn an_object_without_finalizers_is_removed_at_once() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();
    let deleted = api
        .delete(&kind, Some("default"), "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(meta::uid(&deleted), meta::uid(&created));
    assert_eq!(
        meta::resource_version(&deleted),
        Some(api.current_revision().await.unwrap().to_string().as_str()),
        "the last state carries the deletion's revision"
    );
    assert!(!exists(&api, &kind, "a").await);
    let err = api
        .delete(&kind, Some("default"), "a", &DeleteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
}

#[tokio::test]
async fn finalizers_hold_the_object_until_the_last_one_is_removed() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, with_finalizers("a", &["x.dev/one", "x.dev/two"]))
        .await
        .unwrap();
    let pending = api
        .delete(&kind, Some("default"), "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(meta::deletion_timestamp(&pending).is_some());
    assert_eq!(pending["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(meta::finalizers(&pending), ["x.dev/one", "x.dev/two"]);
    assert!(exists(&api, &kind, "a").await);

    let before = api.current_revision().await.unwrap();
    let again = api
        .delete(
            &kind,
            Some("default"),
            "a",
            &DeleteOptions {
                propagation_policy: Some(Propagation::Orphan),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(again, pending, "deleting a deleting object is a no-op");
    assert_eq!(api.current_revision().await.unwrap(), before);

    let err = api
        .merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"metadata": {"finalizers": ["x.dev/one", "x.dev/two", "x.dev/late"]}}),
            false,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no new finalizers"), "{err}");

    let mut cleared_timestamp = pending.clone();
    meta::metadata_mut(&mut cleared_timestamp).remove("deletionTimestamp");
    cleared_timestamp["spec"]["image"] = json!("still-writable");
    let still = api.update(&kind, cleared_timestamp).await.unwrap();
    assert_eq!(
        still["metadata"]["deletionTimestamp"],
        pending["metadata"]["deletionTimestamp"]
    );

    let remove_one = JsonPatch::from_value(&json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "x.dev/one"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]))
    .unwrap();
    let one_left = api
        .json_patch(&kind, Some("default"), "a", &remove_one, false)
        .await
        .unwrap();
    assert_eq!(meta::finalizers(&one_left), ["x.dev/two"]);
    assert!(exists(&api, &kind, "a").await);

    let mut last = one_left.clone();
    last["metadata"]["finalizers"] = json!([]);
    let gone = api.update(&kind, last).await.unwrap();
    assert!(meta::finalizers(&gone).is_empty());
    assert!(!exists(&api, &kind, "a").await);
}

#[tokio::test]
async fn the_deletion_of_a_finalized_object_is_seen_by_watchers() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, with_finalizers("a", &["x.dev/one"]))
        .await
        .unwrap();
    let from = api.current_revision().await.unwrap();
    api.hub().wait_for(from).await;
    let mut watch = api
        .hub()
        .subscribe(&Api::prefix(&kind, None), from)
        .unwrap();
    api.delete(&kind, Some("default"), "a", &DeleteOptions::default())
        .await
        .unwrap();
    api.merge_patch(
        &kind,
        Some("default"),
        "a",
        &json!({"metadata": {"finalizers": null}}),
        false,
    )
    .await
    .unwrap();
    let marked = watch.next().await.unwrap();
    assert_eq!(marked.kind, crate::watch::EventType::Modified);
    assert!(meta::deletion_timestamp(&marked.object).is_some());
    let removed = watch.next().await.unwrap();
    assert_eq!(removed.kind, crate::watch::EventType::Deleted);
}

#[tokio::test]
async fn failed_preconditions_are_conflicts_and_delete_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();
    for options in [
        DeleteOptions {
            resource_version: Some("1".into()),
            ..Default::default()
        },
        DeleteOptions {
            uid: Some("someone-else".into()),
            ..Default::default()
        },
    ] {
        let err = api
            .delete(&kind, Some("default"), "a", &options)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{err}");
    }
    assert!(exists(&api, &kind, "a").await);
    let matching = DeleteOptions {
        resource_version: meta::resource_version(&created).map(str::to_owned),
        uid: Some(meta::uid(&created).to_owned()),
        propagation_policy: None,
    };
    api.delete(&kind, Some("default"), "a", &matching)
        .await
        .unwrap();
    assert!(!exists(&api, &kind, "a").await);
}

#[tokio::test]
async fn foreground_and_orphan_deletions_add_their_finalizer() {
    let api = api().await;
    let kind = widgets(&api).await;
    api.create(&kind, with_finalizers("fg", &["x.dev/mine"]))
        .await
        .unwrap();
    api.create(&kind, widget("or")).await.unwrap();
    let fg = api
        .delete(
            &kind,
            Some("default"),
            "fg",
            &DeleteOptions {
                propagation_policy: Some(Propagation::Foreground),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(meta::finalizers(&fg), ["x.dev/mine", "foregroundDeletion"]);
    let orphan = api
        .delete(
            &kind,
            Some("default"),
            "or",
            &DeleteOptions {
                propagation_policy: Some(Propagation::Orphan),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(meta::finalizers(&orphan), ["orphan"]);
    assert!(meta::deletion_timestamp(&orphan).is_some());
    assert!(
        exists(&api, &kind, "or").await,
        "the collector removes the finalizer"
    );
}
