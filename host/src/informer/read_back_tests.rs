//! Tests of informers over the embedded store, whose caches keep keys,
//! index entries and revisions and read objects back from the store
//! (`cache`'s module docs): what they answer, what they hold, and what
//! happens when a cached version is compacted away before the watch tells
//! the change.

use std::time::Duration;

use serde_json::json;

use super::cache::{Listed, Source, read_terms};
use super::*;
use crate::object::ObjectKey;
use crate::store::EmbeddedBackend;

async fn embedded_api() -> (Api, Arc<KindInfo>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedBackend::open(dir.path()).unwrap();
    let api = Api::open(Arc::new(store)).await.unwrap();
    let kind = api.kinds().by_plural("", "events").unwrap();
    (api, kind, dir)
}

fn event(name: &str, app: &str, owner: &str, count: i64) -> Object {
    json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": owner, "uid": owner}]},
        "count": count})
}

pub(super) fn names(objects: &[Arc<Object>]) -> Vec<String> {
    let mut names: Vec<_> = objects
        .iter()
        .map(|o| crate::object::meta::name(o).to_owned())
        .collect();
    names.sort();
    names
}

fn revision_of(object: &Object) -> i64 {
    crate::object::meta::resource_version(object)
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until the informer's cache holds no object's content itself.
async fn wait_until_nothing_is_held(informer: &Informer) -> bool {
    for _ in 0..100 {
        if informer.inner.cache.read().unwrap().held() == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_embedded_store_the_cache_holds_keys_and_revisions_not_objects() {
    let (api, kind, _dir) = embedded_api().await;
    for i in 0..60 {
        let app = if i % 2 == 0 { "web" } else { "db" };
        api.create(
            &kind,
            event(&format!("e{i}"), app, &format!("o{}", i % 3), i),
        )
        .await
        .unwrap();
    }
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;
    assert!(informer.inner.cache.read().unwrap().reads_back());
    assert_eq!(
        informer.inner.cache.read().unwrap().held(),
        0,
        "a list keeps no object"
    );
    assert_eq!(informer.len(), 60);
    assert_eq!(informer.with_label("app", "web").len(), 30);
    assert_eq!(informer.owned_by("o1").len(), 20);
    let key = ObjectKey::new(Some("default"), "e7");
    let stored = api.get(&kind, Some("default"), "e7").await.unwrap();
    assert_eq!(*informer.get(&key).unwrap(), stored, "read back whole");
    assert_eq!(informer.list(None).len(), 60);

    // A change moves the object between index entries: the old ones are
    // read from the version the cache had.
    let moved = api
        .update(&kind, event("e7", "web", "o0", 700))
        .await
        .unwrap();
    assert!(
        informer
            .wait_for_revision(revision_of(&moved), Duration::from_secs(5))
            .await
    );
    assert_eq!(informer.with_label("app", "web").len(), 31);
    assert_eq!(informer.with_label("app", "db").len(), 29);
    assert_eq!(informer.owned_by("o1").len(), 19);
    assert_eq!(informer.owned_by("o0").len(), 21);
    assert_eq!(informer.get(&key).unwrap()["count"], 700);

    // What the watch told is held only until the store reads it back.
    drop(moved);
    assert!(
        wait_until_nothing_is_held(&informer).await,
        "recent objects are let go"
    );
    assert_eq!(
        informer.get(&key).unwrap()["count"],
        700,
        "and read back from the store"
    );

    api.delete(&kind, Some("default"), "e7", &Default::default())
        .await
        .unwrap();
    let last = api.current_revision().await.unwrap();
    assert!(
        informer
            .wait_for_revision(last, Duration::from_secs(5))
            .await
    );
    assert!(informer.get(&key).is_none());
    assert_eq!(informer.with_label("app", "web").len(), 30);
    assert_eq!(informer.owned_by("o0").len(), 20);
    assert_eq!(informer.inner.cache.read().unwrap().held(), 0);
}

/// Every object of `kind` as an informer's list hands them to a cache that
/// reads back, and the revision listed at.
async fn list_of(api: &Api, kind: &Arc<KindInfo>) -> (Vec<Listed>, i64) {
    let list = api.list(kind, &Default::default()).await.unwrap();
    let listed = list
        .items
        .iter()
        .map(|object| {
            Listed::Stored(
                serde_json::to_vec(object).unwrap().into(),
                revision_of(object),
            )
        })
        .collect();
    (listed, list.resource_version)
}

/// A cache filled from the store as an informer fills it, at the store's
/// current revision.
async fn cache_of(api: &Api, kind: &Arc<KindInfo>) -> Cache {
    let reader = api.backend().version_reader().unwrap();
    let mut cache = Cache::reading_from(Source::new(reader, kind.clone()));
    let (listed, revision) = list_of(api, kind).await;
    cache.replace_read(read_terms(listed), revision);
    assert_eq!(cache.held(), 0);
    cache
}

/// The store compacts a cached version away before the watch tells the
/// change that replaced it (the cache lags the store by a moment; a cache
/// cut off from the watch, by more): readers get the live version, and
/// the change, when told, leaves no stale index entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_compacted_away_before_the_watch_tells_its_change_leaves_no_stale_index() {
    let (api, kind, _dir) = embedded_api().await;
    api.create(&kind, event("a", "web", "o1", 1)).await.unwrap();
    api.create(&kind, event("b", "web", "o1", 1)).await.unwrap();
    let mut cache = cache_of(&api, &kind).await;
    assert_eq!(cache.with_label("app", "web").len(), 2);

    let changed = api.update(&kind, event("a", "db", "o2", 2)).await.unwrap();
    api.compact(api.current_revision().await.unwrap())
        .await
        .unwrap();
    let key = ObjectKey::new(Some("default"), "a");
    assert_eq!(
        cache.get(&key).unwrap()["count"],
        2,
        "the cached version is gone: the live one is read"
    );

    cache.upsert(Arc::new(changed.clone()), revision_of(&changed));
    assert_eq!(names(&cache.with_label("app", "web")), ["b"]);
    assert_eq!(names(&cache.with_label("app", "db")), ["a"]);
    assert_eq!(names(&cache.owned_by("o1")), ["b"]);
    assert_eq!(names(&cache.owned_by("o2")), ["a"]);
    assert_eq!(cache.held(), 1, "held until shed");
    cache.shed();
    assert_eq!(cache.held(), 0);
    assert_eq!(cache.get(&key).unwrap()["count"], 2);

    // Deleted, compacted, and only found missing by a relist: the
    // deletion is told with what is known of the object, its key.
    api.delete(&kind, Some("default"), "b", &Default::default())
        .await
        .unwrap();
    let now = api.current_revision().await.unwrap();
    api.compact(now).await.unwrap();
    let (listed, revision) = list_of(&api, &kind).await;
    let changes: Vec<Change> = cache
        .replace_read(read_terms(listed), revision)
        .into_iter()
        .filter_map(|pending| cache.change(pending, false))
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let Change::Deleted(gone) = &changes[0] else {
        panic!("a deletion: {changes:?}")
    };
    assert_eq!(gone["metadata"]["name"], "b");
    assert_eq!(gone["metadata"]["namespace"], "default");
    assert_eq!(gone["kind"], "Event");
    assert!(cache.with_label("app", "web").is_empty(), "no stale entry");
    assert!(cache.owned_by("o1").is_empty(), "no stale entry");
    assert_eq!(cache.len(), 1);
}

/// A deletion the store still has the last version of is told with that
/// version, as over any other store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_found_by_a_relist_carries_the_last_version_while_the_store_has_it() {
    let (api, kind, _dir) = embedded_api().await;
    api.create(&kind, event("a", "web", "o1", 5)).await.unwrap();
    let mut cache = cache_of(&api, &kind).await;
    api.delete(&kind, Some("default"), "a", &Default::default())
        .await
        .unwrap();
    let revision = api.current_revision().await.unwrap();
    let changes: Vec<Change> = cache
        .replace_read(Vec::new(), revision)
        .into_iter()
        .filter_map(|pending| cache.change(pending, false))
        .collect();
    let [Change::Deleted(gone)] = &changes[..] else {
        panic!("one deletion: {changes:?}")
    };
    assert_eq!(gone["count"], 5, "the whole last version");
    assert!(cache.is_empty() && cache.owned_by("o1").is_empty());
}
