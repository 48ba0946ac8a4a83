//! The object size limit and compaction.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::api::ListOptions;
use crate::object::patch::JsonPatch;

#[tokio::test]
async fn an_oversized_write_of_any_kind_is_refused_and_writes_nothing() {
    let api = api().await.with_max_object_bytes(2048);
    assert_eq!(api.max_object_bytes(), 2048);
    let kind = widgets(&api).await;
    let big = "x".repeat(4096);

    let mut too_big = widget("big");
    too_big["spec"]["image"] = json!(big);
    let before = api.current_revision().await.unwrap();
    let err = api.create(&kind, too_big.clone()).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 2048, .. }), "{err}");
    assert_eq!((err.code(), err.reason()), (413, "RequestEntityTooLarge"));
    assert!(!exists(&api, &kind, "big").await);

    let small = api.create(&kind, widget("small")).await.unwrap();
    let before_writes = api.current_revision().await.unwrap();
    assert_eq!(before_writes, before + 1);
    let mut update = small.clone();
    update["spec"]["image"] = json!(big);
    let results = [
        api.update(&kind, update).await,
        api.merge_patch(
            &kind,
            Some("default"),
            "small",
            &json!({"spec": {"image": big}}),
            false,
        )
        .await,
        api.json_patch(
            &kind,
            Some("default"),
            "small",
            &JsonPatch::from_value(
                &json!([{"op": "replace", "path": "/spec/image", "value": big}]),
            )
            .unwrap(),
            false,
        )
        .await,
        api.apply(
            &kind,
            {
                let mut applied = widget("small");
                applied["spec"]["image"] = json!(big);
                applied
            },
            "tester",
            true,
        )
        .await,
        api.apply(&kind, too_big, "tester", false).await,
    ];
    for result in results {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    }
    assert_eq!(api.current_revision().await.unwrap(), before_writes);
    assert_eq!(
        api.get(&kind, Some("default"), "small").await.unwrap()["spec"]["image"],
        "nginx"
    );

    let gadget_kind = gadgets(&api).await;
    let mut g = api.create(&gadget_kind, gadget("g")).await.unwrap();
    let before_status = api.current_revision().await.unwrap();
    g["status"] = json!({"padding": big});
    let err = api.update_status(&gadget_kind, g).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert_eq!(api.current_revision().await.unwrap(), before_status);
}

/// The compactor's schedule on a paused clock. A paused clock cannot wait
/// for real I/O, so this runs on the memory backend whatever the suite's
/// backend is; every backend's own compaction is in the store conformance
/// suite.
#[tokio::test(start_paused = true)]
async fn after_compaction_old_continue_tokens_and_watches_are_gone() {
    let api = Api::open(Arc::new(crate::store::MemoryBackend::new()))
        .await
        .unwrap();
    let kind = widgets(&api).await;
    for i in 0..6 {
        api.create(&kind, widget(&format!("w{i}"))).await.unwrap();
    }
    let options = ListOptions {
        limit: 2,
        ..Default::default()
    };
    let first = api.list(&kind, &options).await.unwrap();
    let snapshot = first.resource_version;
    let token = first.continue_token.clone().unwrap();
    for i in 0..5 {
        api.create(&kind, widget(&format!("later{i}")))
            .await
            .unwrap();
    }
    let current = api.current_revision().await.unwrap();
    assert!(
        api.watch("/registry/", snapshot).is_ok(),
        "not compacted yet"
    );

    let compactor = crate::system::compactor::start(&api, Duration::from_secs(300), 2);
    tokio::time::sleep(Duration::from_secs(299)).await;
    assert_eq!(
        api.compacted_revision(),
        0,
        "nothing before the first interval"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.compacted_revision(), current - 2);

    let err = api
        .list(
            &kind,
            &ListOptions {
                continue_token: Some(token),
                ..options.clone()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Gone { requested, oldest } if requested == snapshot && oldest == current - 2),
        "{err}"
    );
    assert_eq!((err.code(), err.reason()), (410, "Expired"));
    let too_old = api.watch("/registry/", snapshot).err().unwrap();
    assert!(matches!(
        too_old,
        crate::watch::Error::TooOldResourceVersion { requested, oldest } if requested == snapshot && oldest == current - 2
    ));
    assert!(api.watch("/registry/", current - 2).is_ok());
    let fresh = api.list(&kind, &options).await.unwrap();
    assert_eq!(
        fresh.items.len(),
        2,
        "lists at the current revision still work"
    );

    // Nothing new to compact: the next tick changes nothing; new writes move it on.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(api.compacted_revision(), current - 2);
    api.create(&kind, widget("newest")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(api.compacted_revision(), current - 1);
    compactor.abort();
}

/// History held for a reader (a saved informer cache) is not compacted
/// while it is within the compactor's bound, and is once released or too
/// far behind. On a paused clock and the memory backend, as above.
#[tokio::test(start_paused = true)]
async fn the_compactor_keeps_history_a_reader_holds_within_its_bound() {
    let api = Api::open(Arc::new(crate::store::MemoryBackend::new()))
        .await
        .unwrap();
    let kind = widgets(&api).await;
    for i in 0..4 {
        api.create(&kind, widget(&format!("w{i}"))).await.unwrap();
    }
    let held = api.current_revision().await.unwrap();
    api.hold_history("a saved cache", held);
    for i in 0..6 {
        api.create(&kind, widget(&format!("later{i}")))
            .await
            .unwrap();
    }
    let current = api.current_revision().await.unwrap();
    // Keep 1 revision, and 1 MiB of objects (these are far fewer).
    let compactor =
        crate::system::compactor::start_keeping(&api, Duration::from_secs(60), 1, 1 << 20);
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(
        api.compacted_revision(),
        held,
        "compacted up to the hold, not past it"
    );
    assert!(
        api.watch("/registry/", held).is_ok(),
        "the held history is there"
    );

    api.release_history("a saved cache");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        api.compacted_revision(),
        current - 1,
        "released: compacted on"
    );

    // A hold more than the bound behind is compacted past: 5 MiB written
    // after it, against 4 × 1 MiB.
    let before = api.current_revision().await.unwrap();
    api.hold_history("a saved cache", before);
    let fat = "x".repeat(256 << 10);
    for i in 0..20 {
        let mut object = widget(&format!("fat{i}"));
        object["spec"]["image"] = json!(fat);
        api.create(&kind, object).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert!(
        api.compacted_revision() > before,
        "a hold {} MiB behind is not kept",
        20 / 4
    );
    compactor.abort();
}
