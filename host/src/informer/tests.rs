//! Tests of the informer: list-then-watch, relists, handlers, indexes,
//! resync and sharing.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use super::*;
use crate::object::ObjectKey;
use crate::store::MemoryBackend;

async fn api_with_small_history() -> (Api, Arc<KindInfo>) {
    let api = Api::open_with_history(Arc::new(MemoryBackend::new()), 16)
        .await
        .unwrap();
    let kind = api.kinds().by_plural("", "events").unwrap();
    (api, kind)
}

fn event(name: &str, n: i64) -> Object {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"}, "count": n})
}

/// What a handler saw: the change's kind and the object's name.
type Seen = Arc<Mutex<Vec<(&'static str, String)>>>;

fn counting_handler() -> (Seen, impl Fn(&Change) + Send + Sync + 'static) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let handler = move |change: &Change| {
        let what = match change {
            Change::Applied(_) => "applied",
            Change::Deleted(_) => "deleted",
            Change::Listed(_) => "listed",
        };
        s.lock()
            .unwrap()
            .push((what, crate::object::meta::name(change.object()).to_owned()));
    };
    (seen, handler)
}

#[tokio::test(start_paused = true)]
async fn informers_are_shared_per_kind_and_dropped_when_nobody_holds_them() {
    let (api, kind) = api_with_small_history().await;
    let informers = Informers::new(api.clone());
    let a = informers.for_kind(kind.clone());
    let b = informers.for_kind(kind.clone());
    assert!(Arc::ptr_eq(&a.inner, &b.inner), "one informer per kind");
    assert_eq!(informers.running(), 1);
    let weak = Arc::downgrade(&a.inner);
    drop(a);
    assert!(
        informers.existing("", "events").is_some(),
        "b still holds it"
    );
    drop(b);
    assert!(weak.upgrade().is_none(), "the informer was dropped");
    assert!(informers.existing("", "events").is_none());
    assert_eq!(informers.running(), 0);
    let c = informers.for_kind(kind);
    c.wait_synced().await;
    assert_eq!(informers.running(), 1, "a fresh one starts on demand");
}

#[tokio::test(start_paused = true)]
async fn the_first_list_and_late_handlers_report_listed_and_later_writes_applied() {
    let (api, kind) = api_with_small_history().await;
    api.create(&kind, event("old", 0)).await.unwrap();
    let informer = Informer::start(api.clone(), kind.clone());
    let (early, handler) = counting_handler();
    informer.add_handler(handler);
    informer.wait_synced().await;
    let (late, handler) = counting_handler();
    informer.add_handler(handler);
    api.create(&kind, event("new", 0)).await.unwrap();
    let last = api.current_revision().await.unwrap();
    assert!(
        informer
            .wait_for_revision(last, std::time::Duration::from_secs(5))
            .await
    );
    let expected = vec![("listed", "old".to_owned()), ("applied", "new".to_owned())];
    assert_eq!(*early.lock().unwrap(), expected);
    assert_eq!(*late.lock().unwrap(), expected);
}

#[tokio::test(start_paused = true)]
async fn a_resync_replays_the_cache_every_period_until_the_handler_is_removed() {
    let (api, kind) = api_with_small_history().await;
    api.create(&kind, event("a", 0)).await.unwrap();
    api.create(&kind, event("b", 0)).await.unwrap();
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;
    let (seen, handler) = counting_handler();
    let period = std::time::Duration::from_secs(30);
    let id = informer.add_handler_with_resync(handler, period);
    assert_eq!(seen.lock().unwrap().len(), 2, "the replay on registration");
    tokio::time::sleep(period - std::time::Duration::from_millis(1)).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "no resync before the period");
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert_eq!(seen.lock().unwrap().len(), 4, "one resync of both objects");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|(what, _)| *what == "listed")
    );
    informer.remove_handler(id);
    tokio::time::sleep(period * 3).await;
    assert_eq!(seen.lock().unwrap().len(), 4, "no resync once removed");
}

#[tokio::test(start_paused = true)]
async fn a_resync_timer_stops_with_its_handler_or_informer_not_at_its_next_tick() {
    let (api, kind) = api_with_small_history().await;
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let period = std::time::Duration::from_secs(600);

    let (_, handler) = counting_handler();
    let id = informer.add_handler_with_resync(handler, period);
    assert_eq!(metrics.num_alive_tasks(), before + 1, "its timer runs");
    informer.remove_handler(id);
    tokio::task::yield_now().await;
    assert_eq!(
        metrics.num_alive_tasks(),
        before,
        "removing the handler ends its timer at once"
    );
    assert!(
        informer.inner.resyncs.lock().unwrap().is_empty(),
        "and forgets it"
    );

    let (seen, handler) = counting_handler();
    informer.add_handler_with_resync(handler, period);
    assert_eq!(metrics.num_alive_tasks(), before + 1);
    drop(informer);
    tokio::task::yield_now().await;
    // The informer's own watch task went too.
    assert_eq!(metrics.num_alive_tasks(), before - 1);
    tokio::time::sleep(period * 2).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing was cached, nothing resynced"
    );
}

#[tokio::test(start_paused = true)]
async fn list_and_with_label_read_the_indexes() {
    let (api, kind) = api_with_small_history().await;
    let mut labelled = event("web-1", 0);
    labelled["metadata"]["labels"] = json!({"app": "web"});
    api.create(&kind, labelled).await.unwrap();
    api.create(&kind, event("other", 0)).await.unwrap();
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;
    assert_eq!(informer.list(Some("default")).len(), 2);
    assert!(informer.list(Some("elsewhere")).is_empty());
    let web = informer.with_label("app", "web");
    assert_eq!(web.len(), 1);
    let selector = crate::object::selector::LabelSelector::parse("app=web").unwrap();
    assert_eq!(informer.select(Some("default"), &selector).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_cut_off_by_the_hub_relists_without_gaps_or_a_storm() {
    let (api, kind) = api_with_small_history().await;
    cut_off_relists_without_gaps_or_a_storm(api, kind).await;
}

/// The same over the embedded store, whose informers read objects back
/// from the store rather than hold them (`cache`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_over_the_embedded_store_cut_off_by_the_hub_relists_without_gaps_or_a_storm() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::EmbeddedBackend::open(dir.path()).unwrap();
    let api = Api::open_with_history(Arc::new(store), 16).await.unwrap();
    let kind = api.kinds().by_plural("", "events").unwrap();
    cut_off_relists_without_gaps_or_a_storm(api, kind).await;
}

async fn cut_off_relists_without_gaps_or_a_storm(api: Api, kind: Arc<KindInfo>) {
    for i in 0..5 {
        api.create(&kind, event(&format!("still-{i}"), 0))
            .await
            .unwrap();
    }
    api.create(&kind, event("churn", 0)).await.unwrap();
    api.create(&kind, event("doomed", 0)).await.unwrap();
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;

    // A handler that stalls the informer once, long enough for the hub
    // to cut it off, and counts what it is told per object.
    let stall = Arc::new(AtomicBool::new(false));
    let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    {
        let (stall, calls) = (stall.clone(), calls.clone());
        informer.add_handler(move |change| {
            if stall.swap(false, Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            *calls
                .lock()
                .unwrap()
                .entry(crate::object::meta::name(change.object()).to_owned())
                .or_default() += 1;
        });
    }
    calls.lock().unwrap().clear();
    stall.store(true, Ordering::SeqCst);
    for n in 1..=100 {
        api.update(&kind, event("churn", n)).await.unwrap();
    }
    api.delete(&kind, Some("default"), "doomed", &Default::default())
        .await
        .unwrap();
    let last = api.current_revision().await.unwrap();
    let caught_up = informer
        .wait_for_revision(last, std::time::Duration::from_secs(10))
        .await;
    assert!(caught_up, "the informer relisted and caught up");

    assert_eq!(
        informer
            .get(&ObjectKey::new(Some("default"), "churn"))
            .unwrap()["count"],
        100
    );
    assert!(
        informer
            .get(&ObjectKey::new(Some("default"), "doomed"))
            .is_none(),
        "a delete missed while cut off is seen"
    );
    assert_eq!(informer.list(None).len(), 6);
    let calls = calls.lock().unwrap();
    assert!(
        calls.get("churn").copied().unwrap_or(0) < 100,
        "the relist coalesced the missed changes: {calls:?}"
    );
    assert_eq!(calls.get("doomed"), Some(&1), "{calls:?}");
    assert!(
        (0..5).all(|i| !calls.contains_key(&format!("still-{i}"))),
        "unchanged objects were not re-announced: {calls:?}"
    );
}

/// A listing (a late handler's replay, a resync) tells of each object its
/// metadata and conditions, without decoding the rest; a change tells the
/// whole object, and `get` has it.
#[tokio::test]
async fn listings_carry_metadata_and_conditions_and_changes_the_whole_object() {
    let (api, kind) = api_with_small_history().await;
    let mut listed = event("listed", 7);
    listed["status"] = json!({"conditions": [{"type": "Ready", "status": "False"}], "phase": "x"});
    api.create(&kind, listed).await.unwrap();
    let informer = Informer::start(api.clone(), kind.clone());
    informer.wait_synced().await;

    let seen: Arc<Mutex<Vec<(bool, Object)>>> = Arc::default();
    let s = seen.clone();
    informer.add_handler(move |change| {
        let listing = matches!(change, Change::Listed(_));
        s.lock()
            .unwrap()
            .push((listing, (**change.object()).clone()));
    });
    {
        let seen = seen.lock().unwrap();
        let (listing, object) = &seen[0];
        assert!(listing);
        assert_eq!(object["metadata"]["name"], "listed");
        assert_eq!(object["status"]["conditions"][0]["status"], "False");
        assert!(
            object.get("count").is_none() && object["status"].get("phase").is_none(),
            "{object}"
        );
    }
    let whole = informer
        .get(&ObjectKey::new(Some("default"), "listed"))
        .unwrap();
    assert_eq!(whole["count"], 7);

    let changed = api.create(&kind, event("changed", 9)).await.unwrap();
    let revision: i64 = crate::object::meta::resource_version(&changed)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        informer
            .wait_for_revision(revision, std::time::Duration::from_secs(5))
            .await
    );
    let seen = seen.lock().unwrap();
    let (listing, object) = seen.last().unwrap();
    assert!(!listing);
    assert_eq!(object["count"], 9, "a change carries the whole object");
}
