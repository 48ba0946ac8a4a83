//! Tests of the list-watch primitive on its own: the list and the watch
//! meet without a gap or a duplicate, a watch cut off relists, and a list
//! that fails half-way starts over from `Init`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::{Event, PAGE, Watcher};
use crate::api::Api;
use crate::object::{KindInfo, meta};
use crate::store::{self, Backend, MemoryBackend};

fn event(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}})
}

fn events(api: &Api) -> Arc<KindInfo> {
    api.kinds().require("v1", "Event").unwrap()
}

async fn create(api: &Api, names: impl IntoIterator<Item = String>) {
    let kind = events(api);
    for name in names {
        api.create(&kind, event(&name)).await.unwrap();
    }
}

fn name_of_key(key: &str) -> String {
    key.rsplit('/').next().unwrap().to_owned()
}

/// Read one whole list, from its `Init`: the keys' names and the
/// revision, checking that every key comes once.
async fn one_list(watcher: &mut Watcher) -> (BTreeSet<String>, i64) {
    assert!(matches!(watcher.next().await, Some(Event::Init)));
    rest_of_list(watcher).await
}

/// [`one_list`] after its `Init`.
async fn rest_of_list(watcher: &mut Watcher) -> (BTreeSet<String>, i64) {
    let mut names = BTreeSet::new();
    loop {
        match watcher.next().await {
            Some(Event::InitApply(kv)) => {
                assert!(
                    names.insert(name_of_key(&kv.key)),
                    "{} listed twice",
                    kv.key
                );
            }
            Some(Event::InitDone { revision }) => return (names, revision),
            other => panic!("unexpected during a list: {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_list_and_the_watch_meet_without_a_gap_or_a_duplicate() {
    let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    let kind = events(&api);
    // More than a page, so that changes land between pages.
    let listed: Vec<String> = (0..PAGE + 10).map(|i| format!("l{i:04}")).collect();
    create(&api, listed.clone()).await;
    let at_list = api.current_revision().await.unwrap();

    let mut watcher = Watcher::new(&api, &Api::prefix(&kind, None));
    assert!(matches!(watcher.next().await, Some(Event::Init)));
    let mut names = BTreeSet::new();
    let Some(Event::InitApply(first)) = watcher.next().await else {
        panic!("a listed object")
    };
    names.insert(name_of_key(&first.key));
    // The first page has been read: these changes come after the list's
    // revision, so they must come through the watch, once.
    create(&api, (0..5).map(|i| format!("w{i}"))).await;
    api.delete(&kind, Some("default"), "l0000", &Default::default())
        .await
        .unwrap();
    let revision = loop {
        match watcher.next().await {
            Some(Event::InitApply(kv)) => {
                assert!(
                    names.insert(name_of_key(&kv.key)),
                    "{} listed twice",
                    kv.key
                );
                assert!(kv.mod_revision <= at_list, "listed at one revision");
            }
            Some(Event::InitDone { revision }) => break revision,
            other => panic!("unexpected during the list: {other:?}"),
        }
    };
    assert_eq!(revision, at_list);
    assert_eq!(
        names,
        listed.iter().cloned().collect::<BTreeSet<_>>(),
        "exactly the stored objects"
    );

    let mut applied = Vec::new();
    let mut last = revision;
    while applied.len() < 6 {
        let (event, deleted) = match watcher.next().await {
            Some(Event::Apply(e)) => (e, false),
            Some(Event::Delete(e)) => (e, true),
            other => panic!("unexpected while watching: {other:?}"),
        };
        assert!(event.revision > last, "in order, none twice");
        last = event.revision;
        applied.push((meta::name(&event.object).to_owned(), deleted));
    }
    assert_eq!(
        applied,
        [
            ("w0".to_owned(), false),
            ("w1".to_owned(), false),
            ("w2".to_owned(), false),
            ("w3".to_owned(), false),
            ("w4".to_owned(), false),
            ("l0000".to_owned(), true),
        ]
    );
    assert_eq!(
        watcher.progress(),
        Some(api.current_revision().await.unwrap())
    );
}

#[tokio::test]
async fn a_watcher_cut_off_by_the_hub_relists_from_init() {
    // The hub keeps 4 changes: a watcher that does not read falls behind.
    let api = Api::open_with_history(Arc::new(MemoryBackend::new()), 4)
        .await
        .unwrap();
    create(&api, ["before".to_owned()]).await;
    let mut watcher = Watcher::new(&api, "/registry/");
    let (names, _) = one_list(&mut watcher).await;
    assert_eq!(names, BTreeSet::from(["before".to_owned()]));
    assert!(watcher.is_watching());

    create(&api, (0..20).map(|i| format!("burst{i:02}"))).await;
    let current = api.current_revision().await.unwrap();
    api.hub().wait_for(current).await;
    // Changes still buffered come first; then the cut-off shows as a relist.
    let (names, revision) = loop {
        match watcher.next().await {
            Some(Event::Apply(_)) => {}
            Some(Event::Init) => break rest_of_list(&mut watcher).await,
            other => panic!("unexpected: {other:?}"),
        }
    };
    assert_eq!(revision, current, "the relist is at the current revision");
    assert_eq!(names.len(), 21, "the relist has everything: {names:?}");
    create(&api, ["after".to_owned()]).await;
    assert!(matches!(watcher.next().await, Some(Event::Apply(e)) if e.revision == current + 1));
}

/// The memory store, except that range reads fail while `failing` is above
/// zero (each failure counts it down).
struct FailingRanges {
    inner: MemoryBackend,
    failing: AtomicUsize,
}

#[async_trait::async_trait]
impl Backend for FailingRanges {
    async fn get(&self, key: &str) -> store::Result<Option<store::KeyValue>> {
        self.inner.get(key).await
    }
    async fn range(&self, range: store::Range) -> store::Result<store::RangeResult> {
        let armed = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if armed.is_ok() {
            return Err(store::Error::Unavailable("injected".into()));
        }
        self.inner.range(range).await
    }
    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: store::Condition,
    ) -> store::Result<store::KeyValue> {
        self.inner.put(key, value, condition).await
    }
    async fn delete(
        &self,
        key: &str,
        condition: store::Condition,
    ) -> store::Result<store::Deleted> {
        self.inner.delete(key, condition).await
    }
    async fn current_revision(&self) -> store::Result<store::Revision> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: store::Revision) -> store::Result<()> {
        self.inner.compact(revision).await
    }
    async fn watch(&self, after: store::Revision) -> store::Result<store::WatchStream> {
        self.inner.watch(after).await
    }
}

#[tokio::test]
async fn a_list_that_fails_half_way_starts_over_from_init() {
    let backend = Arc::new(FailingRanges {
        inner: MemoryBackend::new(),
        failing: AtomicUsize::new(0),
    });
    let api = Api::open(backend.clone()).await.unwrap();
    let stored: BTreeSet<String> = (0..PAGE + 1).map(|i| format!("e{i:04}")).collect();
    create(&api, stored.iter().cloned()).await;

    let mut watcher = Watcher::new(&api, "/registry/");
    assert!(matches!(watcher.next().await, Some(Event::Init)));
    for _ in 0..PAGE {
        assert!(matches!(watcher.next().await, Some(Event::InitApply(_))));
    }
    // The first page is out; the second page's read fails, and so does the
    // first read of the list that starts over.
    backend.failing.store(2, Ordering::SeqCst);
    assert!(
        matches!(watcher.next().await, Some(Event::Init)),
        "a failed list starts over"
    );
    let (names, revision) = one_list(&mut watcher).await;
    assert_eq!(names, stored, "the new list is whole");
    assert_eq!(revision, api.current_revision().await.unwrap());
    assert_eq!(
        backend.failing.load(Ordering::SeqCst),
        0,
        "both failures were retried"
    );
    assert!(watcher.is_watching());
}

/// A list that pages through a store being written and compacted holds
/// the history its pages need from the compactor: it finishes once, at
/// its first page's revision, and the hold ends with it. Past the bound
/// the compactor keeps for a reader, the list is compacted away and
/// starts over (a stalled list cannot keep history without bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_list_holds_its_revision_from_the_compactor_until_it_is_done() {
    use std::time::Duration;
    // The hub counts bytes written to within about a MiB.
    const KEEP_BYTES: u64 = 1 << 20;
    let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    let stored: BTreeSet<String> = (0..4 * PAGE).map(|i| format!("e{i:04}")).collect();
    create(&api, stored.iter().cloned()).await;
    let compactor =
        crate::system::compactor::start_keeping(&api, Duration::from_millis(10), 1, KEEP_BYTES);
    let kind = events(&api);
    let rewrite = |i: usize, bytes: usize| {
        let (api, kind) = (api.clone(), kind.clone());
        async move {
            let name = format!("e{i:04}");
            let mut object = api.get(&kind, None, &name).await.unwrap();
            object["message"] = json!("x".repeat(bytes));
            api.update(&kind, object).await.unwrap();
        }
    };
    let compacted_to = |at_least: i64| {
        let api = api.clone();
        async move {
            for _ in 0..500 {
                if api.compacted_revision() >= at_least {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("not compacted to {at_least}: {}", api.compacted_revision());
        }
    };

    let mut watcher = Watcher::new(&api, "/registry/");
    assert!(matches!(watcher.next().await, Some(Event::Init)));
    let mut names = BTreeSet::new();
    let Some(Event::InitApply(first)) = watcher.next().await else {
        panic!("the first page")
    };
    names.insert(name_of_key(&first.key));
    let listed_at = api.current_revision().await.unwrap();
    assert_eq!(api.history_held_after(), Some(listed_at - 1));
    // Past what the compactor keeps (a revision), within what it holds
    // for a reader (four times its bytes).
    for i in 0..10 {
        rewrite(i, 100).await;
    }
    compacted_to(listed_at - 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        api.compacted_revision(),
        listed_at - 1,
        "held below the list"
    );
    let (rest, revision) = rest_of_list(&mut watcher).await;
    names.extend(rest);
    assert_eq!(names, stored, "one whole list");
    assert_eq!(revision, listed_at, "at its first page's revision");
    assert_eq!(api.history_held_after(), None, "released once done");
    let current = api.current_revision().await.unwrap();
    compacted_to(current - 1).await;

    // A list that stalls while far more than the bound is written: the
    // compactor passes its hold, and the list starts over.
    watcher.relist();
    assert!(matches!(watcher.next().await, Some(Event::Init)));
    assert!(matches!(watcher.next().await, Some(Event::InitApply(_))));
    let stalled_at = api.current_revision().await.unwrap();
    for i in 0..100 {
        rewrite(i, 64 << 10).await;
    }
    compacted_to(stalled_at + 1).await;
    let restarted = loop {
        match watcher.next().await {
            Some(Event::InitApply(_)) => {}
            Some(Event::Init) => break true,
            Some(Event::InitDone { .. }) => break false,
            other => panic!("unexpected during a list: {other:?}"),
        }
    };
    assert!(restarted, "a list compacted away starts over");
    let (names, revision) = rest_of_list(&mut watcher).await;
    assert_eq!(names, stored);
    assert!(revision > stalled_at);

    // A watcher dropped mid-list lets go of its hold.
    watcher.relist();
    assert!(matches!(watcher.next().await, Some(Event::Init)));
    assert!(matches!(watcher.next().await, Some(Event::InitApply(_))));
    assert!(api.history_held_after().is_some());
    drop(watcher);
    assert_eq!(api.history_held_after(), None);
    compactor.abort();
}
