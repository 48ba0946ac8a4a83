//! Garbage collection through owner references, for each propagation
//! policy, across kinds, and across a restart of the collector, on the
//! object API's test fixtures (and its backend under test).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{GarbageCollector, GcConfig};
use crate::api::tests::*;
use crate::api::{Api, DeleteOptions, Error, Propagation};
use crate::object::meta;
use crate::store::MemoryBackend;

/// Start a collector of `api` with the default configuration.
fn start(api: &Api) -> JoinHandle<()> {
    GarbageCollector::new(api.clone(), GcConfig::default()).start()
}

fn policy(propagation: Propagation) -> DeleteOptions {
    DeleteOptions {
        propagation_policy: Some(propagation),
        ..Default::default()
    }
}

#[tokio::test]
async fn background_deletion_collects_dependents_recursively() {
    let api = api().await;
    let kind = widgets(&api).await;
    let gc = start(&api);
    let owner = api.create(&kind, widget("owner")).await.unwrap();
    let child = api
        .create(&kind, owned_by(widget("child"), &owner, false))
        .await
        .unwrap();
    api.create(&kind, owned_by(widget("grandchild"), &child, true))
        .await
        .unwrap();
    api.create(&kind, widget("bystander")).await.unwrap();

    let deleted = api
        .delete(&kind, Some("default"), "owner", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(meta::deletion_timestamp(&deleted).is_none(), "gone at once");
    assert!(!exists(&api, &kind, "owner").await);
    eventually(&api, "child and grandchild are collected", || async {
        !exists(&api, &kind, "child").await && !exists(&api, &kind, "grandchild").await
    })
    .await;
    assert!(exists(&api, &kind, "bystander").await);
    gc.abort();
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents_only() {
    let api = api().await;
    let kind = widgets(&api).await;
    let gc = start(&api);
    let owner = api.create(&kind, widget("owner")).await.unwrap();
    let mut blocking = owned_by(widget("blocking"), &owner, true);
    blocking["metadata"]["finalizers"] = json!(["test.dev/hold"]);
    api.create(&kind, blocking).await.unwrap();
    api.create(&kind, owned_by(widget("loose"), &owner, false))
        .await
        .unwrap();

    let pending = api
        .delete(
            &kind,
            Some("default"),
            "owner",
            &policy(Propagation::Foreground),
        )
        .await
        .unwrap();
    assert!(meta::deletion_timestamp(&pending).is_some());
    assert_eq!(meta::finalizers(&pending), ["foregroundDeletion"]);

    eventually(&api, "dependents are deleted first", || async {
        let blocking = api.get(&kind, Some("default"), "blocking").await.unwrap();
        meta::deletion_timestamp(&blocking).is_some() && !exists(&api, &kind, "loose").await
    })
    .await;
    assert!(
        exists(&api, &kind, "owner").await,
        "the owner waits for its blocking dependent"
    );

    api.merge_patch(
        &kind,
        Some("default"),
        "blocking",
        &json!({"metadata": {"finalizers": null}}),
        false,
    )
    .await
    .unwrap();
    eventually(
        &api,
        "the owner goes after its blocking dependent",
        || async { !exists(&api, &kind, "blocking").await && !exists(&api, &kind, "owner").await },
    )
    .await;
    gc.abort();
}

#[tokio::test]
async fn foreground_deletion_cascades_through_a_chain_of_blocking_dependents() {
    let api = api().await;
    let kind = widgets(&api).await;
    let gc = start(&api);
    let top = api.create(&kind, widget("top")).await.unwrap();
    let middle = api
        .create(&kind, owned_by(widget("middle"), &top, true))
        .await
        .unwrap();
    let mut bottom = owned_by(widget("bottom"), &middle, true);
    bottom["metadata"]["finalizers"] = json!(["test.dev/hold"]);
    api.create(&kind, bottom).await.unwrap();

    api.delete(
        &kind,
        Some("default"),
        "top",
        &policy(Propagation::Foreground),
    )
    .await
    .unwrap();
    eventually(&api, "the middle waits in the foreground too", || async {
        let middle = api.get(&kind, Some("default"), "middle").await.unwrap();
        meta::finalizers(&middle).contains(&"foregroundDeletion")
    })
    .await;
    assert!(exists(&api, &kind, "top").await);
    api.merge_patch(
        &kind,
        Some("default"),
        "bottom",
        &json!({"metadata": {"finalizers": null}}),
        false,
    )
    .await
    .unwrap();
    eventually(&api, "the whole chain is gone", || async {
        !exists(&api, &kind, "top").await && !exists(&api, &kind, "middle").await
    })
    .await;
    gc.abort();
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_drops_their_references() {
    let api = api().await;
    let kind = widgets(&api).await;
    let gc = start(&api);
    let owner = api.create(&kind, widget("owner")).await.unwrap();
    let other = api.create(&kind, widget("other")).await.unwrap();
    api.create(&kind, owned_by(widget("one"), &owner, true))
        .await
        .unwrap();
    api.create(
        &kind,
        owned_by(owned_by(widget("two"), &owner, false), &other, false),
    )
    .await
    .unwrap();

    api.delete(
        &kind,
        Some("default"),
        "owner",
        &policy(Propagation::Orphan),
    )
    .await
    .unwrap();
    eventually(&api, "the orphaning owner goes", || async {
        !exists(&api, &kind, "owner").await
    })
    .await;
    let one = api.get(&kind, Some("default"), "one").await.unwrap();
    assert!(meta::owner_references(&one).is_empty());
    let two = api.get(&kind, Some("default"), "two").await.unwrap();
    let owners: Vec<&str> = meta::owner_uids(&two).collect();
    assert_eq!(owners, [meta::uid(&other)]);
    gc.abort();
}

#[tokio::test]
async fn a_dependent_with_a_living_owner_loses_only_the_dead_reference() {
    let api = api().await;
    let kind = widgets(&api).await;
    let gadget_kind = gadgets(&api).await;
    let gc = start(&api);
    let widget_owner = api.create(&kind, widget("w-owner")).await.unwrap();
    let gadget_owner = api.create(&gadget_kind, gadget("g-owner")).await.unwrap();
    api.create(
        &kind,
        owned_by(
            owned_by(widget("shared"), &widget_owner, true),
            &gadget_owner,
            true,
        ),
    )
    .await
    .unwrap();
    api.delete(&kind, Some("default"), "w-owner", &DeleteOptions::default())
        .await
        .unwrap();
    eventually(&api, "the dead reference is removed", || async {
        let shared = api.get(&kind, Some("default"), "shared").await.unwrap();
        meta::owner_references(&shared).len() == 1
    })
    .await;
    let shared = api.get(&kind, Some("default"), "shared").await.unwrap();
    assert_eq!(
        meta::owner_uids(&shared).collect::<Vec<_>>(),
        [meta::uid(&gadget_owner)]
    );

    api.delete(&gadget_kind, None, "g-owner", &DeleteOptions::default())
        .await
        .unwrap();
    eventually(
        &api,
        "a cluster-scoped owner's namespaced dependent goes",
        || async { !exists(&api, &kind, "shared").await },
    )
    .await;
    gc.abort();
}

#[tokio::test]
async fn a_dependent_of_an_owner_that_never_existed_is_collected() {
    let api = api().await;
    let kind = widgets(&api).await;
    let gc = start(&api);
    let phantom = json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Widget",
        "metadata": {"name": "phantom", "uid": "00000000-0000-0000-0000-000000000000"}});
    let mut unknown_kind = phantom.clone();
    unknown_kind["kind"] = json!("NoSuchKind");
    unknown_kind["metadata"]["uid"] = json!("11111111-1111-1111-1111-111111111111");
    api.create(&kind, owned_by(widget("stray"), &phantom, false))
        .await
        .unwrap();
    api.create(&kind, owned_by(widget("stray-2"), &unknown_kind, false))
        .await
        .unwrap();
    eventually(
        &api,
        "dependents of absent owners are collected",
        || async { !exists(&api, &kind, "stray").await && !exists(&api, &kind, "stray-2").await },
    )
    .await;
    gc.abort();
}

#[tokio::test]
async fn a_restarted_collector_finishes_what_was_left_undone() {
    let api = api().await;
    let kind = widgets(&api).await;
    let first = start(&api);
    let early = api.create(&kind, widget("early")).await.unwrap();
    api.create(&kind, owned_by(widget("early-child"), &early, false))
        .await
        .unwrap();
    api.delete(&kind, Some("default"), "early", &DeleteOptions::default())
        .await
        .unwrap();
    eventually(&api, "the first collector works", || async {
        !exists(&api, &kind, "early-child").await
    })
    .await;
    first.abort();
    let _ = first.await;

    // While no collector runs, deletions leave work behind.
    let gone_owner = api.create(&kind, widget("gone-owner")).await.unwrap();
    api.create(&kind, owned_by(widget("left-behind"), &gone_owner, false))
        .await
        .unwrap();
    api.delete(
        &kind,
        Some("default"),
        "gone-owner",
        &DeleteOptions::default(),
    )
    .await
    .unwrap();
    let waiting = api.create(&kind, widget("waiting")).await.unwrap();
    api.create(&kind, owned_by(widget("waited-for"), &waiting, true))
        .await
        .unwrap();
    api.delete(
        &kind,
        Some("default"),
        "waiting",
        &policy(Propagation::Foreground),
    )
    .await
    .unwrap();
    let orphaning = api.create(&kind, widget("orphaning")).await.unwrap();
    api.create(&kind, owned_by(widget("orphan"), &orphaning, true))
        .await
        .unwrap();
    api.delete(
        &kind,
        Some("default"),
        "orphaning",
        &policy(Propagation::Orphan),
    )
    .await
    .unwrap();
    assert!(exists(&api, &kind, "left-behind").await);
    assert!(exists(&api, &kind, "waiting").await);
    assert!(exists(&api, &kind, "orphaning").await);

    let second = start(&api);
    eventually(&api, "leftover work is done after a restart", || async {
        !exists(&api, &kind, "left-behind").await
            && !exists(&api, &kind, "waiting").await
            && !exists(&api, &kind, "waited-for").await
            && !exists(&api, &kind, "orphaning").await
    })
    .await;
    let orphan = api.get(&kind, Some("default"), "orphan").await.unwrap();
    assert!(meta::owner_references(&orphan).is_empty());
    second.abort();
}

/// The sequence a client's conformance run drives before deleting owners
/// (issue #17, item 11): concurrent creates, a paginated list, replaces
/// with a current and a stale version, merge and JSON patches (failing
/// ones too), server-side apply with a conflict, a force and a field
/// removal, status patch and replace. Collection must still work after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn collection_keeps_working_after_a_busy_mixed_workload() {
    use crate::object::patch::JsonPatch;
    let api = api().await;
    let kind = widgets(&api).await;
    let gc = start(&api);

    let creates: Vec<_> = (0..120)
        .map(|i| {
            let (api, kind) = (api.clone(), kind.clone());
            tokio::spawn(async move { api.create(&kind, widget(&format!("w-{i}"))).await })
        })
        .collect();
    for create in creates {
        create.await.unwrap().unwrap();
    }
    let mut seen = 0;
    let mut options = crate::api::ListOptions::default().with_limit(50);
    loop {
        let page = api.list(&kind, &options).await.unwrap();
        seen += page.items.len();
        match page.continue_token {
            Some(token) => options = options.with_continue_token(token),
            None => break,
        }
    }
    assert_eq!(seen, 120);

    let mut current = api.get(&kind, Some("default"), "w-0").await.unwrap();
    let stale = current.clone();
    current["spec"]["color"] = json!("red");
    api.update(&kind, current).await.unwrap();
    let mut late = stale;
    late["spec"]["color"] = json!("blue");
    assert!(matches!(
        api.update(&kind, late).await,
        Err(Error::Conflict { .. })
    ));

    let ns = Some("default");
    api.merge_patch(
        &kind,
        ns,
        "w-1",
        &json!({"spec": {"color": "green"}}),
        false,
    )
    .await
    .unwrap();
    api.merge_patch(&kind, ns, "w-1", &json!({"spec": {"color": null}}), false)
        .await
        .unwrap();
    let ops = |doc: Value| JsonPatch::from_value(&doc).unwrap();
    api.json_patch(
        &kind,
        ns,
        "w-2",
        &ops(json!([{"op": "replace", "path": "/spec/image", "value": "x"}])),
        false,
    )
    .await
    .unwrap();
    let failing = ops(json!([{"op": "test", "path": "/spec/image", "value": "nope"}]));
    assert!(matches!(
        api.json_patch(&kind, ns, "w-2", &failing, false).await,
        Err(Error::PatchFailed { .. })
    ));
    let invalid = ops(json!([{"op": "replace", "path": "/spec/replicas", "value": -1}]));
    assert!(matches!(
        api.json_patch(&kind, ns, "w-2", &invalid, false).await,
        Err(Error::Invalid { .. })
    ));

    let applied = |color: &str, tags: Option<Value>| {
        let mut w = widget("applied");
        w["spec"]["color"] = json!(color);
        if let Some(tags) = tags {
            w["spec"]["tags"] = tags;
        }
        w
    };
    api.apply(&kind, applied("red", Some(json!(["a"]))), "alice", false)
        .await
        .unwrap();
    assert!(matches!(
        api.apply(&kind, applied("blue", None), "bob", false).await,
        Err(Error::ApplyConflict { .. })
    ));
    api.apply(&kind, applied("blue", None), "bob", true)
        .await
        .unwrap();
    let removed = api
        .apply(&kind, applied("blue", None), "alice", false)
        .await
        .unwrap();
    assert!(removed["spec"].get("tags").is_none(), "{removed}");

    api.merge_patch(
        &kind,
        ns,
        "w-3",
        &json!({"status": {"phase": "Running"}}),
        true,
    )
    .await
    .unwrap();
    let mut status = api.get(&kind, ns, "w-3").await.unwrap();
    status["status"] = json!({"phase": "Pending", "replicas": 1});
    api.update_status(&kind, status).await.unwrap();

    for (policy_name, propagation) in [
        ("foreground", Propagation::Foreground),
        ("orphan", Propagation::Orphan),
        ("background", Propagation::Background),
    ] {
        let owner_name = format!("{policy_name}-owner");
        let child_name = format!("{policy_name}-child");
        let owner = api.create(&kind, widget(&owner_name)).await.unwrap();
        api.create(&kind, owned_by(widget(&child_name), &owner, true))
            .await
            .unwrap();
        api.delete(&kind, ns, &owner_name, &policy(propagation))
            .await
            .unwrap();
        eventually(
            &api,
            &format!("{policy_name} deletion completes"),
            || async {
                let child_gone = !exists(&api, &kind, &child_name).await;
                let owner_gone = !exists(&api, &kind, &owner_name).await;
                match propagation {
                    Propagation::Orphan => {
                        owner_gone
                            && api
                                .get(&kind, ns, &child_name)
                                .await
                                .is_ok_and(|c| meta::owner_references(&c).is_empty())
                    }
                    _ => owner_gone && child_gone,
                }
            },
        )
        .await;
    }
    gc.abort();
}

/// The real memory store, except that deletes hang forever while `hang`
/// is set: a stand-in for a store call that never answers.
struct HangingDeletes {
    inner: crate::store::MemoryBackend,
    hang: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl crate::store::Backend for HangingDeletes {
    async fn get(&self, key: &str) -> crate::store::Result<Option<crate::store::KeyValue>> {
        self.inner.get(key).await
    }
    async fn range(
        &self,
        range: crate::store::Range,
    ) -> crate::store::Result<crate::store::RangeResult> {
        self.inner.range(range).await
    }
    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: crate::store::Condition,
    ) -> crate::store::Result<crate::store::KeyValue> {
        self.inner.put(key, value, condition).await
    }
    async fn delete(
        &self,
        key: &str,
        condition: crate::store::Condition,
    ) -> crate::store::Result<crate::store::Deleted> {
        if self.hang.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.delete(key, condition).await
    }
    async fn current_revision(&self) -> crate::store::Result<crate::store::Revision> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: crate::store::Revision) -> crate::store::Result<()> {
        self.inner.compact(revision).await
    }
    async fn watch(
        &self,
        after: crate::store::Revision,
    ) -> crate::store::Result<crate::store::WatchStream> {
        self.inner.watch(after).await
    }
}

#[tokio::test]
async fn a_stalled_collector_is_restarted_by_its_watchdog_and_says_so() {
    use std::sync::atomic::Ordering;
    let backend = Arc::new(HangingDeletes {
        inner: MemoryBackend::new(),
        hang: false.into(),
    });
    let api = Api::open(backend.clone()).await.unwrap();
    let kind = widgets(&api).await;
    let collector = GarbageCollector::new(
        api.clone(),
        GcConfig {
            stall_after: Duration::from_millis(300),
            ..Default::default()
        },
    );
    let gc = collector.start();
    let owner = api.create(&kind, widget("owner")).await.unwrap();
    api.create(&kind, owned_by(widget("child"), &owner, true))
        .await
        .unwrap();
    // The collector's delete of the child never answers...
    backend.hang.store(true, Ordering::SeqCst);
    api.delete(
        &kind,
        Some("default"),
        "owner",
        &policy(Propagation::Foreground),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while collector.health().restarts == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stall is never noticed: {:?}",
            collector.health()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...until the store answers again: the restarted collector finishes.
    backend.hang.store(false, Ordering::SeqCst);
    eventually(
        &api,
        "the foreground deletion completes after the restart",
        || async { !exists(&api, &kind, "child").await && !exists(&api, &kind, "owner").await },
    )
    .await;
    let health = collector.health();
    assert!(
        health.restarts >= 1 && health.last_progress.is_some(),
        "{health:?}"
    );
    gc.abort();
}
